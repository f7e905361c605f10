// A model composed at compile time: sequential<L0, L1, ..., Ln> runs its layers in order,
// owns one parameter_store for all of them, keeps every activation of forward for backward,
// and runs backward in reverse order. Layer k sees ctx.layer = k (its random numbers are
// keyed by its position); the first layer that reads neighbours sees ctx.first_graph_layer.
// The run-time counterpart, dynamic_sequential, is in any_layer.hpp and behaves identically.
//
//   sar::sequential<sar::gcn_layer<float>, sar::relu<float>, sar::gcn_layer<float>> model(
//       sar::gcn_layer<float>(f_in, 64), sar::relu<float>(64), sar::gcn_layer<float>(64, classes));
//   model.initialise(seed);
//   const auto& logits = model.forward(graph, ctx, x);
//   model.backward(graph, ctx, dlogits);   // gradients in model.parameters().grads()
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "sar/core/error.hpp"
#include "sar/core/memory.hpp"
#include "sar/core/bf16.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"

namespace sar {

namespace detail {

// The layer contract split into its parts, so a rejected type is told which part is missing.
template <class L>
concept names_scalar = requires { typename L::scalar; };
template <class L>
concept has_dimensions = requires(const L& l) {
  { l.input_dim() } -> std::convertible_to<Eigen::Index>;
  { l.output_dim() } -> std::convertible_to<Eigen::Index>;
};
template <class L>
concept has_declare = names_scalar<L> && requires(L& l, parameter_store<typename L::scalar>& s) {
  l.declare(s);
};
template <class L, class Schedule>
concept has_forward = names_scalar<L> && requires(L& l, Schedule& graph, const layer_context& ctx,
                                                  const_rows_ref<typename L::scalar> x,
                                                  matrix<typename L::scalar>& y) {
  l.forward(graph, ctx, x, y);
};
template <class L, class Schedule>
concept has_backward =
    names_scalar<L> && requires(L& l, Schedule& graph, const layer_context& ctx,
                                const_rows_ref<typename L::scalar> x,
                                matrix<typename L::scalar>& dx) {
      l.backward(graph, ctx, x, x, x, dx);
    };
/// Converts to const_rows_ref<T> and to nothing else, so only a layer whose inputs are views
/// accepts it (a const matrix<T>& parameter would take a copy).
template <class T>
struct rows_view_probe {
  operator const_rows_ref<T>() const;  // NOLINT: declared only, for takes_views
};
template <class L, class Schedule>
concept takes_views =
    requires(L& l, Schedule& graph, const layer_context& ctx,
             rows_view_probe<typename L::scalar> v, matrix<typename L::scalar>& y) {
      l.forward(graph, ctx, v, y);
      l.backward(graph, ctx, v, v, v, y);
    };

/// The schedule-independent part of the contract; one full-sentence error per missing piece.
template <class L>
constexpr bool check_layer_shape() {
  if constexpr (!names_scalar<L>) {
    static_assert(names_scalar<L>,
                  "A sar model layer must name its scalar type: add `using scalar = float;` "
                  "(or double) to the layer class.");
  } else if constexpr (!has_dimensions<L>) {
    static_assert(has_dimensions<L>,
                  "A sar model layer must report its feature widths: add "
                  "`Eigen::Index input_dim() const` and `Eigen::Index output_dim() const`.");
  } else if constexpr (!has_declare<L>) {
    static_assert(has_declare<L>,
                  "A sar model layer must register its parameters: add "
                  "`void declare(sar::parameter_store<scalar>& store)` (it may declare none).");
  }
  return true;
}

/// The part of the contract that depends on the schedule the model runs under.
template <class L, class Schedule>
constexpr bool check_layer_calls() {
  check_layer_shape<L>();
  if constexpr (!has_forward<L, Schedule>) {
    static_assert(has_forward<L, Schedule>,
                  "A sar model layer must have `forward(schedule&, const sar::layer_context&, "
                  "sar::const_rows_ref<scalar> x, sar::matrix<scalar>& y)` callable with this "
                  "schedule type.");
  } else if constexpr (!has_backward<L, Schedule>) {
    static_assert(has_backward<L, Schedule>,
                  "A sar model layer must have `backward(schedule&, const sar::layer_context&, "
                  "x, y, dy, sar::matrix<scalar>& dx)` callable with this schedule type "
                  "(x, y, dy as sar::const_rows_ref<scalar>).");
  } else if constexpr (in_place_v<L> && !takes_views<L, Schedule>) {
    static_assert(takes_views<L, Schedule>,
                  "An in_place sar layer must take x, y and dy as sar::const_rows_ref<scalar>: "
                  "a const sar::matrix<scalar>& parameter binds to a copy, so the layer could not "
                  "see that x and y (dy and dx) are the same matrix.");
  } else {
    static_assert(layer<L, Schedule>, "This type does not satisfy sar::layer for this schedule.");
  }
  return true;
}

/// A layer's optional traits (sar/nn/layer.hpp), with the defaults of a layer without them.
struct layer_traits {
  reads_in_backward reads;
  bool reads_neighbours = true;
  bool in_place = false;
  bool assigns_input_gradient = false;
  bool output_over_input = false;
  bool gradient_over_input = false;
  bool row_wise = false;
  bool finishes_rows = false;
  /// forward(graph, ctx, const sparse_rows<T>&, matrix<T>&) and its backward (set by
  /// any_layer, which knows the schedule; sar/core/sparse_rows.hpp).
  bool sparse_input = false;
  /// forward(graph, ctx, const sparse_rows<T>&, sparse_rows<T>&): a layer without parameters
  /// that may run on sparse input features before the first layer with parameters (dropout).
  bool sparse_to_sparse = false;
  /// The same two for features stored as bf16 (sar/core/bf16.hpp: bf16_input<T>).
  bool bf16_input = false;
  bool bf16_to_bf16 = false;
};
template <class L>
layer_traits traits_of(const L& l) {
  layer_traits t;
  if constexpr (requires { { l.backward_reads() } -> std::convertible_to<reads_in_backward>; })
    t.reads = l.backward_reads();
  constexpr layer_flags f = flags_of<L>();
  t.in_place = f.in_place;
  t.reads_neighbours = f.reads_neighbours;
  t.assigns_input_gradient = f.assigns_input_gradient;
  t.output_over_input = f.output_over_input;
  t.gradient_over_input = f.gradient_over_input && f.assigns_input_gradient;
  t.row_wise = f.row_wise && f.in_place;
  t.finishes_rows = f.finishes_rows;
  return t;
}

/// What sequential and dynamic_sequential share: the parameter store, the activations of the
/// last forward, the forward/backward walk, and a pool of activation and gradient buffers.
///
/// Memory: an activation that no backward reads (layer k's output when layer k does not read
/// its y and layer k + 1 does not read its x) is returned to the pool as soon as layer k + 1
/// has run; an in-place layer whose input is such an activation overwrites it, and so does a
/// layer with output_over_input whose output has as many entries. In backward, in-place layers
/// work on the incoming gradient, a layer with gradient_over_input writes its input gradient
/// over its input when no backward after it reads that, and activations and gradients go back
/// to the pool as soon as they are dead. Buffers are matched by size, so after the first epoch
/// a training loop allocates nothing. (A 2-layer GCN so holds two hidden-wide matrices besides
/// its input at any time, not three.)
///
/// Passes: a row_wise layer after a layer that finishes rows runs inside its forward, on its
/// rows as they are finished (fused_forward).
///
/// Graphs: a schedule (every layer runs on it) or a layered_graph (sar/schedule/schedule.hpp:
/// the k-th layer that reads neighbours runs on block k, the others on the level between).
template <class T>
class model_base {
 public:
  using scalar = T;

  /// The store of every parameter of the model (allocated; values zero until initialise()).
  parameter_store<T>& parameters() { return *store_; }
  const parameter_store<T>& parameters() const { return *store_; }
  /// Initialises every parameter from the counter-based generator (same on every rank).
  void initialise(std::uint64_t seed) { store_->initialise(seed); }

  std::size_t num_layers() const { return input_dims_.size(); }
  /// Buffers kept for reuse by the next forward / backward (bounded by the layer count
  /// whatever the calls' sizes; for tests and memory accounting).
  std::size_t pooled_buffers() const { return idle_.size(); }
  /// Bytes of those buffers. After a backward every buffer the model allocated is in the pool
  /// but the logits, so this is the most its activations and gradients held at once (besides
  /// what layers keep themselves, and the logits).
  std::size_t pooled_bytes() const {
    std::size_t bytes = 0;
    for (const auto& m : idle_) bytes += static_cast<std::size_t>(m.size()) * sizeof(T);
    return bytes;
  }
  Eigen::Index input_dim() const { return input_dims_.front(); }
  Eigen::Index output_dim() const { return output_dims_.back(); }
  /// Indices [first, last) in parameters() of the parameters layer k declared (layers declare
  /// in order), e.g. to give the first layer its own weight-decay group.
  std::pair<std::size_t, std::size_t> layer_parameters(std::size_t k) const {
    return {first_parameter_.at(k), first_parameter_.at(k + 1)};
  }
  /// Output of layer k in the last forward (k < num_layers()), or an empty matrix if it was
  /// released (no backward reads it) or backward has run since (it then keeps only the logits).
  const matrix<T>& activation(std::size_t k) const { return outputs_.at(k); }

 protected:
  model_base() : store_(std::make_unique<parameter_store<T>>()) {}

  /// Records the layer widths and traits and checks the chain. Throws sar::invalid_argument
  /// naming the first pair of layers whose widths do not match.
  void set_dimensions(std::vector<Eigen::Index> in, std::vector<Eigen::Index> out,
                      std::vector<layer_traits> traits, const char* where) {
    SAR_CHECK(!in.empty(), invalid_argument, where, ": a model needs at least one layer");
    for (std::size_t k = 0; k + 1 < in.size(); ++k)
      SAR_CHECK(out[k] == in[k + 1], invalid_argument, where, ": layer ", k, " outputs ", out[k],
                " columns but layer ", k + 1, " takes ", in[k + 1]);
    input_dims_ = std::move(in);
    output_dims_ = std::move(out);
    traits_ = std::move(traits);
    outputs_.assign(input_dims_.size(), matrix<T>());
    input_rows_.assign(input_dims_.size(), 0);
    level_.clear();
    std::size_t level = 0;
    for (const auto& t : traits_) {
      level_.push_back(level);
      level += t.reads_neighbours;
    }
    graph_layers_ = level;
  }

  /// ctx for layer k: its position, and whether it is the first layer that reads neighbours
  /// with no layer with parameters before it (so its x is the model's input).
  layer_context context_of(const layer_context& ctx, std::size_t k) const {
    layer_context c = ctx;
    c.layer = k;
    c.first_graph_layer = traits_[k].reads_neighbours && level_[k] == 0 &&
                          first_parameter_[k] == first_parameter_.front();
    return c;
  }

  /// The schedule layer k runs on: `graph` itself, or for a layered graph the block of its
  /// level if it reads neighbours, else the level's rows; levels counted from `base` (by
  /// default the first level of the last forward's layers: 0 unless it ran a stage).
  template <class Graph>
  auto& schedule_for(Graph& graph, std::size_t k) const {
    return schedule_for(graph, k, base_);
  }
  /// As above, levels counted from `base`.
  template <class Graph>
  auto& schedule_for(Graph& graph, std::size_t k, std::size_t base) const {
    if constexpr (layered_graph<Graph>)
      return traits_[k].reads_neighbours ? graph.block(level_[k] - base)
                                         : graph.level(level_[k] - base);
    else
      return graph;
  }

 public:
  /// Where the model's stages begin: layer 0 and every layer that reads neighbours but the
  /// first. Stage s (layers [stage_starts()[s], the next start or the end)) holds one layer
  /// that reads neighbours: layer-wise inference runs the model stage by stage
  /// (sar/train/minibatch.hpp).
  std::vector<std::size_t> stage_starts() const {
    std::vector<std::size_t> starts{0};
    for (std::size_t k = 0; k < num_layers(); ++k)
      if (traits_[k].reads_neighbours && level_[k] > 0) starts.push_back(k);
    return starts;
  }

 protected:
  /// Inference through layers [first, end) on `graph` (its blocks serve those layers: block
  /// 0 the first of them that reads neighbours), call(k, ctx_k, x_k, y_k, base level) per
  /// layer. Returns the output; the activations of forward and backward are not touched.
  /// Throws sar::invalid_argument for a bad range or block count.
  template <class Graph, class Call>
  matrix<T> run_layers(Graph& graph, const layer_context& ctx, const_rows_ref<T> x,
                       std::size_t first, std::size_t end, Call&& call, const char* where) const {
    SAR_CHECK(first < end && end <= num_layers(), invalid_argument, where, ": layers [", first,
              ", ", end, ") of ", num_layers());
    const std::size_t base = level_[first];
    if constexpr (layered_graph<Graph>) {
      const std::size_t blocks = (end < num_layers() ? level_[end] : graph_layers_) - base;
      SAR_CHECK(graph.num_blocks() == blocks, invalid_argument, where, ": the graph has ",
                graph.num_blocks(), " blocks but layers [", first, ", ", end, ") read ",
                "neighbours ", blocks, " times");
    }
    matrix<T> in, out;  // the first layer reads x itself
    for (std::size_t k = first; k < end; ++k) {
      layer_context c = context_of(ctx, k);
      c.finish_rows = nullptr;
      c.end_row = -1;
      call(k, c, k == first ? x : const_rows_ref<T>(in), out, base);
      std::swap(in, out);
    }
    return in;
  }

  /// run_forward on an input the model owns: an in-place first layer whose backward does not
  /// read its input (dropout) overwrites it, else it is kept for backward. Same throws.
  template <class Graph, class Call>
  const matrix<T>& run_forward_owned(Graph& graph, const layer_context& ctx, matrix<T>&& x,
                                     Call&& call, const char* where) {
    for (auto& y : outputs_) give(y);  // the last input given by value is freed
    owned_input_ = matrix<T>();         // (a move assignment would swap it into x)
    owned_input_ = std::move(x);
    owned_data_ = owned_input_.data();  // freed, not pooled, when done (sizes vary)
    const bool overwrite = traits_[0].in_place && !traits_[0].reads.input;
    const matrix<T>& logits =
        run_forward(graph, ctx, owned_input_, call, where, overwrite ? &owned_input_ : nullptr);
    input_owned_ = true;
    return logits;
  }

  /// call(k, ctx_k, x_k, y_k) for k = first, first + 1, ..., layer k's output getting the rows
  /// of its schedule's destinations; returns the last output. x (layer `first`'s input; the
  /// layers before it have run: run_forward_rows) is read where it is (the caller's memory:
  /// no copy) and kept as a view for backward. `reuse`, if given, is x's storage, which layer
  /// `first` (in place) may take as its output. Throws sar::invalid_argument if x does
  /// not have the first schedule's source rows and input_dim() columns, or a layered graph
  /// has not one block per layer that reads neighbours.
  ///
  /// With `stage` set, only layers [first, end) run (a stage of stage_starts(): the layers
  /// before `first` are another call's), on a layered graph whose block 0 serves layer
  /// `first`'s level; run_backward then covers the same layers.
  template <class Graph, class Call>
  const matrix<T>& run_forward(Graph& graph, const layer_context& ctx, const_rows_ref<T> x,
                               Call&& call, const char* where, matrix<T>* reuse = nullptr,
                               std::size_t first = 0, std::size_t end = 0, bool stage = false) {
    if (!stage) end = num_layers();
    SAR_CHECK(first < end && end <= num_layers(), invalid_argument, where, ": layers [", first,
              ", ", end, ") of ", num_layers());
    base_ = stage ? level_[first] : 0;
    if constexpr (layered_graph<Graph>) {
      const std::size_t blocks = (end < num_layers() ? level_[end] : graph_layers_) - base_;
      SAR_CHECK(graph.num_blocks() == blocks, invalid_argument, where, ": the graph has ",
                graph.num_blocks(), " blocks but the model's layers [", first, ", ", end,
                ") read neighbours ", blocks, " times");
    }
    first_ = stage ? first : 0;
    end_ = end;
    const node_t num_input = schedule_for(graph, first_).num_sources();
    SAR_CHECK(x.rows() == num_input && x.cols() == input_dims_[first_], invalid_argument, where,
              ": x is ", x.rows(), " x ", x.cols(), ", expected ", num_input, " x ",
              input_dims_[first_]);
    input_.reset();
    input_owned_ = false;
    sparse_input_ = nullptr;
    bf16_input_ = nullptr;
    for (auto& y : outputs_) give(y);
    for (std::size_t k = first; k < end; ++k) {
      input_rows_[k] = k == first ? x.rows() : outputs_[k - 1].rows();
      if (k > first && fused_forward(k)) {  // layer k ran inside layer k - 1, on its rows
        outputs_[k] = std::move(outputs_[k - 1]);
        continue;
      }
      layer_context c = context_of(ctx, k);
      const row_finisher next_layer = [&](Eigen::Index begin, Eigen::Index end) {
        layer_context rows = context_of(ctx, k + 1);
        rows.first_row = begin;
        rows.end_row = end;
        call(k + 1, rows, outputs_[k], outputs_[k]);  // a row_wise layer: same rows
      };
      // Layer k's output: its input's buffer (in place, the caller's input given by value,
      // or output_over_input), else a pooled one.
      const Eigen::Index rows = schedule_for(graph, k).num_destinations();
      const const_rows_ref<T> in = k == first ? x : const_rows_ref<T>(outputs_[k - 1]);
      const bool in_place = k > first && traits_[k].in_place && released_after_forward(k - 1);
      const bool reused = !in_place && k == first && reuse != nullptr;
      const bool over_input = !in_place && k > first && traits_[k].output_over_input &&
                              released_after_forward(k - 1) &&
                              outputs_[k - 1].size() == rows * output_dims_[k];
      if (in_place || over_input) outputs_[k] = std::move(outputs_[k - 1]);  // [k - 1] left empty
      else if (reused) outputs_[0] = std::move(*reuse);
      else outputs_[k] = take(rows, output_dims_[k]);
      if (k + 1 < end && fused_forward(k + 1)) {
        c.finish_rows = &next_layer;
        // The empty range first: layer k + 1 sizes what it keeps (sar/nn/layer.hpp).
        outputs_[k].resize(rows, output_dims_[k]);  // the same size: no reallocation
        layer_context start = context_of(ctx, k + 1);
        start.first_row = start.end_row = 0;
        call(k + 1, start, outputs_[k], outputs_[k]);
      }
      call(k, c, in_place || reused ? const_rows_ref<T>(outputs_[k]) : in, outputs_[k]);
      if (k > first && !in_place && !over_input && released_after_forward(k - 1))
        give(outputs_[k - 1]);
    }
    input_ = std::make_unique<const_rows_ref<T>>(x);
    return outputs_[end - 1];
  }

  /// run_forward on input features that are not a dense matrix: sparse rows
  /// (sar/core/sparse_rows.hpp) or rows stored as bf16 (sar/core/bf16.hpp: bf16_input). The
  /// layers before the first one with parameters run as prefix(k, ctx_k, x_k, y_k) from such
  /// rows to such rows (dropout; their output is kept, in `kept`, for backward), the first with
  /// parameters as first_layer(k, ctx_k, x_k, y_k) from them to its dense output, the rest as
  /// run_forward does. x must stay alive and unchanged until the matching backward. Returns the
  /// logits and sets `read` to what the first layer with parameters read. Throws
  /// sar::invalid_argument, naming the layer, if a layer before the first with parameters
  /// cannot run on such rows or the first with parameters cannot read them, or if x does not
  /// have the first schedule's source rows and input_dim() columns.
  template <class Graph, class Input, class Call, class FirstLayer, class Prefix>
  const matrix<T>& run_forward_rows(Graph& graph, const layer_context& ctx, const Input& x,
                                    Call&& call, FirstLayer&& first_layer, Prefix&& prefix,
                                    Input& kept, const Input*& read, const char* where) {
    const std::size_t s = first_trainable();
    const Input& input = run_prefix(graph, ctx, x, prefix, kept, where);
    // Layer s reads `input`; the dense view run_forward checks and keeps has x's shape and no
    // memory (nothing reads it).
    const Eigen::Map<const matrix<T>> none(nullptr, x.rows(), x.cols());
    const matrix<T>& logits = run_forward(
        graph, ctx, none,
        [&](std::size_t k, const layer_context& c, const_rows_ref<T> in, matrix<T>& out) {
          if (k == s) first_layer(k, c, input, out);
          else call(k, c, in, out);
        },
        where, nullptr, s);
    read = &input;
    return logits;
  }

  /// The layers before the first one with parameters on rows x that are not a dense matrix
  /// (see run_forward_rows): prefix(k, ctx_k, x_k, y_k), each output in `kept`. Returns what
  /// the first layer with parameters reads: x, or kept. Throws sar::invalid_argument, naming
  /// the layer, if one of those layers cannot run on such rows or the first with parameters
  /// cannot read them, or if x does not have the first schedule's source rows and input_dim()
  /// columns.
  template <class Graph, class Input, class Prefix>
  const Input& run_prefix(Graph& graph, const layer_context& ctx, const Input& x,
                          Prefix&& prefix, Input& kept, const char* where) const {
    constexpr bool sparse = std::is_same_v<Input, sparse_rows<T>>;
    constexpr const char* kind = sparse ? "sparse input features" : "features stored as bf16";
    const std::size_t s = first_trainable();
    for (std::size_t k = 0; k <= s; ++k) {
      const layer_traits& t = traits_[k];
      SAR_CHECK(k < s ? (sparse ? t.sparse_to_sparse : t.bf16_to_bf16)
                      : (sparse ? t.sparse_input : t.bf16_input),
                invalid_argument, where, ": layer ", k, k < s ? " (before the first layer with "
                "parameters) cannot run on " : " (the first with parameters) cannot read ", kind,
                sparse ? "; pass them dense (sar::to_dense)" : "; pass them decoded");
    }
    const node_t num_input = schedule_for(graph, 0).num_sources();
    SAR_CHECK(x.rows() == num_input && x.cols() == input_dim(), invalid_argument, where, ": ",
              kind, " are ", x.rows(), " x ", x.cols(), ", expected ", num_input, " x ",
              input_dim());
    const Input* input = &x;
    for (std::size_t k = 0; k < s; ++k) {  // from x (or the last prefix's output) to kept
      if (input == &kept) {
        Input y;
        prefix(k, context_of(ctx, k), *input, y);
        kept = std::move(y);
      } else {
        prefix(k, context_of(ctx, k), *input, kept);  // kept's arrays reused: no allocation
      }
      input = &kept;
    }
    return *input;
  }

  /// The first layer with parameters (the last layer if none has any).
  std::size_t first_trainable() const {
    std::size_t k = 0;
    while (k + 1 < num_layers() && first_parameter_[k] == first_parameter_[k + 1]) ++k;
    return k;
  }

  /// call(k, ctx_k, x_k, y_k, dy_k, dx_k) for k = last, ..., f, where f is the first layer
  /// with parameters: the layers before it have nothing to learn and nothing upstream that
  /// does, so they are not called and dx_f is empty (no input-gradient product, SpMM or
  /// exchange in the first graph layer). With `input_gradient` every layer runs and the
  /// model's input gradient is assigned to it. For an in-place layer dy_k and dx_k are the
  /// same matrix (except for the last layer, whose dy is the caller's dlogits).
  template <class Call>
  void run_backward(const layer_context& ctx, const matrix<T>& dlogits, Call&& call,
                    const char* where, matrix<T>* input_gradient = nullptr) {
    SAR_CHECK(input_ != nullptr, invalid_argument, where, ": backward without a forward");
    const matrix<T>& logits = outputs_[end_ - 1];
    SAR_CHECK(dlogits.rows() == logits.rows() && dlogits.cols() == logits.cols(),
              invalid_argument, where, ": dlogits is ", dlogits.rows(), " x ", dlogits.cols(),
              ", expected ", logits.rows(), " x ", logits.cols());
    const std::size_t first_trainable =
        input_gradient ? first_ : std::max(first_, this->first_trainable());
    matrix<T> gradient;  // dy of the layer about to run, once it is not dlogits
    for (std::size_t k = end_; k-- > first_trainable;) {
      layer_context c = context_of(ctx, k);
      const const_rows_ref<T> x = k == first_ ? *input_ : const_rows_ref<T>(outputs_[k - 1]);
      const bool last = k + 1 == end_;
      if (k == first_trainable && !input_gradient) {
        matrix<T> none;  // no input gradient wanted
        call(k, c, x, outputs_[k], last ? dlogits : gradient, none);
      } else if (traits_[k].in_place && !last) {
        call(k, c, x, outputs_[k], gradient, gradient);
      } else {
        // Over x when the layer allows it and layer k - 1's backward does not read its output
        // (x is a view, so the layer still reads it: sar/nn/layer.hpp). x may be empty: a
        // layer whose output took its input's buffer does not read x.
        const Eigen::Index rows = input_rows_[k];
        const bool over_x = k > first_ && traits_[k].gradient_over_input &&
                            !traits_[k - 1].reads.output &&
                            outputs_[k - 1].rows() == rows &&
                            outputs_[k - 1].cols() == input_dims_[k];  // not a freed 0 x 0
        matrix<T> dx = over_x ? std::move(outputs_[k - 1]) : take(rows, input_dims_[k]);
        if (!traits_[k].assigns_input_gradient) set_zero<T>(dx);
        call(k, c, x, outputs_[k], last ? dlogits : gradient, dx);
        give(gradient);
        gradient = std::move(dx);
      }
      if (!last) give(outputs_[k]);  // the logits stay readable
    }
    if (input_gradient) *input_gradient = std::move(gradient);
    else give(gradient);
    if (input_owned_) {  // an input given by value is no longer needed
      // Nor are the outputs of untrained in-place layers before first_trainable that took
      // its buffer: freed here, not pooled by the next forward (its size varies from call to
      // call, so the pool would keep every one of them).
      for (std::size_t k = 0; k + 1 < num_layers(); ++k)  // the logits stay readable
        if (outputs_[k].size() > 0 && outputs_[k].data() == owned_data_) outputs_[k] = matrix<T>();
      owned_input_ = matrix<T>();
      owned_data_ = nullptr;
      input_.reset();  // a second backward needs a new forward
      input_owned_ = false;
    }
  }

  /// Declares layer `l`'s parameters, recording where they start. Call in layer order.
  template <class L>
  void declare_layer(L& l) {
    if (first_parameter_.empty()) first_parameter_.push_back(store_->size());
    l.declare(*store_);
    first_parameter_.push_back(store_->size());
  }

  std::unique_ptr<parameter_store<T>> store_;  // a unique_ptr: layers keep its address
  std::vector<std::size_t> first_parameter_;   // layer k's parameters: [first[k], first[k+1])
  std::vector<Eigen::Index> input_dims_, output_dims_;
  std::vector<layer_traits> traits_;
  std::vector<matrix<T>> outputs_;
  std::vector<Eigen::Index> input_rows_;  // rows of layer k's input in the last forward
  std::unique_ptr<const_rows_ref<T>> input_;  // the last forward's input (a view)
  // The last forward's sparse (or bf16) input features as the first layer with parameters
  // read them (null: dense), and the prefix layers' output they may point to
  // (run_forward_rows); bf16_given_ is the input as given (its values the caller's).
  const sparse_rows<T>* sparse_input_ = nullptr;
  sparse_rows<T> sparse_kept_;
  const bf16_input<T>* bf16_input_ = nullptr;
  bf16_input<T> bf16_given_, bf16_kept_;
  bool input_owned_ = false;                 // it is owned_input_
  matrix<T> owned_input_;  // the input of a forward given by value
  const T* owned_data_ = nullptr;  // its buffer, wherever it moved
  std::vector<std::size_t> level_;  // layer k runs on block / level level_[k] of a layered graph
  std::size_t graph_layers_ = 0;    // layers that read neighbours
  // The layers of the last forward, [first_, end_) (all but for a stage), and the level its
  // graph's block 0 serves.
  std::size_t first_ = 0, end_ = 0, base_ = 0;

 private:
  /// Does no backward read layer k's output (so it can go once layer k + 1 has run)?
  bool released_after_forward(std::size_t k) const {
    return k + 1 < num_layers() && !traits_[k].reads.output && !traits_[k + 1].reads.input;
  }
  /// Does layer k run inside layer k - 1, on each range of its output rows as layer k - 1
  /// finishes it (layer_context::finish_rows), instead of in a pass of its own? So it does when
  /// it is row_wise, layer k - 1 finishes rows and no backward reads layer k - 1's output.
  bool fused_forward(std::size_t k) const {
    return k > 0 && k < num_layers() && traits_[k].row_wise && traits_[k - 1].finishes_rows &&
           released_after_forward(k - 1);
  }
  /// A rows x cols matrix (contents undefined), from the pool if it has one of that size
  /// (else the pool's first buffer, reallocated: sizes that change from call to call, as a
  /// minibatch's, do not grow the pool).
  matrix<T> take(Eigen::Index rows, Eigen::Index cols) {
    auto it = std::find_if(idle_.begin(), idle_.end(),
                           [&](const matrix<T>& m) { return m.size() == rows * cols; });
    if (it == idle_.end()) {
      matrix<T> m;
      if (!idle_.empty()) {
        m = std::move(idle_.back());
        idle_.pop_back();
      }
      huge_page_resize(m, rows, cols);
      return m;
    }
    matrix<T> m = std::move(*it);
    idle_.erase(it);
    m.resize(rows, cols);  // same size: no reallocation
    return m;
  }
  /// Returns m's buffer to the pool (unless it is a caller's input given by value) and leaves
  /// m empty.
  void give(matrix<T>& m) {
    if (m.size() > 0 && m.data() == owned_data_) owned_data_ = nullptr;  // freed below
    else if (m.size() > 0) idle_.push_back(std::move(m));
    m = matrix<T>();
  }

  std::vector<matrix<T>> idle_;  // buffers no activation or gradient uses right now
};

/// The scalar of the first layer; float when it names none (its static_assert reports that).
template <class...>
struct model_scalar {
  using type = float;
};
template <class First, class... Rest>
  requires names_scalar<First>
struct model_scalar<First, Rest...> {
  using type = typename First::scalar;
};

}  // namespace detail

/// A model composed at compile time of the layers Layers... (see the top of this file): one
/// parameter_store for all of them, forward in order, backward in reverse.
template <class... Layers>
class sequential : public detail::model_base<typename detail::model_scalar<Layers...>::type> {
  static_assert(sizeof...(Layers) >= 1, "sar::sequential needs at least one layer type.");
  static_assert((detail::check_layer_shape<Layers>() && ...));
  using base = detail::model_base<typename detail::model_scalar<Layers...>::type>;

 public:
  /// Element type of every layer.
  using scalar = typename base::scalar;
  static_assert((std::is_same_v<typename detail::model_scalar<Layers>::type, scalar> && ...),
                "Every layer of a sar::sequential must use the same scalar type (all float or "
                "all double).");

  /// Takes the layers, declares their parameters (in layer order) in one store and allocates
  /// it; values are zero until initialise(seed). Throws sar::invalid_argument if layer k's
  /// output_dim() differs from layer k+1's input_dim().
  explicit sequential(Layers... layers) : layers_(std::move(layers)...) {
    std::apply([&](auto&... l) { (this->declare_layer(l), ...); }, layers_);
    this->store_->allocate();
    std::apply(
        [&](const auto&... l) {
          this->set_dimensions({static_cast<Eigen::Index>(l.input_dim())...},
                               {static_cast<Eigen::Index>(l.output_dim())...},
                               {detail::traits_of(l)...}, "sar::sequential");
        },
        layers_);
  }
  /// Movable: the store is held by pointer, so the layers' parameter views stay valid.
  sequential(sequential&&) noexcept = default;
  /// Move assignment (see the move constructor).
  sequential& operator=(sequential&&) noexcept = default;

  /// Number of layers.
  static constexpr std::size_t size() { return sizeof...(Layers); }
  /// Every layer's state besides its parameters (sar/nn/layer.hpp), in layer order.
  std::vector<std::span<double>> state() {
    std::vector<std::span<double>> all;
    std::apply([&](auto&... l) { ((append(all, state_of(l))), ...); }, layers_);
    return all;
  }
  /// Layer I.
  template <std::size_t I>
  auto& layer() { return std::get<I>(layers_); }
  /// Layer I (const).
  template <std::size_t I>
  const auto& layer() const { return std::get<I>(layers_); }

  /// Layers [first, end) (ctx.training false: inference) on `graph`, a schedule or a layered
  /// graph whose blocks serve those layers; returns their output. Does not disturb the
  /// activations of forward/backward. Throws sar::invalid_argument on a bad range or shape.
  template <class Graph>
  matrix<scalar> infer(Graph& graph, const layer_context& ctx, const_rows_ref<scalar> x,
                       std::size_t first, std::size_t end) {
    return this->run_layers(
        graph, ctx, x, first, end,
        [&](std::size_t k, const layer_context& c, const_rows_ref<scalar> in,
            matrix<scalar>& out, std::size_t base) {
          at(k, [&](auto& l) { l.forward(this->schedule_for(graph, k, base), c, in, out); });
        },
        "sar::sequential::infer");
  }

  /// Runs every layer on `graph` (a schedule, or a layered_graph: see model_base); returns
  /// the logits (kept until the next forward). x is read in place, without a copy (a matrix,
  /// an Eigen::Map of the caller's row-major memory, a block of rows); it must stay alive and
  /// unchanged until the matching backward. Requires x: graph.num_sources() x input_dim() (a
  /// layered graph: its level 0). Throws sar::invalid_argument on a shape mismatch (and
  /// whatever a layer throws). Collective (each layer's calls).
  template <class Graph>
  const matrix<scalar>& forward(Graph& graph, const layer_context& ctx, const_rows_ref<scalar> x) {
    static_assert((detail::check_layer_calls<Layers, schedule_type_t<Graph>>() && ...));
    return this->run_forward(graph, ctx, x, layer_forward(graph), "sar::sequential::forward");
  }
  /// The same, on a matrix the model takes over (an rvalue): a first in-place layer (dropout)
  /// works on it instead of a copy (a minibatch's gathered features: no second copy of them).
  template <class Graph, class X>
    requires std::same_as<X, matrix<scalar>>
  const matrix<scalar>& forward(Graph& graph, const layer_context& ctx, X&& x) {
    static_assert((detail::check_layer_calls<Layers, schedule_type_t<Graph>>() && ...));
    return this->run_forward_owned(graph, ctx, std::move(x), layer_forward(graph),
                                   "sar::sequential::forward");
  }

 private:
  /// call(k, ctx_k, x_k, y_k) of forward: layer k's forward on its schedule of `graph`.
  template <class Graph>
  auto layer_forward(Graph& graph) {
    return [this, &graph](std::size_t k, const layer_context& c, const_rows_ref<scalar> in,
                          matrix<scalar>& out) {
      at(k, [&](auto& l) { l.forward(this->schedule_for(graph, k), c, in, out); });
    };
  }

 public:
  /// Back-propagates dlogits = dLoss/dlogits through every layer in reverse order, ASSIGNING
  /// every parameter gradient in parameters().grads(); layers before the first one with
  /// parameters are skipped and that one computes no input gradient. Requires the matching forward (same graph and ctx). Throws
  /// sar::invalid_argument without a forward or on a shape mismatch. Collective.
  template <class Graph>
  void backward(Graph& graph, const layer_context& ctx, const matrix<scalar>& dlogits) {
    static_assert((detail::check_layer_calls<Layers, schedule_type_t<Graph>>() && ...));
    this->run_backward(
        ctx, dlogits,
        [&](std::size_t k, const layer_context& c, const_rows_ref<scalar> x,
            const_rows_ref<scalar> y, const_rows_ref<scalar> dy, matrix<scalar>& dx) {
          at(k, [&](auto& l) { l.backward(this->schedule_for(graph, k), c, x, y, dy, dx); });
        },
        "sar::sequential::backward");
  }
  /// The same, with every layer run and dL/dx ASSIGNED to dx (a model inside a larger one:
  /// sar/train/graph_level.hpp's stages).
  template <class Graph>
  void backward(Graph& graph, const layer_context& ctx, const matrix<scalar>& dlogits,
                matrix<scalar>& dx) {
    static_assert((detail::check_layer_calls<Layers, schedule_type_t<Graph>>() && ...));
    this->run_backward(
        ctx, dlogits,
        [&](std::size_t k, const layer_context& c, const_rows_ref<scalar> x,
            const_rows_ref<scalar> y, const_rows_ref<scalar> dy, matrix<scalar>& d) {
          at(k, [&](auto& l) { l.backward(this->schedule_for(graph, k), c, x, y, dy, d); });
        },
        "sar::sequential::backward", &dx);
  }

 private:
  /// f(layer k), dispatched at run time over the tuple.
  template <class F>
  void at(std::size_t k, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((k == I ? (f(std::get<I>(layers_)), 0) : 0), ...);
    }(std::index_sequence_for<Layers...>{});
  }

  static void append(std::vector<std::span<double>>& all, std::vector<std::span<double>> more) {
    all.insert(all.end(), more.begin(), more.end());
  }

  std::tuple<Layers...> layers_;
};

}  // namespace sar
