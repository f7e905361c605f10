// Which rank owns which global id. After relabelling, part p owns the contiguous range
// [offsets[p], offsets[p+1]) of global ids.
#pragma once

#include <algorithm>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/types.hpp"

namespace sar {

/// Which part owns which global id: part p owns the contiguous range
/// [offsets[p], offsets[p + 1]). The default book has no parts and no nodes.
class partition_book {
 public:
  partition_book() : offsets_{0} {}
  /// Requires offsets non-decreasing with offsets[0] = 0; throws sar::invalid_argument otherwise.
  explicit partition_book(std::vector<node_t> offsets) : offsets_(std::move(offsets)) {
    SAR_CHECK(!offsets_.empty() && offsets_.front() == 0, invalid_argument,
              "sar::partition_book: offsets must start at 0");
    SAR_CHECK(std::is_sorted(offsets_.begin(), offsets_.end()), invalid_argument,
              "sar::partition_book: offsets must not decrease");
  }

  /// Number of parts.
  int num_parts() const { return static_cast<int>(offsets_.size()) - 1; }
  /// Number of nodes of all parts.
  node_t num_nodes() const { return offsets_.back(); }
  /// First global id of `part`.
  node_t begin(int part) const { return offsets_[part]; }
  /// One past the last global id of `part`.
  node_t end(int part) const { return offsets_[part + 1]; }
  /// Number of nodes of `part`.
  node_t size(int part) const { return end(part) - begin(part); }
  /// The num_parts() + 1 range bounds.
  const std::vector<node_t>& offsets() const { return offsets_; }

  /// The part owning global id `id` (requires 0 <= id < num_nodes()); empty parts are skipped.
  int owner(node_t id) const {
    return static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), id) -
                            offsets_.begin()) - 1;
  }
  /// Same offsets.
  friend bool operator==(const partition_book&, const partition_book&) = default;

 private:
  std::vector<node_t> offsets_;
};

}  // namespace sar
