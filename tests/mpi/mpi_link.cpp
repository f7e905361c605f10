// Link prediction on P ranks against one process: the metrics with each rank holding a share of
// the scores, and full-batch training (GCN, GraphSAGE and GAT encoders; dot, MLP and DistMult
// decoders; double, dropout on) on renumbered nodes, where each rank scores the pairs whose
// source it owns, give the one-process per-epoch losses and figures; so does minibatch
// training on sampled edge minibatches (the minibatch's edges excluded from its blocks) on a
// distributed sampling graph, with and without replicas; with a peer's rows in pieces of a few
// rows, full batch trains alike; and so does R-GCN + DistMult on the
// typed pairs of a heterogeneous graph, full batch on a partition's parts and minibatch.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "mpi_check.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/comm/serial.hpp"
#include "sar/distributed/distributed_schedule.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/edge_split.hpp"
#include "sar/graph/generators.hpp"
#include "mpi_parts.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/graph_part.hpp"
#include "sar/sampling/distributed_sampling_graph.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/train/link_minibatch.hpp"
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

/// The encoder of `family` these checks train (rgcn over `schema`'s relations).
model_config encoder(const std::string& family, const graph_schema& schema = {}) {
  model_config config = paper_defaults(family);
  config.hidden = 12;
  config.heads = family == "gat" ? 2 : 1;
  if (reads_graph_types(config)) config.schema = schema;
  return config;
}

/// Link prediction of the encoder `config` with Decoder on `graph`: full batch on a schedule
/// (a peer's rows in pieces of at most piece_bytes), on sampled edge minibatches on a sampling
/// graph.
template <class Decoder, class Graph>
link_result train(Graph& graph, const model_config& config, const link_data<double>& data,
                  std::size_t piece_bytes = link_options{}.piece_bytes) {
  constexpr bool sampled = minibatch_graph<Graph>;
  using Schedule = std::conditional_t<sampled, local_schedule, Graph>;
  auto model = make_model<double, Schedule>(config, data.nodes.features.cols(), 12, 3);
  auto optimiser = make_optimiser(config, model);
  link_head<Decoder, adam<double>> head({12, link_relations(config)},
                                        adam<double>(adam_options{}), 4);
  train_options options;
  options.epochs = sampled ? 4 : 6;
  options.seed = 5;
  options.log_progress = false;
  link_options link;
  link.negatives = 3;
  link.hits_at = {5, 20};
  link.select_by = "mrr";
  link.piece_bytes = piece_bytes;
  if constexpr (sampled) {
    minibatch_options mb{.batch_size = 60, .bulk = 2, .inference_rows = 70};
    mb.sampler = {.kind = sampler_kind::node_wise, .fanouts = {4, 4}, .seed = 2};
    return train_link_minibatch(model, head, graph, optimiser, data, options, link, mb);
  } else {
    return train_link_full_batch(model, head, graph, optimiser, data, options, link);
  }
}

/// The P-rank run `got` has the per-epoch losses, best epoch and figures of `expected`.
void expect_same_run(const link_result& got, const link_result& expected, const std::string& what,
                     int P) {
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

template <class Decoder>
void check_training(mpi_communicator& comm, const std::string& family,
                    std::size_t piece_bytes = link_options{}.piece_bytes) {
  const int P = comm.size(), r = comm.rank();
  graph_dataset data = make_planted_partition(
      {.num_nodes = 300, .num_classes = 3, .average_degree = 6, .feature_dim = 8, .seed = 4});
  const link_split split =
      split_edges(data, {.valid = 0.1, .test = 0.1, .per_source_negatives = 6, .seed = 2});
  const csr graph = with_self_loops(data.graph, self_loop_policy::add);
  const matrix<double> features = data.features.cast<double>();
  const link_data<double> whole = link_data_of<double>(split, {features});
  local_schedule one(graph);
  const link_result expected = train<Decoder>(one, encoder(family), whole);

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
  const link_result got = train<Decoder>(ranks, encoder(family), local, piece_bytes);
  expect_same_run(got, expected,
                  family + " + " + std::string(Decoder::name) + ", pieces of " +
                      std::to_string(piece_bytes) + " bytes",
                  P);
}

/// Minibatch link prediction on P ranks (P / replication parts) against one process.
template <class Decoder>
void check_minibatch(mpi_communicator& comm, const std::string& family, int replication) {
  const int P = comm.size(), groups = P / replication;
  graph_dataset data = make_planted_partition(
      {.num_nodes = 300, .num_classes = 3, .average_degree = 6, .feature_dim = 8, .seed = 4});
  const link_split split =
      split_edges(data, {.valid = 0.1, .test = 0.1, .per_source_negatives = 6, .seed = 2});
  const auto loops = family == "sage" ? self_loop_policy::keep : self_loop_policy::add;
  const csr graph = with_self_loops(data.graph, loops);
  const matrix<double> features = data.features.cast<double>();
  sampling_graph one(graph);
  const link_result expected =
      train<Decoder>(one, encoder(family), link_data_of<double>(split, {features}));

  std::vector<int> assignment(static_cast<std::size_t>(data.num_nodes()));
  for (std::size_t v = 0; v < assignment.size(); ++v)
    assignment[v] = static_cast<int>((v * 7) % static_cast<std::size_t>(groups));
  graph_part part = mpi_test::cut_part(data, assignment, groups, comm.rank() / replication);
  part.in_edges = with_self_loops(part.in_edges, loops, part.first_global());
  const matrix<double> mine = part.features.cast<double>();
  distributed_sampling_graph<mpi_communicator> ranks(comm, part, replication, false);
  const link_result got =
      train<Decoder>(ranks, encoder(family), link_data_of<double>(split, {mine}, ranks));
  expect_same_run(got, expected,
                  "minibatch " + family + " + " + std::string(Decoder::name) + ", replication " +
                      std::to_string(replication),
                  P);
}

/// R-GCN + DistMult on a planted heterogeneous graph (reverse relations added; the split's
/// pairs each of a relation, so DistMult scores each with its relation's diagonal): full batch
/// on the relabelled parts of a random partition and minibatch on a distributed sampling graph
/// give the one-process runs.
void check_relational(mpi_communicator& comm) {
  const int P = comm.size(), r = comm.rank();
  graph_dataset data = make_planted_heterogeneous(
      {.num_papers = 200, .num_authors = 80, .feature_dim = 6, .author_feature_dim = 3,
       .degree = 3, .authors_per_paper = 2, .seed = 3});
  const link_split split =
      split_edges(data, {.valid = 0.1, .test = 0.1, .per_source_negatives = 6, .seed = 2});
  EXPECT(split.train.typed() && split.valid.typed() && split.test_negatives.typed(),
         "a split of a typed graph has untyped pairs");
  const model_config config = encoder("rgcn", data.schema);
  EXPECT(link_relations(config) == data.schema.num_relations(), "rgcn's decoder knows ",
         link_relations(config), " relations of ", data.schema.num_relations());
  const matrix<double> features = data.features.cast<double>();
  const link_data<double> whole = link_data_of<double>(split, {features});
  local_schedule one(csr{data.graph}, matrixf(), std::vector<std::int32_t>(data.edge_types));
  const link_result expected = train<distmult_decoder<double>>(one, config, whole);

  const std::vector<int> assignment = partition_random(data.num_nodes(), P, 7);
  const relabelling ids = relabel(assignment, P);
  graph_part part = mpi_test::cut_part(data, assignment, P, r);
  link_split moved = split;  // in the parts' numbering
  const auto renumber = [&](std::vector<node_t>& nodes) {
    for (node_t& v : nodes) v = ids.new_of_old[static_cast<std::size_t>(v)];
  };
  for (node_pairs* pairs : {&moved.train, &moved.valid, &moved.test, &moved.valid_negatives,
                            &moved.test_negatives}) {
    renumber(pairs->source);
    renumber(pairs->destination);
  }
  renumber(moved.valid_target_negatives);
  renumber(moved.test_target_negatives);
  const matrix<double> mine = part.features.cast<double>();
  {
    distributed_schedule<mpi_communicator> ranks(comm, part);
    link_data<double> local =
        link_data_of<double>(moved, {mine}, part.first_global(), part.in_edges.num_rows);
    local.schedule_ids = ids.new_of_old;
    expect_same_run(train<distmult_decoder<double>>(ranks, config, local), expected,
                    "rgcn + distmult", P);
  }
  sampling_graph sampled_one(data.graph, data.edge_features, data.edge_types);
  const link_result expected_sampled =
      train<distmult_decoder<double>>(sampled_one, config, whole);
  distributed_sampling_graph<mpi_communicator> sampled(comm, part, 1, false);
  expect_same_run(train<distmult_decoder<double>>(sampled, config,
                                                  link_data_of<double>(split, {mine}, sampled)),
                  expected_sampled, "minibatch rgcn + distmult", P);
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    check_metrics(comm);
    check_relational(comm);
    check_training<dot_decoder<double>>(comm, "gcn");
    check_training<dot_decoder<double>>(comm, "sage");
    check_training<dot_decoder<double>>(comm, "sage", 300);  // a peer's rows 3 at a time
    check_training<mlp_decoder<double>>(comm, "gcn");
    check_training<distmult_decoder<double>>(comm, "gat");
    check_minibatch<dot_decoder<double>>(comm, "sage", 1);
    check_minibatch<mlp_decoder<double>>(comm, "gcn", 1);
    check_minibatch<distmult_decoder<double>>(comm, "gat", comm.size() % 2 == 0 ? 2 : 1);
    if (comm.rank() == 0)
      std::printf("link prediction: all checks passed on %d ranks\n", comm.size());
  });
}
