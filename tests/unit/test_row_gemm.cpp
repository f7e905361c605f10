// The float GEMM micro-kernels (sar/kernels/row_gemm.hpp) against the FMA chain their contract
// names. Built natively and, where the build targets AVX-512, once more without it, so both
// vector widths are held to the same bits on one machine.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "sar/kernels/dense.hpp"

using namespace sar;

namespace {

matrix<float> random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  matrix<float> m(rows, cols);
  for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = u(gen);
  return m;
}

}  // namespace

TEST_CASE("a float product is one FMA chain per element, whatever the vector width") {
  // The contract: bias (or 0), then fma over the inner index in order, then assigned or added.
  // A scalar loop of std::fma is that chain, so panels of 8 and 16 (AVX2) or 16 and 32
  // (AVX-512) columns, with masked tails, must all match it bit for bit.
  if (!detail::uses_row_gemm<float>) {
    MESSAGE("built without AVX2 + FMA: float products use Eigen, which does not promise this");
    return;
  }
#if SAR_ROW_GEMM
  MESSAGE("row_gemm vector lanes: ", detail::gemm_simd::lanes);
#endif
  const matrix<float> x = random_matrix(517, 130, 1), x2 = random_matrix(517, 9, 2);
  const matrix<float> start = random_matrix(517, 40, 3);
  for (const Eigen::Index width : {1, 8, 15, 16, 17, 31, 32, 33, 40}) {
    CAPTURE(width);
    const matrix<float> w = random_matrix(130, width, 4), w2 = random_matrix(9, width, 5);
    const matrix<float> bias = random_matrix(1, width, 6);
    // The chain over [x | x2] [w ; w2] (without x2 when second is false), from bias or 0.
    const auto chain = [&](bool second, const float* b) {
      matrix<float> y(x.rows(), width);
      for (Eigen::Index i = 0; i < x.rows(); ++i)
        for (Eigen::Index c = 0; c < width; ++c) {
          float acc = b != nullptr ? b[c] : 0.0f;
          for (Eigen::Index s = 0; s < x.cols(); ++s) acc = std::fma(x(i, s), w(s, c), acc);
          for (Eigen::Index s = 0; second && s < x2.cols(); ++s)
            acc = std::fma(x2(i, s), w2(s, c), acc);
          y(i, c) = acc;
        }
      return y;
    };
    matrix<float> y(x.rows(), width);
    dense_product<false, float>(x, w, y, bias.data());
    CHECK(y == chain(false, bias.data()));
    y = start.leftCols(width);
    dense_product<true, float>(x, w, y);
    CHECK(y == matrix<float>(start.leftCols(width) + chain(false, nullptr)));
    dense_product_sum<float>(x, w, x2, w2, y, bias.data());
    CHECK(y == chain(true, bias.data()));
  }
}
