// The small steps of a decode layer, fused (AVX2 + FMA, fp32): RMSNorm (with the residual add before
// it), RoPE with the K/V cache write, SwiGLU's activation, and attention for single-token decodes
// that reads K/V from the paged pool in place.
//
// At decode sizes each of these is a handful of torch calls whose dispatch (3-10 µs each) costs more
// than their arithmetic: ~25 calls a layer, ~17 ms of a ~30 ms step on 2 cores. Here each is one call.
// The formulas are llama.py's torch ones (HF Llama's), computed in fp32 with a different summation
// order: results agree to float rounding, which tests/test_cpu_kernels.py checks against the torch
// path and tests/test_parity.py against transformers.
//
// The K/V pool is fp32 or fp16 (`Engine(kv_cache_dtype=...)`; fp16 halves the pool's memory): K and
// V are rounded to fp16 as they are written and widened back to fp32 (F16C) as they are read; all
// arithmetic stays fp32.
#include "kernels.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <type_traits>
#include <vector>

namespace {

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// e^x for 8 floats: x = n·ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (relative
// error ~1e-8 before rounding), 2^n through the exponent bits. x is clamped to [-87, 88] so 2^n stays
// a normal float: below, the result is ~1e-38 where the exact one underflows to 0.
inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 in two parts: exact n·hi
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void check_f32(const torch::Tensor& t, const char* name, int64_t dim) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.dim() == dim, name,
                " must be a ", dim, "-D float32 CPU tensor, got ", t.sizes(), " ", t.scalar_type());
}

// The pool's K and V: [slots, kv_heads, head_dim], contiguous, one shape, both fp32 or both fp16.
void check_pool(const torch::Tensor& k, const torch::Tensor& v) {
    for (const auto* t : {&k, &v})
        TORCH_CHECK(t->device().is_cpu() && t->dim() == 3 && t->is_contiguous() &&
                        (t->scalar_type() == torch::kFloat32 || t->scalar_type() == torch::kHalf),
                    "k_cache and v_cache must be contiguous 3-D float32 or float16 CPU tensors, got ", t->sizes(),
                    " ", t->scalar_type());
    TORCH_CHECK(k.sizes() == v.sizes() && k.scalar_type() == v.scalar_type(),
                "k_cache and v_cache must have one shape and dtype [slots, kv_heads, head_dim], got ", k.sizes(), " ",
                k.scalar_type(), " and ", v.sizes(), " ", v.scalar_type());
}

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const at::Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(at::Half* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// One row: y = x · rsqrt(mean(x²) + eps) · w (the sum of squares in double). Four vector
// accumulators: a single running sum is one dependent add per value (~20 µs for 32 rows of 576).
inline void norm_row(const float* x, const float* w, float* y, int64_t n, float eps) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int a = 0; a < 4; ++a) {
            const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * a));
            acc[a] = _mm256_fmadd_pd(v, v, acc[a]);  // exact: a float's square fits a double
        }
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
    for (; i < n; ++i) ss += double(x[i]) * x[i];
    const float r = 1.0f / std::sqrt(float(ss / n) + eps);
    const __m256 rv = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv), _mm256_loadu_ps(w + i)));
    for (; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

// Rows of a small batch are independent: at 1-8 rows one thread does them all (a parallel region
// costs more than a row's work); wide batches split.
template <class F>
void over_rows(int64_t rows, int64_t work_per_row, const F& f) {
    const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(work_per_row, 1));
    at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) f(r);
    });
}

// A strided [rows, n] input whose rows are not contiguous — above all a feature-major W·xᵀ result
// seen transposed (stride 1 along the rows), what MKL's tier returns for prefill and wide batches —
// is read TILE rows at a time: `f(r, row)` gets row r copied contiguous into a per-thread buffer,
// gathered feature by feature so that one cache line serves the tile's rows. Read row by row it
// touched a different cache line for every value.
constexpr int64_t TILE = 8;

template <class F>
void over_strided_rows(const float* src, int64_t s0, int64_t s1, int64_t rows, int64_t n, const F& f) {
    const int64_t tiles = (rows + TILE - 1) / TILE;
    const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(n * TILE, 1));
    at::parallel_for(0, tiles, grain, [&](int64_t t0, int64_t t1) {
        std::vector<float> buf(TILE * n);
        for (int64_t tile = t0; tile < t1; ++tile) {
            const int64_t r0 = tile * TILE, m = std::min(TILE, rows - r0);
            for (int64_t i = 0; i < n; ++i) {
                const float* col = src + r0 * s0 + i * s1;
                for (int64_t r = 0; r < m; ++r) buf[r * n + i] = col[r * s0];
            }
            for (int64_t r = 0; r < m; ++r) f(r0 + r, buf.data() + r * n);
        }
    });
}

}  // namespace

namespace symphony {

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
    check_f32(x, "x", 2);
    check_f32(w, "w", 1);
    TORCH_CHECK(x.size(1) == w.size(0) && w.is_contiguous(), "w must be contiguous [", x.size(1), "]");
    x = x.contiguous();
    const int64_t n = x.size(1);
    auto y = torch::empty_like(x);
    const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    over_rows(x.size(0), n, [&](int64_t r) { norm_row(xp + r * n, wp, yp + r * n, n, float(eps)); });
    return y;
}

// x += delta (in place; delta any strides, e.g. a feature-major matmul result read transposed), then
// return rms_norm(x).
torch::Tensor add_rms_norm(torch::Tensor x, torch::Tensor delta, torch::Tensor w, double eps) {
    check_f32(x, "x", 2);
    check_f32(delta, "delta", 2);
    check_f32(w, "w", 1);
    TORCH_CHECK(x.is_contiguous(), "x (the residual stream) must be contiguous");
    TORCH_CHECK(delta.sizes() == x.sizes(), "delta must have x's shape ", x.sizes(), ", got ", delta.sizes());
    TORCH_CHECK(x.size(1) == w.size(0) && w.is_contiguous(), "w must be contiguous [", x.size(1), "]");
    const int64_t n = x.size(1), s0 = delta.stride(0), s1 = delta.stride(1);
    auto y = torch::empty_like(x);
    float *xp = x.data_ptr<float>(), *yp = y.data_ptr<float>();
    const float *dp = delta.data_ptr<float>(), *wp = w.data_ptr<float>();
    auto add_norm = [&](int64_t r, const float* dr) {  // dr: delta's row r, contiguous
        float* xr = xp + r * n;
        for (int64_t i = 0; i < n; ++i) xr[i] += dr[i];
        norm_row(xr, wp, yp + r * n, n, float(eps));
    };
    if (s1 == 1)
        over_rows(x.size(0), n, [&](int64_t r) { add_norm(r, dp + r * s0); });
    else
        over_strided_rows(dp, s0, s1, x.size(0), n, add_norm);
    return y;
}

// qkv [T, (H + 2·KVH)·D] (any strides): rotate q and k by RoPE's half-split rotation (cos, sin [T, D];
// sin carries the sign, as llama.py's tables do), write the rotated k and the plain v to the pool at
// `slots` [T], return q [T, H, D] contiguous.
torch::Tensor rope_write_kv(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor slots,
                            torch::Tensor k_cache, torch::Tensor v_cache, int64_t heads) {
    check_f32(qkv, "qkv", 2);
    check_pool(k_cache, v_cache);
    const int64_t t = qkv.size(0), kvh = k_cache.size(1), d = k_cache.size(2), half = d / 2;
    TORCH_CHECK(d % 2 == 0 && qkv.size(1) == (heads + 2 * kvh) * d, "qkv has ", qkv.size(1),
                " features, expected (heads + 2 * kv_heads) * head_dim = ", (heads + 2 * kvh) * d);
    for (const auto* tab : {&cos, &sin}) {
        check_f32(*tab, "cos/sin", 2);
        TORCH_CHECK(tab->size(0) == t && tab->size(1) == d && tab->is_contiguous(), "cos/sin must be contiguous [T, head_dim]");
    }
    TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.dim() == 1 && slots.size(0) == t && slots.is_contiguous(),
                "slots must be contiguous int64 [T]");
    const int64_t n_slots = k_cache.size(0);
    const int64_t* sp = slots.data_ptr<int64_t>();
    for (int64_t i = 0; i < t; ++i) TORCH_CHECK(sp[i] >= 0 && sp[i] < n_slots, "slot ", sp[i], " is outside the pool");
    auto q = torch::empty({t, heads, d}, qkv.options());
    const int64_t s0 = qkv.stride(0), s1 = qkv.stride(1), width = qkv.size(1);
    const float *src = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sn = sin.data_ptr<float>();
    float* qp = q.data_ptr<float>();
    auto run = [&](auto* kp, auto* vp) {
        using KV = std::remove_pointer_t<decltype(kp)>;
        auto rope_row = [&](int64_t r, const float* row) {  // row: qkv's row r, contiguous
            const float *c = cp + r * d, *s = sn + r * d;
            auto rotate = [&](int64_t head, auto* dst) {
                using T = std::remove_pointer_t<decltype(dst)>;
                const float* x = row + head * d;
                int64_t i = 0;
                for (; i + 8 <= half; i += 8) {  // the scalar loop below takes a half's last < 8 values
                    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + half);
                    store8(dst + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(c + i), _mm256_mul_ps(b, _mm256_loadu_ps(s + i))));
                    store8(dst + i + half, _mm256_fmadd_ps(b, _mm256_loadu_ps(c + i + half),
                                                           _mm256_mul_ps(a, _mm256_loadu_ps(s + i + half))));
                }
                for (; i < half; ++i) {
                    const float a = x[i], b = x[i + half];
                    dst[i] = T(b * s[i] + a * c[i]);
                    dst[i + half] = T(a * s[i + half] + b * c[i + half]);
                }
            };
            for (int64_t h = 0; h < heads; ++h) rotate(h, qp + (r * heads + h) * d);
            KV* kdst = kp + sp[r] * kvh * d;
            KV* vdst = vp + sp[r] * kvh * d;
            for (int64_t h = 0; h < kvh; ++h) rotate(heads + h, kdst + h * d);
            const float* v = row + (heads + kvh) * d;
            int64_t i = 0;
            for (; i + 8 <= kvh * d; i += 8) store8(vdst + i, _mm256_loadu_ps(v + i));
            for (; i < kvh * d; ++i) vdst[i] = KV(v[i]);
        };
        if (s1 == 1)
            over_rows(t, width, [&](int64_t r) { rope_row(r, src + r * s0); });
        else
            over_strided_rows(src, s0, s1, t, width, rope_row);
    };
    if (k_cache.scalar_type() == torch::kHalf)
        run(k_cache.data_ptr<at::Half>(), v_cache.data_ptr<at::Half>());
    else
        run(k_cache.data_ptr<float>(), v_cache.data_ptr<float>());
    return q;
}

inline __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// n values silu(g[i·s]) · u[i·s] into o[0..n) (s: the input's stride along them).
inline void silu_mul_run(const float* g, const float* u, int64_t s, float* o, int64_t n) {
    int64_t i = 0;
    if (s == 1) {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    } else {
        alignas(32) float gb[8], ub[8];
        for (; i + 8 <= n; i += 8) {
            for (int j = 0; j < 8; ++j) gb[j] = g[(i + j) * s], ub[j] = u[(i + j) * s];
            _mm256_storeu_ps(o + i, silu_mul8(_mm256_load_ps(gb), _mm256_load_ps(ub)));
        }
    }
    for (; i < n; ++i) o[i] = g[i * s] / (1.0f + std::exp(-g[i * s])) * u[i * s];
}

// gate_up [T, 2·I] (any strides; gate first) -> silu(gate) · up [T, I]. Row-major out ([T, I]
// contiguous) by default: what the few-row kernels read. With feature_major the result is [I, T]
// contiguous, returned as its [T, I] transposed view: a feature-major gate_up (a W·xᵀ result seen
// transposed) is then read and written in memory order, where row-major output would gather every
// value from a different row (~10x slower at hundreds of rows), and MKL's sgemm takes either layout.
torch::Tensor silu_mul(torch::Tensor gate_up, bool feature_major) {
    check_f32(gate_up, "gate_up", 2);
    TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up must have an even number of features");
    const int64_t t = gate_up.size(0), n = gate_up.size(1) / 2, s0 = gate_up.stride(0), s1 = gate_up.stride(1);
    const float* src = gate_up.data_ptr<float>();
    if (feature_major) {
        auto out = torch::empty({n, t}, gate_up.options());
        float* op = out.data_ptr<float>();
        over_rows(n, t * 8, [&](int64_t f) { silu_mul_run(src + f * s1, src + (f + n) * s1, s0, op + f * t, t); });
        return out.t();
    }
    auto out = torch::empty({t, n}, gate_up.options());
    float* op = out.data_ptr<float>();
    over_rows(t, n * 8, [&](int64_t r) { silu_mul_run(src + r * s0, src + r * s0 + n * s1, s1, op + r * n, n); });
    return out;
}

// Slots ahead whose K or V the attention loops prefetch: the pool is read in page-sized runs at
// scattered places, which the hardware prefetchers follow poorly (+15% of DRAM rate at 32 sequences).
constexpr int64_t PREFETCH_AHEAD = 16;

template <int D, class KV>
inline void prefetch_row(const KV* row) {
    for (size_t o = 0; o < D * sizeof(KV); o += 64) _mm_prefetch(reinterpret_cast<const char*>(row) + o, _MM_HINT_T0);
}

// One (sequence, KV head) of a decode: G query heads [G, D] against `len` slots of the pool.
template <int D, class KV>
void decode_head(const float* q, int64_t G, const KV* kc, const KV* vc, const int64_t* slots, int64_t len,
                 int64_t kv_stride, float scale, float* out, std::vector<float>& scores) {
    scores.resize(G * len);
    for (int64_t j = 0; j < len; ++j) {
        if (j + PREFETCH_AHEAD < len) prefetch_row<D>(kc + slots[j + PREFETCH_AHEAD] * kv_stride);
        const KV* kj = kc + slots[j] * kv_stride;
        __m256 k[D / 8];  // widened once, scored against all G query heads
        for (int i = 0; i < D / 8; ++i) k[i] = load8(kj + 8 * i);
        for (int64_t g = 0; g < G; ++g) {
            const float* qg = q + g * D;
            __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), k[0]);
            __m256 b = _mm256_mul_ps(_mm256_loadu_ps(qg + 8), k[1]);
            for (int i = 2; i < D / 8; i += 2) {
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * i), k[i], a);
                b = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * i + 8), k[i + 1], b);
            }
            scores[g * len + j] = hsum8(_mm256_add_ps(a, b)) * scale;
        }
    }
    for (int64_t g = 0; g < G; ++g) {
        float* s = scores.data() + g * len;
        int64_t j = 0;
        __m256 mv = _mm256_set1_ps(-INFINITY);
        for (; j + 8 <= len; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
        float m = hmax8(mv);
        for (; j < len; ++j) m = std::max(m, s[j]);
        const __m256 mb = _mm256_set1_ps(m);
        __m256 sv = _mm256_setzero_ps();
        for (j = 0; j + 8 <= len; j += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mb));
            _mm256_storeu_ps(s + j, e);
            sv = _mm256_add_ps(sv, e);
        }
        float sum = hsum8(sv);
        for (; j < len; ++j) sum += (s[j] = std::exp(s[j] - m));
        const float inv = 1.0f / sum;
        __m256 acc[D / 8];
        for (int i = 0; i < D / 8; ++i) acc[i] = _mm256_setzero_ps();
        for (j = 0; j < len; ++j) {
            if (g == 0 && j + PREFETCH_AHEAD < len) prefetch_row<D>(vc + slots[j + PREFETCH_AHEAD] * kv_stride);
            const KV* v = vc + slots[j] * kv_stride;
            const __m256 p = _mm256_set1_ps(s[j]);
            for (int i = 0; i < D / 8; ++i) acc[i] = _mm256_fmadd_ps(p, load8(v + 8 * i), acc[i]);
        }
        const __m256 iv = _mm256_set1_ps(inv);
        for (int i = 0; i < D / 8; ++i) _mm256_storeu_ps(out + g * D + 8 * i, _mm256_mul_ps(acc[i], iv));
    }
}

// q [B, H, D]; the pool k_cache / v_cache [S, KVH, D]; slots [B, L] (row b's first lengths[b] are its
// context, in order); returns [B, H, D]. Query head h reads KV head h / (H / KVH).
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor slots,
                               torch::Tensor lengths, double scale) {
    check_f32(q, "q", 3);
    check_pool(k_cache, v_cache);
    q = q.contiguous();
    const int64_t b = q.size(0), h = q.size(1), d = q.size(2), kvh = k_cache.size(1);
    TORCH_CHECK(k_cache.size(2) == d && h % kvh == 0, "q [B, H, D] does not match the pool's [S, ", kvh, ", ",
                k_cache.size(2), "]");
    TORCH_CHECK(d == 64 || d == 128, "decode_attention runs head_dim 64 or 128, got ", d);
    TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.dim() == 2 && slots.size(0) == b && slots.is_contiguous(),
                "slots must be contiguous int64 [B, L]");
    TORCH_CHECK(lengths.scalar_type() == torch::kLong && lengths.numel() == b && lengths.is_contiguous(),
                "lengths must be contiguous int64 [B]");
    const int64_t width = slots.size(1), n_slots = k_cache.size(0), G = h / kvh;
    const int64_t *sp = slots.data_ptr<int64_t>(), *lp = lengths.data_ptr<int64_t>();
    for (int64_t i = 0; i < b; ++i) {
        TORCH_CHECK(lp[i] >= 1 && lp[i] <= width, "length ", lp[i], " of sequence ", i, " is outside 1..", width);
        for (int64_t j = 0; j < lp[i]; ++j)
            TORCH_CHECK(sp[i * width + j] >= 0 && sp[i * width + j] < n_slots, "slot ", sp[i * width + j],
                        " is outside the pool");
    }
    auto out = torch::empty_like(q);
    const float* qp = q.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t kv_stride = kvh * d;
    auto run = [&](const auto* kp, const auto* vp) {
        at::parallel_for(0, b * kvh, 1, [&](int64_t t0, int64_t t1) {
            std::vector<float> scores;
            for (int64_t task = t0; task < t1; ++task) {
                const int64_t i = task / kvh, g = task % kvh;
                const float* qh = qp + (i * h + g * G) * d;
                float* oh = op + (i * h + g * G) * d;
                const auto *kh = kp + g * d, *vh = vp + g * d;
                if (d == 64)
                    decode_head<64>(qh, G, kh, vh, sp + i * width, lp[i], kv_stride, float(scale), oh, scores);
                else
                    decode_head<128>(qh, G, kh, vh, sp + i * width, lp[i], kv_stride, float(scale), oh, scores);
            }
        });
    };
    if (k_cache.scalar_type() == torch::kHalf)
        run(k_cache.data_ptr<at::Half>(), v_cache.data_ptr<at::Half>());
    else
        run(k_cache.data_ptr<float>(), v_cache.data_ptr<float>());
    return out;
}

}  // namespace symphony

void add_decode_ops(pybind11::module_& m) {
    using namespace symphony;
    m.def("rms_norm", &rms_norm, "rms_norm(x [T, n], w [n], eps) -> [T, n]");
    m.def("add_rms_norm", &add_rms_norm, "x += delta in place, then rms_norm(x, w, eps)");
    m.def("rope_write_kv", &rope_write_kv,
          "rotate q, k of qkv [T, (H + 2 KVH) D] by RoPE, write k and v to the pool's slots; returns q [T, H, D]");
    m.def("silu_mul", &silu_mul, "gate_up [T, 2 I] -> silu(gate) * up [T, I] (feature_major: an [I, T] tensor's view)",
          pybind11::arg("gate_up"), pybind11::arg("feature_major") = false);
    m.def("decode_attention", &decode_attention,
          "single-token attention over the pool's slots [B, L] (first lengths[b] of row b); returns [B, H, D]");
}
