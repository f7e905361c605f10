// Dense layers, losses, optimisers, the SpMM kernel and the gradient checker.
#include <doctest/doctest.h>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>

#include "sar/schedule/local_schedule.hpp"
#include "test_support.hpp"
#include "sar/core/memory.hpp"
#include "sar/graph/builders.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/spmm.hpp"

using namespace sar;
using sar::testing_support::random_matrix;

namespace {

/// The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps), or ""
/// where there is no such file.
std::string mapping_flags(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &begin, &end) == 2)  // a mapping's first line
      inside = at >= begin && at < end;
    else if (inside && line.starts_with("VmFlags:"))
      return line;
  }
  return "";
}

/// A random graph on n nodes with ~avg_degree in-edges per node, some isolated nodes, and
/// self-loops on every third node. Duplicated edges are kept (they must count twice).
csr random_graph(node_t n, int avg_degree, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  edge_list edges;
  edges.num_nodes = n;
  std::uniform_int_distribution<node_t> pick(0, n - 1);
  for (node_t i = 0; i < n; ++i) {
    if (i % 7 == 3) continue;  // isolated destinations
    if (i % 3 == 0) edges.push_back(i, i);
    for (int k = 0; k < avg_degree; ++k) {
      const node_t j = pick(gen);
      if (j % 7 != 3) edges.push_back(j, i);  // isolated sources too
    }
  }
  return build_csr(edges, {.deduplicate = false});
}

}  // namespace

TEST_CASE("huge_page_resize resizes like resize and advises a new large buffer as huge pages") {
  SUBCASE("matrix: shape, and no reallocation for the same size") {
    matrixf m;
    huge_page_resize(m, 3, 4);
    CHECK((m.rows() == 3 && m.cols() == 4));
    const float* data = m.data();
    huge_page_resize(m, 4, 3);
    CHECK(m.data() == data);
  }
  SUBCASE("vector: keeps its elements and value-initialises the new ones") {
    std::vector<float> v{1, 2, 3};
    huge_page_resize(v, std::size_t{5} << 20);  // 20 MB, above huge_page_min_bytes
    REQUIRE(v.size() == std::size_t{5} << 20);
    CHECK((v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 0 && v.back() == 0));
    huge_page_resize(v, 2);
    CHECK((v.size() == 2 && v[1] == 2));
  }
  SUBCASE("the kernel marks the buffer's whole 2 MiB pages (Linux with THP not off)") {
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(thp, modes);
    if (modes.empty() || modes.find("[never]") != std::string::npos) return;
    matrixf big, small;
    huge_page_resize(big, 1 << 14, 1024);  // 64 MB
    huge_page_resize(small, 1 << 10, 1024);  // 4 MB, below huge_page_min_bytes
    constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
    const auto inside = (reinterpret_cast<std::uintptr_t>(big.data()) + huge) & ~(huge - 1);
    CHECK(mapping_flags(reinterpret_cast<const void*>(inside)).find(" hg") != std::string::npos);
    CHECK(mapping_flags(small.data()).find(" hg") == std::string::npos);
  }
}

TEST_CASE("spmm_add equals a dense product, adds into out, and does not depend on threads") {
  const csr a = random_graph(300, 9, 1);
  REQUIRE(a.num_edges() > 1000);
  matrixd dense = matrixd::Zero(a.num_rows, a.num_cols);
  for (node_t i = 0; i < a.num_rows; ++i)
    for (node_t j : a.row(i)) dense(i, j) += 1.0;
  CHECK(dense.diagonal().sum() > 50);                      // self-loops present
  CHECK((dense.rowwise().sum().array() == 0).count() > 20);  // isolated nodes present
  for (Eigen::Index f : {1, 5, 64}) {
    const matrixd x = random_matrix<double>(a.num_cols, f, 2);
    const matrixd start = random_matrix<double>(a.num_rows, f, 3);
    matrixd out = start;
    spmm_add(a, x, out);
    CHECK((out - (start + dense * x)).cwiseAbs().maxCoeff() < 1e-12);

    const csr at = transpose(a);
    matrixd back = start;
    spmm_add(at, x, back);
    CHECK((back - (start + dense.transpose() * x)).cwiseAbs().maxCoeff() < 1e-12);

    matrixd one_thread = start, two_threads = start;
    {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
      spmm_add(a, x, one_thread);
    }
    {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
      spmm_add(a, x, two_threads);
    }
    CHECK(one_thread == two_threads);
    CHECK(one_thread == out);
  }
}

TEST_CASE("spmm_add: float, weighted edges, row blocks, and shape errors") {
  const csr a = random_graph(50, 4, 4);
  const matrixf x = random_matrix<float>(50, 7, 5);
  matrixf out = matrixf::Zero(50, 7);
  spmm_add(a, x, out);
  matrixf ref = matrixf::Zero(50, 7);
  for (node_t i = 0; i < 50; ++i)
    for (node_t j : a.row(i)) ref.row(i) += x.row(j);
  CHECK((out - ref).cwiseAbs().maxCoeff() < 1e-5f);

  std::vector<double> w(a.num_edges());
  for (std::size_t e = 0; e < w.size(); ++e) w[e] = 0.25 + 0.5 * static_cast<double>(e % 3);
  const matrixd xd = x.cast<double>();
  matrixd outw = matrixd::Zero(50, 7), refw = matrixd::Zero(50, 7);
  spmm_add(a, std::span<const double>(w), xd, outw);
  for (node_t i = 0; i < 50; ++i)
    for (edge_t e = a.offsets[i]; e < a.offsets[i + 1]; ++e)
      refw.row(i) += w[e] * xd.row(a.columns[e]);
  CHECK((outw - refw).cwiseAbs().maxCoeff() < 1e-12);

  // Columns 2..4 of a wider matrix (outer stride != cols) as both operands.
  matrixd wide = matrixd::Zero(50, 9);
  spmm_add(a, xd.middleCols(2, 3), wide.middleCols(4, 3));
  CHECK((wide.middleCols(4, 3) - ref.cast<double>().middleCols(2, 3)).cwiseAbs().maxCoeff() <
        1e-6);
  CHECK(wide.leftCols(4).isZero());

  matrixd wrong(49, 7);
  CHECK_THROWS_AS(spmm_add(a, xd, wrong), invalid_argument);
}

namespace {

/// out.row(i) += x.row(j) (times weights[e]) for each edge e = (i, j), in CSR order, one
/// element at a time: the sums spmm_add must reproduce bitwise (without weights; a weighted
/// product may be fused into an FMA differently).
template <class T>
matrix<T> plain_spmm(const csr& a, const matrix<T>& x, matrix<T> out, const T* weights) {
  for (node_t i = 0; i < a.num_rows; ++i)
    for (edge_t e = a.offsets[i]; e < a.offsets[i + 1]; ++e)
      for (Eigen::Index k = 0; k < x.cols(); ++k)
        out(i, k) += weights != nullptr ? weights[e] * x(a.columns[e], k) : x(a.columns[e], k);
  return out;
}

/// spmm(out) with out starting from `start`, inside a task_arena of `threads` threads.
template <class T, class Spmm>
matrix<T> spmm_in_arena(int threads, const matrix<T>& start, Spmm&& spmm) {
  matrix<T> out = start;
  tbb::task_arena(threads).execute([&] { spmm(out); });
  return out;
}

/// At widths around every block size of the kernel (1-16 SIMD packets in registers, then a
/// half and a quarter packet, then single columns, for 4-, 8- and 16-lane packets), every
/// form of spmm_add equals the plain sum bitwise (weighted: to rounding) and is bitwise the
/// same on 1 and 2 threads.
template <class T>
void check_blocks_equal_plain_sum(const csr& a) {
  std::vector<T> weights(static_cast<std::size_t>(a.num_edges()));
  for (std::size_t e = 0; e < weights.size(); ++e)
    weights[e] = static_cast<T>(0.25 + 0.5 * static_cast<double>(e % 5));
  // A compressed block: edges row k is local row 2k + 1 of an output twice as tall.
  std::vector<node_t> rows(static_cast<std::size_t>(a.num_rows));
  for (node_t k = 0; k < a.num_rows; ++k) rows[k] = 2 * k + 1;
  graph_block block;
  block.edges = &a;
  block.rows = rows;
  std::vector<T> source_scale(static_cast<std::size_t>(a.num_cols));
  for (std::size_t j = 0; j < source_scale.size(); ++j)
    source_scale[j] = T(1) / std::sqrt(static_cast<T>(1 + j % 7));
  const T tolerance = std::is_same_v<T, float> ? T(1e-5) : T(1e-13);
  for (Eigen::Index f : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128,
                         129, 130, 255, 256, 257, 300}) {
    CAPTURE(f);
    const matrix<T> x = random_matrix<T>(a.num_cols, f, 6);
    const matrix<T> start = random_matrix<T>(a.num_rows, f, 7);
    const matrix<T> plain = plain_spmm<T>(a, x, start, nullptr);
    const matrix<T> plain_weighted = plain_spmm<T>(a, x, start, weights.data());
    const matrix<T> tall_start = random_matrix<T>(2 * a.num_rows, f, 8);
    matrix<T> plain_in_tall = tall_start;  // the plain sum into rows 2k + 1
    for (node_t k = 0; k < a.num_rows; ++k)
      for (edge_t e = a.offsets[k]; e < a.offsets[k + 1]; ++e)
        for (Eigen::Index c = 0; c < f; ++c) plain_in_tall(2 * k + 1, c) += x(a.columns[e], c);
    for (int threads : {1, 2}) {
      CHECK(spmm_in_arena<T>(threads, start, [&](matrix<T>& out) { spmm_add(a, x, out); }) ==
            plain);
      CHECK(spmm_in_arena<T>(threads, tall_start,
                             [&](matrix<T>& out) { spmm_add(block, x, out); }) == plain_in_tall);
      // Scaling halo rows as they are added is the sum of a scaled copy (to rounding: the
      // compiler may fuse the multiply into the add), bitwise the same on every thread count.
      const matrix<T> x_scaled =
          Eigen::Map<const column_vector<T>>(source_scale.data(), a.num_cols).asDiagonal() * x;
      const matrix<T> of_copy = spmm_in_arena<T>(
          1, tall_start, [&](matrix<T>& out) { spmm_add(block, x_scaled, out); });
      const auto scaled = [&](int t) {
        return spmm_in_arena<T>(t, tall_start, [&](matrix<T>& out) {
          spmm_add_scaled(block, std::span<const T>(source_scale), x, out);
        });
      };
      CHECK((scaled(threads) - of_copy).cwiseAbs().maxCoeff() <=
            tolerance * (1 + of_copy.cwiseAbs().maxCoeff()));
      CHECK(scaled(threads) == scaled(1));
      const matrix<T> weighted = spmm_in_arena<T>(threads, start, [&](matrix<T>& out) {
        spmm_add(a, std::span<const T>(weights), x, out);
      });
      CHECK((weighted - plain_weighted).cwiseAbs().maxCoeff() <=
            tolerance * (1 + plain_weighted.cwiseAbs().maxCoeff()));
      CHECK(weighted == spmm_in_arena<T>(1, start, [&](matrix<T>& out) {
              spmm_add(a, std::span<const T>(weights), x, out);
            }));
    }
  }
}

}  // namespace

TEST_CASE("spmm_add: every width (register blocks, single columns) equals the plain sum") {
  const csr a = random_graph(2000, 9, 9);  // large enough to split over 2 threads
  check_blocks_equal_plain_sum<float>(a);
  check_blocks_equal_plain_sum<double>(a);
}

TEST_CASE("tiled spmm (sources cut into tiles, one pass each) is bitwise the one-pass sum") {
  const csr sorted = random_graph(3000, 12, 31);
  csr shuffled = sorted;  // the same edges, rows in random order: tiles must keep CSR order
  std::mt19937_64 gen(32);
  for (node_t i = 0; i < shuffled.num_rows; ++i)
    std::shuffle(shuffled.columns.begin() + shuffled.offsets[i],
                 shuffled.columns.begin() + shuffled.offsets[i + 1], gen);
  REQUIRE(shuffled != sorted);
  std::vector<float> scale(static_cast<std::size_t>(sorted.num_cols));
  for (std::size_t j = 0; j < scale.size(); ++j) scale[j] = 1.0f / static_cast<float>(1 + j % 5);
  std::vector<node_t> rows(static_cast<std::size_t>(sorted.num_rows));  // into a taller out
  for (node_t k = 0; k < sorted.num_rows; ++k) rows[k] = 2 * k + 1;
  using detail::row_scale;
  for (const csr* a : {&sorted, static_cast<const csr*>(&shuffled)})
    for (const Eigen::Index f : {1, 8, 17, 128}) {
      CAPTURE(f);
      const matrix<float> x = random_matrix<float>(a->num_cols, f, 33);
      const matrix<float> start = random_matrix<float>(2 * a->num_rows, f, 34);
      spmm_tile_cache cache;  // kept tilings must give what fresh ones give
      const auto product = [&](int threads, node_t span, bool scaled, spmm_tile_cache* tiles) {
        return spmm_in_arena<float>(threads, start, [&](matrix<float>& out) {
          if (scaled)
            detail::spmm_rows_add<row_scale::by_source, float>(*a, rows.data(), scale.data(), x,
                                                               out, tiles, span);
          else
            detail::spmm_rows_add<row_scale::none, float>(*a, rows.data(), nullptr, x, out,
                                                          tiles, span);
        });
      };
      for (const bool scaled : {false, true}) {
        const matrix<float> one_pass = product(1, 0, scaled, nullptr);
        for (const node_t span : {1, 7, 500, 2999})  // 3000, 429, 6 and 2 tiles
          for (const int threads : {1, 2}) {
            CAPTURE(span);
            CAPTURE(threads);
            CHECK(product(threads, span, scaled, nullptr) == one_pass);
            CHECK(product(threads, span, scaled, &cache) == one_pass);
          }
      }
      CHECK(&cache.tiles(*a, 7) == &cache.tiles(*a, 7));  // made once per span
      const csr& other = a == &sorted ? shuffled : sorted;
      CHECK_THROWS_AS(cache.tiles(other, 7), invalid_argument);  // one cache, one CSR
    }
  // The tiles hold every edge once, in each row's CSR order.
  const detail::source_tiles tiles(shuffled, 500);
  REQUIRE(tiles.count() == 6);
  for (node_t i = 0; i < shuffled.num_rows; ++i) {
    std::vector<node_t> row;
    for (int t = 0; t < tiles.count(); ++t)
      for (edge_t e = tiles.offsets(t)[i]; e < tiles.offsets(t)[i + 1]; ++e)
        row.push_back(tiles.columns()[e]);
    const auto csr_row = shuffled.row(i);
    CHECK(std::equal(row.begin(), row.end(), csr_row.begin(), csr_row.end()));
  }
  // So do tiles of unequal spans (as try_tile_spans cuts them); on sorted rows each edge sits
  // in its source's tile.
  const std::vector<node_t> bounds{0, 100, 1500, 2900, sorted.num_cols};
  const detail::source_tiles uneven(sorted, std::vector<node_t>(bounds.begin(), bounds.end() - 1));
  REQUIRE(uneven.count() == 4);
  for (node_t i = 0; i < sorted.num_rows; ++i) {
    std::vector<node_t> row;
    for (int t = 0; t < uneven.count(); ++t)
      for (edge_t e = uneven.offsets(t)[i]; e < uneven.offsets(t)[i + 1]; ++e) {
        const node_t source = uneven.columns()[e];
        CHECK((source >= bounds[t] && source < bounds[t + 1]));
        row.push_back(source);
      }
    const auto csr_row = sorted.row(i);
    CHECK(std::equal(row.begin(), row.end(), csr_row.begin(), csr_row.end()));
  }
  // The automatic choice on ~21 edges a row: a 100 MB x of 128 floats a row takes tiles of at
  // most 16 MiB (7); 16 floats a row (12.8 MB) takes tiles of 64Ki rows (4); 8 floats a row
  // (6.4 MB) or a sparse graph takes none.
  csr wide;
  wide.num_rows = wide.num_cols = 200000;
  wide.offsets.assign(200001, 0);
  for (node_t i = 0; i < 200000; ++i) wide.offsets[i + 1] = wide.offsets[i] + 21;
  const auto tile_count = [&](std::size_t floats) {
    const node_t span = detail::spmm_tile_span(wide, floats * sizeof(float));
    return span == 0 ? 0 : (wide.num_cols + span - 1) / span;
  };
  CHECK(tile_count(128) == 7);
  CHECK(tile_count(64) == 4);
  CHECK(tile_count(16) == 4);
  CHECK(tile_count(8) == 0);
  // The spans a cache tries: half, three quarters, all and five quarters of those tiles.
  std::vector<node_t> tried;
  for (const node_t span : detail::spmm_tile_span_candidates(wide, 128 * sizeof(float)))
    tried.push_back((wide.num_cols + span - 1) / span);
  CHECK(tried == std::vector<node_t>{4, 6, 7, 9});
  for (node_t i = 0; i < 200000; ++i) wide.offsets[i + 1] = wide.offsets[i] + 3;
  CHECK(detail::spmm_tile_span(wide, 128 * sizeof(float)) == 0);
  CHECK(detail::spmm_tile_span_candidates(wide, 128 * sizeof(float)).empty());
}

TEST_CASE("a product with a tile cache settles on a tried span and is bitwise one pass") {
  // 40000 sources of 128 floats (20 MB) take 2 tiles of 16 MiB; the cache tries 2 and 3.
  const csr a = random_graph(40000, 12, 51);
  const matrix<float> x = random_matrix<float>(a.num_cols, 128, 52);
  const matrix<float> start = random_matrix<float>(a.num_rows, 128, 53);
  const std::vector<node_t> candidates =
      detail::spmm_tile_span_candidates(a, 128 * sizeof(float));
  REQUIRE(candidates.size() == 2);
  const auto product = [&](std::optional<node_t> span, spmm_tile_cache* cache) {
    return spmm_in_arena<float>(2, start, [&](matrix<float>& out) {
      detail::spmm_rows_add<detail::row_scale::none, float>(a, nullptr, nullptr, x, out, cache,
                                                            span);
    });
  };
  const matrix<float> one_pass = product(0, nullptr);
  spmm_tile_cache cache;
  CHECK_FALSE(cache.tuned_span(128 * sizeof(float)).has_value());
  CHECK(product(std::nullopt, &cache) == one_pass);  // tries the candidates
  const std::optional<node_t> tuned = cache.tuned_span(128 * sizeof(float));
  REQUIRE(tuned.has_value());
  CHECK(std::find(candidates.begin(), candidates.end(), *tuned) != candidates.end());
  CHECK(product(std::nullopt, &cache) == one_pass);  // uses the tuned span
  CHECK(cache.tuned_span(128 * sizeof(float)) == tuned);
  CHECK_FALSE(cache.tuned_span(8 * sizeof(float)).has_value());  // per row width
  // A cache that tiles no rows narrower than 129 floats gives the same product untiled.
  spmm_tile_cache lean;
  lean.set_min_tiled_row_bytes(129 * sizeof(float));
  CHECK(product(std::nullopt, &lean) == one_pass);
  CHECK_FALSE(lean.tuned_span(128 * sizeof(float)).has_value());  // nothing tried or kept
}

TEST_CASE("spmm_assign (assign, sum, scale rows in one pass) is bitwise zero, add, scale") {
  // Every 7th row has no edges: the assigning pass must still write it (0), the scaling pass
  // still scale it. out starts as NaN, so a row left unwritten shows.
  const csr dense_rows = random_graph(3000, 12, 41);
  csr a;
  a.num_rows = a.num_cols = dense_rows.num_rows;  // a.offsets starts as {0}
  for (node_t i = 0; i < a.num_rows; ++i) {
    if (i % 7 != 0)
      for (node_t j : dense_rows.row(i)) a.columns.push_back(j);
    a.offsets.push_back(static_cast<edge_t>(a.columns.size()));
  }
  a.validate("spmm_assign test graph");
  std::vector<float> src(static_cast<std::size_t>(a.num_cols)), dst(src.size());
  for (std::size_t j = 0; j < src.size(); ++j) {
    src[j] = 1.0f / static_cast<float>(1 + j % 5);
    dst[j] = 1.0f / static_cast<float>(2 + j % 3);
  }
  const matrix<float> nan =
      matrix<float>::Constant(a.num_rows, 1, std::numeric_limits<float>::quiet_NaN());
  using detail::row_scale;
  for (const Eigen::Index f : {1, 8, 17, 128}) {
    CAPTURE(f);
    const matrix<float> x = random_matrix<float>(a.num_cols, f, 42);
    const matrix<float> start = nan.replicate(1, f);
    for (const bool scaled : {false, true}) {
      const auto run = [&](int threads, node_t span, bool fused) {
        return spmm_in_arena<float>(threads, start, [&](matrix<float>& out) {
          if (!fused) out.setZero();
          const detail::spmm_rows_epilogue<float> epilogue{fused, fused ? dst.data() : nullptr};
          if (scaled)
            detail::spmm_rows_add<row_scale::by_source, float>(a, nullptr, src.data(), x, out,
                                                               nullptr, span, epilogue);
          else
            detail::spmm_rows_add<row_scale::none, float>(a, nullptr, nullptr, x, out, nullptr,
                                                          span, epilogue);
          if (!fused)
            for (node_t i = 0; i < a.num_rows; ++i) out.row(i) *= dst[static_cast<std::size_t>(i)];
        });
      };
      const matrix<float> reference = run(1, 0, false);
      CHECK(reference.allFinite());
      for (const node_t span : {0, 1, 7, 500})  // one pass; 3000, 429 and 6 tiles
        for (const int threads : {1, 2}) {
          CAPTURE(span);
          CAPTURE(threads);
          CHECK(run(threads, span, true) == reference);
        }
    }
  }
  // The block forms: a whole local block assigns; a compressed block cannot.
  local_schedule graph(a);
  graph.gather(sar::exchange_key{}, random_matrix<float>(a.num_cols, 8, 43), [&](const graph_block& block,
                                                              const auto& halo) {
    CHECK(block.whole);
    matrix<float> out = nan.replicate(1, 8), expected = matrix<float>::Zero(a.num_rows, 8);
    spmm_assign<float>(block, halo, out, dst);
    spmm_add<float>(block, halo, expected);
    for (node_t i = 0; i < a.num_rows; ++i) expected.row(i) *= dst[static_cast<std::size_t>(i)];
    CHECK(out == expected);
    graph_block compressed = block;
    const std::vector<node_t> rows = [&] {
      std::vector<node_t> r(static_cast<std::size_t>(a.num_rows));
      std::iota(r.begin(), r.end(), node_t{0});
      return r;
    }();
    compressed.rows = rows;
    CHECK_THROWS_WITH_AS(spmm_assign<float>(compressed, halo, out, dst),
                         doctest::Contains("compressed block"), invalid_argument);
    CHECK_THROWS_AS(spmm_assign<float>(block, halo, out, std::span<const float>(dst).first(5)),
                    invalid_argument);
  });
}

TEST_CASE("dense products are bitwise the same on 1 and 2 threads") {
  // Eigen rounds a row by its place in the call, so a scheduler-dependent cut would differ.
  const matrix<float> x = random_matrix<float>(20000, 67, 21);
  const matrix<float> w = random_matrix<float>(67, 45, 22);
  const matrix<float> d = random_matrix<float>(20000, 45, 23);
  const auto products = [&](int threads) {
    matrix<float> y(x.rows(), w.cols()), back = matrix<float>::Zero(x.rows(), x.cols());
    matrix<float> grad(x.cols(), d.cols()), sum(x.rows(), w.cols()), pair(2 * x.cols(), d.cols());
    tbb::task_arena(threads).execute([&] {
      dense_product<false, float>(x, w, y);
      dense_product_transposed_add<float>(d, w, back);
      transposed_product<float>(x, d, grad);
      dense_product_sum<float>(x, w, back, w, sum);
      transposed_product<float>(x, back, d, pair);
    });
    return std::tuple{y, back, grad, sum, pair};
  };
  const auto one = products(1);
  for (int run = 0; run < 3; ++run) CHECK(products(2) == one);
}

namespace {

/// Max |a - b| over the entries, relative to the largest |b| (b in double).
double relative_error(const matrix<float>& a, const matrix<double>& b) {
  return (a.cast<double>() - b).cwiseAbs().maxCoeff() / std::max(1.0, b.cwiseAbs().maxCoeff());
}

}  // namespace

TEST_CASE("dense products (with and without bias) equal the double reference for every shape") {
  // Row counts around the 6-row kernel and the 512-row chunk; widths around the panels of 8 and
  // 16 (AVX2) or 16 and 32 (AVX-512) columns (masked tails). Outputs are views into wider
  // matrices whose other columns hold a sentinel, so a store past the panel is caught.
  constexpr float sentinel = 12345.0f;
  std::uint64_t seed = 100;
  for (const Eigen::Index rows : {1, 5, 6, 7, 517, 1031, 9001})
    for (const Eigen::Index inner : {1, 3, 128})
      for (const Eigen::Index width : {1, 7, 8, 9, 16, 17, 31, 32, 33, 40}) {
        CAPTURE(rows);
        CAPTURE(inner);
        CAPTURE(width);
        const matrix<float> x_wide = random_matrix<float>(rows, inner + 2, ++seed);
        const const_rows_ref<float> x = x_wide.middleCols(1, inner);  // strided view
        const matrix<float> w = random_matrix<float>(inner, width, ++seed);
        const matrix<float> start = random_matrix<float>(rows, width, ++seed);
        const matrix<double> xd = x.cast<double>(), wd = w.cast<double>();

        matrix<float> y_wide = matrix<float>::Constant(rows, width + 3, sentinel);
        y_wide.middleCols(1, width) = start;
        dense_product<true, float>(x, w, y_wide.middleCols(1, width));
        CHECK(relative_error(y_wide.middleCols(1, width), start.cast<double>() + xd * wd) < 1e-5);
        dense_product<false, float>(x, w, y_wide.middleCols(1, width));
        CHECK(relative_error(y_wide.middleCols(1, width), xd * wd) < 1e-5);
        const matrix<float> bias = random_matrix<float>(1, width, ++seed);
        const matrix<double> with_bias = (xd * wd).rowwise() + bias.cast<double>().row(0);
        dense_product<true, float>(x, w, y_wide.middleCols(1, width), bias.data());
        CHECK(relative_error(y_wide.middleCols(1, width), xd * wd + with_bias) < 1e-5);
        dense_product<false, float>(x, w, y_wide.middleCols(1, width), bias.data());
        CHECK(relative_error(y_wide.middleCols(1, width), with_bias) < 1e-5);
        CHECK((y_wide.col(0).array() == sentinel).all());
        CHECK((y_wide.rightCols(2).array() == sentinel).all());
        // [x | x2] [w ; w2] + b in one pass (the left operand in two parts).
        const matrix<float> x2 = random_matrix<float>(rows, 5, ++seed);
        const matrix<float> w2 = random_matrix<float>(5, width, ++seed);
        dense_product_sum<float>(x, w, x2, w2, y_wide.middleCols(1, width), bias.data());
        CHECK(relative_error(y_wide.middleCols(1, width),
                             with_bias + x2.cast<double>() * w2.cast<double>()) < 1e-5);
        CHECK((y_wide.col(0).array() == sentinel).all());
        CHECK((y_wide.rightCols(2).array() == sentinel).all());

        // x^T d (inner x width) and d w^T (rows x inner).
        const matrix<float> d = random_matrix<float>(rows, width, ++seed);
        matrix<float> grad_wide = matrix<float>::Constant(inner, width + 1, sentinel);
        transposed_product<float>(x, d, grad_wide.leftCols(width));
        CHECK(relative_error(grad_wide.leftCols(width), xd.transpose() * d.cast<double>()) < 1e-5);
        CHECK((grad_wide.col(width).array() == sentinel).all());
        // [x | x2]^T d: each half bitwise its own transposed product.
        matrix<float> pair(inner + 5, width), second(5, width);
        transposed_product<float>(x, x2, d, pair);
        transposed_product<float>(x2, d, second);
        CHECK(pair.topRows(inner) == grad_wide.leftCols(width));
        CHECK(pair.bottomRows(5) == second);
        const matrix<float> w_back = random_matrix<float>(inner, width, ++seed);
        matrix<float> back = x;
        dense_product_transposed_add<float>(d, w_back, back);
        CHECK(relative_error(back, xd + d.cast<double>() * w_back.cast<double>().transpose()) <
              1e-5);
      }
}

TEST_CASE("a row of a float product depends on that row alone (row_gemm)") {
  // This is what makes a product the same on 1 and P ranks: a rank holds other rows around it.
  if (!detail::uses_row_gemm<float>) {
    MESSAGE("built without AVX2 + FMA: float products use Eigen, which does not promise this");
    return;
  }
  const matrix<float> x = random_matrix<float>(3000, 130, 31);
  const matrix<float> w = random_matrix<float>(130, 40, 32);
  matrix<float> all(x.rows(), w.cols());
  dense_product<false, float>(x, w, all);
  using rows_span = std::pair<Eigen::Index, Eigen::Index>;  // first row, count
  for (const auto& [first, count] : {rows_span{0, 1}, {5, 7}, {511, 600}}) {
    matrix<float> part(count, w.cols());
    dense_product<false, float>(x.middleRows(first, count), w, part);
    CHECK(part == all.middleRows(first, count));
  }
}

// ---------------------------------------------------------------------------------------------
// The gradient checker, on a small test layer with deliberate bugs.
#include "sar/testing/gradient_checker.hpp"

namespace {

enum class bug { none, assigns_dx, wrong_gradient, partial_output, adds_parameter_gradient };

/// y = x W + A x W (aggregate after the product), W square; with an optional deliberate bug.
struct test_conv {
  using scalar = double;
  Eigen::Index dim;
  bug defect = bug::none;
  parameter_store<double>* store = nullptr;
  std::size_t w = 0;

  Eigen::Index input_dim() const { return dim; }
  Eigen::Index output_dim() const { return dim; }
  void declare(parameter_store<double>& s) {
    store = &s;
    w = s.declare({.name = "W", .rows = dim, .cols = dim});
  }
  template <class Schedule>
  void forward(Schedule& graph, const layer_context&, const matrixd& x, matrixd& y) {
    const matrixd xw = x * store->value(w);
    if (defect == bug::partial_output) {
      y.conservativeResize(x.rows(), dim);  // keeps the pre-filled entries
      y.topRows(x.rows() - 1) = xw.topRows(x.rows() - 1);
    } else {
      y = xw;
    }
    graph.gather(sar::exchange_key{}, xw, [&](const graph_block& b, const_rows_ref<double> halo) {
      spmm_add<double>(b, halo, y);
    });
  }
  template <class Schedule>
  void backward(Schedule& graph, const layer_context&, const matrixd& x, const matrixd&,
                const matrixd& dy, matrixd& dx) {
    matrixd dxw = dy;  // d(xW) = dy + A^T dy
    graph.scatter(sar::exchange_key{}, dxw, [&](const graph_block& b, rows_ref<double> dhalo) {
      spmm_add<double>(*b.transposed, dy, dhalo);
    });
    if (defect == bug::adds_parameter_gradient) store->grad(w) += x.transpose() * dxw;
    else store->grad(w) = x.transpose() * dxw;
    if (defect == bug::wrong_gradient) store->grad(w)(0, 0) *= 1.001;
    if (dx.size() == 0) return;
    if (defect == bug::assigns_dx) dx = dxw * store->value(w).transpose();
    else dx += dxw * store->value(w).transpose();
  }
};

/// test_conv declaring assigns_input_gradient: right with bug::assigns_dx, wrong without.
struct assigning_conv : test_conv {
  static constexpr bool assigns_input_gradient = true;
};

}  // namespace

TEST_CASE("check_gradients passes a correct layer and catches each contract violation") {
  local_schedule graph(random_graph(20, 3, 7));
  const matrixd x = random_matrix<double>(20, 4, 8);
  const layer_context ctx;
  {
    test_conv good{.dim = 4};
    const auto r = check_gradients(good, graph, ctx, x);
    CHECK_MESSAGE(r.passed, r.summary());
    CHECK(r.input.checked == 80);
    REQUIRE(r.parameters.size() == 1);
    CHECK(r.parameters[0].checked == 16);
    CHECK(r.parameters[0].max_relative_error < 1e-7);
  }
  {
    test_conv l{.dim = 4, .defect = bug::assigns_dx};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.input_gradient_added);
    CHECK_FALSE(r.input.passed);  // dx - sentinel is off by the sentinel
    CHECK(r.parameter_gradients_assigned);
    CHECK(r.summary().find("assigned dx instead of adding") != std::string::npos);
  }
  {
    assigning_conv l{{.dim = 4, .defect = bug::assigns_dx}};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_MESSAGE(r.passed, r.summary());
  }
  {
    assigning_conv l{{.dim = 4}};  // declares assignment but adds
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.input_gradient_added);
    CHECK(r.summary().find("declares assigns_input_gradient") != std::string::npos);
  }
  {
    test_conv l{.dim = 4, .defect = bug::wrong_gradient};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK(r.input.passed);
    CHECK(r.input_gradient_added);
    CHECK_FALSE(r.parameters[0].passed);
    CHECK(r.parameters[0].worst_index == 0);
  }
  {
    test_conv l{.dim = 4, .defect = bug::partial_output};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.output_assigned);
  }
  {
    test_conv l{.dim = 4, .defect = bug::adds_parameter_gradient};
    const auto r = check_gradients(l, graph, ctx, x);
    CHECK_FALSE(r.passed);
    CHECK_FALSE(r.parameter_gradients_assigned);
    CHECK(r.input_gradient_added);
  }
}

// ---------------------------------------------------------------------------------------------
// Layers under the gradient checker (double precision, relative error < 1e-6).
#include "sar/nn/activations.hpp"
#include "sar/nn/batch_norm.hpp"
#include "sar/nn/dropout.hpp"
#include "sar/nn/linear.hpp"

namespace {

template <class Layer>
void require_gradients(Layer& layer, local_schedule& graph, const layer_context& ctx,
                       const matrixd& x) {
  const auto r = check_gradients(layer, graph, ctx, x);
  CHECK_MESSAGE(r.passed, r.summary());
  CHECK(r.input.checked == x.size());
  for (const auto& p : r.parameters) CHECK(p.max_relative_error < 1e-6);
}

}  // namespace

TEST_CASE("every dense layer passes the gradient checker") {
  local_schedule graph(random_graph(24, 3, 11), 1000);
  const matrixd x = random_matrix<double>(24, 6, 12);
  const layer_context ctx{.training = true, .seed = 5, .epoch = 2, .layer = 1};
  SUBCASE("linear with bias") {
    linear<double> l(6, 4);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("linear without bias") {
    linear<double> l(6, 3, {.bias = false});
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("relu") {
    relu<double> l(6);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("leaky_relu") {
    leaky_relu<double> l(6, 0.2);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("elu") {
    elu<double> l(6, 0.7);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("dropout, training, p = 0.4") {
    dropout<double> l(6, 0.4);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("dropout, evaluation") {
    dropout<double> l(6, 0.4);
    require_gradients(l, graph, layer_context{.training = false}, x);
  }
  SUBCASE("relu_dropout, training, p = 0.4") {
    relu_dropout<double> l(6, 0.4);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("relu_dropout, evaluation") {
    relu_dropout<double> l(6, 0.4);
    require_gradients(l, graph, layer_context{.training = false}, x);
  }
  SUBCASE("batch_norm, training") {
    batch_norm<double> l(6);
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("batch_norm, training, no affine") {
    batch_norm<double> l(6, {.affine = false});
    require_gradients(l, graph, ctx, x);
  }
  SUBCASE("batch_norm, evaluation") {
    batch_norm<double> l(6);
    parameter_store<double> store;
    l.declare(store);
    store.allocate();
    matrixd y;
    l.forward(graph, ctx, x, y);  // moves the running statistics off (0, 1)
    require_gradients(l, graph, layer_context{.training = false}, x);
  }
}

TEST_CASE("linear in float matches double") {
  local_schedule graph(random_graph(30, 2, 13));
  parameter_store<float> sf;
  parameter_store<double> sd;
  linear<float> lf(5, 3);
  linear<double> ld(5, 3);
  lf.declare(sf);
  ld.declare(sd);
  sf.allocate();
  sd.allocate();
  sf.initialise(3);
  sd.initialise(3);
  sd.value(ld.bias_index()).setConstant(0.25);
  sf.value(lf.bias_index()).setConstant(0.25f);
  const matrixd x = random_matrix<double>(30, 5, 14);
  matrixf yf;
  matrixd yd;
  lf.forward(graph, {}, x.cast<float>(), yf);
  ld.forward(graph, {}, x, yd);
  CHECK((yf.cast<double>() - yd).cwiseAbs().maxCoeff() < 1e-5);
  matrixd expected = x * sd.value(ld.weight_index());
  expected.array() += 0.25;
  CHECK((yd - expected).cwiseAbs().maxCoeff() < 1e-12);
}

TEST_CASE("dropout: the mask depends on the global id, not the row; evaluation is identity") {
  const layer_context ctx{.training = true, .seed = 9, .epoch = 4, .layer = 2};
  local_schedule a(random_graph(10, 2, 15), 100);  // rows 0..9 = global 100..109
  local_schedule b(random_graph(10, 2, 16), 103);  // rows 0..9 = global 103..112
  const matrixd x = matrixd::Ones(10, 37);
  dropout<double> l(37, 0.5);
  matrixd ya, yb;
  l.forward(a, ctx, x, ya);
  l.forward(b, ctx, x, yb);
  for (Eigen::Index i = 3; i < 10; ++i) CHECK(ya.row(i) == yb.row(i - 3));  // same global id
  CHECK(ya.row(0) != yb.row(0));  // different global ids draw different masks
  CHECK(((ya.array() == 0) || (ya.array() == 2)).all());
  const double kept = (ya.array() != 0).cast<double>().mean();
  CHECK(kept > 0.35);
  CHECK(kept < 0.65);

  matrixd ynext;  // another epoch draws another mask
  l.forward(a, layer_context{.training = true, .seed = 9, .epoch = 5, .layer = 2}, x, ynext);
  CHECK(ynext != ya);
  matrixd ylayer;  // another layer too
  l.forward(a, layer_context{.training = true, .seed = 9, .epoch = 4, .layer = 3}, x, ylayer);
  CHECK(ylayer != ya);

  matrixd yeval;
  l.forward(a, layer_context{.training = false}, x, yeval);
  CHECK(yeval == x);
  CHECK_THROWS_AS(dropout<double>(3, 1.0), invalid_argument);
}

TEST_CASE("dropout: backward applies the forward's mask at widths across 64-bit words") {
  for (const Eigen::Index width : {1, 16, 63, 64, 65, 130}) {
    CAPTURE(width);
    const layer_context ctx{.training = true, .seed = 3, .epoch = 1, .layer = 0};
    local_schedule graph(random_graph(40, 2, 17), 7);
    const matrixd x = random_matrix<double>(40, width, 61).array() + 2.0;  // no exact zeros
    const matrixd dy = random_matrix<double>(40, width, 62);
    dropout<double> l(width, 0.3);
    matrixd y, dx = matrixd::Ones(40, width);
    l.forward(graph, ctx, x, y);
    l.backward(graph, ctx, x, y, dy, dx);
    const double scale = 1.0 / (1.0 - std::round(0.3 * 65536) / 65536);  // p in 2^-16 steps
    const Eigen::ArrayXXd kept = (y.array() != 0).cast<double>();
    CHECK((y.array() - kept * x.array() * scale).abs().maxCoeff() < 1e-12);
    CHECK((dx.array() - (1.0 + kept * dy.array() * scale)).abs().maxCoeff() < 1e-12);
    if (width >= 64) CHECK(std::abs(1.0 - kept.mean() - 0.3) < 0.05);
  }
  // Backward without the matching training forward is an error, not a random mask.
  local_schedule graph(random_graph(4, 2, 18));
  dropout<double> l(3, 0.5);
  matrixd x = matrixd::Ones(4, 3), y, dx = matrixd::Zero(4, 3);
  l.forward(graph, layer_context{.training = true, .epoch = 1}, x, y);
  CHECK_THROWS_AS(l.backward(graph, layer_context{.training = true, .epoch = 2}, x, y, x, dx),
                  invalid_argument);
}

TEST_CASE("relu_dropout equals relu then dropout, forward and backward, in float and double") {
  // Float rows of 130 columns take the AVX2 path (8 columns at a time) and the scalar tail.
  const auto compare = []<class T>(T) {
    for (const Eigen::Index width : {1, 8, 13, 64, 130}) {
      CAPTURE(width);
      for (const bool training : {true, false}) {
        const layer_context ctx{.training = training, .seed = 4, .epoch = 3, .layer = 2};
        local_schedule graph(random_graph(50, 2, 19), 11);
        using m = matrix<T>;
        const m x = random_matrix<double>(50, width, 63).cast<T>();
        const m dy = random_matrix<double>(50, width, 64).cast<T>();
        relu<T> r(width);
        dropout<T> d(width, 0.3);
        relu_dropout<T> fused(width, 0.3);
        m y_relu, y_two, y_fused, dx_fused = m::Ones(50, width);
        r.forward(graph, ctx, x, y_relu);
        d.forward(graph, ctx, y_relu, y_two);
        fused.forward(graph, ctx, x, y_fused);
        CHECK(y_fused == y_two);
        // In place (dx is dy: assigned, as a model runs it): bitwise equal.
        m g = dy, fused_in_place = dy;
        d.backward(graph, ctx, y_relu, y_two, g, g);
        r.backward(graph, ctx, x, y_relu, g, g);
        fused.backward(graph, ctx, x, y_fused, fused_in_place, fused_in_place);
        CHECK(fused_in_place == g);
        // Into another dx: added (the compiler may fuse the multiply-add: one rounding).
        fused.backward(graph, ctx, x, y_fused, dy, dx_fused);
        CHECK(((dx_fused.array() - T(1) - g.array()).abs() <= T(1e-6)).all());
        if (training && width >= 64) {
          const double kept = (y_fused.array() != 0).template cast<double>().mean();
          CHECK(std::abs(kept - 0.5 * 0.7) < 0.05);  // relu keeps about half
        }
      }
    }
  };
  compare(0.0f);
  compare(0.0);
  CHECK_THROWS_AS(relu_dropout<float>(3, 1.0), invalid_argument);
}

TEST_CASE("dropout_mask: each bit is its 16-bit lane of the draw compared with the threshold") {
  // The vectorised compare (AVX2 builds) and the 8 draws at a time of each 128 columns
  // (AVX-512 builds: counter_rng::bits8) must agree with the definition, lane by lane.
  // p = 0.999995 rounds to 2^16 / 2^16: nothing kept.
  for (const double p : {0.0, 0.3, 0.5, 0.999, 0.999995}) {
    const dropout_mask mask(layer_context{.training = true, .seed = 5, .epoch = 2, .layer = 1}, p);
    for (const Eigen::Index width : {1, 15, 16, 17, 64, 128, 130, 256, 300}) {
      CAPTURE(p);
      CAPTURE(width);
      std::vector<std::uint64_t> bits(static_cast<std::size_t>(dropout_mask::words_for(width)));
      for (const node_t id : {0, 1, 77, 123456}) {
        mask.node_bits(id, width, bits.data());
        for (Eigen::Index c = 0; c < dropout_mask::words_for(width) * 64; ++c) {
          const bool bit = (bits[static_cast<std::size_t>(c / 64)] >> (c % 64)) & 1u;
          const bool expected =
              c < width &&
          dropout_mask::lane(mask.draw(id, c - c % 16), c % 16) >= mask.threshold();
          if (bit != expected) FAIL("node ", id, " column ", c);
        }
      }
    }
  }
}

TEST_CASE("dropout on sparse rows drops the entries dense dropout drops, times the same factor") {
  // Rows from empty to full (300 columns: 19 draws, 300 entries).
  const Eigen::Index n = 400, width = 300;
  local_schedule graph(random_graph(n, 2, 31));
  std::mt19937_64 rng(32);
  matrixd dense = matrixd::Zero(n, width);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double density = std::array{0.0, 0.02, 0.3, 1.0}[static_cast<std::size_t>(i % 4)];
    std::bernoulli_distribution stored(density);
    for (Eigen::Index c = 0; c < width; ++c)
      if (stored(rng)) dense(i, c) = 0.5 + static_cast<double>(c);
  }
  const sparse_rows<double> sparse = to_sparse_rows<double, double>(dense);
  for (const double p : {0.0, 0.5, 0.999995}) {
    CAPTURE(p);
    dropout<double> layer(width, p);
    const layer_context ctx{.training = true, .seed = 9, .epoch = 3, .layer = 2};
    sparse_rows<double> dropped;
    layer.forward(graph, ctx, sparse, dropped);
    matrixd expected;
    layer.forward(graph, ctx, dense, expected);
    CHECK(dropped.offsets == sparse.offsets);
    CHECK(dropped.columns == sparse.columns);
    CHECK(to_dense<double>(dropped) == expected);
  }
}

#if defined(__AVX512F__)
TEST_CASE("counter_rng::bits8 gives bits(a, b, c + k, d) in lane k, bitwise") {
  const counter_rng rng(0x1234567890abcdefull, rng_stream::dropout, 3);
  for (const std::uint64_t c : {std::uint64_t{0}, std::uint64_t{5}, ~std::uint64_t{0} - 3}) {
    const counter_rng::bits8_t lanes = rng.bits8(7, 0xfedcba9876543210ull, c, 11);
    std::array<std::array<std::uint64_t, 8>, 4> words;
    for (std::size_t q = 0; q < 4; ++q) _mm512_storeu_si512(words[q].data(), lanes.word[q]);
    for (std::uint64_t k = 0; k < 8; ++k) {
      const counter_rng::bits_t expected = rng.bits(7, 0xfedcba9876543210ull, c + k, 11);
      for (std::size_t q = 0; q < 4; ++q) CHECK(words[q][k] == expected[q]);
    }
  }
}
#endif

TEST_CASE("batch_norm normalises in training and uses the running statistics in evaluation") {
  local_schedule graph(random_graph(200, 2, 17));
  matrixd x = random_matrix<double>(200, 3, 18);
  x.col(1) = x.col(1) * 5.0 + matrixd::Constant(200, 1, 1e6);  // large offset: needs two passes
  batch_norm<double> l(3, {.momentum = 0.5});
  parameter_store<double> store;
  l.declare(store);
  store.allocate();
  store.initialise(1);
  REQUIRE(store.size() == 2);
  matrixd y;
  l.forward(graph, {}, x, y);
  CHECK(y.colwise().mean().cwiseAbs().maxCoeff() < 1e-9);
  const row_vector<double> var = (y.rowwise() - y.colwise().mean()).array().square().colwise().mean();
  CHECK((var.array() - 1).abs().maxCoeff() < 1e-3);  // 1 up to epsilon
  const double mean1 = x.col(1).mean();
  CHECK(l.running_mean()[1] == doctest::Approx(0.5 * mean1));
  const double unbiased = (x.col(1).array() - mean1).square().sum() / 199.0;
  CHECK(l.running_var()[1] == doctest::Approx(0.5 + 0.5 * unbiased));

  matrixd ye;
  l.forward(graph, layer_context{.training = false}, x, ye);
  const double expected =
      (x(7, 1) - l.running_mean()[1]) / std::sqrt(l.running_var()[1] + 1e-5);
  CHECK(ye(7, 1) == doctest::Approx(expected));
}

// ---------------------------------------------------------------------------------------------
#include "sar/nn/loss.hpp"
#include "sar/nn/metrics.hpp"

TEST_CASE("softmax cross-entropy: value, gradient vs central differences, masking, stability") {
  const matrixd logits = random_matrix<double>(12, 5, 19) * 3.0;
  std::vector<std::int32_t> labels(12);
  std::vector<node_split> split(12, node_split::valid);
  for (int i = 0; i < 12; ++i) {
    labels[i] = (i * 7) % 5;
    if (i % 3 != 1) split[i] = node_split::train;
  }
  labels[1] = -1;  // unselected nodes may be unlabelled
  const node_selection sel{split, node_split::train};
  const double normaliser = 20.0;  // a "global" count larger than the local one
  CHECK(sel.count(12) == 8);
  matrixd d;
  const double loss = softmax_cross_entropy(logits, labels, sel, normaliser, d);
  double expected = 0;
  for (int i = 0; i < 12; ++i)
    if (split[i] == node_split::train)
      expected += -std::log(std::exp(logits(i, labels[i])) / logits.row(i).array().exp().sum());
  CHECK(loss == doctest::Approx(expected / normaliser).epsilon(1e-12));
  const double h = 1e-6;
  double worst = 0;
  for (Eigen::Index k = 0; k < logits.size(); ++k) {
    matrixd lp = logits, lm = logits, dummy;
    lp.data()[k] += h;
    lm.data()[k] -= h;
    const double numeric = (softmax_cross_entropy(lp, labels, sel, normaliser, dummy) -
                            softmax_cross_entropy(lm, labels, sel, normaliser, dummy)) /
                           (2 * h);
    worst = std::max(worst, std::abs(numeric - d.data()[k]));
  }
  CHECK(worst < 1e-8);
  CHECK(d.row(1).isZero());
  CHECK(std::abs(d.row(0).sum()) < 1e-15);  // softmax - onehot sums to 0

  matrixd huge = logits * 1e4;  // exp would overflow without log-sum-exp
  const double big = softmax_cross_entropy(huge, labels, sel, normaliser, d);
  CHECK(std::isfinite(big));
  CHECK(d.allFinite());

  labels[0] = 5;
  CHECK_THROWS_AS(softmax_cross_entropy(logits, labels, sel, normaliser, d), invalid_argument);
  labels[0] = 0;
  matrixd bad = logits;
  bad(0, 2) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(softmax_cross_entropy(bad, labels, sel, normaliser, d), numeric_error);
}

TEST_CASE("accuracy counts correct arg-max over the selected nodes") {
  matrixd logits(4, 3);
  logits << 1, 2, 0,  //
      5, 1, 1,        //
      0, 0, 3,        //
      2, 2, 1;        // tie: first wins
  const std::vector<std::int32_t> labels{1, 1, 2, 0};
  const std::vector<node_split> split{node_split::train, node_split::train, node_split::test,
                                      node_split::train};
  const auto a = accuracy(logits, labels, node_selection{split, node_split::train});
  CHECK(a.correct == 2);
  CHECK(a.total == 3);
  const auto all = accuracy(logits, labels, node_selection{});
  CHECK(all.correct == 3);
  CHECK(all.total == 4);
}

namespace {
/// Largest difference between `analytic` and central differences of loss(outputs) over every
/// entry of outputs.
template <class Loss>
double worst_gradient_error(const matrixd& outputs, const matrixd& analytic, Loss&& loss) {
  const double h = 1e-6;
  double worst = 0;
  for (Eigen::Index k = 0; k < outputs.size(); ++k) {
    matrixd plus = outputs, minus = outputs;
    plus.data()[k] += h;
    minus.data()[k] -= h;
    worst = std::max(worst, std::abs((loss(plus) - loss(minus)) / (2 * h) - analytic.data()[k]));
  }
  return worst;
}
}  // namespace

TEST_CASE("mean squared error: value, gradient vs central differences, weights, masking") {
  const matrixd outputs = random_matrix<double>(10, 3, 23);
  const matrixd targets = random_matrix<double>(10, 3, 29) * 2.0;
  std::vector<node_split> split(10, node_split::train);
  split[2] = split[7] = node_split::test;
  const node_selection sel{split, node_split::train};
  const std::vector<double> weights{1.0, 0.5, 2.0};
  const double normaliser = 30.0;
  matrixd d;
  const double loss = mean_squared_error(outputs, targets, sel, normaliser, d, weights);
  double expected = 0;
  for (int i = 0; i < 10; ++i)
    if (split[i] == node_split::train)
      for (int k = 0; k < 3; ++k)
        expected += weights[k] * std::pow(outputs(i, k) - targets(i, k), 2);
  CHECK(loss == doctest::Approx(expected / normaliser).epsilon(1e-12));
  matrixd dummy;
  CHECK(worst_gradient_error(outputs, d, [&](const matrixd& o) {
          return mean_squared_error(o, targets, sel, normaliser, dummy, weights);
        }) < 1e-8);
  CHECK(d.row(2).isZero());
  // Float targets with double outputs; unweighted is weight 1.
  const matrixf float_targets = targets.cast<float>();
  const double unweighted = mean_squared_error(outputs, float_targets, sel, normaliser, d);
  CHECK(unweighted > 0);

  CHECK_THROWS_AS(mean_squared_error(outputs, matrixd(targets.leftCols(2)), sel, normaliser, d),
                  invalid_argument);
  const std::vector<double> negative{1.0, -1.0, 1.0};
  CHECK_THROWS_AS(mean_squared_error(outputs, targets, sel, normaliser, d, negative),
                  invalid_argument);
  matrixd bad = targets;
  bad(4, 1) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS(mean_squared_error(outputs, bad, sel, normaliser, d),
                       doctest::Contains("row 4"), numeric_error);
  bad(4, 1) = 0;
  bad(2, 0) = std::numeric_limits<double>::quiet_NaN();  // not selected: ignored
  CHECK(std::isfinite(mean_squared_error(outputs, bad, sel, normaliser, d)));
}

TEST_CASE("binary cross-entropy with logits: value, gradient, stability, multi-hot checks") {
  const matrixd logits = random_matrix<double>(9, 4, 31) * 4.0;
  matrixd targets(9, 4);
  for (Eigen::Index i = 0; i < 9; ++i)
    for (Eigen::Index k = 0; k < 4; ++k) targets(i, k) = (i + 2 * k) % 3 == 0 ? 1 : 0;
  std::vector<node_split> split(9, node_split::train);
  split[5] = node_split::valid;
  const node_selection sel{split, node_split::train};
  const double normaliser = 32.0;
  matrixd d;
  const double loss = binary_cross_entropy_with_logits(logits, targets, sel, normaliser, d);
  double expected = 0;
  for (int i = 0; i < 9; ++i)
    if (i != 5)
      for (int k = 0; k < 4; ++k) {
        const double p = 1 / (1 + std::exp(-logits(i, k)));
        expected -= targets(i, k) * std::log(p) + (1 - targets(i, k)) * std::log(1 - p);
      }
  CHECK(loss == doctest::Approx(expected / normaliser).epsilon(1e-12));
  matrixd dummy;
  CHECK(worst_gradient_error(logits, d, [&](const matrixd& z) {
          return binary_cross_entropy_with_logits(z, targets, sel, normaliser, dummy);
        }) < 1e-8);
  CHECK(d.row(5).isZero());
  const double big = binary_cross_entropy_with_logits(matrixd(logits * 1e4), targets, sel,
                                                      normaliser, d);
  CHECK(std::isfinite(big));
  CHECK(d.allFinite());

  matrixd bad = targets;
  bad(3, 2) = 0.5;
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(logits, bad, sel, normaliser, d),
                       doctest::Contains("node 3"), invalid_argument);
  bad(3, 2) = 1;
  bad(5, 0) = 7;  // not selected
  CHECK_NOTHROW(binary_cross_entropy_with_logits(logits, bad, sel, normaliser, d));
  matrixd nan_logits = logits;
  nan_logits(0, 0) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(nan_logits, targets, sel, normaliser, d),
                  numeric_error);
}

TEST_CASE("regression metrics: RMSE, MAE, R^2 as scikit-learn defines them; sums add up") {
  matrixd targets(6, 2), outputs(6, 2);
  targets << 1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60;
  outputs << 1.5, 12, 2, 18, 2.5, 30, 4, 41, 6, 50, 9, 0;
  std::vector<node_split> split(6, node_split::test);
  split[5] = node_split::train;  // not counted
  const node_selection sel{split, node_split::test};
  const regression_sums r = regression_metrics(outputs, targets, sel);
  CHECK(r.count() == 5);
  // Hand-computed over rows 0-4: errors (0.5, 2), (0, -2), (-0.5, 0), (0, 1), (1, 0).
  CHECK(r.rmse() == doctest::Approx(std::sqrt((0.25 + 4 + 4 + 0.25 + 1 + 1) / 10.0)));
  CHECK(r.mae() == doctest::Approx((0.5 + 2 + 2 + 0.5 + 1 + 1) / 10.0));
  // Per output: SST_0 = 10, SSE_0 = 1.5; SST_1 = 1000, SSE_1 = 9.
  CHECK(r.r2() == doctest::Approx(((1 - 1.5 / 10) + (1 - 9.0 / 1000)) / 2));
  // Sums of two halves (two "ranks") give the same metrics, also with a shift.
  const std::vector<double> shift{2.0, 25.0};
  regression_sums whole = regression_metrics(outputs, targets, sel, shift);
  CHECK(whole.r2() == doctest::Approx(r.r2()).epsilon(1e-9));
  std::vector<node_split> first = split, second = split;
  for (int i = 0; i < 6; ++i) (i < 3 ? second : first)[i] = node_split::none;
  regression_sums a =
      regression_metrics(outputs, targets, node_selection{first, node_split::test}, shift);
  const regression_sums b =
      regression_metrics(outputs, targets, node_selection{second, node_split::test}, shift);
  for (std::size_t j = 0; j < a.sums.size(); ++j) a.sums[j] += b.sums[j];
  CHECK(a.rmse() == doctest::Approx(r.rmse()));
  CHECK(a.r2() == doctest::Approx(r.r2()).epsilon(1e-9));
  // Constant targets: no R^2; no nodes: NaN everywhere.
  const regression_sums none =
      regression_metrics(outputs, targets, node_selection{split, node_split::valid});
  CHECK(std::isnan(none.rmse()));
  CHECK(std::isnan(none.r2()));
}

TEST_CASE("multi-label metrics: micro-F1 at logit 0 and ROC-AUC from histograms") {
  matrixd logits(6, 2), targets(6, 2);
  logits << 2.0, -1.0, -0.5, 3.0, 1.0, 0.5, -2.0, -3.0, 0.25, 1.5, -1.5, -0.25;
  targets << 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0;
  const multilabel_sums m = multilabel_metrics(logits, targets, node_selection{});
  // Predictions z > 0: label 0 rows 0, 2, 4; label 1 rows 1, 2, 4.
  // tp: (0,0) (4,0) (1,1) (2,1) (4,1) = 5; fp: (2,0) = 1; fn: (5,0) = 1.
  CHECK(m.sums[0] == 5);
  CHECK(m.sums[1] == 1);
  CHECK(m.sums[2] == 1);
  CHECK(m.micro_f1() == doctest::Approx(10.0 / 12.0));
  // Label 0: positives {2, 0.25, -1.5}, negatives {-0.5, 1, -2}: 2 ranks above 3 negatives,
  // 0.25 above 2, -1.5 above 1: 6 pairs of 9.
  // Label 1: positives {3, 0.5, 1.5}, negatives {-1, -3, -0.25}: 9 of 9.
  CHECK(m.roc_auc() == doctest::Approx((6.0 / 9 + 1.0) / 2));
  // Ties share a bin: half a pair.
  matrixd tied(2, 1), tied_targets(2, 1);
  tied << 0.5, 0.5;
  tied_targets << 1, 0;
  CHECK(multilabel_metrics(tied, tied_targets, node_selection{}).roc_auc() == doctest::Approx(0.5));
  // A label without negatives is left out of the average; none left: NaN.
  matrixd ones = matrixd::Ones(2, 1);
  CHECK(std::isnan(multilabel_metrics(tied, ones, node_selection{}).roc_auc()));
  matrixd bad = targets;
  bad(1, 1) = 2;
  CHECK_THROWS_WITH_AS(multilabel_metrics(logits, bad, node_selection{}),
                       doctest::Contains("node 1"), invalid_argument);
  CHECK_THROWS_AS(multilabel_metrics(logits, targets, node_selection{}, 1), invalid_argument);
}

// ---------------------------------------------------------------------------------------------
#include "sar/optim/adam.hpp"
#include "sar/optim/sgd.hpp"

namespace {
/// Two parameters: "w" (group 0, 1 x 2) and "b" (group 1, 1 x 1).
parameter_store<double> small_store() {
  parameter_store<double> s;
  s.declare({.name = "w", .rows = 1, .cols = 2, .init = init_kind::zeros, .group = 0});
  s.declare({.name = "b", .rows = 1, .cols = 1, .init = init_kind::zeros, .group = 1});
  s.allocate();
  s.value(0) << 1.0, -2.0;
  s.value(1) << 0.5;
  s.grad(0) << 0.1, 0.2;
  s.grad(1) << -0.3;
  return s;
}
}  // namespace

TEST_CASE("sgd: plain, momentum and Nesterov steps by hand, decay per group") {
  {
    auto s = small_store();
    sgd<double> opt({.learning_rate = 0.1, .weight_decay = {0.01}});
    opt.step(s);
    // w: g = 0.1 + 0.01*1 = 0.11 -> 1 - 0.011; g = 0.2 + 0.01*(-2) = 0.18 -> -2.018
    CHECK(s.value(0)(0, 0) == doctest::Approx(0.989).epsilon(1e-14));
    CHECK(s.value(0)(0, 1) == doctest::Approx(-2.018).epsilon(1e-14));
    CHECK(s.value(1)(0, 0) == doctest::Approx(0.53).epsilon(1e-14));  // group 1: no decay
  }
  {
    auto s = small_store();
    sgd<double> opt({.learning_rate = 0.1, .momentum = 0.9, .weight_decay = {}});
    opt.step(s);  // v = g
    CHECK(s.value(0)(0, 0) == doctest::Approx(0.99));
    opt.step(s);  // v = 0.9 * 0.1 + 0.1 = 0.19
    CHECK(s.value(0)(0, 0) == doctest::Approx(0.99 - 0.019).epsilon(1e-14));
    CHECK(opt.get_state().steps == 2);
  }
  {
    auto s = small_store();
    sgd<double> opt({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = {}});
    opt.step(s);  // v = 0.1; update = g + 0.9 v = 0.19
    CHECK(s.value(0)(0, 0) == doctest::Approx(1 - 0.019).epsilon(1e-14));
  }
  CHECK_THROWS_AS(sgd<double>({.nesterov = true, .weight_decay = {}}), invalid_argument);
}

TEST_CASE("adam and adamw: two steps by hand") {
  const auto expected_adam = [](double w, double g, double lr, double decay, bool decoupled,
                                int steps) {
    double m = 0, v = 0;
    for (int t = 1; t <= steps; ++t) {
      double gt = g;
      if (decoupled) w -= lr * decay * w;
      else gt += decay * w;
      m = 0.9 * m + 0.1 * gt;
      v = 0.999 * v + 0.001 * gt * gt;
      const double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.999, t));
      w -= lr * mhat / (std::sqrt(vhat) + 1e-8);
    }
    return w;
  };
  {
    auto s = small_store();
    adam<double> opt({.learning_rate = 0.01, .weight_decay = {0.1, 0.0}});
    opt.step(s);
    // First step of Adam moves every value by about lr * sign(g).
    CHECK(s.value(1)(0, 0) == doctest::Approx(0.5 + 0.01).epsilon(1e-6));
    opt.step(s);
    CHECK(s.value(0)(0, 0) == doctest::Approx(expected_adam(1.0, 0.1, 0.01, 0.1, false, 2)));
    CHECK(s.value(0)(0, 1) == doctest::Approx(expected_adam(-2.0, 0.2, 0.01, 0.1, false, 2)));
    CHECK(s.value(1)(0, 0) == doctest::Approx(expected_adam(0.5, -0.3, 0.01, 0.0, false, 2)));
    CHECK(opt.get_state().m.size() == static_cast<std::size_t>(s.total_size()));
  }
  {
    auto s = small_store();
    adamw<double> opt({.learning_rate = 0.01, .weight_decay = {0.1}});
    opt.step(s);
    opt.step(s);
    CHECK(s.value(0)(0, 0) == doctest::Approx(expected_adam(1.0, 0.1, 0.01, 0.1, true, 2)));
    CHECK(s.value(0)(0, 0) != doctest::Approx(expected_adam(1.0, 0.1, 0.01, 0.1, false, 2)));
    CHECK(s.value(1)(0, 0) == doctest::Approx(expected_adam(0.5, -0.3, 0.01, 0.0, true, 2)));
  }
}
