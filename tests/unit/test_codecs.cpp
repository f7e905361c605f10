// Pieces of the exchange engine on their own, without MPI. The lossy wire codecs
// (sar/distributed/codecs.hpp): packing round trips at widths that are not multiples of 8 or
// 64, constant rows, code bounds, wire sizes, unbiasedness and variance of stochastic
// rounding, reproducibility across thread counts, rounding to nearest even of fp16 / bf16,
// and the errors on non-finite input. The exchange policy (which calls are exact, cached,
// pipelined, stale) and the options' factories. The progress thread.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tbb/global_control.h>

#include "sar/comm/progress_thread.hpp"
#include "sar/comm/serial.hpp"
#include "sar/distributed/codecs.hpp"
#include "sar/distributed/exchange_policy.hpp"
#include "test_support.hpp"

using namespace sar;

namespace {

/// Values in [-2, 3): rows whose minimum is not 0 and whose range is not 1.
template <class T>
matrix<T> spread_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  return testing_support::random_matrix<T>(rows, cols, seed, -2, 3);
}

std::vector<node_t> iota_rows(Eigen::Index n) {
  std::vector<node_t> rows(static_cast<std::size_t>(n));
  std::iota(rows.begin(), rows.end(), node_t{0});
  return rows;
}

codec_context context(std::uint64_t epoch, std::span<const node_t> ids,
                      exchange_direction d = exchange_direction::features) {
  exchange_key key;
  key.layer = 2;
  key.call = 1;
  key.seed = 17;
  key.epoch = epoch;
  return {key, d, 3, 0, ids};
}

/// Encodes all rows of x and decodes them (through decode).
template <class T, class Codec>
matrix<T> round_trip(const Codec& codec, const matrix<T>& x, const codec_context& ctx,
                     std::vector<std::byte>* wire_out = nullptr) {
  const auto rows = iota_rows(x.rows());
  std::vector<std::byte> wire;
  codec.encode(const_rows_ref<T>(x), rows, ctx, wire);
  CHECK(wire.size() == codec.template wire_bytes<T>(x.rows(), x.cols()));
  matrix<T> scratch;
  matrix<T> out = codec.template decode<T>(wire, x.rows(), x.cols(), ctx, scratch);
  // decode_add into zeros gives the same rows.
  matrix<T> added = matrix<T>::Zero(x.rows(), x.cols());
  rows_ref<T> added_ref(added);
  codec.template decode_add<T>(wire, rows, ctx, added_ref);
  CHECK(added == out);
  if (wire_out) *wire_out = std::move(wire);
  return out;
}

template <int B, class T>
void check_stochastic_packing() {
  using codec_t = stochastic_codec<B>;
  codec_t codec;
  constexpr double L = (1 << B) - 1;
  for (Eigen::Index f : {1, 3, 7, 13, 67, 130}) {
    CAPTURE(B);
    CAPTURE(f);
    const Eigen::Index n = 9;
    const auto ids = iota_rows(n);
    // Wire bytes per row: ceil(B F / 8) codes plus m and R (bf16 each).
    CHECK(codec.template wire_bytes<T>(n, f) == static_cast<std::size_t>(n) * ((B * f + 7) / 8 + 4));

    // Rows alternating between 0 and 1 (R = 1 is exact in bf16): 0 codes to 0 and 1 to L
    // whatever the noise, so the round trip is exact and a code that overflowed its B bits
    // would corrupt its neighbour.
    matrix<T> two_level(n, f);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < f; ++j) two_level(i, j) = static_cast<T>((i + j) % 2);
    if (f > 1) CHECK(round_trip<T>(codec, two_level, context(0, ids)) == two_level);

    // Random rows: every value decodes to m + q R / L with 0 <= q <= L, within one step of x.
    const matrix<T> x = spread_matrix<T>(n, f, 100 + f);
    std::vector<std::byte> wire;
    const matrix<T> y = round_trip<T>(codec, x, context(4, ids), &wire);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double lo = x.row(i).minCoeff(), hi = x.row(i).maxCoeff();
      std::uint16_t m_bits, range_bits;
      std::memcpy(&m_bits, wire.data() + i * codec_t::row_bytes(f), 2);
      std::memcpy(&range_bits, wire.data() + i * codec_t::row_bytes(f) + 2, 2);
      const double m = float_from_bf16(m_bits), R = float_from_bf16(range_bits);
      // [m, m + R] covers the row, widened by bf16 rounding only.
      CHECK(m <= lo);
      CHECK(m >= lo - std::abs(lo) / 128);
      CHECK(m + R >= hi);
      CHECK(R <= (hi - m) * (1 + 1.0 / 128));
      if (R == 0) CHECK(y.row(i) == x.row(i));  // f = 1: a constant row
      for (Eigen::Index j = 0; j < f && R > 0; ++j) {
        const double q = (static_cast<double>(y(i, j)) - m) * L / R;
        const double on_grid = m + std::round(q) * R / L;  // up to T's rounding of m + q R / L
        CHECK(std::abs(y(i, j) - on_grid) <=
              4 * std::numeric_limits<T>::epsilon() * std::max({std::abs(m), std::abs(on_grid), R}));
        CHECK(std::round(q) >= 0);
        CHECK(std::round(q) <= L);
        CHECK(std::abs(static_cast<double>(y(i, j) - x(i, j))) <= R / L * (1 + 1e-5));
      }
    }

    // A constant row of a value bf16 holds (R = 0) decodes exactly; one it does not hold
    // decodes to the bf16 values around it.
    matrix<T> constant = matrix<T>::Zero(4, f);
    constant.row(1).setConstant(static_cast<T>(0.375));
    constant.row(2).setConstant(static_cast<T>(-7));
    constant.row(3).setConstant(static_cast<T>(0.3));
    const matrix<T> decoded = round_trip<T>(codec, constant, context(1, ids));
    CHECK(decoded.topRows(3) == constant.topRows(3));
    CHECK((decoded.row(3).array() - T(0.3)).abs().maxCoeff() <= T(0.3 / 128));
  }
}

/// The mean of `draws` decodings of one row (epochs 0 .. draws - 1 key independent noise) is
/// within 4 standard errors of x in every column; for B = 1 the per-element variance is within
/// 10% of (x - m)(m + R - x) where rounding is not nearly certain.
template <int B>
void check_unbiased() {
  CAPTURE(B);
  stochastic_codec<B> codec;
  constexpr int draws = 10000;
  constexpr Eigen::Index f = 37;
  const matrixf x = spread_matrix<float>(1, f, 5);
  const std::vector<node_t> ids = {12345};
  Eigen::ArrayXd sum = Eigen::ArrayXd::Zero(f), sum_sq = Eigen::ArrayXd::Zero(f);
  std::vector<std::byte> wire;
  for (int t = 0; t < draws; ++t) {
    const matrixf y = round_trip<float>(codec, x, context(static_cast<std::uint64_t>(t), ids), &wire);
    const Eigen::ArrayXd v = y.row(0).cast<double>().transpose().array();
    sum += v;
    sum_sq += v * v;
  }
  std::uint16_t m_bits, range_bits;
  std::memcpy(&m_bits, wire.data(), 2);
  std::memcpy(&range_bits, wire.data() + 2, 2);
  const double R = float_from_bf16(range_bits), m = float_from_bf16(m_bits);
  int variance_checked = 0;
  for (Eigen::Index j = 0; j < f; ++j) {
    CAPTURE(j);
    const double mean = sum[j] / draws, xj = x(0, j);
    const double variance = std::max(0.0, sum_sq[j] / draws - mean * mean);
    const double se = std::sqrt(variance / draws);
    CHECK(std::abs(mean - xj) <= 4 * se + 1e-6 * R);
    if (B == 1) {
      const double p = (xj - m) / R;
      if (p > 0.1 && p < 0.9) {
        const double expected = (xj - m) * (m + R - xj);
        CHECK(std::abs(variance - expected) <= 0.1 * expected);
        ++variance_checked;
      }
    }
  }
  if (B == 1) CHECK(variance_checked >= 10);
}

}  // namespace

TEST_CASE("stochastic codecs: packing, constant rows, code bounds, wire bytes") {
  check_stochastic_packing<1, float>();
  check_stochastic_packing<2, float>();
  check_stochastic_packing<4, float>();
  check_stochastic_packing<8, float>();
  check_stochastic_packing<1, double>();
  check_stochastic_packing<8, double>();
}

TEST_CASE("stochastic codecs: unbiased, and the one-bit variance is (x - m)(m + R - x)") {
  check_unbiased<1>();
  check_unbiased<2>();
  check_unbiased<4>();
  check_unbiased<8>();
}

TEST_CASE("stochastic codecs: the noise is keyed, not drawn: same bytes on 1 and 2 threads") {
  const matrixf x = spread_matrix<float>(3000, 45, 8);
  std::vector<node_t> ids(3000);
  for (std::size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<node_t>(7 * k + 3);
  stochastic_codec<2> codec;
  auto encode = [&](int threads, const codec_context& ctx) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    std::vector<std::byte> wire;
    codec.encode(const_rows_ref<float>(x), iota_rows(x.rows()), ctx, wire);
    return wire;
  };
  const auto one = encode(1, context(3, ids));
  CHECK(one == encode(2, context(3, ids)));
  CHECK(one != encode(1, context(4, ids)));  // another epoch, other noise
  CHECK(one != encode(1, context(3, ids, exchange_direction::gradients)));
}

TEST_CASE("stochastic codecs: a non-finite value throws naming layer, rank and row") {
  matrixf x = spread_matrix<float>(4, 10, 9);
  x(2, 5) = std::numeric_limits<float>::quiet_NaN();
  const std::vector<node_t> ids = {40, 41, 42, 43};
  stochastic_codec<1> codec;
  std::vector<std::byte> wire;
  try {
    codec.encode(const_rows_ref<float>(x), iota_rows(4), context(0, ids), wire);
    FAIL("no exception");
  } catch (const numeric_error& e) {
    const std::string what = e.what();
    CHECK(what.find("layer 2") != std::string::npos);
    CHECK(what.find("rank 3") != std::string::npos);
    CHECK(what.find("local row 2") != std::string::npos);
    CHECK(what.find("node 42") != std::string::npos);
  }
  x(2, 5) = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(bf16_codec{}.encode(const_rows_ref<float>(x), iota_rows(4), context(0, ids), wire),
                  numeric_error);
}

TEST_CASE("half codecs: round to nearest even, exact decode, fp16's range") {
  const std::vector<node_t> ids = {0};
  auto through = [&](auto codec, double v) {
    matrixd x(1, 1);
    x(0, 0) = v;
    return round_trip<double>(codec, x, context(0, ids))(0, 0);
  };
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> 1 (even);
  // 1 + 3 * 2^-8 -> 1 + 2^-6; just above a tie rounds up (no double rounding through float).
  CHECK(through(bf16_codec{}, 1 + std::ldexp(1.0, -8)) == 1.0);
  CHECK(through(bf16_codec{}, 1 + 3 * std::ldexp(1.0, -8)) == 1 + std::ldexp(1.0, -6));
  CHECK(through(bf16_codec{}, 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)) ==
        1 + std::ldexp(1.0, -7));
  CHECK(through(bf16_codec{}, -3.0e38) == doctest::Approx(-3.0e38).epsilon(0.01));
  // fp16: 11 significant bits.
  CHECK(through(fp16_codec{}, 1 + std::ldexp(1.0, -11)) == 1.0);
  CHECK(through(fp16_codec{}, 1 + 3 * std::ldexp(1.0, -11)) == 1 + std::ldexp(1.0, -9));
  CHECK(through(fp16_codec{}, 65504.0) == 65504.0);
  CHECK_THROWS_AS(through(fp16_codec{}, 70000.0), numeric_error);
  // Representable values round-trip exactly in float rows, at an odd width.
  matrixf x(5, 13);
  for (Eigen::Index k = 0; k < x.size(); ++k) x.data()[k] = static_cast<float>(k % 17) * 0.25f - 2;
  const std::vector<node_t> five(5, 0);
  CHECK(round_trip<float>(fp16_codec{}, x, context(0, five)) == x);
  CHECK(round_trip<float>(bf16_codec{}, x, context(0, five)) == x);
  CHECK(fp16_codec{}.wire_bytes<float>(5, 13) == 130);
}

TEST_CASE("make_wire_codec: names and widths") {
  CHECK(make_wire_codec(32).name() == "plain");
  CHECK(make_wire_codec(16).name() == "bf16");
  CHECK(make_wire_codec(1).name() == "stochastic1");
  CHECK(make_wire_codec(8).wire_bytes<float>(2, 10) == 2 * (10 + 4));
  CHECK(make_wire_codec(1).wire_bytes<float>(1, 128) == 20);  // 512 bytes in fp32: 25.6x
  CHECK_THROWS_AS(make_wire_codec(3), invalid_argument);
}

// --- the exchange policy (exchange_policy.hpp): which calls are exact, cached, stale ---

namespace {
exchange_key key_of(std::uint64_t layer, std::uint64_t epoch, bool training, bool first) {
  return {.layer = layer, .epoch = epoch, .training = training, .first_layer_input = first};
}
constexpr pipelined_supply nothing{}, everything{.features = true, .gradients = true};
}  // namespace

TEST_CASE("exchange policy: the default is synchronous, coded as configured, exact evaluation") {
  const exchange_policy sync;  // sequential, keep_halo, one_shot
  for (bool first : {false, true})
    for (std::uint64_t epoch : {0, 1, 5}) {
      const auto train = sync.mode(key_of(3, epoch, true, first));
      CHECK_FALSE(train.exact);
      CHECK_FALSE(train.input_cache);
      CHECK_FALSE(train.pipelined);
      CHECK(sync.mode(key_of(3, epoch, false, first)).exact);  // evaluation
      for (auto kind : {exchange_kind::gather, exchange_kind::scatter, exchange_kind::gather_scatter})
        CHECK_FALSE(sync.stale(key_of(3, epoch, true, first), kind, everything));
    }
  exchange_policy coded_evaluation;
  coded_evaluation.exact_evaluation = false;
  CHECK_FALSE(coded_evaluation.mode(key_of(3, 1, false, false)).exact);
}

TEST_CASE("exchange policy: Sylvie's first graph layer is exact and cached, named by the key") {
  const exchange_policy low_bit = low_bit_exchange(1, 1, 5).policy;
  CHECK(low_bit.staleness == 5);
  const auto first = low_bit.mode(key_of(7, 2, true, true));  // not the lowest layer number
  CHECK(first.exact);
  CHECK(first.input_cache);
  const auto hidden = low_bit.mode(key_of(0, 2, true, false));  // layer 0 but not named
  CHECK_FALSE(hidden.exact);
  CHECK_FALSE(hidden.input_cache);
  CHECK(hidden.pipelined);
  const auto evaluation = low_bit.mode(key_of(0, 2, false, false));
  CHECK(evaluation.exact);
  CHECK_FALSE(evaluation.input_cache);
  CHECK_FALSE(evaluation.pipelined);  // evaluation is never stale
}

TEST_CASE("exchange policy: stale in epochs not a multiple of S, once the pipeline supplies "
          "every direction the call needs") {
  const exchange_policy p{.staleness = 3};
  const auto gather = exchange_kind::gather, scatter = exchange_kind::scatter,
             both = exchange_kind::gather_scatter;
  for (std::uint64_t epoch = 0; epoch < 10; ++epoch) {
    const exchange_key key = key_of(2, epoch, true, false);
    const bool off_beat = epoch % 3 != 0;
    CHECK(p.mode(key).pipelined);
    CHECK(p.stale(key, gather, everything) == off_beat);
    CHECK(p.stale(key, scatter, everything) == off_beat);
    CHECK(p.stale(key, both, everything) == off_beat);
    // Nothing earlier to be stale with: synchronous, never zeros.
    CHECK_FALSE(p.stale(key, gather, nothing));
    CHECK_FALSE(p.stale(key, scatter, nothing));
    // A gather needs rows, a scatter gradients, a gather_scatter both.
    CHECK(p.stale(key, gather, {.features = true}) == off_beat);
    CHECK_FALSE(p.stale(key, gather, {.gradients = true}));
    CHECK(p.stale(key, scatter, {.gradients = true}) == off_beat);
    CHECK_FALSE(p.stale(key, scatter, {.features = true}));
    CHECK_FALSE(p.stale(key, both, {.features = true}));
    CHECK_FALSE(p.stale(key, both, {.gradients = true}));
    CHECK_FALSE(p.stale(key_of(2, epoch, false, false), gather, everything));  // evaluation
  }
  // With staleness the first graph layer is exact, cached and pipelined alike.
  const exchange_policy both_options{.staleness = 2, .exact_first_layer = true};
  const auto first = both_options.mode(key_of(1, 1, true, true));
  CHECK((first.exact && first.input_cache && first.pipelined));
  CHECK(both_options.stale(key_of(1, 1, true, true), gather, everything));
}

TEST_CASE("exchange options: the factories set one piece each") {
  CHECK(sequential_exchange(2).transport.prefetch_depth == 2);
  CHECK(one_shot_exchange().transport.all_at_once);
  CHECK(named_exchange("keep_halo").cache.target<keep_for_backward>() != nullptr);
  CHECK(sequential_exchange().transport.progress_interval_us == 0);  // no progress thread
  const exchange_options low = low_bit_exchange(2, 4, 3, 0);
  CHECK(low.transport.prefetch_depth == 0);
  CHECK(low.feature_codec.name() == "stochastic2");
  CHECK(low.gradient_codec.name() == "stochastic4");
  CHECK((low.policy.staleness == 3 && low.policy.exact_first_layer && low.policy.exact_evaluation));
  CHECK_THROWS_AS(named_exchange("ring"), invalid_argument);
}

TEST_CASE("exchange agreements: options checked on every rank, a stale call's own check, "
          "stale calls' failures deferred to the next collective") {
  serial_communicator comm;
  CHECK_NOTHROW(check_exchange_options(comm, low_bit_exchange(1, 1, 5)));
  exchange_options paced = sequential_exchange();
  paced.transport.pace_chunk_bytes = 65536;  // pacing needs the progress thread
  CHECK_THROWS_WITH_AS(check_exchange_options(comm, paced),
                       doctest::Contains("pace_chunk_bytes 65536"), invalid_argument);
  paced.transport.progress_interval_us = 1000;
  CHECK_NOTHROW(check_exchange_options(comm, paced));
  CHECK_THROWS_WITH_AS(check_exchange_options(comm, sequential_exchange(-1)),
                       doctest::Contains("prefetch_depth -1"), invalid_argument);
  exchange_options unstale;
  unstale.policy.staleness = 0;
  CHECK_THROWS_WITH_AS(check_exchange_options(comm, unstale), doctest::Contains("staleness 0"),
                       invalid_argument);

  CHECK_NOTHROW(check_stale_call("f", 0, 10, 10, true, 4, 4));
  CHECK_THROWS_WITH_AS(check_stale_call("f", 3, 9, 10, true, 4, 4),
                       doctest::Contains("rank 3 passes 9 rows"), invalid_argument);
  CHECK_THROWS_WITH_AS(check_stale_call("f", 0, 10, 10, true, 5, 4),
                       doctest::Contains("expected 10 rows and 4 columns"), invalid_argument);
  CHECK_THROWS_WITH_AS(check_stale_call("f", 0, 10, 10, false, 4, 4),
                       doctest::Contains("dx not shaped like x"), invalid_argument);

  deferred_failures deferred;
  CHECK_NOTHROW(deferred.agree(comm, "w"));  // no call ran on its own
  deferred.record(nullptr);
  CHECK_NOTHROW(deferred.agree(comm, "w"));  // one did, and did not fail
  deferred.record(nullptr);
  deferred.record(std::make_exception_ptr(invalid_argument("the first failure")));
  deferred.record(std::make_exception_ptr(invalid_argument("a later one")));
  CHECK_THROWS_WITH_AS(deferred.agree(comm, "w"), "the first failure", invalid_argument);
  CHECK_NOTHROW(deferred.agree(comm, "w"));  // agreed on once, then forgotten
}

// --- the progress thread (sar/comm/progress_thread.hpp) ---

TEST_CASE("progress thread: polls only while a reason is open, stops on a failing poll") {
  using namespace std::chrono_literals;
  std::atomic<long> calls{0};
  auto wait_for = [](auto&& done) {
    for (int i = 0; i < 4000 && !done(); ++i) std::this_thread::sleep_for(1ms);
    return done();
  };
  {
    progress_thread t([&] { ++calls; }, 200us);
    std::this_thread::sleep_for(20ms);
    CHECK(calls.load() == 0);  // nothing open: asleep
    t.begin();
    t.begin();
    CHECK(t.open() == 2);
    CHECK(wait_for([&] { return calls.load() >= 5; }));
    t.end();
    CHECK(wait_for([&] { return calls.load() >= 10; }));  // one reason still open
    t.end();
    CHECK(t.open() == 0);
    std::this_thread::sleep_for(5ms);  // a poll under way finishes
    const long settled = calls.load();
    std::this_thread::sleep_for(30ms);
    CHECK(calls.load() == settled);
    CHECK(t.polls() == settled);
  }  // joins
  std::atomic<long> failing{0};
  {
    progress_thread t([&] { ++failing; throw comm_error("gone"); }, 100us);
    t.begin();
    CHECK(wait_for([&] { return failing.load() >= 1; }));
    std::this_thread::sleep_for(20ms);
    CHECK(failing.load() == 1);  // no poll after the failure
  }
  CHECK_THROWS_AS(progress_thread([] {}, 0us), invalid_argument);
}
