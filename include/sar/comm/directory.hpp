// The distributed directory: values of an array over ids [0, n) that no rank holds whole.
// Rank r holds the values of the ids in its range [book.begin(r), book.end(r)) of a
// partition_book (ownership is a range lookup, never an array of n entries); any rank may ask
// for the values of any ids, answered by two all-to-alls. This is how the distributed paths map
// a dataset id to a new id, a part or a row (sar/partition/redistribute.hpp, ...).
//
//   std::vector<std::int64_t> parts = sar::directory_lookup(comm, book, my_parts, sources);
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "sar/comm/communicator.hpp"
#include "sar/core/error.hpp"
#include "sar/core/types.hpp"
#include "sar/partition/partition_book.hpp"

namespace sar {

/// The values of `ids` (any ids in [0, book.num_nodes()), repeats allowed, any order), where
/// this rank holds `local_values` for its range [book.begin(rank), book.end(rank)).
/// Each distinct id travels once: the ids are sorted and made unique first, so asking for the
/// sources of every edge costs the number of distinct sources, not of edges.
/// Requires book.num_parts() == comm.size() and local_values of this rank's range size.
/// Collective. Throws sar::invalid_argument naming the rank for an id out of range or a
/// local_values of the wrong size.
template <communicator Comm>
std::vector<std::int64_t> directory_lookup(Comm& comm, const partition_book& book,
                                           std::span<const std::int64_t> local_values,
                                           std::span<const node_t> ids) {
  constexpr const char* where = "sar::directory_lookup";
  const int size = comm.size(), rank = comm.rank();
  SAR_CHECK(book.num_parts() == size, invalid_argument, where, ": the book has ",
            book.num_parts(), " ranges for ", size, " ranks");
  SAR_CHECK(static_cast<node_t>(local_values.size()) == book.size(rank), invalid_argument, where,
            ": rank ", rank, " holds ", local_values.size(), " values for its ", book.size(rank),
            " ids");
  std::vector<node_t> unique(ids.begin(), ids.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  SAR_CHECK(unique.empty() || (unique.front() >= 0 && unique.back() < book.num_nodes()),
            invalid_argument, where, ": rank ", rank, " asks for id ",
            unique.empty() ? 0 : (unique.front() < 0 ? unique.front() : unique.back()),
            " outside [0, ", book.num_nodes(), ")");
  // Sorted ids fall into the owners' ranges in order: one bucket per owner, no reordering.
  std::vector<std::vector<std::int64_t>> asked(static_cast<std::size_t>(size));
  for (node_t id : unique) asked[static_cast<std::size_t>(book.owner(id))].push_back(id);
  std::vector<std::vector<std::int64_t>> questions = all_to_all_vectors(comm, asked);
  const node_t first = book.begin(rank);
  for (auto& from_peer : questions)
    for (auto& id : from_peer) id = local_values[static_cast<std::size_t>(id - first)];
  const std::vector<std::vector<std::int64_t>> answers = all_to_all_vectors(comm, questions);
  std::vector<std::int64_t> unique_values;
  unique_values.reserve(unique.size());
  for (const auto& from_owner : answers)
    unique_values.insert(unique_values.end(), from_owner.begin(), from_owner.end());
  std::vector<std::int64_t> out(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k)
    out[k] = unique_values[static_cast<std::size_t>(
        std::lower_bound(unique.begin(), unique.end(), ids[k]) - unique.begin())];
  return out;
}

/// The block book of n ids over `ranks`: rank r owns [r*n/ranks, (r+1)*n/ranks) (sizes differ
/// by at most one), as partition_contiguous splits them. Requires n >= 0, ranks >= 1.
inline partition_book block_book(node_t n, int ranks) {
  SAR_CHECK(n >= 0 && ranks >= 1, invalid_argument, "sar::block_book: ", n, " ids over ", ranks,
            " ranks");
  std::vector<node_t> offsets(static_cast<std::size_t>(ranks) + 1);
  for (int r = 0; r <= ranks; ++r)
    offsets[static_cast<std::size_t>(r)] =
        static_cast<node_t>(static_cast<__int128>(n) * r / ranks);
  return partition_book(std::move(offsets));
}

}  // namespace sar
