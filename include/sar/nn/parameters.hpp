// One flat parameter buffer and one flat gradient buffer for a whole model. Layers declare
// their parameter shapes once, the store allocates, and layers read views (Eigen::Map) into
// it by index. One all-reduce of grads() syncs every gradient; optimisers step values().
// Every parameter starts on a 64-byte boundary of a buffer aligned for Eigen's widest packet (gaps:
// zeros no layer touches), so vectorised kernels split their work identically on every run
// and every rank, whatever address the buffer got, so results are bitwise reproducible.
//
// Row tables (row_table) are the exception: one learnable row per node of a dataset-id range
// (embeddings of featureless node types), held and updated by the rank that holds the node.
// They live beside the flat buffers, never all-reduced, and optimisers step them with the
// store (sar/optim/adam.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "sar/core/error.hpp"
#include "sar/core/rng.hpp"
#include "sar/core/types.hpp"

namespace sar {

enum class init_kind {
  glorot_uniform,   ///< U(-a, a), a = sqrt(6 / (fan_in + fan_out)); fan_in = rows, fan_out = cols
  kaiming_uniform,  ///< U(-a, a), a = sqrt(6 / fan_in) (ReLU gain)
  zeros,
  ones,
};

/// What a layer passes to parameter_store::declare: one parameter, a rows x cols row-major
/// matrix of T in the flat buffers.
struct parameter_shape {
  /// Label for messages and reports, by convention "<layer>.<parameter>" ("gcn.weight",
  /// "linear.bias"); may be empty, need not be unique. make_optimiser (sar/train/models.hpp)
  /// matches a "weight" suffix when choosing groups.
  std::string name;
  /// Rows, in elements; >= 0 (declare throws sar::invalid_argument otherwise). For a weight W
  /// of y = x W: the input width (fan_in); 1 for a bias or a per-feature vector.
  Eigen::Index rows = 0;
  /// Columns, in elements; >= 0 (declare throws otherwise). For a weight: the output width
  /// (fan_out). rows * cols may be 0 (the parameter then takes no space).
  Eigen::Index cols = 0;
  /// How initialise(seed) fills the values (allocate() leaves them zero); glorot_uniform and
  /// kaiming_uniform take fan_in = rows, fan_out = cols.
  init_kind init = init_kind::glorot_uniform;
  /// Optimiser parameter group: an index into sgd_options / adam_options::weight_decay (groups
  /// past its end decay by 0). Must be >= 0 (an optimiser step throws sar::invalid_argument
  /// otherwise). gcn and sage put weights in 0 and biases in 1, gat everything in 0,
  /// batch_norm and linear take theirs from their options (defaults 1 and 0); set_group()
  /// changes it after declare().
  int group = 0;
  /// The rows counted as fan_in by glorot_uniform and kaiming_uniform (0: rows): a stack of
  /// weights, each fan_rows x cols, declared as one parameter (R-GCN's W_1; ...; W_R) starts
  /// at the scale of one.
  Eigen::Index fan_rows = 0;
};

/// What a layer passes to parameter_store::declare_table: one learnable row of `cols` values
/// per node of the dataset ids [first_id, end_id).
struct row_table_shape {
  /// Label for messages and checkpoints ("type_projection.author.embedding").
  std::string name;
  /// \var first_id
  /// The first dataset id with a row.
  /// \var end_id
  /// One past the last.
  node_t first_id = 0, end_id = 0;
  /// Values per row (>= 1).
  Eigen::Index cols = 0;

  /// Whether node `id` has a row: first_id <= id < end_id.
  bool covers(node_t id) const { return id >= first_id && id < end_id; }
  /// The same name, id range and width.
  bool operator==(const row_table_shape&) const = default;
};

/// The rows of a row_table_shape that one rank holds: those of the nodes it was given
/// (parameter_store::hold_rows), in increasing dataset id. Each row starts U(-a, a), a =
/// sqrt(6 / (1 + cols)) (Glorot with a one-hot input), keyed by (seed, table, id, column): the
/// same values whichever rank holds it.
template <class T>
struct row_table {
  /// As declared.
  row_table_shape shape;
  /// The dataset ids of the rows held, ascending.
  std::vector<node_t> ids;
  /// \var values
  /// ids.size() x shape.cols.
  /// \var grads
  /// The gradient of values (layers assign it in backward).
  matrix<T> values, grads;
  /// The optimiser's per-value arrays of these rows (Adam: m, v; SGD: velocity), sized by its
  /// first step; they move with the rows (checkpoints).
  std::vector<matrix<T>> moments;
  /// \var borrowed_ids
  /// The rows a step on sampled minibatches reads (sar/train/minibatch.hpp): the dataset ids,
  /// ascending, of its input nodes in the table's range, wherever they are held; their values
  /// copied from the ranks that hold them, and their gradients, which the loop returns there.
  /// Empty in full-batch training: layers then read and write the held rows.
  std::vector<node_t> borrowed_ids;
  /// \var borrowed_values
  /// borrowed_ids.size() x shape.cols.
  /// \var borrowed_grads
  /// The gradient of borrowed_values (layers assign it in backward).
  matrix<T> borrowed_values, borrowed_grads;

  /// The row of dataset id `id`, or -1 if this rank holds none.
  Eigen::Index row_of(node_t id) const { return find(ids, id); }

  /// Where a layer reads and writes node `id`'s row: its borrowed row if there is one, else
  /// its held row (row -1: neither).
  struct place {
    /// \var values
    /// borrowed_values or values.
    /// \var grads
    /// borrowed_grads or grads.
    matrix<T>*values, *grads;
    /// The row in them (-1: none).
    Eigen::Index row;
  };
  /// Where node `id`'s row is (place).
  place locate(node_t id) {
    const Eigen::Index b = find(borrowed_ids, id);
    if (b >= 0) return {&borrowed_values, &borrowed_grads, b};
    return {&values, &grads, row_of(id)};
  }
  /// Drops the borrowed rows: layers read and write the held rows again.
  void drop_borrowed() {
    borrowed_ids.clear();
    borrowed_values.resize(0, shape.cols);
    borrowed_grads.resize(0, shape.cols);
  }

 private:
  static Eigen::Index find(const std::vector<node_t>& sorted, node_t id) {
    const auto at = std::lower_bound(sorted.begin(), sorted.end(), id);
    return at != sorted.end() && *at == id ? static_cast<Eigen::Index>(at - sorted.begin()) : -1;
  }
};

/// The flat value and gradient buffers of every parameter of a model (see the top of this
/// file): layers declare(), the owner calls allocate(), layers then read views by index.
template <class T>
class parameter_store {
 public:
  /// Element type of the parameters.
  using scalar = T;
  /// A parameter as a mutable rows x cols row-major matrix in a buffer.
  using view = Eigen::Map<matrix<T>>;
  /// A parameter as a read-only rows x cols row-major matrix in a buffer.
  using const_view = Eigen::Map<const matrix<T>>;

  /// Registers a parameter; returns its index. Requires allocate() not yet called.
  std::size_t declare(parameter_shape shape) {
    SAR_CHECK(!allocated_, invalid_argument, "sar::parameter_store::declare: '", shape.name,
              "' declared after allocate()");
    SAR_CHECK(shape.rows >= 0 && shape.cols >= 0, invalid_argument,
              "sar::parameter_store::declare: '", shape.name, "' has shape ", shape.rows, " x ",
              shape.cols);
    entries_.push_back({std::move(shape), total_});
    const Eigen::Index size = entries_.back().shape.rows * entries_.back().shape.cols;
    total_ += (size + alignment - 1) / alignment * alignment;
    return entries_.size() - 1;
  }

  /// Registers a row table (empty until hold_rows); returns its index. Requires allocate() not
  /// yet called, cols >= 1 and first_id <= end_id; throws sar::invalid_argument otherwise.
  std::size_t declare_table(row_table_shape shape) {
    SAR_CHECK(!allocated_ && shape.cols >= 1 && shape.first_id >= 0 &&
                  shape.first_id <= shape.end_id,
              invalid_argument, "sar::parameter_store::declare_table: '", shape.name, "' (ids [",
              shape.first_id, ", ", shape.end_id, "), ", shape.cols, " columns)",
              allocated_ ? " declared after allocate()" : "");
    tables_.push_back({.shape = std::move(shape), .ids = {}, .values = {}, .grads = {},
                       .moments = {}, .borrowed_ids = {}, .borrowed_values = {},
                       .borrowed_grads = {}});
    return tables_.size() - 1;
  }

  /// Every table holds the rows of the dataset ids in `ids` (any order, no repeats) that lie
  /// in its range, initialised from the seed of the last initialise() (see row_table), with
  /// zero gradients and no optimiser moments; rows held before are dropped. Not collective:
  /// each rank passes the nodes it holds. Throws sar::invalid_argument for a repeated id
  /// (nothing changed then).
  void hold_rows(std::span<const node_t> ids) {
    std::vector<std::vector<node_t>> held(tables_.size());  // checked before anything changes
    for (std::size_t k = 0; k < tables_.size(); ++k) {
      const row_table_shape& s = tables_[k].shape;
      for (const node_t id : ids)
        if (s.covers(id)) held[k].push_back(id);
      std::sort(held[k].begin(), held[k].end());
      const auto repeated = std::adjacent_find(held[k].begin(), held[k].end());
      SAR_CHECK(repeated == held[k].end(), invalid_argument,
                "sar::parameter_store::hold_rows: node ", *repeated, " given twice");
    }
    for (std::size_t k = 0; k < tables_.size(); ++k) {
      row_table<T>& table = tables_[k];
      table.ids = std::move(held[k]);
      const auto rows = static_cast<Eigen::Index>(table.ids.size());
      table.values.resize(rows, table.shape.cols);
      table.grads.setZero(rows, table.shape.cols);
      table.moments.clear();
      table.drop_borrowed();
      initialise_rows(k);
    }
  }

  /// Number of row tables declared.
  std::size_t table_count() const { return tables_.size(); }
  /// Row table k.
  row_table<T>& table(std::size_t k) { return tables_.at(k); }
  /// Row table k (read-only).
  const row_table<T>& table(std::size_t k) const { return tables_.at(k); }

  /// Allocates both buffers (values zero, gradients zero). Call once after every declare().
  void allocate() {
    values_.assign(total_, T(0));
    grads_.assign(total_, T(0));
    allocated_ = true;
  }

  /// Initialises every value from counter_rng(seed) keyed by (parameter index, element), so
  /// every rank initialises identically without a broadcast; and the rows the tables hold
  /// (row_table).
  void initialise(std::uint64_t seed) {
    seed_ = seed;
    for (std::size_t k = 0; k < tables_.size(); ++k) initialise_rows(k);
    const counter_rng rng(seed, rng_stream::init_parameters);
    for (std::size_t p = 0; p < entries_.size(); ++p) {
      const auto& s = entries_[p].shape;
      auto v = value(p);
      const double fan_in = static_cast<double>(s.fan_rows > 0 ? s.fan_rows : s.rows);
      const double fan_out = static_cast<double>(s.cols);
      const double bound = s.init == init_kind::glorot_uniform
                               ? std::sqrt(6.0 / std::max(1.0, fan_in + fan_out))
                               : std::sqrt(6.0 / std::max(1.0, fan_in));
      for (Eigen::Index k = 0; k < v.size(); ++k) {
        T x = T(0);
        if (s.init == init_kind::ones) x = T(1);
        else if (s.init != init_kind::zeros)
          x = static_cast<T>((2 * rng.uniform(p, static_cast<std::uint64_t>(k)) - 1) * bound);
        v.data()[k] = x;
      }
    }
  }

  /// Moves parameter p to optimiser group `group` (e.g. no weight decay beyond layer 0).
  void set_group(std::size_t p, int group) { entries_.at(p).shape.group = group; }

  /// Number of parameters declared.
  std::size_t size() const { return entries_.size(); }
  /// Length of values() and grads(): the parameters plus the padding between them.
  Eigen::Index total_size() const { return total_; }
  /// The shape parameter p was declared with (its group as set_group() left it).
  const parameter_shape& shape(std::size_t p) const { return entries_[p].shape; }
  /// Where parameter p starts in values() and grads().
  Eigen::Index offset(std::size_t p) const { return entries_[p].offset; }

  /// The values of parameter p. Throws sar::invalid_argument before allocate().
  view value(std::size_t p) { return map(values_.data(), p); }
  /// The values of parameter p (read-only). Throws sar::invalid_argument before allocate().
  const_view value(std::size_t p) const { return cmap(values_.data(), p); }
  /// The gradient of parameter p. Throws sar::invalid_argument before allocate().
  view grad(std::size_t p) { return map(grads_.data(), p); }
  /// The gradient of parameter p (read-only). Throws sar::invalid_argument before allocate().
  const_view grad(std::size_t p) const { return cmap(grads_.data(), p); }

  /// The whole value buffer (total_size() entries; empty before allocate()): what optimisers
  /// step.
  std::span<T> values() { return values_; }
  /// The whole value buffer (read-only).
  std::span<const T> values() const { return values_; }
  /// The whole gradient buffer (total_size() entries): what one all-reduce syncs.
  std::span<T> grads() { return grads_; }
  /// The whole gradient buffer (read-only).
  std::span<const T> grads() const { return grads_; }

 private:
  struct entry {
    parameter_shape shape;
    Eigen::Index offset;
  };
  view map(T* base, std::size_t p) {
    check_allocated();
    return view(base + entries_[p].offset, entries_[p].shape.rows, entries_[p].shape.cols);
  }
  const_view cmap(const T* base, std::size_t p) const {
    check_allocated();
    return const_view(base + entries_[p].offset, entries_[p].shape.rows, entries_[p].shape.cols);
  }
  void check_allocated() const {
    SAR_CHECK(allocated_, invalid_argument, "sar::parameter_store: used before allocate()");
  }

  void initialise_rows(std::size_t k) {  // keyed apart from the parameters by sub-stream k + 1
    row_table<T>& table = tables_[k];
    const counter_rng rng(seed_, rng_stream::init_parameters, k + 1);
    const double bound = std::sqrt(6.0 / (1.0 + static_cast<double>(table.shape.cols)));
    for (Eigen::Index r = 0; r < table.values.rows(); ++r)
      for (Eigen::Index c = 0; c < table.values.cols(); ++c)
        table.values(r, c) = static_cast<T>(
            (2 * rng.uniform(static_cast<std::uint64_t>(table.ids[static_cast<std::size_t>(r)]),
                             static_cast<std::uint64_t>(c)) - 1) * bound);
  }

  static constexpr Eigen::Index alignment = 64 / sizeof(T);  // elements per 64 bytes
  using buffer = std::vector<T, Eigen::aligned_allocator<T>>;

  std::vector<entry> entries_;
  Eigen::Index total_ = 0;  // including the padding after each parameter
  buffer values_, grads_;
  bool allocated_ = false;
  std::vector<row_table<T>> tables_;
  std::uint64_t seed_ = 0;  // of the last initialise()
};

}  // namespace sar
