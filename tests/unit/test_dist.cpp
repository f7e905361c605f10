// Communicator concept, serial communicator, graph shards and halo plans: all P parts of a
// graph built in one process, for P = 1..8.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "sar/comm/serial.hpp"
#include "sar/core/rng.hpp"
#include "sar/distributed/graph_shard.hpp"
#include "sar/distributed/halo_plan.hpp"
#include "sar/schedule/local_schedule.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/ogb.hpp"
#include "test_support.hpp"

using namespace sar;

namespace {

struct not_a_comm {  // has rank/size but no collectives: must be rejected
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier() {}
};
struct comm_without_abort : serial_communicator {  // everything but abort and bytes_sent
  void abort(int) = delete;
};
static_assert(communicator<serial_communicator>);
static_assert(point_to_point_communicator<serial_communicator>);
static_assert(!communicator<not_a_comm>);
static_assert(!communicator<int>);
static_assert(!communicator<comm_without_abort>);
static_assert(!point_to_point_communicator<not_a_comm>);
static_assert(wire_scalar<float> && wire_scalar<std::int64_t> && !wire_scalar<int>);

/// Relabels g by new_id = perm[old] and cuts it into the ranges of `offsets`: all P parts.
std::vector<graph_part> make_parts(const csr& g, const std::vector<node_t>& perm,
                                   const std::vector<node_t>& offsets) {
  edge_list edges;
  edges.num_nodes = g.num_rows;
  for (node_t i = 0; i < g.num_rows; ++i)
    for (node_t j : g.row(i)) edges.push_back(perm[j], perm[i]);
  const csr relabelled = build_csr(edges, {.deduplicate = false});
  const partition_book book(offsets);
  std::vector<graph_part> parts(book.num_parts());
  for (int p = 0; p < book.num_parts(); ++p) {
    graph_part& part = parts[p];
    part.part = p;
    part.book = book;
    part.in_edges.num_rows = book.size(p);
    part.in_edges.num_cols = g.num_rows;
    part.in_edges.offsets.assign(1, 0);
    for (node_t i = book.begin(p); i < book.end(p); ++i) {
      for (node_t j : relabelled.row(i)) part.in_edges.columns.push_back(j);
      part.in_edges.offsets.push_back(static_cast<edge_t>(part.in_edges.columns.size()));
    }
  }
  return parts;
}

std::vector<node_t> identity(node_t n) {
  std::vector<node_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  return perm;
}

std::vector<node_t> random_permutation(node_t n, std::uint64_t seed) {
  std::vector<node_t> perm = identity(n);
  const counter_rng rng(seed, rng_stream::partition_random);
  for (node_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1, i)]);
  return perm;
}

std::vector<node_t> equal_ranges(node_t n, int P) {
  std::vector<node_t> offsets(P + 1);
  for (int p = 0; p <= P; ++p) offsets[p] = n * p / P;
  return offsets;
}

/// Random cut points, with part `empty` (if >= 0) of size zero.
std::vector<node_t> random_ranges(node_t n, int P, int empty, std::uint64_t seed) {
  const counter_rng rng(seed, rng_stream::partition_random, 1);
  std::vector<node_t> cuts;
  for (int p = 0; p < P - 1; ++p) cuts.push_back(static_cast<node_t>(rng.below(n + 1, p)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<node_t> offsets{0};
  offsets.insert(offsets.end(), cuts.begin(), cuts.end());
  offsets.push_back(n);
  if (empty == P - 1) offsets[empty] = n;  // part `empty` gets nothing
  else if (empty >= 0) offsets[empty + 1] = offsets[empty];
  return offsets;
}

/// A small random directed multigraph with isolated nodes, self-loops and parallel edges.
csr small_random_graph(node_t n, edge_t m, std::uint64_t seed) {
  const counter_rng rng(seed, rng_stream::generator_edges);
  edge_list edges;
  edges.num_nodes = n;
  const node_t active = n - n / 5;  // the last fifth stays isolated
  for (edge_t k = 0; k < m; ++k)
    edges.push_back(static_cast<node_t>(rng.below(active, k, 0)),
                    static_cast<node_t>(rng.below(active, k, 1)));
  for (node_t i = 0; i < active; i += 7) edges.push_back(i, i);  // self-loops
  return build_csr(edges, {.deduplicate = false});
}

using edge_pair = std::pair<node_t, node_t>;  // (global destination, global source)

/// Every property of shards and plans the rest of sar relies on, for one partitioning.
void check_partitioning(const csr& g, const std::vector<node_t>& perm,
                        const std::vector<node_t>& offsets) {
  const auto parts = make_parts(g, perm, offsets);
  const int P = static_cast<int>(parts.size());
  CAPTURE(P);
  std::vector<graph_shard> shards;
  for (const auto& part : parts) shards.emplace_back(part);

  // Reference: every edge of the relabelled graph, as (dst, src) with multiplicity.
  std::vector<edge_pair> expected;
  for (node_t i = 0; i < g.num_rows; ++i)
    for (node_t j : g.row(i)) expected.emplace_back(perm[i], perm[j]);
  std::sort(expected.begin(), expected.end());

  std::vector<edge_pair> found;
  for (int p = 0; p < P; ++p) {
    CAPTURE(p);
    const graph_shard& s = shards[p];
    const partition_book& book = s.book();
    REQUIRE(s.rank() == p);
    REQUIRE(s.num_parts() == P);
    REQUIRE(s.num_local() == book.size(p));
    REQUIRE(s.in_degree().size() == static_cast<std::size_t>(s.num_local()));
    for (node_t i = 0; i < s.num_local(); ++i)
      CHECK(s.in_degree()[i] == parts[p].in_edges.degree(i));
    edge_t shard_edges = 0;
    for (int q = 0; q < P; ++q) {
      CAPTURE(q);
      const shard_block& b = s.block(q);
      const auto& sources = s.sources(q);
      CHECK(b.peer == q);
      // sources(q): sorted, unique, owned by q; empty for the local block.
      if (q == p) CHECK(sources.empty());
      CHECK(std::adjacent_find(sources.begin(), sources.end(),
                               [](node_t a, node_t c) { return a >= c; }) == sources.end());
      for (node_t id : sources) CHECK((id >= book.begin(q) && id < book.end(q)));
      // Shapes and invariants.
      b.adjacency.validate("adjacency");
      b.transposed.validate("transposed");
      CHECK(b.adjacency.num_rows == static_cast<node_t>(b.rows.size()));
      CHECK(b.adjacency.num_cols == (q == p ? s.num_local() : static_cast<node_t>(sources.size())));
      CHECK(b.transposed.num_rows == b.adjacency.num_cols);
      CHECK(b.transposed.num_cols == s.num_local());
      CHECK(std::adjacent_find(b.rows.begin(), b.rows.end(),
                               [](node_t a, node_t c) { return a >= c; }) == b.rows.end());
      for (node_t k = 0; k < b.adjacency.num_rows; ++k) {
        CHECK(b.adjacency.degree(k) > 0);
        CHECK(std::is_sorted(b.adjacency.row(k).begin(), b.adjacency.row(k).end()));
      }
      // Remote columns are all used (sources are minimal).
      if (q != p)
        for (node_t c = 0; c < b.transposed.num_rows; ++c) CHECK(b.transposed.degree(c) > 0);
      // Decode every edge to global ids; the source must be owned by q.
      std::vector<edge_pair> forward, backward;
      for (node_t k = 0; k < b.adjacency.num_rows; ++k)
        for (node_t c : b.adjacency.row(k)) {
          const node_t src = s.global_source(q, c);
          CHECK(book.owner(src) == q);
          forward.emplace_back(s.first_global() + b.rows[k], src);
          found.push_back(forward.back());
        }
      // The transpose is the transpose, and transposed_edge maps its edges back.
      REQUIRE(b.transposed_edge.size() == static_cast<std::size_t>(b.num_edges()));
      std::vector<edge_t> seen(b.num_edges(), 0);
      for (node_t c = 0; c < b.transposed.num_rows; ++c) {
        CHECK(std::is_sorted(b.transposed.row(c).begin(), b.transposed.row(c).end()));
        for (edge_t t = b.transposed.offsets[c]; t < b.transposed.offsets[c + 1]; ++t) {
          const node_t dst = b.transposed.columns[t];
          backward.emplace_back(s.first_global() + dst, s.global_source(q, c));
          const edge_t e = b.transposed_edge[t];
          REQUIRE((e >= 0 && e < b.num_edges()));
          ++seen[e];
          CHECK(b.adjacency.columns[e] == c);
          const auto k = std::upper_bound(b.adjacency.offsets.begin(), b.adjacency.offsets.end(), e) -
                         b.adjacency.offsets.begin() - 1;
          CHECK(b.rows[k] == dst);
        }
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](edge_t v) { return v == 1; }));
      std::sort(forward.begin(), forward.end());
      std::sort(backward.begin(), backward.end());
      CHECK(forward == backward);
      // The full-row form is the same edges.
      const csr full = b.full_adjacency(s.num_local());
      full.validate("full_adjacency");
      std::vector<edge_pair> from_full;
      for (node_t i = 0; i < full.num_rows; ++i)
        for (node_t c : full.row(i)) from_full.emplace_back(s.first_global() + i, s.global_source(q, c));
      std::sort(from_full.begin(), from_full.end());
      CHECK(from_full == forward);
      shard_edges += b.num_edges();
    }
    CHECK(shard_edges == parts[p].in_edges.num_edges());
    CHECK(s.num_edges() == shard_edges);
  }
  // Every edge in exactly one block of exactly one rank (as a multiset).
  std::sort(found.begin(), found.end());
  CHECK(found.size() == expected.size());
  CHECK(found == expected);

  // Plans from the pure builder agree between sender and receiver.
  std::vector<halo_plan> plans;
  for (int p = 0; p < P; ++p) {
    std::vector<std::vector<node_t>> requests(P);
    for (int q = 0; q < P; ++q) requests[q] = shards[q].sources(p);
    plans.push_back(make_halo_plan(shards[p], requests));
  }
  for (int p = 0; p < P; ++p) {
    CHECK(plans[p].rank == p);
    CHECK(plans[p].num_parts == P);
    CHECK(plans[p].send_rows[p].empty());
    CHECK(plans[p].recv_count[p] == 0);
    for (int q = 0; q < P; ++q) {
      CAPTURE(p);
      CAPTURE(q);
      CHECK(plans[p].recv_count[q] == static_cast<node_t>(shards[p].sources(q).size()));
      CHECK(static_cast<node_t>(plans[p].send_rows[q].size()) == plans[q].recv_count[p]);
      std::vector<node_t> sent_ids;  // what p sends to q, as global ids (rows carry their id)
      for (node_t row : plans[p].send_rows[q]) {
        CHECK((row >= 0 && row < shards[p].num_local()));
        sent_ids.push_back(shards[p].first_global() + row);
      }
      CHECK(sent_ids == shards[q].sources(p));
    }
  }
}

void check_graph(const csr& g, std::uint64_t seed) {
  const node_t n = g.num_rows;
  for (int P = 1; P <= 8; ++P) {
    CAPTURE(P);
    check_partitioning(g, identity(n), equal_ranges(n, P));
    check_partitioning(g, random_permutation(n, seed + P), equal_ranges(n, P));
    const auto ranges = random_ranges(n, P, P >= 2 ? P / 2 : -1, seed + P);
    REQUIRE(ranges.back() == n);
    if (P >= 2) REQUIRE(ranges[P / 2] == ranges[P / 2 + 1]);  // one EMPTY part
    check_partitioning(g, random_permutation(n, seed + 100 + P), ranges);
  }
  // Everything on the last of 4 ranks (three empty parts), and on the first.
  check_partitioning(g, identity(n), {0, 0, 0, 0, n});
  check_partitioning(g, random_permutation(n, seed), {0, n, n, n, n});
}

}  // namespace

TEST_CASE("serial communicator: collectives, exchange and self-messages") {
  serial_communicator comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  comm.barrier();
  std::vector<double> d{1.5, -2.0};
  comm.all_reduce(std::span<double>(d), reduce_op::sum);
  CHECK(d == std::vector<double>{1.5, -2.0});
  std::vector<std::int64_t> i{7};
  comm.broadcast(std::span<std::int64_t>(i), 0);
  CHECK(i[0] == 7);
  CHECK_THROWS_AS(comm.broadcast(std::span<std::int64_t>(i), 1), invalid_argument);
  const auto got = all_to_all_vectors(comm, std::vector<std::vector<float>>{{1.0f, 2.0f, 3.0f}});
  REQUIRE(got.size() == 1);
  CHECK(got[0] == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK_THROWS_AS(all_to_all_vectors(comm, std::vector<std::vector<float>>(2)), invalid_argument);

  // Send before receive, receive before send, tags kept apart, FIFO per tag.
  const std::vector<float> a{1, 2}, b{3, 4};
  std::vector<float> ra(2), rb(2);
  auto s1 = comm.isend(std::span<const float>(a), 0, 5);
  auto s2 = comm.isend(std::span<const float>(b), 0, 5);
  auto r1 = comm.irecv(std::span<float>(ra), 0, 5);
  auto r2 = comm.irecv(std::span<float>(rb), 0, 5);
  comm.wait(s1);
  comm.wait(s2);
  std::vector<serial_communicator::request> rs{r1, r2};
  comm.wait_all(rs);
  CHECK(ra == a);
  CHECK(rb == b);
  std::vector<double> early(3, 0.0);
  const std::vector<double> late{9, 8, 7};
  auto r3 = comm.irecv(std::span<double>(early), 0, 1);
  CHECK(r3.id != 0);
  comm.isend(std::span<const double>(late), 0, 1);
  comm.wait(r3);
  CHECK(early == late);
  // A receive nothing matches would hang: it throws instead.
  auto r4 = comm.irecv(std::span<double>(early), 0, 2);
  CHECK_THROWS_AS(comm.wait(r4), comm_error);
  // Size mismatch with a buffered send.
  comm.isend(std::span<const double>(late), 0, 3);
  std::vector<double> small(2);
  CHECK_THROWS_AS(comm.irecv(std::span<double>(small), 0, 3), comm_error);
  CHECK(comm.bytes_sent() == 0);
}

TEST_CASE("graph_shard and halo_plan on a small random multigraph, P = 1..8") {
  const csr g = small_random_graph(300, 1500, 11);
  REQUIRE(out_degrees(g)[299] == 0);  // isolated nodes exist
  check_graph(g, 11);
}

TEST_CASE("graph_shard and halo_plan on R-MAT graphs, P = 1..8") {
  // Raw R-MAT edges: duplicates, self-loops and isolated nodes kept.
  const csr raw = build_csr(make_rmat({.scale = 9, .num_edges = 4000, .seed = 3}),
                            {.deduplicate = false});
  const auto in = in_degrees(raw), out = out_degrees(raw);
  node_t isolated = 0, loops = 0;
  for (node_t i = 0; i < raw.num_rows; ++i) {
    isolated += (in[i] == 0 && out[i] == 0);
    for (node_t j : raw.row(i)) loops += (j == i);
  }
  REQUIRE(isolated > 0);
  REQUIRE(loops > 0);
  check_graph(raw, 3);
  const csr symmetric = build_csr(make_rmat({.scale = 8, .num_edges = 2000, .seed = 4}),
                                  {.symmetrise = true});
  check_graph(symmetric, 4);
}

TEST_CASE("graph_shard rejects parts that break its contract") {
  const csr g = small_random_graph(50, 200, 5);
  auto parts = make_parts(g, identity(50), {0, 20, 50});
  graph_part wrong_cols = parts[1];
  wrong_cols.in_edges.num_cols = 49;
  CHECK_THROWS_AS(graph_shard{wrong_cols}, invalid_argument);
  graph_part wrong_rows = parts[1];
  wrong_rows.book = partition_book({0, 25, 50});
  CHECK_THROWS_AS(graph_shard{wrong_rows}, invalid_argument);
  graph_part wrong_part = parts[1];
  wrong_part.part = 2;
  CHECK_THROWS_AS(graph_shard{wrong_part}, invalid_argument);
}

TEST_CASE("make_halo_plan validates the requests it receives") {
  const csr g = small_random_graph(60, 300, 6);
  const auto parts = make_parts(g, identity(60), {0, 20, 40, 60});
  const graph_shard s(parts[1]);  // owns [20, 40)
  auto message_of = [&](const std::vector<std::vector<node_t>>& requests) {
    try {
      make_halo_plan(s, requests);
    } catch (const comm_error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::string not_owned = message_of({{5}, {}, {}});
  CHECK(not_owned.find("rank 1") != std::string::npos);
  CHECK(not_owned.find("id 5") != std::string::npos);
  CHECK(message_of({{}, {}, {20, 40}}).find("id 40") != std::string::npos);
  CHECK(message_of({{}, {}, {-1}}).find("id -1") != std::string::npos);
  CHECK(message_of({{25, 21}, {}, {}}).find("sorted") != std::string::npos);
  CHECK(message_of({{25, 25}, {}, {}}).find("sorted") != std::string::npos);
  CHECK(message_of({{}, {}}).find("2 request lists") != std::string::npos);
  CHECK(message_of({{}, {30}, {}}).find("from itself") != std::string::npos);
  const halo_plan ok = make_halo_plan(s, {{20, 39}, {}, {21}});
  CHECK(ok.send_rows[0] == std::vector<node_t>{0, 19});
  CHECK(ok.send_rows[2] == std::vector<node_t>{1});
  CHECK(ok.total_send() == 3);
}

TEST_CASE("build_halo_plan with the serial communicator at P = 1") {
  const csr g = small_random_graph(100, 400, 7);
  const auto parts = make_parts(g, random_permutation(100, 7), {0, 100});
  const graph_shard s(parts[0]);
  serial_communicator comm;
  const halo_plan plan = build_halo_plan(comm, s);
  CHECK(plan == make_halo_plan(s, {{}}));
  CHECK(plan.send_rows.size() == 1);
  CHECK(plan.send_rows[0].empty());
  CHECK(plan.recv_count == std::vector<node_t>{0});
  CHECK(s.block(0).num_edges() == g.num_edges());
  // A shard of another partitioning does not fit a one-rank communicator.
  const auto two = make_parts(g, identity(100), {0, 50, 100});
  CHECK_THROWS_AS(build_halo_plan(comm, graph_shard(two[0])), invalid_argument);
}

TEST_CASE("graph_shard and halo_plan on Cora, P = 1..8") {
  const graph_dataset cora = read_ogb_raw(testing_support::data_dir() / "cora");
  const csr& g = cora.graph;
  REQUIRE(g.num_rows == 2708);
  REQUIRE(g.num_edges() > 0);
  const node_t n = g.num_rows;
  for (int P = 1; P <= 8; ++P) {
    CAPTURE(P);
    check_partitioning(g, random_permutation(n, 40 + P), equal_ranges(n, P));
    check_partitioning(g, random_permutation(n, 60 + P), random_ranges(n, P, P >= 2 ? 0 : -1, P));
  }
}

TEST_CASE("local_schedule keeps one copy of a symmetric graph and a transpose otherwise") {
  // 0 <-> 1, 1 <-> 2 (symmetric); then a directed edge 0 -> 2 added (not symmetric).
  edge_list symmetric_edges;
  symmetric_edges.num_nodes = 3;
  for (auto [from, to] : {std::pair{0, 1}, {1, 0}, {1, 2}, {2, 1}}) symmetric_edges.push_back(from, to);
  local_schedule symmetric(build_csr(symmetric_edges));
  const graph_block* seen = nullptr;
  const matrixd x = matrixd::Ones(3, 2);
  symmetric.gather(sar::exchange_key{}, x, [&](const graph_block& b, const auto&) { seen = &b; });
  REQUIRE(seen != nullptr);
  CHECK(seen->transposed == seen->edges);

  edge_list directed_edges = symmetric_edges;
  directed_edges.push_back(0, 2);
  local_schedule directed(build_csr(directed_edges));
  directed.gather(sar::exchange_key{}, x, [&](const graph_block& b, const auto&) { seen = &b; });
  CHECK(seen->transposed != seen->edges);
  CHECK(*seen->transposed == transpose(*seen->edges));
}
