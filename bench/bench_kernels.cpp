// Kernel roofline check in one run: for each thread count (each inside its own
// tbb::task_arena) it measures
//   triad   a[i] = b[i] + s * c[i] on float arrays far larger than the last-level cache
//           (STREAM convention: bytes = 3 arrays, no write-allocate counted), the arrays
//           first-touched in parallel with the partitioning the timed loop uses;
//           like the SpMM operands, advised as huge-page backed as the library's large
//           buffers are (sar/core/memory.hpp);
//   sgemm   sar::dense_product<float> (what the layers call: the row_gemm micro-kernels with
//           AVX-512F or AVX2 + FMA, else Eigen's GEMM per row chunk) on the layers' tall-skinny shape
//           (rows x 128 times 128 x 128) and a square n^3, GFLOP/s;
//   spmm    sar::spmm_add(block, x, out) (out += A x, the forward of a layer) and
//           sar::spmm_add_transposed(block, dy, dx) (the backward) on the planted-partition
//           graph with self-loops (GCN's A + I), GB/s with bytes = CSR arrays (offsets +
//           columns, 8 bytes each) + gathered rows (edges x width x 4) + written rows
//           (rows x width x 4), and that bandwidth as a fraction of the same thread count's
//           triad; the forward product also on operands without the huge-page advice, and
//           the median over rounds of its time over the advised one's.
// Every figure is the median of --repeats timed runs after one warm-up run. Triad and SpMM
// runs are interleaved (one of each per round), so a busy shared machine slows both alike;
// the fraction of triad is the median over rounds of the round's SpMM over the round's triad
// bandwidth, and the load average is recorded with the results. It also checks that the SpMM
// results are bitwise identical for every thread count (the JSON holds a hash of them, to compare
// builds). Prints a table and, with --json-out, the same as JSON (with the machine: nproc,
// CPU model, caches).
//
//   bench-kernels --threads 1,2 --width 128 --repeats 15 --json-out kernels.json
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "bench_common.hpp"
#include "sar/core/memory.hpp"
#include "sar/graph/builders.hpp"
#include "sar/graph/generators.hpp"
#include "sar/kernels/dense.hpp"
#include "sar/kernels/spmm.hpp"
#include "sar/version.hpp"

namespace {

using bench::median;
using bench::median_seconds;
using bench::time_once;


std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string load_average() { return read_first_line("/proc/loadavg"); }

nlohmann::json machine_info() {
  nlohmann::json m;
  m["nproc"] = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      m["cpu_model"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  nlohmann::json caches = nlohmann::json::array();
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    const std::string level = read_first_line(dir + "/level");
    if (level.empty()) break;
    caches.push_back({{"level", std::stoi(level)},
                      {"type", read_first_line(dir + "/type")},
                      {"size", read_first_line(dir + "/size")},
                      {"shared_cpus", read_first_line(dir + "/shared_cpu_list")}});
  }
  m["caches"] = caches;
  return m;
}

/// a = b + s c on float arrays far larger than the cache, allocated and first-touched inside
/// the caller's arena with the same static partitioning as the timed loop.
class triad {
 public:
  explicit triad(std::size_t elements)
      : n_(elements), a_(new float[n_]), b_(new float[n_]), c_(new float[n_]) {
    for (float* array : {a_.get(), b_.get(), c_.get()})  // as the library's large buffers
      sar::advise_huge_pages(array, n_ * sizeof(float));
    for_each_block([&](std::size_t i) {
      a_[i] = 0.0f;
      b_[i] = 1.0f;
      c_[i] = 2.0f;
    });
  }
  void run() {
    float* __restrict a = a_.get();
    const float* __restrict b = b_.get();
    const float* __restrict c = c_.get();
    for_each_block([=](std::size_t i) { a[i] = b[i] + 3.0f * c[i]; });
  }
  /// Bytes by the STREAM convention: three arrays, no write-allocate.
  double bytes() const { return 3.0 * static_cast<double>(n_) * sizeof(float); }
  bool correct() const { return a_[n_ / 2] == 7.0f; }

 private:
  template <class F>
  void for_each_block(F f) {
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, n_, 1 << 16),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) f(i);
        },
        tbb::static_partitioner());
  }
  std::size_t n_;
  std::unique_ptr<float[]> a_, b_, c_;
};

/// GFLOP/s of y = x w through sar::dense_product for x: m x k, w: k x n.
double sgemm_gflops(Eigen::Index m, Eigen::Index k, Eigen::Index n, int repeats) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  sar::matrixf x(m, k), w(k, n), y(m, n);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = u(gen);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = u(gen);
  const double seconds =
      median_seconds(repeats, [&] { sar::dense_product<false, float>(x, w, y); });
  return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) /
         seconds / 1e9;
}

/// FNV-1a of the bits of m, to compare results between builds (hex string).
std::string hash_bits(const sar::matrixf& m) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(m.data());
  for (std::size_t i = 0; i < static_cast<std::size_t>(m.size()) * sizeof(float); ++i)
    h = (h ^ bytes[i]) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

/// Bytes one SpMM moves by the convention: CSR arrays + gathered rows + written rows.
double spmm_bytes(const sar::csr& a, Eigen::Index width) {
  const double csr_bytes = static_cast<double>(a.num_rows + 1) * sizeof(sar::edge_t) +
                           static_cast<double>(a.num_edges()) * sizeof(sar::node_t);
  const double row_bytes = static_cast<double>(width) * sizeof(float);
  return csr_bytes + static_cast<double>(a.num_edges()) * row_bytes +
         static_cast<double>(a.num_rows) * row_bytes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-kernels: triad bandwidth, SGEMM and SpMM (forward and transpose) per "
               "thread count, SpMM as a fraction of the triad bandwidth"};
  sar::node_t nodes = 200'000;
  double degree = 20;
  std::vector<int> widths{128};
  std::vector<int> threads{1, 2};
  int repeats = 11;
  std::size_t triad_mib = 256;
  Eigen::Index gemm_rows = 200'000, gemm_square = 2048;
  std::string json_out;
  app.add_option("--nodes", nodes, "planted-partition graph nodes")->capture_default_str();
  app.add_option("--degree", degree, "average degree (before self-loops)")->capture_default_str();
  app.add_option("--width", widths, "SpMM feature widths, e.g. 16,32,64,128,256")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--threads", threads, "thread counts, e.g. 1,2 (each in its own task_arena)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs per figure (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--triad-mib", triad_mib, "size of each triad array in MiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--gemm-rows", gemm_rows, "rows of the tall-skinny SGEMM (x 128 x 128)")
      ->capture_default_str();
  app.add_option("--gemm-square", gemm_square, "size of the square SGEMM (0: skip)")
      ->capture_default_str();
  app.add_option("--json-out", json_out, "write the results as JSON to this file");
  app.set_version_flag("--version", "bench-kernels (sar " SAR_VERSION_STRING ")");
  CLI11_PARSE(app, argc, argv);

  try {
    for (int t : threads)
      if (t < 1) throw std::invalid_argument("--threads: every count must be >= 1");
    for (int w : widths)
      if (w < 1) throw std::invalid_argument("--width: every width must be >= 1");

    const sar::csr graph = bench::planted_graph(nodes, degree);
    const sar::csr transposed = sar::transpose(graph);
    sar::graph_block block;
    block.edges = &graph;
    block.transposed = &transposed;
    // Kept tilings, as a schedule keeps them: the warm-up round makes them, the timed ones
    // measure the products a training epoch runs.
    sar::spmm_tile_cache edge_tiles, transposed_tiles;
    block.edge_tiles = &edge_tiles;
    block.transposed_tiles = &transposed_tiles;

    nlohmann::json log;
    log["machine"] = machine_info();
    log["graph"] = {{"generator", "planted"},
                    {"nodes", graph.num_rows},
                    {"edges_with_self_loops", graph.num_edges()},
                    {"average_degree_option", degree}};
    log["repeats"] = repeats;
    log["statistic"] =
        "median of repeats after one warm-up run; triad and spmm interleaved, one of each per "
        "round; fraction_of_triad: median over rounds of spmm over triad bandwidth";
    log["triad_array_mib"] = triad_mib;
    log["results"] = nlohmann::json::array();
    std::printf("%s, %u hardware threads, load average %s\n",
                log["machine"].value("cpu_model", std::string("?")).c_str(),
                std::thread::hardware_concurrency(), load_average().c_str());
    std::printf("graph: planted, %lld nodes, %lld edges with self-loops; median of %d runs\n\n",
                static_cast<long long>(graph.num_rows),
                static_cast<long long>(graph.num_edges()), repeats);
    std::printf("%7s %-28s %10s %12s %10s\n", "threads", "kernel", "ms", "rate", "of triad");

    // First thread count's SpMM outputs, per width: later thread counts must match bitwise.
    std::vector<sar::matrixf> reference_forward(widths.size()), reference_backward(widths.size());
    bool identical = true;
    for (int t : threads) {
      tbb::task_arena arena(t);
      nlohmann::json entry;
      entry["threads"] = t;
      arena.execute([&] {
        entry["load_average_before"] = load_average();
        const double tall = sgemm_gflops(gemm_rows, 128, 128, repeats);
        entry["sgemm_tall_gflops"] = tall;
        std::printf("%7d %-28s %10s %6.1f GFLOP/s\n", t,
                    ("sgemm " + std::to_string(gemm_rows) + "x128x128").c_str(), "", tall);
        if (gemm_square > 0) {
          const double square =
              sgemm_gflops(gemm_square, gemm_square, gemm_square, std::min(repeats, 5));
          entry["sgemm_square_gflops"] = square;
          entry["sgemm_square_n"] = gemm_square;
          std::printf("%7d %-28s %10s %6.1f GFLOP/s\n", t,
                      ("sgemm " + std::to_string(gemm_square) + "^3").c_str(), "", square);
        }

        // Triad and SpMM, interleaved: round r runs the triad once and every product once.
        triad stream(triad_mib * 1024 * 1024 / sizeof(float));
        std::vector<sar::matrixf> xs, outs, xs_small_pages, outs_small_pages;
        for (const int width : widths) {
          // Allocated as the layers allocate theirs (huge-page backed, sar/core/memory.hpp).
          sar::huge_page_resize(xs.emplace_back(), graph.num_cols, width);
          bench::fill_uniform(xs.back(), 11);
          sar::huge_page_resize(outs.emplace_back(), graph.num_rows, width);
          outs.back().setZero();
          // The same product on plainly allocated copies (4 KiB pages where THP is in
          // "madvise" mode): what the huge pages buy.
          xs_small_pages.push_back(xs.back());
          outs_small_pages.push_back(outs.back());
        }
        std::vector<double> triad_times;
        std::vector<std::vector<double>> forward_times(widths.size()),
            backward_times(widths.size()), small_pages_times(widths.size());
        for (int round = -1; round < repeats; ++round) {  // round -1: warm-up
          const double triad_time = time_once([&] { stream.run(); });
          if (round >= 0) triad_times.push_back(triad_time);
          for (std::size_t wi = 0; wi < widths.size(); ++wi) {
            const double forward = time_once([&] { sar::spmm_add(block, xs[wi], outs[wi]); });
            const double backward =
                time_once([&] { sar::spmm_add_transposed(block, xs[wi], outs[wi]); });
            const double small_pages = time_once(
                [&] { sar::spmm_add(block, xs_small_pages[wi], outs_small_pages[wi]); });
            if (round < 0) continue;
            forward_times[wi].push_back(forward);
            backward_times[wi].push_back(backward);
            small_pages_times[wi].push_back(small_pages);
          }
        }
        if (!stream.correct()) throw std::runtime_error("triad: wrong result");
        const double triad_gbs = stream.bytes() / median(triad_times) / 1e9;
        entry["triad_gbs"] = triad_gbs;
        entry["triad_gbs_best"] =
            stream.bytes() / *std::min_element(triad_times.begin(), triad_times.end()) / 1e9;
        std::printf("%7d %-28s %10.2f %9.2f GB/s\n", t, "triad", median(triad_times) * 1e3,
                    triad_gbs);

        nlohmann::json spmm = nlohmann::json::array();
        for (std::size_t wi = 0; wi < widths.size(); ++wi) {
          const Eigen::Index width = widths[wi];
          const double bytes = spmm_bytes(graph, width);
          nlohmann::json w;
          w["width"] = width;
          w["bytes"] = bytes;
          for (const auto& [name, times] :
               {std::pair<const char*, const std::vector<double>&>{"forward", forward_times[wi]},
                {"transpose", backward_times[wi]}}) {
            const double seconds = median(times);
            const double gbs = bytes / seconds / 1e9;
            // Fraction of triad: the median over rounds of this round's SpMM bandwidth over
            // this round's triad bandwidth (robust to load that changes between rounds).
            std::vector<double> fractions;
            for (std::size_t r = 0; r < times.size(); ++r)
              fractions.push_back(bytes * triad_times[r] / (stream.bytes() * times[r]));
            const double fraction = median(fractions);
            w[name] = {{"ms", seconds * 1e3},
                       {"ms_best", *std::min_element(times.begin(), times.end()) * 1e3},
                       {"gbs", gbs},
                       {"fraction_of_triad", fraction}};
            std::printf("%7d %-28s %10.2f %9.2f GB/s %9.0f%%\n", t,
                        ("spmm " + std::string(name) + " w=" + std::to_string(width)).c_str(),
                        seconds * 1e3, gbs, 100.0 * fraction);
          }

          std::vector<double> huge_page_speedups;
          for (std::size_t r = 0; r < small_pages_times[wi].size(); ++r)
            huge_page_speedups.push_back(small_pages_times[wi][r] / forward_times[wi][r]);
          w["forward_small_pages"] = {{"ms", median(small_pages_times[wi]) * 1e3},
                                      {"huge_page_speedup", median(huge_page_speedups)}};
          std::printf("%7d %-28s %10.2f   (huge pages: %.2fx faster)\n", t,
                      ("spmm forward w=" + std::to_string(width) + " 4K pages").c_str(),
                      median(small_pages_times[wi]) * 1e3, median(huge_page_speedups));

          // Determinism across thread counts: one product from zero, compared bitwise.
          const sar::matrixf& x = xs[wi];
          sar::matrixf fwd = sar::matrixf::Zero(graph.num_rows, width), bwd = fwd;
          sar::spmm_add(block, x, fwd);
          sar::spmm_add_transposed(block, x, bwd);
          w["forward_result_hash"] = hash_bits(fwd);
          w["transpose_result_hash"] = hash_bits(bwd);
          if (reference_forward[wi].size() == 0) {
            reference_forward[wi] = std::move(fwd);
            reference_backward[wi] = std::move(bwd);
          } else if (fwd != reference_forward[wi] || bwd != reference_backward[wi]) {
            identical = false;
          }
          spmm.push_back(w);
        }
        entry["spmm"] = spmm;
        entry["load_average_after"] = load_average();
      });
      log["results"].push_back(entry);
      std::fflush(stdout);
    }
    log["spmm_bitwise_identical_across_threads"] = identical;
    std::printf("\nspmm results bitwise identical for every thread count: %s\n",
                identical ? "yes" : "NO");

    // Speed-ups relative to the first thread count.
    const auto& first = log["results"].front();
    for (auto& entry : log["results"]) {
      nlohmann::json speedup;
      for (std::size_t wi = 0; wi < entry["spmm"].size(); ++wi)
        for (const char* name : {"forward", "transpose"})
          speedup[name + std::string(" w=") + std::to_string(widths[wi])] =
              first["spmm"][wi][name]["ms"].get<double>() /
              entry["spmm"][wi][name]["ms"].get<double>();
      speedup["triad"] = entry["triad_gbs"].get<double>() / first["triad_gbs"].get<double>();
      entry["speedup_vs_first"] = speedup;
      if (&entry != &first) {
        std::printf("speed-up %d -> %d threads:", first["threads"].get<int>(),
                    entry["threads"].get<int>());
        for (const auto& [key, value] : speedup.items())
          std::printf("  %s %.2fx", key.c_str(), value.get<double>());
        std::printf("\n");
      }
    }
    if (!json_out.empty()) std::ofstream(json_out) << log.dump(2) << '\n';
    return identical ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "bench-kernels: " << e.what() << '\n';
    return 1;
  }
}
