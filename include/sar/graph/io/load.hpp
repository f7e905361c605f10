// One entry point for every supported input, chosen by a dataset spec string:
//   DIR with meta.json        a sar .npy dataset directory (format "sar-npy-dataset", see
//                             io/npy.hpp and docs/npy-dataset.md); meta.json of any other
//                             format is refused
//   DIR                       an Open Graph Benchmark raw node-property directory:
//                             homogeneous (raw/num-node-list), or heterogeneous
//                             (raw/num-node-dict, ogbn-mag's layout: node types and
//                             relations, io/ogb_hetero.hpp, docs/heterogeneous-data.md)
//   FILE.mtx[.gz]             a Matrix Market coordinate file (graph only)
//   FILE (anything else)      a whitespace-separated edge list, SNAP style (graph only)
//   planted[:key=value,...]   the built-in planted-partition graph; keys: nodes, classes,
//                             degree, homophily, features, noise, train, valid, seed,
//                             edge_features (per-edge columns), edge_noise, density
//                             (below 1: binary bag-of-words features, this fraction 1)
//   rmat[:key=value,...]      an R-MAT graph with random features and labels; keys: scale,
//                             edges, a, b, c, features, classes, train, valid, seed
//   planted-hetero[:k=v,...]  the planted heterogeneous graph (make_planted_heterogeneous:
//                             authors and papers, classes only relations reveal); keys:
//                             nodes (papers), authors, features, author_features, degree,
//                             authors_per_paper, homophily, noise, train, valid, reverse
//                             (1: add reverse relations, the default; 0: none), seed
// Graph-only inputs are symmetrised; they have no features, labels, targets or split. Integer values
// of a generator may be written as integral floats (nodes=1e6). Inputs read from files may
// not have a mostly empty node-id or class range unless its size is stated (dataset_sizes);
// generators refuse sizes that need more memory than is available before allocating.
#pragma once

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <utility>
#include <string>
#include <type_traits>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/edge_list.hpp"
#include "sar/graph/io/matrix_market.hpp"
#include "sar/graph/io/npy.hpp"
#include "sar/graph/io/ogb.hpp"
#include "sar/graph/io/ogb_hetero.hpp"

namespace sar {

namespace detail {
/// Parses "name:k=v,k=v" parameters; throws sar::invalid_argument on malformed pairs.
class spec_parameters {
 public:
  spec_parameters(const std::string& spec, std::string text) : spec_(spec) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find(',', start);
      if (end == std::string::npos) end = text.size();
      const std::string pair = text.substr(start, end - start);
      const std::size_t eq = pair.find('=');
      SAR_CHECK(eq != std::string::npos && eq > 0, invalid_argument, "sar::load_dataset: '",
                spec_, "': expected key=value, got '", pair, "'");
      values_[pair.substr(0, eq)] = pair.substr(eq + 1);
      start = end + 1;
    }
  }

  /// The value of `key` parsed as Number, or `fallback`; consumed keys are tracked. An
  /// integer may be written as a float with an integral value in range ("1e6").
  template <class Number>
  Number get(const std::string& key, Number fallback) {
    const auto it = values_.find(key);
    if (it == values_.end()) return fallback;
    Number value{};
    const auto& s = it->second;
    const char* const last = s.data() + s.size();
    auto [end, ec] = std::from_chars(s.data(), last, value);
    if constexpr (std::is_integral_v<Number>) {
      double real = 0;
      if ((ec != std::errc() || end != last) &&
          std::from_chars(s.data(), last, real).ptr == last && real == std::floor(real) &&
          real >= static_cast<double>(std::numeric_limits<Number>::min()) &&
          real < static_cast<double>(std::numeric_limits<Number>::max())) {
        value = static_cast<Number>(real);
        end = last;
        ec = std::errc();
      }
    }
    SAR_CHECK(ec == std::errc() && end == last, invalid_argument, "sar::load_dataset: '", spec_,
              "': ", key, "=", s, ec == std::errc::result_out_of_range ? " is out of range"
                                                                      : " is not a valid number");
    values_.erase(it);
    return value;
  }

  /// Throws if a key was given that no get() asked for (a typo would otherwise be ignored).
  void check_all_used() const {
    SAR_CHECK(values_.empty(), invalid_argument, "sar::load_dataset: '", spec_,
              "': unknown parameter '", values_.empty() ? "" : values_.begin()->first, "'");
  }

 private:
  std::string spec_;
  std::map<std::string, std::string> values_;
};

/// Throws sar::invalid_argument if `sizes` states a class count for the graph-only file `spec`.
inline void check_graph_only_sizes(const std::string& spec, const dataset_sizes& sizes) {
  SAR_CHECK(sizes.num_classes < 0, invalid_argument, "sar::load_dataset: num_classes = ",
            sizes.num_classes, " is stated, but ", spec, " is a graph-only file (no labels)");
  SAR_CHECK(has_class_ids(sizes.task.value_or(task_kind::classify)), invalid_argument,
            "sar::load_dataset: the task ", task_name(*sizes.task), " is stated, but ", spec,
            " is a graph-only file (no targets)");
}

inline graph_dataset graph_only(csr graph, std::string name) {
  graph_dataset data;
  data.name = std::move(name);
  data.graph = std::move(graph);
  data.features.resize(data.graph.num_rows, 0);
  return data;
}
}  // namespace detail

/// The node and edge counts the input `spec` declares without being read: a .npy dataset's
/// meta.json (num_edges: entries of its CSR), an OGB raw directory's num-node-list and
/// num-edge-list (edge lines, doubled: symmetrised), a heterogeneous OGB directory's
/// num-node-dict and its relations' num-edge-list (edge lines, directed); -1 for what is not
/// declared (edge lists, Matrix Market, generators, OGB without num-edge-list) or not
/// readable (the loader will name the problem). For refusing work that cannot fit before
/// loading anything.
inline std::pair<node_t, edge_t> declared_graph_size(const std::string& spec) {
  namespace fs = std::filesystem;
  const fs::path path(spec);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {-1, -1};
  try {
    if (fs::exists(path / "meta.json", ec)) {
      std::ifstream in(path / "meta.json");
      const auto meta = nlohmann::json::parse(in, nullptr, false);
      if (!meta.is_object()) return {-1, -1};
      const auto count = [&](const char* key) {
        return meta.contains(key) && meta[key].is_number_integer() ? meta[key].get<std::int64_t>()
                                                                   : std::int64_t{-1};
      };
      return {count("num_nodes"), count("num_edges")};
    }
    if (is_ogb_heterogeneous(path)) return detail::ogb::declared_size(path);
    const fs::path raw = path / "raw";
    const node_t n = detail::ogb::read_count(detail::ogb::require_csv(raw, "num-node-list"));
    const auto edge_count = detail::ogb::find_csv(raw, "num-edge-list");
    return {n, edge_count ? 2 * detail::ogb::read_count(*edge_count) : -1};
  } catch (const io_error&) {
    return {-1, -1};
  }
}

/// Loads the dataset named by `spec` (see the top of this file). `sizes` states the node and
/// class counts of a dataset read from files (see dataset_sizes: without them a mostly
/// empty node-id or class range is refused) and the task (which decides what an OGB raw
/// directory's targets are; a .npy dataset must declare the one stated); generators take
/// their sizes from the spec and make classification datasets.
/// sparse_below > 0 keeps features with at most that fraction non-zero as sparse_features
/// (an OGB raw directory's node-feat, planted's words with density <= sparse_below), never
/// whole as a dense matrix; a .npy dataset's sparse features stay sparse at a density up to
/// sparse_below and are made dense above it; other inputs stay dense.
/// Throws sar::io_error for unreadable or malformed files, sar::invalid_argument for a bad
/// spec, stated sizes or a task other than classify with a generator, or a stated num_classes
/// or task other than classify for a graph-only file.
inline graph_dataset load_dataset(const std::string& spec, const dataset_sizes& sizes = {},
                                  double sparse_below = 0) {
  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "planted" || kind == "rmat" || kind == "planted-hetero") {
    SAR_CHECK(sizes.num_nodes < 0 && sizes.num_classes < 0, invalid_argument,
              "sar::load_dataset: '", spec, "' is a generator: give its size in the spec (",
              kind == "rmat" ? "scale=S, classes=C" : "nodes=N, classes=C",
              ") instead of stating num_nodes or num_classes");
    SAR_CHECK(has_class_ids(sizes.task.value_or(task_kind::classify)), invalid_argument,
              "sar::load_dataset: '", spec, "' makes a classification dataset, but the task ",
              task_name(*sizes.task), " is stated");
  }
  if (kind == "planted") {
    detail::spec_parameters p(spec, rest);
    planted_partition_options o;
    o.num_nodes = p.get<node_t>("nodes", o.num_nodes);
    o.num_classes = p.get<std::int32_t>("classes", o.num_classes);
    o.average_degree = p.get<double>("degree", o.average_degree);
    o.homophily = p.get<double>("homophily", o.homophily);
    o.feature_dim = p.get<std::int32_t>("features", o.feature_dim);
    o.feature_noise = p.get<double>("noise", o.feature_noise);
    o.feature_density = p.get<double>("density", o.feature_density);
    o.sparse_features = o.feature_density <= sparse_below;
    o.train_fraction = p.get<double>("train", o.train_fraction);
    o.valid_fraction = p.get<double>("valid", o.valid_fraction);
    o.edge_feature_dim = p.get<std::int32_t>("edge_features", o.edge_feature_dim);
    o.edge_noise = p.get<double>("edge_noise", o.edge_noise);
    o.seed = p.get<std::uint64_t>("seed", o.seed);
    p.check_all_used();
    return make_planted_partition(o);
  }
  if (kind == "planted-hetero") {
    detail::spec_parameters p(spec, rest);
    planted_heterogeneous_options o;
    o.num_papers = p.get<node_t>("nodes", o.num_papers);
    o.num_authors = p.get<node_t>("authors", o.num_authors);
    o.feature_dim = p.get<std::int32_t>("features", o.feature_dim);
    o.author_feature_dim = p.get<std::int32_t>("author_features", o.author_feature_dim);
    o.degree = p.get<std::int32_t>("degree", o.degree);
    o.authors_per_paper = p.get<std::int32_t>("authors_per_paper", o.authors_per_paper);
    o.homophily = p.get<double>("homophily", o.homophily);
    o.feature_noise = p.get<double>("noise", o.feature_noise);
    o.train_fraction = p.get<double>("train", o.train_fraction);
    o.valid_fraction = p.get<double>("valid", o.valid_fraction);
    const auto reverse = p.get<int>("reverse", 1);
    SAR_CHECK(reverse == 0 || reverse == 1, invalid_argument, "sar::load_dataset: '", spec,
              "': reverse=", reverse, " (0 or 1)");
    o.add_reverse = reverse == 1;
    o.seed = p.get<std::uint64_t>("seed", o.seed);
    p.check_all_used();
    return make_planted_heterogeneous(o);
  }
  if (kind == "rmat") {
    detail::spec_parameters p(spec, rest);
    rmat_options o;
    o.scale = p.get<int>("scale", o.scale);
    // 16 edges per node by default (make_rmat refuses a scale outside [1, 40]).
    o.num_edges =
        p.get<edge_t>("edges", o.scale >= 1 && o.scale <= 40 ? edge_t{16} << o.scale : 0);
    o.a = p.get<double>("a", o.a);
    o.b = p.get<double>("b", o.b);
    o.c = p.get<double>("c", o.c);
    o.seed = p.get<std::uint64_t>("seed", o.seed);
    const auto features = p.get<std::int32_t>("features", 16);
    const auto classes = p.get<std::int32_t>("classes", 4);
    const auto train = p.get<double>("train", 0.3);
    const auto valid = p.get<double>("valid", 0.2);
    p.check_all_used();
    return make_rmat_dataset(o, features, classes, train, valid);
  }

  const std::filesystem::path path(spec);
  SAR_CHECK(std::filesystem::exists(path), io_error, "sar::load_dataset: '", spec,
            "' is neither an existing file or directory nor a generator (planted, rmat)");
  if (std::filesystem::is_directory(path)) {
    if (std::filesystem::exists(path / "meta.json")) {
      graph_dataset data = read_npy_dataset(path, {.sizes = sizes});
      data.densify_above(sparse_below, "sar::load_dataset", spec);
      return data;
    }
    return read_ogb_raw(path, {.sizes = sizes, .sparse_below = sparse_below});
  }
  detail::check_graph_only_sizes(spec, sizes);
  const std::string name = path.filename().string();
  const bool mtx = name.ends_with(".mtx") || name.ends_with(".mtx.gz");
  edge_list edges = mtx ? read_matrix_market(path, sizes.num_nodes)
                        : read_edge_list(path, sizes.num_nodes);
  csr graph;
  allocate_checked("sar::load_dataset",
                   message("the graph of ", edges.num_nodes, " nodes and ", edges.size(),
                           " edges in ", spec),
                   build_csr_bytes(edges, {.symmetrise = true}),
                   [&] { graph = build_csr(edges, {.symmetrise = true}); });
  return detail::graph_only(std::move(graph), path.stem().string());
}

}  // namespace sar
