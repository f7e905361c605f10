// Float GEMM micro-kernels for the tall, narrow products of graph layers (n x K times K x N
// with K, N of a few hundred at most), on AVX-512F or on AVX2 + FMA (the widest the build
// targets).
//
// Every output element is one FMA chain over the inner index in increasing order, started
// from zero and then assigned or added to the output. A row of x w therefore depends on that
// row alone, not on how the rows are cut into chunks and threads, and a^T b over a range of
// rows depends only on where the range's fixed sub-blocks start; the vector width does not
// enter either (each lane is one column), so AVX-512 and AVX2 builds agree bitwise. Without
// AVX2 and FMA, `row_gemm_available` is false and callers use Eigen.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "sar/core/types.hpp"
#include "sar/kernels/prefetch.hpp"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define SAR_ROW_GEMM 1
#else
#define SAR_ROW_GEMM 0
#endif

namespace sar::detail {

inline constexpr bool row_gemm_available = SAR_ROW_GEMM == 1;

#if SAR_ROW_GEMM

/// The vector operations of the micro-kernels: 16 float lanes on AVX-512F (twice AVX2's
/// FMA throughput where the core has 512-bit units), else 8 on AVX2 + FMA. A lane mask selects
/// the first lanes of a partial vector.
struct gemm_simd {
#if defined(__AVX512F__)
  using vector = __m512;
  using mask = __mmask16;
  static constexpr int lanes = 16;
  static vector zero() { return _mm512_setzero_ps(); }
  static vector load(const float* p) { return _mm512_loadu_ps(p); }
  static vector broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static vector fma(vector a, vector b, vector c) { return _mm512_fmadd_ps(a, b, c); }
  static vector add(vector a, vector b) { return _mm512_add_ps(a, b); }
  static void store(float* p, vector v) { _mm512_storeu_ps(p, v); }
  /// Requires 0 < count <= lanes.
  static mask first_lanes(int count) { return static_cast<mask>(0xffffu >> (lanes - count)); }
  static vector load(const float* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, mask m, vector v) { _mm512_mask_storeu_ps(p, m, v); }
#else
  using vector = __m256;
  using mask = __m256i;
  static constexpr int lanes = 8;
  static vector zero() { return _mm256_setzero_ps(); }
  static vector load(const float* p) { return _mm256_loadu_ps(p); }
  static vector broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static vector fma(vector a, vector b, vector c) { return _mm256_fmadd_ps(a, b, c); }
  static vector add(vector a, vector b) { return _mm256_add_ps(a, b); }
  static void store(float* p, vector v) { _mm256_storeu_ps(p, v); }
  /// Requires 0 < count <= lanes.
  static mask first_lanes(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static vector load(const float* p, mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, mask m, vector v) { _mm256_maskstore_ps(p, m, v); }
#endif
};

/// The left operand of a micro-kernel: element (r, s) is data[r * row_stride + s * step_stride]
/// (r: output row, s: step of the inner index). With `rest`, steps from `split` on are read
/// from a second operand instead, rest[r * rest_row_stride + (s - split) * step_stride]: the
/// operand is [data | rest], and a product by it sums both parts in one pass over the output.
struct gemm_left {
  const float* data;
  Eigen::Index row_stride, step_stride;
  const float* rest = nullptr;
  Eigen::Index split = 0, rest_row_stride = 0;

  /// The operand from row r on.
  gemm_left from_row(Eigen::Index r) const {
    return {data + r * row_stride, row_stride, step_stride,
            rest != nullptr ? rest + r * rest_row_stride : nullptr, split, rest_row_stride};
  }
  /// Steps read from data (the rest from rest), of `steps` in all.
  Eigen::Index first_steps(Eigen::Index steps) const { return rest != nullptr ? split : steps; }
};

/// A right operand (steps x columns) packed panel by panel: a panel is two vectors of columns
/// (one when at most one is left), stored step-major and padded with zeros, so the kernels read
/// it contiguously (a row-major operand 512 bytes wide would map every step of a panel onto the
/// same few L1 sets).
class packed_right {
 public:
  struct panel {
    Eigen::Index first;  // first column
    int vectors, live;   // vectors per step (1 or 2); live columns
    std::size_t offset;  // into data
  };

  /// Packs rows [0, steps) of b (row-major, rows `stride` apart, `columns` wide) and, unless
  /// null, a bias of `columns` values that the kernels start their sums from.
  void pack(const float* b, Eigen::Index stride, Eigen::Index steps, Eigen::Index columns,
            const float* bias = nullptr) {
    panels_.clear();
    std::size_t size = 0;
    constexpr int lanes = gemm_simd::lanes;
    for (Eigen::Index first = 0; first < columns;) {
      const int vectors = columns - first > lanes ? 2 : 1;
      const int live = static_cast<int>(std::min<Eigen::Index>(lanes * vectors, columns - first));
      panels_.push_back({first, vectors, live, size});
      size += static_cast<std::size_t>(steps * lanes * vectors);
      first += live;
    }
    data_.assign(size, 0.0f);
    bias_.assign(bias != nullptr ? panel_width * panels_.size() : 0, 0.0f);
    for (std::size_t k = 0; k < panels_.size(); ++k) {
      const panel& p = panels_[k];
      for (Eigen::Index s = 0; s < steps; ++s)
        std::copy_n(b + s * stride + p.first, p.live,
                    data_.data() + p.offset + s * lanes * p.vectors);
      if (bias != nullptr) std::copy_n(bias + p.first, p.live, bias_.data() + panel_width * k);
    }
  }

  const std::vector<panel>& panels() const { return panels_; }
  const float* data(const panel& p) const { return data_.data() + p.offset; }
  /// Panel k's bias (panel_width floats, zero-padded), or null without a bias.
  const float* bias(std::size_t k) const {
    return bias_.empty() ? nullptr : bias_.data() + panel_width * k;
  }

 private:
  static constexpr std::size_t panel_width = 2 * gemm_simd::lanes;
  std::vector<panel> panels_;
  std::vector<float> data_, bias_;
};

/// c[r][0 .. LV) (+)= bias + sum_s a(r, s) * b[s][0 .. LV) for r < R and s < steps, with L =
/// gemm_simd::lanes, b packed (LV floats per step), bias LV floats or null (zero). Requires
/// R <= 6, V in {1, 2}, steps >= 0. Unless Full, the last vector of c is read and written only
/// in `mask`'s lanes.
template <int R, int V, bool Full>
void row_gemm_block(gemm_left a, const float* b, const float* bias, Eigen::Index steps,
                    gemm_simd::mask mask, float* c, Eigen::Index c_stride, bool add) {
  using simd = gemm_simd;
  constexpr int L = simd::lanes;
  // The pragmas keep acc in registers: without them GCC stores it every step.
  simd::vector acc[R][V];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v)
      acc[r][v] = bias != nullptr ? simd::load(bias + L * v) : simd::zero();
  const Eigen::Index first = a.first_steps(steps);
  for (int part = 0; part < 2; ++part) {
    const float* a_step = part == 0 ? a.data : a.rest;
    const Eigen::Index row_stride = part == 0 ? a.row_stride : a.rest_row_stride;
    const Eigen::Index part_steps = part == 0 ? first : steps - first;
    for (Eigen::Index s = 0; s < part_steps; ++s, b += L * V, a_step += a.step_stride) {
      simd::vector bv[V];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) bv[v] = simd::load(b + L * v);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const simd::vector x = simd::broadcast(a_step + r * row_stride);
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[r][v] = simd::fma(x, bv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      float* p = c + r * c_stride + L * v;
      const bool whole = Full || v + 1 < V;
      simd::vector value = acc[r][v];
      if (add) value = simd::add(whole ? simd::load(p) : simd::load(p, mask), value);
      if (whole)
        simd::store(p, value);
      else
        simd::store(p, mask, value);
    }
  }
}

/// Rows of a ahead of the block being multiplied whose steps are prefetched (two blocks).
inline constexpr Eigen::Index gemm_prefetch_rows = 12;

/// c[0 .. rows) (+)= a b for one packed panel of b: a is rows x steps, c the panel's columns.
/// When a row's steps are contiguous (step_stride 1), the rows gemm_prefetch_rows ahead are
/// prefetched: a block reads 6 rows at once, 6 streams the hardware prefetcher follows too
/// late (~1.4x on a 200k x 128 times 128 x 8 product).
template <int V, bool Full>
void row_gemm_panel(Eigen::Index rows, gemm_left a, const float* b, const float* bias,
                    Eigen::Index steps, gemm_simd::mask mask, float* c, Eigen::Index c_stride,
                    bool add) {
  const bool prefetching = a.step_stride == 1;
  const Eigen::Index first = a.first_steps(steps);
  Eigen::Index r = 0;
  for (; r + 6 <= rows; r += 6) {
    if (prefetching)
      for (Eigen::Index k = r + gemm_prefetch_rows; k < std::min(rows, r + gemm_prefetch_rows + 6);
           ++k) {
        if (first > 0) prefetch_bytes(a.data + k * a.row_stride, first * sizeof(float));
        if (steps > first)
          prefetch_bytes(a.rest + k * a.rest_row_stride, (steps - first) * sizeof(float));
      }
    row_gemm_block<6, V, Full>(a.from_row(r), b, bias, steps, mask, c + r * c_stride, c_stride,
                               add);
  }
  const gemm_left rest = a.from_row(r);
  float* c_rest = c + r * c_stride;
  switch (rows - r) {
    case 5: return row_gemm_block<5, V, Full>(rest, b, bias, steps, mask, c_rest, c_stride, add);
    case 4: return row_gemm_block<4, V, Full>(rest, b, bias, steps, mask, c_rest, c_stride, add);
    case 3: return row_gemm_block<3, V, Full>(rest, b, bias, steps, mask, c_rest, c_stride, add);
    case 2: return row_gemm_block<2, V, Full>(rest, b, bias, steps, mask, c_rest, c_stride, add);
    case 1: return row_gemm_block<1, V, Full>(rest, b, bias, steps, mask, c_rest, c_stride, add);
    default: return;
  }
}

/// c (+)= a b (+ b's bias) over every panel of b (packed with `steps` steps); c's rows
/// c_stride apart.
inline void row_gemm(Eigen::Index rows, gemm_left a, const packed_right& b, Eigen::Index steps,
                     float* c, Eigen::Index c_stride, bool add) {
  for (std::size_t k = 0; k < b.panels().size(); ++k) {
    const packed_right::panel& p = b.panels()[k];
    constexpr int lanes = gemm_simd::lanes;
    const bool full = p.live == lanes * p.vectors;
    const gemm_simd::mask mask = gemm_simd::first_lanes(p.live - lanes * (p.vectors - 1));
    const auto panel = [&]<int V, bool Full>() {
      row_gemm_panel<V, Full>(rows, a, b.data(p), b.bias(k), steps, mask, c + p.first, c_stride,
                              add);
    };
    if (p.vectors == 2)
      full ? panel.template operator()<2, true>() : panel.template operator()<2, false>();
    else
      full ? panel.template operator()<1, true>() : panel.template operator()<1, false>();
  }
}

/// Rows of a^T b summed per fixed block (see row_gemm_transposed_add).
inline constexpr Eigen::Index transposed_block_rows = 256;

/// Columns of the left operand of a transposed product: element (i, r) is data[i * stride + r]
/// for r < columns.
struct transposed_left {
  const float* data;
  Eigen::Index stride, columns;
};

/// out += a^T b over rows [0, rows) of a = [a_0 | a_1 | ...] (the parts side by side, p columns
/// in all) and b (rows x q); out is p x q, row-major, part k's rows after part k - 1's. The rows
/// are summed in blocks of transposed_block_rows from row 0 (one FMA chain per block, added to
/// out in order), so the result depends only on the rows given; each block of b is packed once
/// for all parts.
inline void row_gemm_transposed_add(std::span<const transposed_left> a, const float* b,
                                    Eigen::Index b_stride, float* out, Eigen::Index out_stride,
                                    Eigen::Index rows, Eigen::Index q) {
  packed_right block;
  for (Eigen::Index i = 0; i < rows; i += transposed_block_rows) {
    const Eigen::Index steps = std::min(transposed_block_rows, rows - i);
    block.pack(b + i * b_stride, b_stride, steps, q);
    float* part_out = out;
    for (const transposed_left& part : a) {
      // Output row r is column r of the part: element (r, s) = data[(i + s) * stride + r].
      row_gemm(part.columns, gemm_left{part.data + i * part.stride, 1, part.stride}, block, steps,
               part_out, out_stride, true);
      part_out += part.columns * out_stride;
    }
  }
}

#endif  // SAR_ROW_GEMM

}  // namespace sar::detail
