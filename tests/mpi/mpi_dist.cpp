// Run under mpirun -np N. Every rank builds the same deterministic graph, takes its own part,
// builds its shard and the halo plan with the MPI communicator, compares the plan with the
// pure builder, moves rows (value = global id) along the plan with all_to_all_v and with the
// ring of isend/irecv and as paced sends (which a blocking collective holds), and checks the
// collectives and byte counters. Any failure prints the rank and the difference and ends every
// rank with MPI_Abort (exit code non-zero).
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "sar/comm/mpi.hpp"
#include "sar/comm/progress_thread.hpp"
#include "mpi_check.hpp"
#include "sar/core/rng.hpp"
#include "sar/distributed/graph_shard.hpp"
#include "sar/distributed/halo_plan.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"

using namespace sar;

namespace {

using mpi_test::the_comm;

/// The same graph parts on every rank: R-MAT (duplicates, self-loops, isolated nodes),
/// relabelled by a random permutation, cut into P ranges with part P/2 empty when P >= 3.
std::vector<graph_part> make_parts(int P) {
  const edge_list raw = make_rmat({.scale = 11, .num_edges = 20000, .seed = 17});
  const node_t n = raw.num_nodes;
  std::vector<node_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  const counter_rng rng(17, rng_stream::partition_random);
  for (node_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1, i)]);
  edge_list edges;
  edges.num_nodes = n;
  for (std::size_t k = 0; k < raw.size(); ++k) edges.push_back(perm[raw.src[k]], perm[raw.dst[k]]);
  const csr g = build_csr(edges, {.deduplicate = false});

  std::vector<node_t> offsets(P + 1);
  for (int p = 0; p <= P; ++p) offsets[p] = n * p / P;
  if (P >= 3) offsets[P / 2 + 1] = offsets[P / 2];  // part P/2 is empty
  const partition_book book(offsets);
  std::vector<graph_part> parts(P);
  for (int p = 0; p < P; ++p) {
    parts[p].part = p;
    parts[p].book = book;
    csr& in = parts[p].in_edges;
    in.num_rows = book.size(p);
    in.num_cols = n;
    in.offsets.assign(1, 0);
    for (node_t i = book.begin(p); i < book.end(p); ++i) {
      in.columns.insert(in.columns.end(), g.row(i).begin(), g.row(i).end());
      in.offsets.push_back(static_cast<edge_t>(in.columns.size()));
    }
  }
  return parts;
}

template <class T>
void check_collectives(mpi_communicator& comm) {
  const int p = comm.rank(), P = comm.size();
  const std::size_t n = 37;  // > the chunk limit set in main: exercises chunking
  std::vector<T> sum(n), max(n), min(n);
  for (std::size_t k = 0; k < n; ++k) sum[k] = max[k] = min[k] = static_cast<T>((p + 1) * (k + 1));
  const std::int64_t before = comm.bytes_sent();
  comm.all_reduce(std::span<T>(sum), reduce_op::sum);
  comm.all_reduce(std::span<T>(max), reduce_op::max);
  comm.all_reduce(std::span<T>(min), reduce_op::min);
  EXPECT(comm.bytes_sent() - before == (P > 1 ? 3 * static_cast<std::int64_t>(n * sizeof(T)) : 0),
         "all_reduce counted ", comm.bytes_sent() - before, " bytes");
  for (std::size_t k = 0; k < n; ++k) {
    EXPECT(sum[k] == static_cast<T>(P * (P + 1) / 2 * (k + 1)), "sum[", k, "] = ", sum[k]);
    EXPECT(max[k] == static_cast<T>(P * (k + 1)), "max[", k, "] = ", max[k]);
    EXPECT(min[k] == static_cast<T>(k + 1), "min[", k, "] = ", min[k]);
  }
  const int root = P - 1;
  std::vector<T> values(n, static_cast<T>(p == root ? 42 : -1));
  const std::int64_t before_bcast = comm.bytes_sent();
  comm.broadcast(std::span<T>(values), root);
  for (std::size_t k = 0; k < n; ++k) EXPECT(values[k] == static_cast<T>(42), "broadcast[", k, "]");
  const std::int64_t expected = p == root ? static_cast<std::int64_t>(n * sizeof(T)) * (P - 1) : 0;
  EXPECT(comm.bytes_sent() - before_bcast == expected, "broadcast counted ",
         comm.bytes_sent() - before_bcast, " bytes, expected ", expected);
}

// Rows of F columns; row of global id g holds (g, -g, g + 0.5, ...).
constexpr int F = 3;
double value_of(node_t id, int column) { return column == 0 ? id : column == 1 ? -id : id + 0.5 * column; }

void check_rows(const graph_shard& shard, int q, std::span<const double> rows, const char* how) {
  const auto& expected = shard.sources(q);
  EXPECT(rows.size() == expected.size() * F, how, ": ", rows.size() / F, " rows from rank ", q,
         ", expected ", expected.size());
  for (std::size_t j = 0; j < expected.size(); ++j)
    for (int c = 0; c < F; ++c)
      EXPECT(rows[j * F + c] == value_of(expected[j], c), how, ": row ", j, " from rank ", q,
             " column ", c, " holds ", rows[j * F + c], ", expected global id ", expected[j]);
}

}  // namespace

int main(int argc, char** argv) {
  mpi_environment env(argc, argv);
  // A caller's communicator that sar duplicates (and the caller keeps using).
  MPI_Comm user_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &user_comm);
  {
    mpi_communicator comm(user_comm);
    the_comm = &comm;
    const int p = comm.rank(), P = comm.size();
    EXPECT(comm.native() != user_comm, "the communicator was not duplicated");
    int user_rank = -1;
    MPI_Comm_rank(user_comm, &user_rank);
    EXPECT(user_rank == p, "rank ", p, " vs the caller's ", user_rank);
    comm.set_max_message_elements(16);  // every path below is chunked

    check_collectives<float>(comm);
    check_collectives<double>(comm);
    check_collectives<std::int64_t>(comm);
    comm.barrier();

    // Shards and plans.
    const auto parts = make_parts(P);
    const graph_shard shard(parts[p]);
    const halo_plan plan = build_halo_plan(comm, shard);
    std::vector<std::vector<node_t>> requests(P);
    for (int q = 0; q < P; ++q) requests[q] = graph_shard(parts[q]).sources(p);
    const halo_plan pure = make_halo_plan(shard, requests);
    for (int q = 0; q < P; ++q) {
      EXPECT(plan.send_rows[q] == pure.send_rows[q], "send_rows to rank ", q, " differ: ",
             plan.send_rows[q].size(), " vs ", pure.send_rows[q].size(), " rows");
      EXPECT(plan.recv_count[q] == pure.recv_count[q], "recv_count from rank ", q, ": ",
             plan.recv_count[q], " vs ", pure.recv_count[q]);
    }
    EXPECT(plan == pure, "plans differ");
    if (P >= 3 && p == P / 2) EXPECT(shard.num_local() == 0, "part ", p, " should be empty");
    if (P >= 2) {
      node_t total = plan.total_recv();
      std::vector<std::int64_t> t{total};
      comm.all_reduce(std::span<std::int64_t>(t), reduce_op::sum);
      EXPECT(t[0] > 0, "no halo at all: the test graph does not test the exchange");
    }

    // Local features: row i = global id first + i.
    std::vector<double> x(shard.num_local() * F);
    for (node_t i = 0; i < shard.num_local(); ++i)
      for (int c = 0; c < F; ++c) x[i * F + c] = value_of(shard.first_global() + i, c);

    // (a) One all_to_all_v following the plan.
    std::vector<std::int64_t> send_counts(P), recv_counts(P);
    std::vector<double> send;
    for (int q = 0; q < P; ++q) {
      send_counts[q] = static_cast<std::int64_t>(plan.send_rows[q].size()) * F;
      recv_counts[q] = plan.recv_count[q] * F;
      for (node_t row : plan.send_rows[q]) send.insert(send.end(), &x[row * F], &x[row * F] + F);
    }
    std::vector<double> recv(plan.total_recv() * F);
    const std::int64_t before = comm.bytes_sent();
    comm.all_to_all_v(std::span<const double>(send), std::span<const std::int64_t>(send_counts),
                      std::span<double>(recv), std::span<const std::int64_t>(recv_counts));
    const std::int64_t sent = comm.bytes_sent() - before;
    EXPECT(sent == plan.total_send() * F * static_cast<std::int64_t>(sizeof(double)),
           "all_to_all_v counted ", sent, " bytes for ", plan.total_send(), " rows");
    std::size_t at = 0;
    for (int q = 0; q < P; ++q) {
      check_rows(shard, q, std::span<const double>(recv).subspan(at, recv_counts[q]), "all_to_all_v");
      at += recv_counts[q];
    }
    // Bytes sent by all ranks = bytes received by all ranks.
    std::vector<std::int64_t> traffic{sent, plan.total_recv() * F * static_cast<std::int64_t>(sizeof(double))};
    comm.all_reduce(std::span<std::int64_t>(traffic), reduce_op::sum);
    EXPECT(traffic[0] == traffic[1], "ranks sent ", traffic[0], " bytes but expected ", traffic[1]);

    // (b) The SAR ring: round r sends to p + r and receives from p - r, one round at a time.
    for (int r = 1; r < P; ++r) {
      const int to = (p + r) % P, from = (p - r + P) % P;
      std::vector<double> out;
      for (node_t row : plan.send_rows[to]) out.insert(out.end(), &x[row * F], &x[row * F] + F);
      std::vector<double> in(plan.recv_count[from] * F);
      auto receive = comm.irecv(std::span<double>(in), from, 7);
      auto send_request = comm.isend(std::span<const double>(out), to, 7);
      mpi_communicator::request both[] = {std::move(receive), std::move(send_request)};
      comm.wait_all(both);
      check_rows(shard, from, in, "ring");
    }

    // (b') Paced sends: every rank sends every peer a message of its own size (one empty) in
    // chunks (of at most 16 bytes here), pumped by a progress thread while a collective posted
    // after them completes; every byte arrives, and is counted once.
    {
      auto message_size = [](int from, int to) { return from == 0 && to == 1 ? 0 : 300 + 37 * from + 11 * to; };
      auto byte_of = [](int from, int to, int i) { return static_cast<std::byte>((7 * from + 3 * to + i) % 251); };
      std::vector<std::vector<std::byte>> out(P), in(P);
      std::vector<mpi_communicator::request> pending;
      const std::int64_t paced_before = comm.bytes_sent();
      std::int64_t expected = 0;
      for (int q = 0; q < P; ++q) {
        if (q == p) continue;
        in[q].resize(message_size(q, p));
        pending.push_back(comm.irecv_paced(std::span<std::byte>(in[q]), q, 9, 100));
        for (int i = 0; i < message_size(p, q); ++i) out[q].push_back(byte_of(p, q, i));
        pending.push_back(comm.isend_paced(std::span<const std::byte>(out[q]), q, 9, 100));
        expected += message_size(p, q);
      }
      {
        progress_thread pump([&] { comm.progress(); }, std::chrono::microseconds(50));
        pump.begin();
        comm.barrier();
        comm.wait_all(pending);
        pump.end();
      }
      for (int q = 0; q < P; ++q)
        for (int i = 0; q != p && i < message_size(q, p); ++i)
          EXPECT(in[q][i] == byte_of(q, p, i), "paced byte ", i, " from rank ", q);
      EXPECT(comm.bytes_sent() - paced_before == expected, "paced sends counted ",
             comm.bytes_sent() - paced_before, " bytes for ", expected);
    }

    // (b'') A blocking collective holds the paced sends: rank 0 sends rank 1 a message of 200
    // chunks and enters a barrier that rank 1 joins 300 ms later, both pumped every 50 us.
    // Inside the barrier rank 0 posts no new chunk, so most of the message is still unposted
    // when it returns (without the hold all of it is posted within a few milliseconds); wait()
    // then posts the rest, and every byte arrives.
    if (P >= 2) {
      constexpr int chunk = 16, chunks = 200;
      auto byte_of = [](int i) { return static_cast<std::byte>((5 * i + 1) % 251); };
      std::vector<std::byte> message(p <= 1 ? chunk * chunks : 0);
      if (p == 0)
        for (int i = 0; i < chunk * chunks; ++i) message[i] = byte_of(i);
      progress_thread pump([&] { comm.progress(); }, std::chrono::microseconds(50));
      pump.begin();
      mpi_communicator::request r;
      if (p == 0) r = comm.isend_paced(std::span<const std::byte>(message), 1, 10, chunk);
      if (p == 1) r = comm.irecv_paced(std::span<std::byte>(message), 0, 10, chunk);
      if (p == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.barrier();
      const std::int64_t unposted = comm.paced_bytes_unposted();
      comm.wait(r);
      pump.end();
      if (p == 0)
        EXPECT(unposted >= chunk * chunks / 2, "a barrier let ", chunk * chunks - unposted,
               " of ", chunk * chunks, " paced bytes be posted while it waited");
      for (int i = 0; p == 1 && i < chunk * chunks; ++i)
        EXPECT(message[i] == byte_of(i), "paced byte ", i, " after a held barrier");
      EXPECT(comm.paced_bytes_unposted() == 0, "paced bytes left unposted after wait");
    }

    // (c) The generic helper used by build_halo_plan, with int64 payloads.
    std::vector<std::vector<std::int64_t>> ids(P);
    for (int q = 0; q < P; ++q) ids[q].assign(q + 1, 1000 * p + q);
    const auto got = all_to_all_vectors(comm, ids);
    for (int q = 0; q < P; ++q)
      EXPECT(got[q] == std::vector<std::int64_t>(p + 1, 1000 * q + p), "all_to_all_vectors from ", q);
    comm.barrier();
    if (p == 0) std::printf("mpi_dist: %d ranks OK\n", P);
    the_comm = nullptr;
  }
  MPI_Comm_free(&user_comm);
  return 0;
}
