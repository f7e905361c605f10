// Reading a square sparse matrix in Matrix Market coordinate format (plain or gzip) as a graph.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/io/text.hpp"

namespace sar {

namespace detail {
inline std::string mtx_lower_case(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace detail

/// What one reader read of a Matrix Market file (read_matrix_market_share).
struct matrix_market_share {
  edge_list edges;             ///< the share's entries as edges (mirrors of a symmetric file
                               ///< after them); num_nodes = the order
  std::int64_t announced = 0;  ///< the entry count of the size line
  std::int64_t entries = 0;    ///< the entries in the share
  std::int64_t size_line = 0;  ///< the size line's number
  std::string size_text;       ///< and its text
};

/// The banner and size line of the Matrix Market file `path` and the entries of the chunks
/// `share` keeps (format and errors: see read_matrix_market), without the checks a reader of
/// a share cannot make alone: the entry count against the size line (whole() shares check
/// more entries than announced at the first extra one) and the node-range rule.
inline matrix_market_share read_matrix_market_share(const std::filesystem::path& path,
                                                    node_t num_nodes, io::chunk_share share) {
  constexpr std::string_view function = "sar::read_matrix_market";
  SAR_CHECK(num_nodes >= -1, invalid_argument, function, ": num_nodes = ", num_nodes,
            " (expected -1 or a node count)");
  io::line_reader reader(path, std::string(function));
  share.apply(reader);
  auto fail = [&](std::int64_t line, std::string_view what, std::string_view token) {
    io::throw_parse_error(function, path, line, what, token);
  };

  // 1. Banner.
  std::string_view line;
  if (!reader.next_line(line))
    fail(1, "empty file, expected a \"%%MatrixMarket matrix coordinate ...\" banner", "");
  std::string_view banner[5];
  const int banner_tokens = io::split_whitespace(line, banner, 5);
  if (banner_tokens < 1 || detail::mtx_lower_case(banner[0]) != "%%matrixmarket")
    fail(1, "bad banner, expected \"%%MatrixMarket matrix coordinate <field> <symmetry>\"",
         io::trim(line));
  if (banner_tokens != 5)
    fail(1, message("bad banner, expected 5 words, got ", banner_tokens), io::trim(line));
  const std::string object = detail::mtx_lower_case(banner[1]);
  const std::string format = detail::mtx_lower_case(banner[2]);
  const std::string field = detail::mtx_lower_case(banner[3]);
  const std::string symmetry = detail::mtx_lower_case(banner[4]);
  if (object != "matrix") fail(1, "unsupported object (only \"matrix\")", banner[1]);
  if (format != "coordinate")
    fail(1, "unsupported format (only \"coordinate\"; dense \"array\" is not a graph)", banner[2]);
  const bool pattern = field == "pattern";
  const bool integer = field == "integer";
  if (!pattern && !integer && field != "real" && field != "double")
    fail(1, "unsupported field (only pattern, integer, real)", banner[3]);
  const bool symmetric = symmetry == "symmetric";
  if (!symmetric && symmetry != "general")
    fail(1, "unsupported symmetry (only general, symmetric)", banner[4]);

  // 2. Size line, after comments and blank lines.
  std::string_view size_tokens[3];
  std::string size_text;
  std::int64_t size_line = 0;
  for (;;) {
    if (!reader.next_line(line))
      fail(reader.line_number() + 1, "file ends before the size line \"rows columns entries\"", "");
    const std::string_view content = io::trim(line);
    if (content.empty() || content.front() == '%') continue;
    size_text = content;
    size_line = reader.line_number();
    break;
  }
  if (io::split_whitespace(size_text, size_tokens, 3) != 3)
    fail(size_line, "bad size line, expected \"rows columns entries\"", size_text);
  std::int64_t rows = 0, cols = 0, entries = 0;
  if (!io::parse_integer(size_tokens[0], rows) || rows < 0)
    fail(size_line, "bad row count in the size line", size_tokens[0]);
  if (!io::parse_integer(size_tokens[1], cols) || cols < 0)
    fail(size_line, "bad column count in the size line", size_tokens[1]);
  if (!io::parse_integer(size_tokens[2], entries) || entries < 0)
    fail(size_line, "bad entry count in the size line", size_tokens[2]);
  if (rows != cols)
    fail(size_line, message("matrix is not square (", rows, " rows, ", cols,
                            " columns), so it is not a graph"),
         size_text);
  if (num_nodes >= 0 && rows != num_nodes)
    fail(size_line, message("the matrix has order ", rows, ", but num_nodes is ", num_nodes),
         size_text);

  // 3. Entries, parsed in parallel chunks.
  const int expected_columns = pattern ? 2 : 3;
  auto is_entry = [](std::string_view raw) {
    const std::string_view content = io::trim(raw);
    return !content.empty() && content.front() != '%';
  };
  struct chunk_entries {
    std::vector<node_t> src, dst;
  };
  matrix_market_share read;
  read.announced = entries;
  read.size_line = size_line;
  read.size_text = size_text;
  edge_list& out = read.edges;
  out.num_nodes = rows;
  out.src.reserve(static_cast<std::size_t>(std::min<std::int64_t>(entries / share.count, 1 << 24)));
  out.dst.reserve(out.src.capacity());
  std::int64_t seen = 0;
  io::parse_chunks<chunk_entries>(
      reader,
      [&](std::string_view text, std::int64_t first_line) {
        chunk_entries chunk;
        io::for_each_line(text, first_line, [&](std::string_view raw, std::int64_t number) {
          if (!is_entry(raw)) return;
          const std::string_view content = io::trim(raw);
          std::string_view tokens[3];
          const int count = io::split_whitespace(content, tokens, 3);
          if (count != expected_columns)
            fail(number, message("expected ", expected_columns, " columns for a ", field,
                                 " entry, got ", count),
                 content);
          std::int64_t index[2];
          for (int c = 0; c < 2; ++c) {
            if (!io::parse_integer(tokens[c], index[c]))
              fail(number, c == 0 ? "row index is not an integer" : "column index is not an integer",
                   tokens[c]);
            if (index[c] < 1 || index[c] > rows)
              fail(number, message(c == 0 ? "row" : "column", " index outside [1, ", rows, "]"),
                   tokens[c]);
          }
          if (integer) {
            std::int64_t value = 0;
            if (!io::parse_integer(tokens[2], value)) fail(number, "value is not an integer", tokens[2]);
          } else if (!pattern) {
            double value = 0;
            if (!io::parse_double(tokens[2], value)) fail(number, "value is not a real number", tokens[2]);
          }
          chunk.src.push_back(index[1] - 1);
          chunk.dst.push_back(index[0] - 1);
        });
        return chunk;
      },
      [&](chunk_entries& chunk, std::string_view text, std::int64_t first_line) {
        const auto count = static_cast<std::int64_t>(chunk.src.size());
        if (share.whole() && seen + count > entries) {  // find the first extra entry's line for the message
          std::int64_t index = seen;
          io::for_each_line(text, first_line, [&](std::string_view raw, std::int64_t number) {
            if (is_entry(raw) && index++ == entries)
              fail(number, message("more entries than the ", entries, " announced on line ",
                                   size_line),
                   io::trim(raw));
          });
        }
        seen += count;
        out.src.insert(out.src.end(), chunk.src.begin(), chunk.src.end());
        out.dst.insert(out.dst.end(), chunk.dst.begin(), chunk.dst.end());
      });
  read.entries = seen;
  if (symmetric) {
    const std::size_t stored = out.size();
    for (std::size_t k = 0; k < stored; ++k)
      if (out.src[k] != out.dst[k]) out.push_back(out.dst[k], out.src[k]);
  }
  return read;
}

/// The checks of read_matrix_market over the whole file `path`, of whose shares `totals`
/// totals the readers' (whole_input_totals: one reader): the entry count against the size
/// line, and unless num_nodes is stated (>= 0) the mostly-empty range rule. Throws what
/// read_matrix_market throws for them; collective where `totals` is.
template <class Totals>
void finish_matrix_market(const matrix_market_share& read, const std::filesystem::path& path,
                          node_t num_nodes, Totals& totals) {
  const std::int64_t entries = totals.sum(read.entries);
  if (entries != read.announced)
    io::throw_parse_error("sar::read_matrix_market", path, read.size_line,
                          message("the size line announces ", read.announced,
                                  " entries but the file has ", entries),
                          read.size_text);
  if (num_nodes < 0)
    detail::check_mostly_used<node_t>(
        totals, read.edges.num_nodes, {read.edges.src, read.edges.dst},
        message("sar::read_matrix_market: ", path.string(), ": the size line (line ",
                read.size_line, ") declares a matrix of order ", read.edges.num_nodes),
        "appear in an entry", "num_nodes", "--num-nodes");
}

/// Reads a Matrix Market file "%%MatrixMarket matrix coordinate <field> <symmetry>" as a graph.
/// Supported: field pattern, integer, real (or double); symmetry general or symmetric. Values
/// are checked to be numbers of the field, then dropped (edge_list has no weights). Keywords
/// are case-insensitive; '%' comment lines and blank lines may appear after the banner.
/// Entry (i, j), 1-based, means row i has column j: in sar's in-edge convention the edge
/// j -> i, stored as src = j - 1, dst = i - 1. For "symmetric" the mirror (i -> j) of every
/// off-diagonal entry is added after all entries as stored; entries above the diagonal are
/// accepted too (a mirrored duplicate is left for build_csr's deduplication).
/// Requires: num_nodes >= -1 (dataset_sizes::num_nodes). With num_nodes = -1 a matrix whose
/// entries touch fewer than half of its rows and columns (an order of 1000000 for a graph of
/// 2708 nodes) is refused; a stated num_nodes must equal the order.
/// Ensures: result.num_nodes = the matrix order; edges in file order, then mirrors.
/// Throws: sar::io_error "sar::read_matrix_market: <file> line <n>: <problem> ("<token>")" for
/// a bad banner, an unsupported object/format/field/symmetry (array, complex, hermitian,
/// skew-symmetric), a malformed or non-square size line, an order other than a stated
/// num_nodes, an entry with the wrong number of columns, a non-numeric token, an index outside
/// [1, order], more entries than announced (at the first extra one) or fewer (at the size
/// line); sar::io_error naming the file and the size line for a mostly unused order;
/// sar::io_error for a missing, unreadable or truncated file; sar::invalid_argument if
/// num_nodes < -1.
inline edge_list read_matrix_market(const std::filesystem::path& path, node_t num_nodes = -1) {
  matrix_market_share read = read_matrix_market_share(path, num_nodes, {});
  whole_input_totals totals;
  finish_matrix_market(read, path, num_nodes, totals);
  return std::move(read.edges);
}

}  // namespace sar
