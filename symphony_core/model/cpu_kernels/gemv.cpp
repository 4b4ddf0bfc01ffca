// Matmuls for a few rows (decode) on AVX2 + FMA CPUs: y[T, out] = x[T, in] · Wᵀ, W fp32 or weight-only quantised.
//
// Quantised weights stay quantised in memory and are widened in registers. Reading and widening the
// weights is the cost at 1-8 rows, so each kernel streams its weight rows once for all T rows of x (up
// to MAX_T at a time). Output rows are handed out in chunks to torch's own intra-op thread pool
// (at::parallel_for).
//
// The quantised kernels take the activations as int16 in groups of 32 along `in`, one fp32 scale a
// group, quantised once a call (quantise_x): x ≈ xq * xs. Then a group's dot product is integer work,
// weights widened to int16 and multiplied-and-paired by one vpmaddwd (exact in int32), converted to
// fp32 once a group: about half the instructions of widening every weight to fp32 (1 row, a model step's
// matmuls: 14.4 -> 10.2 ms, on the 2-core EPYC this was measured on). int16 keeps this model's outlier
// channels: the rounding is at most 2^-16 of the group's largest |x|, far below the weights' own (int8:
// 2^-8 of the row's largest; int4: 1/30 of the group's range). bf16 activations (torch's kernels) round
// at 2^-9 of each value.
//
// int8: w int8 [out, in], scale fp32 [out]: w ≈ q * scale (per row). An `in` that is not a multiple of
//       32 ends in a tail of fewer than 32 that runs in fp32.
// int4: groups of 32 along `in` (Q4_1): w = q * scale + minimum, q in 0..15; packed uint8
//       [out, in / 2] where byte j of a group's 16 holds element j (low nibble) and element
//       j + 16 (high nibble); scale, minimum fp32 [out, in / 32]. Then
//       Σ w·x over a group = scale · Σ q·x + minimum · Σ x, and Σ x per group is computed once a call (in quantise_x's pass).
// fp32: the model's own fp32 [out, in] tensor, read in place (no copy), fp32 activations. At 1 row this
//       reads the weights at the memory's speed where MKL's sgemm (a GEMM kernel packing for many rows)
//       reaches ~2/3 of it.
#include "gemv_f32_wide.h"
#include "gemv_parts.h"
#include "gemv_rows.h"
#include "gemv_vnni.h"
#include "kernels.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <atomic>
#include <type_traits>
#include <vector>

namespace {

using namespace symphony::gemv;  // the shared parts (gemv_parts.h) and row machinery (gemv_rows.h)

// fp32 rows are long, contiguous streams: prefetch along the chunk's bytes in memory order (not per row),
// this far ahead. Neutral at 1 row, where the hardware prefetcher keeps up; at 2-4 rows, where the FMAs
// slow the loop down, it cut a 1-thread model step at 4 rows from 65 to 49 ms.
constexpr int64_t F32_PREFETCH = 8192;

// fp32: 1 row is load-bound; how to stream it fastest depends on the CPU, so there are two kernels for it
// and kernel_tiers.py times them on the machine (`set_f32_one_row`):
// - blocked (the default): 4 rows x 2 accumulators, software-prefetched along the chunk. Fastest on the
//   2-core Zen 1 EPYC this was first measured on.
// - streamed: one row at a time, 2 accumulators, no software prefetch. On a 2-core Zen 3 EPYC 7-9% faster
//   (a step's fp32 matmuls at 1 row, alternating, 15 repeats: 21.9-22.4 against 24.1 ms).
// From 2 rows the FMAs count (3 rows x T accumulators, leaving registers for x), and both are the blocked one.
struct F32Weights {
    static constexpr int64_t PER_LINE = 16;
    static constexpr int rows_at_once(int t) { return t == 1 ? 4 : 3; }
    static constexpr int accumulators(int t) { return t == 1 ? 2 : 1; }
    const float* w;
    int64_t in;
    __m256 load(int64_t row, int64_t k) const { return _mm256_loadu_ps(w + row * in + k); }
    float at(int64_t row, int64_t j) const { return w[row * in + j]; }
    float finish(int64_t, float sum) const { return sum; }
    void prefetch(int64_t o, int rows, int64_t k) const {  // the block's rows are adjacent: in memory order
        const char* ahead = reinterpret_cast<const char*>(w + o * in + rows * k) + F32_PREFETCH;
        for (int r = 0; r < rows; ++r) _mm_prefetch(ahead + 64 * r, _MM_HINT_T0);
    }
};

struct F32StreamedWeights : F32Weights {
    static constexpr int rows_at_once(int) { return 1; }
    void prefetch(int64_t, int, int64_t) const {}
};

enum class F32OneRow : int { blocked = 0, streamed = 1 };
std::atomic<int> f32_one_row{int(F32OneRow::blocked)};

// Activations quantised for the int16 kernels: q [rows, groups * 32] int16, scale [rows, groups] fp32.
// With `sums`, also each group's fp32 Σ x [rows, groups] (int4's minimum term), from the same pass;
// with `paired`, q's groups in the AVX-512 int4 loop's order (gemv_parts.h's group_slots).
struct QuantisedX {
    torch::Tensor q, scale, sum;
    int64_t groups;
};

QuantisedX quantise_x(const torch::Tensor& x, bool sums, bool paired = false) {
    const int64_t rows = x.size(0), in = x.size(1), groups = in / GROUP;
    QuantisedX qx{torch::empty({rows, groups * GROUP}, x.options().dtype(torch::kInt16)),
                  torch::empty({rows, groups}, x.options()),
                  sums ? torch::empty({rows, groups}, x.options()) : torch::Tensor(), groups};
    float* sum0 = sums ? qx.sum.data_ptr<float>() : nullptr;
    const float* x0 = x.data_ptr<float>();
    int16_t* q0 = qx.q.data_ptr<int16_t>();
    float* s0 = qx.scale.data_ptr<float>();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t t = 0; t < rows; ++t) {
        for (int64_t g = 0; g < groups; ++g) {
            const float* p = x0 + t * in + g * GROUP;
            __m256 v[4], m = _mm256_setzero_ps();
            for (int i = 0; i < 4; ++i) {
                v[i] = _mm256_loadu_ps(p + 8 * i);
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
            }
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
            s0[t * groups + g] = amax / 32767.f;
            if (sum0)
                sum0[t * groups + g] = hsum(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
            const __m256 inv = _mm256_set1_ps(amax > 0.f ? 32767.f / amax : 0.f);
            int64_t lo, hi;
            symphony::gemv::group_slots(g, groups, paired, lo, hi);
            for (int i = 0; i < 4; i += 2) {  // packs interleaves the 128-bit halves: the permute restores order
                __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
                __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(v[i + 1], inv));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(q0 + t * groups * GROUP + (i == 0 ? lo : hi)),
                                    _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
            }
        }
    }
    return qx;
}

// One output row at a time: more rows at once (2, 4) measured slower at every T, the widened weights
// taking the registers the activations need.
template <int T>
void int8_rows(const int8_t* w, const float* scale, const QuantisedX& qx, const float* x, float* y, int64_t t0,
               int64_t in, int64_t out, int64_t o0, int64_t o1) {
    const int64_t groups = qx.groups, width = groups * GROUP;
    const int16_t* xq = qx.q.data_ptr<int16_t>() + t0 * width;
    const float* xs = qx.scale.data_ptr<float>() + t0 * groups;
    for (int64_t o = o0; o < o1; ++o) {
        const int8_t* row = w + o * in;
        __m256 acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; ++g) {
            const int8_t* p = row + g * GROUP;
            if ((g & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(p + PREFETCH), _MM_HINT_T0);
            __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
            __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
            for (int t = 0; t < T; ++t)
                acc[t] = _mm256_fmadd_ps(group_dot(lo, hi, xq + t * width + g * GROUP),
                                         _mm256_broadcast_ss(xs + t * groups + g), acc[t]);
        }
        for (int t = 0; t < T; ++t) {
            float sum = hsum(acc[t]);
            for (int64_t j = width; j < in; ++j) sum += float(row[j]) * x[(t0 + t) * in + j];  // in % 32 tail
            y[(t0 + t) * out + o] = sum * scale[o];
        }
    }
}

template <int T>
void int4_rows(const uint8_t* packed, const float* scale, const float* minimum, const QuantisedX& qx, float* y,
               int64_t t0, int64_t in, int64_t out, int64_t o0, int64_t o1) {
    const int64_t groups = qx.groups;
    const int16_t* xq = qx.q.data_ptr<int16_t>() + t0 * in;
    const float* xs = qx.scale.data_ptr<float>() + t0 * groups;
    const float* xsum = qx.sum.data_ptr<float>() + t0 * groups;
    const __m256i low4 = _mm256_set1_epi16(0x0F);
    // Per output row, before its weights: each group's combined scale (the weight's times x's) and the
    // minimum term Σ minimum · Σx, both vectorised. As a scalar chain after the loop, the minimum term's
    // dependent adds cost about as much as the dot products themselves (1 row, a step's int4
    // matmuls: 5.2 -> 3.8 ms with the unpacking below).
    std::vector<float> comb_buf(T * groups);
    float* comb = comb_buf.data();
    for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* p = packed + o * (in / 2);
        const float* sc = scale + o * groups;
        const float* mn = minimum + o * groups;
        float m[T];
        for (int t = 0; t < T; ++t) {
            const float* xst = xs + t * groups;
            const float* xsumt = xsum + t * groups;
            float* ct = comb + t * groups;
            __m256 ms = _mm256_setzero_ps();
            int64_t g = 0;
            for (; g + 8 <= groups; g += 8) {
                _mm256_storeu_ps(ct + g, _mm256_mul_ps(_mm256_loadu_ps(sc + g), _mm256_loadu_ps(xst + g)));
                ms = _mm256_fmadd_ps(_mm256_loadu_ps(mn + g), _mm256_loadu_ps(xsumt + g), ms);
            }
            m[t] = hsum(ms);
            for (; g < groups; ++g) {
                ct[g] = sc[g] * xst[g];
                m[t] += mn[g] * xsumt[g];
            }
        }
        __m256 acc[T];
        for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; ++g) {
            if ((g & 3) == 0) _mm_prefetch(reinterpret_cast<const char*>(p + g * 16 + PREFETCH), _MM_HINT_T0);
            // Each byte widened to int16 first: its low nibble is then one AND, its high nibble one shift.
            __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + g * 16)));
            __m256i lo = _mm256_and_si256(v, low4);
            __m256i hi = _mm256_srli_epi16(v, 4);
            for (int t = 0; t < T; ++t)
                acc[t] = _mm256_fmadd_ps(group_dot(lo, hi, xq + t * in + g * GROUP),
                                         _mm256_broadcast_ss(comb + t * groups + g), acc[t]);
        }
        for (int t = 0; t < T; ++t) y[(t0 + t) * out + o] = hsum(acc[t]) + m[t];
    }
}


// y[rows, out] = x · Wᵀ through dot_rows: one parallel pass over the output rows in chunks of `chunk`;
// each chunk of weight rows serves every group of MAX_T rows of x while it is in cache.
template <class W>
torch::Tensor dot_linear(const W& wt, const torch::Tensor& x, int64_t out, int64_t chunk) {
    const int64_t rows = x.size(0), in = wt.in;
    auto y = torch::empty({rows, out}, x.options());
    const float* x0 = x.data_ptr<float>();
    float* y0 = y.data_ptr<float>();
    // fp32 groups of 2-8 rows in one pass where the CPU has AVX-512 (gemv_f32_wide.cpp); a last row as below.
    const bool wide = std::is_same_v<W, F32Weights> && rows >= symphony::f32wide::MIN_T && symphony::f32wide::active();
    parallel_rows(out, chunk, [&](int64_t o0, int64_t o1) {
        int64_t done = 0;
        while (wide && rows - done >= symphony::f32wide::MIN_T) {
            const int T = int(std::min<int64_t>(symphony::f32wide::MAX_T, rows - done));
            symphony::f32wide::rows(T, wt.w, x0 + done * in, y0 + done * out, in, out, o0, o1);
            done += T;
        }
        by_row_groups(rows - done, [&](int64_t t0, auto t) {
            dot_rows<W, decltype(t)::value>(wt, x0 + (done + t0) * in, y0 + (done + t0) * out, in, out, o0, o1);
        });
    });
    return y;
}

}  // namespace

namespace symphony {

torch::Tensor f32_linear(torch::Tensor x, torch::Tensor w) {
    TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kFloat32 && w.is_contiguous() && w.device().is_cpu(),
                "w must be a contiguous float32 CPU tensor [out, in]");
    const int64_t out = w.size(0), in = w.size(1);
    check_x(x, in);
    const int64_t chunk = grain(in * 4, 128 << 10);
    if (x.size(0) == 1 && f32_one_row.load(std::memory_order_relaxed) == int(F32OneRow::streamed))
        return dot_linear(F32StreamedWeights{{w.data_ptr<float>(), in}}, x.contiguous(), out, chunk);
    return dot_linear(F32Weights{w.data_ptr<float>(), in}, x.contiguous(), out, chunk);
}

void set_f32_one_row(const std::string& kernel) {
    TORCH_CHECK(kernel == "blocked" || kernel == "streamed", "the one-row fp32 kernel is 'blocked' or 'streamed', got '",
                kernel, "'");
    f32_one_row = int(kernel == "streamed" ? F32OneRow::streamed : F32OneRow::blocked);
}

std::string get_f32_one_row() { return f32_one_row == int(F32OneRow::streamed) ? "streamed" : "blocked"; }

torch::Tensor int8_linear(torch::Tensor x, torch::Tensor w, torch::Tensor scale) {
    TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kInt8 && w.is_contiguous(), "w must be contiguous int8 [out, in]");
    const int64_t out = w.size(0), in = w.size(1);
    TORCH_CHECK(scale.scalar_type() == torch::kFloat32 && scale.numel() == out && scale.is_contiguous(),
                "scale must be contiguous float32 [out]");
    check_x(x, in);
    x = x.contiguous();
    const QuantisedX qx = quantise_x(x, false);
    auto y = torch::empty({x.size(0), out}, x.options());
    const int8_t* wp = w.data_ptr<int8_t>();
    const float* sp = scale.data_ptr<float>();
    const float* x0 = x.data_ptr<float>();
    float* y0 = y.data_ptr<float>();
    const bool vnni = vnni::active();
    const int64_t groups = qx.groups;
    parallel_rows(out, grain(in), [&](int64_t o0, int64_t o1) {
        by_row_groups(x.size(0), [&](int64_t t0, auto t) {
            constexpr int T = decltype(t)::value;
            if (vnni)
                vnni::int8_rows(T, wp, sp, qx.q.data_ptr<int16_t>() + t0 * groups * GROUP,
                                qx.scale.data_ptr<float>() + t0 * groups, x0, y0, t0, in, out, groups, o0, o1);
            else
                int8_rows<T>(wp, sp, qx, x0, y0, t0, in, out, o0, o1);
        });
    });
    return y;
}

torch::Tensor int4_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scale, torch::Tensor minimum) {
    TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == torch::kUInt8 && packed.is_contiguous(),
                "packed must be contiguous uint8 [out, in / 2]");
    const int64_t out = packed.size(0), in = packed.size(1) * 2;
    TORCH_CHECK(in % GROUP == 0, "int4 weights need the input size to be a multiple of 32, got ", in);
    const int64_t groups = in / GROUP;
    for (const auto* s : {&scale, &minimum})
        TORCH_CHECK(s->scalar_type() == torch::kFloat32 && s->is_contiguous() && s->dim() == 2 && s->size(0) == out &&
                        s->size(1) == groups,
                    "scale and minimum must be contiguous float32 [out, in / 32]");
    check_x(x, in);
    x = x.contiguous();
    const int64_t rows = x.size(0);
    const bool vnni = vnni::active();
    const QuantisedX qx = quantise_x(x, true, vnni);
    auto y = torch::empty({rows, out}, x.options());
    const uint8_t* pp = packed.data_ptr<uint8_t>();
    const float* sp = scale.data_ptr<float>();
    const float* mp = minimum.data_ptr<float>();
    float* y0 = y.data_ptr<float>();
    parallel_rows(out, grain(in / 2), [&](int64_t o0, int64_t o1) {
        by_row_groups(rows, [&](int64_t t0, auto t) {
            constexpr int T = decltype(t)::value;
            if (vnni)
                vnni::int4_rows(T, pp, sp, mp, qx.q.data_ptr<int16_t>() + t0 * in,
                                qx.scale.data_ptr<float>() + t0 * groups, qx.sum.data_ptr<float>() + t0 * groups, y0,
                                t0, in, out, o0, o1);
            else
                int4_rows<T>(pp, sp, mp, qx, y0, t0, in, out, o0, o1);
        });
    });
    return y;
}

}  // namespace symphony

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "Symphony's fp32 and int8 / int4-weight matmuls for a few rows (AVX2 + FMA; AVX-512 VNNI where the CPU has it)";
    m.def("f32_linear", &symphony::f32_linear, "y[T, out] = x[T, in] · wᵀ; w fp32 [out, in], read in place");
    m.def("set_f32_one_row", &symphony::set_f32_one_row,
          "which fp32 kernel runs one row, 'blocked' or 'streamed' (for the whole process; kernel_tiers.py sets it)");
    m.def("get_f32_one_row", &symphony::get_f32_one_row, "which fp32 kernel runs one row");
    m.def("int8_linear", &symphony::int8_linear, "y[T, out] = x[T, in] · (q * scale)ᵀ; q int8 [out, in], scale fp32 [out]");
    m.def("int4_linear", &symphony::int4_linear,
          "y[T, out] = x[T, in] · (q * scale + minimum)ᵀ; groups of 32, packed as the source file describes");
    m.def("q4_1_f32_linear", &symphony::q4_1_f32_linear,
          "y[T, out] = x[T, in] · wᵀ in fp32, w held exactly as Q4_1 blocks (gemv_blocks.cpp describes the layout)");
    m.def("q8_0_f32_linear", &symphony::q8_0_f32_linear,
          "y[T, out] = x[T, in] · wᵀ in fp32, w held exactly as Q8_0 blocks (gemv_blocks.cpp describes the layout)");
    m.def("set_quantised_isa", &symphony::vnni::set_isa,
          "'avx512_vnni' (the default where the CPU has it) or 'avx2': the int8 / int4 kernels' loops, for the process");
    m.def("get_quantised_isa", &symphony::vnni::get_isa, "which loops the int8 / int4 kernels run");
    m.def("set_f32_wide_isa", &symphony::f32wide::set_isa,
          "'avx512' (the default where the CPU has it) or 'avx2': the fp32 kernel's loop for 2-8 rows and the fp32 "
          "blocks kernels' loops (gemv_blocks.cpp), for the process");
    m.def("get_f32_wide_isa", &symphony::f32wide::get_isa, "which loop the fp32 kernel runs for 2-8 rows");
    add_decode_ops(m);
    add_decode_stack(m);
}
