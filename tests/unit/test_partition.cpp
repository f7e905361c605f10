// Partitioners, relabelling, quality report and the partition store.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "sar/core/rng.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/graph/io/ogb.hpp"
#include "sar/partition/metis.hpp"
#include "sar/partition/partitioners.hpp"
#include "sar/partition/relabel.hpp"
#include "sar/partition/store.hpp"
#include "test_support.hpp"

using namespace sar;
using sar::testing_support::temp_dir;

namespace {

/// The message of the Exception that f throws ("(no <exception>)" if it throws none).
template <class Exception = io_error>
std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "(no exception of the expected type)";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string read_file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<node_t> part_sizes(const std::vector<int>& part, int parts) {
  std::vector<node_t> sizes(parts, 0);
  for (int p : part) ++sizes[p];
  return sizes;
}

/// A small dataset with everything the store must carry: a directed graph with a parallel edge,
/// self-loops and isolated nodes, features, labels (some -1) and a split of every kind.
graph_dataset small_dataset(node_t n = 40) {
  const counter_rng rng(7, rng_stream::generator_edges);
  edge_list edges;
  edges.num_nodes = n;
  const node_t connected = n - 5;  // the last 5 nodes are isolated
  for (node_t k = 0; k < 3 * n; ++k)
    edges.push_back(static_cast<node_t>(rng.below(connected, k, 0)),
                    static_cast<node_t>(rng.below(connected, k, 1)));
  edges.push_back(1, 1);  // self-loops
  edges.push_back(connected - 1, connected - 1);
  edges.push_back(1, 2);  // a parallel edge (kept: deduplicate = false)
  edges.push_back(1, 2);
  graph_dataset d;
  d.name = "small";
  d.graph = build_csr(edges, {.deduplicate = false});
  d.features = matrixf(n, 5);
  for (node_t i = 0; i < n; ++i)
    for (int c = 0; c < 5; ++c) d.features(i, c) = static_cast<float>(rng.normal(i, c, 99));
  d.num_classes = 3;
  d.labels.resize(n);
  d.split.resize(n);
  for (node_t i = 0; i < n; ++i) {
    d.labels[i] = static_cast<std::int32_t>(i % 4) - 1;  // -1, 0, 1, 2
    d.split[i] = static_cast<node_split>(i % 4);
  }
  d.validate();
  return d;
}

}  // namespace

TEST_CASE("relabel is a bijection, each part a contiguous range in original order") {
  const std::vector<int> part = {2, 0, 2, 3, 0, 0, 3, 2, 0};  // part 1 is empty
  const relabelling r = relabel(part, 4);
  REQUIRE(r.new_of_old.size() == part.size());
  REQUIRE(r.old_of_new.size() == part.size());
  CHECK(r.book.offsets() == std::vector<node_t>{0, 4, 4, 7, 9});
  for (node_t i = 0; i < static_cast<node_t>(part.size()); ++i) {
    CHECK(r.old_of_new[r.new_of_old[i]] == i);
    CHECK(r.book.owner(r.new_of_old[i]) == part[i]);
  }
  CHECK(r.old_of_new == std::vector<node_t>{1, 4, 5, 8, 0, 2, 7, 3, 6});
  CHECK(r.book.size(1) == 0);

  const auto big = partition_random(10000, 7, 3);
  const relabelling rb = relabel(big, 7);
  std::vector<node_t> sorted = rb.new_of_old;
  std::sort(sorted.begin(), sorted.end());
  std::vector<node_t> iota(10000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  for (int p = 0; p < 7; ++p)
    for (node_t g = rb.book.begin(p); g < rb.book.end(p); ++g) {
      CHECK(big[rb.old_of_new[g]] == p);
      if (g > rb.book.begin(p)) CHECK(rb.old_of_new[g] > rb.old_of_new[g - 1]);
    }

  CHECK_THROWS_AS(relabel({0, 4}, 4), invalid_argument);
  CHECK_THROWS_AS(relabel({0, -1}, 4), invalid_argument);
  CHECK_THROWS_AS(relabel({0}, 0), invalid_argument);
}

TEST_CASE("random partition: deterministic, keyed by node id, balanced") {
  const auto a = partition_random(100000, 8, 11);
  CHECK(a == partition_random(100000, 8, 11));
  CHECK(a != partition_random(100000, 8, 12));
  const auto prefix = partition_random(1000, 8, 11);  // keyed by id: independent of n
  CHECK(std::equal(prefix.begin(), prefix.end(), a.begin()));
  const auto sizes = part_sizes(a, 8);
  for (node_t s : sizes) CHECK(std::abs(static_cast<double>(s) - 12500.0) < 500.0);  // ~5 sigma
  CHECK_THROWS_AS(partition_random(10, 0, 1), invalid_argument);
  // Never an empty part: more parts than nodes, or parts left empty by chance, are refused.
  CHECK_THROWS_AS(partition_random(0, 3, 1), invalid_argument);
  CHECK_THROWS_AS(partition_random(2, 3, 1), invalid_argument);
  const std::string w = what_of<invalid_argument>([] { partition_random(2708, 2000, 0); });
  CHECK(contains(w, "sar::partition_random: "));
  CHECK(contains(w, " of the 2000 parts would be empty"));
  CHECK(contains(w, "use fewer parts"));
}

TEST_CASE("contiguous partition: equal ranges, sizes differ by at most one") {
  const auto a = partition_contiguous(103, 10);
  CHECK(std::is_sorted(a.begin(), a.end()));
  const auto sizes = part_sizes(a, 10);
  CHECK(*std::max_element(sizes.begin(), sizes.end()) -
            *std::min_element(sizes.begin(), sizes.end()) <= 1);
  CHECK(a == partition_contiguous(103, 10));
  CHECK(a.front() == 0);
  CHECK(a.back() == 9);
  CHECK(partition_contiguous(3, 3) == std::vector<int>{0, 1, 2});
  CHECK_THROWS_AS(partition_contiguous(3, 5), invalid_argument);  // empty parts: refused
  CHECK_THROWS_AS(partition_contiguous(0, 1), invalid_argument);
}

TEST_CASE("check_no_empty_parts names how many parts are empty") {
  CHECK_NOTHROW(check_no_empty_parts({0, 1, 1, 2}, 3, "here"));
  CHECK(what_of<invalid_argument>([] { check_no_empty_parts({0, 0, 3, 3}, 5, "here"); }) ==
        "here: 3 of the 5 parts would be empty (the 4 nodes went to only 2 parts): every part "
        "is one rank's work, so use fewer parts");
}

TEST_CASE("evaluate_partition counts cut edges, per-part loads and balance") {
  edge_list edges;
  edges.num_nodes = 4;
  edges.push_back(0, 1);  // 0 -> 1, same part
  edges.push_back(1, 2);  // cut
  edges.push_back(2, 3);  // same part
  edges.push_back(3, 0);  // cut
  edges.push_back(2, 2);  // loop, never cut
  const csr g = build_csr(edges);
  const std::vector<node_split> split = {node_split::train, node_split::train, node_split::test,
                                         node_split::none};
  const auto q = evaluate_partition(g, {0, 0, 1, 1}, 3, split);
  CHECK(q.num_edges == 5);
  CHECK(q.edge_cut == 2);
  CHECK(q.edge_cut_fraction == doctest::Approx(0.4));
  CHECK(q.part_nodes == std::vector<node_t>{2, 2, 0});
  CHECK(q.part_edges == std::vector<edge_t>{2, 3, 0});  // in-edges: 1<-0, 0<-3 | 2<-1, 3<-2, 2<-2
  CHECK(q.part_train == std::vector<node_t>{2, 0, 0});
  CHECK(q.node_balance == doctest::Approx(1.5));  // max 2 / mean 4/3
  CHECK(q.edge_balance == doctest::Approx(3.0 / (5.0 / 3.0)));
  CHECK(q.train_balance == doctest::Approx(3.0));
  const std::string text = format_partition_quality(q);
  CHECK(text.find("edge cut 2 of 5") != std::string::npos);
  CHECK(text.find("part 2: 0 nodes") != std::string::npos);
  CHECK_THROWS_AS(evaluate_partition(g, {0, 0, 1}, 2, {}), invalid_argument);
  CHECK_THROWS_AS(evaluate_partition(g, {0, 0, 1, 2}, 2, {}), invalid_argument);
}

TEST_CASE("METIS on a directed graph with self-loops: valid, deterministic, edge cases") {
  const graph_dataset d = small_dataset(200);
  const auto a = partition_metis(d, 4, {.seed = 5});
  REQUIRE(a.size() == 200);
  for (int p : a) CHECK((p >= 0 && p < 4));
  CHECK(a == partition_metis(d, 4, {.seed = 5}));
  CHECK(partition_metis(d, 1) == std::vector<int>(200, 0));

  // METIS's input must be symmetric, loop-free and duplicate-free.
  const auto sym = detail::symmetric_metis_graph(d.graph);
  for (node_t i = 0; i < 200; ++i) {
    const idx_t* first = sym.adjncy.data() + sym.xadj[i];
    const idx_t* last = sym.adjncy.data() + sym.xadj[i + 1];
    CHECK(std::adjacent_find(first, last, [](idx_t x, idx_t y) { return x >= y; }) == last);
    CHECK(std::find(first, last, static_cast<idx_t>(i)) == last);
    for (const idx_t* j = first; j != last; ++j) {
      const idx_t* f2 = sym.adjncy.data() + sym.xadj[*j];
      const idx_t* l2 = sym.adjncy.data() + sym.xadj[*j + 1];
      CHECK(std::binary_search(f2, l2, static_cast<idx_t>(i)));
    }
  }

  graph_dataset tiny = small_dataset(8);  // more parts than nodes: refused, not left empty
  CHECK_THROWS_AS(partition_metis(tiny, 12), invalid_argument);
  // Cora in 2708 parts: METIS leaves most of them empty, which is refused, naming how many.
  const graph_dataset cora = read_ogb_raw(testing_support::data_dir() / "cora");
  const std::string w = what_of<invalid_argument>([&] { partition_metis(cora, 2708); });
  CHECK(contains(w, "sar::partition_metis: "));
  CHECK(contains(w, " of the 2708 parts would be empty"));

  graph_dataset no_edges;  // only isolated nodes
  edge_list none;
  none.num_nodes = 30;
  no_edges.graph = build_csr(none);
  const auto e = partition_metis(no_edges, 3);
  REQUIRE(e.size() == 30);
  for (int p : e) CHECK((p >= 0 && p < 3));

  CHECK_THROWS_AS(partition_metis(d, 0), invalid_argument);
  CHECK_THROWS_AS(partition_metis(d, 2, {.imbalance = -0.1}), invalid_argument);
}

TEST_CASE("METIS balances nodes, edges and training nodes on a planted-partition graph") {
  planted_partition_options o;
  o.num_nodes = 6000;
  o.seed = 3;
  const graph_dataset d = make_planted_partition(o);
  const metis_options mo{.seed = 1, .imbalance = 0.05};
  const auto m = partition_metis(d, 8, mo);
  const auto qm = evaluate_partition(d.graph, m, 8, d.split);
  const auto qr = evaluate_partition(d.graph, partition_random(d.num_nodes(), 8, 1), 8, d.split);
  MESSAGE("planted metis: " << format_partition_quality(qm, 0));
  MESSAGE("planted random: " << format_partition_quality(qr, 0));
  CHECK(qm.edge_cut < qr.edge_cut);
  CHECK(qm.node_balance <= 1.05 + 0.01);
  CHECK(qm.train_balance <= 1.05 + 0.03);
}

TEST_CASE("partition store round trip is lossless") {
  const graph_dataset d = small_dataset(40);
  std::vector<int> part(40);
  for (node_t i = 0; i < 40; ++i) part[i] = std::array{0, 1, 3}[i % 3];  // part 2 is empty
  part[39] = 2;  // ... except for one isolated node; part 4 is empty
  const int parts = 5;
  temp_dir tmp("store");
  const auto dir = tmp.path / "small.parts";
  const partition_metadata written = write_partition_store(d, part, parts, dir, "test");

  const partition_metadata meta = read_partition_metadata(dir);
  CHECK(meta.dataset == "small");
  CHECK(meta.num_parts == parts);
  CHECK(meta.num_nodes == 40);
  CHECK(meta.num_edges == d.graph.num_edges());
  CHECK(meta.feature_dim == 5);
  CHECK(meta.num_classes == 3);
  CHECK(meta.method == "test");
  CHECK(meta.book == written.book);
  CHECK(meta.book.size(4) == 0);
  CHECK(meta.quality.edge_cut == written.quality.edge_cut);
  CHECK(meta.quality.edge_cut == evaluate_partition(d.graph, part, parts, d.split).edge_cut);

  // Reassemble the original dataset through original_ids.
  std::vector<node_t> new_of_old(40, -1);
  std::vector<graph_part> read;
  for (int p = 0; p < parts; ++p) {
    read.push_back(read_partition_part(dir, p));
    const graph_part& gp = read.back();
    CHECK(gp.part == p);
    CHECK(gp.book == meta.book);
    CHECK(gp.num_local() == meta.book.size(p));
    CHECK(gp.in_edges.num_cols == 40);
    CHECK(std::is_sorted(gp.original_ids.begin(), gp.original_ids.end()));
    for (node_t r = 0; r < gp.num_local(); ++r) {
      const node_t old = gp.original_ids[r];
      CHECK(part[old] == p);
      CHECK(new_of_old[old] == -1);
      new_of_old[old] = gp.first_global() + r;
    }
  }
  CHECK(std::count(new_of_old.begin(), new_of_old.end(), -1) == 0);
  CHECK(read[2].num_local() == 1);
  CHECK(read[4].num_local() == 0);
  CHECK(read[4].in_edges.num_edges() == 0);

  graph_dataset back;
  back.name = meta.dataset;
  back.num_classes = meta.num_classes;
  back.features = matrixf::Zero(40, meta.feature_dim);
  back.labels.assign(40, -7);
  back.split.assign(40, node_split::none);
  std::vector<node_t> old_of_new(40);
  for (node_t i = 0; i < 40; ++i) old_of_new[new_of_old[i]] = i;
  edge_list edges;
  edges.num_nodes = 40;
  for (const graph_part& gp : read) {
    gp.in_edges.validate();
    for (node_t r = 0; r < gp.num_local(); ++r) {
      const node_t old = gp.original_ids[r];
      // Exactly the in-edges of this node, relabelled (sorted).
      std::vector<node_t> expected;
      for (node_t j : d.graph.row(old)) expected.push_back(new_of_old[j]);
      std::sort(expected.begin(), expected.end());
      CHECK(std::vector<node_t>(gp.in_edges.row(r).begin(), gp.in_edges.row(r).end()) == expected);
      for (node_t j : gp.in_edges.row(r)) edges.push_back(old_of_new[j], old);
      back.features.row(old) = gp.features.row(r);
      back.labels[old] = gp.labels[r];
      back.split[old] = gp.split[r];
    }
  }
  back.graph = build_csr(edges, {.deduplicate = false});
  CHECK(back.graph == d.graph);
  CHECK(back.features == d.features);
  CHECK(back.labels == d.labels);
  CHECK(back.split == d.split);

  // Writing again into the same directory replaces the store.
  write_partition_store(d, partition_contiguous(40, 2), 2, dir, "contiguous");
  CHECK(read_partition_metadata(dir).num_parts == 2);
  CHECK_FALSE(std::filesystem::exists(partition_part_dir(dir, 3)));
  // ... but a foreign non-empty directory is refused.
  std::ofstream(tmp.path / "foreign.txt") << "x";
  CHECK_THROWS_AS(write_partition_store(d, part, parts, tmp.path, "x"), io_error);
}

TEST_CASE("read_partition_parts joins a run of consecutive parts as one rank's part") {
  const graph_dataset d = small_dataset(40);
  std::vector<int> part(40);
  for (node_t i = 0; i < 40; ++i) part[i] = std::array{0, 1, 3, 0}[i % 4];  // part 2 empty
  temp_dir tmp("store");
  const auto dir = tmp.path / "small.parts";
  const partition_metadata meta = write_partition_store(d, part, 4, dir, "test");
  REQUIRE(meta.book.size(2) == 0);
  for (const int first : {0, 2}) {
    CAPTURE(first);
    std::vector<node_t> breaks;
    const graph_part joined = read_partition_parts(dir, first, 2, {}, &breaks);
    const graph_part a = read_partition_part(dir, first), b = read_partition_part(dir, first + 1);
    CHECK(joined.part == first / 2);
    CHECK(joined.book.offsets() ==
          std::vector<node_t>{0, meta.book.begin(2), meta.book.num_nodes()});
    CHECK(joined.num_local() == a.num_local() + b.num_local());
    // The second part's rows follow the first's; an empty part starts nothing.
    CHECK(breaks == (a.num_local() > 0 && b.num_local() > 0 ? std::vector<node_t>{a.num_local()}
                                                             : std::vector<node_t>{}));
    CHECK(joined.features.topRows(a.num_local()) == a.features);
    CHECK(joined.features.bottomRows(b.num_local()) == b.features);
    std::vector<node_t> ids = a.original_ids;
    ids.insert(ids.end(), b.original_ids.begin(), b.original_ids.end());
    CHECK(joined.original_ids == ids);
    for (node_t r = 0; r < b.num_local(); ++r) {
      CAPTURE(r);
      const auto row = joined.in_edges.row(a.num_local() + r);
      CHECK(std::vector<node_t>(row.begin(), row.end()) ==
            std::vector<node_t>(b.in_edges.row(r).begin(), b.in_edges.row(r).end()));
      CHECK(joined.labels[a.num_local() + r] == b.labels[r]);
      CHECK(joined.split[a.num_local() + r] == b.split[r]);
    }
  }
  CHECK(read_partition_parts(dir, 0, 4).num_local() == 40);
  CHECK_THROWS_WITH_AS(read_partition_parts(dir, 1, 2), doctest::Contains("parts [1, 3)"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(read_partition_parts(dir, 0, 3), doctest::Contains("of the 4"),
                       invalid_argument);
}

TEST_CASE("partition store: sparse features (format 7), read sparse or dense; bad rows refused") {
  graph_dataset d = small_dataset(40);
  for (node_t i = 0; i < 40; ++i)  // about a third of the entries non-zero, some rows empty
    for (int c = 0; c < 5; ++c)
      if ((i * 5 + c) % 3 != 0 || i % 7 == 0) d.features(i, c) = 0;
  const matrixf dense = d.features;
  d.sparse_features = to_sparse_rows<float, float>(dense);
  d.features.resize(40, 0);
  const std::vector<int> part = partition_random(40, 3, 1);
  temp_dir tmp("store");
  const auto dir = tmp.path / "sparse.parts";
  write_partition_store(d, part, 3, dir, "random");
  const partition_metadata meta = read_partition_metadata(dir);
  CHECK(meta.sparse_features);
  CHECK(meta.feature_dim == 5);
  CHECK_FALSE(std::filesystem::exists(partition_part_dir(dir, 0) / "features.bin"));
  const relabelling ids = relabel(part, 3);
  for (int p = 0; p < 3; ++p) {
    CAPTURE(p);
    const graph_part kept = read_partition_part(dir, p, {.sparse_features = true});
    REQUIRE(kept.sparse());
    CHECK(kept.features.rows() == kept.num_local());
    CHECK(kept.features.cols() == 0);
    CHECK(kept.feature_dim() == 5);
    CHECK(kept.sparse_features ==
          select_rows(d.sparse_features, std::span<const node_t>(kept.original_ids)));
    const graph_part densified = read_partition_part(dir, p);  // the default: dense
    CHECK_FALSE(densified.sparse());
    REQUIRE(densified.features.cols() == 5);
    for (node_t r = 0; r < densified.num_local(); ++r)
      CHECK(densified.features.row(r) == dense.row(densified.original_ids[r]));
    CHECK(kept.in_edges == detail::store::part_of(d, ids, p).in_edges);
  }

  const auto corrupt = [&](const char* file, std::int64_t at, auto value) {
    write_partition_store(d, part, 3, dir, "random");
    std::fstream f(partition_part_dir(dir, 1) / file,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(48 + at * static_cast<std::int64_t>(sizeof value));
    f.write(reinterpret_cast<const char*>(&value), sizeof value);
  };
  const auto refusal = [&](bool sparse) {
    return what_of([&] {
      read_partition_part(dir, 1, {.verify_checksums = false, .sparse_features = sparse});
    });
  };
  corrupt("feature_values.bin", 0, 42.0f);  // in range: only the checksum tells
  CHECK(contains(what_of([&] { read_partition_part(dir, 1); }), "checksum mismatch"));
  CHECK_NOTHROW(read_partition_part(dir, 1, {.verify_checksums = false, .sparse_features = true}));
  corrupt("feature_columns.bin", 0, std::int32_t{5});  // outside [0, 5)
  for (const bool sparse : {true, false}) {
    const std::string w = refusal(sparse);
    CAPTURE(w);
    CHECK(contains(w, "feature_columns.bin"));
    CHECK(contains(w, "lists column 5"));
  }
  corrupt("feature_offsets.bin", 2, std::int64_t{-1});
  CHECK(contains(refusal(true), "feature_offsets.bin: offsets decrease at row 1"));
  // An entry count beyond rows x columns is refused before the columns are allocated.
  const node_t rows = read_partition_metadata(dir).book.size(1);
  corrupt("feature_offsets.bin", rows, std::int64_t{1} << 40);
  CHECK(contains(refusal(true), "feature_offsets.bin: offsets run from 0 to 1099511627776"));

  // A store written without sparse features holds features.bin and says so.
  write_partition_store(small_dataset(40), part, 3, dir, "random");
  CHECK_FALSE(read_partition_metadata(dir).sparse_features);
  CHECK_FALSE(read_partition_part(dir, 1, {.sparse_features = true}).sparse());
}

TEST_CASE("partition store without labels, split or features") {
  graph_dataset d;
  d.name = "bare";
  edge_list edges;
  edges.num_nodes = 6;
  edges.push_back(0, 5);
  edges.push_back(5, 0);
  d.graph = build_csr(edges);
  temp_dir tmp("bare");
  write_partition_store(d, {0, 1, 0, 1, 0, 1}, 2, tmp.path / "s");
  const auto gp = read_partition_part(tmp.path / "s", 1);
  CHECK(gp.num_local() == 3);
  CHECK(gp.features.rows() == 3);
  CHECK(gp.features.cols() == 0);
  CHECK(gp.labels.empty());
  CHECK(gp.split.empty());
  CHECK(gp.in_edges.num_edges() == 1);  // node 5 (relabelled 5) <- node 0 (relabelled 0)
  CHECK(gp.in_edges.row(2)[0] == 0);
}

TEST_CASE("partition store errors name the file and the problem") {
  const graph_dataset d = small_dataset(40);
  temp_dir tmp("errors");
  const auto dir = tmp.path / "s";
  const std::vector<int> part = partition_contiguous(40, 3);
  auto fresh = [&] {  // the tests below corrupt it, so sar would refuse to replace it
    std::filesystem::remove_all(dir);
    write_partition_store(d, part, 3, dir, "contiguous");
  };
  fresh();
  namespace fs = std::filesystem;

  std::string w = what_of([&] { read_partition_part(dir, 3); });
  CHECK(contains(w, "part index 3 out of range"));
  CHECK(contains(what_of([&] { read_partition_part(dir, -1); }), "out of range"));

  CHECK(contains(what_of([&] { read_partition_metadata(tmp.path / "nowhere"); }),
                 "missing directory"));

  fs::remove(partition_part_dir(dir, 1) / "features.bin");
  w = what_of([&] { read_partition_part(dir, 1); });
  CHECK(contains(w, "missing file"));
  CHECK(contains(w, "part-0001"));
  CHECK(contains(w, "features.bin"));
  CHECK_NOTHROW(read_partition_part(dir, 0));  // other parts are unaffected

  fresh();
  const auto columns = partition_part_dir(dir, 2) / "in_columns.bin";
  fs::resize_file(columns, fs::file_size(columns) - 3);
  w = what_of([&] { read_partition_part(dir, 2); });
  CHECK(contains(w, "truncated"));
  CHECK(contains(w, "in_columns.bin"));
  fs::resize_file(columns, 20);  // shorter than the header
  CHECK(contains(what_of([&] { read_partition_part(dir, 2); }), "truncated"));

  fresh();
  {
    std::fstream f(partition_part_dir(dir, 0) / "labels.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.write("NOTSAR!!", 8);
  }
  w = what_of([&] { read_partition_part(dir, 0); });
  CHECK(contains(w, "bad magic"));
  CHECK(contains(w, "labels.bin"));

  fresh();  // a file from another part
  fs::copy_file(partition_part_dir(dir, 1) / "split.bin", partition_part_dir(dir, 0) / "split.bin",
                fs::copy_options::overwrite_existing);
  CHECK(contains(what_of([&] { read_partition_part(dir, 0); }), "belongs to part 1"));

  fresh();  // meta.json edited: num_classes raised (the seal names the file)
  {
    nlohmann::json j;
    std::ifstream(dir / "meta.json") >> j;
    j["num_classes"] = j["num_classes"].get<int>() + 1;
    std::ofstream(dir / "meta.json") << j.dump();
  }
  w = what_of([&] { read_partition_metadata(dir); });
  CHECK(contains(w, "meta.json was changed after sar wrote it"));

  fresh();  // a sealed meta.json disagreeing with a part's files (a faulty writer)
  {
    nlohmann::json j;
    std::ifstream(dir / "meta.json") >> j;
    j["feature_dim"] = 6;
    seal_metadata(j);
    std::ofstream(dir / "meta.json") << j.dump();
  }
  w = what_of([&] { read_partition_part(dir, 1); });
  CHECK(contains(w, "features.bin"));
  CHECK(contains(w, "meta.json implies"));

  // Node counts that disagree with the files are refused before anything is allocated: one
  // beyond the machine from the memory it needs, a smaller one from the files' sizes.
  for (const std::int64_t extra : {std::int64_t{1} << 50, std::int64_t{1000}}) {
    fresh();
    {
      nlohmann::json j;
      std::ifstream(dir / "meta.json") >> j;
      auto offsets = j["part_offsets"].get<std::vector<std::int64_t>>();
      for (std::size_t p = 1; p < offsets.size(); ++p) offsets[p] += extra;
      j["part_offsets"] = offsets;
      j["num_nodes"] = offsets.back();
      seal_metadata(j);
      std::ofstream(dir / "meta.json") << j.dump();
    }
    w = what_of([&] { read_partition_part(dir, 0); });
    CAPTURE(w);
    CHECK(contains(w, "meta.json"));
    CHECK(contains(w, extra > 1000 ? "of memory available" : "in_offsets.bin"));
  }

  fresh();  // version
  {
    nlohmann::json j;
    std::ifstream(dir / "meta.json") >> j;
    j["format_version"] = 99;
    std::ofstream(dir / "meta.json") << j.dump();
  }
  CHECK(contains(what_of([&] { read_partition_metadata(dir); }), "format version 99"));

  fresh();  // an in-range change: a label flipped to another valid class
  {
    std::fstream f(partition_part_dir(dir, 1) / "labels.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(48);
    std::int32_t label = 0;
    f.read(reinterpret_cast<char*>(&label), sizeof label);
    label = (label + 1) % d.num_classes;
    f.seekp(48);
    f.write(reinterpret_cast<const char*>(&label), sizeof label);
  }
  w = what_of([&] { read_partition_part(dir, 1); });
  CHECK(contains(w, "labels.bin"));
  CHECK(contains(w, "checksum mismatch"));
  CHECK_NOTHROW(read_partition_part(dir, 1, {.verify_checksums = false}));

  fresh();  // a part copied from another store with the same counts
  {
    graph_dataset other = d;
    other.features.array() += 1.0f;
    write_partition_store(other, part, 3, tmp.path / "other", "contiguous");
    fs::copy(partition_part_dir(tmp.path / "other", 2), partition_part_dir(dir, 2),
             fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  }
  w = what_of([&] { read_partition_part(dir, 2); });
  CHECK(contains(w, "features.bin"));
  CHECK(contains(w, "belongs to another store"));
  CHECK(read_partition_metadata(dir).identity != read_partition_metadata(tmp.path / "other").identity);

  fs::remove(dir / "meta.json");
  CHECK(contains(what_of([&] { read_partition_part(dir, 0); }), "meta.json"));
}

TEST_CASE("METIS on Cora (4 parts): edge cut under half of random's, balanced within tolerance") {
  const graph_dataset cora = read_ogb_raw(sar::testing_support::data_dir() / "cora");
  REQUIRE(cora.num_nodes() == 2708);
  REQUIRE(cora.count(node_split::train) == 140);
  const metis_options options{.seed = 0, .imbalance = 0.05};
  const auto m = partition_metis(cora, 4, options);
  CHECK(m == partition_metis(cora, 4, options));
  const auto qm = evaluate_partition(cora.graph, m, 4, cora.split);
  const auto qr = evaluate_partition(cora.graph, partition_random(2708, 4, 0), 4, cora.split);
  MESSAGE("cora metis: " << format_partition_quality(qm));
  MESSAGE("cora random: " << format_partition_quality(qr, 0));
  CHECK(2 * qm.edge_cut < qr.edge_cut);
  // METIS's tolerance is 1 + imbalance per constraint; allow one node of rounding on top.
  CHECK(qm.node_balance <= 1.05 + 4.0 / 2708);
  CHECK(qm.train_balance <= 1.05 + 4.0 / 140);
  CHECK(qm.edge_balance <= 1.05 + 0.01);
}

TEST_CASE("partition store: regression and multi-label targets (format 4); format 3 read as classify") {
  namespace fs = std::filesystem;
  graph_dataset d = small_dataset(40);
  const std::vector<int> part = partition_random(40, 3, 1);
  temp_dir tmp("targets");
  graph_dataset regress = d;
  regress.task = task_kind::regress;
  regress.targets.resize(40, 2);
  for (node_t i = 0; i < 40; ++i) regress.targets.row(i) << 0.25f * static_cast<float>(i), -1.0f * static_cast<float>(d.labels[i]);
  regress.labels.clear();
  regress.num_classes = 0;
  const auto dir = tmp.path / "regress";
  write_partition_store(regress, part, 3, dir, "random");
  const partition_metadata meta = read_partition_metadata(dir);
  CHECK(meta.format_version == partition_store_version);
  CHECK(meta.task == task_kind::regress);
  CHECK(meta.num_outputs == 2);
  CHECK_FALSE(meta.has_labels);
  node_t seen = 0;
  for (int p = 0; p < 3; ++p) {
    const graph_part gp = read_partition_part(dir, p);
    CHECK(gp.task == task_kind::regress);
    CHECK(gp.num_outputs() == 2);
    REQUIRE(gp.targets.rows() == gp.num_local());
    for (node_t r = 0; r < gp.num_local(); ++r, ++seen)
      CHECK((gp.targets.row(r).array() == regress.targets.row(gp.original_ids[r]).array()).all());
  }
  CHECK(seen == 40);
  // A corrupted target is caught by its checksum, a non-finite one by name.
  {
    std::fstream f(partition_part_dir(dir, 1) / "targets.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    const float nan = NAN;
    f.seekp(48 + 4);
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  CHECK(contains(what_of([&] { read_partition_part(dir, 1); }), "targets.bin"));
  CHECK(contains(what_of([&] { read_partition_part(dir, 1, {.verify_checksums = false}); }),
                 "not a finite number"));

  graph_dataset multi = regress;
  multi.task = task_kind::multilabel;
  multi.targets = (regress.targets.array() > 1.0f).cast<float>();
  write_partition_store(multi, part, 3, tmp.path / "multi", "random");
  const graph_part gp = read_partition_part(tmp.path / "multi", 0);
  CHECK(gp.task == task_kind::multilabel);
  for (node_t r = 0; r < gp.num_local(); ++r)
    CHECK((gp.targets.row(r).array() == multi.targets.row(gp.original_ids[r]).array()).all());

  // A store written before tasks (format 3: no "task", file headers of version 3) is still
  // read, as classification.
  const auto old = tmp.path / "format3";
  write_partition_store(d, part, 3, old, "random");
  {
    nlohmann::json j;
    std::ifstream(old / "meta.json") >> j;
    for (auto& [name, entry] : j["manifest"]["files"].items()) {
      std::string bytes = read_file_bytes(old / name);
      const std::uint32_t version = 3;
      std::memcpy(bytes.data() + 8, &version, sizeof version);
      std::ofstream(old / name, std::ios::binary | std::ios::trunc) << bytes;
      entry["crc32"] = crc32_update(0, bytes.data(), bytes.size());
    }
    j.erase("task");
    j.erase("num_outputs");
    j.erase("edge_feature_dim");
    j["format_version"] = 3;
    seal_metadata(j);
    std::ofstream(old / "meta.json", std::ios::trunc) << j.dump();
  }
  const partition_metadata old_meta = read_partition_metadata(old);
  CHECK(old_meta.format_version == 3);
  CHECK(old_meta.task == task_kind::classify);
  const graph_part old_part = read_partition_part(old, 2);
  CHECK(old_part.task == task_kind::classify);
  CHECK(old_part.targets.size() == 0);
  for (node_t r = 0; r < old_part.num_local(); ++r)
    CHECK(old_part.labels[r] == d.labels[old_part.original_ids[r]]);
}

#include "sar/graph/io/load.hpp"
#include "sar/graph/io/npy.hpp"

TEST_CASE("edge features: planted generator, .npy dataset, OGB edge-feat, partition store 5") {
  namespace fs = std::filesystem;
  temp_dir tmp("edges");
  const graph_dataset d = load_dataset("planted:nodes=200,classes=4,degree=6,edge_features=3");
  REQUIRE(d.edge_feature_dim() == 3);
  d.validate();
  // Column 0 tells an edge inside a class (+1) from one across (-1), up to the noise, and
  // both directions of an edge have the same row.
  double inside = 0, across = 0, n_inside = 0, n_across = 0;
  for (node_t i = 0; i < d.num_nodes(); ++i)
    for (edge_t e = d.graph.offsets[i]; e < d.graph.offsets[i + 1]; ++e) {
      const node_t j = d.graph.columns[e];
      const auto back = d.graph.row(j);
      const edge_t r = d.graph.offsets[j] + (std::lower_bound(back.begin(), back.end(), i) - back.begin());
      CHECK((d.edge_features.row(e).array() == d.edge_features.row(r).array()).all());
      (d.labels[i] == d.labels[j] ? inside : across) += d.edge_features(e, 0);
      (d.labels[i] == d.labels[j] ? n_inside : n_across) += 1;
    }
  CHECK(inside / n_inside > 0.7);
  CHECK(across / n_across < -0.7);

  // .npy: written and read back exactly; a wrong row count is refused naming the file.
  write_npy_dataset(tmp.path / "npy", d);
  const graph_dataset back = read_npy_dataset(tmp.path / "npy");
  CHECK(back.edge_features == d.edge_features);
  CHECK(back.graph == d.graph);

  // Partition store (format 5): each part's rows follow its in-edges.
  const std::vector<int> part = partition_random(200, 3, 2);
  write_partition_store(d, part, 3, tmp.path / "store", "random");
  CHECK(read_partition_metadata(tmp.path / "store").edge_feature_dim == 3);
  const relabelling ids = relabel(part, 3);
  for (int p = 0; p < 3; ++p) {
    const graph_part got = read_partition_part(tmp.path / "store", p);
    CHECK(got.edge_features == detail::store::part_of(d, ids, p).edge_features);
  }

  // OGB raw: raw/edge-feat.csv, one row per line of edge.csv; a reverse added by
  // add_inverse_edges takes its edge's row, a given edge wins over a reverse.
  const fs::path ogb = tmp.path / "ogb";
  fs::create_directories(ogb / "raw");
  std::ofstream(ogb / "raw" / "num-node-list.csv") << "4\n";
  std::ofstream(ogb / "raw" / "edge.csv") << "0,1\n1,2\n2,1\n3,0\n";
  std::ofstream(ogb / "raw" / "edge-feat.csv") << "1,10\n2,20\n3,30\n4,40\n";
  std::ofstream(ogb / "raw" / "node-feat.csv") << "0\n0\n0\n0\n";
  const graph_dataset o = read_ogb_raw(ogb);
  REQUIRE(o.edge_feature_dim() == 2);
  std::map<std::pair<node_t, node_t>, float> first;  // (source, destination) -> column 0
  for (node_t i = 0; i < 4; ++i)
    for (edge_t e = o.graph.offsets[i]; e < o.graph.offsets[i + 1]; ++e)
      first[{o.graph.columns[e], i}] = o.edge_features(e, 0);
  CHECK(first.at({0, 1}) == 1);
  CHECK(first.at({1, 0}) == 1);  // the reverse of 0 -> 1
  CHECK(first.at({1, 2}) == 2);  // given, not the reverse of 2 -> 1
  CHECK(first.at({2, 1}) == 3);
  CHECK(first.at({0, 3}) == 4);
  std::ofstream(ogb / "raw" / "edge-feat.csv") << "1,10\n2,20\n3,30\n";
  CHECK_THROWS_WITH_AS(read_ogb_raw(ogb), doctest::Contains("edge-feat.csv line 3: file ends "
                                                            "after 3 edge feature rows"),
                       io_error);
}
