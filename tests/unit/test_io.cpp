// Graph loaders: OGB raw layout (real Cora / CiteSeer and malformed fixtures), SNAP edge
// lists, Matrix Market, gzip handling, the number parsers, and .npy files and datasets.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sar/io/mapped_npy.hpp"
#include "sar/io/output_file.hpp"
#include "sar/io/safe_directory.hpp"
#include "sar/core/sparse_rows.hpp"
#include "sar/graph/heterogeneous.hpp"
#include "sar/graph/io/edge_list.hpp"
#include "sar/graph/io/gzip.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/graph/io/matrix_market.hpp"
#include "sar/graph/io/npy.hpp"
#include "sar/graph/io/ogb.hpp"
#include "sar/graph/io/text.hpp"
#include "test_support.hpp"

using namespace sar;
namespace fs = std::filesystem;
using testing_support::temp_dir;

namespace {

/// The message of the sar::io_error that f throws; fails the test if it throws nothing else.
template <class F>
std::string io_error_of(F&& f) {
  try {
    f();
  } catch (const io_error& e) {
    return e.what();
  }
  FAIL("expected a sar::io_error");
  return {};
}

void check_contains(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& part : parts)
    CHECK_MESSAGE(text.find(part) != std::string::npos,
                  "message \"" << text << "\" lacks \"" << part << "\"");
}

std::string read_binary(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Sets io::chunk_bytes for one scope.
struct chunk_size_guard {
  std::size_t saved = io::chunk_bytes;
  explicit chunk_size_guard(std::size_t bytes) { io::chunk_bytes = bytes; }
  ~chunk_size_guard() { io::chunk_bytes = saved; }
};

/// A small valid OGB raw dataset (4 nodes, path 0-1-2-3, 3 features, a "public" split) that
/// each test case then breaks in one place.
struct ogb_fixture {
  temp_dir dir{"ogb"};
  std::map<std::string, std::string> files = {
      {"raw/num-node-list.csv.gz", "4\n"},
      {"raw/num-edge-list.csv.gz", "3\n"},
      {"raw/edge.csv.gz", "0,1\n1,2\n2,3\n"},
      {"raw/node-feat.csv.gz", "0.5,1,0\n-1.25,0,2e-1\n0,0,0\n1,1,1\n"},
      {"raw/node-label.csv.gz", "0\n1\nnan\n2\n"},
      {"split/public/train.csv.gz", "0\n1\n"},
      {"split/public/valid.csv.gz", "2\n"},
      {"split/public/test.csv.gz", "3\n"},
  };
  fs::path root() const { return dir.path / "toy"; }
  fs::path path(const std::string& name) const { return root() / name; }
  /// Writes every file (gzip for *.gz, plain otherwise).
  void write() const {
    for (const auto& [name, content] : files) {
      fs::create_directories(path(name).parent_path());
      if (name.ends_with(".gz"))
        io::write_gzip_file(path(name), content);
      else
        io::write_text_file(path(name), content);
    }
  }
  std::string error(const ogb_options& options = {}) const {
    write();
    return io_error_of([&] { read_ogb_raw(root(), options); });
  }
};

struct dataset_facts {
  node_t isolated = 0;
  node_t zero_feature_rows = 0;
  double feature_sum = 0;
  node_t feature_non_zeros = 0;
  std::vector<node_t> label_counts;
  std::vector<node_t> train_per_class;
  node_t min_test = -1, max_test = -1;
  node_t self_loops = 0;
};

dataset_facts facts_of(const graph_dataset& d) {
  dataset_facts f;
  for (node_t i = 0; i < d.num_nodes(); ++i) {
    f.isolated += d.graph.degree(i) == 0;
    for (node_t j : d.graph.row(i)) f.self_loops += j == i;
    f.zero_feature_rows += (d.features.row(i).array() == 0).all();
  }
  f.feature_sum = d.features.cast<double>().sum();
  f.feature_non_zeros = (d.features.array() != 0).count();
  f.label_counts.assign(d.num_classes, 0);
  f.train_per_class.assign(d.num_classes, 0);
  for (node_t i = 0; i < d.num_nodes(); ++i) {
    if (d.labels[i] >= 0) ++f.label_counts[d.labels[i]];
    if (d.split[i] == node_split::train) ++f.train_per_class[d.labels[i]];
    if (d.split[i] == node_split::test) {
      if (f.min_test < 0) f.min_test = i;
      f.max_test = i;
    }
  }
  return f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Real data: every count published in ../shared/data/README.md.

TEST_CASE("read_ogb_raw: Cora matches every published count") {
  const graph_dataset d = read_ogb_raw(testing_support::data_dir() / "cora");
  d.validate();
  CHECK(d.name == "cora");
  CHECK(d.num_nodes() == 2708);
  CHECK(d.graph.num_edges() == 10556);
  CHECK(is_symmetric(d.graph));
  CHECK(d.features.rows() == 2708);
  CHECK(d.features.cols() == 1433);
  CHECK(d.num_classes == 7);
  CHECK(d.count(node_split::train) == 140);
  CHECK(d.count(node_split::valid) == 500);
  CHECK(d.count(node_split::test) == 1000);
  CHECK(d.count(node_split::none) == 2708 - 1640);
  const dataset_facts f = facts_of(d);
  CHECK(f.label_counts == std::vector<node_t>{351, 217, 418, 818, 426, 298, 180});
  CHECK(f.train_per_class == std::vector<node_t>(7, 20));
  CHECK(f.feature_non_zeros == 49216);
  CHECK(f.feature_sum == 49216);
  CHECK(f.zero_feature_rows == 0);
  CHECK(f.isolated == 0);
  CHECK(f.self_loops == 0);
  CHECK(f.min_test == 1708);
  CHECK(f.max_test == 2707);
  // The first edge line of the file is "0,633": both directions are present after symmetrising.
  const auto row0 = d.graph.row(0);
  CHECK(std::binary_search(row0.begin(), row0.end(), 633));
  const auto row633 = d.graph.row(633);
  CHECK(std::binary_search(row633.begin(), row633.end(), 0));
}

TEST_CASE("sparse features: read as sparse rows from an OGB directory or made by planted, they "
          "equal the dense ones") {
  const fs::path cora = testing_support::data_dir() / "cora";
  const graph_dataset dense = read_ogb_raw(cora);
  const graph_dataset sparse = read_ogb_raw(cora, {.sparse_below = 0.05});
  sparse.validate();
  REQUIRE(sparse.sparse());
  CHECK(sparse.features.rows() == 2708);
  CHECK(sparse.feature_dim() == 1433);
  CHECK(sparse.sparse_features.non_zeros() == 49216);
  CHECK(sparse.sparse_features == to_sparse_rows<float, float>(dense.features));
  CHECK(sparse.graph == dense.graph);
  // Denser than asked: dense after all (Cora's features are 1.3% non-zero).
  const graph_dataset denser = read_ogb_raw(cora, {.sparse_below = 0.01});
  CHECK_FALSE(denser.sparse());
  CHECK(denser.features == dense.features);
  // load_dataset passes the limit to the reader and to planted's words.
  CHECK(load_dataset(cora.string(), {}, 0.05).sparse());
  const std::string words = "planted:nodes=3000,features=400,density=0.01,degree=4";
  const graph_dataset planted_dense = load_dataset(words);
  const graph_dataset planted_sparse = load_dataset(words, {}, 0.05);
  planted_sparse.validate();
  REQUIRE(planted_sparse.sparse());
  CHECK_FALSE(planted_dense.sparse());
  CHECK(planted_sparse.sparse_features == to_sparse_rows<float, float>(planted_dense.features));
  CHECK(planted_sparse.sparse_features.density() > 0.005);
  CHECK(planted_sparse.sparse_features.density() <= 0.01);
  CHECK(planted_sparse.labels == planted_dense.labels);
  // A feature row of another width is still an error, naming its line.
  const fs::path bad = fs::temp_directory_path() / ("sar-sparse-ogb-" + std::to_string(getpid()));
  fs::remove_all(bad);
  fs::create_directories(bad / "raw");
  std::ofstream(bad / "raw" / "num-node-list.csv") << "3\n";
  std::ofstream(bad / "raw" / "edge.csv") << "0,1\n1,2\n";
  std::ofstream(bad / "raw" / "node-feat.csv") << "0,1,0\n0,0,0\n1,0\n";
  CHECK_THROWS_WITH_AS(read_ogb_raw(bad, {.sparse_below = 0.5}),
                       doctest::Contains("line 3: expected 3 comma-separated columns"), io_error);
  fs::remove_all(bad);
}

TEST_CASE("sparse features in a .npy dataset (version 4): written and read back as sparse rows, "
          "in shares, dense on request; bad arrays refused by name") {
  const graph_dataset cora =
      read_ogb_raw(testing_support::data_dir() / "cora", {.sparse_below = 0.05});
  REQUIRE(cora.sparse());
  temp_dir tmp("sparse-npy");
  const fs::path dir = tmp.path / "cora";
  write_npy_dataset(dir, cora);
  CHECK_FALSE(fs::exists(dir / "features.npy"));
  const graph_dataset back = read_npy_dataset(dir);
  back.validate();
  REQUIRE(back.sparse());
  CHECK(back.sparse_features == cora.sparse_features);
  CHECK(back.graph == cora.graph);
  CHECK(back.labels == cora.labels);
  // Shares of rows (the ranks' reads) are the rows of the whole, their checksums combined.
  const node_t cut = 1000;
  for (const auto& range : {std::pair<node_t, node_t>{0, cut}, {cut, 2708}}) {
    const auto [first, last] = range;
    const npy_dataset_share share =
        read_npy_dataset_share(dir, {}, [&](node_t) { return range; });
    std::vector<node_t> rows(static_cast<std::size_t>(last - first));
    std::iota(rows.begin(), rows.end(), first);
    CHECK(share.rows.sparse_features ==
          select_rows(cora.sparse_features, std::span<const node_t>(rows)));
    CHECK(share.rows.features.rows() == last - first);
  }
  // load_dataset keeps them sparse up to its limit, dense above it (and by default).
  CHECK(load_dataset(dir.string(), {}, 0.05).sparse());
  const graph_dataset dense = load_dataset(dir.string());
  CHECK_FALSE(dense.sparse());
  CHECK(dense.features == to_dense<float>(cora.sparse_features));

  // A column beyond feature_dim, offsets that decrease: refused naming the array.
  const auto overwrite = [&](const char* file, std::int64_t element, auto value) {
    write_npy_dataset(dir, cora);
    const npy_header h = read_npy_header(dir / file);
    std::fstream f(dir / file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(h.data_offset + element * sizeof value));
    f.write(reinterpret_cast<const char*>(&value), sizeof value);
  };
  const auto refusal = [&] {
    try {
      read_npy_dataset(dir, {.verify_checksums = false});
    } catch (const io_error& e) {
      return std::string(e.what());
    }
    return std::string("(no io_error)");
  };
  overwrite("features_indices.npy", 5, std::int32_t{1433});
  CHECK(refusal().find("features_indices.npy") != std::string::npos);
  CHECK(refusal().find("lists column 1433") != std::string::npos);
  CHECK_THROWS_WITH_AS(read_npy_dataset(dir), doctest::Contains("features_indices.npy"), io_error);
  overwrite("features_indptr.npy", 3, std::int64_t{-1});
  CHECK(refusal().find("features_indptr.npy: offsets decrease at row 2") != std::string::npos);
}

TEST_CASE("read_ogb_raw: CiteSeer matches every published count") {
  const graph_dataset d = read_ogb_raw(testing_support::data_dir() / "citeseer");
  d.validate();
  CHECK(d.name == "citeseer");
  CHECK(d.num_nodes() == 3327);
  CHECK(d.graph.num_edges() == 9104);
  CHECK(is_symmetric(d.graph));
  CHECK(d.features.cols() == 3703);
  CHECK(d.num_classes == 6);
  CHECK(d.count(node_split::train) == 120);
  CHECK(d.count(node_split::valid) == 500);
  CHECK(d.count(node_split::test) == 1000);
  const dataset_facts f = facts_of(d);
  CHECK(f.label_counts == std::vector<node_t>{264, 590, 668, 701, 596, 508});
  CHECK(f.train_per_class == std::vector<node_t>(6, 20));
  CHECK(f.feature_non_zeros == 105165);
  CHECK(f.feature_sum == 105165);
  CHECK(f.zero_feature_rows == 15);
  CHECK(f.isolated == 48);
  CHECK(f.self_loops == 0);
  CHECK(f.min_test == 2312);
  CHECK(f.max_test == 3326);
}

TEST_CASE("read_ogb_raw: options (directed, self loops) and chunking do not change the data") {
  const fs::path cora = testing_support::data_dir() / "cora";
  const graph_dataset d = read_ogb_raw(cora);
  SUBCASE("directed: the file's 5278 edges as written") {
    const graph_dataset directed = read_ogb_raw(cora, {.add_inverse_edges = false});
    CHECK(directed.graph.num_edges() == 5278);
    CHECK_FALSE(is_symmetric(directed.graph));
    CHECK(directed.features == d.features);
  }
  SUBCASE("self loops added: A + I") {
    const graph_dataset looped = read_ogb_raw(cora, {.self_loops = self_loop_policy::add});
    CHECK(looped.graph.num_edges() == 10556 + 2708);
    CHECK(facts_of(looped).self_loops == 2708);
  }
  SUBCASE("tiny chunks: thousands of parallel chunks give the same dataset") {
    chunk_size_guard guard(777);  // cuts lines in the middle of feature rows
    const graph_dataset small = read_ogb_raw(cora);
    CHECK(small.graph == d.graph);
    CHECK(small.features == d.features);
    CHECK(small.labels == d.labels);
    CHECK(small.split == d.split);
    CHECK(small.num_classes == d.num_classes);
  }
}

// ---------------------------------------------------------------------------------------------
// OGB fixtures: valid, optional parts, and one malformed input per case.

TEST_CASE("read_ogb_raw: small fixture is read exactly") {
  ogb_fixture fx;
  fx.write();
  const graph_dataset d = read_ogb_raw(fx.root());
  d.validate();
  CHECK(d.name == "toy");
  CHECK(d.num_nodes() == 4);
  CHECK(d.graph.num_edges() == 6);
  CHECK(d.features.rows() == 4);
  CHECK(d.features.cols() == 3);
  CHECK(d.features(0, 0) == 0.5f);
  CHECK(d.features(1, 0) == -1.25f);
  CHECK(d.features(1, 2) == 0.2f);
  CHECK(d.labels == std::vector<std::int32_t>{0, 1, -1, 2});
  CHECK(d.num_classes == 3);
  CHECK(d.split == std::vector<node_split>{node_split::train, node_split::train,
                                           node_split::valid, node_split::test});
  SUBCASE("trailing slash in the directory still names the dataset") {
    CHECK(read_ogb_raw(fx.root().string() + "/").name == "toy");
  }
}

TEST_CASE("read_ogb_raw: plain .csv files, CRLF line ends and integral float labels") {
  ogb_fixture fx;
  fx.files.erase("raw/edge.csv.gz");
  fx.files["raw/edge.csv"] = "0,1\r\n1,2\r\n 2 , 3 \r\n";
  fx.files["raw/node-label.csv.gz"] = "0.0\n1.0\nNaN\n2.0\n";
  fx.write();
  const graph_dataset d = read_ogb_raw(fx.root());
  CHECK(d.graph.num_edges() == 6);
  CHECK(d.labels == std::vector<std::int32_t>{0, 1, -1, 2});
}

TEST_CASE("read_ogb_raw: features, labels, num-edge-list and split are optional") {
  ogb_fixture fx;
  fx.files.erase("raw/node-feat.csv.gz");
  fx.files.erase("raw/node-label.csv.gz");
  fx.files.erase("raw/num-edge-list.csv.gz");
  fx.files.erase("split/public/train.csv.gz");
  fx.files.erase("split/public/valid.csv.gz");
  fx.files.erase("split/public/test.csv.gz");
  fx.write();
  const graph_dataset d = read_ogb_raw(fx.root());
  d.validate();
  CHECK(d.num_nodes() == 4);
  CHECK(d.features.rows() == 4);
  CHECK(d.features.cols() == 0);
  CHECK(d.labels.empty());
  CHECK(d.num_classes == 0);
  CHECK(d.split.empty());
}

TEST_CASE("read_ogb_raw: malformed edge files") {
  ogb_fixture fx;
  const std::string edge = (fx.path("raw/edge.csv.gz")).string();
  SUBCASE("wrong column count") {
    fx.files["raw/edge.csv.gz"] = "0,1\n1,2,3\n2,3\n";
    check_contains(fx.error(), {"sar::read_ogb_raw: ", edge + " line 2: ",
                                "expected 2 comma-separated columns, got 3", "(\"1,2,3\")"});
  }
  SUBCASE("one column") {
    fx.files["raw/edge.csv.gz"] = "0,1\n1,2\n3\n";
    check_contains(fx.error(), {edge + " line 3: ", "got 1", "(\"3\")"});
  }
  SUBCASE("non-numeric token") {
    fx.files["raw/edge.csv.gz"] = "0,1\n1,x2\n2,3\n";
    check_contains(fx.error(), {edge + " line 2: ", "not an integer node id", "(\"x2\")"});
  }
  SUBCASE("trailing garbage") {
    fx.files["raw/edge.csv.gz"] = "0,1\n1,2\n2,3abc\n";
    check_contains(fx.error(), {edge + " line 3: ", "not an integer", "(\"3abc\")"});
  }
  SUBCASE("empty field") {
    fx.files["raw/edge.csv.gz"] = "0,1\n,2\n2,3\n";
    check_contains(fx.error(), {edge + " line 2: ", "empty node id"});
  }
  SUBCASE("blank line") {
    fx.files["raw/edge.csv.gz"] = "0,1\n\n2,3\n";
    check_contains(fx.error(), {edge + " line 2: "});
  }
  SUBCASE("negative id") {
    fx.files["raw/edge.csv.gz"] = "0,1\n-1,2\n2,3\n";
    check_contains(fx.error(), {edge + " line 2: ", "negative node id", "(\"-1\")"});
  }
  SUBCASE("id out of range") {
    fx.files["raw/edge.csv.gz"] = "0,1\n1,2\n2,4\n";
    check_contains(fx.error(), {edge + " line 3: ", "node id outside [0, 4)", "(\"4\")"});
  }
  SUBCASE("id overflowing 64 bits") {
    fx.files["raw/edge.csv.gz"] = "0,1\n1,99999999999999999999999\n2,3\n";
    check_contains(fx.error(), {edge + " line 2: ", "not an integer"});
  }
  SUBCASE("fewer edges than num-edge-list") {
    fx.files["raw/num-edge-list.csv.gz"] = "4\n";
    check_contains(fx.error(), {edge + " line 3: ", "file ends after 3 edges", "says 4"});
  }
  SUBCASE("more edges than num-edge-list") {
    fx.files["raw/num-edge-list.csv.gz"] = "2\n";
    check_contains(fx.error(), {edge + " line 3: ", "more edges than the 2", "(\"2,3\")"});
  }
  SUBCASE("bad num-node-list") {
    fx.files["raw/num-node-list.csv.gz"] = "4 nodes\n";
    check_contains(fx.error(), {fx.path("raw/num-node-list.csv.gz").string() + " line 1: ",
                                "single non-negative integer", "(\"4 nodes\")"});
  }
  SUBCASE("a declared count of 1e9 beside small files fails before allocating") {
    fx.files["raw/num-node-list.csv.gz"] = "1000000000\n";
    check_contains(fx.error(), {fx.path("raw/num-node-list.csv.gz").string(),
                                "declares 1000000000 nodes, but ",
                                fx.path("raw/node-feat.csv.gz").string(),
                                "can hold at most"});
  }
  SUBCASE("a declared count beyond the machine's memory is refused, naming what it needs") {
    fx.files["raw/num-node-list.csv.gz"] = "1000000000000000\n";
    fx.files.erase("raw/node-feat.csv.gz");
    fx.files.erase("raw/node-label.csv.gz");
    // Stated, so that the sparse id range is accepted and the size itself is refused.
    check_contains(fx.error({.sizes = {.num_nodes = 1000000000000000}}),
                   {"the split of the 1000000000000000 nodes in ", "TiB, more than the ",
                    "of memory available"});
  }
  SUBCASE("a line longer than io::max_line_bytes") {
    const chunk_size_guard small_chunks(64);  // the limit applies when a line outgrows a chunk
    const std::size_t saved = io::max_line_bytes;
    io::max_line_bytes = 1000;
    fx.files["raw/edge.csv.gz"] = "0,1\n" + std::string(70000, '7');  // no line break
    const std::string error = fx.error();
    io::max_line_bytes = saved;
    check_contains(error, {edge + " line 2: ", "line longer than 1000 bytes"});
  }
  SUBCASE("num-edge-list with two graphs") {
    fx.files["raw/num-edge-list.csv.gz"] = "3\n5\n";
    check_contains(fx.error(), {fx.path("raw/num-edge-list.csv.gz").string() + " line 2: ",
                                "single number"});
  }
  SUBCASE("missing edge file") {
    fx.files.erase("raw/edge.csv.gz");
    check_contains(fx.error(), {"sar::read_ogb_raw: missing file ", edge});
  }
}

TEST_CASE("read_ogb_raw: malformed features and labels") {
  ogb_fixture fx;
  const std::string feat = fx.path("raw/node-feat.csv.gz").string();
  const std::string label = fx.path("raw/node-label.csv.gz").string();
  SUBCASE("ragged rows") {
    fx.files["raw/node-feat.csv.gz"] = "1,2,3\n4,5,6\n7,8\n1,1,1\n";
    check_contains(fx.error(), {feat + " line 3: ", "expected 3 comma-separated columns, got 2",
                                "(\"7,8\")"});
  }
  SUBCASE("longer row") {
    fx.files["raw/node-feat.csv.gz"] = "1,2,3\n4,5,6,7\n7,8,9\n1,1,1\n";
    check_contains(fx.error(), {feat + " line 2: ", "got 4"});
  }
  SUBCASE("non-numeric feature") {
    fx.files["raw/node-feat.csv.gz"] = "1,2,3\n4,abc,6\n7,8,9\n1,1,1\n";
    check_contains(fx.error(), {feat + " line 2: ", "not a number in column 2", "(\"abc\")"});
  }
  SUBCASE("empty feature field") {
    fx.files["raw/node-feat.csv.gz"] = "1,2,3\n4,5,6\n7,,9\n1,1,1\n";
    check_contains(fx.error(), {feat + " line 3: ", "empty field in column 2"});
  }
  SUBCASE("fewer feature rows than nodes") {
    fx.files["raw/node-feat.csv.gz"] = "1,2,3\n4,5,6\n7,8,9\n";
    check_contains(fx.error(), {feat + " line 3: ", "file ends after 3 feature rows", "says 4 nodes"});
  }
  SUBCASE("more feature rows than nodes") {
    fx.files["raw/node-feat.csv.gz"] = "1,2,3\n4,5,6\n7,8,9\n1,1,1\n2,2,2\n";
    check_contains(fx.error(), {feat + " line 5: ", "more feature rows than the 4 nodes"});
  }
  SUBCASE("more labels than nodes") {
    fx.files["raw/node-label.csv.gz"] = "0\n1\n2\n0\n1\n";
    check_contains(fx.error(), {label + " line 5: ", "more labels than the 4 nodes"});
  }
  SUBCASE("fewer labels than nodes") {
    fx.files["raw/node-label.csv.gz"] = "0\n1\n2\n";
    check_contains(fx.error(), {label + " line 3: ", "file ends after 3 labels"});
  }
  SUBCASE("non-integer label") {
    fx.files["raw/node-label.csv.gz"] = "0\n1.5\n2\n0\n";
    check_contains(fx.error(), {label + " line 2: ", "not an integer or nan", "(\"1.5\")"});
  }
  SUBCASE("label below -1") {
    fx.files["raw/node-label.csv.gz"] = "0\n1\n-2\n0\n";
    check_contains(fx.error(), {label + " line 3: ", "label outside", "(\"-2\")"});
  }
  SUBCASE("two label columns") {
    fx.files["raw/node-label.csv.gz"] = "0\n1,0\n2\n0\n";
    check_contains(fx.error(), {label + " line 2: ", "expected 1 column"});
  }
}

TEST_CASE("read_ogb_raw: mostly empty class and node ranges are refused unless stated") {
  ogb_fixture fx;
  const std::string labels = fx.path("raw/node-label.csv.gz").string();
  SUBCASE("a label of 100 among 0-2") {
    fx.files["raw/node-label.csv.gz"] = "0\n1\n100\n2\n";
    check_contains(fx.error(), {labels, "the largest label, 100 (line 3), makes 101 classes",
                                "only 4 of them have a node", "--num-classes 101"});
    const graph_dataset d = read_ogb_raw(fx.root(), {.sizes = {.num_classes = 101}});
    CHECK(d.num_classes == 101);
    CHECK(d.labels[2] == 100);
    check_contains(fx.error({.sizes = {.num_classes = 50}}),
                   {labels + " line 3: ", "label outside [-1, 50)", "(\"100\")"});
  }
  SUBCASE("a stated class count is the dataset's") {
    fx.write();
    CHECK(read_ogb_raw(fx.root(), {.sizes = {.num_classes = 4}}).num_classes == 4);
    check_contains(fx.error({.sizes = {.num_classes = 2}}),
                   {labels + " line 4: ", "label outside [-1, 2)"});
    fx.files.erase("raw/node-label.csv.gz");
    fs::remove_all(fx.root());
    check_contains(fx.error({.sizes = {.num_classes = 4}}),
                   {"num_classes = 4 is stated, but ", "has no labels"});
  }
  SUBCASE("a stated node count must be the declared one") {
    check_contains(fx.error({.sizes = {.num_nodes = 5}}),
                   {fx.path("raw/num-node-list.csv.gz").string(), "declares 4 nodes, but "
                    "num_nodes is 5"});
    fx.write();
    CHECK(read_ogb_raw(fx.root(), {.sizes = {.num_nodes = 4}}).num_nodes() == 4);
  }
  SUBCASE("without per-node files, a count of mostly isolated nodes") {
    fx.files.erase("raw/node-feat.csv.gz");
    fx.files.erase("raw/node-label.csv.gz");
    fx.files["raw/num-node-list.csv.gz"] = "100\n";
    check_contains(fx.error(), {fx.path("raw/num-node-list.csv.gz").string(),
                                "declares 100 nodes", "only 4 of them appear in an edge",
                                "--num-nodes 100"});
    fx.write();
    CHECK(read_ogb_raw(fx.root(), {.sizes = {.num_nodes = 100}}).num_nodes() == 100);
  }
}

TEST_CASE("read_ogb_raw: malformed splits") {
  ogb_fixture fx;
  const std::string valid = fx.path("split/public/valid.csv.gz").string();
  SUBCASE("a node in two splits") {
    fx.files["split/public/valid.csv.gz"] = "2\n1\n";
    check_contains(fx.error(), {valid + " line 2: ", "node 1 is already in the train split"});
  }
  SUBCASE("a node twice in one split") {
    fx.files["split/public/valid.csv.gz"] = "2\n2\n";
    check_contains(fx.error(), {valid + " line 2: ", "already in the valid split"});
  }
  SUBCASE("split id out of range") {
    fx.files["split/public/valid.csv.gz"] = "2\n7\n";
    check_contains(fx.error(), {valid + " line 2: ", "node id outside [0, 4)", "(\"7\")"});
  }
  SUBCASE("missing test file") {
    fx.files.erase("split/public/test.csv.gz");
    check_contains(fx.error(), {"missing file", fx.path("split/public/test.csv.gz").string()});
  }
  SUBCASE("several split directories must be chosen between") {
    fx.files["split/time/train.csv.gz"] = "3\n";
    fx.files["split/time/valid.csv.gz"] = "2\n";
    fx.files["split/time/test.csv.gz"] = "0\n1\n";
    check_contains(fx.error(), {"several splits (public, time)", "split_name"});
    const graph_dataset d = read_ogb_raw(fx.root(), {.split_name = "time"});
    CHECK(d.split == std::vector<node_split>{node_split::test, node_split::test,
                                             node_split::valid, node_split::train});
  }
  SUBCASE("unknown split name") {
    check_contains(fx.error({.split_name = "random"}),
                   {"missing split directory", fx.path("split/random").string()});
  }
  SUBCASE("not a directory") {
    check_contains(io_error_of([&] { read_ogb_raw(fx.dir.path / "nope"); }),
                   {"sar::read_ogb_raw: ", (fx.dir.path / "nope").string(), "not a directory"});
  }
}

// ---------------------------------------------------------------------------------------------
// gzip

TEST_CASE("gzip: round trip, concatenated members, truncation and corruption") {
  temp_dir dir("gzip");
  std::string content;
  for (int i = 0; i < 20000; ++i) content += std::to_string(i) + "," + std::to_string(i * 7 % 20001) + "\n";
  const fs::path gz = dir.path / "edges.csv.gz";
  io::write_gzip_file(gz, content);
  const std::string bytes = read_binary(gz);
  REQUIRE(bytes.size() > 100);
  CHECK(static_cast<unsigned char>(bytes[0]) == 0x1f);

  auto read_all = [](const fs::path& path) {
    io::input_file in(path, "test");
    std::string out;
    char block[4096];
    while (std::size_t n = in.read(block, sizeof block)) out.append(block, n);
    return out;
  };
  CHECK(read_all(gz) == content);

  SUBCASE("concatenated gzip members read as one file") {
    const fs::path first = dir.path / "a.gz", second = dir.path / "b.gz";
    io::write_gzip_file(first, "0,1\n");
    io::write_gzip_file(second, "1,2\n");
    io::write_text_file(dir.path / "ab.gz", read_binary(first) + read_binary(second));
    CHECK(read_all(dir.path / "ab.gz") == "0,1\n1,2\n");
  }
  SUBCASE("truncated in the middle of the data") {
    const fs::path cut = dir.path / "cut.csv.gz";
    io::write_text_file(cut, bytes.substr(0, bytes.size() / 2));
    check_contains(io_error_of([&] { read_all(cut); }), {"test: ", cut.string(), "truncated"});
    // Through a loader: no partial graph comes back.
    check_contains(io_error_of([&] { read_edge_list(cut); }),
                   {"sar::read_edge_list: ", cut.string(), "truncated"});
  }
  SUBCASE("truncated in the header and in the trailer") {
    for (std::size_t keep : {std::size_t{5}, bytes.size() - 4, bytes.size() - 1}) {
      const fs::path cut = dir.path / "cut.gz";
      io::write_text_file(cut, bytes.substr(0, keep));
      check_contains(io_error_of([&] { read_all(cut); }), {cut.string(), "truncated"});
    }
  }
  SUBCASE("corrupt CRC") {
    std::string bad = bytes;
    bad[bad.size() - 6] ^= 0x55;  // inside the CRC-32 of the trailer
    const fs::path corrupt = dir.path / "corrupt.gz";
    io::write_text_file(corrupt, bad);
    check_contains(io_error_of([&] { read_all(corrupt); }), {corrupt.string(), "corrupt"});
  }
  SUBCASE("garbage after the stream") {
    const fs::path tail = dir.path / "tail.gz";
    io::write_text_file(tail, bytes + "xyz");
    check_contains(io_error_of([&] { read_all(tail); }), {tail.string(), "after the end"});
  }
  SUBCASE("truncated OGB edge file") {
    ogb_fixture fx;
    fx.files["raw/edge.csv.gz"] = content;  // 20000 edges over ids 0..20000
    fx.files["raw/num-node-list.csv.gz"] = "20001\n";
    fx.files["raw/num-edge-list.csv.gz"] = "20000\n";
    fx.files.erase("raw/node-feat.csv.gz");
    fx.files.erase("raw/node-label.csv.gz");
    fx.files.erase("split/public/train.csv.gz");
    fx.files.erase("split/public/valid.csv.gz");
    fx.files.erase("split/public/test.csv.gz");
    fx.write();
    CHECK(read_ogb_raw(fx.root()).num_nodes() == 20001);
    const std::string whole = read_binary(fx.path("raw/edge.csv.gz"));
    io::write_text_file(fx.path("raw/edge.csv.gz"), whole.substr(0, whole.size() * 2 / 3));
    check_contains(io_error_of([&] { read_ogb_raw(fx.root()); }),
                   {"sar::read_ogb_raw: ", fx.path("raw/edge.csv.gz").string(), "truncated"});
  }
  SUBCASE("missing file") {
    check_contains(io_error_of([&] { read_all(dir.path / "absent.gz"); }),
                   {(dir.path / "absent.gz").string(), "cannot open", "No such file"});
  }
}

// ---------------------------------------------------------------------------------------------
// SNAP edge lists

TEST_CASE("read_edge_list: comments, blank lines, tabs, CRLF, gzip") {
  temp_dir dir("edges");
  const std::string text =
      "# Directed graph: toy.txt\n"
      "# FromNodeId\tToNodeId\n"
      "\n"
      "0\t1\n"
      "  1   2  \n"
      "% another comment style\n"
      "\t\n"
      "2 0\r\n"
      "5\t3";  // no final newline
  for (bool gzip : {false, true}) {
    const fs::path file = dir.path / (gzip ? "toy.txt.gz" : "toy.txt");
    if (gzip)
      io::write_gzip_file(file, text);
    else
      io::write_text_file(file, text);
    const edge_list e = read_edge_list(file);
    CHECK(e.num_nodes == 6);
    CHECK(e.src == std::vector<node_t>{0, 1, 2, 5});
    CHECK(e.dst == std::vector<node_t>{1, 2, 0, 3});
    CHECK(read_edge_list(file, 10).num_nodes == 10);
  }
  io::write_text_file(dir.path / "empty.txt", "# nothing\n");
  CHECK(read_edge_list(dir.path / "empty.txt").num_nodes == 0);
  CHECK(read_edge_list(dir.path / "empty.txt").size() == 0);
}

TEST_CASE("read_edge_list: malformed lines name file, line and token") {
  temp_dir dir("edges-bad");
  const fs::path file = dir.path / "bad.txt";
  auto error_for = [&](const std::string& text, node_t num_nodes = -1) {
    io::write_text_file(file, text);
    return io_error_of([&] { read_edge_list(file, num_nodes); });
  };
  const std::string where = "sar::read_edge_list: " + file.string();
  check_contains(error_for("# c\n0 1\n1 2 0.5\n"),
                 {where + " line 3: ", "expected 2 whitespace-separated columns, got 3", "(\"1 2 0.5\")"});
  check_contains(error_for("0 1\n7\n"), {where + " line 2: ", "got 1", "(\"7\")"});
  check_contains(error_for("0 1\n1 two\n"), {where + " line 2: ", "not an integer node id", "(\"two\")"});
  check_contains(error_for("0 1\n1,2\n"), {where + " line 2: ", "got 1"});
  check_contains(error_for("0 1\n1 -2\n"), {where + " line 2: ", "negative node id", "(\"-2\")"});
  check_contains(error_for("0 1\n\n# x\n1 9\n", 5),
                 {where + " line 4: ", "node id outside [0, 5)", "(\"9\")"});
  check_contains(error_for("0 1\n1 9223372036854775807\n"), {where + " line 2: ", "too large"});
  check_contains(io_error_of([&] { read_edge_list(dir.path / "absent.txt"); }),
                 {"sar::read_edge_list: ", (dir.path / "absent.txt").string(), "cannot open"});
  CHECK_THROWS_AS(read_edge_list(file, -2), sar::invalid_argument);
}

TEST_CASE("read_edge_list: many chunks keep order and line numbers") {
  temp_dir dir("edges-chunks");
  std::string text = "# header\n";
  for (int i = 0; i < 5000; ++i) text += std::to_string(i) + " " + std::to_string((i * 31) % 5000) + "\n";
  const fs::path file = dir.path / "big.txt.gz";
  io::write_gzip_file(file, text);
  chunk_size_guard guard(64);
  const edge_list e = read_edge_list(file);
  REQUIRE(e.size() == 5000);
  CHECK(e.num_nodes == 5000);
  bool in_order = true;
  for (int i = 0; i < 5000; ++i) in_order &= e.src[i] == i && e.dst[i] == (i * 31) % 5000;
  CHECK(in_order);
  // Two bad lines in different chunks: the first one in the file is reported.
  std::string broken = text;
  const std::string bad_late = "\n4321 ";
  broken.replace(broken.find(bad_late) + 1, 4, "x321");  // line 4323 (4321 + header + 1)
  const std::string bad_early = "\n777 ";
  broken.replace(broken.find(bad_early) + 1, 3, "7y7");  // line 779
  io::write_gzip_file(file, broken);
  check_contains(io_error_of([&] { read_edge_list(file); }), {" line 779: ", "(\"7y7\")"});
}

TEST_CASE("read_edge_list: a last line without a line break that outgrows the chunk (found by "
          "fuzz-text-graph)") {
  temp_dir dir("edges-last-line");
  const fs::path file = dir.path / "edges.txt";
  io::write_text_file(file, "0 1\n1 2\n2" + std::string(300, ' ') + "3");
  chunk_size_guard guard(64);
  const edge_list e = read_edge_list(file);
  REQUIRE(e.size() == 3);
  CHECK((e.src[2] == 2 && e.dst[2] == 3));
}

TEST_CASE("read_edge_list: a mostly unused id range is refused unless num_nodes is stated") {
  temp_dir dir("edges-sparse");
  const fs::path file = dir.path / "stray.txt";
  io::write_text_file(file, "0 1\n1 2\n# c\n2 0\n5 1000000\n3 4\n");
  const std::string where = "sar::read_edge_list: " + file.string();
  check_contains(io_error_of([&] { read_edge_list(file); }),
                 {where, "the largest node id, 1000000 (line 5), makes 1000001 nodes",
                  "only 7 of them appear in an edge", "num_nodes", "--num-nodes 1000001"});
  CHECK(read_edge_list(file, 1000001).num_nodes == 1000001);
  check_contains(io_error_of([&] { read_edge_list(file, 10); }),
                 {where + " line 5: ", "node id outside [0, 10)", "(\"1000000\")"});
  // Half the range used is enough: ids 0-3 and 7 of [0, 8), one isolated node beyond.
  io::write_text_file(file, "0 1\n2 3\n7 0\n");
  CHECK(read_edge_list(file).num_nodes == 8);
  // A range far larger than the input is refused without counting it id by id.
  io::write_text_file(file, "0 1\n1 9000000000000000000\n");
  check_contains(io_error_of([&] { read_edge_list(file); }),
                 {"makes 9000000000000000001 nodes", "at most 4 of them"});
}

// ---------------------------------------------------------------------------------------------
// Matrix Market

TEST_CASE("read_matrix_market: general and symmetric, pattern, integer and real") {
  temp_dir dir("mtx");
  const fs::path file = dir.path / "m.mtx";
  SUBCASE("general pattern: entry (i, j) is the edge j -> i") {
    io::write_text_file(file,
                        "%%MatrixMarket matrix coordinate pattern general\n"
                        "% a comment\n"
                        "%\n"
                        "3 3 3\n"
                        "2 1\n"
                        "3 3\n"
                        "\n"
                        "% comment between entries\n"
                        "1 3\n");
    const edge_list e = read_matrix_market(file);
    CHECK(e.num_nodes == 3);
    CHECK(e.src == std::vector<node_t>{0, 2, 2});
    CHECK(e.dst == std::vector<node_t>{1, 2, 0});
  }
  SUBCASE("symmetric real: off-diagonal entries mirrored, diagonal once") {
    io::write_text_file(file,
                        "%%MatrixMarket matrix coordinate real symmetric\n"
                        "4 4 3\n"
                        "2 1 0.5\n"
                        "3 3 -1e-3\n"
                        "4 2 7\n");
    const edge_list e = read_matrix_market(file);
    CHECK(e.num_nodes == 4);
    CHECK(e.src == std::vector<node_t>{0, 2, 1, 1, 3});
    CHECK(e.dst == std::vector<node_t>{1, 2, 3, 0, 1});
    const csr g = build_csr(e);
    CHECK(is_symmetric(g));
    CHECK(g.num_edges() == 5);
  }
  SUBCASE("integer field, case-insensitive keywords, gzip") {
    io::write_gzip_file(file, "%%MatrixMarket MATRIX Coordinate Integer General\n2 2 2\n1 2 5\n2 1 -3\n");
    const edge_list e = read_matrix_market(file);
    CHECK(e.src == std::vector<node_t>{1, 0});
    CHECK(e.dst == std::vector<node_t>{0, 1});
  }
  SUBCASE("no entries: five isolated nodes, accepted once their count is stated") {
    io::write_text_file(file, "%%MatrixMarket matrix coordinate pattern general\n5 5 0\n");
    check_contains(io_error_of([&] { read_matrix_market(file); }),
                   {"size line (line 2) declares a matrix of order 5", "only 0 of them"});
    const edge_list e = read_matrix_market(file, 5);
    CHECK(e.num_nodes == 5);
    CHECK(e.size() == 0);
  }
}

TEST_CASE("read_matrix_market: a mostly unused order is refused unless num_nodes states it") {
  temp_dir dir("mtx-sparse");
  const fs::path file = dir.path / "m.mtx";
  io::write_text_file(file, "%%MatrixMarket matrix coordinate pattern symmetric\n% c\n"
                            "1000000 1000000 2\n2 1\n3 2\n");
  const std::string where = "sar::read_matrix_market: " + file.string();
  check_contains(io_error_of([&] { read_matrix_market(file); }),
                 {where, "the size line (line 3) declares a matrix of order 1000000",
                  "only 3 of them appear in an entry", "--num-nodes 1000000"});
  CHECK(read_matrix_market(file, 1000000).num_nodes == 1000000);
  check_contains(io_error_of([&] { read_matrix_market(file, 3); }),
                 {where + " line 3: ", "order 1000000, but num_nodes is 3"});
  CHECK_THROWS_AS(read_matrix_market(file, -2), sar::invalid_argument);
}

TEST_CASE("read_matrix_market: malformed files name file, line and token") {
  temp_dir dir("mtx-bad");
  const fs::path file = dir.path / "bad.mtx";
  const std::string where = "sar::read_matrix_market: " + file.string();
  auto error_for = [&](const std::string& text) {
    io::write_text_file(file, text);
    return io_error_of([&] { read_matrix_market(file); });
  };
  const std::string banner = "%%MatrixMarket matrix coordinate pattern general\n";
  SUBCASE("banner") {
    check_contains(error_for("3 3 1\n1 1\n"), {where + " line 1: ", "bad banner", "(\"3 3 1\")"});
    check_contains(error_for("%%MatrixMarkt matrix coordinate real general\n1 1 0\n"),
                   {where + " line 1: ", "bad banner"});
    check_contains(error_for("%%MatrixMarket matrix coordinate real\n1 1 0\n"),
                   {where + " line 1: ", "expected 5 words, got 4"});
    check_contains(error_for(""), {where + " line 1: ", "empty file"});
    check_contains(error_for("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n"),
                   {where + " line 1: ", "unsupported format", "(\"array\")"});
    check_contains(error_for("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n"),
                   {where + " line 1: ", "unsupported field", "(\"complex\")"});
    check_contains(error_for("%%MatrixMarket matrix coordinate real hermitian\n1 1 0\n"),
                   {where + " line 1: ", "unsupported symmetry", "(\"hermitian\")"});
    check_contains(error_for("%%MatrixMarket matrix coordinate real skew-symmetric\n1 1 0\n"),
                   {where + " line 1: ", "unsupported symmetry", "(\"skew-symmetric\")"});
    check_contains(error_for("%%MatrixMarket vector coordinate real general\n1 1 0\n"),
                   {where + " line 1: ", "unsupported object"});
  }
  SUBCASE("size line") {
    check_contains(error_for(banner + "% c\n3 4 1\n1 1\n"),
                   {where + " line 3: ", "not square (3 rows, 4 columns)", "(\"3 4 1\")"});
    check_contains(error_for(banner + "3 3\n"), {where + " line 2: ", "bad size line", "(\"3 3\")"});
    check_contains(error_for(banner + "3 x 1\n"), {where + " line 2: ", "bad column count", "(\"x\")"});
    check_contains(error_for(banner + "% only comments\n"),
                   {where + " line 3: ", "file ends before the size line"});
  }
  SUBCASE("entry counts") {
    check_contains(error_for(banner + "3 3 3\n1 2\n% c\n2 3\n"),
                   {where + " line 2: ", "announces 3 entries but the file has 2", "(\"3 3 3\")"});
    check_contains(error_for(banner + "3 3 2\n1 2\n2 3\n\n3 1\n"),
                   {where + " line 6: ", "more entries than the 2 announced on line 2", "(\"3 1\")"});
  }
  SUBCASE("entries") {
    check_contains(error_for(banner + "3 3 2\n1 2\n4 1\n"),
                   {where + " line 4: ", "row index outside [1, 3]", "(\"4\")"});
    check_contains(error_for(banner + "3 3 2\n1 2\n1 0\n"),
                   {where + " line 4: ", "column index outside [1, 3]", "(\"0\")"});
    check_contains(error_for(banner + "3 3 1\n1 2 1.0\n"),
                   {where + " line 3: ", "expected 2 columns for a pattern entry, got 3"});
    check_contains(error_for("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1.0\n2 3\n"),
                   {where + " line 4: ", "expected 3 columns for a real entry, got 2"});
    check_contains(error_for("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1.0x\n"),
                   {where + " line 3: ", "not a real number", "(\"1.0x\")"});
    check_contains(error_for("%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 1.5\n"),
                   {where + " line 3: ", "not an integer", "(\"1.5\")"});
    check_contains(error_for(banner + "3 3 1\n1.0 2\n"),
                   {where + " line 3: ", "row index is not an integer", "(\"1.0\")"});
  }
}

// ---------------------------------------------------------------------------------------------
// Number parsing

TEST_CASE("io number parsers accept whole tokens only") {
  std::int64_t i = 0;
  CHECK(io::parse_integer("42", i));
  CHECK(i == 42);
  CHECK(io::parse_integer("-7", i));
  CHECK(i == -7);
  CHECK_FALSE(io::parse_integer("", i));
  CHECK_FALSE(io::parse_integer("12a", i));
  CHECK_FALSE(io::parse_integer("1.0", i));
  CHECK_FALSE(io::parse_integer("+3", i));
  CHECK_FALSE(io::parse_integer("99999999999999999999", i));

  float f = 0;
  CHECK(io::parse_float("1e-3", f));
  CHECK(f == 1e-3f);
  CHECK(io::parse_float("-0.5", f));
  CHECK(f == -0.5f);
  CHECK(io::parse_float("+2", f));
  CHECK(f == 2.0f);
  CHECK(io::parse_float("nan", f));
  CHECK(std::isnan(f));
  CHECK(io::parse_float("1e-60", f));  // underflows to zero
  CHECK(f == 0.0f);
  CHECK_FALSE(io::parse_float("1e60", f));  // overflows float
  CHECK_FALSE(io::parse_float("", f));
  CHECK_FALSE(io::parse_float("1.2.3", f));
  CHECK_FALSE(io::parse_float("1e", f));
  CHECK_FALSE(io::parse_float("+-1", f));
  CHECK_FALSE(io::parse_float("--1", f));
  CHECK_FALSE(io::parse_float("0x10", f));

  CHECK(io::trim(" \t 3 \r") == "3");
}

// ---------------------------------------------------------------------------------------------
// .npy files and the sar .npy dataset directory

namespace {

/// A .npy file as numpy would write it by hand: version major.0, header `dict` padded with
/// spaces to a multiple of `alignment` bytes (numpy < 1.14 used 16), then `payload`.
void write_raw_npy(const fs::path& file, const std::string& dict, const std::string& payload,
                   int major = 1, std::size_t alignment = 64) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((alignment - (prefix + header.size() + 1) % alignment) % alignment, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (std::size_t b = 0; b < prefix - 8; ++b) bytes += static_cast<char>(header.size() >> (8 * b));
  io::write_text_file(file, bytes + header + payload);
}

void check_same_dataset(const graph_dataset& expected, const graph_dataset& actual) {
  CHECK(actual.name == expected.name);
  CHECK(actual.graph == expected.graph);
  REQUIRE(actual.features.rows() == expected.features.rows());
  REQUIRE(actual.features.cols() == expected.features.cols());
  CHECK((actual.features.array() == expected.features.array()).all());
  CHECK(actual.labels == expected.labels);
  CHECK(actual.num_classes == expected.num_classes);
  CHECK(actual.split == expected.split);
  REQUIRE(actual.edge_feature_dim() == expected.edge_feature_dim());
  if (expected.edge_feature_dim() > 0) {
    REQUIRE(actual.edge_features.rows() == expected.edge_features.rows());
    CHECK((actual.edge_features.array() == expected.edge_features.array()).all());
  }
  CHECK(actual.schema == expected.schema);
  CHECK(actual.edge_types == expected.edge_types);
}

/// A small dataset (planted, unless given) written to <temp>/ds, which each test case then
/// breaks in one place.
struct npy_fixture {
  temp_dir dir{"npy"};
  graph_dataset data;
  fs::path root() const { return dir.path / "ds"; }
  fs::path path(const std::string& name) const { return root() / name; }
  npy_fixture() : npy_fixture(load_dataset("planted:nodes=50,classes=3,degree=4,features=4,seed=5")) {}
  explicit npy_fixture(graph_dataset written) : data(std::move(written)) {
    write_npy_dataset(root(), data);
  }
  std::string error() const {
    return io_error_of([&] { read_npy_dataset(root()); });
  }
  /// Replaces the file `name` by its bytes with `from` (first occurrence) replaced by `to`.
  void edit(const std::string& name, const std::string& from, const std::string& to) const {
    std::string bytes = read_binary(path(name));
    const auto at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    io::write_text_file(path(name), bytes.replace(at, from.size(), to));
  }
  /// Seals meta.json again after an edit: a dataset written so, not edited afterwards.
  void reseal() const {
    auto meta = nlohmann::json::parse(read_binary(path("meta.json")));
    seal_metadata(meta);
    io::write_text_file(path("meta.json"), meta.dump(2));
  }
};

}  // namespace

TEST_CASE("npy dataset: a planted graph round trips exactly (read_npy_dataset, load_dataset)") {
  temp_dir dir("npy");
  const graph_dataset data = load_dataset("planted:nodes=500,classes=4,degree=6,features=7,seed=3");
  REQUIRE(!data.labels.empty());
  REQUIRE(!data.split.empty());
  const fs::path out = dir.path / "planted";
  write_npy_dataset(out, data);
  check_same_dataset(data, read_npy_dataset(out));
  check_same_dataset(data, load_dataset(out.string()));

  // Exactly the bytes numpy.save writes: version 1.0, the dict as numpy prints it, data at 64.
  const std::string indptr = read_binary(out / "indptr.npy");
  CHECK(indptr.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const std::string dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (501,), }";
  CHECK(indptr.substr(10, dict.size() + 1) == dict + " ");
  CHECK(indptr[127] == '\n');
  const std::pair<std::string, npy_dtype> files[] = {{"indptr.npy", npy_dtype::int64},
                                                     {"indices.npy", npy_dtype::int64},
                                                     {"features.npy", npy_dtype::float32},
                                                     {"labels.npy", npy_dtype::int32},
                                                     {"split.npy", npy_dtype::uint8}};
  for (const auto& [name, dtype] : files) {
    const npy_header h = read_npy_header(out / name);
    CHECK(h.dtype == dtype);
    CHECK(h.data_offset % 64 == 0);
  }
  CHECK(read_npy_header(out / "features.npy").shape == std::vector<std::int64_t>{500, 7});

  SUBCASE("a graph without features, labels or split replaces it (stale files removed)") {
    edge_list edges;
    edges.num_nodes = 4;
    edges.push_back(0, 1);
    edges.push_back(2, 3);
    graph_dataset small;
    small.name = "pairs";
    small.graph = build_csr(edges, {.symmetrise = true});
    small.features.resize(4, 0);
    write_npy_dataset(out, small);
    CHECK_FALSE(fs::exists(out / "labels.npy"));
    CHECK_FALSE(fs::exists(out / "split.npy"));
    check_same_dataset(small, read_npy_dataset(out));
  }
  SUBCASE("checksums: a value changed in range is caught; without them numpy's layout reads") {
    {
      std::fstream f(out / "features.npy", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(read_npy_header(out / "features.npy").data_offset));
      const float changed = 0.25f;
      f.write(reinterpret_cast<const char*>(&changed), sizeof changed);
    }
    check_contains(io_error_of([&] { read_npy_dataset(out); }),
                   {"features.npy", "checksum mismatch"});
    CHECK_NOTHROW(read_npy_dataset(out, {.verify_checksums = false}));
    nlohmann::json meta;
    std::ifstream(out / "meta.json") >> meta;
    auto edited = meta;
    edited["num_classes"] = 8;  // edited without the seal: named
    std::ofstream(out / "meta.json") << edited.dump();
    check_contains(io_error_of([&] { read_npy_dataset(out); }),
                   {"meta.json was changed after sar wrote it"});
    meta.erase("manifest");  // numpy's layout: version 1, no manifest, no seal
    meta.erase(metadata_seal_key);
    meta["version"] = 1;
    std::ofstream(out / "meta.json") << meta.dump();
    CHECK_NOTHROW(read_npy_dataset(out));
  }
  SUBCASE("a non-empty directory that is not a dataset is refused") {
    const fs::path other = dir.path / "other";
    fs::create_directories(other);
    io::write_text_file(other / "notes.txt", "mine\n");
    check_contains(io_error_of([&] { write_npy_dataset(other, data); }),
                   {"sar::write_npy_dataset: ", other.string(), "so it is refused"});
    CHECK(fs::exists(other / "notes.txt"));
  }
}

TEST_CASE("replace_directory: creates, replaces only exactly what its manifest lists, and keeps "
          "the old content through any failure") {
  temp_dir dir("safe");
  const directory_kind kind{"test-kind", "meta.json"};
  // A directory of the kind: a payload file and a nested one, listed by the writer.
  const auto write_kind = [](directory_writer& out, const std::string& payload) {
    out.add_file("payload.txt", [&](const fs::path& file) {
      io::write_text_file(file, payload);
      return crc32_update(0, payload.data(), payload.size());
    });
    out.make_directory("sub");
    out.add_file("sub/nested.txt", [&](const fs::path& file) {
      io::write_text_file(file, "nested");
      return 0u;
    });
    out.write_metadata(nlohmann::json{{"format", "test-kind"}});
  };
  const auto siblings = [&] {
    int count = 0;
    for (const auto& entry : fs::directory_iterator(dir.path))
      count += entry.path().filename().string().find(".sar-") != std::string::npos;
    return count;
  };
  const fs::path out = dir.path / "out";
  replace_directory(out, kind, [&](directory_writer& d) { write_kind(d, "first"); }, "test");
  CHECK(read_binary(out / "payload.txt") == "first");
  const auto meta = nlohmann::json::parse(read_binary(out / "meta.json"));
  CHECK(meta["manifest"]["files"]["payload.txt"]["bytes"] == 5);
  CHECK(meta["manifest"]["files"].contains("sub/nested.txt"));
  CHECK(meta["manifest"]["directories"] == nlohmann::json::array({"sub"}));
  CHECK_NOTHROW(check_metadata_seal(meta, "meta.json", "test"));
  CHECK_FALSE(fs::exists(out / ".sar-journal"));
  replace_directory(out.string() + "/", kind,
                    [&](directory_writer& d) { write_kind(d, "second"); }, "test");
  CHECK(read_binary(out / "payload.txt") == "second");
  CHECK(siblings() == 0);

  SUBCASE("a failing write leaves the previous content and no temporary directory") {
    CHECK_THROWS_AS(replace_directory(out, kind, [&](directory_writer& d) {
      write_kind(d, "third");
      throw io_error("disk full");
    }, "test"), io_error);
    CHECK(read_binary(out / "payload.txt") == "second");
    CHECK(siblings() == 0);
  }
  SUBCASE("a writer that creates a file without listing it is an error, and nothing moves") {
    CHECK_THROWS_AS(replace_directory(out, kind, [&](directory_writer& d) {
      io::write_text_file(d.path() / "unlisted.txt", "x");
      d.write_metadata(nlohmann::json{{"format", "test-kind"}});
    }, "test"), error);
    CHECK(read_binary(out / "payload.txt") == "second");
    CHECK(siblings() == 0);
  }
  SUBCASE("a directory of another kind, or without meta.json, is refused and untouched") {
    const fs::path store = dir.path / "store";
    fs::create_directories(store / "part-0");
    io::write_text_file(store / "meta.json", "{\"format\": \"someone-else\"}\n");
    check_contains(io_error_of([&] {
      replace_directory(store, kind, [&](directory_writer& d) { write_kind(d, "x"); }, "test");
    }), {"test: ", store.string(), "someone-else", "refused"});
    fs::remove(store / "meta.json");
    check_contains(io_error_of([&] { check_replaceable(store, kind, "test"); }),
                   {"meta.json is missing"});
    CHECK(fs::exists(store / "part-0"));
    const fs::path file = dir.path / "file";
    io::write_text_file(file, "mine");
    check_contains(io_error_of([&] { check_replaceable(file, kind, "test"); }),
                   {"not a directory"});
    CHECK(read_binary(file) == "mine");
  }
  SUBCASE("anything the manifest does not list, at any depth, makes it refused and untouched") {
    const auto refused = [&](const std::string& expected) {
      check_contains(io_error_of([&] {
        replace_directory(out, kind, [&](directory_writer& d) { write_kind(d, "x"); }, "test");
      }), {expected, "refused"});
      CHECK(read_binary(out / "payload.txt") == "second");
    };
    SUBCASE("a file beside the payload") {
      io::write_text_file(out / "notes.txt", "mine");
      refused("notes.txt, which sar did not write");
      CHECK(read_binary(out / "notes.txt") == "mine");
    }
    SUBCASE("a file inside a listed directory") {
      io::write_text_file(out / "sub" / "notes.txt", "mine");
      refused("sub/notes.txt, which sar did not write");
      CHECK(read_binary(out / "sub" / "notes.txt") == "mine");
    }
    SUBCASE("a directory whose name looks like ours") {
      fs::create_directories(out / "sub2");
      refused("sub2/, which sar did not write");
    }
    SUBCASE("a listed file whose size changed") {
      io::write_text_file(out / "payload.txt", "second, edited by a user");
      check_contains(io_error_of([&] { check_replaceable(out, kind, "test"); }),
                     {"payload.txt, which has 24 bytes where sar wrote 6"});
    }
    SUBCASE("a symbolic link in place of a listed file") {
      fs::remove(out / "sub" / "nested.txt");
      fs::create_symlink(out / "payload.txt", out / "sub" / "nested.txt");
      refused("sub/nested.txt, a symbolic link");
    }
    SUBCASE("an edited metadata file") {
      auto edited = nlohmann::json::parse(read_binary(out / "meta.json"));
      edited["manifest"]["files"]["notes.txt"] = {{"bytes", 4}, {"crc32", 1}};
      io::write_text_file(out / "meta.json", edited.dump());
      io::write_text_file(out / "notes.txt", "mine");
      check_contains(io_error_of([&] { check_replaceable(out, kind, "test"); }),
                     {"was changed after sar wrote it"});
      CHECK(read_binary(out / "notes.txt") == "mine");
    }
  }
  SUBCASE("a symbolic link is followed: what it points to is replaced, the link stays") {
    const fs::path link = dir.path / "link";
    fs::create_directory_symlink(out, link);
    replace_directory(link, kind, [&](directory_writer& d) { write_kind(d, "via link"); },
                      "test");
    CHECK(fs::is_symlink(link));
    CHECK(read_binary(out / "payload.txt") == "via link");
  }
  const std::string host = detail::host_name();
  const std::string dead = "-2147483646-0123456789abcdef";  // no such process
  SUBCASE("the previous content of a process killed between two renames is moved back") {
    const fs::path previous = out.string() + ".sar-previous-" + host + dead;
    fs::rename(out, previous);
    CHECK_THROWS_AS(replace_directory(out, kind, [](directory_writer&) {
      throw io_error("the new write fails");
    }, "test"), io_error);
    CHECK(read_binary(out / "payload.txt") == "second");  // recovered before the write
    CHECK_FALSE(fs::exists(previous));
  }
  SUBCASE("a dead process's journaled partial directory is removed; anything unproven is kept") {
    const fs::path journaled = out.string() + ".sar-partial-" + host + dead;
    fs::create_directories(journaled / "sub");
    io::write_text_file(journaled / ".sar-journal",
                        "{\"token\": \"0123456789abcdef\"}\nd sub\nf sub/a.bin\n");
    io::write_text_file(journaled / "sub" / "a.bin", "half");
    // The same name, but a file the journal does not name: a user's.
    const fs::path unproven = out.string() + ".sar-partial-" + host + "-2147483645-" +
                              "fedcba9876543210";
    fs::create_directories(unproven);
    io::write_text_file(unproven / ".sar-journal", "{\"token\": \"fedcba9876543210\"}\n");
    io::write_text_file(unproven / "mine.txt", "mine");
    // A live process's (this one's parent), another host's, and the old pid-only names.
    const fs::path live = out.string() + ".sar-partial-" + host + "-" +
                          std::to_string(::getppid()) + "-00000000000000aa";
    const fs::path elsewhere = out.string() + ".sar-partial-other-host" + dead;
    const fs::path old_style = out.string() + ".sar-partial-2147483646";
    for (const auto& d : {live, elsewhere, old_style}) fs::create_directories(d);
    replace_directory(out, kind, [&](directory_writer& d) { write_kind(d, "fourth"); }, "test");
    CHECK_FALSE(fs::exists(journaled));
    CHECK(read_binary(unproven / "mine.txt") == "mine");
    for (const auto& d : {live, elsewhere, old_style}) CHECK(fs::exists(d));
  }
  SUBCASE("a killed process not yet reaped (a zombie) has ended: its partial directory goes") {
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    siginfo_t info{};
    REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
    const fs::path zombies = out.string() + ".sar-partial-" + host + "-" +
                             std::to_string(child) + "-0123456789abcdef";
    fs::create_directories(zombies);
    io::write_text_file(zombies / ".sar-journal", "{\"token\": \"0123456789abcdef\"}\n");
    CHECK(::kill(child, 0) == 0);  // the pid still exists
    replace_directory(out, kind, [&](directory_writer& d) { write_kind(d, "fifth"); }, "test");
    CHECK_FALSE(fs::exists(zombies));
    ::waitpid(child, nullptr, 0);
  }
}

TEST_CASE("output_file: a regular file is replaced whole, a link followed, a device written in "
          "place, a directory refused") {
  temp_dir dir("output-file");
  const fs::path file = dir.path / "metrics.json";
  io::write_text_file(file, "previous");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  write_output_file(file, "new", "test");
  CHECK(read_binary(file) == "new");
  CHECK(fs::status(file).permissions() ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  {
    output_file grows(file, "test");
    grows.write("a");
    grows.write("ab");
    CHECK(read_binary(file) == "ab");  // replaced whole each time
  }
  SUBCASE("a chain of symbolic links: the final target is written, the links stay") {
    const fs::path link = dir.path / "link", link2 = dir.path / "link2";
    fs::create_symlink("metrics.json", link);
    fs::create_symlink(link, link2);
    write_output_file(link2, "through links", "test");
    CHECK(fs::is_symlink(link2));
    CHECK(fs::is_symlink(link));
    CHECK(read_binary(file) == "through links");
  }
  SUBCASE("a device is written in place and stays a device") {
    output_file null("/dev/null", "test");
    null.write("x");
    null.write("xy");
    CHECK(fs::is_character_file("/dev/null"));
  }
  SUBCASE("a FIFO receives each part once") {
    const fs::path fifo = dir.path / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::string received;
    std::thread reader([&] { received = read_binary(fifo); });
    {
      output_file out(fifo, "test");
      out.write("row 1\n");
      out.write("row 1\nrow 2\n");
    }
    reader.join();
    CHECK(received == "row 1\nrow 2\n");
    CHECK(fs::is_fifo(fifo));
  }
  SUBCASE("a directory, and a path in a missing directory, are refused") {
    check_contains(io_error_of([&] { output_file(dir.path, "test"); }), {"is a directory"});
    check_contains(io_error_of([&] { output_file(dir.path / "no" / "file", "test"); }),
                   {"does not exist"});
  }
  SUBCASE("a failed write keeps the previous content and leaves no sibling") {
    output_file out(file, "test");
    fs::remove(file);
    fs::create_directory(file);  // now a directory: renaming a file over it fails
    CHECK_THROWS_AS(out.write("lost"), io_error);
    CHECK(fs::is_directory(file));
    int siblings = 0;
    for (const auto& entry : fs::directory_iterator(dir.path))
      siblings += entry.path().filename().string().find(".sar-") != std::string::npos;
    CHECK(siblings == 0);
  }
}

TEST_CASE("npy files: every dtype and shape round trips; numpy's other header layouts are read") {
  temp_dir dir("npy");
  const std::vector<std::int64_t> wide = {-5, 0, std::int64_t{1} << 40};
  write_npy(dir.path / "wide.npy", npy_dtype::int64, std::vector<std::int64_t>{3}, wide.data());
  const float grid[] = {0.5f, -1.0f, 2.0f, 3.25f, 0.0f, -0.0f};
  write_npy(dir.path / "grid.npy", npy_dtype::float32, std::vector<std::int64_t>{2, 3}, grid);
  write_npy(dir.path / "empty.npy", npy_dtype::float32, std::vector<std::int64_t>{5, 0}, nullptr);

  npy_header h = read_npy_header(dir.path / "wide.npy");
  std::vector<std::int64_t> wide_back(3);
  read_npy_data(dir.path / "wide.npy", h, wide_back.data());
  CHECK(wide_back == wide);
  h = read_npy_header(dir.path / "grid.npy");
  CHECK(h.shape == std::vector<std::int64_t>{2, 3});
  float grid_back[6] = {};
  read_npy_data(dir.path / "grid.npy", h, grid_back);
  CHECK(std::equal(grid, grid + 6, grid_back));
  h = read_npy_header(dir.path / "empty.npy");
  CHECK(h.shape == std::vector<std::int64_t>{5, 0});
  CHECK(h.data_bytes() == 0);
  CHECK_THROWS_AS(write_npy(dir.path / "tesseract.npy", npy_dtype::uint8,
                            std::vector<std::int64_t>{1, 2, 2, 2}, grid),
                  sar::invalid_argument);
  // [T, N, F] fields (trajectory datasets): written; read where a reader asks for 3
  // dimensions, refused by name elsewhere.
  write_npy(dir.path / "cube.npy", npy_dtype::uint8, std::vector<std::int64_t>{2, 2, 2}, grid);
  CHECK(read_npy_header(dir.path / "cube.npy", 3).shape == std::vector<std::int64_t>{2, 2, 2});
  CHECK_THROWS_WITH_AS(read_npy_header(dir.path / "cube.npy"),
                       doctest::Contains("has 3 dimensions; sar reads 1-D and 2-D arrays only"),
                       io_error);

  const std::int32_t ints[] = {7, -1, 2};
  const std::string payload(reinterpret_cast<const char*>(ints), sizeof ints);
  for (int major : {1, 2, 3}) {
    const fs::path file = dir.path / ("v" + std::to_string(major) + ".npy");
    write_raw_npy(file, "{\"descr\":\"<i4\",\"shape\":(3L,),\"fortran_order\":False}", payload,
                  major, 16);
    h = read_npy_header(file);
    CHECK(h.dtype == npy_dtype::int32);
    CHECK(h.shape == std::vector<std::int64_t>{3});
    std::int32_t back[3] = {};
    read_npy_data(file, h, back);
    CHECK(std::equal(ints, ints + 3, back));
  }
}

TEST_CASE("npy files: unsupported or malformed headers name the file and the field") {
  temp_dir dir("npy");
  const fs::path file = dir.path / "bad.npy";
  const auto error_for = [&](const std::string& dict, const std::string& payload = "") {
    write_raw_npy(file, dict, payload);
    return io_error_of([&] { read_npy_header(file); });
  };
  check_contains(error_for("{'descr': '>f4', 'fortran_order': False, 'shape': (0,), }"),
                 {file.string(), "'descr'", "'>f4'"});
  check_contains(error_for("{'descr': '<c8', 'fortran_order': False, 'shape': (0,), }"),
                 {file.string(), "'descr'", "'<c8'"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': True, 'shape': (0, 0), }"),
                 {file.string(), "'fortran_order'"});
  check_contains(
      error_for("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1), }", "abcd"),
      {file.string(), "'shape'", "(1, 1, 1)", "3 dimensions"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "abcd"),
                 {file.string(), "'shape'", "0 dimensions"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': False, }"),
                 {file.string(), "missing header field 'shape'"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"),
                 {file.string(), "unexpected key 'x'"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"),
                 {file.string(), "'shape'"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "abcd"),
                 {file.string(), "truncated", "expected 136"});
  check_contains(error_for("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "abcdef"),
                 {file.string(), "2 unexpected bytes after the data"});

  io::write_text_file(file, "x,y\n1,2\n");
  check_contains(io_error_of([&] { read_npy_header(file); }), {file.string(), "not a .npy file"});
  io::write_text_file(file, std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 17));
  check_contains(io_error_of([&] { read_npy_header(file); }), {file.string(), "truncated header"});
  io::write_text_file(file, std::string("\x93NUMPY\x04\x00\x00\x00", 10));
  check_contains(io_error_of([&] { read_npy_header(file); }), {file.string(), "version 4.0"});
}

TEST_CASE("npy dataset: broken files give sar::io_error naming the file") {
  npy_fixture fx;
  const std::int64_t n = fx.data.num_nodes(), edges = fx.data.graph.num_edges();
  CHECK_NOTHROW(read_npy_dataset(fx.root()));

  SUBCASE("truncated features.npy") {
    const std::string bytes = read_binary(fx.path("features.npy"));
    io::write_text_file(fx.path("features.npy"), bytes.substr(0, bytes.size() - 5));
    check_contains(fx.error(), {fx.path("features.npy").string(), "truncated"});
    check_contains(io_error_of([&] { load_dataset(fx.root().string()); }),
                   {fx.path("features.npy").string(), "truncated"});
  }
  SUBCASE("wrong dtype: labels.npy holds int64") {
    const std::vector<std::int64_t> labels(n, 0);
    write_npy(fx.path("labels.npy"), npy_dtype::int64, std::vector{n}, labels.data());
    check_contains(fx.error(), {"sar::read_npy_dataset: ", fx.path("labels.npy").string(),
                                "holds int64 ('<i8'), expected int32 ('<i4')"});
  }
  SUBCASE("big-endian features.npy") {
    fx.edit("features.npy", "'<f4'", "'>f4'");
    check_contains(fx.error(), {fx.path("features.npy").string(), "'descr'", "'>f4'"});
  }
  SUBCASE("Fortran-order features.npy") {
    fx.edit("features.npy", "False", "True ");
    check_contains(fx.error(), {fx.path("features.npy").string(), "'fortran_order'"});
  }
  SUBCASE("a shape that disagrees with meta.json") {
    const std::vector<float> wider(static_cast<std::size_t>(n) * 5, 1.0f);
    write_npy(fx.path("features.npy"), npy_dtype::float32, std::vector<std::int64_t>{n, 5},
              wider.data());
    check_contains(fx.error(), {fx.path("features.npy").string(), "(50, 5)", "meta.json",
                                "feature_dim = 4", "(50, 4)"});
  }
  SUBCASE("missing features.npy") {
    fs::remove(fx.path("features.npy"));
    check_contains(fx.error(), {"missing file", fx.path("features.npy").string()});
  }
  SUBCASE("indptr.npy not monotone") {
    std::vector<edge_t> offsets = fx.data.graph.offsets;
    std::swap(offsets[10], offsets[11]);
    REQUIRE(offsets[10] != offsets[11]);
    write_npy(fx.path("indptr.npy"), npy_dtype::int64, std::vector{n + 1}, offsets.data());
    check_contains(fx.error(), {fx.path("indptr.npy").string(), fx.path("indices.npy").string(),
                                "offsets decrease at row 10"});
  }
  SUBCASE("indices.npy: a source out of range, an unsorted row") {
    std::vector<node_t> columns = fx.data.graph.columns;
    columns[3] = n;
    write_npy(fx.path("indices.npy"), npy_dtype::int64, std::vector{edges}, columns.data());
    check_contains(fx.error(), {fx.path("indices.npy").string(), "column 50 at edge 3 outside"});
    columns = fx.data.graph.columns;
    node_t row = 0;
    while (fx.data.graph.degree(row) < 2) ++row;
    std::swap(columns[fx.data.graph.offsets[row]], columns[fx.data.graph.offsets[row] + 1]);
    write_npy(fx.path("indices.npy"), npy_dtype::int64, std::vector{edges}, columns.data());
    check_contains(fx.error(), {fx.path("indices.npy").string(),
                                message("row ", row, " are not sorted")});
  }
  SUBCASE("labels and split codes out of range") {
    std::vector<std::int32_t> labels = fx.data.labels;
    labels[7] = fx.data.num_classes;
    write_npy(fx.path("labels.npy"), npy_dtype::int32, std::vector{n}, labels.data());
    check_contains(fx.error(), {fx.path("labels.npy").string(), "label 3 of node 7"});
    write_npy(fx.path("labels.npy"), npy_dtype::int32, std::vector{n}, fx.data.labels.data());
    std::vector<std::uint8_t> split(n, 1);
    split[9] = 4;
    write_npy(fx.path("split.npy"), npy_dtype::uint8, std::vector{n}, split.data());
    check_contains(fx.error(), {fx.path("split.npy").string(), "split code 4 of node 9"});
  }
  SUBCASE("meta.json: malformed, a missing field, another format") {
    const std::string meta = fx.path("meta.json").string();
    io::write_text_file(fx.path("meta.json"), "{\"format\": ");
    check_contains(fx.error(), {meta, "not a JSON object"});
    io::write_text_file(fx.path("meta.json"),
                        "{\"format\": \"sar-npy-dataset\", \"version\": 1, \"name\": \"x\"}");
    check_contains(fx.error(), {meta, "\"num_nodes\""});
    io::write_text_file(fx.path("meta.json"), "{\"format\": \"sar-partition-store\"}");
    check_contains(io_error_of([&] { load_dataset(fx.root().string()); }),
                   {meta, "format 'sar-partition-store', expected 'sar-npy-dataset'"});
    fs::remove(fx.path("meta.json"));
    check_contains(fx.error(), {"missing file", meta});
  }
}

TEST_CASE("npy dataset: a mostly empty class range is refused unless num_classes is stated") {
  npy_fixture fx;  // labels 0-2, written with num_classes 1000 (not an edit: sealed)
  fx.edit("meta.json", "\"num_classes\": 3", "\"num_classes\": 1000");
  fx.reseal();
  check_contains(fx.error(), {fx.path("meta.json").string(), "declares num_classes = 1000",
                              "only 3 of them have a node in labels.npy",
                              "--num-classes 1000"});
  CHECK(read_npy_dataset(fx.root(), {.sizes = {.num_classes = 1000}}).num_classes == 1000);
  CHECK(read_npy_dataset(fx.root(), {.sizes = {.num_classes = 3}}).num_classes == 3);
  const auto first_two = std::find(fx.data.labels.begin(), fx.data.labels.end(), 2);
  check_contains(io_error_of([&] { read_npy_dataset(fx.root(), {.sizes = {.num_classes = 2}}); }),
                 {fx.path("labels.npy").string(), "label 2 of node ",
                  std::to_string(first_two - fx.data.labels.begin()), "outside [-1, 2)",
                  "as stated"});
  check_contains(io_error_of([&] { read_npy_dataset(fx.root(), {.sizes = {.num_nodes = 7}}); }),
                 {fx.path("meta.json").string(), "declares num_nodes = 50, but num_nodes is 7"});
  fs::remove(fx.path("labels.npy"));
  check_contains(io_error_of([&] { read_npy_dataset(fx.root(), {.sizes = {.num_classes = 3}}); }),
                 {"num_classes = 3 is stated, but ", "has no labels.npy"});
}

TEST_CASE("load_dataset: stated sizes reach the readers; generators take theirs from the spec") {
  temp_dir dir("load-sizes");
  const fs::path file = dir.path / "stray.txt";
  io::write_text_file(file, "0 1\n1 2\n2 999\n");
  check_contains(io_error_of([&] { load_dataset(file.string()); }), {"--num-nodes 1000"});
  CHECK(load_dataset(file.string(), {.num_nodes = 1000}).num_nodes() == 1000);
  CHECK_THROWS_AS(load_dataset(file.string(), {.num_classes = 3}), sar::invalid_argument);
  CHECK_THROWS_AS(load_dataset("planted:nodes=100", {.num_nodes = 100}), sar::invalid_argument);
  CHECK_THROWS_AS(load_dataset("rmat:scale=5", {.num_classes = 4}), sar::invalid_argument);
  // Integers may be written as integral floats; other floats and overflows are refused.
  CHECK(load_dataset("planted:nodes=1e3,features=2").num_nodes() == 1000);
  CHECK_THROWS_AS(load_dataset("planted:nodes=1.5"), sar::invalid_argument);
  CHECK_THROWS_AS(load_dataset("planted:nodes=1e30"), sar::invalid_argument);
  CHECK_THROWS_AS(load_dataset("rmat:scale=100"), sar::invalid_argument);  // no shift overflow
  // Sizes beyond the memory available are refused before anything is allocated.
  for (const char* spec : {"planted:nodes=1e14", "planted:nodes=1000,features=2000000000",
                           "rmat:scale=40", "rmat:scale=4,edges=1e15"}) {
    try {
      load_dataset(spec);
      FAIL("expected a refusal of " << spec);
    } catch (const sar::invalid_argument& e) {
      check_contains(e.what(), {"more than the ", "of memory available"});
    }
  }
}

TEST_CASE("check_memory and format_bytes") {
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(3.0 * (1 << 30)) == "3 GiB");
  CHECK(format_bytes(1000.0 * (1 << 20)) == "1000 MiB");  // not "1e+03 MiB"
  CHECK(format_bytes(123.4 * (1 << 20)) == "123 MiB");
  CHECK(available_memory_bytes() > 0);
  CHECK(available_memory_bytes() <= physical_memory_bytes());
  CHECK_NOTHROW(check_memory<sar::invalid_argument>("here", "a little", 1024));
  try {
    check_memory<sar::invalid_argument>("here", "the thing", 1e15);
    FAIL("expected sar::invalid_argument");
  } catch (const sar::invalid_argument& e) {
    check_contains(e.what(), {"here: the thing needs 909 TiB, more than the ",
                              "of memory available"});
  }
}

TEST_CASE("read_ogb_raw: regression targets from node-target, multi-label targets from node-label") {
  ogb_fixture f;
  f.files["raw/node-target.csv.gz"] = "1.5,-2\n0,3e2\n-0.25,1\n7,8\n";
  f.write();
  // Classification reads node-label, never node-target's floats.
  const graph_dataset classify = read_ogb_raw(f.root());
  CHECK(classify.task == task_kind::classify);
  CHECK(classify.targets.size() == 0);
  CHECK(classify.labels == std::vector<std::int32_t>{0, 1, -1, 2});

  const graph_dataset regress = read_ogb_raw(f.root(), {.sizes = {.task = task_kind::regress}});
  CHECK(regress.task == task_kind::regress);
  CHECK(regress.labels.empty());
  CHECK(regress.num_classes == 0);
  REQUIRE(regress.targets.rows() == 4);
  REQUIRE(regress.targets.cols() == 2);
  CHECK(regress.num_outputs() == 2);
  CHECK(regress.targets(0, 0) == 1.5f);
  CHECK(regress.targets(1, 1) == 300.0f);
  CHECK(regress.targets(2, 0) == -0.25f);
  CHECK(regress.targets(3, 1) == 8.0f);
  regress.validate();
  // The same through load_dataset, and a share of the rows.
  const graph_dataset loaded = load_dataset(f.root().string(), {.task = task_kind::regress});
  CHECK((loaded.targets.array() == regress.targets.array()).all());
  const ogb_raw_share share =
      read_ogb_raw_share(f.root(), {.sizes = {.task = task_kind::regress}}, {.first = 1, .last = 3});
  REQUIRE(share.rows.targets.rows() == 2);
  CHECK(share.rows.targets(0, 1) == 300.0f);
  CHECK(share.rows.targets(1, 0) == -0.25f);

  f.files["raw/node-label.csv.gz"] = "1,0,1\n0,0,0\n1,1,1\n0,1,0\n";
  f.write();
  const graph_dataset multi = read_ogb_raw(f.root(), {.sizes = {.task = task_kind::multilabel}});
  REQUIRE(multi.targets.rows() == 4);
  REQUIRE(multi.targets.cols() == 3);
  CHECK(multi.targets(0, 2) == 1.0f);
  CHECK(multi.targets(3, 1) == 1.0f);
  CHECK(multi.targets.sum() == 6.0f);
  // A classification reader refuses several labels per node and names the task that reads them.
  check_contains(f.error(), {"node-label.csv.gz line 1", "--task multilabel"});
}

TEST_CASE("read_ogb_raw: bad targets name the file, line and column") {
  const ogb_options regress{.sizes = {.task = task_kind::regress}};
  const ogb_options multi{.sizes = {.task = task_kind::multilabel}};
  {
    ogb_fixture f;
    check_contains(f.error(regress), {"node-target", "the targets of a regress task"});
  }
  {
    ogb_fixture f;
    f.files["raw/node-target.csv.gz"] = "1\n2\nnan\n4\n";
    check_contains(f.error(regress), {"node-target.csv.gz line 3", "column 1", "not a finite"});
  }
  {
    ogb_fixture f;
    f.files["raw/node-target.csv.gz"] = "1,2\n2,inf\n3,3\n4,4\n";
    check_contains(f.error(regress), {"node-target.csv.gz line 2", "column 2", "not a finite"});
  }
  {
    ogb_fixture f;
    f.files["raw/node-target.csv.gz"] = "1,2\n2\n3,3\n4,4\n";
    check_contains(f.error(regress), {"node-target.csv.gz line 2", "expected 2"});
  }
  {
    ogb_fixture f;
    f.files["raw/node-target.csv.gz"] = "1\n2\n3\n";
    check_contains(f.error(regress), {"node-target.csv.gz", "file ends after 3 target rows"});
  }
  {
    ogb_fixture f;
    f.files["raw/node-label.csv.gz"] = "1,0\n0,2\n1,1\n0,0\n";
    check_contains(f.error(multi), {"node-label.csv.gz line 2", "column 2", "not 0 or 1"});
  }
  {
    ogb_fixture f;
    f.files["raw/node-target.csv.gz"] = "1\n2\n3\n4\n";
    f.write();
    check_contains(io_error_of([&] {
                     read_ogb_raw(f.root(), {.sizes = {.num_classes = 3, .task = task_kind::regress}});
                   }),
                   {"num_classes = 3 is stated for a regress task"});
  }
}

TEST_CASE("npy dataset: regression and multi-label targets round trip; a stated task must match") {
  temp_dir dir("npy-targets");
  graph_dataset data = make_planted_partition({.num_nodes = 60, .num_classes = 3, .feature_dim = 4});
  data.task = task_kind::regress;
  data.targets.resize(data.num_nodes(), 2);
  for (node_t i = 0; i < data.num_nodes(); ++i)
    data.targets.row(i) << static_cast<float>(data.labels[i]) * 0.5f, static_cast<float>(i) - 7.25f;
  data.labels.clear();
  data.num_classes = 0;
  const fs::path out = dir.path / "regress";
  write_npy_dataset(out, data);
  const graph_dataset back = read_npy_dataset(out);
  CHECK(back.task == task_kind::regress);
  CHECK(back.labels.empty());
  REQUIRE(back.targets.rows() == 60);
  REQUIRE(back.targets.cols() == 2);
  CHECK((back.targets.array() == data.targets.array()).all());
  CHECK(fs::exists(out / "targets.npy"));
  CHECK_FALSE(fs::exists(out / "labels.npy"));
  // The dataset declares its task: a stated one must agree.
  CHECK(load_dataset(out.string(), {.task = task_kind::regress}).targets.cols() == 2);
  check_contains(io_error_of([&] { read_npy_dataset(out, {.sizes = {.task = task_kind::classify}}); }),
                 {"declares the task regress", "the task classify is stated"});
  // A share reads its rows' targets.
  const npy_dataset_share share = read_npy_dataset_share(
      out, {}, [](node_t) { return std::pair<node_t, node_t>{10, 20}; });
  REQUIRE(share.rows.targets.rows() == 10);
  CHECK(share.rows.targets(3, 1) == data.targets(13, 1));
  // A non-finite target written by numpy (no checksums) is named.
  {
    graph_dataset bad = data;
    bad.targets(5, 1) = NAN;
    const fs::path file = dir.path / "bad";
    write_npy_dataset(dir.path / "good-copy", data);
    fs::copy(dir.path / "good-copy", file, fs::copy_options::recursive);
    const std::int64_t shape[] = {60, 2};
    write_npy(file / "targets.npy", npy_dtype::float32, shape, bad.targets.data());
    check_contains(io_error_of([&] { read_npy_dataset(file, {.verify_checksums = false}); }),
                   {"targets.npy", "of node 5 (column 1)", "not a finite number"});
  }
  // Multi-label.
  graph_dataset multi = data;
  multi.task = task_kind::multilabel;
  multi.targets = (data.targets.array() > 0.0f).cast<float>();
  write_npy_dataset(dir.path / "multi", multi);
  const graph_dataset multi_back = read_npy_dataset(dir.path / "multi");
  CHECK(multi_back.task == task_kind::multilabel);
  CHECK((multi_back.targets.array() == multi.targets.array()).all());
  // validate refuses what the writers would store wrongly.
  multi.targets(0, 0) = 0.5f;
  CHECK_THROWS_AS(write_npy_dataset(dir.path / "multi", multi), invalid_argument);
  graph_dataset both = data;
  both.labels.assign(60, 0);
  CHECK_THROWS_AS(both.validate(), invalid_argument);
}

TEST_CASE("read_ogb_raw: chameleon's regression targets") {
  const char* root = std::getenv("SAR_DATA_DIR");
  REQUIRE(root != nullptr);
  const graph_dataset data =
      read_ogb_raw(fs::path(root) / "chameleon", {.sizes = {.task = task_kind::regress}});
  CHECK(data.num_nodes() == 2277);
  CHECK(data.features.cols() == 3132);
  REQUIRE(data.targets.rows() == 2277);
  REQUIRE(data.targets.cols() == 1);
  CHECK(data.targets.allFinite());
  CHECK(data.count(node_split::train) > 0);
  // Without --task regress it is a dataset without labels, not one of float "classes".
  const graph_dataset plain = read_ogb_raw(fs::path(root) / "chameleon");
  CHECK(plain.labels.empty());
  CHECK(plain.num_classes == 0);
}

// ---------------------------------------------------------------------------------------------
// Heterogeneous graphs: OGB's heterogeneous raw layout (ogbn-mag) and the .npy form with a schema

namespace {

/// A small heterogeneous OGB raw dataset in ogbn-mag's layout: node types author (3 nodes, 2
/// features), institution (2, featureless), paper (4, 3 features, labelled, split); relations
/// author___affiliated_with___institution, author___writes___paper (one edge repeated) and
/// paper___cites___paper (a self-loop); ids local to their types. Dataset ids: authors 0-2,
/// institutions 3-4, papers 5-8. Each test case breaks it in one place.
struct hetero_ogb_fixture : ogb_fixture {
  hetero_ogb_fixture() {
    files = {
        {"raw/num-node-dict.csv.gz", "author,institution,paper\n3,2,4\n"},
        {"raw/triplet-type-list.csv.gz",
         "author,affiliated_with,institution\nauthor,writes,paper\npaper,cites,paper\n"},
        {"raw/nodetype-has-label.csv.gz", "author,institution,paper\nFalse,False,True\n"},
        {relation_file("author___affiliated_with___institution", "edge"), "0,0\n1,1\n2,1\n"},
        {relation_file("author___affiliated_with___institution", "num-edge-list"), "3\n"},
        {relation_file("author___affiliated_with___institution", "edge_reltype"), "0\n0\n0\n"},
        {relation_file("author___writes___paper", "edge"), "0,0\n0,1\n1,1\n2,3\n1,1\n"},
        {relation_file("author___writes___paper", "num-edge-list"), "5\n"},
        {relation_file("paper___cites___paper", "edge"), "0,1\n1,2\n3,3\n"},
        {"raw/node-feat/author/node-feat.csv.gz", "1,2\n3,4\n5,6\n"},
        {"raw/node-feat/paper/node-feat.csv.gz", "0.5,0,1\n1,1,1\n2,2,2\n-3,0,0.25\n"},
        {"raw/node-feat/paper/node_year.csv.gz", "2019\n2018\n2020\n2019\n"},
        {"raw/node-label/paper/node-label.csv.gz", "0\n1\nnan\n2\n"},
        {"split/time/nodetype-has-split.csv.gz", "author,institution,paper\nFalse,False,True\n"},
        {"split/time/paper/train.csv.gz", "0\n1\n"},
        {"split/time/paper/valid.csv.gz", "2\n"},
        {"split/time/paper/test.csv.gz", "3\n"},
    };
  }
  /// The name of the file `stem`.csv.gz of the relation directory `name`.
  static std::string relation_file(const std::string& name, const std::string& stem) {
    return "raw/relations/" + name + "/" + stem + ".csv.gz";
  }
  /// Moves every file of the relation directory `from` to the directory `to`.
  void rename_relation(const std::string& from, const std::string& to) {
    std::map<std::string, std::string> renamed;
    for (auto& [name, content] : files) {
      std::string moved = name;
      if (const auto at = moved.find("/" + from + "/"); at != std::string::npos)
        moved.replace(at + 1, from.size(), to);
      renamed[moved] = content;
    }
    files = std::move(renamed);
  }
};

using typed_edge = std::tuple<node_t, node_t, std::int32_t>;  // source, destination, relation

/// Every stored edge of `d` as (source, destination, relation), sorted.
std::vector<typed_edge> typed_edges(const graph_dataset& d) {
  std::vector<typed_edge> edges;
  for (node_t i = 0; i < d.num_nodes(); ++i)
    for (edge_t e = d.graph.offsets[i]; e < d.graph.offsets[i + 1]; ++e)
      edges.emplace_back(d.graph.columns[e], i, d.edge_types[static_cast<std::size_t>(e)]);
  std::sort(edges.begin(), edges.end());
  return edges;
}

}  // namespace

TEST_CASE("read_ogb_raw hetero: a small ogbn-mag layout is read exactly (types, ids, features, "
          "labels, split)") {
  hetero_ogb_fixture fx;
  fx.write();
  const graph_dataset d = read_ogb_raw(fx.root());
  d.validate();
  CHECK(d.name == "toy");
  CHECK(d.num_nodes() == 9);
  CHECK(d.schema.node_types == std::vector<node_type>{{"author", 3, 2}, {"institution", 2, 0},
                                                      {"paper", 4, 3}});
  // Relations in OGB's order (sorted by source, name, destination), not the files' order.
  CHECK(d.schema.relations == std::vector<relation>{{0, "affiliated_with", 1}, {0, "writes", 2},
                                                    {2, "cites", 2}});
  // Every edge in dataset ids with its relation: directed as written, the repeated
  // (author 1, paper 1) kept once, the self-loop of paper 3 kept.
  CHECK(typed_edges(d) == std::vector<typed_edge>{{0, 3, 0}, {0, 5, 1}, {0, 6, 1}, {1, 4, 0},
                                                  {1, 6, 1}, {2, 4, 0}, {2, 8, 1}, {5, 6, 2},
                                                  {6, 7, 2}, {8, 8, 2}});
  // One feature matrix as wide as the widest type; each type in its first columns.
  matrixf features = matrixf::Zero(9, 3);
  features.topLeftCorner(3, 2) << 1, 2, 3, 4, 5, 6;
  features.bottomRows(4) << 0.5f, 0, 1, 1, 1, 1, 2, 2, 2, -3, 0, 0.25f;
  CHECK((d.features.array() == features.array()).all());
  CHECK(d.labels == std::vector<std::int32_t>{-1, -1, -1, -1, -1, 0, 1, -1, 2});
  CHECK(d.num_classes == 3);
  const auto none = node_split::none;
  CHECK(d.split == std::vector<node_split>{none, none, none, none, none, node_split::train,
                                           node_split::train, node_split::valid,
                                           node_split::test});
  CHECK(d.edge_features.size() == 0);
  check_same_dataset(d, load_dataset(fx.root().string()));
  CHECK(declared_graph_size(fx.root().string()) == std::pair<node_t, edge_t>{9, -1});

  SUBCASE("every relation's num-edge-list declares the edge lines") {
    fx.files[fx.relation_file("paper___cites___paper", "num-edge-list")] = "3\n";
    fx.write();
    CHECK(declared_graph_size(fx.root().string()) == std::pair<node_t, edge_t>{9, 11});
  }
  SUBCASE("edge features follow their edges (a repeat keeps its first row); reverses copy them") {
    fx.files[fx.relation_file("author___affiliated_with___institution", "edge-feat")] =
        "10,0\n11,0\n12,0\n";
    fx.files[fx.relation_file("author___writes___paper", "edge-feat")] =
        "20,1\n21,1\n22,1\n23,1\n24,1\n";
    fx.files[fx.relation_file("paper___cites___paper", "edge-feat")] = "30,2\n31,2\n32,2\n";
    fx.write();
    graph_dataset typed = read_ogb_raw(fx.root());
    typed.validate();
    REQUIRE(typed.edge_features.cols() == 2);
    std::map<typed_edge, float> first_column;
    for (node_t i = 0; i < typed.num_nodes(); ++i)
      for (edge_t e = typed.graph.offsets[i]; e < typed.graph.offsets[i + 1]; ++e) {
        first_column[{typed.graph.columns[e], i, typed.edge_types[e]}] = typed.edge_features(e, 0);
        CHECK(typed.edge_features(e, 1) == static_cast<float>(typed.edge_types[e]));
      }
    CHECK(first_column == std::map<typed_edge, float>{
                              {{0, 3, 0}, 10}, {{1, 4, 0}, 11}, {{2, 4, 0}, 12}, {{0, 5, 1}, 20},
                              {{0, 6, 1}, 21}, {{1, 6, 1}, 22}, {{2, 8, 1}, 23}, {{5, 6, 2}, 30},
                              {{6, 7, 2}, 31}, {{8, 8, 2}, 32}});
    add_reverse_relations(typed);
    typed.validate();
    CHECK(typed.graph.num_edges() == 20);
    CHECK(typed.schema.canonical_name(4) == "paper___rev_writes___author");
  }
  SUBCASE("a stated node count equal to the total, and a stated class count, are accepted") {
    const graph_dataset stated = read_ogb_raw(fx.root(), {.sizes = {.num_nodes = 9, .num_classes = 5}});
    CHECK(stated.num_classes == 5);
  }
  SUBCASE("readers of shares refuse it, naming the layout") {
    check_contains(io_error_of([&] { read_ogb_raw_share(fx.root(), {}, {}); }),
                   {fx.root().string(), "is a heterogeneous dataset (raw/num-node-dict)"});
  }
}

TEST_CASE("read_ogb_raw hetero: malformed inputs name the file and line") {
  hetero_ogb_fixture fx;
  const std::string writes = fx.relation_file("author___writes___paper", "edge");
  const fs::path writes_file = fx.path(writes);
  SUBCASE("a relation naming an unknown node type") {
    fx.rename_relation("author___writes___paper", "author___writes___book");
    check_contains(fx.error(), {fx.path("raw/relations/author___writes___book").string(),
                                "the relation's destination type 'book' is not a node type of",
                                fx.path("raw/num-node-dict.csv.gz").string(),
                                "(author, institution, paper)"});
  }
  SUBCASE("a relation directory not named source___relation___destination") {
    fx.rename_relation("author___writes___paper", "author_writes_paper");
    check_contains(fx.error(), {"author_writes_paper",
                                "a relation directory is named <source>___<relation>___<destination>"});
  }
  SUBCASE("an edge id outside its type's count (source, then destination)") {
    fx.files[writes] = "0,0\n0,1\n1,1\n3,3\n1,1\n";
    check_contains(fx.error(), {"sar::read_ogb_raw: ", writes_file.string(), " line 4: ",
                                "node id outside [0, 3)", "(\"3\")"});
    fx.files[writes] = "0,0\n0,4\n";
    check_contains(fx.error(), {writes_file.string(), " line 2: ", "node id outside [0, 4)"});
  }
  SUBCASE("a malformed edge line") {
    fx.files[fx.relation_file("paper___cites___paper", "edge")] = "0,1\n1\n";
    check_contains(fx.error(), {fx.path(fx.relation_file("paper___cites___paper", "edge")).string(),
                                " line 2: ", "expected 2 comma-separated columns, got 1"});
  }
  SUBCASE("an edge count other than num-edge-list") {
    fx.files[fx.relation_file("author___writes___paper", "num-edge-list")] = "4\n";
    check_contains(fx.error(), {writes_file.string(), " line 5: more edges than the 4 in"});
    fx.files[fx.relation_file("author___writes___paper", "num-edge-list")] = "6\n";
    check_contains(fx.error(), {writes_file.string(), " line 5: file ends after 5 edges, but",
                                "num-edge-list.csv.gz says 6"});
  }
  SUBCASE("a type's feature rows not matching its count") {
    const std::string features = "raw/node-feat/paper/node-feat.csv.gz";
    fx.files[features] = "0.5,0,1\n1,1,1\n2,2,2\n";
    check_contains(fx.error(), {fx.path(features).string(), " line 3: file ends after 3 feature "
                                "rows, but ", "num-node-dict.csv.gz says 4 'paper' nodes"});
    fx.files[features] = "0.5,0,1\n1,1,1\n2,2,2\n3,3,3\n4,4,4\n";
    check_contains(fx.error(), {fx.path(features).string(), " line 5: more feature rows than the "
                                "4 'paper' nodes in"});
    fx.files[features] = "0.5,0,1\n1,1\n2,2,2\n3,3,3\n";
    check_contains(fx.error(), {fx.path(features).string(), " line 2: expected 3 comma-separated "
                                "columns, got 2"});
  }
  SUBCASE("a malformed label, and one at or above a stated class count") {
    const std::string labels = "raw/node-label/paper/node-label.csv.gz";
    fx.files[labels] = "0\n1\nx\n2\n";
    check_contains(fx.error(), {fx.path(labels).string(), " line 3: label is not an integer"});
    fx.files[labels] = "0\n1\n1\n2\n";
    check_contains(fx.error({.sizes = {.num_classes = 2}}),
                   {fx.path(labels).string(), " line 4: label outside [-1, 2)"});
  }
  SUBCASE("malformed num-node-dict") {
    const std::string dict = "raw/num-node-dict.csv.gz";
    fx.files[dict] = "author,institution,paper\n3,2\n";
    check_contains(fx.error(), {fx.path(dict).string(), " line 2: expected 3 comma-separated "
                                "counts (one per node type of line 1), got 2"});
    fx.files[dict] = "author,institution,paper\n3,-2,4\n";
    check_contains(fx.error(), {fx.path(dict).string(), " line 2: the count of node type "
                                "'institution' is not a non-negative integer", "(\"-2\")"});
    fx.files[dict] = "author,paper,paper\n3,2,4\n";
    check_contains(fx.error(), {fx.path(dict).string(), " line 1: node type named twice"});
    fx.files[dict] = "author,institution,paper\n";
    check_contains(fx.error(), {fx.path(dict).string(), "file ends before its second line"});
    fx.files[dict] = "author,institution,paper\n3,2,4\n1,1,1\n";
    check_contains(fx.error(), {fx.path(dict).string(), " line 3: expected two lines"});
  }
  SUBCASE("a per-type directory naming no node type") {
    fx.files["raw/node-feat/book/node-feat.csv.gz"] = "1\n";
    check_contains(fx.error(), {fx.path("raw/node-feat/book").string(),
                                "'book' is not a node type of"});
    fx.files.erase("raw/node-feat/book/node-feat.csv.gz");
    fs::remove_all(fx.path("raw/node-feat/book"));
    fx.files["split/time/book/train.csv.gz"] = "0\n";
    check_contains(fx.error(), {fx.path("split/time/book").string(), "'book' is not a node type"});
  }
  SUBCASE("split files: a missing one, a node in two splits, an id outside the type") {
    fx.files.erase("split/time/paper/test.csv.gz");
    check_contains(fx.error(), {"missing file", fx.path("split/time/paper/test.csv.gz").string()});
    fx.files["split/time/paper/test.csv.gz"] = "1\n";
    check_contains(fx.error(), {fx.path("split/time/paper/test.csv.gz").string(),
                                " line 1: node 1 is already in the train split"});
    fx.files["split/time/paper/test.csv.gz"] = "4\n";
    check_contains(fx.error(), {fx.path("split/time/paper/test.csv.gz").string(),
                                " line 1: node id outside [0, 4)"});
  }
  SUBCASE("edge features in some relations only, or of differing widths") {
    fx.files[fx.relation_file("author___writes___paper", "edge-feat")] = "1\n2\n3\n4\n5\n";
    check_contains(fx.error(), {fx.path(fx.relation_file("author___writes___paper", "edge-feat")).string(),
                                "gives edge features, but", "author___affiliated_with___institution",
                                "has no edge-feat.csv.gz"});
    fx.files[fx.relation_file("author___affiliated_with___institution", "edge-feat")] = "1,1\n2,2\n3,3\n";
    fx.files[fx.relation_file("paper___cites___paper", "edge-feat")] = "1,1\n2,2\n3,3\n";
    check_contains(fx.error(), {fx.path(fx.relation_file("author___writes___paper", "edge-feat")).string(),
                                " has 1 edge features per edge, ", "2: every relation's edge "
                                "features are equally wide"});
  }
  SUBCASE("the triplet list and the relation directories disagree") {
    fx.files["raw/triplet-type-list.csv.gz"] = "author,affiliated_with,institution\nauthor,writes,paper\n";
    check_contains(fx.error(), {fx.path("raw/relations/paper___cites___paper").string(),
                                "is not listed in", "triplet-type-list.csv.gz"});
    fx.files["raw/triplet-type-list.csv.gz"] =
        "author,affiliated_with,institution\nauthor,writes,paper\npaper,cited,paper\n";
    check_contains(fx.error(), {"triplet-type-list.csv.gz line 3: no relation directory"});
  }
  SUBCASE("stated sizes and tasks it cannot have; both layouts at once") {
    check_contains(fx.error({.sizes = {.num_nodes = 10}}),
                   {"num-node-dict.csv.gz declares 9 nodes in all, but num_nodes is 10"});
    check_contains(fx.error({.sizes = {.task = task_kind::regress}}),
                   {"the task regress is stated", "heterogeneous dataset"});
    fx.files["raw/num-node-list.csv.gz"] = "9\n";
    check_contains(fx.error(), {"holds both num-node-list", "num-node-dict"});
  }
  SUBCASE("a featureless type's mostly unused count is refused unless num_nodes states it") {
    fx.files["raw/num-node-dict.csv.gz"] = "author,institution,paper\n3,100,4\n";
    check_contains(fx.error(), {"num-node-dict.csv.gz declares 107 nodes", "the types "
                                "institution have no node-feat or node-label file",
                                "--num-nodes 107"});
    fx.write();
    CHECK(read_ogb_raw(fx.root(), {.sizes = {.num_nodes = 107}}).num_nodes() == 107);
  }
}

namespace {

/// A heterogeneous dataset built in memory: node types a (3 nodes, 2 features), b (2,
/// featureless), c (4, 3 features, labelled, split); relations (a, r1, c), (c, r2, c),
/// (b, r3, a) and their reverses; two edge feature columns.
graph_dataset make_hetero_dataset() {
  graph_dataset d;
  d.name = "hetero";
  d.schema.node_types = {{"a", 3, 2}, {"b", 2, 0}, {"c", 4, 3}};
  d.schema.relations = {{0, "r1", 2}, {2, "r2", 2}, {1, "r3", 0}};
  edge_list edges;  // a: ids 0-2, b: 3-4, c: 5-8
  edges.num_nodes = 9;
  std::vector<std::int32_t> types;
  for (const auto& [source, destination, type] :
       std::vector<typed_edge>{{0, 5, 0}, {1, 5, 0}, {2, 8, 0}, {5, 6, 1}, {6, 7, 1}, {8, 5, 1},
                               {3, 0, 2}, {4, 1, 2}, {4, 2, 2}}) {
    edges.push_back(source, destination);
    types.push_back(type);
  }
  std::vector<edge_t> origins;
  d.graph = build_typed_csr(edges, types, d.edge_types, &origins);
  matrixf per_edge(9, 2);
  for (int k = 0; k < 9; ++k) per_edge.row(k) << static_cast<float>(k), static_cast<float>(-k);
  d.edge_features = take_edge_rows(per_edge, origins);
  d.features = matrixf::Zero(9, 3);
  d.features.topLeftCorner(3, 2) = testing_support::random_matrix<float>(3, 2, 1);
  d.features.bottomRows(4) = testing_support::random_matrix<float>(4, 3, 2);
  d.labels = {-1, -1, -1, -1, -1, 0, 1, 1, -1};
  d.num_classes = 2;
  const auto none = node_split::none;
  d.split = {none, none, none, none, none, node_split::train, node_split::valid,
             node_split::test, node_split::train};
  add_reverse_relations(d);
  d.validate();
  return d;
}

}  // namespace

TEST_CASE("npy dataset hetero: schema and edge types round trip; a share reads its rows' edge "
          "types") {
  const graph_dataset data = make_hetero_dataset();
  REQUIRE(data.graph.num_edges() == 18);
  npy_fixture fx(data);
  check_same_dataset(data, read_npy_dataset(fx.root()));
  check_same_dataset(data, load_dataset(fx.root().string()));
  const npy_header types_header = read_npy_header(fx.path("edge_types.npy"));
  CHECK(types_header.dtype == npy_dtype::int32);
  CHECK(types_header.shape == std::vector<std::int64_t>{18});
  const auto meta = nlohmann::json::parse(read_binary(fx.path("meta.json")));
  CHECK(meta["version"] == 4);
  CHECK(meta["schema"]["node_types"][2] ==
        nlohmann::json{{"name", "c"}, {"count", 4}, {"feature_dim", 3}});
  CHECK(meta["schema"]["relations"][3] ==
        nlohmann::json{{"source", "c"}, {"name", "rev_r1"}, {"destination", "a"}});
  CHECK(meta["manifest"].dump().find("edge_types.npy") != std::string::npos);

  // Rows [2, 6) of a share: their entries' relations and edge features, as in the whole.
  for (const npy_arrays arrays : {npy_arrays::all, npy_arrays::without_features}) {
    const npy_dataset_share share = read_npy_dataset_share(
        fx.root(), {.arrays = arrays}, [](node_t) { return std::pair<node_t, node_t>{2, 6}; });
    const edge_t first = data.graph.offsets[2], last = data.graph.offsets[6];
    CHECK(share.rows.schema == data.schema);
    CHECK(share.rows.graph.columns ==
          std::vector<node_t>(data.graph.columns.begin() + first, data.graph.columns.begin() + last));
    CHECK(share.rows.edge_types == std::vector<std::int32_t>(data.edge_types.begin() + first,
                                                             data.edge_types.begin() + last));
    CHECK((share.rows.edge_features.array() ==
           data.edge_features.middleRows(first, last - first).array()).all());
  }
}

TEST_CASE("npy dataset hetero: a broken edge_types.npy or schema is named") {
  npy_fixture fx(make_hetero_dataset());
  const std::string types_file = fx.path("edge_types.npy").string();
  const auto overwrite_type = [&](edge_t entry, std::int32_t relation) {
    std::fstream f(fx.path("edge_types.npy"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(read_npy_header(fx.path("edge_types.npy")).data_offset +
                                        4 * entry));
    f.write(reinterpret_cast<const char*>(&relation), sizeof relation);
  };
  const auto unchecked_error = [&] {
    return io_error_of([&] { read_npy_dataset(fx.root(), {.verify_checksums = false}); });
  };
  SUBCASE("a relation that does not join the entry's types") {
    // Entry 0 is an edge into node 0 (type a): of relation r3 (b -> a), not r1 (a -> c).
    REQUIRE(fx.data.edge_types[0] == 2);
    overwrite_type(0, 0);
    check_contains(fx.error(), {types_file, "edge 0", "(node 3 of type 'b' -> node 0 of type 'a')",
                                "has relation a___r1___c"});
  }
  SUBCASE("a relation changed to another joining the same types: its checksum") {
    // The edge 5 -> 6 of r2 (c -> c) made one of rev_r2 (c -> c too).
    const auto& g = fx.data.graph;
    edge_t entry = g.offsets[6];
    while (g.columns[entry] != 5 || fx.data.edge_types[entry] != 1) ++entry;
    overwrite_type(entry, 4);
    check_contains(fx.error(), {types_file, "checksum mismatch"});
    CHECK_NOTHROW(read_npy_dataset(fx.root(), {.verify_checksums = false}));
  }
  SUBCASE("a relation outside the schema") {
    overwrite_type(0, 99);
    check_contains(unchecked_error(), {types_file, "edge 0 has relation 99 of 6"});
  }
  SUBCASE("missing, or of another dtype") {
    const std::vector<std::int64_t> wide(fx.data.edge_types.begin(), fx.data.edge_types.end());
    write_npy(fx.path("edge_types.npy"), npy_dtype::int64, std::vector<std::int64_t>{18}, wide.data());
    check_contains(unchecked_error(), {types_file, "holds int64 ('<i8'), expected int32"});
    fs::remove(fx.path("edge_types.npy"));
    check_contains(unchecked_error(), {"missing file", types_file});
  }
  SUBCASE("a schema naming an unknown type, or disagreeing with num_nodes") {
    auto meta = nlohmann::json::parse(read_binary(fx.path("meta.json")));
    meta["schema"]["relations"][1]["source"] = "z";
    io::write_text_file(fx.path("meta.json"), meta.dump(2));
    fx.reseal();
    check_contains(fx.error(), {fx.path("meta.json").string(),
                                "\"schema\": a relation names the node type \"z\", which is "
                                "not listed"});
    meta["schema"]["relations"][1]["source"] = "c";
    meta["schema"]["node_types"][0]["count"] = 4;
    io::write_text_file(fx.path("meta.json"), meta.dump(2));
    fx.reseal();
    check_contains(fx.error(), {fx.path("meta.json").string(),
                                "the node types have 10 nodes in all, the graph 9"});
    meta["schema"].erase("relations");
    io::write_text_file(fx.path("meta.json"), meta.dump(2));
    fx.reseal();
    check_contains(fx.error(), {fx.path("meta.json").string(), "\"schema\": expected an object "
                                "with the arrays \"node_types\" and \"relations\""});
  }
  SUBCASE("edge_types.npy without a schema") {
    auto meta = nlohmann::json::parse(read_binary(fx.path("meta.json")));
    meta.erase("schema");
    io::write_text_file(fx.path("meta.json"), meta.dump(2));
    fx.reseal();
    check_contains(unchecked_error(), {"holds edge_types.npy, but meta.json declares no schema"});
  }
}

TEST_CASE("npy dataset: versions 3, 2 and 1 (before sparse features, schemas) still read; a "
          "later one is refused") {
  npy_fixture fx;
  auto meta = nlohmann::json::parse(read_binary(fx.path("meta.json")));
  CHECK(meta["version"] == 4);
  CHECK_FALSE(meta.contains("schema"));
  CHECK_FALSE(meta.contains("sparse_features"));
  CHECK_FALSE(fs::exists(fx.path("edge_types.npy")));
  meta["version"] = 3;
  io::write_text_file(fx.path("meta.json"), meta.dump(2));
  fx.reseal();
  check_same_dataset(fx.data, read_npy_dataset(fx.root()));
  meta["version"] = 2;
  io::write_text_file(fx.path("meta.json"), meta.dump(2));
  fx.reseal();
  check_same_dataset(fx.data, read_npy_dataset(fx.root()));
  meta.erase("manifest");
  meta.erase(metadata_seal_key);
  meta["version"] = 1;
  io::write_text_file(fx.path("meta.json"), meta.dump(2));
  check_same_dataset(fx.data, read_npy_dataset(fx.root()));
  meta["version"] = 5;
  io::write_text_file(fx.path("meta.json"), meta.dump(2));
  check_contains(fx.error(), {"has version 5; this sar reads versions 1 to 4"});
}

TEST_CASE("mapped_npy_matrix reads a float32 .npy in place, after release and evict too") {
  const temp_dir dir("mapped-npy");
  matrixf m(300, 7);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = 0.5f * static_cast<float>(i) - 3.0f;
  write_npy(dir.path / "features.npy", npy_dtype::float32, std::vector<std::int64_t>{300, 7},
            m.data());
  mapped_npy_matrix mapped(dir.path / "features.npy");
  CHECK(mapped.rows() == 300);
  CHECK(mapped.cols() == 7);
  CHECK(mapped.matrix() == m);
  mapped.release();  // the pages leave the process, the data stays
  CHECK(mapped.matrix() == m);
  mapped.evict();  // and the page cache: read from the file again
  CHECK(mapped.matrix() == m);
  mapped_npy_matrix moved = std::move(mapped);
  CHECK(moved.matrix().row(299) == m.row(299));
  CHECK(mapped.rows() == 0);  // NOLINT(bugprone-use-after-move): a moved-from map is empty

  const std::vector<std::int64_t> values{1, 2, 3};
  write_npy(dir.path / "ids.npy", npy_dtype::int64, std::vector<std::int64_t>{3}, values.data());
  CHECK_THROWS_WITH_AS(mapped_npy_matrix(dir.path / "ids.npy"),
                       doctest::Contains("expected a 2-D float32 array"), io_error);
  CHECK_THROWS_WITH_AS(mapped_npy_matrix(dir.path / "none.npy"),
                       doctest::Contains("none.npy"), io_error);
}
