// Reading a SNAP-style edge list (plain or gzip) into a sar::edge_list.
#pragma once

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string_view>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/dataset.hpp"
#include "sar/graph/io/text.hpp"

namespace sar {

/// What one reader read of an edge list (read_edge_list_share).
struct edge_list_share {
  edge_list edges;         ///< the edges of the share, in file order; num_nodes as stated or -1
  node_t max_id = -1;      ///< the largest id in them (-1: none)
  std::int64_t max_line = 0;  ///< the line where max_id first appears
};

/// The edges of the chunks `share` keeps of the edge list `path` (format and errors: see
/// read_edge_list), with the largest id and its line, without the node-range rule (a reader
/// of a share cannot apply it alone). edges.num_nodes is num_nodes (-1 if not stated).
inline edge_list_share read_edge_list_share(const std::filesystem::path& path, node_t num_nodes,
                                            io::chunk_share share) {
  constexpr std::string_view function = "sar::read_edge_list";
  SAR_CHECK(num_nodes >= -1, invalid_argument, function, ": num_nodes = ", num_nodes,
            " (expected -1 or a node count)");
  struct chunk_edges {
    std::vector<node_t> src, dst;
    node_t max_id = -1;
    std::int64_t max_line = 0;  // where max_id first appears
  };
  io::line_reader reader(path, std::string(function));
  share.apply(reader);
  edge_list_share out;
  out.edges.num_nodes = num_nodes;
  io::parse_chunks<chunk_edges>(
      reader,
      [&](std::string_view text, std::int64_t first_line) {
        chunk_edges edges;
        io::for_each_line(text, first_line, [&](std::string_view raw, std::int64_t line) {
          const std::string_view content = io::trim(raw);
          if (content.empty() || content.front() == '#' || content.front() == '%') return;
          std::string_view tokens[2];
          const int count = io::split_whitespace(content, tokens, 2);
          if (count != 2)
            io::throw_parse_error(function, path, line,
                                  message("expected 2 whitespace-separated columns, got ", count),
                                  content);
          node_t ids[2];
          for (int c = 0; c < 2; ++c) {
            if (!io::parse_integer(tokens[c], ids[c]))
              io::throw_parse_error(function, path, line, "not an integer node id", tokens[c]);
            if (ids[c] < 0) io::throw_parse_error(function, path, line, "negative node id", tokens[c]);
            if (ids[c] == std::numeric_limits<node_t>::max())  // max id + 1 must fit
              io::throw_parse_error(function, path, line, "node id too large", tokens[c]);
            if (num_nodes >= 0 && ids[c] >= num_nodes)
              io::throw_parse_error(function, path, line,
                                    message("node id outside [0, ", num_nodes, ")"), tokens[c]);
          }
          edges.src.push_back(ids[0]);
          edges.dst.push_back(ids[1]);
          if (std::max(ids[0], ids[1]) > edges.max_id) {
            edges.max_id = std::max(ids[0], ids[1]);
            edges.max_line = line;
          }
        });
        return edges;
      },
      [&](chunk_edges& edges, std::string_view, std::int64_t) {
        out.edges.src.insert(out.edges.src.end(), edges.src.begin(), edges.src.end());
        out.edges.dst.insert(out.edges.dst.end(), edges.dst.begin(), edges.dst.end());
        if (edges.max_id > out.max_id) {
          out.max_id = edges.max_id;
          out.max_line = edges.max_line;
        }
      });
  return out;
}

/// The checks of read_edge_list over the whole file `path`, of whose shares `totals` totals
/// the readers' (whole_input_totals: one reader): the node count, num_nodes if stated (>= 0),
/// else the largest id + 1 and the mostly-empty range rule. Returns the node count. Throws
/// what read_edge_list throws for the range; collective where `totals` is.
template <class Totals>
node_t finish_edge_list(const edge_list_share& read, const std::filesystem::path& path,
                        node_t num_nodes, Totals& totals) {
  if (num_nodes >= 0) return num_nodes;
  const auto [max_id, line] = totals.max_with_line(read.max_id, read.max_line);
  const node_t n = max_id + 1;
  detail::check_mostly_used<node_t>(
      totals, n, {read.edges.src, read.edges.dst},
      message("sar::read_edge_list: ", path.string(), ": the largest node id, ", max_id,
              " (line ", line, "), makes ", n, " nodes"),
      "appear in an edge", "num_nodes", "--num-nodes");
  return n;
}

/// Reads the directed edges "src dst" of a SNAP-style edge list, one per line, in file order.
/// Format: ids are non-negative decimal integers (0-based) separated by spaces and/or tabs;
/// lines whose first non-blank character is '#' or '%' are comments; blank lines are skipped;
/// "\r\n" line ends and gzip compression (detected by magic bytes) are accepted. A third
/// column is an error: a weighted or timestamped list would be read as something else.
/// Requires: num_nodes >= -1. With num_nodes = -1 the node count is max id + 1 (0 if empty),
/// and refused if fewer than half of those ids appear in an edge (one stray id such as
/// 1000000 among 2708 nodes; dataset_sizes::num_nodes); state num_nodes to accept it.
/// Ensures: result.num_nodes as above; src/dst hold every edge as written (no symmetrising,
/// deduplication or self-loop change; see sar::build_csr for those).
/// Throws: sar::io_error "sar::read_edge_list: <file> line <n>: <problem> ("<token>")" for a
/// wrong column count, a non-integer token, a negative id or an id >= num_nodes; sar::io_error
/// naming the file and the line of the largest id for a mostly unused id range; sar::io_error
/// for a missing, unreadable or truncated file; sar::invalid_argument if num_nodes < -1.
inline edge_list read_edge_list(const std::filesystem::path& path, node_t num_nodes = -1) {
  edge_list_share read = read_edge_list_share(path, num_nodes, {});
  whole_input_totals totals;
  read.edges.num_nodes = finish_edge_list(read, path, num_nodes, totals);
  return std::move(read.edges);
}

}  // namespace sar
