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
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "sar/core/checksum.hpp"
#include "sar/core/error.hpp"
#include "sar/core/log.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/safe_directory.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/partition/partition_book.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/relabel.hpp"

namespace sar {

/// A partition store as sar::replace_directory recognises it.
inline constexpr directory_kind partition_store_kind{"sar-partition-store", "meta.json",
                                                     "meta.json part-*"};

/// Version of the store layout (meta.json "format_version" and every binary file header).
/// 2: meta.json lists a CRC-32 of every file.
inline constexpr int partition_store_version = 2;

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
  /// Number of classes.
  std::int32_t num_classes = 0;
  bool has_labels = false;        ///< false: every part's labels are empty
  bool has_split = false;         ///< false: every part's split is empty
  partition_book book;            ///< relabelled id ranges of all parts
  std::vector<edge_t> part_edges; ///< in-edges stored by each part
  std::string method;             ///< how the partition was made (free text, e.g. "metis seed=0")
  partition_quality quality;      ///< edge cut and balance of the partition
  /// CRC-32 (zlib) of every file, header included, by path relative to the store
  /// ("part-0001/features.bin"): a corrupt file, or one copied from another store, is caught.
  std::map<std::string, std::uint32_t> checksums;
  /// CRC-32 of meta.json itself: the store's identity, which every rank of a run compares.
  std::uint32_t identity = 0;
};

/// How read_partition_part reads. verify_checksums false skips the CRC-32 of every file
/// (bench/RESULTS.md §12 measures what it costs).
struct partition_read_options {
  /// Check the CRC-32 of every file (false skips it).
  bool verify_checksums = true;
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
inline constexpr const char* labels_file = "labels.bin";
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

/// Reads a binary file whose header must say (type, rows, cols, part) and whose size must be
/// exactly header + payload, into `out` (rows * cols elements). Returns the file's CRC-32 if
/// `with_checksum`, else 0. Throws sar::io_error naming the file and what is wrong.
template <class T>
std::uint32_t read_array(const std::filesystem::path& path, std::uint64_t rows,
                         std::uint64_t cols, int part, T* out, bool with_checksum) {
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
  SAR_CHECK(h.version == static_cast<std::uint32_t>(partition_store_version), io_error, where,
            ": ", path.string(), " has format version ", h.version, ", expected ",
            partition_store_version);
  SAR_CHECK(h.type == static_cast<std::uint32_t>(element_type_of<T>()), io_error, where, ": ",
            path.string(), " holds ", element_type_name(h.type), " elements, expected ",
            element_type_name(static_cast<std::uint32_t>(element_type_of<T>())));
  SAR_CHECK(h.part == part, io_error, where, ": ", path.string(), " belongs to part ", h.part,
            ", expected part ", part);
  SAR_CHECK(h.rows == rows && h.cols == cols, io_error, where, ": ", path.string(), " is ", h.rows,
            " x ", h.cols, " but meta.json implies ", rows, " x ", cols);
  const std::uint64_t payload = rows * cols * sizeof(T);
  SAR_CHECK(size - sizeof(file_header) >= payload, io_error, where, ": ", path.string(),
            " is truncated (", size, " bytes, expected ", sizeof(file_header) + payload, ")");
  SAR_CHECK(size - sizeof(file_header) == payload, io_error, where, ": ", path.string(), " has ",
            size - sizeof(file_header) - payload, " unexpected trailing bytes");
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
/// The parts and meta.json of write_partition_store, into the (new, empty) directory out.
inline void write_parts(const graph_dataset& data, const relabelling& ids,
                        const partition_metadata& meta, const std::filesystem::path& out,
                        const char* where) {
  namespace fs = std::filesystem;
  namespace st = sar::detail::store;
  const csr& graph = data.graph;
  const std::int64_t dim = meta.feature_dim;
  std::error_code ec;
  nlohmann::json checksums = nlohmann::json::object();
  for (int p = 0; p < meta.num_parts; ++p) {
    const node_t lo = ids.book.begin(p);
    const node_t k = ids.book.size(p);
    const fs::path pdir = partition_part_dir(out, p);
    fs::create_directories(pdir, ec);
    SAR_CHECK(!ec, io_error, where, ": cannot create directory ", pdir.string(), ": ",
              ec.message());

    std::vector<node_t> original(ids.old_of_new.begin() + lo, ids.old_of_new.begin() + lo + k);
    std::vector<edge_t> offsets(static_cast<std::size_t>(k) + 1, 0);
    for (node_t r = 0; r < k; ++r) offsets[r + 1] = offsets[r] + graph.degree(original[r]);
    SAR_CHECK(offsets.back() == meta.part_edges[p], error, where, ": internal: part ", p,
              " edge count");
    std::vector<node_t> columns(static_cast<std::size_t>(offsets.back()));
    tbb::parallel_for(tbb::blocked_range<node_t>(0, k), [&](const auto& range) {
      for (node_t r = range.begin(); r != range.end(); ++r) {
        auto to = columns.begin() + offsets[r];
        for (node_t j : graph.row(original[r])) *to++ = ids.new_of_old[j];
        std::sort(columns.begin() + offsets[r], to);
      }
    });
    const std::string prefix = st::part_dir_name(p) + "/";
    checksums[prefix + st::offsets_file] = st::write_vector(pdir / st::offsets_file, offsets, p);
    checksums[prefix + st::columns_file] = st::write_vector(pdir / st::columns_file, columns, p);
    columns = {};

    {  // features, streamed row by row from the dataset (no copy of the part's block)
      st::writer w(pdir / st::features_file, st::element_type::float32, k, dim, p);
      for (node_t r = 0; r < k && dim > 0; ++r)
        w.write(data.features.data() + original[r] * dim, dim * sizeof(float));
      checksums[prefix + st::features_file] = w.close();
    }
    std::vector<std::int32_t> labels;
    if (meta.has_labels)
      for (node_t old : original) labels.push_back(data.labels[old]);
    checksums[prefix + st::labels_file] = st::write_vector(pdir / st::labels_file, labels, p);
    std::vector<std::uint8_t> split;
    if (meta.has_split)
      for (node_t old : original) split.push_back(static_cast<std::uint8_t>(data.split[old]));
    checksums[prefix + st::split_file] = st::write_vector(pdir / st::split_file, split, p);
    checksums[prefix + st::original_ids_file] =
        st::write_vector(pdir / st::original_ids_file, original, p);
    log(log_level::debug, message(where, ": wrote ", pdir.string(), " (", k, " nodes, ",
                                  offsets.back(), " edges)"));
  }

  nlohmann::json j = {
      {"format", partition_store_kind.format},
      {"format_version", partition_store_version},
      {"dataset", meta.dataset},
      {"num_parts", meta.num_parts},
      {"num_nodes", meta.num_nodes},
      {"num_edges", meta.num_edges},
      {"feature_dim", meta.feature_dim},
      {"num_classes", meta.num_classes},
      {"has_labels", meta.has_labels},
      {"has_split", meta.has_split},
      {"part_offsets", meta.book.offsets()},
      {"part_edges", meta.part_edges},
      {"method", meta.method},
      {"quality", st::quality_to_json(meta.quality)},
      {"checksums", checksums},
  };
  write_json_file(out / "meta.json", j, where);
}
}  // namespace detail::store

/// Writes `data`, partitioned by `part` (each in [0, parts); parts may be empty), to the store
/// directory `dir`: nodes are relabelled with sar::relabel, then each part's file set is written,
/// one part at a time, and meta.json last. Peak extra memory: the relabelling (2 ids per node)
/// plus one part. `method` is recorded in meta.json as free text.
/// The store is written as sar::replace_directory writes (a temporary sibling swapped into
/// place): `dir` is created if missing; a partition store there is replaced only once the new
/// one is complete; any other non-empty directory is refused and left untouched.
/// Returns the metadata written. Throws sar::invalid_argument for an invalid dataset or
/// partition, sar::io_error naming the path for any file-system failure.
inline partition_metadata write_partition_store(const graph_dataset& data,
                                                const std::vector<int>& part, int parts,
                                                const std::filesystem::path& dir,
                                                const std::string& method = "unspecified") {
  namespace fs = std::filesystem;
  namespace st = detail::store;
  constexpr const char* where = "sar::write_partition_store";
  data.validate(where);
  const node_t n = data.num_nodes();
  validate_partition(part, n, parts, where);
  const csr& graph = data.graph;
  const std::int64_t dim = data.features.rows() == n ? data.features.cols() : 0;

  partition_metadata meta;
  meta.dataset = data.name;
  meta.num_parts = parts;
  meta.num_nodes = n;
  meta.num_edges = graph.num_edges();
  meta.feature_dim = dim;
  meta.num_classes = data.num_classes;
  meta.has_labels = !data.labels.empty();
  meta.has_split = !data.split.empty();
  meta.method = method;
  meta.quality = evaluate_partition(graph, part, parts, data.split);
  meta.part_edges = meta.quality.part_edges;

  const relabelling ids = relabel(part, parts);
  meta.book = ids.book;
  replace_directory(dir, partition_store_kind, [&](const fs::path& out) {
    st::write_parts(data, ids, meta, out, where);
  }, where);
  return meta;
}

/// Reads and checks dir/meta.json. Throws sar::io_error naming the file and the problem if the
/// directory or file is missing, the JSON is malformed, a field is missing or has the wrong
/// type, the format version differs, or the sizes contradict each other.
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
    SAR_CHECK(m.format_version == partition_store_version, io_error, where, ": ", file.string(),
              " has format version ", m.format_version, ", expected ", partition_store_version);
    m.dataset = j.at("dataset").get<std::string>();
    m.num_parts = j.at("num_parts").get<int>();
    m.num_nodes = j.at("num_nodes").get<node_t>();
    m.num_edges = j.at("num_edges").get<edge_t>();
    m.feature_dim = j.at("feature_dim").get<std::int64_t>();
    m.num_classes = j.at("num_classes").get<std::int32_t>();
    m.has_labels = j.at("has_labels").get<bool>();
    m.has_split = j.at("has_split").get<bool>();
    auto offsets = j.at("part_offsets").get<std::vector<node_t>>();
    m.part_edges = j.at("part_edges").get<std::vector<edge_t>>();
    m.method = j.value("method", std::string());
    SAR_CHECK(m.num_parts >= 1 && m.num_nodes >= 0 && m.num_edges >= 0 && m.feature_dim >= 0 &&
                  m.num_classes >= 0,
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
    m.checksums = j.at("checksums").get<std::map<std::string, std::uint32_t>>();
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
/// or a file of another store), or `part` outside [0, num_parts).
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
  // Before anything of these sizes is allocated: meta.json declares them.
  check_memory<io_error>(
      where, message("part ", part, " (", k, " nodes, ", m, " edges, feature_dim ",
                     meta.feature_dim, " in ", (dir / "meta.json").string(), ")"),
      8.0 * static_cast<double>(m) +
          static_cast<double>(k) * (8.0 * 2 + 4.0 * static_cast<double>(meta.feature_dim) + 5.0));
  std::vector<std::pair<std::string, std::uint32_t>> checksums;  // (file, CRC-32) as read
  const auto read = [&]<class T>(const char* file, std::uint64_t rows, std::uint64_t cols,
                                 T* data) {
    checksums.emplace_back(file, st::read_array(pdir / file, rows, cols, part, data,
                                                options.verify_checksums));
  };
  graph_part out;
  out.part = part;
  out.book = meta.book;
  out.num_classes = meta.num_classes;

  csr& g = out.in_edges;
  g.num_rows = k;
  g.num_cols = meta.num_nodes;
  g.offsets.assign(static_cast<std::size_t>(k) + 1, 0);
  read(st::offsets_file, k + 1, 1, g.offsets.data());
  for (node_t r = 0; r < k; ++r)
    SAR_CHECK(g.offsets[r] <= g.offsets[r + 1], io_error, where, ": ",
              (pdir / st::offsets_file).string(), ": offsets decrease at row ", r);
  SAR_CHECK(g.offsets.front() == 0 && g.offsets.back() == m, io_error, where, ": ",
            (pdir / st::offsets_file).string(), ": offsets run from ", g.offsets.front(), " to ",
            g.offsets.back(), ", meta.json says ", m, " edges");
  g.columns.resize(static_cast<std::size_t>(m));
  read(st::columns_file, m, 1, g.columns.data());
  for (edge_t e = 0; e < m; ++e)
    SAR_CHECK(g.columns[e] >= 0 && g.columns[e] < meta.num_nodes, io_error, where, ": ",
              (pdir / st::columns_file).string(), ": source id ", g.columns[e], " at edge ", e,
              " outside [0, ", meta.num_nodes, ")");

  out.features.resize(k, meta.feature_dim);
  read(st::features_file, k, meta.feature_dim, out.features.data());

  out.labels.resize(meta.has_labels ? static_cast<std::size_t>(k) : 0);
  read(st::labels_file, out.labels.size(), 1, out.labels.data());
  for (std::size_t r = 0; r < out.labels.size(); ++r)
    SAR_CHECK(out.labels[r] >= -1 && out.labels[r] < meta.num_classes, io_error, where, ": ",
              (pdir / st::labels_file).string(), ": label ", out.labels[r], " of row ", r,
              " outside [-1, ", meta.num_classes, ")");

  std::vector<std::uint8_t> split(meta.has_split ? static_cast<std::size_t>(k) : 0);
  read(st::split_file, split.size(), 1, split.data());
  out.split.resize(split.size());
  for (std::size_t r = 0; r < split.size(); ++r) {
    SAR_CHECK(split[r] <= static_cast<std::uint8_t>(node_split::test), io_error, where, ": ",
              (pdir / st::split_file).string(), ": split code ", int(split[r]), " of row ", r,
              " is not 0..3");
    out.split[r] = static_cast<node_split>(split[r]);
  }

  out.original_ids.resize(static_cast<std::size_t>(k));
  read(st::original_ids_file, k, 1, out.original_ids.data());
  for (node_t r = 0; r < k; ++r)
    SAR_CHECK(out.original_ids[r] >= 0 && out.original_ids[r] < meta.num_nodes, io_error, where,
              ": ", (pdir / st::original_ids_file).string(), ": original id ",
              out.original_ids[r], " outside [0, ", meta.num_nodes, ")");
  // Last: the checks above name out-of-range values; this catches in-range corruption and
  // files of another store.
  if (options.verify_checksums)
    for (const auto& [file, crc] : checksums) {
      const std::string key = st::part_dir_name(part) + "/" + file;
      const auto listed = meta.checksums.find(key);
      SAR_CHECK(listed != meta.checksums.end(), io_error, where, ": ",
                (dir / "meta.json").string(), " lists no checksum for ", key);
      check_crc32(where, (pdir / file).string(), crc, listed->second, "store");
    }
  return out;
}

}  // namespace sar
