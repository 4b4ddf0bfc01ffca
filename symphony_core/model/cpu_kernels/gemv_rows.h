// The row machinery gemv.cpp's kernels and gemv_blocks.cpp's share: a block of output rows' dot products
// over a weight accessor W (how a kernel reads its weights as fp32 vectors), the split of the output rows
// among torch's threads, and the grouping of x's rows by up to MAX_T at a time.
#pragma once

#include "gemv_parts.h"

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

namespace symphony::gemv {

constexpr int64_t MAX_T = 4;

// W gives: load(row, k) (8 weights from k as fp32), at(row, j) (one), finish(row, sum), prefetch(o, rows, k),
// PER_LINE (weights a cache line of the stream holds: prefetch once a line), rows_at_once(T), accumulators(T).
// R output rows at once, T activation rows, U independent accumulators per (row, T row) along `in`.
template <class W, int T, int R, int U>
void dot_block(const W& wt, const float* x, float* y, int64_t in, int64_t out, int64_t o) {
    __m256 acc[R][T][U];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t)
            for (int u = 0; u < U; ++u) acc[r][t][u] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 * U <= in; k += 8 * U) {
        if (((k + 8 * U) & (W::PER_LINE - 1)) < 8 * U) wt.prefetch(o, R, k);  // a new cache line starts here
        for (int u = 0; u < U; ++u) {
            __m256 xv[T];
            for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * in + k + 8 * u);
            for (int r = 0; r < R; ++r) {
                __m256 wv = wt.load(o + r, k + 8 * u);
                for (int t = 0; t < T; ++t) acc[r][t][u] = _mm256_fmadd_ps(wv, xv[t], acc[r][t][u]);
            }
        }
    }
    for (; k + 8 <= in; k += 8) {
        for (int r = 0; r < R; ++r) {
            __m256 wv = wt.load(o + r, k);
            for (int t = 0; t < T; ++t) acc[r][t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * in + k), acc[r][t][0]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) {
            __m256 s = acc[r][t][0];
            for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[r][t][u]);
            float sum = hsum(s);
            for (int64_t j = k; j < in; ++j) sum += wt.at(o + r, j) * x[t * in + j];  // in % 8 tail
            y[t * out + o + r] = wt.finish(o + r, sum);
        }
    }
}

template <class W, int T>
void dot_rows(const W& wt, const float* x, float* y, int64_t in, int64_t out, int64_t o0, int64_t o1) {
    constexpr int R = W::rows_at_once(T), U = W::accumulators(T);
    int64_t o = o0;
    for (; o + R <= o1; o += R) dot_block<W, T, R, U>(wt, x, y, in, out, o);
    for (; o < o1; ++o) dot_block<W, T, 1, U>(wt, x, y, in, out, o);
}

// f(t0, T) for each group of up to MAX_T rows of x, T a compile-time constant.
template <class F>
void by_row_groups(int64_t rows, const F& f) {
    for (int64_t t0 = 0; t0 < rows; t0 += MAX_T) {
        switch (std::min(MAX_T, rows - t0)) {
            case 1: f(t0, std::integral_constant<int, 1>{}); break;
            case 2: f(t0, std::integral_constant<int, 2>{}); break;
            case 3: f(t0, std::integral_constant<int, 3>{}); break;
            default: f(t0, std::integral_constant<int, 4>{}); break;
        }
    }
}

inline void check_x(const torch::Tensor& x, int64_t in) {
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32,
                "x must be a 2-D float32 tensor [rows, in], got ", x.sizes(), " ", x.scalar_type());
    TORCH_CHECK(x.size(1) == in, "x has ", x.size(1), " features but the weight takes ", in);
    TORCH_CHECK(x.device().is_cpu(), "the compiled kernels run on the CPU only");
}

// Output rows per chunk: ~32 KiB of weights (~128 KiB for fp32, whose rows stream fastest in longer runs).
inline int64_t grain(int64_t row_bytes, int64_t chunk_bytes = 32 << 10) {
    return std::max<int64_t>(8, chunk_bytes / std::max<int64_t>(row_bytes, 1));
}

// f(o0, o1) over [0, out) in chunks of `rows`. Each of torch's intra-op threads owns one contiguous
// share of the chunks and takes them in order, so that it streams its share of the weight front to
// back; one that finishes early then takes chunks from the others' shares, so that on a shared machine
// a thread descheduled for a while delays the call by its current chunk only, not by its whole share.
// (Chunks handed out one at a time from a single counter interleave the threads' reads every chunk:
// on a 2-core Zen 5 EPYC a one-row fp32 matmul then streamed its weight at ~80% of this rate.)
template <class F>
void parallel_rows(int64_t out, int64_t rows, const F& f) {
    const int64_t chunks = (out + rows - 1) / rows, n = at::get_num_threads();
    if (chunks <= 1 || n <= 1 || at::in_parallel_region()) {
        f(0, out);
        return;
    }
    struct alignas(64) Share {  // a cache line each: one thread's taking a chunk does not evict the others' counters
        std::atomic<int64_t> next;
    };
    std::vector<Share> shares(n);
    for (int64_t s = 0; s < n; ++s) shares[s].next = chunks * s / n;
    at::parallel_for(0, n, 1, [&](int64_t s0, int64_t) {
        for (int64_t i = 0; i < n; ++i) {
            const int64_t s = (s0 + i) % n, end = chunks * (s + 1) / n;
            for (int64_t c; (c = shares[s].next.fetch_add(1)) < end;) f(c * rows, std::min(out, (c + 1) * rows));
        }
    });
}

}  // namespace symphony::gemv
