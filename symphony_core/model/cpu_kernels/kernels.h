// The compiled kernels' entry points, shared by the files that define them (gemv.cpp, gemv_blocks.cpp, decode_ops.cpp)
// and decode_stack.cpp, which chains them through a decode step's layers. Each is also bound to
// Python on its own (see the PYBIND11_MODULE in gemv.cpp).
#pragma once

#include <torch/extension.h>

#include <string>

namespace symphony {

// gemv.cpp: y[T, out] = x[T, in] · Wᵀ for a few rows of x.
torch::Tensor f32_linear(torch::Tensor x, torch::Tensor w);
void set_f32_one_row(const std::string& kernel);  // "blocked" or "streamed": which fp32 kernel runs one row
std::string get_f32_one_row();
torch::Tensor int8_linear(torch::Tensor x, torch::Tensor w, torch::Tensor scale);
torch::Tensor int4_linear(torch::Tensor x, torch::Tensor packed, torch::Tensor scale, torch::Tensor minimum);

// gemv_blocks.cpp: the same for fp32 weights held exactly as Q4_1 / Q8_0 blocks (fp32 results).
torch::Tensor q4_1_f32_linear(torch::Tensor x, torch::Tensor blocks);
torch::Tensor q8_0_f32_linear(torch::Tensor x, torch::Tensor blocks);

// decode_ops.cpp: a layer's small steps, one call each.
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps);
torch::Tensor add_rms_norm(torch::Tensor x, torch::Tensor delta, torch::Tensor w, double eps);
torch::Tensor rope_write_kv(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor slots,
                            torch::Tensor k_cache, torch::Tensor v_cache, int64_t heads);
torch::Tensor silu_mul(torch::Tensor gate_up, bool feature_major);
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor slots,
                               torch::Tensor lengths, double scale);

}  // namespace symphony

void add_decode_ops(pybind11::module_& m);    // decode_ops.cpp
void add_decode_stack(pybind11::module_& m);  // decode_stack.cpp
