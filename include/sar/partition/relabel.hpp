// Relabelling: new global ids such that every part owns one contiguous range.
#pragma once

#include <vector>

#include "sar/core/types.hpp"
#include "sar/partition/partition_book.hpp"
#include "sar/partition/partitioners.hpp"

namespace sar {

/// What relabel() returns: the new global ids and the ranges they give each part.
struct relabelling {
  std::vector<node_t> new_of_old;  ///< original id -> relabelled id
  std::vector<node_t> old_of_new;  ///< relabelled id -> original id
  partition_book book;             ///< part p owns relabelled ids [book.begin(p), book.end(p))
};

/// Relabels so part p owns the contiguous range [book.begin(p), book.end(p)); parts appear in
/// order 0, 1, ..., and inside a part nodes keep the order of their original ids, so the result
/// is a deterministic function of `part`. Empty parts get empty ranges.
/// Requires parts >= 1 and every part[i] in [0, parts); throws sar::invalid_argument otherwise.
/// Ensures new_of_old and old_of_new are inverse permutations of [0, part.size()).
inline relabelling relabel(const std::vector<int>& part, int parts) {
  const auto n = static_cast<node_t>(part.size());
  validate_partition(part, n, parts, "sar::relabel");
  std::vector<node_t> offsets(static_cast<std::size_t>(parts) + 1, 0);
  for (int p : part) ++offsets[p + 1];
  for (int p = 0; p < parts; ++p) offsets[p + 1] += offsets[p];
  relabelling out;
  out.new_of_old.resize(part.size());
  out.old_of_new.resize(part.size());
  std::vector<node_t> cursor(offsets.begin(), offsets.end() - 1);
  for (node_t i = 0; i < n; ++i) {  // serial, in original order: stable within each part
    const node_t id = cursor[part[i]]++;
    out.new_of_old[i] = id;
    out.old_of_new[id] = i;
  }
  out.book = partition_book(std::move(offsets));
  return out;
}

}  // namespace sar
