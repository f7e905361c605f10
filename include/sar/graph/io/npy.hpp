// The sar .npy dataset directory: one graph file set that both sar and Python (numpy.load,
// then torch.from_numpy) read fast.
//
// Dataset directory, format "sar-npy-dataset" (docs/npy-dataset.md):
//   meta.json     {"format": "sar-npy-dataset", "version": 4, "name": s, "num_nodes": n,
//                  "num_edges": E, "feature_dim": F, "num_classes": C, "task": t,
//                  "num_outputs": K, "schema": {...}, "manifest": {...}, "metadata_crc32": c};
//                  "task" is "classify" (also when absent), "regress" or "multilabel"
//                  ("num_outputs" only for the last two); "schema" only for a heterogeneous
//                  graph: {"node_types": [{"name", "count", "feature_dim"}, ...],
//                  "relations": [{"source", "name", "destination"}, ...]} (source and
//                  destination: node type names; sar/graph/schema.hpp); "sparse_features":
//                  true and "feature_entries": z only for sparse features (below); versions 4
//                  (what sar writes), 3 (without sparse features) and 2 (without "schema")
//                  list every array with its size and the CRC-32 of its data and are sealed
//                  (sar/io/safe_directory.hpp); version 1 (what a numpy user writes by hand)
//                  has neither, or an optional "checksums" {file: CRC-32 of its data}
//   indptr.npy    int64 (n+1,)    CSR offsets of the in-edges: row i lists the sources j of j -> i
//   indices.npy   int64 (E,)      those sources, sorted within each row (= sar::csr::columns)
//   features.npy  float32 (n, F)  C order; present unless the features are sparse (F may be 0)
//   features_indptr.npy int64 (n+1,), features_indices.npy int32 (z,), features_data.npy
//                 float32 (z,)    sparse features instead (meta.json "sparse_features"): the
//                                 compressed rows of sar::sparse_rows, as scipy.sparse's
//                                 csr_matrix((data, indices, indptr), shape=(n, F)) holds them
//                                 (columns increasing within a row)
//   labels.npy    int32 (n,)      classify: -1 = unlabelled; present only if the dataset has
//                                 labels
//   targets.npy   float32 (n, K)  regress / multilabel (meta.json "task", K "num_outputs"):
//                                 one row per node (multilabel: each 0 or 1); only then
//   split.npy     uint8 (n,)      sar::node_split (0 none, 1 train, 2 valid, 3 test); present
//                                 only if the dataset has a split
//   edge_features.npy float32 (E, D) one row per entry of indices.npy (meta.json
//                                 "edge_feature_dim" D); only if the dataset has edge features
//   edge_types.npy int32 (E,)     the relation (index into schema.relations) of each entry of
//                                 indices.npy; exactly when meta.json has a "schema"
// The arrays are NumPy .npy files (sar/io/npy_file.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sar/io/checksum.hpp"
#include "sar/io/npy_file.hpp"
#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/schema_json.hpp"
#include "sar/graph/dataset.hpp"

namespace sar {

namespace detail::npy {

inline constexpr const char* dataset_format = "sar-npy-dataset";
// 3 (no sparse features), 2 (no schema) and 1 (no manifest, no seal) are read too.
inline constexpr int dataset_version = 4;

/// The first row of `graph` whose columns are not sorted, or -1 if every row is sorted.
inline node_t first_unsorted_row(const csr& graph) {
  for (node_t i = 0; i < graph.num_rows; ++i) {
    const auto row = graph.row(i);
    if (!std::is_sorted(row.begin(), row.end())) return i;
  }
  return -1;
}

/// The arrays and meta.json of write_npy_dataset, into the (new, empty) directory of `out`.
inline void write_arrays(directory_writer& out, const graph_dataset& data) {
  const std::int64_t n = data.num_nodes();
  const std::int64_t dim = data.sparse()                  ? data.sparse_features.cols()
                           : data.features.rows() == n ? data.features.cols()
                                                          : 0;
  const std::int64_t edges = data.graph.num_edges();
  const auto write = [&](const char* name, npy_dtype dtype, std::vector<std::int64_t> shape,
                         const void* values) {
    out.add_file(name, [&](const std::filesystem::path& file) {
      return write_npy(file, dtype, shape, values);
    });
  };
  write("indptr.npy", npy_dtype::int64, {n + 1}, data.graph.offsets.data());
  write("indices.npy", npy_dtype::int64, {edges}, data.graph.columns.data());
  const sparse_rows<float>& sparse = data.sparse_features;
  if (data.sparse()) {
    write("features_indptr.npy", npy_dtype::int64, {n + 1}, sparse.offsets.data());
    write("features_indices.npy", npy_dtype::int32, {sparse.non_zeros()}, sparse.columns.data());
    write("features_data.npy", npy_dtype::float32, {sparse.non_zeros()}, sparse.values.data());
  } else {
    write("features.npy", npy_dtype::float32, {n, dim}, data.features.data());
  }
  if (!data.labels.empty()) write("labels.npy", npy_dtype::int32, {n}, data.labels.data());
  const bool with_targets = !has_class_ids(data.task);
  if (with_targets)
    write("targets.npy", npy_dtype::float32, {n, data.targets.cols()}, data.targets.data());
  if (!data.split.empty()) write("split.npy", npy_dtype::uint8, {n}, data.split.data());
  const std::int64_t edge_dim = data.edge_feature_dim();
  if (edge_dim > 0)
    write("edge_features.npy", npy_dtype::float32, {edges, edge_dim}, data.edge_features.data());
  const bool typed = data.schema.heterogeneous();
  if (typed) write("edge_types.npy", npy_dtype::int32, {edges}, data.edge_types.data());

  nlohmann::ordered_json meta{
      {"format", dataset_format}, {"version", dataset_version},
      {"name", data.name},        {"num_nodes", n},
      {"num_edges", edges},       {"feature_dim", dim},
      {"num_classes", data.num_classes}, {"task", task_name(data.task)}};
  if (with_targets) meta["num_outputs"] = data.targets.cols();
  if (data.sparse()) {
    meta["sparse_features"] = true;
    meta["feature_entries"] = sparse.non_zeros();
  }
  if (edge_dim > 0) meta["edge_feature_dim"] = edge_dim;
  if (typed) meta["schema"] = sar::schema_to_json(data.schema);
  out.write_metadata(meta);
}
}  // namespace detail::npy

/// A sar .npy dataset directory as sar::replace_directory recognises it.
inline constexpr directory_kind npy_dataset_kind{detail::npy::dataset_format, "meta.json",
                                                "checksums"};

/// Writes `data` as a sar .npy dataset directory `dir` (format at the top of this file),
/// as sar::replace_directory writes (a temporary sibling swapped into place): `dir` is
/// created if missing; a sar .npy dataset there is replaced only once the new one is
/// complete; any other non-empty directory is refused and left untouched.
/// `more`, if given, writes further files into the same directory before it is swapped into
/// place (a link split: sar/graph/io/link_split.hpp).
/// Requires: data.validate() passes and every row of data.graph is sorted.
/// Throws sar::invalid_argument if not; sar::io_error naming the path for a refused directory
/// or any file-system failure; what `more` throws (the previous directory then stays).
inline void write_npy_dataset(const std::filesystem::path& dir, const graph_dataset& data,
                              const std::function<void(directory_writer&)>& more = {}) {
  namespace fs = std::filesystem;
  namespace np = detail::npy;
  constexpr const char* where = "sar::write_npy_dataset";
  data.validate(where);
  const node_t unsorted = np::first_unsorted_row(data.graph);
  SAR_CHECK(unsorted < 0, invalid_argument, where, ": row ", unsorted,
            " of the graph is not sorted (the format stores sorted rows, as build_csr makes them)");
  replace_directory(dir, npy_dataset_kind,
                    [&](directory_writer& out) {
                      np::write_arrays(out, data);
                      if (more) more(out);
                    },
                    where);
}

/// Which arrays read_npy_dataset_share reads (meta.json is always read and checked).
enum class npy_arrays {
  all,               ///< every array
  without_features,  ///< all but features.npy's rows (its header is checked; features 0 x F)
  features_only,     ///< only features.npy's rows (graph, labels and split left empty)
};

/// How read_npy_dataset reads. verify_checksums false skips the CRC-32 of the arrays listed
/// in meta.json.
struct npy_read_options {
  /// Check the CRC-32 of each array listed in meta.json (false skips it).
  bool verify_checksums = true;
  /// Node and class counts the caller states (-1: meta.json's, refusing a class range that is
  /// mostly empty; see dataset_sizes).
  dataset_sizes sizes{};
  /// The arrays read_npy_dataset_share reads (read_npy_dataset reads all).
  npy_arrays arrays = npy_arrays::all;
};

/// What read_npy_dataset_share read: rows [first, last) of a .npy dataset directory.
struct npy_dataset_share {
  /// name; task; num_classes (stated, else meta.json's); schema (meta.json's); graph: the
  /// rows' in-edges (num_rows = last - first, num_cols = num_nodes, columns dataset ids) with
  /// their edge_features and edge_types (empty without edge_features.npy, edge_types.npy);
  /// features, labels (empty without labels.npy), targets (regress, multilabel) and split
  /// (empty without split.npy) of the rows.
  graph_dataset rows;
  node_t num_nodes = 0;          ///< n of meta.json
  node_t first = 0;              ///< the first row read
  node_t last = 0;               ///< one past the last row read
  /// A piece of an array's data that meta.json lists a CRC-32 for: the pieces of shares
  /// [0, a), [a, b), ..., [z, n) tile the data in order (crc32_combine them).
  struct piece {
    std::string file;          ///< the array's path
    std::uint32_t listed = 0;  ///< the CRC-32 of its whole data in meta.json
    std::uint32_t crc = 0;     ///< the CRC-32 of this share's piece
    std::uint64_t bytes = 0;   ///< and its length
  };
  /// One per array meta.json lists a CRC-32 for, in the same order in every share (none if
  /// options.verify_checksums is false).
  std::vector<piece> pieces;
  /// Whether the class-range rule is left to finish_npy_dataset (labels present and
  /// num_classes not stated).
  bool class_range_unchecked = false;
};

/// Reads rows [first, last) = rows_of(n) of the sar .npy dataset directory `dir`, whose
/// meta.json declares n nodes, with positioned reads (format, checks and errors: see
/// read_npy_dataset), without the checks a reader of a share cannot make alone: the arrays'
/// CRC-32 (pieces returned) and the class-range rule. Requires 0 <= first <= last <= n. Not
/// collective.
template <class RowsOf>
npy_dataset_share read_npy_dataset_share(const std::filesystem::path& dir,
                                         const npy_read_options& options, RowsOf&& rows_of) {
  namespace fs = std::filesystem;
  namespace np = detail::npy;
  constexpr const char* where = "sar::read_npy_dataset";
  std::map<std::string, std::uint32_t> listed;  // meta.json's checksums, if it has them
  std::error_code ec;
  SAR_CHECK(fs::is_directory(dir, ec), io_error, where, ": missing directory ", dir.string());
  const fs::path meta_file = dir / "meta.json";
  SAR_CHECK(fs::is_regular_file(meta_file, ec), io_error, where, ": missing file ",
            meta_file.string(), " (not a sar .npy dataset, or an incomplete one)");

  npy_dataset_share out;
  graph_dataset& data = out.rows;
  std::int64_t n = 0, edges = 0, dim = 0, outputs = 0, edge_dim = 0;
  std::int64_t feature_entries = -1;  // sparse features: their entries (z); -1: dense
  {
    std::ifstream in(meta_file);
    SAR_CHECK(in.good(), io_error, where, ": cannot open ", meta_file.string());
    const nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    SAR_CHECK(meta.is_object(), io_error, where, ": ", meta_file.string(),
              " is not a JSON object (malformed JSON?)");
    const auto text = [&](const char* key) {
      SAR_CHECK(meta.contains(key) && meta[key].is_string(), io_error, where, ": ",
                meta_file.string(), ": missing string field \"", key, "\"");
      return meta[key].get<std::string>();
    };
    const auto count = [&](const char* key) {
      const bool valid = meta.contains(key) && meta[key].is_number_integer() &&
                         meta[key].get<std::int64_t>() >= 0;
      SAR_CHECK(valid, io_error, where, ": ", meta_file.string(), ": field \"", key,
                "\" is missing or not a non-negative integer");
      return meta[key].get<std::int64_t>();
    };
    const std::string format = text("format");
    SAR_CHECK(format == np::dataset_format, io_error, where, ": ", meta_file.string(),
              " has format '", format, "', expected '", np::dataset_format, "'");
    const std::int64_t version = count("version");
    SAR_CHECK(version >= 1 && version <= np::dataset_version, io_error, where, ": ",
              meta_file.string(), " has version ", version, "; this sar reads versions 1 to ",
              np::dataset_version);
    if (version >= 2) check_metadata_seal(meta, meta_file.string(), where);
    data.name = text("name");
    n = count("num_nodes");
    SAR_CHECK(options.sizes.num_nodes < 0 || n == options.sizes.num_nodes, io_error, where,
              ": ", meta_file.string(), " declares num_nodes = ", n, ", but num_nodes is ",
              options.sizes.num_nodes);
    edges = count("num_edges");
    dim = count("feature_dim");
    if (meta.contains("edge_feature_dim")) edge_dim = count("edge_feature_dim");
    if (meta.contains("sparse_features")) {
      SAR_CHECK(meta["sparse_features"].is_boolean(), io_error, where, ": ", meta_file.string(),
                ": \"sparse_features\" is not true or false");
      if (meta["sparse_features"].get<bool>()) feature_entries = count("feature_entries");
    }
    const std::int64_t classes = count("num_classes");
    SAR_CHECK(classes <= std::numeric_limits<std::int32_t>::max(), io_error, where, ": ",
              meta_file.string(), ": num_classes ", classes, " is too large");
    data.num_classes = static_cast<std::int32_t>(classes);
    if (meta.contains("task"))
      data.task = detail::task_in_metadata(text("task"), meta_file.string(), where);
    SAR_CHECK(!options.sizes.task || *options.sizes.task == data.task, io_error, where, ": ",
              meta_file.string(), " declares the task ", task_name(data.task), ", but the task ",
              task_name(options.sizes.task.value_or(data.task)), " is stated");
    if (!has_class_ids(data.task)) {
      SAR_CHECK(classes == 0 && options.sizes.num_classes < 0, io_error, where, ": ",
                meta_file.string(), ": a ", task_name(data.task), " dataset has no classes (",
                "num_classes ", classes, options.sizes.num_classes >= 0 ? ", and one is stated"
                                                                        : "", ")");
      outputs = count("num_outputs");
    }
    if (meta.contains("schema")) {
      data.schema = schema_from_json(meta["schema"], message(where, ": ", meta_file.string()));
      try {
        data.schema.validate(n, dim, message(where, ": ", meta_file.string()).c_str());
      } catch (const invalid_argument& e) {
        throw io_error(e.what());
      }
    }
    // Written by sar (versions 2 and 3: "manifest"; older: "checksums"); numpy users may leave
    // them out.
    SAR_CHECK(!meta.contains("checksums") || meta["checksums"].is_object(), io_error, where,
              ": ", meta_file.string(), ": \"checksums\" is not an object");
    const manifest arrays =
        manifest::from_metadata(meta, meta_file.string(), npy_dataset_kind.legacy_checksums);
    for (const auto& [name, file] : arrays.files()) listed[name] = file.crc32;
  }
  const std::pair<node_t, node_t> range = rows_of(static_cast<node_t>(n));
  const node_t first = range.first, last = range.second;
  SAR_CHECK(0 <= first && first <= last && last <= n, invalid_argument, where, ": rows [", first,
            ", ", last, ") of ", n);
  const node_t rows = last - first;
  out.num_nodes = n;
  out.first = first;
  out.last = last;
  // Reads elements [from, from + count) of `file`, and keeps the CRC-32 of the first
  // `piece_elements` of them if meta.json lists one for the file.
  const bool checked = options.verify_checksums && !listed.empty();
  const auto read = [&](const fs::path& file, const npy_header& header, std::uint64_t from,
                        std::uint64_t count, void* to, std::uint64_t piece_elements) {
    read_npy_elements(file, header, from, count, to);
    const auto it = listed.find(file.filename().string());
    if (!checked || it == listed.end()) return;
    const std::uint64_t bytes = piece_elements * npy_element_size(header.dtype);
    out.pieces.push_back({file.string(), it->second, crc32_update(0, to, bytes), bytes});
  };
  const std::string nodes = message("num_nodes = ", n);

  npy_header header;
  const bool with_features = options.arrays != npy_arrays::without_features;
  const bool sparse = feature_entries >= 0;
  // Rows [first, last] of `file`'s n + 1 offsets (into `offsets`), checked: never decreasing,
  // within [0, total], from 0 at row 0 and ending at total at row n. Throws sar::io_error
  // naming `files` (where and the arrays).
  const auto read_offsets = [&](const fs::path& file, std::int64_t total,
                                const std::string& files, std::vector<edge_t>& offsets) {
    header = np::expect_array(file, npy_dtype::int64, {n + 1}, nodes);
    offsets.resize(static_cast<std::size_t>(rows) + 1);
    read(file, header, static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(rows) + 1,
         offsets.data(), static_cast<std::uint64_t>(rows + (last == n ? 1 : 0)));
    for (node_t r = 0; r < rows; ++r)
      SAR_CHECK(offsets[r] <= offsets[r + 1], io_error, files, ": offsets decrease at row ",
                first + r, " (", offsets[r], " then ", offsets[r + 1], ")");
    SAR_CHECK((first > 0 || offsets.front() == 0) && offsets.front() >= 0 &&
                  offsets.back() <= total && (last < n || offsets.back() == total),
              io_error, files, ": offsets of rows [", first, ", ", last, ") run from ",
              offsets.front(), " to ", offsets.back(), ", outside [0, ", total,
              "] or not ending there");
  };
  // Sparse features: the rows' compressed rows, features rows x 0 (without_features: left
  // unread, 0 x F). Throws sar::io_error naming the array that is wrong.
  const auto read_sparse_features = [&] {
    sparse_rows<float>& x = data.sparse_features;
    x.num_cols = dim;
    if (!with_features) return;
    const fs::path indptr = dir / "features_indptr.npy", indices = dir / "features_indices.npy",
                   values = dir / "features_data.npy";
    const std::string entries = message("feature_entries = ", feature_entries);
    read_offsets(indptr, feature_entries, message(where, ": ", indptr.string()), x.offsets);
    const edge_t base = x.offsets.front(), count = x.offsets.back() - base;
    check_memory<io_error>(where, message("the ", count, " sparse feature entries of rows [",
                                          first, ", ", last, ") (", meta_file.string(), ")"),
                           8.0 * static_cast<double>(count));
    for (auto& offset : x.offsets) offset -= base;
    header = np::expect_array(indices, npy_dtype::int32, {feature_entries}, entries);
    x.columns.resize(static_cast<std::size_t>(count));
    read(indices, header, static_cast<std::uint64_t>(base), static_cast<std::uint64_t>(count),
         x.columns.data(), static_cast<std::uint64_t>(count));
    header = np::expect_array(values, npy_dtype::float32, {feature_entries}, entries);
    x.values.resize(static_cast<std::size_t>(count));
    read(values, header, static_cast<std::uint64_t>(base), static_cast<std::uint64_t>(count),
         x.values.data(), static_cast<std::uint64_t>(count));
    x.num_rows = rows;
    const std::string about = message(where, ": ", indices.string(), " (rows [", first, ", ",
                                      last, "))");
    try {
      x.validate(about.c_str());
    } catch (const invalid_argument& e) {
      throw io_error(e.what());
    }
    data.features.resize(rows, 0);
  };
  const auto read_features = [&] {
    if (sparse) return read_sparse_features();
    const fs::path file = dir / "features.npy";
    header = np::expect_array(file, npy_dtype::float32, {n, dim},
                              message(nodes, ", feature_dim = ", dim));
    data.features.resize(with_features ? rows : 0, dim);
    if (with_features)
      read(file, header, static_cast<std::uint64_t>(first * dim),
           static_cast<std::uint64_t>(rows * dim), data.features.data(),
           static_cast<std::uint64_t>(rows * dim));
  };
  if (options.arrays == npy_arrays::features_only) {
    check_memory<io_error>(where, message("rows [", first, ", ", last, ") of ", nodes,
                                          ", feature_dim = ", dim, " (", meta_file.string(), ")"),
                           4.0 * static_cast<double>(rows) *
                               static_cast<double>(sparse ? 0 : dim));
    read_features();
    return out;
  }

  const fs::path indptr_file = dir / "indptr.npy", indices_file = dir / "indices.npy";
  const std::string graph_files =
      message(where, ": ", indptr_file.string(), ", ", indices_file.string());
  std::vector<edge_t> offsets;
  read_offsets(indptr_file, edges, graph_files, offsets);
  const edge_t first_edge = offsets.front(), share_edges = offsets.back() - first_edge;
  // Before anything of these sizes is allocated (the arrays' files must match them, but a
  // sparse file can be of any size).
  check_memory<io_error>(
      where, message("rows [", first, ", ", last, ") of ", nodes, " with ", share_edges,
                     " edges, feature_dim = ", dim, " (", meta_file.string(), ")"),
      8.0 * static_cast<double>(rows + 1) + 8.0 * static_cast<double>(share_edges) +
          static_cast<double>(rows) *
              (4.0 * static_cast<double>((with_features && !sparse ? dim : 0) + outputs) +
               5.0) +
          4.0 * static_cast<double>(share_edges) *
              static_cast<double>(edge_dim + (data.schema.heterogeneous() ? 1 : 0)));
  for (auto& offset : offsets) offset -= first_edge;
  header =
      np::expect_array(indices_file, npy_dtype::int64, {edges}, message("num_edges = ", edges));
  data.graph.num_rows = rows;
  data.graph.num_cols = n;
  data.graph.offsets = std::move(offsets);
  data.graph.columns.resize(static_cast<std::size_t>(share_edges));
  read(indices_file, header, static_cast<std::uint64_t>(first_edge),
       static_cast<std::uint64_t>(share_edges), data.graph.columns.data(),
       static_cast<std::uint64_t>(share_edges));
  try {
    data.graph.validate(graph_files.c_str());
  } catch (const invalid_argument& e) {
    throw io_error(e.what());
  }
  const node_t unsorted = np::first_unsorted_row(data.graph);
  SAR_CHECK(unsorted < 0, io_error, graph_files, ": the sources of row ", first + unsorted,
            " are not sorted");
  if (edge_dim > 0) {
    const fs::path file = dir / "edge_features.npy";
    header = np::expect_array(file, npy_dtype::float32, {edges, edge_dim},
                              message("num_edges = ", edges, ", edge_feature_dim = ", edge_dim));
    data.edge_features.resize(share_edges, edge_dim);
    read(file, header, static_cast<std::uint64_t>(first_edge * edge_dim),
         static_cast<std::uint64_t>(share_edges * edge_dim), data.edge_features.data(),
         static_cast<std::uint64_t>(share_edges * edge_dim));
  } else {
    SAR_CHECK(!fs::exists(dir / "edge_features.npy", ec), io_error, where, ": ", dir.string(),
              " holds edge_features.npy, but meta.json declares no edge_feature_dim");
  }
  if (data.schema.heterogeneous()) {
    const fs::path file = dir / "edge_types.npy";
    header = np::expect_array(file, npy_dtype::int32, {edges},
                              message("num_edges = ", edges, " and a schema"));
    data.edge_types.resize(static_cast<std::size_t>(share_edges));
    read(file, header, static_cast<std::uint64_t>(first_edge),
         static_cast<std::uint64_t>(share_edges), data.edge_types.data(),
         static_cast<std::uint64_t>(share_edges));
    try {
      data.schema.check_edges(data.graph.offsets, data.graph.columns, first, data.edge_types,
                              [](node_t column) { return column; },
                              message(where, ": ", file.string(),
                                      first_edge == 0 ? "" : message(" (rows [", first, ", ", last,
                                                                     "): edge 0 is entry ",
                                                                     first_edge, ")")).c_str());
    } catch (const invalid_argument& e) {
      throw io_error(e.what());
    }
  } else {
    SAR_CHECK(!fs::exists(dir / "edge_types.npy", ec), io_error, where, ": ", dir.string(),
              " holds edge_types.npy, but meta.json declares no schema");
  }

  read_features();

  if (!has_class_ids(data.task)) {
    const fs::path file = dir / "targets.npy";
    header = np::expect_array(file, npy_dtype::float32, {n, outputs},
                              message(nodes, ", num_outputs = ", outputs));
    data.targets.resize(rows, outputs);
    read(file, header, static_cast<std::uint64_t>(first * outputs),
         static_cast<std::uint64_t>(rows * outputs), data.targets.data(),
         static_cast<std::uint64_t>(rows * outputs));
    detail::check_target_values<io_error>(data.task, data.targets, first,
                                          message(where, ": ", file.string()));
    SAR_CHECK(!fs::exists(dir / "labels.npy", ec), io_error, where, ": ", dir.string(),
              " holds labels.npy, but meta.json declares the task ", task_name(data.task));
  } else if (const fs::path file = dir / "labels.npy"; fs::exists(file, ec)) {
    header = np::expect_array(file, npy_dtype::int32, {n}, nodes);
    data.labels.resize(static_cast<std::size_t>(rows));
    read(file, header, static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(rows),
         data.labels.data(), static_cast<std::uint64_t>(rows));
    const bool stated = options.sizes.num_classes >= 0;
    if (stated) data.num_classes = options.sizes.num_classes;
    const auto bad = std::find_if(data.labels.begin(), data.labels.end(), [&](std::int32_t label) {
      return label < -1 || label >= data.num_classes;
    });
    SAR_CHECK(bad == data.labels.end(), io_error, where, ": ", file.string(), ": label ",
              bad == data.labels.end() ? 0 : *bad, " of node ", first + (bad - data.labels.begin()),
              " outside [-1, ", data.num_classes, ")",
              stated ? " (num_classes as stated)" : " (num_classes in meta.json)");
    out.class_range_unchecked = !stated;
  } else {
    SAR_CHECK(options.sizes.num_classes < 0, io_error, where, ": num_classes = ",
              options.sizes.num_classes, " is stated, but ", dir.string(),
              " has no labels.npy");
  }
  if (const fs::path file = dir / "split.npy"; fs::exists(file, ec)) {
    header = np::expect_array(file, npy_dtype::uint8, {n}, nodes);
    data.split.resize(static_cast<std::size_t>(rows));
    read(file, header, static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(rows),
         data.split.data(), static_cast<std::uint64_t>(rows));
    const auto bad = std::find_if(data.split.begin(), data.split.end(), [](node_split s) {
      return static_cast<std::uint8_t>(s) > static_cast<std::uint8_t>(node_split::test);
    });
    SAR_CHECK(bad == data.split.end(), io_error, where, ": ", file.string(), ": split code ",
              bad == data.split.end() ? 0 : static_cast<int>(*bad), " of node ",
              first + (bad - data.split.begin()),
              " is not 0 (none), 1 (train), 2 (valid) or 3 (test)");
  }
  return out;
}

/// The checks of read_npy_dataset over the whole directory `dir`, of whose shares `totals`
/// totals the readers' (whole_input_totals: one reader): each listed array's CRC-32 (the
/// pieces combined in reader order) and the class-range rule. Throws what read_npy_dataset
/// throws for them; collective where `totals` is.
template <class Totals>
void finish_npy_dataset(const npy_dataset_share& read, const std::filesystem::path& dir,
                        Totals& totals) {
  constexpr const char* where = "sar::read_npy_dataset";
  for (const auto& piece : read.pieces)
    check_crc32(where, piece.file, totals.crc32(piece.crc, piece.bytes), piece.listed, "dataset");
  if (read.class_range_unchecked)
    detail::check_mostly_used<std::int32_t>(
        totals, read.rows.num_classes, {read.rows.labels},
        message(where, ": ", (dir / "meta.json").string(), " declares num_classes = ",
                read.rows.num_classes),
        "have a node in labels.npy", "num_classes", "--num-classes");
}

/// Reads the sar .npy dataset directory `dir` (format at the top of this file).
/// Ensures: name, graph (num_rows = num_cols = num_nodes), features (n x F), task
/// (meta.json's; classify without one), labels (empty without labels.npy), num_classes
/// (options.sizes.num_classes if stated, else meta.json's), targets (regress, multilabel:
/// targets.npy), split (empty without split.npy), edge_features, schema and edge_types (empty
/// without "schema") as written, and data.validate() passes.
/// Throws sar::io_error naming the file and the problem for: a missing directory, meta.json,
/// indptr.npy, indices.npy or features.npy; malformed meta.json, another format or version, a
/// missing or negative count; any .npy problem (see read_npy_header); a dtype or shape that
/// disagrees with meta.json; offsets that do not rise from 0 to E, sources outside [0, n) or
/// unsorted rows (naming indptr.npy and indices.npy); labels outside [-1, C); fewer than half
/// of meta.json's C classes having a node (unless options.sizes.num_classes is stated); a
/// stated num_nodes other than meta.json's, or a stated num_classes without labels.npy; a
/// stated task other than meta.json's; a regress or multilabel dataset with classes, labels.npy
/// or a target that is not finite (multilabel: not 0 or 1); split
/// codes above 3; a "schema" that is malformed or fails graph_schema::validate (naming
/// meta.json), edge_types.npy without a schema, or an entry's relation that does not join
/// its source's type to its row's (naming edge_types.npy); a version 2 or 3 meta.json whose
/// seal does not match its content (edited); an
/// array whose data's CRC-32 differs from what meta.json lists (sar writes them; a dataset
/// written by numpy may leave them out; options.verify_checksums false skips them).
inline graph_dataset read_npy_dataset(const std::filesystem::path& dir,
                                      npy_read_options options = {}) {
  npy_dataset_share read =
      read_npy_dataset_share(dir, options, [](node_t n) { return std::pair<node_t, node_t>{0, n}; });
  whole_input_totals totals;
  finish_npy_dataset(read, dir, totals);
  return std::move(read.rows);
}

}  // namespace sar
