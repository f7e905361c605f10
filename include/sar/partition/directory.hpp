// The distributed directory: values of an array over ids [0, n) that no rank holds whole.
// Rank r holds the values of the ids in its range [book.begin(r), book.end(r)) of a
// partition_book (ownership is a range lookup, never an array of n entries); any rank may ask
// for the values of any ids, answered by two all-to-alls. This is how the distributed paths map
// a dataset id to a new id, a part or a row (sar/partition/redistribute.hpp, ...).
//
//   std::vector<std::int64_t> parts = sar::directory_lookup(comm, book, my_parts, sources);
//
// sar::id_directory builds such an array from (key, value) pairs that any rank may hold
// (rank r keeps the keys of its block of block_book(n, P)), e.g. dataset id -> relabelled id
// from the ranks' parts, or out-degrees summed from every rank's edges.
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

/// A map from the ids [0, n) to int64 values that no rank holds whole: rank r keeps the values
/// of its block [r n / P, (r + 1) n / P) (block_book), any rank looks values up (two
/// all-to-alls).
class id_directory {
 public:
  /// How the constructor combines the pairs of a key.
  enum class pairs {
    unique,  ///< every key in [0, n) given exactly once (a map such as a permutation)
    summed,  ///< any number of times, values summed (a key never given: 0), e.g. degrees
  };

  id_directory() = default;
  /// From the (keys[k], values[k]) pairs of every rank. Collective. Throws
  /// sar::invalid_argument naming a rank and the key for a key outside [0, n), and with
  /// pairs::unique for a key given twice or never (the same verdict on every rank).
  template <communicator Comm>
  id_directory(Comm& comm, node_t n, std::span<const std::int64_t> keys,
               std::span<const std::int64_t> values, pairs how)
      : book_(block_book(n, comm.size())) {
    constexpr const char* where = "sar::id_directory";
    const int rank = comm.rank();
    SAR_CHECK(keys.size() == values.size(), invalid_argument, where, ": ", keys.size(),
              " keys and ", values.size(), " values");
    std::int64_t bad = -1;
    std::vector<std::vector<std::int64_t>> outgoing(static_cast<std::size_t>(comm.size()));
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (keys[k] < 0 || keys[k] >= n) {
        bad = keys[k];
        break;
      }
      auto& bucket = outgoing[static_cast<std::size_t>(book_.owner(keys[k]))];
      bucket.push_back(keys[k]);
      bucket.push_back(values[k]);
    }
    SAR_CHECK(min_max_over_ranks(comm, bad < 0 ? 0 : 1).second == 0, invalid_argument, where, ": ",
              bad >= 0 ? message("rank ", rank, " gives key ", bad)
                       : std::string("another rank gives a key"),
              " outside [0, ", n, ")");
    const node_t first = book_.begin(rank);
    values_.assign(static_cast<std::size_t>(book_.size(rank)), 0);
    std::vector<std::uint8_t> given(how == pairs::unique ? values_.size() : 0, 0);
    std::int64_t problem = -1;
    for (const auto& from_peer : all_to_all_vectors(comm, outgoing))
      for (std::size_t k = 0; k < from_peer.size(); k += 2) {
        const auto slot = static_cast<std::size_t>(from_peer[k] - first);
        values_[slot] += from_peer[k + 1];
        if (how == pairs::unique && given[slot]++ > 0 && problem < 0) problem = from_peer[k];
      }
    if (how == pairs::unique && problem < 0)
      for (std::size_t slot = 0; slot < given.size() && problem < 0; ++slot)
        if (given[slot] == 0) problem = first + static_cast<node_t>(slot);
    SAR_CHECK(min_max_over_ranks(comm, problem < 0 ? 0 : 1).second == 0, invalid_argument, where, ": the keys are not each of [0, ", n,
              ") once", problem >= 0 ? message(" (key ", problem, ", kept by rank ", rank, ")")
                                     : std::string());
  }

  /// The values of `ids` (any ids in [0, n), repeats allowed). Collective.
  template <communicator Comm>
  std::vector<std::int64_t> lookup(Comm& comm, std::span<const node_t> ids) const {
    return directory_lookup(comm, book_, std::span<const std::int64_t>(values_), ids);
  }
  /// Bytes this rank keeps.
  std::size_t memory_bytes() const { return values_.capacity() * sizeof(std::int64_t); }

 private:
  partition_book book_;
  std::vector<std::int64_t> values_;
};

}  // namespace sar
