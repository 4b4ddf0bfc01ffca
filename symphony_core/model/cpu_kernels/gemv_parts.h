// What gemv.cpp's AVX2 loops and the AVX-512 ones (gemv_vnni.cpp, gemv_f32_wide.cpp) share: the group size,
// the weight stream's prefetch distance, the AVX2 helpers, and the process's choice between the two.
#pragma once

#include <immintrin.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace symphony::gemv {

constexpr int64_t GROUP = 32;
// Software prefetch this many bytes ahead in the weight stream: one core's demand misses alone do not
// keep enough lines in flight on the 2-core EPYC (Zen 1) this was measured on (+10-20% a stream).
constexpr int64_t PREFETCH = 2048;

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Σ over one group of 32: w (elements 0-15, 16-31) widened to int16, times x's int16 group, as 8 int32
// partial sums of 4 products each, converted to fp32. Both steps are exact: |sum| ≤ 4 · 128 · 32767 < 2^24.
inline __m256 group_dot(__m256i w_lo, __m256i w_hi, const int16_t* xq) {
    __m256i a = _mm256_madd_epi16(w_lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)));
    __m256i b = _mm256_madd_epi16(w_hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16)));
    return _mm256_cvtepi32_ps(_mm256_add_epi32(a, b));
}

// Where elements 0-15 and 16-31 of x's group g (of `groups`) go in an int16 row of activations. In order
// for the AVX2 loops; `paired` (the AVX-512 int4 loop's order): for each two groups g, g + 1, elements
// 0-15 of both, then 16-31 of both, the order the unpacked nibbles of their 32 bytes come in; an odd
// last group in order.
inline void group_slots(int64_t g, int64_t groups, bool paired, int64_t& lo, int64_t& hi) {
    if (!paired || (g == groups - 1 && groups % 2 == 1)) {
        lo = g * GROUP;
        hi = lo + GROUP / 2;
        return;
    }
    const int64_t base = (g & ~int64_t(1)) * GROUP, second = (g & 1) * (GROUP / 2);
    lo = base + second;
    hi = base + GROUP + second;
}

// Which loops a kernel runs, for the whole process: the AVX-512 ones (named `wide`) where the CPU has them,
// unless set to "avx2" (A/B runs and tests). `what` names the choice, `feature` what the CPU must have and
// `runs` the kernel, for the errors.
class LoopChoice {
   public:
    LoopChoice(bool supported, std::string wide, std::string what, std::string feature, std::string runs)
        : supported_(supported), wide_(std::move(wide)), what_(std::move(what)), feature_(std::move(feature)),
          runs_(std::move(runs)), on_(supported) {}

    bool active() const { return on_.load(std::memory_order_relaxed); }

    void set(const std::string& isa) {
        if (isa != "avx2" && isa != wide_)
            throw std::invalid_argument(what_ + " is 'avx2' or '" + wide_ + "', got '" + isa + "'");
        if (isa == wide_ && !supported_)
            throw std::invalid_argument("this CPU lacks " + feature_ + ": " + runs_ + " 'avx2' here");
        on_ = isa == wide_;
    }

    std::string get() const { return active() ? wide_ : "avx2"; }

   private:
    const bool supported_;
    const std::string wide_, what_, feature_, runs_;
    std::atomic<bool> on_;
};

}  // namespace symphony::gemv
