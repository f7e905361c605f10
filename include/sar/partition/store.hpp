// The on-disk partition store: one directory per partitioned dataset, with meta.json and one
// file set per part, so that rank p reads meta.json and part p only (its memory never depends
// on the other parts' sizes). The format is described in docs/partition-store.md.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/comm/communicator.hpp"
#include "sar/io/checksum.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/core/task_kind.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/schema_json.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/partition_book.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/relabel.hpp"

namespace sar {

/// A partition store as sar::replace_directory recognises it.
inline constexpr directory_kind partition_store_kind{"sar-partition-store", "meta.json",
                                                    "checksums"};

/// Version of the store layout (meta.json "format_version" and every binary file header).
/// 2: meta.json lists a CRC-32 of every file. 3: meta.json lists every file and directory with
/// its size and CRC-32 (the manifest, sar/io/safe_directory.hpp) and is sealed. 4: meta.json
/// records the task ("task", "num_outputs") and a regress or multilabel store's parts hold
/// their targets (targets.bin). 5: meta.json records "edge_feature_dim" and the parts of a
/// store with edge features hold them (edge_features.bin, one row per in-edge). All are read
/// (2 and 3 as classify, 2 to 4 without edge features). 6: meta.json records a heterogeneous
/// dataset's "schema" (sar/graph/schema_json.hpp) and its parts hold the relation of each
/// in-edge (edge_types.bin); 2 to 5 read as homogeneous. 7: meta.json records
/// "sparse_features", and the parts of a store with sparse features hold them as compressed
/// rows (feature_offsets.bin, feature_columns.bin, feature_values.bin) instead of features.bin;
/// 2 to 6 read as dense.
inline constexpr int partition_store_version = 7;
/// The oldest version read_partition_part reads.
inline constexpr int partition_store_oldest_version = 2;

/// Everything meta.json records about a partitioned dataset.
struct partition_metadata {
  /// Version of the store layout (partition_store_version when written).
  int format_version = partition_store_version;
  std::string dataset;            ///< the dataset's name
  /// Number of parts.
  int num_parts = 0;
  /// Number of nodes of the dataset.
  node_t num_nodes = 0;
  /// Number of edges of the dataset (all parts).
  edge_t num_edges = 0;
  /// Features per node.
  std::int64_t feature_dim = 0;
  /// The parts hold their features as sparse rows (sar/core/sparse_rows.hpp).
  bool sparse_features = false;
  /// Number of classes.
  std::int32_t num_classes = 0;
  /// What the nodes are to predict (classify: labels; regress, multilabel: targets).
  task_kind task = task_kind::classify;
  /// The targets' columns (regress, multilabel); 0 for classify.
  std::int64_t num_outputs = 0;
  /// Features per edge (0: none).
  std::int64_t edge_feature_dim = 0;
  /// A heterogeneous dataset's node types and relations (empty: homogeneous).
  graph_schema schema;
  bool has_labels = false;        ///< false: every part's labels are empty
  bool has_split = false;         ///< false: every part's split is empty
  partition_book book;            ///< relabelled id ranges of all parts
  std::vector<edge_t> part_edges; ///< in-edges stored by each part
  std::string method;             ///< how the partition was made (free text, e.g. "metis seed=0")
  partition_quality quality;      ///< edge cut and balance of the partition
  /// Every file (CRC-32 of the whole file, header included) and directory, by path relative
  /// to the store ("part-0001/features.bin"): a corrupt file, or one copied from another
  /// store, is caught.
  sar::manifest manifest;
  /// CRC-32 of meta.json itself: the store's identity, which every rank of a run compares.
  std::uint32_t identity = 0;
};

/// How read_partition_part reads. verify_checksums false skips the CRC-32 of every file
/// (bench/RESULTS.md §12 measures what it costs).
struct partition_read_options {
  /// Check the CRC-32 of every file (false skips it).
  bool verify_checksums = true;
  /// Return a store's sparse features as graph_part::sparse_features (false: as dense
  /// features, converted after reading).
  bool sparse_features = false;
};

namespace detail::store {

inline constexpr std::array<char, 8> magic = {'S', 'A', 'R', 'P', 'S', 'T', 'O', 'R'};

enum class element_type : std::uint32_t { int64 = 1, float32 = 2, int32 = 3, uint8 = 4 };

template <class T>
constexpr element_type element_type_of() {
  if constexpr (std::is_same_v<T, std::int64_t>) return element_type::int64;
  else if constexpr (std::is_same_v<T, float>) return element_type::float32;
  else if constexpr (std::is_same_v<T, std::int32_t>) return element_type::int32;
  else {
    static_assert(sizeof(T) == 1, "partition store element types: int64, float32, int32, uint8");
    return element_type::uint8;
  }
}

inline const char* element_type_name(std::uint32_t type) {
  switch (static_cast<element_type>(type)) {
    case element_type::int64: return "int64";
    case element_type::float32: return "float32";
    case element_type::int32: return "int32";
    case element_type::uint8: return "uint8";
  }
  return "unknown";
}

/// The 48-byte header of every binary file (little-endian, as written by the host).
struct file_header {
  std::array<char, 8> magic;
  std::uint32_t version;
  std::uint32_t type;
  std::uint64_t rows;
  std::uint64_t cols;
  std::int64_t part;      ///< the part this file belongs to
  std::uint64_t reserved; ///< 0
};
static_assert(sizeof(file_header) == 48);

inline std::string part_dir_name(int part) {
  char name[32];
  std::snprintf(name, sizeof name, "part-%04d", part);
  return name;
}

// File names inside a part directory.
inline constexpr const char* offsets_file = "in_offsets.bin";
inline constexpr const char* columns_file = "in_columns.bin";
inline constexpr const char* features_file = "features.bin";
// Sparse features (format 7): the compressed rows of sar::sparse_rows, instead of features.bin.
inline constexpr const char* feature_offsets_file = "feature_offsets.bin";
inline constexpr const char* feature_columns_file = "feature_columns.bin";
inline constexpr const char* feature_values_file = "feature_values.bin";
inline constexpr const char* labels_file = "labels.bin";
inline constexpr const char* targets_file = "targets.bin";  // regress, multilabel only
inline constexpr const char* edge_features_file = "edge_features.bin";  // with edge features
inline constexpr const char* edge_types_file = "edge_types.bin";  // heterogeneous only
inline constexpr const char* split_file = "split.bin";
inline constexpr const char* original_ids_file = "original_ids.bin";

/// An output file that throws sar::io_error naming itself on any failure.
class writer {
 public:
  writer(std::filesystem::path path, element_type type, std::uint64_t rows, std::uint64_t cols,
         int part)
      : path_(std::move(path)), out_(path_, std::ios::binary | std::ios::trunc) {
    SAR_CHECK(out_.good(), io_error, "sar::write_partition_store: cannot create ", path_.string());
    file_header h{magic, static_cast<std::uint32_t>(partition_store_version),
                  static_cast<std::uint32_t>(type), rows, cols, part, 0};
    write(&h, sizeof h);
  }
  void write(const void* data, std::size_t bytes) {
    if (bytes == 0) return;
    crc_ = crc32_update(crc_, data, bytes);
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    SAR_CHECK(out_.good(), io_error, "sar::write_partition_store: write to ", path_.string(),
              " failed (disk full?)");
  }
  /// Closes the file; returns the CRC-32 of everything written.
  std::uint32_t close() {
    out_.close();
    SAR_CHECK(!out_.fail(), io_error, "sar::write_partition_store: closing ", path_.string(),
              " failed");
    return crc_;
  }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  std::uint32_t crc_ = 0;
};

/// Writes values as a one-column file; returns its CRC-32.
template <class T>
std::uint32_t write_vector(const std::filesystem::path& path, const std::vector<T>& values,
                           int part) {
  writer w(path, element_type_of<T>(), values.size(), 1, part);
  w.write(values.data(), values.size() * sizeof(T));
  return w.close();
}

/// Reads a binary file whose header must say (version, type, rows, cols, part) and whose size
/// must be exactly header + payload, into allocate() (which returns room for rows * cols
/// elements, and is called only once the file is known to hold them). Returns the file's
/// CRC-32 if `with_checksum`, else 0. Throws sar::io_error naming the file and what is wrong.
template <class Allocate>
std::uint32_t read_array(const std::filesystem::path& path, int version, std::uint64_t rows,
                         std::uint64_t cols, int part, Allocate&& allocate, bool with_checksum) {
  using T = std::remove_pointer_t<std::invoke_result_t<Allocate&>>;
  constexpr const char* where = "sar::read_partition_part";
  std::error_code ec;
  const bool present = std::filesystem::is_regular_file(path, ec);
  SAR_CHECK(present, io_error, where, ": missing file ", path.string());
  const auto size = std::filesystem::file_size(path, ec);
  SAR_CHECK(!ec, io_error, where, ": cannot stat ", path.string(), ": ", ec.message());
  std::ifstream in(path, std::ios::binary);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", path.string());
  SAR_CHECK(size >= sizeof(file_header), io_error, where, ": ", path.string(), " is truncated (",
            size, " bytes, shorter than the ", sizeof(file_header), "-byte header)");
  file_header h{};
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  SAR_CHECK(in.good(), io_error, where, ": cannot read the header of ", path.string());
  SAR_CHECK(h.magic == magic, io_error, where, ": ", path.string(),
            " has a bad magic number (not a sar partition store file)");
  SAR_CHECK(h.version == static_cast<std::uint32_t>(version), io_error, where, ": ",
            path.string(), " has format version ", h.version, ", meta.json says ", version);
  SAR_CHECK(h.type == static_cast<std::uint32_t>(element_type_of<T>()), io_error, where, ": ",
            path.string(), " holds ", element_type_name(h.type), " elements, expected ",
            element_type_name(static_cast<std::uint32_t>(element_type_of<T>())));
  SAR_CHECK(h.part == part, io_error, where, ": ", path.string(), " belongs to part ", h.part,
            ", expected part ", part);
  SAR_CHECK(h.rows == rows && h.cols == cols, io_error, where, ": ", path.string(), " is ", h.rows,
            " x ", h.cols, " but meta.json implies ", rows, " x ", cols);
  const std::uint64_t payload = rows * cols * sizeof(T);
  SAR_CHECK(cols == 0 || rows <= (std::uint64_t{1} << 62) / sizeof(T) / cols, io_error, where,
            ": ", path.string(), " claims ", rows, " x ", cols, " elements");
  SAR_CHECK(size - sizeof(file_header) >= payload, io_error, where, ": ", path.string(),
            " is truncated (", size, " bytes, expected ", sizeof(file_header) + payload, ")");
  SAR_CHECK(size - sizeof(file_header) == payload, io_error, where, ": ", path.string(), " has ",
            size - sizeof(file_header) - payload, " unexpected trailing bytes");
  T* out = allocate();
  if (payload > 0) {
    in.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(payload));
    SAR_CHECK(in.good(), io_error, where, ": reading ", path.string(), " failed");
  }
  if (!with_checksum) return 0;
  return crc32_update(crc32_update(0, &h, sizeof h), out, payload);
}

inline nlohmann::json quality_to_json(const partition_quality& q) {
  return {{"edge_cut", q.edge_cut},
          {"edge_cut_fraction", q.edge_cut_fraction},
          {"node_balance", q.node_balance},
          {"edge_balance", q.edge_balance},
          {"train_balance", q.train_balance},
          {"part_nodes", q.part_nodes},
          {"part_edges", q.part_edges},
          {"part_train", q.part_train}};
}

}  // namespace detail::store

/// Directory of part `part` inside the store `dir` (dir / "part-0003").
inline std::filesystem::path partition_part_dir(const std::filesystem::path& dir, int part) {
  return dir / detail::store::part_dir_name(part);
}

namespace detail::store {
/// Writes the file set of `part` into the store being written by `out`, recording each file.
/// Throws sar::invalid_argument if `part` breaks the graph_part contract, sar::io_error naming
/// the file on a write failure.
inline void write_part(directory_writer& out, const graph_part& part, const char* where) {
  part.validate(where);
  const int p = part.part;
  const std::string dir = part_dir_name(p);
  out.make_directory(dir);
  const auto add_vector = [&](const char* file, const auto& values) {
    out.add_file(dir + "/" + file,
                 [&](const std::filesystem::path& path) { return write_vector(path, values, p); });
  };
  const auto add_matrix = [&](const char* file, const matrixf& values) {
    out.add_file(dir + "/" + file, [&](const std::filesystem::path& path) {
      writer w(path, element_type::float32, static_cast<std::uint64_t>(values.rows()),
               static_cast<std::uint64_t>(values.cols()), p);
      w.write(values.data(), static_cast<std::size_t>(values.size()) * sizeof(float));
      return w.close();
    });
  };
  add_vector(offsets_file, part.in_edges.offsets);
  add_vector(columns_file, part.in_edges.columns);
  if (part.sparse()) {
    add_vector(feature_offsets_file, part.sparse_features.offsets);
    add_vector(feature_columns_file, part.sparse_features.columns);
    add_vector(feature_values_file, part.sparse_features.values);
  } else {
    add_matrix(features_file, part.features);
  }
  add_vector(labels_file, part.labels);
  if (part.edge_features.cols() > 0) add_matrix(edge_features_file, part.edge_features);
  if (part.schema.heterogeneous()) add_vector(edge_types_file, part.edge_types);
  if (!has_class_ids(part.task)) add_matrix(targets_file, part.targets);
  std::vector<std::uint8_t> split(part.split.size());
  std::transform(part.split.begin(), part.split.end(), split.begin(),
                 [](node_split s) { return static_cast<std::uint8_t>(s); });
  add_vector(split_file, split);
  add_vector(original_ids_file, part.original_ids);
  log(log_level::debug, message(where, ": wrote ", dir, " (", part.num_local(), " nodes, ",
                                part.in_edges.num_edges(), " edges)"));
}

/// meta.json's fields for `meta` (without the manifest and the seal, which the writer adds).
inline nlohmann::json metadata_json(const partition_metadata& meta) {
  nlohmann::json j = {
      {"format", partition_store_kind.format},
      {"format_version", partition_store_version},
      {"dataset", meta.dataset},
      {"num_parts", meta.num_parts},
      {"num_nodes", meta.num_nodes},
      {"num_edges", meta.num_edges},
      {"feature_dim", meta.feature_dim},
      {"sparse_features", meta.sparse_features},
      {"num_classes", meta.num_classes},
      {"task", task_name(meta.task)},
      {"num_outputs", meta.num_outputs},
      {"edge_feature_dim", meta.edge_feature_dim},
      {"has_labels", meta.has_labels},
      {"has_split", meta.has_split},
      {"part_offsets", meta.book.offsets()},
      {"part_edges", meta.part_edges},
      {"method", meta.method},
      {"quality", quality_to_json(meta.quality)},
  };
  if (meta.schema.heterogeneous()) j["schema"] = schema_to_json(meta.schema);
  return j;
}

/// Part p of `data` under the relabelling `ids`, as read_partition_part returns it.
inline graph_part part_of(const graph_dataset& data, const relabelling& ids, int p) {
  const std::int64_t dim = data.features.rows() == data.num_nodes() ? data.features.cols() : 0;
  graph_part out;
  out.part = p;
  out.book = ids.book;
  out.num_classes = data.num_classes;
  out.task = data.task;
  const node_t lo = ids.book.begin(p);
  const node_t k = ids.book.size(p);
  out.original_ids.assign(ids.old_of_new.begin() + lo, ids.old_of_new.begin() + lo + k);
  csr& g = out.in_edges;
  g.num_rows = k;
  g.num_cols = data.num_nodes();
  g.offsets.assign(static_cast<std::size_t>(k) + 1, 0);
  for (node_t r = 0; r < k; ++r) g.offsets[r + 1] = g.offsets[r] + data.graph.degree(out.original_ids[r]);
  g.columns.resize(static_cast<std::size_t>(g.offsets.back()));
  const bool edge_data = data.edge_features.cols() > 0;
  if (edge_data) out.edge_features.resize(g.num_edges(), data.edge_features.cols());
  const bool typed = data.schema.heterogeneous();
  out.schema = data.schema;
  if (typed) out.edge_types.resize(static_cast<std::size_t>(g.num_edges()));
  tbb::parallel_for(tbb::blocked_range<node_t>(0, k), [&](const auto& range) {
    std::vector<std::pair<node_t, edge_t>> pairs;  // sort scratch
    std::vector<edge_t> entries;                   // the dataset entry of each of a row's edges
    for (node_t r = range.begin(); r != range.end(); ++r) {
      const node_t old = out.original_ids[r];
      const auto columns = std::span(g.columns).subspan(g.offsets[r], data.graph.degree(old));
      entries.resize(columns.size());
      std::iota(entries.begin(), entries.end(), data.graph.offsets[old]);
      for (std::size_t a = 0; a < columns.size(); ++a)
        columns[a] = ids.new_of_old[data.graph.columns[entries[a]]];
      // By new id; parallel edges keep their order.
      detail::sort_row_with_payload(columns, std::span(entries), pairs);
      for (std::size_t a = 0; a < entries.size(); ++a) {
        const edge_t to = g.offsets[r] + static_cast<edge_t>(a);
        if (edge_data) out.edge_features.row(to) = data.edge_features.row(entries[a]);
        if (typed)
          out.edge_types[static_cast<std::size_t>(to)] =
              data.edge_types[static_cast<std::size_t>(entries[a])];
      }
    }
  });
  if (data.sparse()) {
    out.features.resize(k, 0);
    out.sparse_features =
        select_rows(data.sparse_features, std::span<const node_t>(out.original_ids));
  } else {
    out.features.resize(k, dim);
    for (node_t r = 0; r < k && dim > 0; ++r)
      out.features.row(r) = data.features.row(out.original_ids[r]);
  }
  if (!has_class_ids(data.task)) {
    out.targets.resize(k, data.targets.cols());
    for (node_t r = 0; r < k; ++r) out.targets.row(r) = data.targets.row(out.original_ids[r]);
  }
  for (node_t old : out.original_ids) {
    if (!data.labels.empty()) out.labels.push_back(data.labels[old]);
    if (!data.split.empty()) out.split.push_back(data.split[old]);
  }
  return out;
}
}  // namespace detail::store

/// Writes `data`, partitioned by `part` (each in [0, parts); parts may be empty), to the store
/// directory `dir`: nodes are relabelled with sar::relabel, then each part's file set is written,
/// one part at a time, and meta.json last. Peak extra memory: the relabelling (2 ids per node)
/// plus one part (its edges and feature rows). `method` is recorded in meta.json as free text.
/// The store is written as sar::replace_directory writes (a temporary sibling swapped into
/// place): `dir` is created if missing; a partition store there is replaced only once the new
/// one is complete; any other non-empty directory is refused and left untouched.
/// `also`, if given, writes further files into the store before meta.json (sar-partition: the
/// dataset's link splits). Returns the metadata written. Throws sar::invalid_argument for an
/// invalid dataset or partition, sar::io_error naming the path for any file-system failure.
inline partition_metadata write_partition_store(
    const graph_dataset& data, const std::vector<int>& part, int parts,
    const std::filesystem::path& dir, const std::string& method = "unspecified",
    const std::function<void(directory_writer&)>& also = {}) {
  namespace st = detail::store;
  constexpr const char* where = "sar::write_partition_store";
  data.validate(where);
  const node_t n = data.num_nodes();
  validate_partition(part, n, parts, where);
  const csr& graph = data.graph;
  const std::int64_t dim = data.sparse()                  ? data.sparse_features.cols()
                           : data.features.rows() == n ? data.features.cols()
                                                          : 0;

  partition_metadata meta;
  meta.dataset = data.name;
  meta.num_parts = parts;
  meta.num_nodes = n;
  meta.num_edges = graph.num_edges();
  meta.feature_dim = dim;
  meta.sparse_features = data.sparse();
  meta.num_classes = data.num_classes;
  meta.task = data.task;
  meta.num_outputs = has_class_ids(data.task) ? 0 : data.targets.cols();
  meta.edge_feature_dim = data.edge_feature_dim();
  meta.schema = data.schema;
  meta.has_labels = !data.labels.empty();
  meta.has_split = !data.split.empty();
  meta.method = method;
  meta.quality = evaluate_partition(graph, part, parts, data.split);
  meta.part_edges = meta.quality.part_edges;

  const relabelling ids = relabel(part, parts);
  meta.book = ids.book;
  replace_directory(dir, partition_store_kind, [&](directory_writer& out) {
    for (int p = 0; p < parts; ++p) {  // one part in memory at a time
      const graph_part part = st::part_of(data, ids, p);
      SAR_CHECK(part.in_edges.num_edges() == meta.part_edges[p], error, where,
                ": internal: part ", p, " edge count");
      st::write_part(out, part, where);
    }
    if (also) also(out);
    out.write_metadata(st::metadata_json(meta));
  }, where);
  return meta;
}

/// The quality of a partition from its relabelled parts, held by the ranks (`mine`: this
/// rank's parts, as sar::redistribute returns them; `parts` in all). Collective (one
/// all-reduce of 3 x parts + 1 counts).
template <communicator Comm>
partition_quality evaluate_parts(Comm& comm, const std::vector<graph_part>& mine, int parts) {
  std::vector<std::int64_t> counts(3 * static_cast<std::size_t>(parts) + 1, 0);  // nodes, edges, train; cut
  for (const graph_part& p : mine) {
    const auto k = static_cast<std::size_t>(p.part);
    counts[k] = p.num_local();
    counts[parts + k] = p.in_edges.num_edges();
    counts[2 * parts + k] = std::count(p.split.begin(), p.split.end(), node_split::train);
    const node_t begin = p.book.begin(p.part), end = p.book.end(p.part);
    for (node_t j : p.in_edges.columns) counts.back() += j < begin || j >= end;
  }
  comm.all_reduce(std::span<std::int64_t>(counts), reduce_op::sum);
  partition_quality q;
  q.num_parts = parts;
  q.part_nodes.assign(counts.begin(), counts.begin() + parts);
  q.part_edges.assign(counts.begin() + parts, counts.begin() + 2 * parts);
  q.part_train.assign(counts.begin() + 2 * parts, counts.end() - 1);
  q.num_nodes = std::accumulate(q.part_nodes.begin(), q.part_nodes.end(), node_t{0});
  q.num_edges = std::accumulate(q.part_edges.begin(), q.part_edges.end(), edge_t{0});
  q.edge_cut = counts.back();
  q.edge_cut_fraction = q.num_edges == 0 ? 0.0
                                         : static_cast<double>(q.edge_cut) / static_cast<double>(q.num_edges);
  q.node_balance = detail::balance_of(q.part_nodes);
  q.edge_balance = detail::balance_of(q.part_edges);
  q.train_balance = detail::balance_of(q.part_train);
  return q;
}

/// Writes the partition store `dir` from parts spread over the ranks (`mine`: this rank's, as
/// sar::redistribute returns them, parts [0, parts) in all): rank r writes its parts' file sets
/// into the new store, rank 0 checks the output first and writes meta.json last. The same
/// format, checksums and safe replacement (docs/safe-outputs.md) as the one-process
/// write_partition_store: the output must be on a file system every rank sees, and a failure on
/// any rank leaves the previous store intact on every rank. `about` gives the dataset's name,
/// feature_dim, num_classes, task, num_outputs, has_labels, has_split and method; the rest (sizes, ranges,
/// quality, manifest) is computed here; `also`, if given, writes further files on rank 0.
/// Returns the metadata written. Collective. Throws on every rank what failed on one:
/// sar::invalid_argument for a part that breaks the graph_part contract, sar::io_error naming
/// the path, ...
template <communicator Comm>
partition_metadata write_partition_store(Comm& comm, const std::vector<graph_part>& mine,
                                         int parts, partition_metadata about,
                                         const std::filesystem::path& dir,
                                         const std::function<void(directory_writer&)>& also = {}) {
  namespace st = detail::store;
  constexpr const char* where = "sar::write_partition_store";
  const int rank = comm.rank();
  std::exception_ptr failure;
  detail::guarded(failure, [&] {
    SAR_CHECK(rank != 0 || (!mine.empty() && mine.front().part == 0), invalid_argument, where,
              ": rank 0 must hold part 0 (sar::part_owner)");
    for (const graph_part& p : mine) {
      p.validate(where);
      SAR_CHECK(p.book.num_parts() == parts, invalid_argument, where, ": rank ", rank,
                " holds part ", p.part, " of a book of ", p.book.num_parts(), " parts, not ",
                parts);
    }
  });
  detail::agree_on_failure(comm, failure, where);
  about.num_parts = parts;
  // The parts' edge feature width (every part of a dataset with them has the columns), and
  // whether any holds sparse features and any dense ones (all must hold them alike).
  std::array<std::int64_t, 3> kinds{0, 0, 0};  // edge feature width, any sparse, any dense
  for (const graph_part& p : mine) {
    kinds[0] = std::max<std::int64_t>(kinds[0], p.edge_features.cols());
    kinds[p.sparse() ? 1 : 2] = 1;
  }
  comm.all_reduce(std::span<std::int64_t>(kinds), reduce_op::max);
  SAR_CHECK(kinds[1] == 0 || kinds[2] == 0, invalid_argument, where,  // alike on every rank
            ": some parts hold sparse features and some dense ones");
  about.edge_feature_dim = kinds[0];
  about.sparse_features = kinds[1] == 1;
  if (rank == 0) about.schema = mine.front().schema;  // every part has the dataset's
  about.quality = evaluate_parts(comm, mine, parts);
  about.part_edges = about.quality.part_edges;
  about.num_nodes = about.quality.num_nodes;
  about.num_edges = about.quality.num_edges;
  if (rank == 0) about.book = mine.front().book;

  // 1. Rank 0 checks the output and makes the temporary directory; every rank learns it.
  detail::replacement r;
  std::string shared;  // the temporary directory and its token
  if (rank == 0)
    detail::guarded(failure, [&] {
      r = detail::begin_replacement(dir, partition_store_kind, where);
      shared = r.temporary.string() + "\n" + r.token;
    });
  detail::agree_on_failure(comm, failure, where);
  broadcast_string(comm, shared, 0);
  const std::filesystem::path temporary = shared.substr(0, shared.find('\n'));
  const std::string token = shared.substr(shared.find('\n') + 1);

  // 2. Every rank writes its parts (its own journal) and flushes them.
  std::string written;
  std::optional<directory_writer> writer;
  detail::guarded(failure, [&] {
    writer.emplace(temporary, partition_store_kind, token, where,
                   std::string(detail::journal_prefix) + "-" + std::to_string(rank));
    for (const graph_part& p : mine) st::write_part(*writer, p, where);
    if (rank == 0 && also) also(*writer);
    writer->finish_share();
    written = writer->contents().to_json().dump();
  });
  const auto abandon = [&] {  // rank 0 removes the temporary directory
    std::error_code ec;
    if (rank == 0) std::filesystem::remove_all(temporary, ec);
  };
  try {
    detail::agree_on_failure(comm, failure, where);
  } catch (...) {
    abandon();
    throw;
  }

  // 3. Rank 0 lists every rank's files in meta.json, checks the whole, swaps it into place.
  const std::vector<std::string> contents = gather_strings(comm, written, 0);
  if (rank == 0)
    detail::guarded(failure, [&] {
      for (const std::string& text : contents)
        writer->merge(manifest::from_metadata(
            nlohmann::json{{"manifest", nlohmann::json::parse(text)}}, temporary.string()));
      writer->write_metadata(st::metadata_json(about));
      writer->finish();
      detail::sync_tree(temporary, where);
      writer.reset();
      detail::finish_replacement(r, partition_store_kind, where);
    });
  writer.reset();
  try {
    detail::agree_on_failure(comm, failure, where);
  } catch (...) {
    abandon();
    throw;
  }
  return about;
}

/// Reads and checks dir/meta.json. Throws sar::io_error naming the file and the problem if the
/// directory or file is missing, the JSON is malformed, a field is missing or has the wrong
/// type, the format version is not one this sar reads, the seal does not match the content
/// (version 3: an edited meta.json), or the sizes contradict each other.
inline partition_metadata read_partition_metadata(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  constexpr const char* where = "sar::read_partition_metadata";
  std::error_code ec;
  SAR_CHECK(fs::is_directory(dir, ec), io_error, where, ": missing directory ", dir.string());
  const fs::path file = dir / "meta.json";
  SAR_CHECK(fs::is_regular_file(file, ec), io_error, where, ": missing file ", file.string(),
            " (not a partition store, or an incomplete one)");
  std::ifstream in(file, std::ios::binary);
  SAR_CHECK(in.good(), io_error, where, ": cannot open ", file.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  partition_metadata m;
  m.identity = crc32_update(0, text.data(), text.size());
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    SAR_CHECK(j.is_object() && j.value("format", std::string()) == partition_store_kind.format,
              io_error, where, ": ", file.string(), " is not sar partition-store metadata");
    m.format_version = j.at("format_version").get<int>();
    SAR_CHECK(m.format_version >= partition_store_oldest_version &&
                  m.format_version <= partition_store_version,
              io_error, where, ": ", file.string(), " has format version ", m.format_version,
              "; this sar reads versions ", partition_store_oldest_version, " to ",
              partition_store_version);
    if (m.format_version >= 3) check_metadata_seal(j, file.string(), where);
    m.dataset = j.at("dataset").get<std::string>();
    m.num_parts = j.at("num_parts").get<int>();
    m.num_nodes = j.at("num_nodes").get<node_t>();
    m.num_edges = j.at("num_edges").get<edge_t>();
    m.feature_dim = j.at("feature_dim").get<std::int64_t>();
    m.num_classes = j.at("num_classes").get<std::int32_t>();
    if (m.format_version >= 4) {
      m.task = detail::task_in_metadata(j.at("task").get<std::string>(), file.string(), where);
      m.num_outputs = j.at("num_outputs").get<std::int64_t>();
    }
    if (m.format_version >= 5) m.edge_feature_dim = j.at("edge_feature_dim").get<std::int64_t>();
    if (m.format_version >= 7) m.sparse_features = j.at("sparse_features").get<bool>();
    if (m.format_version >= 6 && j.contains("schema")) {
      m.schema = schema_from_json(j.at("schema"), file.string());
      try {
        m.schema.validate(m.num_nodes, m.feature_dim, where);
      } catch (const invalid_argument& e) {
        throw io_error(message(file.string(), ": ", e.what()));
      }
    }
    SAR_CHECK(has_class_ids(m.task) == (m.num_outputs == 0) && m.num_outputs >= 0 &&
                  (has_class_ids(m.task) || m.num_classes == 0),
              io_error, where, ": ", file.string(), ": a ", task_name(m.task), " store with ",
              m.num_outputs, " outputs and ", m.num_classes, " classes");
    m.has_labels = j.at("has_labels").get<bool>();
    m.has_split = j.at("has_split").get<bool>();
    auto offsets = j.at("part_offsets").get<std::vector<node_t>>();
    m.part_edges = j.at("part_edges").get<std::vector<edge_t>>();
    m.method = j.value("method", std::string());
    SAR_CHECK(m.num_parts >= 1 && m.num_nodes >= 0 && m.num_edges >= 0 && m.feature_dim >= 0 &&
                  m.num_classes >= 0 && m.edge_feature_dim >= 0,
              io_error, where, ": ", file.string(), ": negative or zero size (num_parts ",
              m.num_parts, ", num_nodes ", m.num_nodes, ", num_edges ", m.num_edges, ")");
    SAR_CHECK(offsets.size() == static_cast<std::size_t>(m.num_parts) + 1 &&
                  m.part_edges.size() == static_cast<std::size_t>(m.num_parts),
              io_error, where, ": ", file.string(), ": part_offsets has ", offsets.size(),
              " entries and part_edges ", m.part_edges.size(), " for ", m.num_parts, " parts");
    SAR_CHECK(offsets.front() == 0 && offsets.back() == m.num_nodes &&
                  std::is_sorted(offsets.begin(), offsets.end()),
              io_error, where, ": ", file.string(),
              ": part_offsets must rise from 0 to num_nodes = ", m.num_nodes);
    edge_t total = 0;
    for (edge_t e : m.part_edges) {
      SAR_CHECK(e >= 0, io_error, where, ": ", file.string(), ": negative part_edges entry ", e);
      total += e;
    }
    SAR_CHECK(total == m.num_edges, io_error, where, ": ", file.string(), ": part_edges sum to ",
              total, ", num_edges is ", m.num_edges);
    m.book = partition_book(std::move(offsets));
    m.manifest =
        manifest::from_metadata(j, file.string(), partition_store_kind.legacy_checksums);
    if (j.contains("quality")) {
      const auto& q = j.at("quality");
      m.quality.num_parts = m.num_parts;
      m.quality.num_nodes = m.num_nodes;
      m.quality.num_edges = m.num_edges;
      m.quality.edge_cut = q.at("edge_cut").get<edge_t>();
      m.quality.edge_cut_fraction = q.at("edge_cut_fraction").get<double>();
      m.quality.node_balance = q.at("node_balance").get<double>();
      m.quality.edge_balance = q.at("edge_balance").get<double>();
      m.quality.train_balance = q.at("train_balance").get<double>();
      m.quality.part_nodes = q.value("part_nodes", std::vector<node_t>());
      m.quality.part_edges = q.value("part_edges", std::vector<edge_t>());
      m.quality.part_train = q.value("part_train", std::vector<node_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw io_error(message(where, ": ", file.string(), ": malformed metadata: ", e.what()));
  }
  return m;
}

/// Reads part `part` of the store `dir`: meta.json and that part's files only. Ensures the
/// result satisfies the graph_part contract (rows = local nodes, sorted columns = global
/// relabelled source ids in [0, num_nodes)). Throws sar::io_error naming the file and the
/// problem: missing directory or file, bad magic, version, element type, truncated or
/// over-long file, sizes inconsistent with meta.json, out-of-range contents, a CRC-32 that
/// differs from meta.json's (unless options.verify_checksums is false: in-range corruption
/// or a file of another store), or `part` outside [0, num_parts). A store's sparse features are
/// returned as sparse_features when options.sparse_features, else as dense features.
inline graph_part read_partition_part(const std::filesystem::path& dir, int part,
                                      partition_read_options options = {}) {
  namespace st = detail::store;
  constexpr const char* where = "sar::read_partition_part";
  const partition_metadata meta = read_partition_metadata(dir);
  SAR_CHECK(part >= 0 && part < meta.num_parts, io_error, where, ": part index ", part,
            " out of range: ", dir.string(), " has ", meta.num_parts, " parts");
  const auto pdir = partition_part_dir(dir, part);
  std::error_code ec;
  SAR_CHECK(std::filesystem::is_directory(pdir, ec), io_error, where, ": missing directory ",
            pdir.string());
  const node_t k = meta.book.size(part);
  const edge_t m = meta.part_edges[part];
  // Before anything of these sizes is allocated: meta.json declares them (sparse features'
  // entries are counted once their offsets are read).
  const bool dense_features = !meta.sparse_features || !options.sparse_features;
  const std::string sizes = message("part ", part, " (", k, " nodes, ", m, " edges, feature_dim ",
                                    meta.feature_dim, " in ", (dir / "meta.json").string(), ")");
  check_memory<io_error>(
      where, sizes,
      (8.0 + 4.0 * static_cast<double>(meta.edge_feature_dim) +
       (meta.schema.heterogeneous() ? 4.0 : 0.0)) * static_cast<double>(m) +
          static_cast<double>(k) *
              (8.0 * 3 + 5.0 +
               4.0 * static_cast<double>((dense_features ? meta.feature_dim : 0) +
                                         meta.num_outputs)));
  std::vector<std::pair<std::string, std::uint32_t>> checksums;  // (file, CRC-32) as read
  // Each file's header and size are checked against meta.json before its room is allocated.
  const auto read = [&](const char* file, std::uint64_t rows, std::uint64_t cols,
                        auto&& allocate) {
    checksums.emplace_back(file, st::read_array(pdir / file, meta.format_version, rows, cols,
                                                part, allocate, options.verify_checksums));
  };
  graph_part out;
  out.part = part;
  out.book = meta.book;
  out.num_classes = meta.num_classes;
  out.task = meta.task;
  out.schema = meta.schema;

  csr& g = out.in_edges;
  g.num_rows = k;
  g.num_cols = meta.num_nodes;
  // Reads `file`'s k + 1 offsets into `offsets`: from 0, never decreasing, and ending at `end`
  // (exact), else at most there. Throws sar::io_error naming the file, and `what` ends.
  const auto read_offsets = [&](const char* file, std::vector<edge_t>& offsets, double end,
                                bool exact, const std::string& what) {
    read(file, k + 1, 1, [&] {
      offsets.resize(static_cast<std::size_t>(k) + 1);
      return offsets.data();
    });
    const std::string path = (pdir / file).string();
    for (node_t r = 0; r < k; ++r)
      SAR_CHECK(offsets[r] <= offsets[r + 1], io_error, where, ": ", path,
                ": offsets decrease at row ", r);
    const auto last = static_cast<double>(offsets.back());
    SAR_CHECK(offsets.front() == 0 && (exact ? last == end : last <= end), io_error, where, ": ",
              path, ": offsets run from ", offsets.front(), " to ", offsets.back(), what);
  };
  read_offsets(st::offsets_file, g.offsets, static_cast<double>(m), true,
               message(", meta.json says ", m, " edges"));
  read(st::columns_file, m, 1, [&] {
    g.columns.resize(static_cast<std::size_t>(m));
    return g.columns.data();
  });
  for (edge_t e = 0; e < m; ++e)
    SAR_CHECK(g.columns[e] >= 0 && g.columns[e] < meta.num_nodes, io_error, where, ": ",
              (pdir / st::columns_file).string(), ": source id ", g.columns[e], " at edge ", e,
              " outside [0, ", meta.num_nodes, ")");

  if (meta.sparse_features) {
    sparse_rows<float>& x = out.sparse_features;
    x.num_rows = k;
    x.num_cols = meta.feature_dim;
    read_offsets(st::feature_offsets_file, x.offsets,
                 static_cast<double>(k) * static_cast<double>(meta.feature_dim), false,
                 message(" for ", k, " rows of ", meta.feature_dim, " features"));
    const edge_t entries = x.offsets.back();
    check_memory<io_error>(where, message(sizes, ": ", entries, " sparse feature entries"),
                           8.0 * static_cast<double>(entries));
    read(st::feature_columns_file, entries, 1, [&] {
      x.columns.resize(static_cast<std::size_t>(entries));
      return x.columns.data();
    });
    read(st::feature_values_file, entries, 1, [&] {
      x.values.resize(static_cast<std::size_t>(entries));
      return x.values.data();
    });
    try {
      x.validate(where);
    } catch (const invalid_argument& e) {
      throw io_error(message((pdir / st::feature_columns_file).string(), ": ", e.what()));
    }
    if (!options.sparse_features) {  // counted as dense features above
      out.features = to_dense<float>(x);
      x = {};
    } else {
      out.features.resize(k, 0);
    }
  } else {
    read(st::features_file, k, meta.feature_dim, [&] {
      out.features.resize(k, meta.feature_dim);
      return out.features.data();
    });
  }
  if (meta.edge_feature_dim > 0)
    read(st::edge_features_file, m, meta.edge_feature_dim, [&] {
      out.edge_features.resize(m, meta.edge_feature_dim);
      return out.edge_features.data();
    });

  if (meta.schema.heterogeneous()) {
    read(st::edge_types_file, m, 1, [&] {
      out.edge_types.resize(static_cast<std::size_t>(m));
      return out.edge_types.data();
    });
    for (edge_t e = 0; e < m; ++e)
      SAR_CHECK(out.edge_types[e] >= 0 && out.edge_types[e] < meta.schema.num_relations(),
                io_error, where, ": ", (pdir / st::edge_types_file).string(), ": relation ",
                out.edge_types[e], " at edge ", e, " outside [0, ", meta.schema.num_relations(), ")");
  }

  const std::size_t labels = meta.has_labels ? static_cast<std::size_t>(k) : 0;
  read(st::labels_file, labels, 1, [&] {
    out.labels.resize(labels);
    return out.labels.data();
  });
  for (std::size_t r = 0; r < out.labels.size(); ++r)
    SAR_CHECK(out.labels[r] >= -1 && out.labels[r] < meta.num_classes, io_error, where, ": ",
              (pdir / st::labels_file).string(), ": label ", out.labels[r], " of row ", r,
              " outside [-1, ", meta.num_classes, ")");

  if (!has_class_ids(meta.task)) {
    read(st::targets_file, k, meta.num_outputs, [&] {
      out.targets.resize(k, meta.num_outputs);
      return out.targets.data();
    });
    detail::check_target_values<io_error>(meta.task, out.targets, 0,
                                          message(where, ": ", (pdir / st::targets_file).string()),
                                          "row");
  }

  std::vector<std::uint8_t> split;
  read(st::split_file, meta.has_split ? k : 0, 1, [&] {
    split.resize(meta.has_split ? static_cast<std::size_t>(k) : 0);
    return split.data();
  });
  out.split.resize(split.size());
  for (std::size_t r = 0; r < split.size(); ++r) {
    SAR_CHECK(split[r] <= static_cast<std::uint8_t>(node_split::test), io_error, where, ": ",
              (pdir / st::split_file).string(), ": split code ", int(split[r]), " of row ", r,
              " is not 0..3");
    out.split[r] = static_cast<node_split>(split[r]);
  }

  read(st::original_ids_file, k, 1, [&] {
    out.original_ids.resize(static_cast<std::size_t>(k));
    return out.original_ids.data();
  });
  for (node_t r = 0; r < k; ++r)
    SAR_CHECK(out.original_ids[r] >= 0 && out.original_ids[r] < meta.num_nodes, io_error, where,
              ": ", (pdir / st::original_ids_file).string(), ": original id ",
              out.original_ids[r], " outside [0, ", meta.num_nodes, ")");
  // Last: the checks above name out-of-range values; this catches in-range corruption and
  // files of another store.
  if (options.verify_checksums)
    for (const auto& [file, crc] : checksums) {
      const std::string key = st::part_dir_name(part) + "/" + file;
      const auto listed = meta.manifest.crc32_of(key);
      SAR_CHECK(listed.has_value(), io_error, where, ": ", (dir / "meta.json").string(),
                " lists no checksum for ", key);
      check_crc32(where, (pdir / file).string(), crc, *listed, "store");
    }
  return out;
}

/// Parts [first, first + count) of the store `dir` read as one: the graph_part of one rank of
/// P = num_parts / count, each rank holding `count` consecutive parts (out-of-core training
/// visits them one by one: sar/train/out_of_core.hpp). The result is part first / count of the
/// store's book with every run of `count` parts joined; its rows, edges, features and
/// node data are the parts' in order. `breaks` (optional) gets the local row where each
/// non-empty part after the first non-empty one begins (increasing). Requires 1 <= count
/// dividing num_parts and first a multiple of count; throws sar::invalid_argument otherwise,
/// else as read_partition_part.
inline graph_part read_partition_parts(const std::filesystem::path& dir, int first, int count,
                                       partition_read_options options = {},
                                       std::vector<node_t>* breaks = nullptr) {
  const partition_metadata meta = read_partition_metadata(dir);
  SAR_CHECK(count >= 1 && meta.num_parts % count == 0 && first >= 0 && first % count == 0 &&
                first < meta.num_parts,
            invalid_argument, "sar::read_partition_parts: parts [", first, ", ", first + count,
            ") of the ", meta.num_parts, " of ", dir.string(), " are not one rank's of ",
            count > 0 ? meta.num_parts / count : 0,
            " (a run of count parts from a multiple of it)");
  if (breaks) breaks->clear();
  graph_part all = read_partition_part(dir, first, options);
  for (int p = first + 1; p < first + count; ++p) {
    graph_part next = read_partition_part(dir, p, options);
    if (breaks && all.num_local() > 0 && next.num_local() > 0)
      breaks->push_back(all.num_local());
    const edge_t edges = all.in_edges.num_edges();
    all.in_edges.columns.insert(all.in_edges.columns.end(), next.in_edges.columns.begin(),
                                next.in_edges.columns.end());
    for (std::size_t r = 1; r < next.in_edges.offsets.size(); ++r)
      all.in_edges.offsets.push_back(edges + next.in_edges.offsets[r]);
    all.in_edges.num_rows += next.in_edges.num_rows;
    const auto stack = [](matrixf& top, const matrixf& bottom) {
      if (bottom.rows() == 0) return;
      const Eigen::Index rows = top.rows();
      top.conservativeResize(rows + bottom.rows(), bottom.cols());
      top.bottomRows(bottom.rows()) = bottom;
    };
    stack(all.features, next.features);
    stack(all.targets, next.targets);
    stack(all.edge_features, next.edge_features);
    if (all.sparse()) {
      sparse_rows<float>& a = all.sparse_features;
      const sparse_rows<float>& b = next.sparse_features;
      const edge_t entries = a.non_zeros();
      for (std::size_t r = 1; r < b.offsets.size(); ++r)
        a.offsets.push_back(entries + b.offsets[r]);
      a.columns.insert(a.columns.end(), b.columns.begin(), b.columns.end());
      a.values.insert(a.values.end(), b.values.begin(), b.values.end());
      a.num_rows += b.num_rows;
    }
    const auto append = [](auto& to, const auto& from) {
      to.insert(to.end(), from.begin(), from.end());
    };
    append(all.labels, next.labels);
    append(all.split, next.split);
    append(all.original_ids, next.original_ids);
    append(all.edge_types, next.edge_types);
  }
  std::vector<node_t> offsets;
  for (int p = 0; p <= meta.num_parts; p += count) offsets.push_back(meta.book.begin(p));
  // begin(num_parts) is the end of the last part.
  all.book = partition_book(std::move(offsets));
  all.part = first / count;
  all.validate("sar::read_partition_parts");
  return all;
}

}  // namespace sar
