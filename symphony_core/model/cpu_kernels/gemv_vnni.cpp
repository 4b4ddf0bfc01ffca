// The int8 and int4 matmuls' inner loops with AVX-512 VNNI: the same sums as gemv.cpp's AVX2 loops
// (weights widened to int16, times the activations' int16 groups, exact in int32; one fp32 scale a
// group), in half the instructions: one vpdpwssd multiplies and pairs a whole int8 group of 32 (AVX2:
// two vpmaddwd and an add for it), and for int4 one 32-byte load unpacks two groups at once. Only the
// fp32 sums' order differs from the AVX2 loops'.
//
// Compiled for AVX-512 function by function (the target attribute), so the library still loads on an
// AVX2-only CPU, where gemv.cpp never calls these (`supported`).
#include "gemv_vnni.h"

#include <immintrin.h>


#include "gemv_parts.h"

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace {

using symphony::gemv::GROUP;
using symphony::gemv::PREFETCH;

// One row of x alone leaves the loop waiting on one chain of FMAs: two chains, alternating groups.
constexpr int chains(int t) { return t == 1 ? 2 : 1; }

#define INLINE inline __attribute__((always_inline))

// acc + (Σ over one int8 group of w · x, 16 int32 lanes of 2 products) · x's scale.
VNNI INLINE __m512 int8_group(__m512 acc, __m512i w, const int16_t* xp, float xs) {
    const __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xp));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(xs), acc);
}

VNNI INLINE __m512i int8_weights(const int8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <int T>
VNNI void int8_rows_t(const int8_t* w, const float* scale, const int16_t* xq, const float* xs, const float* x, float* y,
                      int64_t t0, int64_t in, int64_t out, int64_t groups, int64_t o0, int64_t o1) {
    constexpr int A = chains(T);
    const int64_t width = groups * GROUP;
    for (int64_t o = o0; o < o1; ++o) {
        const int8_t* row = w + o * in;
        __m512 acc[T][A];
        for (int t = 0; t < T; ++t)
            for (int a = 0; a < A; ++a) acc[t][a] = _mm512_setzero_ps();
        int64_t g = 0;
        for (; g + A <= groups; g += A) {
            _mm_prefetch(reinterpret_cast<const char*>(row + g * GROUP + PREFETCH), _MM_HINT_T0);
            for (int a = 0; a < A; ++a) {
                const __m512i wv = int8_weights(row + (g + a) * GROUP);
                for (int t = 0; t < T; ++t)
                    acc[t][a] = int8_group(acc[t][a], wv, xq + t * width + (g + a) * GROUP, xs[t * groups + g + a]);
            }
        }
        for (; g < groups; ++g) {
            const __m512i wv = int8_weights(row + g * GROUP);
            for (int t = 0; t < T; ++t) acc[t][0] = int8_group(acc[t][0], wv, xq + t * width + g * GROUP, xs[t * groups + g]);
        }
        for (int t = 0; t < T; ++t) {
            __m512 s = acc[t][0];
            for (int a = 1; a < A; ++a) s = _mm512_add_ps(s, acc[t][a]);
            float sum = _mm512_reduce_add_ps(s);
            for (int64_t j = width; j < in; ++j) sum += float(row[j]) * x[(t0 + t) * in + j];  // in % 32 tail
            y[(t0 + t) * out + o] = sum * scale[o];
        }
    }
}

// The minimum's term of one output row, Σ over groups of minimum · Σx (unmasked: a masked load here
// measured slower than the scalar tail).
VNNI INLINE float int4_minimum_term(const float* mn, const float* xsum, int64_t groups) {
    __m512 ms = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 16 <= groups; g += 16) ms = _mm512_fmadd_ps(_mm512_loadu_ps(mn + g), _mm512_loadu_ps(xsum + g), ms);
    float m = _mm512_reduce_add_ps(ms);
    for (; g < groups; ++g) m += mn[g] * xsum[g];
    return m;
}

// Groups g and g + 1: their 32 bytes widened to int16, elements 0-15 of both under one AND (lo),
// 16-31 under one shift (hi).
VNNI INLINE void int4_pair(const uint8_t* p, __m512i& lo, __m512i& hi) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    lo = _mm512_and_si512(v, _mm512_set1_epi16(0x0F));
    hi = _mm512_srli_epi16(v, 4);
}

// acc + the pair's sums times their factors, the weight's scale times x's: int32 lanes 0-7 hold group
// g's partial sums, 8-15 group g + 1's. The factors are made here, not stored a row ahead: a load
// right after a narrower store of the same bytes stalls (store forwarding).
VNNI INLINE __m512 int4_pair_fma(__m512 acc, __m512i lo, __m512i hi, const int16_t* xp, const float* sc, const float* xs) {
    __m512i d = _mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xp));
    d = _mm512_dpwssd_epi32(d, hi, _mm512_loadu_si512(xp + 32));
    const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128 s2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sc)));
    const __m128 c2 = _mm_mul_ps(s2, _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(xs))));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(c2)), acc);
}

// One odd last group (quantise_x leaves it in its natural order), AVX2 as in gemv.cpp.
INLINE float int4_last_group(const uint8_t* p, const int16_t* xp) {
    const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi16(0x0F)), hi = _mm256_srli_epi16(v, 4);
    return symphony::gemv::hsum(symphony::gemv::group_dot(lo, hi, xp));
}

template <int T>
VNNI void int4_rows_t(const uint8_t* packed, const float* scale, const float* minimum, const int16_t* xq,
                      const float* xs, const float* xsum, float* y, int64_t t0, int64_t in, int64_t out, int64_t o0,
                      int64_t o1) {
    constexpr int A = chains(T);
    const int64_t groups = in / GROUP, pairs_end = groups & ~int64_t(1);
    for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* p = packed + o * (in / 2);
        const float* sc = scale + o * groups;
        __m512 acc[T][A];
        for (int t = 0; t < T; ++t)
            for (int a = 0; a < A; ++a) acc[t][a] = _mm512_setzero_ps();
        int64_t g = 0;
        for (; g + 2 * A <= pairs_end; g += 2 * A) {
            _mm_prefetch(reinterpret_cast<const char*>(p + g * 16 + PREFETCH), _MM_HINT_T0);
            for (int a = 0; a < A; ++a) {
                const int64_t h = g + 2 * a;
                __m512i lo, hi;
                int4_pair(p + h * 16, lo, hi);
                for (int t = 0; t < T; ++t)
                    acc[t][a] = int4_pair_fma(acc[t][a], lo, hi, xq + t * in + h * GROUP, sc + h, xs + t * groups + h);
            }
        }
        for (; g < pairs_end; g += 2) {
            __m512i lo, hi;
            int4_pair(p + g * 16, lo, hi);
            for (int t = 0; t < T; ++t)
                acc[t][0] = int4_pair_fma(acc[t][0], lo, hi, xq + t * in + g * GROUP, sc + g, xs + t * groups + g);
        }
        for (int t = 0; t < T; ++t) {
            __m512 s = acc[t][0];
            for (int a = 1; a < A; ++a) s = _mm512_add_ps(s, acc[t][a]);
            float sum = _mm512_reduce_add_ps(s) + int4_minimum_term(minimum + o * groups, xsum + t * groups, groups);
            if (g < groups)
                sum += int4_last_group(p + g * 16, xq + t * in + g * GROUP) * (sc[g] * xs[t * groups + g]);
            y[(t0 + t) * out + o] = sum;
        }
    }
}

template <class F>
void by_rows(int T, const F& f) {
    switch (T) {
        case 1: f(std::integral_constant<int, 1>{}); break;
        case 2: f(std::integral_constant<int, 2>{}); break;
        case 3: f(std::integral_constant<int, 3>{}); break;
        default: f(std::integral_constant<int, 4>{}); break;
    }
}

}  // namespace

namespace symphony::vnni {

bool supported() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}

namespace {
symphony::gemv::LoopChoice loops(supported(), "avx512_vnni", "the quantised kernels' instruction set", "AVX-512 VNNI",
                                 "the quantised kernels run");
}

bool active() { return loops.active(); }

void set_isa(const std::string& isa) { loops.set(isa); }

std::string get_isa() { return loops.get(); }

void int8_rows(int T, const int8_t* w, const float* scale, const int16_t* xq, const float* xs, const float* x,
               float* y, int64_t t0, int64_t in, int64_t out, int64_t groups, int64_t o0, int64_t o1) {
    by_rows(T, [&](auto t) { int8_rows_t<decltype(t)::value>(w, scale, xq, xs, x, y, t0, in, out, groups, o0, o1); });
}

void int4_rows(int T, const uint8_t* packed, const float* scale, const float* minimum, const int16_t* xq,
               const float* xs, const float* xsum, float* y, int64_t t0, int64_t in, int64_t out, int64_t o0,
               int64_t o1) {
    by_rows(T, [&](auto t) {
        int4_rows_t<decltype(t)::value>(packed, scale, minimum, xq, xs, xsum, y, t0, in, out, o0, o1);
    });
}

}  // namespace symphony::vnni
