// Scalar and matrix vocabulary shared by every part of sar.
#pragma once

#include <cstdint>
#include <functional>

#include <Eigen/Core>

namespace sar {

/// A node id: global (after relabelling, rank p owns [lo_p, hi_p)) or local to a rank.
using node_t = std::int64_t;
/// An edge offset into a CSR; 64-bit so a rank may hold more than 2^31 edges.
using edge_t = std::int64_t;

/// Node features and activations: one row per node, row-major so a node's row is contiguous
/// (rows are what travel between ranks).
template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using column_vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using row_vector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

using matrixf = matrix<float>;
using matrixd = matrix<double>;

/// Rows of a matrix<T> (a matrix, a Map of the caller's memory, a block of rows) passed
/// without a copy: what kernels, layers and schedules take at non-template boundaries.
template <class T>
using rows_ref = Eigen::Ref<matrix<T>>;
template <class T>
using const_rows_ref = Eigen::Ref<const matrix<T>>;

/// Called on a range of rows [begin, end) once they are final (a fused layer's epilogue:
/// sar/nn/layer.hpp, finishes_rows).
using row_finisher = std::function<void(Eigen::Index begin, Eigen::Index end)>;

/// Which split a node belongs to (OGB splits are disjoint).
enum class node_split : std::uint8_t { none = 0, train = 1, valid = 2, test = 3 };

}  // namespace sar
