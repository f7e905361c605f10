// The distributed partitioning path against the one-process one, on P ranks (run with 1, 2
// and 4): the directory lookup, the distributed graph build (every build option), the
// symmetric adjacency, the redistribution (the parts equal sar::relabel's), the collective
// store write (byte for byte the store write_partition_store writes on one process, and the
// previous store kept when a rank fails), and PT-Scotch (valid, balanced, deterministic, a
// cut far below random's), coarsening (star clusters, their graph, a sample of its arcs, the
// refinement, and PT-Scotch on the coarsened graph), and the parallel readers (each rank's block of every input kind
// equals the rows of load_dataset's graph; errors found by one rank stop every rank).
#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "mpi_check.hpp"
#include "ptscotch_check.hpp"
#include "sar/partition/directory.hpp"
#include "sar/comm/mpi.hpp"
#include "sar/core/rng.hpp"
#include "sar/graph/generators.hpp"
#include "sar/partition/coarsen.hpp"
#include "sar/partition/distributed_build.hpp"
#include "sar/partition/distributed_partition.hpp"
#include "sar/partition/parallel_read.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/ptscotch.hpp"
#include "sar/partition/redistribute.hpp"
#include "sar/partition/store.hpp"

using namespace sar;
using mpi_test::block_of;
using mpi_test::edge_cut;
using mpi_test::test_ptscotch;
namespace fs = std::filesystem;

namespace {

bool same_csr(const csr& a, const csr& b) {
  return a.num_rows == b.num_rows && a.offsets == b.offsets && a.columns == b.columns;
}

std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      out[fs::relative(e.path(), dir).string()] =
          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  return out;
}

void test_directory(mpi_communicator& comm) {
  const node_t n = 1000;
  const partition_book book = block_book(n, comm.size());
  std::vector<std::int64_t> mine;
  for (node_t i = book.begin(comm.rank()); i < book.end(comm.rank()); ++i) mine.push_back(3 * i + 1);
  std::vector<node_t> asked;
  const counter_rng rng(7, rng_stream::partition_random, static_cast<std::uint64_t>(comm.rank()));
  for (int k = 0; k < 500; ++k) asked.push_back(static_cast<node_t>(rng.below(n, k)));
  asked.push_back(0);
  asked.push_back(n - 1);
  const auto values = directory_lookup(comm, book, mine, asked);
  for (std::size_t k = 0; k < asked.size(); ++k)
    EXPECT(values[k] == 3 * asked[k] + 1, "directory: id ", asked[k], " -> ", values[k]);
  bool refused = false;
  const std::vector<node_t> outside{n};
  try {
    directory_lookup(comm, book, mine, outside);
  } catch (const invalid_argument&) {
    refused = true;
  }
  EXPECT(refused, "directory: an id outside the range is refused");
}

/// 64-bit ids: the id arithmetic of the distributed path (block ranges, their owners, the
/// contiguous parts) past 2^31 and 2^40, where no arrays of that size fit.
void test_wide_ids(mpi_communicator& comm) {
  static_assert(sizeof(node_t) == 8 && sizeof(edge_t) == 8);
  for (const node_t n : {(node_t{1} << 31) + 3, (node_t{1} << 40) + 7}) {
    const partition_book book = block_book(n, comm.size());
    node_t total = 0;
    for (int r = 0; r < comm.size(); ++r) {
      total += book.size(r);
      EXPECT(book.size(r) == 0 || (book.owner(book.begin(r)) == r && book.owner(book.end(r) - 1) == r),
             "block_book(", n, "): range ", r, " [", book.begin(r), ", ", book.end(r), ")");
    }
    EXPECT(total == n && book.end(comm.size() - 1) == n, "block_book(", n, ") covers ", total);
    for (const int parts : {1, 3, 1000}) {
      for (int p = 0; p < parts; ++p) {
        const node_t bound = static_cast<node_t>(static_cast<__int128>(n) * p / parts);
        EXPECT(contiguous_part_of(bound, n, parts) == p &&
                   (bound == 0 || contiguous_part_of(bound - 1, n, parts) == p - 1),
               "contiguous_part_of around ", bound, " of ", n, " in ", parts, " parts");
      }
      EXPECT(contiguous_part_of(n - 1, n, parts) == parts - 1, "the last of ", n, " nodes");
    }
  }
}

void test_build(mpi_communicator& comm) {
  // Random edges with duplicates and self-loops, dealt out to the ranks in no particular order.
  const node_t n = 300;
  edge_list all;
  all.num_nodes = n;
  const counter_rng rng(11, rng_stream::generator_edges);
  for (int k = 0; k < 3000; ++k)
    all.push_back(static_cast<node_t>(rng.below(n, k, 0)),
                  static_cast<node_t>(k % 7 == 0 ? rng.below(n, k, 0) : rng.below(n, k, 1)));
  const partition_book book = block_book(n, comm.size());
  edge_list mine;
  std::vector<edge_t> mine_index;  // each edge's index in `all`
  for (std::size_t k = 0; k < all.size(); ++k)
    if (static_cast<int>((k * 7919) % static_cast<std::size_t>(comm.size())) == comm.rank()) {
      mine.push_back(all.src[k], all.dst[k]);
      mine_index.push_back(static_cast<edge_t>(k));
    }
  // A row per edge (its index, and a second column) that travels with it.
  const auto row_of = [](edge_t k) {
    return std::array<float, 3>{static_cast<float>(k), 0.5f * static_cast<float>(k), -1.0f};
  };
  matrixf all_rows(static_cast<Eigen::Index>(all.size()), 3),
      mine_rows(static_cast<Eigen::Index>(mine.size()), 3);
  for (std::size_t k = 0; k < all.size(); ++k)
    for (int c = 0; c < 3; ++c) all_rows(static_cast<Eigen::Index>(k), c) = row_of(k)[c];
  for (std::size_t k = 0; k < mine.size(); ++k)
    for (int c = 0; c < 3; ++c)
      mine_rows(static_cast<Eigen::Index>(k), c) = row_of(mine_index[k])[c];
  const edge_rows_share data{
      .index = mine_index, .total = static_cast<edge_t>(all.size()), .rows = mine_rows};
  for (bool symmetrise : {false, true})
    for (bool deduplicate : {false, true})
      for (auto loops : {self_loop_policy::keep, self_loop_policy::remove, self_loop_policy::add}) {
        const build_options options{symmetrise, deduplicate, loops};
        const csr whole = build_csr(all, options);
        const csr block = build_block_csr(comm, mine, book, options, /*round_edges=*/97);
        csr expected;
        expected.num_rows = book.size(comm.rank());
        expected.offsets.clear();
        for (node_t i = book.begin(comm.rank()); i <= book.end(comm.rank()); ++i)
          expected.offsets.push_back(whole.offsets[i] - whole.offsets[book.begin(comm.rank())]);
        expected.columns.assign(whole.columns.begin() + whole.offsets[book.begin(comm.rank())],
                                whole.columns.begin() + whole.offsets[book.end(comm.rank())]);
        EXPECT(same_csr(block, expected), "build_block_csr differs from build_csr (symmetrise ",
               symmetrise, ", deduplicate ", deduplicate, ", loops ", static_cast<int>(loops), ")");
        EXPECT(block.num_cols == n, "build_block_csr: num_cols ", block.num_cols);
        // With rows: the same graph, each entry with the row of the edge build_csr names.
        std::vector<edge_t> origins;
        (void)build_csr(all, options, &origins);
        const matrixf whole_rows = take_edge_rows(all_rows, origins);
        matrixf rows;
        const csr with_rows = build_block_csr(comm, mine, data, book, options, rows, 97);
        const edge_t base = whole.offsets[book.begin(comm.rank())];
        EXPECT(same_csr(with_rows, expected) &&
                   rows == whole_rows.middleRows(base, expected.num_edges()),
               "build_block_csr with rows differs from build_csr's origins (symmetrise ",
               symmetrise, ", deduplicate ", deduplicate, ", loops ", static_cast<int>(loops), ")");
      }
  // Typed: three relations, repeats within and across them; rows as build_typed_csr's origins.
  std::vector<std::int32_t> all_types(all.size()), mine_types;
  for (std::size_t k = 0; k < all.size(); ++k) all_types[k] = static_cast<std::int32_t>(k % 3);
  for (const edge_t k : mine_index) mine_types.push_back(all_types[static_cast<std::size_t>(k)]);
  std::vector<std::int32_t> whole_types, block_types, plain_types;
  std::vector<edge_t> origins;
  const csr whole = build_typed_csr(all, all_types, whole_types, &origins);
  const matrixf whole_rows = take_edge_rows(all_rows, origins);
  matrixf rows;
  const csr typed =
      build_typed_block_csr(comm, mine, mine_types, data, book, block_types, rows, 97);
  const csr plain = build_typed_block_csr(comm, mine, mine_types, book, plain_types, 97);
  const edge_t base = whole.offsets[book.begin(comm.rank())];
  const edge_t count = whole.offsets[book.end(comm.rank())] - base;
  EXPECT(same_csr(typed, plain) && block_types == plain_types && typed.num_edges() == count &&
             std::equal(block_types.begin(), block_types.end(), whole_types.begin() + base) &&
             std::equal(typed.columns.begin(), typed.columns.end(), whole.columns.begin() + base) &&
             rows == whole_rows.middleRows(base, count),
         "build_typed_block_csr with rows differs from build_typed_csr's origins");
}

/// `data` as a regression dataset: two targets per node (its class and a function of its id).
graph_dataset as_regression(graph_dataset data) {
  data.task = task_kind::regress;
  data.targets.resize(data.num_nodes(), 2);
  for (node_t i = 0; i < data.num_nodes(); ++i)
    data.targets.row(i) << static_cast<float>(data.labels[i]), std::sin(static_cast<float>(i));
  data.labels.clear();
  data.num_classes = 0;
  data.name += "-regress";
  return data;
}

void test_redistribute_and_store(mpi_communicator& comm, const fs::path& scratch,
                                 const graph_dataset& data) {
  const partition_book book = block_book(data.num_nodes(), comm.size());
  for (int parts : {comm.size(), 2 * comm.size(), 3}) {
    if (parts < comm.size()) continue;
    const std::vector<int> whole = partition_random(data.num_nodes(), parts, 5);
    const std::vector<int> mine(whole.begin() + book.begin(comm.rank()),
                                whole.begin() + book.end(comm.rank()));
    std::vector<graph_part> got =
        redistribute(comm, block_of(data, book, comm.rank()), mine, parts);
    const relabelling ids = relabel(whole, parts);
    std::size_t next = 0;
    for (int k = 0; k < parts; ++k) {
      if (part_owner(k, parts, comm.size()) != comm.rank()) continue;
      EXPECT(next < got.size() && got[next].part == k, "redistribute: part ", k, " missing");
      const graph_part expected = detail::store::part_of(data, ids, k);
      const graph_part& p = got[next++];
      EXPECT(p.book == ids.book && same_csr(p.in_edges, expected.in_edges) &&
                 p.features == expected.features && p.labels == expected.labels &&
                 p.split == expected.split && p.original_ids == expected.original_ids &&
                 p.num_classes == data.num_classes && p.task == data.task &&
                 p.targets == expected.targets && p.edge_features == expected.edge_features,
             "redistribute: part ", k, " of ", parts, " differs from relabel's");
    }
    EXPECT(next == got.size(), "redistribute: ", got.size(), " parts, expected ", next);

    // The collective store equals the one-process store, file for file.
    const fs::path serial = scratch / (data.name + "-serial-" + std::to_string(parts));
    const fs::path distributed = scratch / (data.name + "-distributed-" + std::to_string(parts));
    if (comm.rank() == 0) write_partition_store(data, whole, parts, serial, "random seed=5");
    partition_metadata about;
    about.dataset = data.name;
    about.feature_dim = data.features.cols();
    about.num_classes = data.num_classes;
    about.task = data.task;
    about.num_outputs = data.task == task_kind::classify ? 0 : data.targets.cols();
    about.has_labels = !data.labels.empty();
    about.has_split = true;
    about.method = "random seed=5";
    write_partition_store(comm, got, parts, about, distributed);
    comm.barrier();
    if (comm.rank() == 0) {
      const auto a = files_of(serial), b = files_of(distributed);
      EXPECT(a.size() == b.size(), "store: ", a.size(), " files against ", b.size());
      for (const auto& [name, content] : a)
        EXPECT(b.contains(name) && b.at(name) == content, "store: ", name, " differs");
    }
    comm.barrier();
  }
}

void test_failed_write_keeps_store(mpi_communicator& comm, const fs::path& scratch) {
  // A rank whose part cannot be written makes every rank throw, and the previous store stays as
  // it was, with no temporary directory left: first a part that breaks the contract (refused
  // before anything is written), then a rank whose files cannot be written (a file-size limit
  // on the last rank: it fails midway, after the others wrote theirs).
  const graph_dataset data = make_planted_partition({.num_nodes = 200, .feature_dim = 3});
  const fs::path store = scratch / "kept";
  const std::vector<int> whole = partition_contiguous(data.num_nodes(), comm.size());
  if (comm.rank() == 0) write_partition_store(data, whole, comm.size(), store, "contiguous");
  comm.barrier();
  const auto before = comm.rank() == 0 ? files_of(store) : std::map<std::string, std::string>();
  const partition_book book = block_book(data.num_nodes(), comm.size());
  const std::vector<int> mine(whole.begin() + book.begin(comm.rank()),
                              whole.begin() + book.end(comm.rank()));
  std::vector<graph_part> got = redistribute(comm, block_of(data, book, comm.rank()), mine, comm.size());
  partition_metadata about;
  about.dataset = data.name;
  about.feature_dim = data.features.cols();
  about.num_classes = data.num_classes;
  about.has_labels = about.has_split = true;
  const bool last = comm.rank() == comm.size() - 1;
  for (const char* failure : {"a part that breaks the contract", "a file-size limit"}) {
    const bool contract = failure[0] == 'a' && failure[2] == 'p';
    std::vector<graph_part> parts = got;
    rlimit saved{};
    if (last && contract) parts.front().part = -7;
    if (last && !contract) {
      std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails (EFBIG) instead of killing
      getrlimit(RLIMIT_FSIZE, &saved);
      rlimit small = saved;
      small.rlim_cur = 100;
      setrlimit(RLIMIT_FSIZE, &small);
    }
    bool threw = false;
    try {
      write_partition_store(comm, parts, comm.size(), about, store);
    } catch (const error&) {
      threw = true;
    }
    if (last && !contract) setrlimit(RLIMIT_FSIZE, &saved);
    EXPECT(threw, failure, " on one rank makes every rank throw");
    comm.barrier();
    if (comm.rank() == 0) {
      EXPECT(files_of(store) == before, failure, ": the previous store is kept");
      for (const auto& e : fs::directory_iterator(scratch))
        EXPECT(e.path().filename().string().find(".sar-partial-") == std::string::npos, failure,
               ": no temporary directory is left: ", e.path().string());
    }
    comm.barrier();
  }
}

void test_simple_methods(mpi_communicator& comm) {
  // The distributed random and contiguous methods give the one-process partitioners' parts.
  const graph_dataset data = make_planted_partition({.num_nodes = 1001, .feature_dim = 2});
  const partition_book book = block_book(data.num_nodes(), comm.size());
  graph_part block = block_of(data, book, comm.rank());
  // Parts that would be empty are refused alike (1001 random parts of 1001 nodes).
  const auto refusal = [](auto&& f) {
    try {
      f();
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      return what.substr(what.find(": "));
    }
    return std::string();
  };
  const std::string whole_refusal = refusal([&] { partition_random(data.num_nodes(), 1001, 9); });
  const std::string block_refusal = refusal([&] {
    partition_block(comm, block, {.method = distributed_method::random, .parts = 1001, .seed = 9});
  });
  EXPECT(!whole_refusal.empty() && whole_refusal == block_refusal, "empty parts refused: '",
         whole_refusal, "' against '", block_refusal, "'");
  for (int parts : {1, 3, comm.size(), 7, 100, 1001}) {
    const int random_parts = std::min(parts, 100);  // 1001 leaves parts empty (above)
    const auto random = partition_block(comm, block, {.method = distributed_method::random,
                                                      .parts = random_parts, .seed = 9});
    const auto contiguous = partition_block(comm, block, {.method = distributed_method::contiguous,
                                                          .parts = parts});
    const auto whole_random = partition_random(data.num_nodes(), random_parts, 9);
    const auto whole_contiguous = partition_contiguous(data.num_nodes(), parts);
    for (node_t r = 0; r < block.num_local(); ++r) {
      EXPECT(random[r] == whole_random[book.begin(comm.rank()) + r], "random part of ", r);
      EXPECT(contiguous[r] == whole_contiguous[book.begin(comm.rank()) + r], "contiguous part of ",
             book.begin(comm.rank()) + r, " with ", parts, " parts: ", contiguous[r], " against ",
             whole_contiguous[book.begin(comm.rank()) + r]);
    }
  }
}

/// read_dataset_block(spec) on every rank equals the rows of load_dataset(spec) it owns,
/// with chunks small enough that every rank reads several.
void expect_block_matches(mpi_communicator& comm, const std::string& spec,
                          const dataset_sizes& sizes = {}) {
  const graph_dataset whole = load_dataset(spec, sizes);
  const dataset_block read = read_dataset_block(comm, spec, {.sizes = sizes, .round_edges = 97});
  const graph_part& block = read.rows;
  EXPECT(read.name == whole.name, spec, ": name ", read.name, " expected ", whole.name);
  const partition_book book = block_book(whole.num_nodes(), comm.size());
  graph_dataset labelled = whole;  // block_of wants labels and split
  if (labelled.labels.empty()) labelled.labels.assign(whole.num_nodes(), -1);
  if (labelled.split.empty()) labelled.split.assign(whole.num_nodes(), node_split::none);
  const graph_part expected = block_of(labelled, book, comm.rank());
  EXPECT(block.book.offsets() == book.offsets(), spec, ": book");
  EXPECT(block.part == comm.rank() && same_csr(block.in_edges, expected.in_edges) &&
             block.in_edges.num_cols == whole.num_nodes(),
         spec, ": rows of rank ", comm.rank(), " (", block.in_edges.num_edges(), " edges, expected ",
         expected.in_edges.num_edges(), ")");
  EXPECT(block.features == expected.features, spec, ": features");
  EXPECT(block.labels == (whole.labels.empty() ? std::vector<std::int32_t>{} : expected.labels),
         spec, ": labels");
  EXPECT(block.split == (whole.split.empty() ? std::vector<node_split>{} : expected.split), spec,
         ": split");
  EXPECT(block.num_classes == whole.num_classes && block.original_ids == expected.original_ids,
         spec, ": num_classes ", block.num_classes, " expected ", whole.num_classes);
  EXPECT(block.task == whole.task && block.targets == expected.targets, spec, ": targets");
  EXPECT(block.edge_features == expected.edge_features, spec, ": edge features");
  EXPECT(block.schema == expected.schema && block.edge_types == expected.edge_types, spec,
         ": schema and relations");
  block.validate("read_dataset_block");
  // The features left for later and the in-edges freed (a .npy dataset's only) are then read
  // again: the same rows.
  dataset_block deferred = read_dataset_block(comm, spec, {.sizes = sizes, .features = false});
  EXPECT(deferred.rows.features.cols() == whole.features.cols(), spec, ": deferred width");
  if (deferred.rereadable) deferred.rows.in_edges = csr{};
  read_block_rest(comm, deferred);
  EXPECT(deferred.rows.features == expected.features &&
             same_csr(deferred.rows.in_edges, expected.in_edges) &&
             deferred.rows.edge_features == expected.edge_features,
         spec, ": features, in-edges and edge features read after the rest");
}

/// Writes the heterogeneous `data` in OGB's raw layout of ogbn-mag at `dir`: num-node-dict,
/// one edge file per relation (ids local to their types), each type's features (its
/// feature_dim columns) and labels where it has any, and split/s/<type>/ where it has one.
void write_ogb_heterogeneous(const fs::path& dir, const graph_dataset& data) {
  const graph_schema& schema = data.schema;
  const fs::path raw = dir / "raw";
  fs::create_directories(raw);
  std::ofstream types(raw / "num-node-dict.csv");
  for (std::size_t t = 0; t < schema.node_types.size(); ++t)
    types << (t ? "," : "") << schema.node_types[t].name;
  types << '\n';
  for (std::size_t t = 0; t < schema.node_types.size(); ++t)
    types << (t ? "," : "") << schema.node_types[t].count;
  types << '\n';
  for (std::int32_t r = 0; r < schema.num_relations(); ++r) {
    const relation& rel = schema.relations[static_cast<std::size_t>(r)];
    const fs::path rel_dir = raw / "relations" / schema.canonical_name(r);
    fs::create_directories(rel_dir);
    std::ofstream edges(rel_dir / "edge.csv");
    edge_t count = 0;
    for (node_t i = 0; i < data.num_nodes(); ++i)
      for (edge_t e = data.graph.offsets[i]; e < data.graph.offsets[i + 1]; ++e)
        if (data.edge_types[static_cast<std::size_t>(e)] == r) {
          edges << data.graph.columns[e] - schema.type_begin(rel.source_type) << ','
                << i - schema.type_begin(rel.destination_type) << '\n';
          ++count;
        }
    std::ofstream(rel_dir / "num-edge-list.csv") << count << '\n';
  }
  for (std::int32_t t = 0; t < schema.num_node_types(); ++t) {
    const node_type& type = schema.node_types[static_cast<std::size_t>(t)];
    const node_t begin = schema.type_begin(t), end = schema.type_begin(t + 1);
    if (type.feature_dim > 0) {
      fs::create_directories(raw / "node-feat" / type.name);
      std::ofstream features(raw / "node-feat" / type.name / "node-feat.csv");
      for (node_t i = begin; i < end; ++i)
        for (Eigen::Index c = 0; c < type.feature_dim; ++c)
          features << data.features(i, c) << (c + 1 < type.feature_dim ? ',' : '\n');
    }
    if (std::any_of(data.labels.begin() + begin, data.labels.begin() + end,
                    [](std::int32_t l) { return l >= 0; })) {
      fs::create_directories(raw / "node-label" / type.name);
      std::ofstream labels(raw / "node-label" / type.name / "node-label.csv");
      for (node_t i = begin; i < end; ++i) labels << data.labels[i] << '\n';
    }
    if (std::any_of(data.split.begin() + begin, data.split.begin() + end,
                    [](node_split s) { return s != node_split::none; })) {
      const fs::path split = dir / "split" / "s" / type.name;
      fs::create_directories(split);
      std::ofstream train(split / "train.csv"), valid(split / "valid.csv"), test(split / "test.csv");
      for (node_t i = begin; i < end; ++i) {
        const node_split s = data.split[i];
        if (s != node_split::none)
          (s == node_split::train ? train : s == node_split::valid ? valid : test) << i - begin << '\n';
      }
    }
  }
}

/// What read_dataset_block throws on this rank ("" if nothing).
std::string block_error(mpi_communicator& comm, const std::string& spec,
                        const dataset_sizes& sizes = {}) {
  try {
    (void)read_dataset_block(comm, spec, {.sizes = sizes});
  } catch (const sar::error& e) {
    return e.what();
  }
  return "";
}

void test_parallel_readers(mpi_communicator& comm, const fs::path& scratch) {
  const std::size_t chunk = io::chunk_bytes;
  io::chunk_bytes = 2048;  // several chunks per rank
  const graph_dataset data = make_planted_partition({.num_nodes = 1500, .num_classes = 5,
                                                     .average_degree = 6, .feature_dim = 3});
  const fs::path edges = scratch / "edges.txt", mtx = scratch / "graph.mtx",
                 npy = scratch / "npy", ogb = scratch / "ogb";
  if (comm.rank() == 0) {
    std::ofstream e(edges), m(mtx);
    e << "# a comment\n";
    m << "%%MatrixMarket matrix coordinate pattern general\n% c\n"
      << data.num_nodes() << ' ' << data.num_nodes() << ' ' << data.graph.num_edges() << '\n';
    for (node_t i = 0; i < data.num_nodes(); ++i)
      for (node_t j : data.graph.row(i)) {
        if (j <= i) e << j << '\t' << i << '\n';  // each undirected edge once
        m << i + 1 << ' ' << j + 1 << '\n';
      }
    e << "7 7\n";  // a self-loop: kept, like the serial loader keeps it
    write_npy_dataset(npy, data);
    fs::create_directories(ogb / "raw");
    fs::create_directories(ogb / "split" / "s");
    std::ofstream(ogb / "raw" / "num-node-list.csv") << data.num_nodes() << '\n';
    std::ofstream(ogb / "raw" / "num-edge-list.csv") << data.graph.num_edges() << '\n';
    std::ofstream oe(ogb / "raw" / "edge.csv"), of(ogb / "raw" / "node-feat.csv"),
        ol(ogb / "raw" / "node-label.csv"), tr(ogb / "split" / "s" / "train.csv"),
        va(ogb / "split" / "s" / "valid.csv"), te(ogb / "split" / "s" / "test.csv");
    for (node_t i = 0; i < data.num_nodes(); ++i) {
      for (node_t j : data.graph.row(i)) oe << j << ',' << i << '\n';
      of << data.features(i, 0) << ',' << data.features(i, 1) << ',' << data.features(i, 2) << '\n';
      ol << data.labels[i] << '\n';
      const node_split s = data.split[i];
      (s == node_split::train ? tr : s == node_split::valid ? va : te) << i << '\n';
    }
  }
  comm.barrier();
  for (const std::string& spec : {edges.string(), mtx.string(), npy.string(), ogb.string(),
                                 std::string("planted:nodes=300,classes=3")})
    expect_block_matches(comm, spec);
  expect_block_matches(comm, edges.string(), {.num_nodes = 1600});  // stated, 100 isolated
  // Regression targets: a .npy dataset's targets.npy, an OGB directory's node-target.
  const fs::path npy_regress = scratch / "npy-regress";
  if (comm.rank() == 0) {
    const graph_dataset regress = as_regression(data);
    write_npy_dataset(npy_regress, regress);
    std::ofstream ot(ogb / "raw" / "node-target.csv");
    for (node_t i = 0; i < data.num_nodes(); ++i)
      ot << regress.targets(i, 0) << ',' << regress.targets(i, 1) << '\n';
  }
  // Edge features: a generator's and a .npy dataset's edge_features.npy.
  const fs::path npy_edges = scratch / "npy-edges";
  const std::string planted_edges = "planted:nodes=300,classes=3,edge_features=2";
  if (comm.rank() == 0) write_npy_dataset(npy_edges, load_dataset(planted_edges));
  comm.barrier();
  expect_block_matches(comm, planted_edges);
  expect_block_matches(comm, npy_edges.string());
  expect_block_matches(comm, npy_regress.string());
  expect_block_matches(comm, ogb.string(), {.task = task_kind::regress});
  // A heterogeneous OGB raw directory (ogbn-mag's layout) of the planted typed graph.
  const fs::path hetero = scratch / "ogb-hetero";
  if (comm.rank() == 0) write_ogb_heterogeneous(hetero, make_planted_heterogeneous(
      {.num_papers = 700, .num_authors = 300, .feature_dim = 4, .author_feature_dim = 2,
       .degree = 3, .authors_per_paper = 2, .seed = 3}));
  comm.barrier();
  expect_block_matches(comm, hetero.string());
  // Edge features of OGB raw directories (a row of edge-feat per edge line) travel with their
  // edges: repeats and reverses take the rows the serial reader gives them.
  const fs::path ogb_edges = scratch / "ogb-edge-feat", hetero_edges = scratch / "ogb-hetero-ef";
  if (comm.rank() == 0) {
    fs::create_directories(ogb_edges / "raw");
    fs::copy_file(ogb / "raw" / "num-node-list.csv", ogb_edges / "raw" / "num-node-list.csv");
    std::ofstream oe(ogb_edges / "raw" / "edge.csv"), of(ogb_edges / "raw" / "edge-feat.csv");
    std::int64_t line = 0;
    const auto edge = [&](node_t s, node_t d) {
      oe << s << ',' << d << '\n';
      ++line;
      of << line << ',' << -0.5 * static_cast<double>(line) << '\n';
    };
    for (node_t i = 0; i < data.num_nodes(); ++i)
      for (node_t j : data.graph.row(i)) edge(j, i);  // each pair given both ways
    for (node_t i = 0; i < data.num_nodes(); i += 7)
      if (data.graph.degree(i) > 0) edge(data.graph.row(i)[0], i);  // later repeats
    edge(7, 7);  // a self-loop
    fs::copy(hetero, hetero_edges, fs::copy_options::recursive);
    int relation = 0;
    for (const auto& dir : fs::directory_iterator(hetero_edges / "raw" / "relations")) {
      std::vector<std::string> lines;
      {
        std::ifstream in(dir.path() / "edge.csv");
        for (std::string l; std::getline(in, l);) lines.push_back(l);
      }
      if (!lines.empty()) lines.push_back(lines.front());  // a repeat within the relation
      std::ofstream out(dir.path() / "edge.csv"), features(dir.path() / "edge-feat.csv");
      for (std::size_t k = 0; k < lines.size(); ++k)
        out << lines[k] << '\n', features << relation << ',' << k << '\n';
      std::ofstream(dir.path() / "num-edge-list.csv") << lines.size() << '\n';
      ++relation;
    }
  }
  comm.barrier();
  expect_block_matches(comm, ogb_edges.string());
  expect_block_matches(comm, hetero_edges.string());
  // An edge-feat one row short: every rank stops, the one reading it naming the file.
  if (comm.rank() == 0) {
    std::ifstream in(ogb_edges / "raw" / "edge-feat.csv");
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    in.close();
    std::ofstream out(ogb_edges / "raw" / "edge-feat.csv");
    for (std::size_t k = 0; k + 1 < lines.size(); ++k) out << lines[k] << '\n';
  }
  comm.barrier();
  {
    const std::string error = block_error(comm, ogb_edges.string());
    EXPECT(error.find("edge-feat.csv line ") != std::string::npos &&
               error.find("file ends after") != std::string::npos,
           "a short edge-feat: ", error);
  }
  // A malformed last line of one relation's edge file: the rank whose chunk holds it names the
  // file and line, and every other rank stops too.
  const fs::path bad_hetero = scratch / "ogb-hetero-bad";
  const fs::path writes = bad_hetero / "raw" / "relations" / "author___writes___paper";
  std::int64_t lines = 0;
  if (comm.rank() == 0) {
    fs::copy(hetero, bad_hetero, fs::copy_options::recursive);
    std::ifstream edges(writes / "edge.csv");
    for (std::string line; std::getline(edges, line);) ++lines;
    edges.close();
    std::ofstream(writes / "edge.csv", std::ios::app) << "7,x\n";
    std::ofstream(writes / "num-edge-list.csv") << lines + 1 << '\n';
  }
  comm.all_reduce(std::span<std::int64_t>(&lines, 1), reduce_op::sum);
  {
    const std::string text = message(" line ", lines + 1, ": not an integer node id");
    const std::string error = block_error(comm, bad_hetero.string());
    std::int64_t found = error.find(text) != std::string::npos ? 1 : 0;
    EXPECT(!error.empty(), bad_hetero.string(), ": read on rank ", comm.rank());
    EXPECT(found || error.find("failed (rank") != std::string::npos, bad_hetero.string(), ": ",
           error);
    comm.all_reduce(std::span<std::int64_t>(&found, 1), reduce_op::sum);
    EXPECT(found >= 1, bad_hetero.string(), ": no rank names the problem '", text, "'");
  }

  // Errors: the serial loader's message on the rank that finds it, every rank stops.
  const fs::path bad = scratch / "bad.txt", sparse = scratch / "sparse.txt";
  if (comm.rank() == 0) {
    std::ofstream b(bad), s(sparse);
    for (int k = 0; k < 3000; ++k) b << k % 50 << ' ' << (k + 1) % 50 << '\n';
    b << "1 x\n";  // line 3001, in the last chunk
    for (int k = 0; k < 2000; ++k) s << k % 40 << ' ' << (k + 3) % 40 << '\n';
    s << "5 999999\n";  // one stray id
  }
  comm.barrier();
  for (const auto& [spec, text] :
       {std::pair{bad.string(), std::string(" line 3001: not an integer node id")},
        std::pair{sparse.string(), std::string("the largest node id, 999999 (line 2001), makes "
                                               "1000000 nodes, but only 41 of them")}}) {
    const std::string error = block_error(comm, spec);
    std::int64_t found = error.find(text) != std::string::npos ? 1 : 0;
    EXPECT(!error.empty(), spec, ": read on rank ", comm.rank());
    EXPECT(found || error.find("failed (rank") != std::string::npos, spec, ": ", error);
    comm.all_reduce(std::span<std::int64_t>(&found, 1), reduce_op::sum);
    EXPECT(found >= 1, spec, ": no rank names the problem '", text, "'");
  }
  if (comm.rank() == 0) {  // an in-range edit of the features: only the CRC-32 can tell
    std::fstream f(npy / "features.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float changed = 0.25f;
    f.write(reinterpret_cast<const char*>(&changed), sizeof changed);
  }
  comm.barrier();
  const std::string error = block_error(comm, npy.string());
  EXPECT(error.find("features.npy: checksum mismatch") != std::string::npos, "npy CRC: ", error);
  dataset_block deferred = read_dataset_block(comm, npy.string(), {.features = false});
  std::string later;
  try {
    read_block_rest(comm, deferred);
  } catch (const sar::error& e) {
    later = e.what();
  }
  EXPECT(later.find("features.npy: checksum mismatch") != std::string::npos,
         "npy CRC of features read after the rest: ", later);
  io::chunk_bytes = chunk;
}

/// Star clusters are stars of at most the size asked, their graph keeps every weight, a sample
/// of its arcs stays symmetric, refinement lowers a cut within the balance, and PT-Scotch on
/// the coarsened graph keeps a cut near its cut on the graph.
void test_coarsening(mpi_communicator& comm) {
  const graph_dataset data = make_planted_partition({.num_nodes = 3000, .num_classes = 6,
                                                     .average_degree = 8, .homophily = 0.9,
                                                     .feature_dim = 0});
  const partition_book book = block_book(data.num_nodes(), comm.size());
  const graph_part block = block_of(data, book, comm.rank());
  const csr adjacency = symmetric_adjacency(comm, block.in_edges, book);
  const indexed_adjacency g = index_adjacency(adjacency);
  const node_t first = book.begin(comm.rank()), n = data.num_nodes();
  for (std::size_t e = 0; e < adjacency.columns.size(); ++e)
    EXPECT(g.ids[g.slots[e]] == adjacency.columns[e], "index_adjacency: arc ", e);

  const node_t most = 12;
  const std::vector<node_t> root = star_clusters(comm, g, book, most, /*seed=*/5);
  EXPECT(root == star_clusters(comm, g, book, most, 5), "star_clusters: deterministic");
  // Each node's root is a root, and the node is the root or one of its neighbours.
  std::vector<std::int64_t> own_root(root.begin(), root.end());
  const std::vector<std::int64_t> root_of_root = directory_lookup(comm, book, own_root, root);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(n), 0);  // per root id
  for (node_t r = 0; r < g.rows(); ++r) {
    EXPECT(root_of_root[r] == root[r], "star_clusters: node ", first + r, "'s root ", root[r],
           " is in ", root_of_root[r], "'s cluster");
    const bool adjacent = std::binary_search(adjacency.columns.begin() + adjacency.offsets[r],
                                             adjacency.columns.begin() + adjacency.offsets[r + 1], root[r]);
    EXPECT(root[r] == first + r || adjacent, "star_clusters: node ", first + r,
           " is not adjacent to its root ", root[r]);
    ++sizes[static_cast<std::size_t>(root[r])];
  }
  comm.all_reduce(std::span<std::int64_t>(sizes), reduce_op::sum);
  const auto clusters = std::count_if(sizes.begin(), sizes.end(), [](std::int64_t c) { return c > 0; });
  EXPECT(*std::max_element(sizes.begin(), sizes.end()) <= most, "star_clusters: a cluster of ",
         *std::max_element(sizes.begin(), sizes.end()), " nodes, at most ", most, " asked");
  EXPECT(clusters < n / 2, "star_clusters: ", clusters, " clusters of ", n, " nodes");

  // The coarse graph: vertex weights sum to the nodes' weights, arc weights to the arcs
  // between clusters; no self-loops, sorted distinct columns.
  std::vector<std::int64_t> weights;
  for (node_t r = 0; r < g.rows(); ++r) weights.push_back(1 + g.degree(r));
  const coarse_graph coarse = contract(comm, g, book, root, weights);
  EXPECT(coarse.book.num_nodes() == clusters, "contract: ", coarse.book.num_nodes(),
         " coarse vertices for ", clusters, " clusters");
  const std::vector<std::int64_t> neighbour_coarse = directory_lookup(
      comm, book, std::vector<std::int64_t>(coarse.coarse_of.begin(), coarse.coarse_of.end()), g.ids);
  std::int64_t sums[4] = {0, 0, 0, 0};  // fine weights, coarse weights, arcs across, coarse arc weights
  for (node_t r = 0; r < g.rows(); ++r) {
    sums[0] += weights[r];
    for (edge_t e = g.offsets[r]; e < g.offsets[r + 1]; ++e)
      sums[2] += neighbour_coarse[g.slots[e]] != coarse.coarse_of[r];
  }
  for (std::int64_t w : coarse.vertex_weights) sums[1] += w;
  for (std::int64_t w : coarse.arc_weights) sums[3] += w;
  const csr& ca = coarse.adjacency;
  for (node_t r = 0; r < ca.num_rows; ++r)
    for (edge_t e = ca.offsets[r]; e < ca.offsets[r + 1]; ++e) {
      EXPECT(ca.columns[e] != coarse.book.begin(comm.rank()) + r, "contract: a self-loop");
      EXPECT(e == ca.offsets[r] || ca.columns[e - 1] < ca.columns[e], "contract: row ", r, " unsorted");
    }
  comm.all_reduce(std::span<std::int64_t>(sums), reduce_op::sum);
  EXPECT(sums[0] == sums[1] && sums[2] == sums[3], "contract: weights ", sums[0], " -> ", sums[1],
         ", arcs across clusters ", sums[2], " -> ", sums[3]);

  // A sample of the arcs is symmetric: every kept arc's reverse is kept, with its weight.
  coarse_graph sampled = coarse;
  sample_arcs(sampled, comm.rank(), 0.5, 7);
  std::vector<std::vector<std::int64_t>> reversed(static_cast<std::size_t>(comm.size()));
  std::vector<std::int64_t> kept;  // (row, column, weight) of this rank's arcs
  for (node_t r = 0; r < sampled.adjacency.num_rows; ++r)
    for (edge_t e = sampled.adjacency.offsets[r]; e < sampled.adjacency.offsets[r + 1]; ++e) {
      const node_t u = sampled.book.begin(comm.rank()) + r, v = sampled.adjacency.columns[e];
      kept.insert(kept.end(), {u, v, sampled.arc_weights[e]});
      auto& to = reversed[static_cast<std::size_t>(sampled.book.owner(v))];
      to.insert(to.end(), {v, u, sampled.arc_weights[e]});
    }
  std::vector<std::array<std::int64_t, 3>> mine, back;
  for (std::size_t k = 0; k < kept.size(); k += 3) mine.push_back({kept[k], kept[k + 1], kept[k + 2]});
  for (const auto& from : all_to_all_vectors(comm, reversed))
    for (std::size_t k = 0; k < from.size(); k += 3) back.push_back({from[k], from[k + 1], from[k + 2]});
  std::sort(mine.begin(), mine.end());
  std::sort(back.begin(), back.end());
  EXPECT(mine == back, "sample_arcs: the kept arcs are not symmetric");
  std::int64_t arcs[2] = {ca.num_edges(), sampled.adjacency.num_edges()};
  comm.all_reduce(std::span<std::int64_t>(arcs), reduce_op::sum);
  EXPECT(arcs[1] > 0.3 * arcs[0] && arcs[1] < 0.7 * arcs[0], "sample_arcs: kept ", arcs[1], " of ", arcs[0]);

  // Refinement from random parts: a much lower cut, parts within the balance.
  const int parts = 6;
  std::vector<int> part(static_cast<std::size_t>(g.rows()));
  const counter_rng rng(3, rng_stream::partition_random);
  for (node_t r = 0; r < g.rows(); ++r) part[r] = static_cast<int>(rng.below(parts, first + r));
  const double before = edge_cut(comm, adjacency, book, part);
  refine_parts(comm, g, book, {}, parts, 0.05, part, 3, 20);
  const double after = edge_cut(comm, adjacency, book, part);
  std::vector<std::int64_t> load(parts, 0);
  for (int p : part) ++load[p];
  comm.all_reduce(std::span<std::int64_t>(load), reduce_op::sum);
  for (std::int64_t l : load)
    EXPECT(l <= 1.05 * static_cast<double>(n) / parts + 1, "refine_parts: a part of ", l, " nodes");
  EXPECT(after < 0.8 * before, "refine_parts: cut ", before, " -> ", after);
  // A part out of range on one rank stops every rank (no rank left in a collective).
  std::vector<int> broken = part;
  if (comm.rank() == 0 && !broken.empty()) broken[0] = parts;
  bool refused = false;
  try {
    refine_parts(comm, g, book, {}, parts, 0.05, broken, 3, 1);
  } catch (const invalid_argument&) {
    refused = true;
  }
  EXPECT(refused, "refine_parts: a part out of range on rank 0 is refused on every rank");

  // PT-Scotch on the coarsened graph: balanced, deterministic, a cut near its plain cut.
  for (const coarsening_options c : {coarsening_options{.cluster_size = most},
                                     coarsening_options{.cluster_size = most, .arc_fraction = 0.5}}) {
    graph_part copy = block;
    const distributed_partition_options plain{.parts = parts, .seed = 2};
    distributed_partition_options coarsened = plain;
    coarsened.coarsening = c;
    const std::vector<int> fine = partition_block(comm, copy, plain);
    const std::vector<int> mine = partition_block(comm, copy, coarsened);
    EXPECT(mine == partition_block(comm, copy, coarsened), "coarsened PT-Scotch: deterministic");
    std::fill(load.begin(), load.end(), 0);
    for (int p : mine) ++load[p];
    comm.all_reduce(std::span<std::int64_t>(load), reduce_op::sum);
    for (std::int64_t l : load)
      EXPECT(l <= 1.05 * static_cast<double>(n) / parts + 1, "coarsened PT-Scotch: a part of ", l, " nodes");
    const double cut = edge_cut(comm, adjacency, book, mine);
    const double fine_cut = edge_cut(comm, adjacency, book, fine);
    if (comm.rank() == 0)
      std::printf("coarsened PT-Scotch (clusters %lld, arcs %.2f): cut %.3f, on the graph %.3f\n",
                  static_cast<long long>(c.cluster_size), c.arc_fraction, cut, fine_cut);
    EXPECT(cut <= 1.25 * fine_cut + 0.01, "coarsened PT-Scotch: cut ", cut, " against ", fine_cut);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_checked(argc, argv, [](mpi_communicator& comm) {
    fs::path scratch = fs::temp_directory_path() / "sar-mpi-partition";
    std::string shared = comm.rank() == 0 ? (scratch.string() + "-" + std::to_string(::getpid())) : "";
    broadcast_string(comm, shared, 0);
    scratch = shared;
    if (comm.rank() == 0) fs::create_directories(scratch);
    comm.barrier();
    test_directory(comm);
    test_wide_ids(comm);
    test_build(comm);
    const graph_dataset planted = make_planted_partition(
        {.num_nodes = 700, .num_classes = 5, .average_degree = 6, .feature_dim = 4});
    test_redistribute_and_store(comm, scratch, planted);
    test_redistribute_and_store(comm, scratch, as_regression(planted));
    graph_dataset with_edges = make_planted_partition({.num_nodes = 700, .num_classes = 5,
                                                       .average_degree = 6, .feature_dim = 4,
                                                       .edge_feature_dim = 3});
    with_edges.name = "planted-edges";
    test_redistribute_and_store(comm, scratch, with_edges);
    test_failed_write_keeps_store(comm, scratch);
    test_simple_methods(comm);
    test_ptscotch(comm);  // ptscotch_check.hpp
    test_coarsening(comm);
    test_parallel_readers(comm, scratch);
    comm.barrier();
    if (comm.rank() == 0) {
      fs::remove_all(scratch);
      std::printf("mpi-partition on %d ranks: ok\n", comm.size());
    }
  });
}
