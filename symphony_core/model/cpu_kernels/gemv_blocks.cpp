// fp32 matmuls for a few rows on weights held as the GGUF blocks they came from: y[T, out] = x[T, in] · Wᵀ
// where W is exactly the fp32 model's weight, widened in registers from
// - Q4_1 (w = q · d + m, q in 0..15): a row is in / 32 groups of 24 bytes, 16 bytes of nibbles (byte j holds
//   element j in its low nibble and j + 16 in its high one, as the GGUF stores them), then d and m as fp32;
// - Q8_0 (w = q · d, q int8): a row is in / 32 groups of 36 bytes, 32 int8 then d as fp32.
// Both widenings are exact in fp32 (q · d has at most 11 + 8 significant bits; one fused multiply-add adds m
// with the single rounding that fp32's q · d + m has), so each weight is bit for bit the dense tensor's, and
// with gemv.cpp's fp32 loop order (dot_block) so is each row's sum: the same result from 5-6 bits a weight
// instead of 32. At one row the dense weight's stream is the cost (a SmolLM2-135M step reads 538 MB);
// here the widening is, and it is cheaper.
#include "gemv_f32_wide.h"
#include "gemv_rows.h"
#include "kernels.h"

#include <cmath>
#include <cstring>
#include <utility>

namespace {

using namespace symphony::gemv;  // the shared parts (gemv_parts.h) and row machinery (gemv_rows.h)

// Software prefetch this many bytes ahead in each weight row's stream. Widening costs more time a byte than the
// dense kernel spends, so fewer loads are in flight and the hardware prefetcher alone fell behind: the 120
// projections of SmolLM2-135M at one row (AVX-512 loop, 2-core Zen 4 EPYC, medians of 5 rounds) took 6.2-6.9 ms
// without, 4.8-5.3 at 1 KiB ahead, 4.5-4.6 at 2 KiB, 4.1-4.3 at 4 and 8 KiB; the dense kernel 8.8-9.4.
constexpr int64_t BLOCKS_PREFETCH = 4096;

inline float f32_at(const uint8_t* p) {  // a scale stored in the byte rows (memcpy: no aliasing, no alignment)
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <int64_t GROUP_BYTES>
struct BlockRows {
    static constexpr int64_t PER_LINE = 32;  // dot_block prefetches once a group: a line of each row per 64 bytes or less
    static constexpr int rows_at_once(int t) { return t == 1 ? 4 : 3; }
    static constexpr int accumulators(int t) { return t == 1 ? 2 : 1; }  // gemv.cpp's fp32 loop's, for its sums
    const uint8_t* w;
    int64_t stride;  // bytes a row
    const uint8_t* group(int64_t row, int64_t k) const { return w + row * stride + (k / GROUP) * GROUP_BYTES; }
    float finish(int64_t, float sum) const { return sum; }
    void prefetch(int64_t o, int rows, int64_t k) const {
        const char* ahead =
            reinterpret_cast<const char*>(w + o * stride + rows * (k / GROUP) * GROUP_BYTES) + BLOCKS_PREFETCH;
        for (int r = 0; r < rows; ++r) _mm_prefetch(ahead + 64 * r, _MM_HINT_T0);
    }
};

struct Q41Rows : BlockRows<24> {
    __m256 load(int64_t row, int64_t k) const {  // k a multiple of 8: 8 nibbles of one half of a group
        const uint8_t* g = group(row, k);
        const int64_t j = k % GROUP;
        __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + j % 16));
        b = _mm_and_si128(_mm_srl_epi16(b, _mm_cvtsi64_si128(j / 16 * 4)), _mm_set1_epi8(0x0F));
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        return _mm256_fmadd_ps(q, _mm256_set1_ps(f32_at(g + 16)), _mm256_set1_ps(f32_at(g + 20)));
    }
    float at(int64_t row, int64_t j) const {
        const uint8_t* g = group(row, j);
        const int64_t i = j % GROUP;
        const int q = i < 16 ? g[i] & 0x0F : g[i - 16] >> 4;
        return std::fma(float(q), f32_at(g + 16), f32_at(g + 20));
    }
};

struct Q80Rows : BlockRows<36> {
    __m256 load(int64_t row, int64_t k) const {
        const uint8_t* g = group(row, k);
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + k % GROUP));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_set1_ps(f32_at(g + 32)));
    }
    float at(int64_t row, int64_t j) const {
        const uint8_t* g = group(row, j);
        return float(int8_t(g[j % GROUP])) * f32_at(g + 32);
    }
};

// The AVX-512 loop (where f32wide's choice is on): a group's 32 weights widened as two 16-lane vectors, one
// accumulator of 16 lanes per (weight row, x row). Its lanes 0-7 and 8-15 are dot_block's two 8-lane
// accumulators at one row (elements 16n + i and 16n + 8 + i), and gemv_f32_wide.cpp's one accumulator at 2-8
// rows; each is summed at the end in that kernel's order, so the result is the dense kernel's bit for bit.
#define AVX512 __attribute__((target("avx512f")))
#define INLINE inline __attribute__((always_inline))

// A group's 16 possible weights q · d + m (q = 0..15) in one vector, then each weight picked from it by its nibble:
// vpermps reads only an index's low 4 bits, so a byte widened to 32 bits picks by its low nibble as it is and
// by its high one after a shift. The same values as widening each nibble to fp32 and multiply-adding it, in
// 7 instructions a group instead of 12.
struct Q41Widen {
    static constexpr int64_t GROUP_BYTES = 24;
    AVX512 INLINE static void widen(const uint8_t* g, __m512& lo, __m512& hi) {
        const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512 table = _mm512_fmadd_ps(iota, _mm512_set1_ps(f32_at(g + 16)),
                                             _mm512_set1_ps(f32_at(g + 20)));
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
        lo = _mm512_permutexvar_ps(bytes, table);
        hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
    }
};

struct Q80Widen {
    static constexpr int64_t GROUP_BYTES = 36;
    AVX512 INLINE static void widen(const uint8_t* g, __m512& lo, __m512& hi) {
        const __m512 d = _mm512_set1_ps(f32_at(g + 32));
        lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)))), d);
        hi = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16)))), d);
    }
};

template <class F, int T, int R>
AVX512 void block512(const uint8_t* w, int64_t stride, const float* x, float* y, int64_t in, int64_t out, int64_t o) {
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    const int64_t groups = in / GROUP;
    const char* rows = reinterpret_cast<const char*>(w + o * stride);
    for (int64_t gi = 0; gi < groups; ++gi) {
        if ((gi * F::GROUP_BYTES) % 64 < F::GROUP_BYTES)  // a group that starts a new cache line of its row
            for (int r = 0; r < R; ++r) _mm_prefetch(rows + r * stride + gi * F::GROUP_BYTES + BLOCKS_PREFETCH, _MM_HINT_T0);
        __m512 xl[T], xh[T];
        for (int t = 0; t < T; ++t) {
            xl[t] = _mm512_loadu_ps(x + t * in + gi * GROUP);
            xh[t] = _mm512_loadu_ps(x + t * in + gi * GROUP + 16);
        }
        for (int r = 0; r < R; ++r) {
            __m512 lo, hi;
            F::widen(w + (o + r) * stride + gi * F::GROUP_BYTES, lo, hi);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(hi, xh[t], _mm512_fmadd_ps(lo, xl[t], acc[r][t]));
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) {
            const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[r][t]),
                                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][t]), 1)));
            if (T == 1) {  // dot_block's order, as the dense kernel sums one row
                y[o + r] = hsum(h);
            } else {  // gemv_f32_wide.cpp's `reduce` order, as the dense kernel sums 2-8 rows
                alignas(32) float v[8];
                _mm256_store_ps(v, h);
                y[t * out + o + r] = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
            }
        }
}

template <class F, int T>
AVX512 void rows512(const uint8_t* w, int64_t stride, const float* x, float* y, int64_t in, int64_t out, int64_t o0,
                    int64_t o1) {
    constexpr int R = T <= 2 ? 4 : 3;  // R * T accumulators and 2T vectors of x within the 32 registers
    int64_t o = o0;
    for (; o + R <= o1; o += R) block512<F, T, R>(w, stride, x, y, in, out, o);
    for (; o < o1; ++o) block512<F, T, 1>(w, stride, x, y, in, out, o);
}

template <class W, class F>
torch::Tensor blocks_linear(torch::Tensor x, const torch::Tensor& blocks, int64_t group_bytes, const char* what) {
    TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == torch::kUInt8 && blocks.is_contiguous() &&
                    blocks.device().is_cpu() && blocks.size(1) % group_bytes == 0,
                what, " blocks must be a contiguous uint8 CPU tensor [out, in / 32 * ", group_bytes, "], got ",
                blocks.sizes(), " ", blocks.scalar_type());
    const int64_t out = blocks.size(0), stride = blocks.size(1), in = stride / group_bytes * GROUP;
    check_x(x, in);
    x = x.contiguous();
    const W wt{{blocks.data_ptr<uint8_t>(), stride}};
    auto y = torch::empty({x.size(0), out}, x.options());
    const float* x0 = x.data_ptr<float>();
    float* y0 = y.data_ptr<float>();
    const bool wide = symphony::f32wide::active();
    parallel_rows(out, grain(stride), [&](int64_t o0, int64_t o1) {
        by_row_groups(x.size(0), [&](int64_t t0, auto t) {
            constexpr int T = decltype(t)::value;
            if (wide)
                rows512<F, T>(wt.w, stride, x0 + t0 * in, y0 + t0 * out, in, out, o0, o1);
            else
                dot_rows<W, T>(wt, x0 + t0 * in, y0 + t0 * out, in, out, o0, o1);
        });
    });
    return y;
}

}  // namespace

namespace symphony {

torch::Tensor q4_1_f32_linear(torch::Tensor x, torch::Tensor blocks) {
    return blocks_linear<Q41Rows, Q41Widen>(std::move(x), blocks, 24, "Q4_1");
}

torch::Tensor q8_0_f32_linear(torch::Tensor x, torch::Tensor blocks) {
    return blocks_linear<Q80Rows, Q80Widen>(std::move(x), blocks, 36, "Q8_0");
}

}  // namespace symphony
