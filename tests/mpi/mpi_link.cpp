// Link prediction on P ranks against one process: the metrics with each rank holding a share of
// the scores, and full-batch training (GCN, GraphSAGE and GAT encoders; dot, MLP and DistMult
// decoders; double, dropout on) on renumbered nodes, where each rank scores the pairs whose
// source it owns, give the one-process per-epoch losses and figures.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mpi_check.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/comm/serial.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/generators.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/link_prediction.hpp"
#include "sar/train/models.hpp"

using namespace sar;

namespace {

bool close(double a, double b, double tolerance) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::abs(a - b) <= tolerance * std::max(1.0, std::abs(b));
}

void expect_same_report(const link_report& a, const link_report& b, const char* what) {
  const auto x = a.named(), y = b.named();
  EXPECT(x.size() == y.size(), what, ": ", x.size(), " figures against ", y.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT(x[i].first == y[i].first && close(x[i].second, y[i].second, 1e-9), what, ": ",
           x[i].first, " ", x[i].second, " on P ranks, ", y[i].first, " ", y[i].second,
           " on one process");
}

/// Every rank draws the same scores (with ties) and keeps every P-th: the distributed figures
/// equal the one-process figures of all of them.
void check_metrics(mpi_communicator& comm) {
  const int P = comm.size(), r = comm.rank();
  std::mt19937_64 gen(7);
  const auto draw = [&](std::size_t n) {
    std::vector<double> s(n);
    for (auto& x : s) x = static_cast<double>(gen() % 50) * 0.1;
    return s;
  };
  const int per = 5;
  const auto positive = draw(203), negative = draw(517), own = draw(203 * per);
  std::vector<double> my_positive, my_negative, my_own;
  for (std::size_t i = 0; i < positive.size(); ++i)
    if (static_cast<int>(i % static_cast<std::size_t>(P)) == r) {
      my_positive.push_back(positive[i]);
      my_own.insert(my_own.end(), own.begin() + static_cast<std::ptrdiff_t>(i * per),
                    own.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
    }
  // Negatives unevenly: rank 0 takes none when P > 1.
  for (std::size_t i = 0; i < negative.size(); ++i)
    if (P == 1 || static_cast<int>(i % static_cast<std::size_t>(P - 1)) + 1 == r)
      my_negative.push_back(negative[i]);
  const int ks[] = {1, 20, 100, 1000};
  serial_communicator one;
  const link_report whole =
      link_metrics(one, link_scores{positive, negative, own, per}, std::span<const int>(ks));
  const link_report shared = link_metrics(comm, link_scores{my_positive, my_negative, my_own, per},
                                          std::span<const int>(ks));
  expect_same_report(shared, whole, "metrics");
}

/// This rank's rows of `graph` (contiguous ranges).
struct rank_share {
  graph_part part;
  node_t first = 0, rows = 0;
};

rank_share share_of(const csr& graph, int P, int r) {
  const node_t n = graph.num_rows;
  std::vector<node_t> offsets;
  for (int q = 0; q <= P; ++q) offsets.push_back(n * q / P);
  rank_share s;
  s.part.part = r;
  s.part.book = partition_book(offsets);
  s.first = offsets[static_cast<std::size_t>(r)];
  s.rows = offsets[static_cast<std::size_t>(r) + 1] - s.first;
  csr& in = s.part.in_edges;
  in.num_rows = s.rows;
  in.num_cols = n;
  in.offsets.assign(1, 0);
  for (node_t v = s.first; v < s.first + s.rows; ++v) {
    const auto row = graph.row(v);
    in.columns.insert(in.columns.end(), row.begin(), row.end());
    in.offsets.push_back(static_cast<edge_t>(in.columns.size()));
  }
  return s;
}

template <class Decoder, class Schedule>
link_result train(Schedule& graph, const std::string& family, const matrix<double>& features,
                  const link_data<double>& data) {
  model_config config = paper_defaults(family);
  config.hidden = 12;
  config.heads = family == "gat" ? 2 : 1;
  auto model = make_model<double, Schedule>(config, features.cols(), 12, 3);
  auto optimiser = make_optimiser(config, model);
  link_head<Decoder, adam<double>> head({12, 1}, adam<double>(adam_options{}), 4);
  train_options options;
  options.epochs = 6;
  options.seed = 5;
  options.log_progress = false;
  link_options link;
  link.negatives = 3;
  link.hits_at = {5, 20};
  link.select_by = "mrr";
  return train_link_full_batch(model, head, graph, optimiser, data, options, link);
}

template <class Decoder>
void check_training(mpi_communicator& comm, const std::string& family) {
  const int P = comm.size(), r = comm.rank();
  graph_dataset data = make_planted_partition(
      {.num_nodes = 300, .num_classes = 3, .average_degree = 6, .feature_dim = 8, .seed = 4});
  const link_split split =
      split_edges(data, {.valid = 0.1, .test = 0.1, .per_source_negatives = 6, .seed = 2});
  const csr graph = with_self_loops(data.graph, self_loop_policy::add);
  const matrix<double> features = data.features.cast<double>();
  const link_data<double> whole = link_data_of<double>(split, {features});
  local_schedule one(graph);
  const link_result expected = train<Decoder>(one, family, features, whole);

  // On P ranks the nodes are renumbered (new = (7 old + 3) mod n, as a partitioner relabels
  // them): the graph, the features and the split; negatives are drawn by dataset id.
  const node_t n = graph.num_rows;
  std::vector<node_t> renumbered(static_cast<std::size_t>(n)), original(renumbered.size());
  for (node_t v = 0; v < n; ++v) {
    renumbered[static_cast<std::size_t>(v)] = (7 * v + 3) % n;
    original[static_cast<std::size_t>((7 * v + 3) % n)] = v;
  }
  csr moved;
  moved.num_rows = moved.num_cols = n;
  moved.offsets.assign(1, 0);
  matrix<double> moved_features(n, features.cols());
  for (node_t v = 0; v < n; ++v) {
    const node_t old = original[static_cast<std::size_t>(v)];
    for (const node_t u : graph.row(old))
      moved.columns.push_back(renumbered[static_cast<std::size_t>(u)]);
    moved.offsets.push_back(static_cast<edge_t>(moved.columns.size()));
    moved_features.row(v) = features.row(old);
  }
  link_split moved_split = split;
  const auto renumber = [&](std::vector<node_t>& ids) {
    for (node_t& id : ids) id = renumbered[static_cast<std::size_t>(id)];
  };
  for (node_pairs* pairs : {&moved_split.train, &moved_split.valid, &moved_split.test,
                            &moved_split.valid_negatives, &moved_split.test_negatives}) {
    renumber(pairs->source);
    renumber(pairs->destination);
  }
  renumber(moved_split.valid_target_negatives);
  renumber(moved_split.test_target_negatives);
  rank_share s = share_of(moved, P, r);
  for (node_t v = s.first; v < s.first + s.rows; ++v)  // dropout is keyed by the dataset's ids
    s.part.original_ids.push_back(original[static_cast<std::size_t>(v)]);
  distributed_schedule<mpi_communicator> ranks(comm, s.part);
  const matrix<double> mine = moved_features.middleRows(s.first, s.rows);
  link_data<double> local = link_data_of<double>(moved_split, {mine}, s.first, s.rows);
  local.schedule_ids = renumbered;
  const link_result got = train<Decoder>(ranks, family, mine, local);

  const std::string what = family + " + " + std::string(Decoder::name);
  const auto& a = got.training.history;
  const auto& b = expected.training.history;
  EXPECT(a.size() == b.size(), what);
  for (std::size_t e = 0; e < a.size(); ++e)
    EXPECT(close(a[e].train_loss, b[e].train_loss, 1e-9), what, ": epoch ", e, " loss ",
           a[e].train_loss, " on ", P, " ranks, ", b[e].train_loss, " on one process");
  EXPECT(got.training.best_epoch == expected.training.best_epoch, what);
  expect_same_report(got.valid, expected.valid, (what + " valid").c_str());
  expect_same_report(got.test, expected.test, (what + " test").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    check_metrics(comm);
    check_training<dot_decoder<double>>(comm, "gcn");
    check_training<dot_decoder<double>>(comm, "sage");
    check_training<mlp_decoder<double>>(comm, "gcn");
    check_training<distmult_decoder<double>>(comm, "gat");
    if (comm.rank() == 0)
      std::printf("link prediction: all checks passed on %d ranks\n", comm.size());
  });
}
