// The files of an Open Graph Benchmark raw directory, in both layouts (homogeneous: ogb.hpp;
// heterogeneous, ogbn-mag's: ogb_hetero.hpp): the read options, finding and parsing the CSV
// files, and the share of them one reader takes. read_ogb_raw (ogb.hpp) reads a directory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/types.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/io/text.hpp"

namespace sar {

/// How read_ogb_raw builds the graph and which split it reads. A heterogeneous directory
/// (ogb_hetero.hpp) takes split_name and sizes only: its relations are directed and built as
/// written (build_typed_csr), so add_inverse_edges does not apply to it (add_reverse_relations
/// adds reverse relations on request), and deduplicate false or self_loops other than keep
/// are refused for it.
struct ogb_options {
  /// Add the reverse of every edge (OGB's add_inverse_edge): true for undirected datasets
  /// (ogbn-products, the Planetoid files in ../shared/data), false for ogbn-arxiv.
  bool add_inverse_edges = true;
  /// Merge parallel edges when building the CSR.
  bool deduplicate = true;
  /// What to do with self-loops when building the CSR.
  self_loop_policy self_loops = self_loop_policy::keep;
  /// Subdirectory of split/ to read; empty = the only one there (none: no split).
  std::string split_name{};
  /// Node and class counts the caller states (-1: from the files, refusing mostly empty
  /// ranges; see dataset_sizes).
  dataset_sizes sizes{};
  /// Keep node-feat as sparse_features when at most this fraction of its entries is
  /// non-zero (read row by row into sparse rows, never whole as a dense matrix); 0: always
  /// dense. Homogeneous read_ogb_raw only (the readers of shares read dense features).
  double sparse_below = 0;
};

namespace detail::ogb {

constexpr std::string_view function = "sar::read_ogb_raw";

/// <dir>/<stem>.csv.gz, or <dir>/<stem>.csv if only that exists; nullopt if neither does.
inline std::optional<std::filesystem::path> find_csv(const std::filesystem::path& dir,
                                                     const std::string& stem) {
  const auto gz = dir / (stem + ".csv.gz");
  if (std::filesystem::exists(gz)) return gz;
  const auto plain = dir / (stem + ".csv");
  if (std::filesystem::exists(plain)) return plain;
  return std::nullopt;
}

inline std::filesystem::path require_csv(const std::filesystem::path& dir, const std::string& stem) {
  auto found = find_csv(dir, stem);
  if (!found)
    throw io_error(message(function, ": missing file ", (dir / (stem + ".csv.gz")).string()));
  return *found;
}

/// Parses one line of bounds.size() comma-separated node ids, column c's in [0, bounds[c]),
/// into ids[]. Throws sar::io_error naming the file, line and token of a malformed id, one out
/// of range or another column count.
inline void parse_ids(std::string_view line, std::int64_t number, const std::filesystem::path& file,
                      std::span<const node_t> bounds, node_t* ids) {
  const int count = static_cast<int>(bounds.size());
  int column = 0;
  const char* p = line.data();
  const char* const end = p + line.size();
  for (;;) {
    const char* q = p;
    while (q != end && *q != ',') ++q;
    const std::string_view field = io::trim(std::string_view(p, static_cast<std::size_t>(q - p)));
    if (column < count) {
      node_t& id = ids[column];
      if (field.empty()) io::throw_parse_error(function, file, number, "empty node id", line);
      if (!io::parse_integer(field, id))
        io::throw_parse_error(function, file, number, "not an integer node id", field);
      if (id < 0) io::throw_parse_error(function, file, number, "negative node id", field);
      if (id >= bounds[static_cast<std::size_t>(column)])
        io::throw_parse_error(function, file, number,
                              message("node id outside [0, ",
                                      bounds[static_cast<std::size_t>(column)], ")"),
                              field);
    }
    ++column;
    if (q == end) break;
    p = q + 1;
  }
  if (column != count)
    io::throw_parse_error(function, file, number,
                          message("expected ", count, count == 1 ? " column" : " comma-separated columns",
                                  ", got ", column),
                          io::trim(line));
}

/// Parses one feature row of exactly `width` comma-separated numbers into out[0, width).
inline void parse_feature_row(std::string_view line, std::int64_t number,
                              const std::filesystem::path& file, float* out, std::int64_t width) {
  std::int64_t column = 0;
  const char* p = line.data();
  const char* const end = p + line.size();
  for (;;) {  // a plain loop: fields are short, so a memchr call per field would dominate
    const char* q = p;
    while (q != end && *q != ',') ++q;
    if (column < width) {
      const std::string_view field = io::trim(std::string_view(p, static_cast<std::size_t>(q - p)));
      if (!io::parse_float(field, out[column]))
        io::throw_parse_error(function, file, number,
                              message(field.empty() ? "empty field" : "not a number", " in column ",
                                      column + 1),
                              field);
    }
    ++column;
    if (q == end) break;
    p = q + 1;
  }
  if (column != width)
    io::throw_parse_error(function, file, number,
                          message("expected ", width, " comma-separated columns, got ", column),
                          io::trim(line));
}

/// Throws sar::io_error unless `file` (node-feat or node-label: one line per node) can hold
/// the n lines that `count_file` declares (of `unit`: "nodes", "'paper' nodes"): each line
/// takes at least 2 bytes, and gzip expands at most 1032-fold (deflate's limit). Checked
/// before anything of size n is allocated, so a declared count of 1e9 beside small files
/// fails at once.
inline void check_line_capacity(const std::filesystem::path& file, std::int64_t n,
                                const std::filesystem::path& count_file,
                                const std::string& unit = "nodes") {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(file, ec);
  if (ec) return;  // reading it will report the problem
  const bool gzip = io::input_file(file, std::string(function)).compressed();
  const std::uint64_t most = (bytes * (gzip ? 1032 : 1) + 1) / 2;
  SAR_CHECK(static_cast<std::uint64_t>(n) <= most, io_error, function, ": ",
            count_file.string(), " declares ", n, " ", unit, ", but ", file.string(), " (", bytes,
            " bytes", gzip ? ", gzip" : "", ") can hold at most ", most,
            " lines of one node each");
}

/// The single non-negative integer of a num-*-list file (blank lines after it are ignored).
inline std::int64_t read_count(const std::filesystem::path& file) {
  io::line_reader reader(file, std::string(function));
  std::string_view line;
  std::optional<std::int64_t> count;
  while (reader.next_line(line)) {
    const std::string_view content = io::trim(line);
    if (count) {
      if (!content.empty())
        io::throw_parse_error(function, file, reader.line_number(),
                              "expected a single number (one graph), found another line", content);
      continue;
    }
    std::int64_t value = 0;
    if (!io::parse_integer(content, value) || value < 0)
      io::throw_parse_error(function, file, reader.line_number(),
                            "expected a single non-negative integer", content);
    count = value;
  }
  if (!count) io::throw_parse_error(function, file, 1, "empty file, expected a single number", "");
  return *count;
}

/// Reads one split file of ids in [0, n) into split[id - first] for the ids in
/// [first, first + split.size()) (the others are checked and passed over), refusing a node
/// already in a split.
inline void read_split(const std::filesystem::path& file, node_split which, node_t n, node_t first,
                       std::span<node_split> split) {
  static constexpr const char* names[] = {"none", "train", "valid", "test"};
  const node_t last = first + static_cast<node_t>(split.size());
  io::line_reader reader(file, std::string(function));
  io::parse_chunks<std::vector<node_t>>(
      reader,
      [&](std::string_view text, std::int64_t first_line) {
        std::vector<node_t> ids;
        io::for_each_line(text, first_line, [&](std::string_view line, std::int64_t number) {
          node_t id = 0;
          parse_ids(line, number, file, std::span(&n, 1), &id);
          ids.push_back(id);
        });
        return ids;
      },
      [&](std::vector<node_t>& ids, std::string_view, std::int64_t first_line) {
        for (std::size_t k = 0; k < ids.size(); ++k) {
          if (ids[k] < first || ids[k] >= last) continue;
          node_split& slot = split[static_cast<std::size_t>(ids[k] - first)];
          if (slot != node_split::none)
            io::throw_parse_error(
                function, file, first_line + static_cast<std::int64_t>(k),
                message("node ", ids[k], " is already in the ",
                        names[static_cast<int>(slot)], " split"),
                std::to_string(ids[k]));
          slot = which;
        }
      });
}

/// Whether a chunk of `lines` lines from line first_line (line i + 1 is row i) holds a row of
/// `ranges` (sorted, disjoint).
inline bool chunk_has_rows(std::span<const io::row_range> ranges, std::int64_t first_line,
                           std::int64_t lines) {
  const std::int64_t first = first_line - 1, last = first + lines;  // the chunk's rows
  const auto hit = std::upper_bound(
      ranges.begin(), ranges.end(), first,
      [](std::int64_t row, const io::row_range& r) { return row < r.end; });
  return hit != ranges.end() && hit->begin < last;
}

/// Makes `reader` of a file with one line per row (line i + 1 is row i) pass over the chunks
/// without a line of the rows in `ranges` (sorted, disjoint; they must outlive the reader's
/// use).
inline void keep_rows(io::line_reader& reader, std::span<const io::row_range> ranges) {
  reader.keep_chunks([ranges](std::int64_t, std::int64_t first_line, std::int64_t lines) {
    return chunk_has_rows(ranges, first_line, lines);
  });
}

/// keep_rows of the rows [first, last).
inline void keep_rows(io::line_reader& reader, node_t first, node_t last) {
  reader.keep_chunks([rows = io::row_range{first, last}](std::int64_t, std::int64_t first_line,
                                                         std::int64_t lines) {
    return rows.size() > 0 && chunk_has_rows(std::span(&rows, 1), first_line, lines);
  });
}

/// Throws sar::io_error unless the per-node file `file`, whose reader ended at `lines` lines,
/// has exactly n: "<file> line <l>: file ends after <lines> <what>, but <count_file> says n
/// nodes", or "more <what> than the n nodes" at line n + 1.
inline void check_line_count(const std::filesystem::path& file, std::int64_t lines, node_t n,
                             const char* what, const std::filesystem::path& count_file,
                             const char* unit = "nodes") {
  if (lines > n)
    throw io_error(message(function, ": ", file.string(), " line ", n + 1, ": more ", what,
                           " than the ", n, " ", unit, " in ", count_file.string()));
  if (lines < n)
    throw io_error(message(function, ": ", file.string(), " line ", lines, ": file ends after ",
                           lines, " ", what, ", but ", count_file.string(), " says ", n, " ",
                           unit));
}

/// A label: an integer >= -1, an integral float such as "3.0", or "nan" (= -1, unlabelled).
inline std::int32_t parse_label(std::string_view line, std::int64_t number,
                                const std::filesystem::path& file) {
  const std::string_view field = io::trim(line);
  if (field.find(',') != std::string_view::npos)
    io::throw_parse_error(function, file, number,
                          "expected 1 column (one label per node; a multi-label dataset is read "
                          "as the task multilabel: --task multilabel)", field);
  if (field.size() == 3 && (field[0] | 0x20) == 'n' && (field[1] | 0x20) == 'a' &&
      (field[2] | 0x20) == 'n')
    return -1;
  std::int64_t value = 0;
  if (!io::parse_integer(field, value)) {
    double real = 0;
    if (!io::parse_double(field, real) || !(real == static_cast<double>(static_cast<std::int64_t>(real))))
      io::throw_parse_error(function, file, number,
                            field.empty() ? "empty label" : "label is not an integer or nan", field);
    value = static_cast<std::int64_t>(real);
  }
  if (value < -1 || value >= std::numeric_limits<std::int32_t>::max())
    io::throw_parse_error(function, file, number, "label outside [-1, 2^31 - 1)", field);
  return static_cast<std::int32_t>(value);
}

/// The width of the rows of the per-node file `file` (of n lines, n from `count_file`): the
/// fields of its first line, `first_line`. Throws sar::io_error naming line 1 when n is 0.
inline std::int64_t row_width(const std::filesystem::path& file, std::string_view first_line,
                              node_t n, const std::filesystem::path& count_file,
                              const std::string& what) {
  if (n == 0)
    io::throw_parse_error(function, file, 1,
                          message("more ", what, " rows than the 0 nodes in ", count_file.string()),
                          io::trim(first_line));
  return static_cast<std::int64_t>(std::count(first_line.begin(), first_line.end(), ',')) + 1;
}

/// Reads the rows in `ranges` (sorted, disjoint, within [0, n)) of the per-node (unit
/// "edges": per-edge) file `file` of n lines of equally many comma-separated numbers (the
/// width of line 1) into out (resized by `allocate`(what, bytes, f)), range after range; row
/// i is line i + 1. `what` names a row in errors ("feature": "more feature rows than the n
/// nodes in <count_file>"). Throws sar::io_error naming the file and line of a malformed row,
/// a row of another width, or a line count other than n.
template <class Allocate>
void read_rows(const std::filesystem::path& file, node_t n, std::span<const io::row_range> ranges,
               const std::filesystem::path& count_file, const std::string& what, matrixf& out,
               Allocate&& allocate, const char* unit = "nodes") {
  std::vector<std::int64_t> starts{0};  // the output row of each range's first row
  for (const io::row_range& r : ranges) starts.push_back(starts.back() + r.size());
  const std::int64_t rows = starts.back();
  const auto out_row = [&](std::int64_t row) -> std::int64_t {  // -1: a row not read
    const auto hit = std::upper_bound(
        ranges.begin(), ranges.end(), row,
        [](std::int64_t x, const io::row_range& r) { return x < r.end; });
    if (hit == ranges.end() || hit->begin > row) return -1;
    return starts[static_cast<std::size_t>(hit - ranges.begin())] + row - hit->begin;
  };
  io::line_reader reader(file, std::string(function));
  std::string_view first_line_text;
  if (reader.next_line(first_line_text)) {
    const std::int64_t width = row_width(file, first_line_text, n, count_file, what);
    allocate(message("the ", width, " ", what, "s"), 4.0 * static_cast<double>(rows) * width,
             [&] { out.resize(rows, width); });
    if (const std::int64_t at = out_row(0); at >= 0)
      parse_feature_row(first_line_text, 1, file, out.data() + at * width, width);
    keep_rows(reader, ranges);
    io::parse_chunks<int>(  // rows written in place, in parallel
        reader,
        [&](std::string_view text, std::int64_t chunk_first_line) {
          io::for_each_line(text, chunk_first_line, [&](std::string_view line, std::int64_t number) {
            const std::int64_t row = number - 1;
            if (row >= n)
              io::throw_parse_error(function, file, number,
                                    message("more ", what, " rows than the ", n, " ", unit,
                                            " in ", count_file.string()),
                                    io::trim(line));
            if (const std::int64_t at = out_row(row); at >= 0)
              parse_feature_row(line, number, file, out.data() + at * width, width);
          });
          return 0;
        },
        [](int&, std::string_view, std::int64_t) {});
  }
  check_line_count(file, reader.line_number(), n, (what + " rows").c_str(), count_file, unit);
}

/// read_rows of the rows [first, last).
template <class Allocate>
void read_rows(const std::filesystem::path& file, node_t n, node_t first, node_t last,
               const std::filesystem::path& count_file, const std::string& what, matrixf& out,
               Allocate&& allocate, const char* unit = "nodes") {
  const io::row_range rows{first, last};
  read_rows(file, n, std::span(&rows, 1), count_file, what, out,
            std::forward<Allocate>(allocate), unit);
}

/// read_rows of the whole file (rows [0, n)) into sparse rows: each line is parsed as
/// read_rows parses it and only its non-zero entries are kept, so the dense matrix never
/// exists. Same throws.
inline void read_sparse_rows(const std::filesystem::path& file, node_t n,
                             const std::filesystem::path& count_file, const std::string& what,
                             sparse_rows<float>& out) {
  struct rows_read {  // the non-zeros of consecutive lines, and where each line's end
    std::vector<edge_t> ends;
    std::vector<std::int32_t> columns;
    std::vector<float> values;
  };
  out = sparse_rows<float>{};
  io::line_reader reader(file, std::string(function));
  std::string_view first_line_text;
  if (reader.next_line(first_line_text)) {
    const std::int64_t width = row_width(file, first_line_text, n, count_file, what);
    if (width > INT32_MAX)
      io::throw_parse_error(function, file, 1, message(width, " columns (at most 2^31 - 1)"), "");
    out.num_cols = width;
    const auto parse = [&](rows_read& r, std::vector<float>& row, std::string_view line,
                           std::int64_t number) {
      row.resize(static_cast<std::size_t>(width));
      parse_feature_row(line, number, file, row.data(), width);
      for (std::int64_t c = 0; c < width; ++c)
        if (row[c] != 0.0f) {
          r.columns.push_back(static_cast<std::int32_t>(c));
          r.values.push_back(row[c]);
        }
      r.ends.push_back(static_cast<edge_t>(r.columns.size()));
    };
    const auto append = [&](const rows_read& r) {
      const auto base = static_cast<edge_t>(out.columns.size());
      for (const edge_t end : r.ends) out.offsets.push_back(base + end);
      out.columns.insert(out.columns.end(), r.columns.begin(), r.columns.end());
      out.values.insert(out.values.end(), r.values.begin(), r.values.end());
    };
    rows_read head;
    std::vector<float> row;
    parse(head, row, first_line_text, 1);
    append(head);
    io::parse_chunks<rows_read>(  // lines parsed in parallel, appended in file order
        reader,
        [&](std::string_view text, std::int64_t chunk_first_line) {
          rows_read r;
          std::vector<float> buffer;
          io::for_each_line(text, chunk_first_line, [&](std::string_view line, std::int64_t number) {
            if (number > n)
              io::throw_parse_error(function, file, number,
                                    message("more ", what, " rows than the ", n, " nodes in ",
                                            count_file.string()),
                                    io::trim(line));
            parse(r, buffer, line, number);
          });
          return r;
        },
        [&](rows_read& r, std::string_view, std::int64_t) { append(r); });
  }
  check_line_count(file, reader.line_number(), n, (what + " rows").c_str(), count_file);
  out.num_rows = n;
  out.columns.shrink_to_fit();
  out.values.shrink_to_fit();
}

/// Throws sar::io_error naming the file, line and column of the first of `targets` (rows of
/// `file` from row `first`) that a `task` target may not hold (not finite; multilabel: not 0
/// or 1).
inline void check_targets(const std::filesystem::path& file, task_kind task, node_t first,
                          const matrixf& targets) {
  const std::ptrdiff_t bad = detail::first_invalid_target(task, targets.data(), targets.size());
  if (bad < 0) return;
  const Eigen::Index row = bad / targets.cols(), column = bad % targets.cols();
  io::throw_parse_error(function, file, first + row + 1,
                        message("the target in column ", column + 1, " is not ",
                                target_rule(task)),
                        message(targets(row, column)));
}

/// The name of the dataset in `dir`: the directory's own name (a trailing slash ignored).
inline std::string dataset_name(const std::filesystem::path& dir) {
  std::filesystem::path named = std::filesystem::absolute(dir).lexically_normal();
  if (!named.has_filename()) named = named.parent_path();
  return named.filename().string();
}

/// Appends the edges of `file` ("src,dst" per line: the source in [0, bounds[0]), the
/// destination in [0, bounds[1])) that `share` keeps to src and dst, in file order, and their
/// indices in the file (edge k on line k + 1) to `ranges` (io::append_rows). A whole
/// share refuses, at its line, an edge beyond the `expected` ones that `count_file` declares
/// (expected < 0: no declared count). Returns the file's line count. Throws sar::io_error
/// naming the file, line and token of a malformed line or an id out of range.
inline std::int64_t read_edge_file(const std::filesystem::path& file,
                                   std::span<const node_t, 2> bounds,
                                   const io::chunk_share& share, std::int64_t expected,
                                   const std::filesystem::path& count_file,
                                   std::vector<node_t>& src, std::vector<node_t>& dst,
                                   std::vector<io::row_range>& ranges) {
  struct chunk_edges {
    std::vector<node_t> src, dst;
  };
  const auto before = static_cast<std::int64_t>(src.size());
  io::line_reader reader(file, std::string(function));
  share.apply(reader);
  io::parse_chunks<chunk_edges>(
      reader,
      [&](std::string_view text, std::int64_t first_line) {
        chunk_edges chunk;
        io::for_each_line(text, first_line, [&](std::string_view line, std::int64_t number) {
          node_t ids[2];
          parse_ids(line, number, file, bounds, ids);
          chunk.src.push_back(ids[0]);
          chunk.dst.push_back(ids[1]);
        });
        return chunk;
      },
      [&](chunk_edges& chunk, std::string_view, std::int64_t first_line) {
        const std::int64_t read = static_cast<std::int64_t>(src.size()) - before;
        if (share.whole() && expected >= 0 &&
            read + static_cast<std::int64_t>(chunk.src.size()) > expected) {
          const std::int64_t k = expected - read;  // index of the first extra edge
          io::throw_parse_error(function, file, first_line + k,
                                message("more edges than the ", expected, " in ",
                                        count_file.string()),
                                std::to_string(chunk.src[k]) + "," + std::to_string(chunk.dst[k]));
        }
        src.insert(src.end(), chunk.src.begin(), chunk.src.end());
        dst.insert(dst.end(), chunk.dst.begin(), chunk.dst.end());
        io::append_rows(ranges, first_line - 1,
                        first_line - 1 + static_cast<std::int64_t>(chunk.src.size()));
      });
  return reader.line_number();
}

/// Throws sar::io_error "<file> line <lines>: file ends after <edges> edges, but <count_file>
/// says <expected>" unless the edges read from `file` are the `expected` ones (< 0: nothing
/// declared).
inline void check_edge_count(const std::filesystem::path& file, std::int64_t lines,
                             std::int64_t edges, std::int64_t expected,
                             const std::filesystem::path& count_file) {
  if (expected >= 0 && edges != expected)
    throw io_error(message(function, ": ", file.string(), " line ", lines, ": file ends after ",
                           edges, " edges, but ", count_file.string(), " says ", expected));
}

/// The largest label read and the first line holding it (label -1: none).
struct label_maximum {
  std::int32_t label = -1;
  std::int64_t line = 0;
};

/// Reads rows [first, first + labels.size()) of the label file `file` (line i + 1: the label
/// of row i, see parse_label) into labels; `count_file` declares its n lines (of `unit`). A
/// label must be below `stated_classes` if that is >= 0. Returns the largest label read.
/// Throws sar::io_error naming the file and line of a malformed label, one at or above the
/// stated classes, or a line count other than n.
inline label_maximum read_labels(const std::filesystem::path& file, node_t n, node_t first,
                                 std::span<std::int32_t> labels, std::int32_t stated_classes,
                                 const std::filesystem::path& count_file,
                                 const std::string& unit = "nodes") {
  const node_t last = first + static_cast<node_t>(labels.size());
  label_maximum largest;
  io::line_reader reader(file, std::string(function));
  keep_rows(reader, first, last);
  io::parse_chunks<label_maximum>(
      reader,
      [&](std::string_view text, std::int64_t first_line) {
        label_maximum chunk;
        io::for_each_line(text, first_line, [&](std::string_view line, std::int64_t number) {
          const std::int64_t row = number - 1;
          if (row >= n)
            io::throw_parse_error(function, file, number,
                                  message("more labels than the ", n, " ", unit, " in ",
                                          count_file.string()),
                                  io::trim(line));
          if (row < first || row >= last) return;
          const std::int32_t label = parse_label(line, number, file);
          if (stated_classes >= 0 && label >= stated_classes)
            io::throw_parse_error(function, file, number,
                                  message("label outside [-1, ", stated_classes,
                                          ") (num_classes = ", stated_classes, ")"),
                                  io::trim(line));
          labels[static_cast<std::size_t>(row - first)] = label;
          if (label > chunk.label) chunk = {label, number};
        });
        return chunk;
      },
      [&](label_maximum& chunk, std::string_view, std::int64_t) {
        if (chunk.label > largest.label) largest = chunk;
      });
  check_line_count(file, reader.line_number(), n, "labels", count_file, unit.c_str());
  return largest;
}

/// Sets data.num_classes to the largest label + 1 (`largest`, of all readers, found in
/// `file`), refusing a mostly empty class range among data.labels as `totals` totals them
/// (detail::check_mostly_used; sar::io_error naming the file and the label's line).
template <class Totals>
void count_classes(graph_dataset& data, const label_maximum& largest,
                   const std::filesystem::path& file, Totals& totals) {
  data.num_classes = largest.label + 1;
  detail::check_mostly_used<std::int32_t>(
      totals, data.num_classes, {data.labels},
      message(function, ": ", file.string(), ": the largest label, ", largest.label, " (line ",
              largest.line, "), makes ", data.num_classes, " classes"),
      "have a node", "num_classes", "--num-classes");
}

/// The split directory of `dir` to read: split/<split_name>, or with an empty name the only
/// subdirectory of split/ (an empty path: no split/ directory or nothing in it). Throws
/// sar::io_error for a named split that is missing, or several to choose between (listing
/// them).
inline std::filesystem::path split_directory(const std::filesystem::path& dir,
                                             const std::string& split_name) {
  namespace fs = std::filesystem;
  const fs::path split_root = dir / "split";
  if (!split_name.empty()) {
    const fs::path named = split_root / split_name;
    if (!fs::is_directory(named))
      throw io_error(message(function, ": missing split directory ", named.string()));
    return named;
  }
  if (!fs::is_directory(split_root)) return {};
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(split_root))
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  if (names.size() > 1) {
    std::string list;
    for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
    throw io_error(message(function, ": ", split_root.string(), " holds several splits (", list,
                           "); choose one with ogb_options::split_name"));
  }
  return names.empty() ? fs::path() : split_root / names.front();
}

/// Reads the split directory `split_dir` ({train,valid,test}.csv[.gz] of ids in [0, n), all
/// three required) into split[id - first] for the ids in [first, first + split.size()).
inline void read_splits(const std::filesystem::path& split_dir, node_t n, node_t first,
                        std::span<node_split> split) {
  read_split(require_csv(split_dir, "train"), node_split::train, n, first, split);
  read_split(require_csv(split_dir, "valid"), node_split::valid, n, first, split);
  read_split(require_csv(split_dir, "test"), node_split::test, n, first, split);
}

/// The rows of the edges in `ranges` (indices in `edge_file`, which has `edges` lines) of the
/// per-edge file `file` (one row of equally many numbers per edge line), range after range.
/// Throws sar::io_error as read_rows does.
inline matrixf read_edge_rows(const std::filesystem::path& file, std::int64_t edges,
                              std::span<const io::row_range> ranges,
                              const std::filesystem::path& edge_file) {
  matrixf rows;
  read_rows(
      file, edges, ranges, edge_file, "edge feature", rows,
      [&](const std::string& what, double bytes, auto&& allocate) {
        allocate_checked(function, message(what, " of the ", edges, " edges in ",
                                           edge_file.string()), bytes, allocate);
      },
      "edges");
  return rows;
}

}  // namespace detail::ogb

/// Whether `dir` is an OGB heterogeneous raw directory: it has raw/num-node-dict.csv[.gz]
/// (ogbn-mag's layout; read_ogb_raw reads both layouts).
inline bool is_ogb_heterogeneous(const std::filesystem::path& dir) {
  return detail::ogb::find_csv(dir / "raw", "num-node-dict").has_value();
}

/// What one reader of an OGB raw directory takes: rows [first, last) of the per-node files
/// (last -1: to the end) and the chunks `edges` keeps of raw/edge.csv.gz.
struct ogb_share {
  node_t first = 0;                ///< first row of the per-node files
  node_t last = -1;                ///< one past the last row; -1 = the node count
  io::chunk_share edges{};         ///< the share of the edge file
};

}  // namespace sar
