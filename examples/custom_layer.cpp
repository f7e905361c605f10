// One idea: a layer you write yourself (a GIN-style sum convolution), checked with the public
// gradient checker, put into a model with the shipped layers, and trained: on one process,
// or under mpirun -np P on P ranks, where every rank trains the same model on its part.
//
//   build/examples/custom-layer                   # one process
//   mpirun -np 2 build/examples/custom-layer      # two ranks (rank 0 writes a partition store)
#include <cstdio>
#include <filesystem>

#include "sar/comm/mpi.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/store.hpp"
#include "sar/sar.hpp"

/// y = ((1 + eps) x_i + sum_{j -> i} x_j) W  (GIN with a fixed eps, one linear map).
/// Keeps between forward and backward: nothing. Collective: one gather, one scatter.
template <class T>
class gin_layer {
 public:
  using scalar = T;
  gin_layer(Eigen::Index in, Eigen::Index out, T eps = T(0.1)) : in_(in), out_(out), eps_(eps) {}

  Eigen::Index input_dim() const { return in_; }
  Eigen::Index output_dim() const { return out_; }
  void declare(sar::parameter_store<T>& store) {
    store_ = &store;
    weight_ = store.declare({.name = "gin.weight", .rows = in_, .cols = out_});
  }

  template <class Schedule>
  void forward(Schedule& graph, const sar::layer_context& ctx, sar::const_rows_ref<T> x,
               sar::matrix<T>& y) {
    sar::matrix<T> h = (T(1) + eps_) * x;  // the node's own term, then its neighbours
    graph.gather(ctx.input_exchange(), x, [&](const sar::graph_block& b, const auto& halo) {
      sar::spmm_add<T>(b, halo, h);  // h += A_block halo
    });
    y = h * store_->value(weight_);
  }

  template <class Schedule>
  void backward(Schedule& graph, const sar::layer_context& ctx, sar::const_rows_ref<T> x,
                sar::const_rows_ref<T>, sar::const_rows_ref<T> dy, sar::matrix<T>& dx) {
    // h is recomputed (nothing kept): dW = h^T dy, dh = dy W^T, dx += (1 + eps) dh + A^T dh.
    sar::matrix<T> h = (T(1) + eps_) * x;
    graph.gather(ctx.input_exchange(), x, [&](const sar::graph_block& b, const auto& halo) {
      sar::spmm_add<T>(b, halo, h);
    });
    store_->grad(weight_) = h.transpose() * dy;  // ASSIGN parameter gradients
    const bool want_dx = dx.rows() == x.rows() && dx.cols() == x.cols();
    if (!want_dx) return;  // 0 x 0: the first layer's input gradient is not wanted
    const sar::matrix<T> dh = dy * store_->value(weight_).transpose();
    dx += (T(1) + eps_) * dh;  // ADD the input gradient
    graph.scatter(ctx.input_exchange(1), dx, [&](const sar::graph_block& b, auto& dhalo) {
      sar::spmm_add_transposed<T>(b, dh, dhalo);  // dhalo += A_block^T dh
    });
  }

 private:
  Eigen::Index in_, out_;
  T eps_;
  sar::parameter_store<T>* store_ = nullptr;
  std::size_t weight_ = 0;
};

/// Trains gin -> relu -> gcn for 30 epochs on `graph` (the nodes of `data`); progress on rank 0.
template <class Schedule>
sar::train_result train(Schedule& graph, const sar::node_data<float>& data,
                        Eigen::Index classes, bool root) {
  sar::sequential<gin_layer<float>, sar::relu<float>, sar::gcn_layer<float>> model(
      gin_layer<float>(data.features.cols(), 32), sar::relu<float>(32),
      sar::gcn_layer<float>(32, classes));
  model.initialise(/*seed=*/3);  // counter-based: the same parameters on every rank
  sar::adam<float> optimiser({.learning_rate = 0.01});
  return sar::train_full_batch(model, graph, optimiser, data,
                               {.epochs = 30, .log_progress = root});
}

/// Checks the layer, then trains it on every rank of `comm`. Collective.
int run(sar::mpi_communicator& comm) {
  const bool root = comm.rank() == 0;
  sar::graph_dataset data = sar::make_planted_partition(
      {.num_nodes = 3000, .num_classes = 4, .feature_dim = 16, .seed = 5});
  data.graph = sar::with_self_loops(data.graph, sar::self_loop_policy::add);  // for the GCN

  // 1. Check the layer's gradients (in double) on a small graph, on one process.
  if (root) {
    sar::local_schedule small(sar::make_planted_partition({.num_nodes = 60}).graph);
    gin_layer<double> layer(5, 3);
    sar::parameter_store<double> store;
    layer.declare(store);
    store.allocate();
    store.initialise(1);
    const sar::matrixd x = sar::matrixd::Random(small.num_sources(), 5);
    const auto check = sar::check_gradients(layer, store, small, sar::layer_context{}, x);
    std::printf("gradient check: %s\n", check.passed ? "passed" : "FAILED");
    if (!check.passed) comm.abort("gin_layer fails the gradient checker");
  }

  // 2. Train: the whole graph on one process, or one part per rank.
  sar::train_result result;
  if (comm.size() == 1) {
    sar::local_schedule graph(data.graph);
    result = train(graph, {data.features, data.labels, data.split}, data.num_classes, root);
  } else {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("sar-custom-layer-" + std::to_string(comm.size()));
    if (root)
      sar::write_partition_store(data, sar::partition_contiguous(data.num_nodes(), comm.size()),
                                 comm.size(), dir, "contiguous");
    comm.barrier();
    const sar::graph_part part = sar::read_partition_part(dir, comm.rank());
    sar::distributed_schedule<sar::mpi_communicator> graph(comm, part);
    result = train(graph, {part.features, part.labels, part.split}, part.num_classes, root);
    comm.barrier();
    if (root) std::filesystem::remove_all(dir);
  }
  if (root)
    std::printf("%d ranks: best epoch %d, validation accuracy %.3f, test accuracy %.3f\n",
                comm.size(), result.best_epoch, result.best_valid_score, result.test_score);
  return 0;
}

int main(int argc, char** argv) {
  sar::mpi_environment mpi(argc, argv);  // also without mpirun: one rank
  // The communicator reads SAR_WATCHDOG_SECONDS; an error on any rank ends every rank with
  // the message and exit code 1.
  return sar::run_mpi_program("custom-layer", run);
}
