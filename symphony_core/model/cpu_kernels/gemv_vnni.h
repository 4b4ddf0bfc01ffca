// The quantised matmuls' inner loops for CPUs with AVX-512 VNNI (gemv_vnni.cpp); gemv.cpp picks them
// over its AVX2 ones where the CPU has them (`vnni::supported`) unless told not to (`set_isa`).
#pragma once

#include <cstdint>
#include <string>

namespace symphony::vnni {

bool supported();  // AVX-512 F + BW + VNNI on this CPU
bool active();     // gemv.cpp runs these loops: supported, unless set_isa("avx2") said otherwise
void set_isa(const std::string& isa);  // "avx2" or "avx512_vnni" (for the whole process: A/B runs and tests)
std::string get_isa();

// y[t0 + t, o] for t < T (1-4), o in [o0, o1): gemv.cpp's int8_rows on the same arguments.
// xq, xs: the activations' int16 groups and scales from row t0 on; x: all rows' fp32 (the `in % 32` tail).
void int8_rows(int T, const int8_t* w, const float* scale, const int16_t* xq, const float* xs, const float* x,
               float* y, int64_t t0, int64_t in, int64_t out, int64_t groups, int64_t o0, int64_t o1);

// gemv.cpp's int4_rows; xq in the paired order (gemv_parts.h's group_slots), from row t0 on, as xs and xsum.
void int4_rows(int T, const uint8_t* packed, const float* scale, const float* minimum, const int16_t* xq,
               const float* xs, const float* xsum, float* y, int64_t t0, int64_t in, int64_t out, int64_t o0,
               int64_t o1);

}  // namespace symphony::vnni
