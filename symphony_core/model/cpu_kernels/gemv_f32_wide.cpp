// fp32 y = x · Wᵀ for 2-8 rows of x in one pass over W, with AVX-512's 32 vector registers.
//
// Why: gemv.cpp's AVX2 loop takes at most 4 rows of x a pass (16 registers: 3 weight rows x 4 x rows
// of accumulators, plus x and the weights), so 8 rows are two passes over each chunk of W, and from 3
// rows on it falls well short of the memory's speed. Here 2-4 weight rows meet 2-8 rows of x in one
// pass (up to 21 accumulators), and the weights are prefetched into L2 (see PREFETCH). The model's
// matmuls alone, alternating in one process on a 2-core Zen 4 EPYC: 4 rows 20 against 32 ms, 8 rows
// 20-22 against 29-38 (oneDNN: 25); the fp32 engine's greedy decode there, alternating on one engine:
// 3 sequences +15%, 4 +22%, 8 +50% (254 -> 380 tok/s), 16 +24%, 2 even. At one row gemv.cpp's loops
// stay: they already read at the memory's speed, and this one did not beat them.
//
// Compiled for AVX-512 function by function (the target attribute), so the library still loads on an
// AVX2-only CPU, where gemv.cpp never calls this (`supported`).
#include "gemv_f32_wide.h"

#include "gemv_parts.h"

#include <immintrin.h>

#include <stdexcept>
#include <string>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE inline __attribute__((always_inline))

namespace {

using symphony::f32wide::MAX_T;

// Prefetch the weights this far ahead of the block's reads, in memory order (the block's rows are
// adjacent), into L2, not L1: with the hint to L1 (as gemv.cpp's fp32 loop has it) the model's
// matmuls at 8 rows took 28 ms, with none 34, into L2 19.5-21 (2-core Zen 4 EPYC, 4-16 KiB ahead alike).
constexpr int64_t PREFETCH = 8192;

// Lane sums of T accumulators (T <= 8), into sums[0..T).
AVX512 INLINE void reduce(const __m512 (&acc)[MAX_T], int T, float* sums) {
    __m256 h[MAX_T];
    for (int t = 0; t < MAX_T; ++t)
        h[t] = t < T ? _mm256_add_ps(_mm512_castps512_ps256(acc[t]),
                                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1)))
                     : _mm256_setzero_ps();
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
    // a: t0-3 over elements 0-3 then 4-7 of each half; b: t4-7 likewise
    const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    alignas(32) float out[MAX_T];
    _mm256_store_ps(out, s);
    for (int t = 0; t < T; ++t) sums[t] = out[t];
}

// R weight rows from o, T rows of x: acc[r][t] over `in` in steps of 16, the tail under a mask.
template <int T, int R>
AVX512 void block(const float* w, const float* x, float* y, int64_t in, int64_t out, int64_t o) {
    __m512 acc[R][MAX_T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < MAX_T; ++t) acc[r][t] = _mm512_setzero_ps();
    const float* wr = w + o * in;
    const char* ahead = reinterpret_cast<const char*>(wr) + PREFETCH;
    int64_t k = 0;
    for (; k + 16 <= in; k += 16) {
        for (int r = 0; r < R; ++r) _mm_prefetch(ahead + 4 * (R * k) + 64 * r, _MM_HINT_T1);
        __m512 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x + t * in + k);
        for (int r = 0; r < R; ++r) {
            const __m512 wv = _mm512_loadu_ps(wr + r * in + k);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (k < in) {
        const __mmask16 m = __mmask16((1u << (in - k)) - 1);
        for (int r = 0; r < R; ++r) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, wr + r * in + k);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + t * in + k), acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r) {
        float sums[MAX_T];
        reduce(acc[r], T, sums);
        for (int t = 0; t < T; ++t) y[t * out + o + r] = sums[t];
    }
}

// As many weight rows as keep R x T accumulators, T x vectors and a weight vector in the 32 registers
// (4 for 2-4 rows of x, 3 for 5-7, 2 for 8).
constexpr int rows_at_once(int t) { return t <= 4 ? 4 : t <= 7 ? 3 : 2; }

template <int T>
AVX512 void rows_t(const float* w, const float* x, float* y, int64_t in, int64_t out, int64_t o0, int64_t o1) {
    constexpr int R = rows_at_once(T);
    int64_t o = o0;
    for (; o + R <= o1; o += R) block<T, R>(w, x, y, in, out, o);
    for (; o < o1; ++o) block<T, 1>(w, x, y, in, out, o);
}

}  // namespace

namespace symphony::f32wide {

bool supported() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

namespace {
symphony::gemv::LoopChoice loops(supported(), "avx512", "the fp32 kernel's instruction set for 2-8 rows", "AVX-512",
                                 "the fp32 kernel runs");
}

bool active() { return loops.active(); }

void set_isa(const std::string& isa) { loops.set(isa); }

std::string get_isa() { return loops.get(); }

void rows(int T, const float* w, const float* x, float* y, int64_t in, int64_t out, int64_t o0, int64_t o1) {
    switch (T) {
        case 2: rows_t<2>(w, x, y, in, out, o0, o1); break;
        case 3: rows_t<3>(w, x, y, in, out, o0, o1); break;
        case 4: rows_t<4>(w, x, y, in, out, o0, o1); break;
        case 5: rows_t<5>(w, x, y, in, out, o0, o1); break;
        case 6: rows_t<6>(w, x, y, in, out, o0, o1); break;
        case 7: rows_t<7>(w, x, y, in, out, o0, o1); break;
        case 8: rows_t<8>(w, x, y, in, out, o0, o1); break;
        default: throw std::invalid_argument("f32wide::rows takes 2-8 rows of x, got " + std::to_string(T));
    }
}

}  // namespace symphony::f32wide
