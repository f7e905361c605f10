// Reading an Open Graph Benchmark heterogeneous node-property dataset (ogbn-mag's raw layout,
// OGB's read_heterograph_raw) as one typed graph (sar/graph/schema.hpp). read_ogb_raw (and so
// load_dataset) reads it for a directory with raw/num-node-dict.csv.gz; the layout is at
// read_heterogeneous below and in docs/heterogeneous-data.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/io/ogb_files.hpp"
#include "sar/graph/io/text.hpp"
#include "sar/graph/schema.hpp"

namespace sar::detail::ogb {

/// The comma-separated fields of `line`, each trimmed (one empty field for an empty line).
inline std::vector<std::string_view> comma_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  for (;;) {
    const std::size_t comma = line.find(',');
    fields.push_back(io::trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return fields;
    line.remove_prefix(comma + 1);
  }
}

/// The node types of `file` (raw/num-node-dict): line 1 their names, comma-separated, line 2
/// their counts, in the same order (blank lines after them are ignored); feature_dim 0.
/// Throws sar::io_error naming the file and line of an empty or repeated name, a name holding
/// "___" (which separates the parts of a relation's directory name), a count that is not a
/// non-negative integer, more or fewer counts than names, a missing line, a line of another
/// graph, or counts whose sum overflows.
inline std::vector<node_type> read_node_types(const std::filesystem::path& file) {
  io::line_reader reader(file, std::string(function));
  std::vector<node_type> types;
  node_t total = 0;
  std::string_view line;
  while (reader.next_line(line)) {
    const std::int64_t number = reader.line_number();
    const std::string_view content = io::trim(line);
    if (number == 1) {
      for (const std::string_view name : comma_fields(content)) {
        if (name.empty()) io::throw_parse_error(function, file, 1, "empty node type name", content);
        if (name.find("___") != std::string_view::npos)
          io::throw_parse_error(function, file, 1,
                                "a node type name may not hold \"___\" (it separates the parts "
                                "of a relation's directory name)",
                                name);
        for (const node_type& other : types)
          if (other.name == name)
            io::throw_parse_error(function, file, 1, "node type named twice", name);
        types.push_back({.name = std::string(name)});
      }
    } else if (number == 2) {
      const std::vector<std::string_view> counts = comma_fields(content);
      if (counts.size() != types.size())
        io::throw_parse_error(function, file, 2,
                              message("expected ", types.size(),
                                      " comma-separated counts (one per node type of line 1), "
                                      "got ",
                                      counts.size()),
                              content);
      for (std::size_t t = 0; t < types.size(); ++t) {
        std::int64_t count = 0;
        if (!io::parse_integer(counts[t], count) || count < 0)
          io::throw_parse_error(function, file, 2,
                                message("the count of node type '", types[t].name,
                                        "' is not a non-negative integer"),
                                counts[t]);
        if (count > std::numeric_limits<node_t>::max() - total)
          io::throw_parse_error(function, file, 2, "the node counts' sum overflows", counts[t]);
        types[t].count = count;
        total += count;
      }
    } else if (!content.empty()) {
      io::throw_parse_error(function, file, number,
                            "expected two lines, the node types and their counts (one graph), "
                            "found another",
                            content);
    }
  }
  if (reader.line_number() < 2)
    io::throw_parse_error(function, file, reader.line_number(),
                          "file ends before its second line (expected a line of node type names "
                          "and a line of their counts)",
                          "");
  return types;
}

/// The node types of `schema` as a list: "author, paper".
inline std::string type_list(const graph_schema& schema) {
  std::string list;
  for (const node_type& t : schema.node_types) list += (list.empty() ? "" : ", ") + t.name;
  return list;
}

/// The index of the node type `name` of `schema`, -1 if none.
inline std::int32_t find_type(const graph_schema& schema, std::string_view name) {
  for (std::int32_t t = 0; t < schema.num_node_types(); ++t)
    if (schema.node_types[static_cast<std::size_t>(t)].name == name) return t;
  return -1;
}

/// Throws sar::io_error naming the directory unless every subdirectory of `parent` (if it
/// exists) is named after a node type of `schema`, which `type_file` lists.
inline void check_type_directories(const std::filesystem::path& parent, const graph_schema& schema,
                                   const std::filesystem::path& type_file) {
  if (!std::filesystem::is_directory(parent)) return;
  for (const auto& entry : std::filesystem::directory_iterator(parent))
    SAR_CHECK(!entry.is_directory() || find_type(schema, entry.path().filename().string()) >= 0,
              io_error, function, ": ", entry.path().string(), ": '",
              entry.path().filename().string(), "' is not a node type of ", type_file.string(),
              " (", type_list(schema), ")");
}

/// A relation and its directory raw/relations/<source>___<name>___<destination>.
struct relation_directory {
  relation rel;
  std::filesystem::path dir;
};

/// The relations of `raw`/relations, one per subdirectory "<source>___<name>___<destination>"
/// joining node types of `schema` (listed by `type_file`), in OGB's order: sorted by (source,
/// name, destination). If raw/triplet-type-list.csv[.gz] exists, it must list exactly these
/// ("source,name,destination" per line). Throws sar::io_error naming the directory for a
/// missing or empty relations/ directory, a name of other than three parts or naming an
/// unknown node type, a relation the triplet list omits; naming the file and line for a
/// triplet line that is malformed, repeated or names no relation directory.
inline std::vector<relation_directory> find_relations(const std::filesystem::path& raw,
                                                      const graph_schema& schema,
                                                      const std::filesystem::path& type_file) {
  namespace fs = std::filesystem;
  const fs::path root = raw / "relations";
  SAR_CHECK(fs::is_directory(root), io_error, function, ": missing directory ", root.string(),
            " (one subdirectory <source>___<relation>___<destination> per relation)");
  std::vector<relation_directory> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    const std::size_t first = name.find("___"), last = name.rfind("___");
    SAR_CHECK(first != std::string::npos && first != last &&
                  name.substr(first + 3, last - first - 3).find("___") == std::string::npos,
              io_error, function, ": ", entry.path().string(),
              ": a relation directory is named <source>___<relation>___<destination>");
    const std::string parts[3] = {name.substr(0, first), name.substr(first + 3, last - first - 3),
                                  name.substr(last + 3)};
    const std::int32_t ends[2] = {find_type(schema, parts[0]), find_type(schema, parts[2])};
    for (const int end : {0, 1})
      SAR_CHECK(ends[end] >= 0, io_error, function, ": ", entry.path().string(),
                ": the relation's ", end == 0 ? "source" : "destination", " type '",
                parts[2 * end], "' is not a node type of ", type_file.string(), " (",
                type_list(schema), ")");
    SAR_CHECK(!parts[1].empty(), io_error, function, ": ", entry.path().string(),
              ": the relation's name is empty");
    found.push_back({{ends[0], parts[1], ends[1]}, entry.path()});
  }
  SAR_CHECK(!found.empty(), io_error, function, ": ", root.string(),
            " holds no relation directory (<source>___<relation>___<destination>)");
  const auto names = [&](const relation_directory& r) {
    return std::tie(schema.node_types[static_cast<std::size_t>(r.rel.source_type)].name,
                    r.rel.name,
                    schema.node_types[static_cast<std::size_t>(r.rel.destination_type)].name);
  };
  std::sort(found.begin(), found.end(), [&](const relation_directory& a, const relation_directory& b) {
    return names(a) < names(b);
  });

  const auto triplets = find_csv(raw, "triplet-type-list");
  if (!triplets) return found;
  std::map<std::string, bool> listed;  // directory name -> listed yet
  for (const relation_directory& r : found) listed[r.dir.filename().string()] = false;
  io::line_reader reader(*triplets, std::string(function));
  std::string_view line;
  while (reader.next_line(line)) {
    const std::vector<std::string_view> fields = comma_fields(line);
    if (fields.size() != 3 || fields[0].empty() || fields[1].empty() || fields[2].empty())
      io::throw_parse_error(function, *triplets, reader.line_number(),
                            "expected source,relation,destination", io::trim(line));
    const std::string name = message(fields[0], "___", fields[1], "___", fields[2]);
    const auto it = listed.find(name);
    if (it == listed.end())
      io::throw_parse_error(function, *triplets, reader.line_number(),
                            message("no relation directory ", (root / name).string()),
                            io::trim(line));
    if (it->second)
      io::throw_parse_error(function, *triplets, reader.line_number(), "relation listed twice",
                            io::trim(line));
    it->second = true;
  }
  for (const auto& [name, seen] : listed)
    SAR_CHECK(seen, io_error, function, ": ", (root / name).string(), " is not listed in ",
              triplets->string());
  return found;
}

/// What a reader of a share of a heterogeneous OGB raw directory read (the counterpart of
/// ogb_raw_share): read_heterogeneous_share the schema and the share's edges,
/// read_heterogeneous_rows the per-node files' rows [first, last).
struct heterogeneous_share {
  /// name, schema (relations; node types, each feature_dim the width of its node-feat, 0
  /// without, once the rows are read), task classify, num_classes (stated, else -1), and the
  /// features, labels (empty if no type has node-label) and split (empty without one) of the
  /// rows [first, last); graph empty.
  graph_dataset rows;
  node_t first = 0;  ///< the first row (dataset id) read
  node_t last = 0;   ///< one past the last
  edge_list edges;   ///< the share's edges in dataset ids, relation after relation
  std::vector<std::int32_t> edge_relations;   ///< the relation of each
  std::vector<relation_directory> relations;  ///< their directories, in schema order
  /// Per relation: its edge file, its line count, the edges this share read, num-edge-list's
  /// count (-1 without that file) and that file.
  std::vector<std::filesystem::path> edge_files, count_files;
  /// \var edge_lines
  /// See edge_files.
  /// \var edges_read
  /// See edge_files.
  /// \var expected_edges
  /// See edge_files.
  std::vector<std::int64_t> edge_lines, edges_read, expected_edges;
  /// Per relation: the indices in its edge file of the edges this share read.
  std::vector<std::vector<io::row_range>> edge_ranges;
  std::vector<bool> vouched;  ///< per type: a node-feat or node-label file vouches for its count
  std::vector<label_maximum> largest;  ///< per type: its largest label among the rows read
  bool labelled = false;               ///< some type has node-label
  std::filesystem::path type_file;     ///< raw/num-node-dict
};

/// The schema of the heterogeneous directory `dir` and the edges `share.edges` keeps of every
/// relation's edge file (read_heterogeneous's layout and checks, without those a share cannot
/// make alone: check_heterogeneous_share), for the rows [share.first, share.last). Not
/// collective.
inline heterogeneous_share read_heterogeneous_share(const std::filesystem::path& dir,
                                                    const ogb_options& options,
                                                    const ogb_share& share) {
  namespace fs = std::filesystem;
  const fs::path raw = dir / "raw";
  SAR_CHECK(options.deduplicate && options.self_loops == self_loop_policy::keep,
            invalid_argument, function, ": ", dir.string(), " is a heterogeneous dataset, whose "
            "relations are built as written (a repeat within a relation merged, self-loops "
            "kept): ogb_options::deduplicate false and self_loops other than keep do not apply");
  SAR_CHECK(!find_csv(raw, "num-node-list"), io_error, function, ": ", raw.string(),
            " holds both num-node-list (a homogeneous graph) and num-node-dict (a heterogeneous "
            "one)");
  const dataset_sizes& stated = options.sizes;
  SAR_CHECK(has_class_ids(stated.task.value_or(task_kind::classify)), io_error, function,
            ": the task ", task_name(stated.task.value_or(task_kind::classify)), " is stated, but ",
            dir.string(), " is a heterogeneous dataset, which sar reads for node classification "
            "only (raw/node-label/<type>)");

  heterogeneous_share out;
  graph_dataset& data = out.rows;
  data.name = dataset_name(dir);
  data.num_classes = stated.num_classes;
  graph_schema& schema = data.schema;
  out.type_file = require_csv(raw, "num-node-dict");
  const fs::path& type_file = out.type_file;
  schema.node_types = read_node_types(type_file);
  const node_t n = schema.type_begin(schema.num_node_types());
  SAR_CHECK(stated.num_nodes < 0 || n == stated.num_nodes, io_error, function, ": ",
            type_file.string(), " declares ", n, " nodes in all, but num_nodes is ",
            stated.num_nodes);
  out.first = std::clamp<node_t>(share.first, 0, n);
  out.last = share.last < 0 ? n : std::clamp<node_t>(share.last, out.first, n);
  out.relations = find_relations(raw, schema, type_file);
  for (const relation_directory& r : out.relations) schema.relations.push_back(r.rel);
  const std::int32_t types = schema.num_node_types();
  const auto type = [&](std::int32_t t) -> node_type& {
    return schema.node_types[static_cast<std::size_t>(t)];
  };

  // Per-type files: before anything of a type's size is allocated, each must be able to hold
  // its lines; a type without any has only num-node-dict to vouch for its count.
  out.vouched.assign(static_cast<std::size_t>(types), false);
  for (const char* kind : {"node-feat", "node-label"}) {
    check_type_directories(raw / kind, schema, type_file);
    for (std::int32_t t = 0; t < types; ++t)
      if (const auto file = find_csv(raw / kind / type(t).name, kind)) {
        check_line_capacity(*file, type(t).count, type_file, message("'", type(t).name, "' nodes"));
        out.vouched[static_cast<std::size_t>(t)] = true;
      }
  }

  // Edges in dataset ids, relation by relation (edge k of a relation: line k + 1 of its file).
  edge_list& edges = out.edges;
  edges.num_nodes = n;
  for (std::int32_t r = 0; r < schema.num_relations(); ++r) {
    const relation& rel = schema.relations[static_cast<std::size_t>(r)];
    const fs::path& rel_dir = out.relations[static_cast<std::size_t>(r)].dir;
    out.edge_files.push_back(require_csv(rel_dir, "edge"));
    out.expected_edges.push_back(-1);
    out.count_files.emplace_back();
    if (const auto found = find_csv(rel_dir, "num-edge-list")) {
      out.expected_edges.back() = read_count(*found);
      out.count_files.back() = *found;
    }
    const std::size_t before = edges.size();
    const node_t bounds[2] = {type(rel.source_type).count, type(rel.destination_type).count};
    out.edge_lines.push_back(read_edge_file(out.edge_files.back(), bounds, share.edges,
                                            out.expected_edges.back(), out.count_files.back(),
                                            edges.src, edges.dst, out.edge_ranges.emplace_back()));
    out.edges_read.push_back(static_cast<std::int64_t>(edges.size() - before));
    for (std::size_t k = before; k < edges.size(); ++k) {
      edges.src[k] += schema.type_begin(rel.source_type);
      edges.dst[k] += schema.type_begin(rel.destination_type);
    }
    out.edge_relations.resize(edges.size(), r);
  }
  return out;
}

/// The checks of read_heterogeneous over the whole directory that the shares' edges decide,
/// totalled by `totals` over the readers (whole_input_totals: one reader): each relation's
/// edge count against its num-edge-list, and, when a type has no per-node file and num_nodes
/// is not stated, the node range rule (the shares' edges and the rows [first, last) of the
/// types with per-node files). Throws what read_heterogeneous throws for them; collective
/// where `totals` is.
template <class Totals>
void check_heterogeneous_share(const heterogeneous_share& read, const ogb_options& options,
                               Totals& totals) {
  for (std::size_t r = 0; r < read.edge_files.size(); ++r)
    check_edge_count(read.edge_files[r], read.edge_lines[r], totals.sum(read.edges_read[r]),
                     read.expected_edges[r], read.count_files[r]);
  // Before anything of the node count's size is allocated: a type without per-node files has
  // only num-node-dict to vouch for its count, so refuse a node range that neither edges nor
  // per-node lines mostly use.
  if (options.sizes.num_nodes >= 0 ||
      std::find(read.vouched.begin(), read.vouched.end(), false) == read.vouched.end())
    return;
  const graph_schema& schema = read.rows.schema;
  std::vector<node_t> listed;  // this share's rows of the types with per-node files
  std::string unvouched;
  for (std::int32_t t = 0; t < schema.num_node_types(); ++t) {
    if (read.vouched[static_cast<std::size_t>(t)])
      for (node_t i = std::max(read.first, schema.type_begin(t));
           i < std::min(read.last, schema.type_begin(t + 1)); ++i)
        listed.push_back(i);
    else
      unvouched += (unvouched.empty() ? "" : ", ") + schema.node_types[static_cast<std::size_t>(t)].name;
  }
  const node_t n = schema.type_begin(schema.num_node_types());
  check_mostly_used<node_t>(
      totals, n, {read.edges.src, read.edges.dst, listed},
      message(function, ": ", read.type_file.string(), " declares ", n, " nodes (and the types ",
              unvouched, " have no node-feat or node-label file with a line per node)"),
      "appear in an edge or have such a line", "num_nodes", "--num-nodes");
}

/// Reads the rows [read.first, read.last) of the per-node files of the heterogeneous directory
/// `dir` into read.rows: features (the widest type's width; a type's rows hold its features
/// in their first feature_dim columns, zeros after), labels (-1 for unlabelled types) and the
/// split, as read_heterogeneous describes them; the class count is left to
/// finish_heterogeneous_rows. Not collective. Throws as read_heterogeneous does for them.
inline void read_heterogeneous_rows(heterogeneous_share& read, const std::filesystem::path& dir,
                                    const ogb_options& options) {
  namespace fs = std::filesystem;
  const fs::path raw = dir / "raw";
  graph_dataset& data = read.rows;
  graph_schema& schema = data.schema;
  const fs::path& type_file = read.type_file;
  const std::int32_t types = schema.num_node_types();
  const node_t first = read.first, rows = read.last - read.first;
  // Per type: its schema entry, name in errors, per-type file `kind`, rows [lo, hi) of the
  // type within the share, and where they start among the share's rows.
  const auto type = [&](std::int32_t t) -> node_type& {
    return schema.node_types[static_cast<std::size_t>(t)];
  };
  const auto unit = [&](std::int32_t t) { return message("'", type(t).name, "' nodes"); };
  const auto type_file_of = [&](const char* kind, std::int32_t t) {
    return find_csv(raw / kind / type(t).name, kind);
  };
  const auto lo = [&](std::int32_t t) {
    return std::clamp<node_t>(first - schema.type_begin(t), 0, type(t).count);
  };
  const auto hi = [&](std::int32_t t) {
    return std::clamp<node_t>(read.last - schema.type_begin(t), lo(t), type(t).count);
  };
  const auto rows_of = [&](auto& per_row, std::int32_t t) {  // empty if the share has none
    if (hi(t) == lo(t)) return std::span(per_row).first(0);
    return std::span(per_row).subspan(static_cast<std::size_t>(schema.type_begin(t) + lo(t) - first),
                                      static_cast<std::size_t>(hi(t) - lo(t)));
  };
  // allocate_checked for `what` of `count` `unit`s ("the labels of the 9 nodes in <file>").
  const auto allocate_for = [&](node_t count, std::string unit) {
    return [&type_file, count, unit](const std::string& what, double bytes, auto&& allocate) {
      allocate_checked(function, message(what, " of the ", count, " ", unit, " in ",
                                         type_file.string()), bytes, allocate);
    };
  };

  // Features: each type's rows, then its leading columns of the one feature matrix.
  std::vector<matrixf> type_features(static_cast<std::size_t>(types));
  for (std::int32_t t = 0; t < types; ++t)
    if (const auto file = type_file_of("node-feat", t)) {
      matrixf& block = type_features[static_cast<std::size_t>(t)];
      const std::string rows_unit = unit(t);
      read_rows(*file, type(t).count, lo(t), hi(t), type_file, "feature", block,
                allocate_for(hi(t) - lo(t), rows_unit), rows_unit.c_str());
      type(t).feature_dim = block.cols();
    }
  std::int64_t width = 0;
  for (const node_type& t : schema.node_types) width = std::max(width, t.feature_dim);
  allocate_for(rows, message("nodes (", width, " columns: the widest type's)"))(
      "the features", 4.0 * static_cast<double>(rows) * static_cast<double>(width),
      [&] { data.features.setZero(rows, width); });
  for (std::int32_t t = 0; t < types; ++t) {
    matrixf& block = type_features[static_cast<std::size_t>(t)];
    if (block.size() > 0)
      data.features.block(schema.type_begin(t) + lo(t) - first, 0, block.rows(), block.cols()) =
          block;
    block = matrixf();
  }

  // Labels: -1 for the nodes of types without node-label.
  read.largest.assign(static_cast<std::size_t>(types), {});
  for (std::int32_t t = 0; t < types; ++t)
    if (const auto file = type_file_of("node-label", t)) {
      if (!read.labelled)
        allocate_for(rows, "nodes")("the labels", 4.0 * static_cast<double>(rows),
                                    [&] { data.labels.assign(static_cast<std::size_t>(rows), -1); });
      read.labelled = true;
      read.largest[static_cast<std::size_t>(t)] =
          read_labels(*file, type(t).count, lo(t), rows_of(data.labels, t),
                      options.sizes.num_classes, type_file, unit(t));
    }
  SAR_CHECK(read.labelled || options.sizes.num_classes < 0, io_error, function,
            ": num_classes = ", options.sizes.num_classes, " is stated, but ", dir.string(),
            " has no labels (raw/node-label/<type>/node-label.csv.gz)");

  // Split: split/<name>/<type>/, local ids.
  if (const fs::path split_dir = split_directory(dir, options.split_name); !split_dir.empty()) {
    check_type_directories(split_dir, schema, type_file);
    allocate_for(rows, "nodes")("the split", static_cast<double>(rows), [&] {
      data.split.assign(static_cast<std::size_t>(rows), node_split::none);
    });
    bool any = false;
    for (std::int32_t t = 0; t < types; ++t)
      if (const fs::path type_dir = split_dir / type(t).name; fs::is_directory(type_dir)) {
        read_splits(type_dir, type(t).count, lo(t), rows_of(data.split, t));
        any = true;
      }
    SAR_CHECK(any, io_error, function, ": ", split_dir.string(), " holds the split of no node "
              "type (expected ", (split_dir / "<type>").string(), "/{train,valid,test}.csv.gz)");
  }
}

/// The class count of read_heterogeneous over the whole directory, of whose shares `totals`
/// totals the readers' labels: read.rows.num_classes stated, else the largest label + 1 with
/// the mostly-empty range rule (0 without labels). Throws as read_heterogeneous does;
/// collective where `totals` is.
template <class Totals>
void finish_heterogeneous_rows(heterogeneous_share& read, const std::filesystem::path& dir,
                               Totals& totals) {
  graph_dataset& data = read.rows;
  if (read.labelled && data.num_classes < 0) {
    label_maximum largest;
    std::filesystem::path largest_file;
    for (std::int32_t t = 0; t < data.schema.num_node_types(); ++t) {
      const auto file = find_csv(dir / "raw" / "node-label" /
                                     data.schema.node_types[static_cast<std::size_t>(t)].name,
                                 "node-label");
      if (!file) continue;
      const label_maximum& mine = read.largest[static_cast<std::size_t>(t)];
      const auto [label, line] = totals.max_with_line(mine.label, mine.line);
      if (label > largest.label) {
        largest = {static_cast<std::int32_t>(label), line};
        largest_file = *file;
      }
    }
    count_classes(data, largest, largest_file, totals);
  }
  data.num_classes = std::max(data.num_classes, 0);
}

/// The edge features of the edges `read` holds: one row per edge of read.edges (relation after
/// relation, each relation's rows those of read.edge_ranges), or nullopt if the relations have
/// none. relation_edges[r] is relation r's edge count in its whole file (over all readers).
/// Throws sar::io_error naming the files for edge features in some relations only or of
/// differing widths, and as read_rows does. Not collective: every reader of a share decides
/// alike.
inline std::optional<matrixf> read_relation_edge_rows(const heterogeneous_share& read,
                                                      std::span<const std::int64_t> relation_edges,
                                                      const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<matrixf> edge_rows;  // per relation
  std::optional<fs::path> with_edge_features, without_edge_features;  // a relation of each
  Eigen::Index edge_width = 0;     // the edge features' width, in `width_file`
  fs::path width_file;
  for (std::size_t r = 0; r < read.relations.size(); ++r) {
    const fs::path& rel_dir = read.relations[r].dir;
    const auto feature_file = find_csv(rel_dir, "edge-feat");
    (feature_file ? with_edge_features : without_edge_features) = feature_file.value_or(rel_dir);
    SAR_CHECK(!with_edge_features || !without_edge_features, io_error, function, ": ",
              with_edge_features->string(), " gives edge features, but ",
              without_edge_features->string(), " has no edge-feat.csv.gz: every relation has "
              "edge features, or none");
    if (!feature_file) continue;
    edge_rows.push_back(read_edge_rows(*feature_file, relation_edges[r], read.edge_ranges[r],
                                       read.edge_files[r]));
    if (relation_edges[r] == 0) continue;  // no row to tell the width
    if (width_file.empty()) {
      edge_width = edge_rows.back().cols();
      width_file = *feature_file;
    }
    SAR_CHECK(edge_rows.back().cols() == edge_width, io_error, function, ": ",
              feature_file->string(), " has ", edge_rows.back().cols(), " edge features per "
              "edge, ", width_file.string(), " ", edge_width, ": every relation's edge features "
              "are equally wide");
  }
  if (!with_edge_features) return std::nullopt;
  const auto m = static_cast<Eigen::Index>(read.edges.size());
  matrixf per_edge;
  allocate_checked(function, message("the ", edge_width, " edge features of the ", m,
                                     " edges of ", dir.string()),
                   4.0 * static_cast<double>(m) * static_cast<double>(edge_width),
                   [&] { per_edge.resize(m, edge_width); });
  Eigen::Index row = 0;
  for (matrixf& rows : edge_rows) {
    if (rows.rows() > 0) per_edge.middleRows(row, rows.rows()) = rows;
    row += rows.rows();
    rows = matrixf();
  }
  return per_edge;
}

/// read_ogb_raw of a heterogeneous directory `dir` (OGB's raw layout of ogbn-mag):
///   raw/num-node-dict.csv.gz   the node types' names, comma-separated, then their counts
///                              (required): type t's nodes are the dataset ids
///                              [type_begin(t), type_begin(t + 1)), types in this order
///   raw/relations/<source>___<relation>___<destination>/   one directory per relation
///                              (at least one), relations in the order of their sorted
///                              (source, relation, destination) names, as OGB orders them:
///     edge.csv.gz              "src,dst" per line, ids local to their types (required)
///     num-edge-list.csv.gz     edge.csv.gz's line count (checked if present)
///     edge-feat.csv.gz         one row of equally many numbers per edge line (every relation
///                              or none; equally wide in every relation)
///     edge_reltype.csv.gz      ignored (the directory names the relation)
///   raw/triplet-type-list.csv.gz   "source,relation,destination" per relation (checked to
///                              list exactly the relation directories if present)
///   raw/node-feat/<type>/node-feat.csv.gz   the type's features, one row per node (optional
///                              per type)
///   raw/node-label/<type>/node-label.csv.gz the type's labels, one per node, as in the
///                              homogeneous layout (optional per type)
///   split/<name>/<type>/{train,valid,test}.csv.gz   local ids of the type (optional per type;
///                              split/<name> chosen as in the homogeneous layout)
/// Other files (nodetype-has-label, node_year, ...) are ignored; a subdirectory of node-feat,
/// node-label or split/<name> that names no node type is an error.
/// Ensures: schema = the node types (feature_dim: the width of the type's node-feat, 0
/// without) and relations; graph = build_typed_csr of every relation's edges in dataset ids
/// (directed as written: a repeat within a relation merged, self-loops kept), edge_types its
/// entries' relations; edge_features each entry's input edge's row (if the relations have
/// them); features n x F, F the widest type's, type t's rows holding its features in their
/// first feature_dim columns and zeros after; labels (empty if no type has node-label) -1 for
/// nodes of unlabelled types; num_classes stated, else the largest label + 1 (0 without
/// labels); split per node, none for types without a split; task classify.
/// Throws sar::io_error naming the file and line for any malformed line, an id outside its
/// type's count, feature or label line counts other than the type's count, an edge count
/// other than num-edge-list, a node in two splits, a label at or above a stated num_classes;
/// naming the file or directory for a relation or per-type directory naming an unknown node
/// type, edge features in some relations only or of differing widths, a total other than a
/// stated num_nodes, a stated num_classes without labels, a stated task other than classify,
/// both num-node-list and num-node-dict, a mostly empty class range (num_classes not stated),
/// fewer than half of the nodes appearing in an edge or a per-node file when a type has no
/// per-node file (num_nodes not stated), a missing required file; sar::invalid_argument for
/// options.deduplicate false or options.self_loops other than keep.
inline graph_dataset read_heterogeneous(const std::filesystem::path& dir,
                                        const ogb_options& options) {
  namespace fs = std::filesystem;
  heterogeneous_share read = read_heterogeneous_share(dir, options, {});
  whole_input_totals totals;
  check_heterogeneous_share(read, options, totals);

  // Edge features (one reader): every relation has them, equally wide, or none.
  std::optional<matrixf> per_edge = read_relation_edge_rows(read, read.edges_read, dir);

  read_heterogeneous_rows(read, dir, options);
  finish_heterogeneous_rows(read, dir, totals);
  graph_dataset& data = read.rows;

  // The graph: every relation's edges, typed; each entry's edge features its input edge's.
  const node_t n = data.schema.type_begin(data.schema.num_node_types());
  const edge_list& edges = read.edges;
  const bool edge_data = per_edge.has_value();
  const auto m = static_cast<Eigen::Index>(edges.size());
  std::vector<edge_t> origins;
  allocate_checked(function, message("the graph of the ", n, " nodes in ", read.type_file.string()),
                   3.0 * sizeof(edge_t) * (static_cast<double>(n) + 1) +
                       static_cast<double>(m) * (2 * sizeof(node_t) + sizeof(std::int32_t) +
                                                 (edge_data ? sizeof(edge_t) : 0)),
                   [&] {
                     data.graph = build_typed_csr(edges, read.edge_relations, data.edge_types,
                                                  edge_data ? &origins : nullptr);
                   });
  if (edge_data) data.edge_features = take_edge_rows(*per_edge, origins, function.data());
  return std::move(data);
}

/// The node count raw/num-node-dict of the heterogeneous directory `dir` declares, and the
/// edge count its relations' num-edge-list files declare (-1 unless every relation has one).
/// Throws sar::io_error as read_heterogeneous does for those files.
inline std::pair<node_t, edge_t> declared_size(const std::filesystem::path& dir) {
  const std::filesystem::path raw = dir / "raw", type_file = require_csv(raw, "num-node-dict");
  graph_schema schema;
  schema.node_types = read_node_types(type_file);
  edge_t edges = 0;
  for (const relation_directory& r : find_relations(raw, schema, type_file)) {
    const auto count_file = find_csv(r.dir, "num-edge-list");
    if (!count_file) return {schema.type_begin(schema.num_node_types()), -1};
    edges += read_count(*count_file);
  }
  return {schema.type_begin(schema.num_node_types()), edges};
}

}  // namespace sar::detail::ogb
