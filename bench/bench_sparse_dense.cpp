// The sparse first-layer products against their bound (issue 58): on a dataset's sparse input
// features x (n x p, nnz stored entries) and a dense width q it times
//   forward    sar::sparse_product:      y = x w       (w: p x q, y: n x q)
//   transpose  sar::transposed_product:  g = x^T d     (d: n x q, g: p x q)
// per thread count (each inside its own tbb::task_arena), and the two bounds of one product:
//   fma    nnz x q multiply-adds at the measured peak FMA rate of the same thread count (a loop
//          of independent vector FMAs on registers, every lane counted);
//   bytes  what one product must move at least: the sparse rows once (4-byte column and value
//          per entry, 8-byte offset per row), the dense operand once (p x q or n x q floats)
//          and the result once (n x q or p x q floats), at the measured triad bandwidth of the
//          same thread count (STREAM convention, as bench-kernels).
// The bound is the larger of the two; the table gives each product's median time over it.
// "rows ms" is what no kernel that keeps w (or d) in the cache can beat: each stored entry
// brings a q-float row through the cache (read for x w; read and written back for x^T d,
// which adds into rows of the result), at the measured rate of vector reads from an L2-sized
// array (this figure counts each entry's row, not the bytes that must come from memory).
// It also checks that both products give bitwise the same result for every thread count.
// Every time is the median of --repeats runs after one warm-up run.
//
// Built with the benchmarks (meson configure build -Dbenchmarks=true), e.g.
//   build/bench/bench-sparse-dense --dataset ../shared/data/citeseer --widths 16,64,128
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "bench_common.hpp"
#include "sar/graph/io/load.hpp"
#include "sar/kernels/row_gemm.hpp"
#include "sar/kernels/sparse_dense.hpp"

namespace {

using bench::median;
using bench::median_seconds;
using bench::time_once;


#if SAR_ROW_GEMM
/// Multiply-adds per second of `threads` threads, each running 16 independent chains of vector
/// FMAs on registers (every lane counted): the peak the sparse products could reach.
double peak_fma_rate(int threads) {
  using simd = sar::detail::gemm_simd;
  constexpr long iterations = 20'000'000;
  std::vector<float> sink(static_cast<std::size_t>(threads) * simd::lanes);
  const double seconds = time_once([&] {
    tbb::parallel_for(0, threads, [&](int t) {
      const float one = 1.0f, tiny = 1e-7f;
      const simd::vector a = simd::broadcast(&tiny), b = simd::broadcast(&one);
      // 16 chains (named, so that they stay in registers): more than latency x FMA ports.
      simd::vector c0 = b, c1 = b, c2 = b, c3 = b, c4 = b, c5 = b, c6 = b, c7 = b, c8 = b,
                   c9 = b, c10 = b, c11 = b, c12 = b, c13 = b, c14 = b, c15 = b;
      for (long i = 0; i < iterations; ++i) {
        c0 = simd::fma(a, b, c0), c1 = simd::fma(a, b, c1), c2 = simd::fma(a, b, c2);
        c3 = simd::fma(a, b, c3), c4 = simd::fma(a, b, c4), c5 = simd::fma(a, b, c5);
        c6 = simd::fma(a, b, c6), c7 = simd::fma(a, b, c7), c8 = simd::fma(a, b, c8);
        c9 = simd::fma(a, b, c9), c10 = simd::fma(a, b, c10), c11 = simd::fma(a, b, c11);
        c12 = simd::fma(a, b, c12), c13 = simd::fma(a, b, c13), c14 = simd::fma(a, b, c14);
        c15 = simd::fma(a, b, c15);
        // Every chain kept: none folded into another.
        asm volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6),
                     "+v"(c7));
        asm volatile("" : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11), "+v"(c12), "+v"(c13),
                     "+v"(c14), "+v"(c15));
      }
      simd::vector sum = c0;
      for (const simd::vector c : {c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14,
                                   c15})
        sum = simd::add(sum, c);
      simd::store(sink.data() + static_cast<std::size_t>(t) * simd::lanes, sum);
    }, tbb::static_partitioner());
  });
  return static_cast<double>(threads) * iterations * 16.0 * simd::lanes / seconds;
}

/// Bytes per second at which `threads` threads each read a float array of `bytes` (smaller
/// than the L2 cache, so after the first pass it is read from there) over and over with
/// vector loads: the rate at which a gather can bring rows that are not in L1.
double cache_read_bandwidth(int threads, std::size_t bytes) {
  using simd = sar::detail::gemm_simd;
  constexpr int passes = 2000;
  const std::size_t n = bytes / sizeof(float);
  std::vector<std::vector<float>> arrays(static_cast<std::size_t>(threads),
                                         std::vector<float>(n, 1.0f));
  std::vector<float> sink(static_cast<std::size_t>(threads) * simd::lanes);
  const double seconds = time_once([&] {
    tbb::parallel_for(0, threads, [&](int t) {
      const float* a = arrays[static_cast<std::size_t>(t)].data();
      simd::vector s0 = simd::zero(), s1 = simd::zero(), s2 = simd::zero(), s3 = simd::zero();
      for (int pass = 0; pass < passes; ++pass)
        for (std::size_t i = 0; i + 4 * simd::lanes <= n; i += 4 * simd::lanes) {
          s0 = simd::add(s0, simd::load(a + i));
          s1 = simd::add(s1, simd::load(a + i + simd::lanes));
          s2 = simd::add(s2, simd::load(a + i + 2 * simd::lanes));
          s3 = simd::add(s3, simd::load(a + i + 3 * simd::lanes));
        }
      simd::store(sink.data() + static_cast<std::size_t>(t) * simd::lanes,
                  simd::add(simd::add(s0, s1), simd::add(s2, s3)));
    }, tbb::static_partitioner());
  });
  return static_cast<double>(threads) * passes * static_cast<double>(bytes) / seconds;
}
#endif

/// Bytes per second of a[i] = b[i] + s c[i] on three arrays of `elements` floats (STREAM
/// convention: three arrays, no write-allocate), median of `repeats` after a warm-up.
double triad_bandwidth(std::size_t elements, int repeats) {
  std::unique_ptr<float[]> a(new float[elements]), b(new float[elements]),
      c(new float[elements]);
  const auto blocks = [&](auto f) {
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, elements, 1 << 16),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) f(i);
        },
        tbb::static_partitioner());
  };
  blocks([&](std::size_t i) { a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f; });
  float* __restrict pa = a.get();
  const float* __restrict pb = b.get();
  const float* __restrict pc = c.get();
  const double seconds =
      median_seconds(repeats, [&] { blocks([=](std::size_t i) { pa[i] = pb[i] + 3 * pc[i]; }); });
  return 3.0 * static_cast<double>(elements) * sizeof(float) / seconds;
}

/// The first line of /proc/loadavg (empty if unreadable).
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line;
}

/// FNV-1a of the bits of m.
std::uint64_t hash_bits(const sar::matrixf& m) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(m.data());
  for (std::size_t i = 0; i < static_cast<std::size_t>(m.size()) * sizeof(float); ++i)
    h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-sparse-dense: the sparse first-layer products (x w, x^T d) against their "
               "FMA and bandwidth bounds, per thread count"};
  std::string dataset = "../shared/data/citeseer";
  std::vector<int> widths{16, 64, 128}, thread_counts{1, 2};
  int repeats = 31;
  std::size_t triad_mib = 256;
  app.add_option("--dataset", dataset, "dataset spec with sparse features (sar::load_dataset)");
  app.add_option("--widths", widths, "dense widths q")->delimiter(',');
  app.add_option("--threads", thread_counts, "thread counts")->delimiter(',');
  app.add_option("--repeats", repeats, "timed runs per figure (median)");
  app.add_option("--triad-mib", triad_mib, "size of each triad array in MiB");
  CLI11_PARSE(app, argc, argv);

  const sar::graph_dataset data = sar::load_dataset(dataset, {}, 0.05);
  if (!data.sparse()) {
    std::fprintf(stderr, "bench-sparse-dense: %s: features are not sparse\n", dataset.c_str());
    return 2;
  }
  const sar::sparse_rows<float>& x = data.sparse_features;
  const double nnz = static_cast<double>(x.non_zeros());
  const Eigen::Index n = x.rows(), p = x.cols();
  std::printf("%s: %lld x %lld, %.0f stored entries (%.2f%%), load %s\n", dataset.c_str(),
              static_cast<long long>(n), static_cast<long long>(p), nnz, 100 * x.density(),
              load_average().c_str());
  std::printf("%7s %5s %-9s %9s %9s %9s %9s %8s %9s %s\n", "threads", "q", "product", "ms",
              "fma ms", "bytes ms", "bound ms", "x bound", "rows ms", "bitwise");
  std::vector<std::uint64_t> first_hashes;
  for (const int threads : thread_counts) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
#if SAR_ROW_GEMM
      const double fma_rate = peak_fma_rate(threads);
      const double l2_rate = cache_read_bandwidth(threads, std::size_t{1} << 20);
#else
      const double fma_rate = 0, l2_rate = 0;
#endif
      const double bandwidth = triad_bandwidth(triad_mib * 1024 * 1024 / sizeof(float), 5);
      std::printf("%7d peak %.1f GFMA/s, triad %.1f GB/s, L2 reads %.1f GB/s\n", threads,
                  fma_rate / 1e9, bandwidth / 1e9, l2_rate / 1e9);
      std::size_t h = 0;
      for (const int q : widths) {
        sar::matrixf w(p, q), d(n, q), y(n, q), g(p, q);
        bench::fill_uniform(w, 3);
        bench::fill_uniform(d, 4);
        const double sparse_bytes = nnz * 8.0 + static_cast<double>(n + 1) * 8.0;
        const double forward_bytes = sparse_bytes + static_cast<double>(p + n) * q * 4.0;
        const double fma_seconds = fma_rate > 0 ? nnz * q / fma_rate : 0;
        // The rows an entry brings through the cache: q floats read (x w gathers a row of
        // w), or read and written (x^T d adds into a row of the result).
        const double row_bytes = nnz * q * 4.0;
        const auto row = [&](const char* name, double seconds, double bytes, double rows,
                             const sar::matrixf& result) {
          const double bound = std::max(fma_seconds, bytes / bandwidth);
          const std::uint64_t hash = hash_bits(result);
          if (first_hashes.size() <= h) first_hashes.push_back(hash);
          const bool same = first_hashes[h++] == hash;
          std::printf("%7d %5d %-9s %9.3f %9.3f %9.3f %9.3f %8.2f %9.3f %s\n", threads, q,
                      name, seconds * 1e3, fma_seconds * 1e3, bytes / bandwidth * 1e3,
                      bound * 1e3, seconds / bound, l2_rate > 0 ? rows / l2_rate * 1e3 : 0.0,
                      same ? "same" : "DIFFERENT");
        };
        const double forward = median_seconds(
            repeats, [&] { sar::sparse_product<float>(x, w, y); });
        row("forward", forward, forward_bytes, row_bytes, y);
        const double transpose = median_seconds(
            repeats, [&] { sar::transposed_product<float>(x, d, g); });
        row("transpose", transpose, forward_bytes, 2 * row_bytes, g);
      }
    });
  }
  return 0;
}
