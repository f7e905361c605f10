// Run under mpirun -np N. Distributed minibatch training (sar/sampling/
// distributed_sampling_graph.hpp) against one process, for replication c = 1 and c = 2 (when
// c divides N), on a planted graph cut by METIS into N / c parts (so relabelled ids differ
// from dataset ids):
// - samples: every destination of this rank's share of a bulk of minibatches has, in every
//   block, the sources (dataset ids), source scales and destination scale it has in the
//   one-process sample of the whole minibatch (node-wise GraphSAGE and LADIES);
// - training: per-epoch training losses and validation accuracies of minibatch GraphSAGE and
//   LADIES GCN (dropout on) equal the one-process run's within 1e-5 (double and float), and
//   the final parameters agree; so do minibatch GraphSAGE runs on a regression and a
//   multi-label task (double), also when replicas measure nothing in evaluation, and models
//   that read edge features or relations (mpnn, GAT with edge attention, GCN weighted by an
//   edge column, R-GCN on a heterogeneous graph: each sampled edge's row and relation fetched
//   from the rank that owns its destination; also with fanouts per relation), and R-GCN
//   with embeddings of a featureless type (each step borrows its input nodes' rows from the ranks that hold them and returns
//   their gradients there: every rank's rows equal the one-process rows);
// - features stored as bf16: the one-process bf16 losses, fewer bytes than fp32 rows;
// - shuffled_shares: each rank holds its slices of the one-process permutation;
// - traffic: a request sends each distinct remote row once and none of the rank's own;
// - bad input: a replication that does not divide N is a clear error on every rank.
// Any failure prints the rank and ends every rank with MPI_Abort.
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "mpi_check.hpp"
#include "mpi_parts.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/graph/generators.hpp"
#include "sar/partition/metis.hpp"
#include "sar/sampling/distributed_sampling_graph.hpp"
#include "sar/train/minibatch.hpp"
#include "sar/train/model_file.hpp"
#include "sar/train/models.hpp"

using namespace sar;

namespace {

using graph_type = distributed_sampling_graph<mpi_communicator>;

/// For every block l and destination (dataset id): its destination scale and its sources'
/// (dataset id, scale), sorted.
using edges_by_destination =
    std::map<std::pair<std::size_t, node_t>,
             std::pair<double, std::vector<std::pair<node_t, double>>>>;

edges_by_destination edges_of(const minibatch_sample& s) {
  edges_by_destination out;
  for (std::size_t l = 0; l < s.blocks.size(); ++l) {
    const sampled_block& b = s.blocks[l];
    for (node_t r = 0; r < b.edges.num_rows; ++r) {
      auto& [scale, sources] = out[{l, s.ids[r]}];
      scale = b.destination_scales.empty() ? 1.0 : b.destination_scales[r];
      for (node_t c : b.edges.row(r))
        sources.emplace_back(s.ids[c], b.source_scales.empty() ? 1.0 : b.source_scales[c]);
      std::sort(sources.begin(), sources.end());
    }
  }
  return out;
}

bool close(double a, double b, double tolerance) {
  return std::abs(a - b) <= tolerance * std::max(1.0, std::abs(b));
}

void check_samples(mpi_communicator& comm, graph_type& graph, const csr& whole,
                   sampler_kind kind, const std::string& what) {
  sampler_options o{.kind = kind, .seed = 3};
  o.fanouts = kind == sampler_kind::node_wise ? std::vector<node_t>{4, 3} : std::vector<node_t>{40, 30};
  std::vector<std::vector<node_t>> batches, shares;
  const int P = comm.size();
  for (node_t b = 0; b < 5; ++b) {
    batches.emplace_back();
    for (node_t i = 0; i < 23; ++i) batches.back().push_back((b * 97 + i * 31) % whole.num_rows);
    const std::size_t n = batches.back().size();
    shares.emplace_back(batches.back().begin() + n * comm.rank() / P,
                        batches.back().begin() + n * (comm.rank() + 1) / P);
  }
  bulk_sampler distributed(graph.num_nodes(), o);
  const auto mine = distributed.sample(graph, batches, shares, 4, 10);
  bulk_sampler alone(whole, o);
  const auto reference = alone.sample(batches, 4, 10);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    EXPECT(std::equal(shares[b].begin(), shares[b].end(), mine[b].ids.begin()), what,
           ": the share's seeds do not come first");
    const auto want = edges_of(reference[b]);
    for (const auto& [key, value] : edges_of(mine[b])) {
      const auto it = want.find(key);
      EXPECT(it != want.end(), what, ": node ", key.second, " of block ", key.first,
             " is not a destination of the one-process sample (minibatch ", b, ")");
      const auto& [scale, sources] = value;
      EXPECT(close(scale, it->second.first, 1e-12), what, ": destination scale of node ",
             key.second);
      EXPECT(sources.size() == it->second.second.size(), what, ": node ", key.second,
             " of block ", key.first, " has ", sources.size(), " sources, one process ",
             it->second.second.size());
      for (std::size_t e = 0; e < sources.size(); ++e)
        EXPECT(sources[e].first == it->second.second[e].first &&
                   close(sources[e].second, it->second.second[e].second, 1e-12),
               what, ": node ", key.second, " of block ", key.first, " source ",
               sources[e].first, " vs ", it->second.second[e].first);
    }
  }
  if (comm.rank() == 0) std::printf("ok  samples %s\n", what.c_str());
}

/// shuffled_shares on P ranks: each rank holds exactly its slices of the one-process
/// permutation (shuffled_nodes of every training node), for batch sizes from 1 (most ranks'
/// slices empty) to all the training nodes, and the whole minibatches joined from the slices
/// are the permutation's.
void check_shares(mpi_communicator& comm, graph_type& graph, const graph_dataset& data,
                  const std::string& what) {
  std::vector<node_t> all;
  for (std::size_t v = 0; v < data.split.size(); ++v)
    if (data.split[v] == node_split::train) all.push_back(static_cast<node_t>(v));
  const auto count = static_cast<node_t>(all.size());
  std::vector<node_split> split(static_cast<std::size_t>(graph.num_local()));
  for (std::size_t r = 0; r < split.size(); ++r)
    split[r] = data.split[static_cast<std::size_t>(graph.local_ids()[r])];
  const std::vector<node_t> mine = graph.training_nodes(split);
  std::int64_t total = static_cast<std::int64_t>(mine.size());
  graph.all_reduce_sum(std::span<std::int64_t>(&total, 1));
  EXPECT(total == count, what, ": the ranks list ", total, " training nodes, not ", count);
  const int P = comm.size();
  for (const node_t batch : {node_t{1}, node_t{7}, node_t{64}, count})
    for (const std::uint64_t epoch : {0u, 3u}) {
      const std::vector<node_t> order = shuffled_nodes(all, 11, epoch);
      const minibatch_shares got = shuffled_shares(graph, mine, count, batch, 11, epoch);
      EXPECT(got.batches() == (count + batch - 1) / batch, what, ": ", got.batches(),
             " minibatches of ", batch);
      std::vector<std::vector<node_t>> shares;
      for (node_t b = 0; b < got.batches(); ++b) {
        const node_t size = std::min(batch, count - b * batch);
        const auto want = std::span<const node_t>(order).subspan(
            static_cast<std::size_t>(b * batch + size * comm.rank() / P),
            static_cast<std::size_t>(size * (comm.rank() + 1) / P - size * comm.rank() / P));
        const auto share = got.share(b);
        EXPECT(std::equal(share.begin(), share.end(), want.begin(), want.end()), what,
               ": batch size ", batch, " epoch ", epoch, ": minibatch ", b, "'s share on rank ",
               comm.rank(), " is not the permutation's slice");
        shares.emplace_back(share.begin(), share.end());
      }
      const auto whole = detail::whole_minibatches(graph, got, 0, shares);
      for (node_t b = 0; b < got.batches(); ++b)
        EXPECT(std::equal(whole[b].begin(), whole[b].end(), order.begin() + b * batch,
                          order.begin() + b * batch + got.seeds(b)),
               what, ": minibatch ", b, " joined from the shares is not the permutation's");
    }
  if (comm.rank() == 0) std::printf("ok  shuffled shares %s\n", what.c_str());
}

/// Feature traffic of one request: each rank asks for all its own rows and for some rows of
/// other ranks, every one three times. It gets the right rows, and what it sends and receives
/// is each distinct remote row once: its requests are the distinct ids of its list held by
/// another group, none of its own, and the rows answered across all ranks are as many.
void check_traffic(mpi_communicator& comm, graph_type& graph, const graph_dataset& data,
                   const matrixf& local_features, const std::string& what) {
  const std::span<const node_t> own = graph.local_ids();
  const std::set<node_t> held(own.begin(), own.end());
  std::vector<node_t> ids;
  for (int repeat = 0; repeat < 3; ++repeat) {
    ids.insert(ids.end(), own.begin(), own.end());
    for (node_t j = 0; j < 40; ++j) ids.push_back((comm.rank() * 13 + j * 29) % graph.num_nodes());
  }
  std::set<node_t> remote;
  for (const node_t v : ids)
    if (!held.count(v)) remote.insert(v);
  const sampling_traffic before = graph.sent();
  const matrixf rows = graph.gather(const_rows_ref<float>(local_features), ids);
  for (std::size_t i = 0; i < ids.size(); ++i)
    EXPECT(rows.row(static_cast<Eigen::Index>(i)) == data.features.row(ids[i]), what,
           ": row of node ", ids[i], " is not its feature row");
  const std::int64_t asked = graph.sent().requests - before.requests;
  EXPECT(asked == static_cast<std::int64_t>(remote.size()), what, ": rank ", comm.rank(),
         " asked for ", asked, " rows, its list has ", remote.size(), " distinct remote rows");
  const auto row_bytes = static_cast<std::int64_t>(local_features.cols() * sizeof(float));
  std::int64_t total[2] = {asked, graph.sent().row_bytes - before.row_bytes};
  comm.all_reduce(std::span<std::int64_t>(total), reduce_op::sum);
  EXPECT(total[1] == total[0] * row_bytes, what, ": the ranks sent ", total[1],
         " bytes of rows for ", total[0], " distinct remote requests of ", row_bytes, " bytes");
  if (comm.rank() == 0) std::printf("ok  traffic %s\n", what.c_str());
}

struct run_result {
  std::vector<double> losses, valid_score;
  std::vector<double> parameters;
  std::map<std::pair<std::size_t, node_t>, std::vector<double>> rows;  // (table, node): row
  std::int64_t input_rows = 0, gathered_rows = 0;  // this rank's, all epochs
};

/// Minibatch training on `graph` for the task of `data` (a graph_dataset or graph_part: its
/// features, labels or targets, split).
template <class T, class Graph, class Data>
run_result train(Graph& graph, const model_config& config, const Data& data,
                 const minibatch_options& mb, bool bf16 = false) {
  const matrix<T> x = data.features.template cast<T>();
  const bf16_rows stored(bf16 ? x : matrix<T>());
  auto model = make_model<T, local_schedule>(config, x.cols(), data.num_outputs(), 7);
  if (config.node_embeddings) {  // the rows of this rank's nodes
    std::vector<node_t> ids;
    if constexpr (minibatch_graph<Graph>)
      ids.assign(graph.local_ids().begin(), graph.local_ids().end());
    if (ids.empty()) {  // one process: row r is node r
      ids.resize(static_cast<std::size_t>(x.rows()));
      std::iota(ids.begin(), ids.end(), node_t{0});
    }
    model.parameters().hold_rows(ids);
  }
  auto optimiser = make_optimiser(config, model);
  const train_options options{.epochs = config.epochs, .seed = 5, .log_progress = false};
  const node_data<T> nodes{x, data.labels, data.split, data.task,
                           {data.targets.data(), data.targets.rows(), data.targets.cols()},
                           {}, nullptr, bf16 ? &stored : nullptr};
  const auto result = train_minibatch(model, graph, optimiser, nodes, options, mb);
  run_result out;
  for (const auto& e : result.history) {
    out.losses.push_back(e.train_loss);
    out.valid_score.push_back(e.valid_score);
    out.input_rows += e.input_rows;
    out.gathered_rows += e.gathered_rows;
  }
  for (T v : model.parameters().values()) out.parameters.push_back(static_cast<double>(v));
  for (std::size_t k = 0; k < model.parameters().table_count(); ++k) {
    const row_table<T>& table = model.parameters().table(k);
    for (std::size_t r = 0; r < table.ids.size(); ++r) {
      const auto row = table.values.row(static_cast<Eigen::Index>(r));
      out.rows[{k, table.ids[r]}] = std::vector<double>(row.begin(), row.end());
    }
  }
  return out;
}

/// The per-epoch losses and validation scores of `got` are the reference's within
/// `tolerance`, its parameters within 100 times that.
void expect_same_run(mpi_communicator& comm, const run_result& got, const run_result& reference,
                     double tolerance, const std::string& what) {
  EXPECT(got.losses.size() == reference.losses.size(), what);
  for (std::size_t e = 0; e < got.losses.size(); ++e) {
    EXPECT(close(got.losses[e], reference.losses[e], tolerance), what, ": epoch ", e, " loss ",
           got.losses[e], " vs one process ", reference.losses[e]);
    EXPECT(close(got.valid_score[e], reference.valid_score[e], tolerance), what, ": epoch ", e,
           " validation score ", got.valid_score[e], " vs ", reference.valid_score[e]);
  }
  for (std::size_t i = 0; i < got.parameters.size(); ++i)
    EXPECT(close(got.parameters[i], reference.parameters[i], 100 * tolerance), what,
           ": parameter ", i, " ", got.parameters[i], " vs ", reference.parameters[i]);
  for (const auto& [key, row] : got.rows) {  // this rank's embedding rows
    const auto at = reference.rows.find(key);
    EXPECT(at != reference.rows.end(), what, ": table ", key.first, " node ", key.second,
           " has no row in the one-process run");
    for (std::size_t c = 0; c < row.size(); ++c)
      EXPECT(close(row[c], at->second[c], 100 * tolerance), what, ": table ", key.first,
             " node ", key.second, " column ", c, " ", row[c], " vs ", at->second[c]);
  }
  if (comm.rank() == 0)
    std::printf("ok  training %s (loss %.6f -> %.6f)\n", what.c_str(), got.losses.front(),
                got.losses.back());
}

template <class T>
void check_training(mpi_communicator& comm, const graph_dataset& data,
                    const std::vector<int>& assignment, int replication, sampler_kind kind,
                    const std::string& what) {
  model_config config = paper_defaults(kind == sampler_kind::node_wise ? "sage"
                                                                       : "gcn");
  config.hidden = 16;
  config.epochs = 3;
  const auto loops = config.family == "sage" ? self_loop_policy::keep
                                                     : self_loop_policy::add;
  minibatch_options mb{.batch_size = 37, .bulk = 3, .inference_rows = 150};
  mb.sampler = {.kind = kind, .seed = 2};
  mb.sampler.fanouts = kind == sampler_kind::node_wise ? std::vector<node_t>{5, 5}
                                                       : std::vector<node_t>{64, 64};
  const csr whole = with_self_loops(data.graph, loops);
  const run_result reference = train<T>(whole, config, data, mb);
  const int groups = comm.size() / replication;
  graph_part part = mpi_test::cut_part(data, assignment, groups, comm.rank() / replication);
  part.in_edges = with_self_loops(part.in_edges, loops, part.first_global());
  graph_type graph(comm, part, replication, kind == sampler_kind::layer_wise);
  const std::int64_t rows_before = graph.sent().row_bytes;
  const run_result got = train<T>(graph, config, part, mb);
  if constexpr (std::is_same_v<T, float>) {
    // Each minibatch fetching its own rows (groups of one) trains alike, fetches each of its
    // input rows once, and sends more feature rows than the bulk fetching their union once.
    std::int64_t rows[2] = {graph.sent().row_bytes - rows_before, 0};
    minibatch_options apart = mb;
    apart.gather_rows = 1;
    const run_result alone = train<T>(graph, config, part, apart);
    rows[1] = graph.sent().row_bytes - rows_before - rows[0];
    comm.all_reduce(std::span<std::int64_t>(rows), reduce_op::sum);
    EXPECT(alone.losses == got.losses && alone.parameters == got.parameters, what,
           ": fetching each minibatch's rows apart changes training");
    EXPECT(groups == 1 ? rows[0] == 0 : rows[0] < rows[1], what, ": the bulk sent ", rows[0],
           " bytes of feature rows, its minibatches apart ", rows[1]);
    EXPECT(alone.input_rows > 0 && alone.gathered_rows == alone.input_rows &&
               got.input_rows == alone.input_rows && got.gathered_rows < got.input_rows,
           what, ": rank ", comm.rank(), " read ", got.input_rows, " input rows and fetched ",
           got.gathered_rows, " (the bulk's unions), ", alone.gathered_rows,
           " (each minibatch apart)");
  }
  expect_same_run(comm, got, reference, std::is_same_v<T, float> ? 1e-5 : 1e-9, what);
}

/// Minibatch GraphSAGE on features stored as bf16: the one-process bf16 run, with the feature
/// rows travelling as bf16 (fewer bytes than the fp32 run's, whose samples are the same).
void check_bf16(mpi_communicator& comm, const graph_dataset& data,
                const std::vector<int>& assignment, int replication, const std::string& what) {
  model_config config = paper_defaults("sage");
  config.hidden = 16;
  config.epochs = 3;
  minibatch_options mb{.batch_size = 37, .bulk = 3, .inference_rows = 150};
  mb.sampler = {.kind = sampler_kind::node_wise, .fanouts = {5, 5}, .seed = 2};
  const csr whole = with_self_loops(data.graph, self_loop_policy::keep);
  const run_result reference = train<float>(whole, config, data, mb, true);
  const int groups = comm.size() / replication;
  graph_part part = mpi_test::cut_part(data, assignment, groups, comm.rank() / replication);
  part.in_edges = with_self_loops(part.in_edges, self_loop_policy::keep, part.first_global());
  graph_type graph(comm, part, replication, false);
  const run_result got = train<float>(graph, config, part, mb, true);
  std::int64_t rows[2] = {graph.sent().row_bytes, 0};
  (void)train<float>(graph, config, part, mb);
  rows[1] = graph.sent().row_bytes - rows[0];
  comm.all_reduce(std::span<std::int64_t>(rows), reduce_op::sum);
  EXPECT(groups == 1 ? rows[0] == 0 && rows[1] == 0 : rows[0] < rows[1], what, ": bf16 rows ",
         rows[0], " bytes, fp32 rows ", rows[1]);
  expect_same_run(comm, got, reference, 1e-5, what);
}

/// Minibatch training of a model that reads edge features or relations (the edge rows of
/// every sampled block fetched from the ranks that own the edges' destinations): the
/// one-process run.
void check_edge_model(mpi_communicator& comm, const graph_dataset& data,
                      const std::vector<int>& assignment, int replication, model_config config,
                      const std::string& what,
                      std::vector<std::vector<node_t>> relation_fanouts = {}) {
  config.hidden = 8;
  config.layers = 2;
  config.epochs = 3;
  config.edge_dim = data.edge_features.cols();
  minibatch_options mb{.batch_size = 37, .bulk = 3, .inference_rows = 150};
  mb.sampler = {.kind = sampler_kind::node_wise, .fanouts = {5, 5}, .seed = 2,
                .relation_fanouts = std::move(relation_fanouts)};
  csr whole = data.graph;
  matrixf whole_edges = data.edge_features;
  prepare_model_graph(config, whole, whole_edges);
  sampling_graph one_process(whole, whole_edges, data.edge_types);
  const run_result reference = train<double>(one_process, config, data, mb);
  graph_part part = mpi_test::cut_part(data, assignment, comm.size() / replication,
                                       comm.rank() / replication);
  prepare_model_graph(config, part.in_edges, part.edge_features, part.first_global());
  graph_type graph(comm, part, replication, false);
  expect_same_run(comm, train<double>(graph, config, part, mb), reference, 1e-9, what);
}

/// `data` with a regression task (targets: the class id and feature 0) or a multi-label task
/// (targets: the class's two bits).
graph_dataset with_task(graph_dataset data, task_kind task) {
  const bool regress = task == task_kind::regress;
  data.task = task;
  data.targets.resize(data.num_nodes(), 2);
  for (node_t i = 0; i < data.num_nodes(); ++i) {
    const std::int32_t c = data.labels[static_cast<std::size_t>(i)];
    if (regress) data.targets.row(i) << float(c), data.features(i, 0);
    else data.targets.row(i) << float(c % 2), float(c / 2 % 2);
  }
  data.labels.clear();
  data.num_classes = 0;
  data.validate();
  return data;
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    const int P = comm.size();
    planted_partition_options o;
    o.num_nodes = 700;
    o.seed = 6;
    const graph_dataset data = make_planted_partition(o);
    o.edge_feature_dim = 3;
    o.edge_noise = 0.3;
    graph_dataset with_edges = make_planted_partition(o);
    with_edges.edge_features.col(1) = with_edges.edge_features.col(1).cwiseAbs();  // a weight
    const graph_dataset typed = make_planted_heterogeneous(
        {.num_papers = 500, .num_authors = 200, .feature_dim = 6, .author_feature_dim = 3,
         .degree = 3, .authors_per_paper = 2, .seed = 5});
    const graph_dataset featureless = make_planted_heterogeneous(  // authors: no features
        {.num_papers = 400, .num_authors = 150, .feature_dim = 6, .author_feature_dim = 0,
         .degree = 3, .authors_per_paper = 2, .seed = 8});
    std::vector<std::vector<int>> typed_assignment, featureless_assignment;  // for c = 1, 2
    for (int c : {1, 2}) {
      typed_assignment.push_back(P % c == 0 ? partition_metis(typed, P / c, {.seed = 1})
                                            : std::vector<int>());
      featureless_assignment.push_back(
          P % c == 0 ? partition_metis(featureless, P / c, {.seed = 1}) : std::vector<int>());
    }
    for (int c : {1, 2}) {
      if (P % c != 0) continue;
      const std::vector<int> assignment = partition_metis(data, P / c, {.seed = 1});
      const std::string at = " (P = " + std::to_string(P) + ", c = " + std::to_string(c) + ")";
      for (const sampler_kind kind : {sampler_kind::node_wise, sampler_kind::layer_wise}) {
        const std::string name = kind == sampler_kind::node_wise ? "sage" : "ladies";
        const auto loops = kind == sampler_kind::node_wise ? self_loop_policy::keep
                                                           : self_loop_policy::add;
        const csr whole = with_self_loops(data.graph, loops);
        graph_part part = mpi_test::cut_part(data, assignment, P / c, comm.rank() / c);
        part.in_edges = with_self_loops(part.in_edges, loops, part.first_global());
        graph_type graph(comm, part, c, kind == sampler_kind::layer_wise);
        check_samples(comm, graph, whole, kind, name + at);
        if (kind == sampler_kind::node_wise) {
          check_shares(comm, graph, data, at);
          check_traffic(comm, graph, data, part.features, at);
        }
        check_training<double>(comm, data, assignment, c, kind, name + " double" + at);
        check_training<float>(comm, data, assignment, c, kind, name + " float" + at);
      }
      check_bf16(comm, data, assignment, c, "sage bf16" + at);
      for (const task_kind task : {task_kind::regress, task_kind::multilabel})
        check_training<double>(comm, with_task(data, task), assignment, c,
                               sampler_kind::node_wise,
                               message("sage ", task_name(task), " double", at));
      model_config mpnn = paper_defaults("mpnn"), gat = paper_defaults("gat"),
                   gcn = paper_defaults("gcn");
      mpnn.edge_state = false;
      gat.edge_attention = true;
      gcn.edge_weight = 1;
      check_edge_model(comm, with_edges, assignment, c, mpnn, "mpnn over edge features" + at);
      check_edge_model(comm, with_edges, assignment, c, gat, "gat with edge attention" + at);
      check_edge_model(comm, with_edges, assignment, c, gcn, "gcn weighted by an edge column" + at);
      model_config rgcn = paper_defaults("rgcn");
      rgcn.schema = typed.schema;
      check_edge_model(comm, typed, typed_assignment[c - 1], c, rgcn, "rgcn over relations" + at);
      std::vector<std::vector<node_t>> per_relation(
          2, std::vector<node_t>(static_cast<std::size_t>(typed.schema.num_relations()), 2));
      per_relation[0][0] = 1;   // layer 0: one author per paper
      per_relation[1][1] = -1;  // layer 1: every edge of relation 1
      check_edge_model(comm, typed, typed_assignment[c - 1], c, rgcn,
                       "rgcn with fanouts per relation" + at, per_relation);
      rgcn.schema = featureless.schema;
      rgcn.node_embeddings = true;  // the authors' rows borrowed from the ranks holding them
      check_edge_model(comm, featureless, featureless_assignment[c - 1], c, rgcn,
                       "rgcn with author embeddings" + at);
    }
    // A replication that does not divide the ranks: the same clear error on every rank.
    graph_part part = mpi_test::cut_part(data, std::vector<int>(700, 0), 1, 0);
    bool refused = false;
    try {
      graph_type graph(comm, part, P + 1, false);
    } catch (const invalid_argument& e) {
      refused = std::string(e.what()).find("does not divide") != std::string::npos;
    }
    EXPECT(refused, "replication ", P + 1, " was not refused");
    if (comm.rank() == 0)
      std::printf("distributed minibatch samples and training match one process at %d ranks\n", P);
  });
}
