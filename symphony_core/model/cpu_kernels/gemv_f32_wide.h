// The fp32 matmul for 2-8 rows of x at once on CPUs with AVX-512 (gemv_f32_wide.cpp); gemv.cpp's
// f32_linear runs it there for every group of 2-8 rows unless told not to (`set_isa`).
#pragma once

#include <cstdint>
#include <string>

namespace symphony::f32wide {

constexpr int MIN_T = 2, MAX_T = 8;

bool supported();  // AVX-512 F on this CPU
bool active();     // f32_linear runs this kernel: supported, unless set_isa("avx2") said otherwise
void set_isa(const std::string& isa);  // "avx2" or "avx512" (for the whole process: A/B runs and tests)
std::string get_isa();

// y[t, o] = Σ_k x[t, k] · w[o, k] for t < T (MIN_T..MAX_T), o in [o0, o1); x [T, in] and y [T, out] row-major
// (x and y point at the group's first row).
void rows(int T, const float* w, const float* x, float* y, int64_t in, int64_t out, int64_t o0, int64_t o1);

}  // namespace symphony::f32wide
