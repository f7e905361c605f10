// Layers and models chosen at run time. any_layer<T, Schedule> holds any type that satisfies
// sar::layer<L, Schedule> behind one virtual interface, so a model read from a command line
// (`--model gcn --layers 3`) is a std::vector<any_layer<T, Schedule>>; dynamic_sequential runs
// such a vector with the interface (and the exact numbers) of sequential<...>.
//
//   std::vector<sar::any_layer<float, sar::local_schedule>> layers;
//   for (int k = 0; k < depth; ++k) layers.emplace_back(sar::gcn_layer<float>(w[k], w[k + 1]));
//   sar::dynamic_sequential<float, sar::local_schedule> model(std::move(layers));
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "sar/core/bf16.hpp"
#include "sar/core/error.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/core/types.hpp"
#include "sar/nn/layer.hpp"
#include "sar/nn/parameters.hpp"
#include "sar/nn/sequential.hpp"

namespace sar {

/// A type-erased layer: itself a sar::layer<any_layer, Schedule>. Move-only (it owns the
/// layer, whose parameter views point into a store).
template <class T, class Schedule>
class any_layer {
 public:
  /// Element type of the held layer.
  using scalar = T;
  /// The schedule the held layer runs on.
  using schedule_type = Schedule;

  /// Takes ownership of a copy of (or the moved) layer. Requires L to satisfy
  /// sar::layer<L, Schedule> with L::scalar = T (checked at compile time).
  template <class L>
    requires(!std::is_same_v<std::remove_cvref_t<L>, any_layer>)
  any_layer(L&& l)  // NOLINT: implicit, so a vector of any_layer accepts layers directly
      : self_(make_model(std::forward<L>(l))) {}

  /// Takes over the held layer of the moved-from any_layer.
  any_layer(any_layer&&) noexcept = default;
  /// Takes over the held layer of the moved-from any_layer (destroying the one held).
  any_layer& operator=(any_layer&&) noexcept = default;

  /// The held layer's input width.
  Eigen::Index input_dim() const { return self_->input_dim(); }
  /// The held layer's output width.
  Eigen::Index output_dim() const { return self_->output_dim(); }
  /// The held layer's optional traits (sar/nn/layer.hpp), as a model reads them.
  detail::layer_traits traits() const { return self_->traits(); }
  /// Declares the held layer's parameters in `store` (its declare()).
  void declare(parameter_store<T>& store) { self_->declare(store); }
  /// The held layer's state besides its parameters (sar/nn/layer.hpp), or nothing.
  std::vector<std::span<double>> state() { return self_->state(); }
  /// As the held layer's forward (collective if it is).
  void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, matrix<T>& y) {
    self_->forward(graph, ctx, x, y);
  }
  /// As the held layer's backward (collective if it is).
  void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x, const_rows_ref<T> y,
                const_rows_ref<T> dy, matrix<T>& dx) {
    self_->backward(graph, ctx, x, y, dy, dx);
  }
  /// As the held layer's forward on sparse input features (traits().sparse_input); throws
  /// sar::invalid_argument for a layer without it.
  void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x, matrix<T>& y) {
    self_->forward(graph, ctx, x, y);
  }
  /// As the held layer's backward after that forward (dx empty); throws as forward.
  void backward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) {
    self_->backward(graph, ctx, x, y, dy, dx);
  }
  /// As the held layer's forward from sparse rows to sparse rows (traits().sparse_to_sparse);
  /// throws sar::invalid_argument for a layer without it.
  void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
               sparse_rows<T>& y) {
    self_->forward(graph, ctx, x, y);
  }

  /// As the held layer's forward on features stored as bf16 (traits().bf16_input); throws
  /// sar::invalid_argument for a layer without it.
  void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x, matrix<T>& y) {
    self_->forward(graph, ctx, x, y);
  }
  /// As the held layer's backward after that forward (dx empty); throws as forward.
  void backward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) {
    self_->backward(graph, ctx, x, y, dy, dx);
  }
  /// As the held layer's forward from bf16 input to bf16 input (traits().bf16_to_bf16);
  /// throws sar::invalid_argument for a layer without it.
  void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
               bf16_input<T>& y) {
    self_->forward(graph, ctx, x, y);
  }

  /// The held layer if it is an L, else nullptr (like std::function::target).
  template <class L>
  L* target() {
    auto* m = dynamic_cast<model<L>*>(self_.get());
    return m ? &m->layer : nullptr;
  }
  /// As target(), for a const any_layer.
  template <class L>
  const L* target() const {
    const auto* m = dynamic_cast<const model<L>*>(self_.get());
    return m ? &m->layer : nullptr;
  }
  /// typeid of the held layer.
  const std::type_info& target_type() const { return self_->type(); }

 private:
  struct interface {
    virtual ~interface() = default;
    virtual Eigen::Index input_dim() const = 0;
    virtual Eigen::Index output_dim() const = 0;
    virtual detail::layer_traits traits() const = 0;
    virtual void declare(parameter_store<T>& store) = 0;
    virtual std::vector<std::span<double>> state() = 0;
    virtual void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x,
                         matrix<T>& y) = 0;
    virtual void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x,
                          const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) = 0;
    virtual void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                         matrix<T>& y) = 0;
    virtual void backward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                          const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) = 0;
    virtual void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                         sparse_rows<T>& y) = 0;
    virtual void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                         matrix<T>& y) = 0;
    virtual void backward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                          const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) = 0;
    virtual void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                         bf16_input<T>& y) = 0;
    virtual const std::type_info& type() const = 0;
  };

  template <class L>
  struct model final : interface {
    explicit model(L l) : layer(std::move(l)) {}
    Eigen::Index input_dim() const override { return layer.input_dim(); }
    Eigen::Index output_dim() const override { return layer.output_dim(); }
    // Whether L reads input X (sparse rows, bf16 input) into Y (a dense output, or an X).
    template <class X, class Y>
    static constexpr bool reads = requires(L& l, Schedule& g, const layer_context& c,
                                           const X& x, Y& y) { l.forward(g, c, x, y); };
    template <class Y>
    static constexpr bool reads_sparse = reads<sparse_rows<T>, Y>;
    template <class Y>
    static constexpr bool reads_bf16 = reads<bf16_input<T>, Y>;
    detail::layer_traits traits() const override {
      detail::layer_traits t = detail::traits_of(layer);
      t.sparse_input = reads_sparse<matrix<T>>;
      t.sparse_to_sparse = reads_sparse<sparse_rows<T>>;
      t.bf16_input = reads_bf16<matrix<T>>;
      t.bf16_to_bf16 = reads_bf16<bf16_input<T>>;
      return t;
    }
    void declare(parameter_store<T>& store) override { layer.declare(store); }
    std::vector<std::span<double>> state() override { return state_of(layer); }
    void forward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x,
                 matrix<T>& y) override {
      layer.forward(graph, ctx, x, y);
    }
    void backward(Schedule& graph, const layer_context& ctx, const_rows_ref<T> x,
                  const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) override {
      layer.backward(graph, ctx, x, y, dy, dx);
    }
    void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                 matrix<T>& y) override {
      if constexpr (reads_sparse<matrix<T>>) layer.forward(graph, ctx, x, y);
      else no_sparse_input();
    }
    void backward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                  const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) override {
      if constexpr (reads_sparse<matrix<T>>) layer.backward(graph, ctx, x, y, dy, dx);
      else no_sparse_input();
    }
    void forward(Schedule& graph, const layer_context& ctx, const sparse_rows<T>& x,
                 sparse_rows<T>& y) override {
      if constexpr (reads_sparse<sparse_rows<T>>) layer.forward(graph, ctx, x, y);
      else no_sparse_input();
    }
    void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                 matrix<T>& y) override {
      if constexpr (reads_bf16<matrix<T>>) layer.forward(graph, ctx, x, y);
      else no_input("features stored as bf16");
    }
    void backward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                  const_rows_ref<T> y, const_rows_ref<T> dy, matrix<T>& dx) override {
      if constexpr (reads_bf16<matrix<T>>) layer.backward(graph, ctx, x, y, dy, dx);
      else no_input("features stored as bf16");
    }
    void forward(Schedule& graph, const layer_context& ctx, const bf16_input<T>& x,
                 bf16_input<T>& y) override {
      if constexpr (reads_bf16<bf16_input<T>>) layer.forward(graph, ctx, x, y);
      else no_input("features stored as bf16");
    }
    [[noreturn]] static void no_sparse_input() { no_input("sparse input features"); }
    [[noreturn]] static void no_input(const char* kind) {
      throw invalid_argument(message("sar::any_layer: ", typeid(L).name(), " does not run on ",
                                     kind));
    }
    const std::type_info& type() const override { return typeid(L); }
    L layer;
  };

  template <class Arg>
  static std::unique_ptr<interface> make_model(Arg&& l) {
    using L = std::remove_cvref_t<Arg>;
    static_assert(detail::check_layer_calls<L, Schedule>());
    static_assert(std::is_same_v<typename L::scalar, T>,
                  "sar::any_layer<T, Schedule> holds only layers whose scalar type is T.");
    return std::make_unique<model<L>>(std::forward<Arg>(l));
  }

  std::unique_ptr<interface> self_;
};

/// A model whose layers are chosen at run time: the interface and the numbers of
/// sequential<...> (same parameter order, same ctx.layer keys, same activations kept).
template <class T, class Schedule>
class dynamic_sequential : public detail::model_base<T> {
 public:
  /// Element type of the layers.
  using scalar = T;
  /// How the layers are held.
  using layer_type = any_layer<T, Schedule>;

  /// Takes the layers, declares their parameters (in layer order) in one store and allocates
  /// it; values are zero until initialise(seed). Throws sar::invalid_argument for an empty
  /// list or if layer k's output_dim() differs from layer k+1's input_dim().
  explicit dynamic_sequential(std::vector<layer_type> layers) : layers_(std::move(layers)) {
    SAR_CHECK(!layers_.empty(), invalid_argument,
              "sar::dynamic_sequential: a model needs at least one layer");
    std::vector<Eigen::Index> in, out;
    std::vector<detail::layer_traits> traits;
    for (auto& l : layers_) {
      this->declare_layer(l);
      in.push_back(l.input_dim());
      out.push_back(l.output_dim());
      traits.push_back(l.traits());
    }
    this->store_->allocate();
    this->set_dimensions(std::move(in), std::move(out), std::move(traits),
                         "sar::dynamic_sequential");
  }
  /// Movable: the store is held by pointer, so the layers' parameter views stay valid.
  dynamic_sequential(dynamic_sequential&&) noexcept = default;
  /// Move assignment (see the move constructor).
  dynamic_sequential& operator=(dynamic_sequential&&) noexcept = default;

  /// Number of layers.
  std::size_t size() const { return layers_.size(); }
  /// Every layer's state besides its parameters (sar/nn/layer.hpp), in layer order.
  std::vector<std::span<double>> state() {
    std::vector<std::span<double>> all;
    for (auto& l : layers_)
      for (auto s : l.state()) all.push_back(s);
    return all;
  }
  /// Layer k; throws std::out_of_range for k >= size().
  layer_type& layer(std::size_t k) { return layers_.at(k); }
  /// Layer k (const); throws std::out_of_range for k >= size().
  const layer_type& layer(std::size_t k) const { return layers_.at(k); }

  /// As sequential::infer: layers [first, end) in inference on a Schedule or layered graph.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  matrix<T> infer(Graph& graph, const layer_context& ctx, const_rows_ref<T> x, std::size_t first,
                  std::size_t end) {
    return this->run_layers(
        graph, ctx, x, first, end,
        [&](std::size_t k, const layer_context& c, const_rows_ref<T> in, matrix<T>& out,
            std::size_t base) {
          layers_[k].forward(this->schedule_for(graph, k, base), c, in, out);
        },
        "sar::dynamic_sequential::infer");
  }

  /// As sequential::forward, on a Schedule or a layered_graph of Schedules: returns the
  /// logits; x must stay alive and unchanged until the matching backward. Throws
  /// sar::invalid_argument on a shape mismatch. Collective.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  const matrix<T>& forward(Graph& graph, const layer_context& ctx, const_rows_ref<T> x) {
    return this->run_forward(graph, ctx, x, layer_forward(graph),
                             "sar::dynamic_sequential::forward");
  }
  /// As sequential::forward on an input the model takes over (an in-place first layer
  /// overwrites it).
  template <class Graph, class X>
    requires std::same_as<schedule_type_t<Graph>, Schedule> && std::same_as<X, matrix<T>>
  const matrix<T>& forward(Graph& graph, const layer_context& ctx, X&& x) {
    return this->run_forward_owned(graph, ctx, std::move(x), layer_forward(graph),
                                   "sar::dynamic_sequential::forward");
  }

  /// Stage `stage` of forward (layers [stage_starts()[stage], the next start or the end)), on
  /// a layered graph whose block 0 serves the stage's layer that reads neighbours; x is the
  /// stage's input (the previous stage's output over block 0's sources). The numbers are
  /// those layers' in forward. A backward after it runs the stage's layers only (the form
  /// with dx assigns the stage's input gradient): out-of-core training runs a model stage by
  /// stage (sar/train/out_of_core.hpp). x must stay alive and unchanged until that backward.
  /// Throws sar::invalid_argument for a stage out of range or on a shape mismatch.
  template <layered_graph Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  const matrix<T>& forward_stage(Graph& graph, const layer_context& ctx, const_rows_ref<T> x,
                                 std::size_t stage) {
    constexpr const char* where = "sar::dynamic_sequential::forward_stage";
    const auto starts = this->stage_starts();
    SAR_CHECK(stage < starts.size(), invalid_argument, where, ": stage ", stage, " of ",
              starts.size());
    const std::size_t end = stage + 1 < starts.size() ? starts[stage + 1] : this->num_layers();
    return this->run_forward(graph, ctx, x, layer_forward(graph), where, nullptr, starts[stage],
                             end, true);
  }

  /// As forward, on sparse input features (sar/core/sparse_rows.hpp): the layers before the
  /// first one with parameters must run on sparse rows (dropout) and that one must read them
  /// (gcn_layer, sage_layer mean and gcn, gat_layer, linear), which apply their weight first;
  /// the numbers are those of forward on to_dense(x), up to rounding. x must stay alive and
  /// unchanged until the matching backward. Throws sar::invalid_argument, naming the layer,
  /// for a model that cannot, or on a shape mismatch. Collective.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  const matrix<T>& forward(Graph& graph, const layer_context& ctx, const sparse_rows<T>& x) {
    return this->run_forward_rows(graph, ctx, x, layer_forward(graph), rows_forward<matrix<T>>(graph),
                                  rows_forward<sparse_rows<T>>(graph), this->sparse_kept_,
                                  this->sparse_input_, "sar::dynamic_sequential::forward");
  }
  /// As forward, on features stored as bf16 (sar/core/bf16.hpp) on one process: the layers
  /// before the first one with parameters must run on them (dropout, as a mask) and that one
  /// must read them (gcn_layer on a whole_block_schedule), which decodes rows as it reads
  /// them; the numbers are bitwise those of forward on x.decoded<T>(). x must stay alive and
  /// unchanged until the matching backward. Throws sar::invalid_argument, naming the layer,
  /// for a model that cannot (reads_bf16_input()), or on a shape mismatch.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  const matrix<T>& forward(Graph& graph, const layer_context& ctx, const bf16_rows& x) {
    this->bf16_given_ = bf16_input<T>{.values = &x, .kept = {}, .scale = T(1)};
    return this->run_forward_rows(graph, ctx, this->bf16_given_, layer_forward(graph),
                                  rows_forward<matrix<T>>(graph),
                                  rows_forward<bf16_input<T>>(graph), this->bf16_kept_,
                                  this->bf16_input_, "sar::dynamic_sequential::forward");
  }
  /// As infer on layers [0, end), on sparse input features (see forward on them). Throws as
  /// that forward does.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  matrix<T> infer(Graph& graph, const layer_context& ctx, const sparse_rows<T>& x,
                  std::size_t first, std::size_t end) {
    constexpr const char* where = "sar::dynamic_sequential::infer";
    SAR_CHECK(first == 0, invalid_argument, where, ": sparse input features are the input of "
              "layer 0, not of layer ", first);
    const std::size_t s = this->first_trainable();
    sparse_rows<T> kept;
    const sparse_rows<T>& input =
        this->run_prefix(graph, ctx, x, rows_forward<sparse_rows<T>>(graph), kept, where);
    const Eigen::Map<const matrix<T>> none(nullptr, x.rows(), x.cols());  // read by no layer
    return this->run_layers(
        graph, ctx, none, 0, end,
        [&](std::size_t k, const layer_context& c, const_rows_ref<T> in, matrix<T>& out,
            std::size_t base) {
          if (k == s) layers_[k].forward(this->schedule_for(graph, k, base), c, input, out);
          else if (k > s) layers_[k].forward(this->schedule_for(graph, k, base), c, in, out);
        },
        where);
  }

  /// Whether forward on sparse input features can run this model (see that forward).
  bool reads_sparse_input() const {
    const std::size_t s = this->first_trainable();
    for (std::size_t k = 0; k < s; ++k)
      if (!this->traits_[k].sparse_to_sparse) return false;
    return this->traits_[s].sparse_input;
  }
  /// Whether forward on features stored as bf16 can run this model (see that forward).
  bool reads_bf16_input() const {
    const std::size_t s = this->first_trainable();
    for (std::size_t k = 0; k < s; ++k)
      if (!this->traits_[k].bf16_to_bf16) return false;
    return this->traits_[s].bf16_input;
  }

  /// As sequential::backward: ASSIGNS every parameter gradient; layers before the first
  /// one with parameters are skipped and that one computes no input gradient. Throws
  /// sar::invalid_argument without a forward or on a shape mismatch. Collective.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  void backward(Graph& graph, const layer_context& ctx, const matrix<T>& dlogits) {
    const std::size_t first = this->first_trainable();
    this->run_backward(
        ctx, dlogits,
        [&](std::size_t k, const layer_context& c, const_rows_ref<T> x, const_rows_ref<T> y,
            const_rows_ref<T> dy, matrix<T>& dx) {
          if (k == first && this->sparse_input_ != nullptr)
            layers_[k].backward(this->schedule_for(graph, k), c, *this->sparse_input_, y, dy, dx);
          else if (k == first && this->bf16_input_ != nullptr)
            layers_[k].backward(this->schedule_for(graph, k), c, *this->bf16_input_, y, dy, dx);
          else
            layers_[k].backward(this->schedule_for(graph, k), c, x, y, dy, dx);
        },
        "sar::dynamic_sequential::backward");
  }
  /// The same, with every layer run and dL/dx ASSIGNED to dx (a model inside a larger one:
  /// sar/train/graph_level.hpp's stages). Throws sar::invalid_argument after a forward on
  /// sparse or bf16 input (no input gradient of those), or as backward does. Collective.
  template <class Graph>
    requires std::same_as<schedule_type_t<Graph>, Schedule>
  void backward(Graph& graph, const layer_context& ctx, const matrix<T>& dlogits,
                matrix<T>& dx) {
    constexpr const char* where = "sar::dynamic_sequential::backward";
    SAR_CHECK(this->sparse_input_ == nullptr && this->bf16_input_ == nullptr, invalid_argument,
              where, ": no input gradient of sparse or bf16 input rows");
    this->run_backward(
        ctx, dlogits,
        [&](std::size_t k, const layer_context& c, const_rows_ref<T> x, const_rows_ref<T> y,
            const_rows_ref<T> dy, matrix<T>& d) {
          layers_[k].backward(this->schedule_for(graph, k), c, x, y, dy, d);
        },
        where, &dx);
  }

 private:
  /// Layer k's forward from rows that are not a dense matrix (sparse rows, bf16 input) to Y:
  /// a dense output (the first layer with parameters), or rows of the same kind (the layers
  /// before it).
  template <class Y, class Graph>
  auto rows_forward(Graph& graph) {
    return [this, &graph](std::size_t k, const layer_context& c, const auto& in, Y& out) {
      layers_[k].forward(this->schedule_for(graph, k), c, in, out);
    };
  }

  template <class Graph>
  auto layer_forward(Graph& graph) {
    return [this, &graph](std::size_t k, const layer_context& c, const_rows_ref<T> in,
                          matrix<T>& out) {
      layers_[k].forward(this->schedule_for(graph, k), c, in, out);
    };
  }

  std::vector<layer_type> layers_;
};

}  // namespace sar
