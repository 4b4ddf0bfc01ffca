// A decode step's layers in one call: the same kernels llama.py calls one by one (gemv.cpp's
// matmuls, decode_ops.cpp's fused steps), chained here in the same order on the same tensors, so the
// result is bit for bit the per-call path's.
//
// Why: at one row a layer is ten calls from Python, each paying the interpreter, pybind11 and torch's
// argument handling (5-10 µs) for kernels that run in 20-200 µs: ~2-3 ms of a 12-25 ms step over 30
// layers. Here the loop and the glue between the kernels are C++.
//
// A `DecodeStack` holds one model's weights as the kernels take them, for one choice of kernel per
// projection (the tier the row count picks: fp32, int8, int4, oneDNN's fp32 matmul on its packed
// weight, which wide decode batches run, or fp32 from exact GGUF blocks), made once and run every step.
#include "kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

namespace {

enum Kind : int64_t { F32 = 0, INT8 = 1, INT4 = 2, ONEDNN = 3, Q4_1_F32 = 4, Q8_0_F32 = 5 };

// quant.OnednnLinear's call, `torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")`,
// through torch's dispatcher (boxed: the op's C++ signature is not part of torch's public headers).
torch::Tensor onednn_linear(const torch::Tensor& x, const torch::Tensor& packed) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
    std::vector<c10::IValue> stack{x, packed, c10::IValue(), std::string("none"),
                                   c10::List<std::optional<c10::Scalar>>(), std::string("")};
    op.callBoxed(&stack);
    return stack[0].toTensor();
}

struct Linear {
    int64_t kind;
    std::vector<torch::Tensor> t;  // F32: {w}; INT8: {q, scale}; INT4: {packed, scale, minimum}; ONEDNN: {packed};
                                   // Q4_1_F32, Q8_0_F32: {blocks}

    torch::Tensor operator()(const torch::Tensor& x) const {
        switch (kind) {
            case F32: return symphony::f32_linear(x, t[0]);
            case INT8: return symphony::int8_linear(x, t[0], t[1]);
            case INT4: return symphony::int4_linear(x, t[0], t[1], t[2]);
            case Q4_1_F32: return symphony::q4_1_f32_linear(x, t[0]);
            case Q8_0_F32: return symphony::q8_0_f32_linear(x, t[0]);
            default: return onednn_linear(x, t[0]);
        }
    }
};

struct Layer {
    torch::Tensor attn_norm, mlp_norm;
    Linear qkv, o, gate_up, down;
};

constexpr size_t WEIGHTS_PER_KIND[] = {1, 2, 3, 1, 1, 1};

class DecodeStack {
   public:
    // norms: attn_norm, mlp_norm per layer; kinds and weights: qkv, o, gate_up, down per layer.
    DecodeStack(std::vector<torch::Tensor> norms, std::vector<int64_t> kinds,
                std::vector<std::vector<torch::Tensor>> weights, int64_t heads, double eps)
        : heads_(heads), eps_(eps) {
        const size_t n = norms.size() / 2;
        TORCH_CHECK(n > 0 && norms.size() == 2 * n && kinds.size() == 4 * n && weights.size() == 4 * n,
                    "DecodeStack takes 2 norms and 4 projections a layer: got ", norms.size(), " norms, ",
                    kinds.size(), " kinds and ", weights.size(), " weight lists");
        for (size_t i = 0; i < kinds.size(); ++i)
            TORCH_CHECK(kinds[i] >= F32 && kinds[i] <= Q8_0_F32 && weights[i].size() == WEIGHTS_PER_KIND[kinds[i]],
                        "projection ", i, ": kind ", kinds[i], " with ", weights[i].size(), " tensors");
        for (size_t l = 0; l < n; ++l) {
            auto lin = [&](size_t j) { return Linear{kinds[4 * l + j], weights[4 * l + j]}; };
            layers_.push_back(Layer{norms[2 * l], norms[2 * l + 1], lin(0), lin(1), lin(2), lin(3)});
        }
    }

    // x [T, hidden]: the residual stream after the embedding, updated in place and returned (before the
    // final norm). cos, sin [T, head_dim]; write_slots [T]; the pool k_cache, v_cache [layers, slots,
    // kv_heads, head_dim]; every row a single-token decode over context_slots [T, L], lengths [T].
    torch::Tensor run(torch::Tensor x, torch::Tensor cos, torch::Tensor sin, torch::Tensor write_slots,
                      torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor context_slots, torch::Tensor lengths,
                      double scale) const {
        TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x (the residual stream) must be contiguous [T, hidden]");
        TORCH_CHECK(k_cache.dim() == 4 && k_cache.size(0) == int64_t(layers_.size()) && v_cache.sizes() == k_cache.sizes(),
                    "k_cache and v_cache must be [", layers_.size(), ", slots, kv_heads, head_dim], got ",
                    k_cache.sizes(), " and ", v_cache.sizes());
        const int64_t t = x.size(0);
        torch::Tensor delta;  // the last sublayer's output, added to x by the next norm
        for (size_t l = 0; l < layers_.size(); ++l) {
            const Layer& L = layers_[l];
            auto h = delta.defined() ? symphony::add_rms_norm(x, delta, L.attn_norm, eps_)
                                     : symphony::rms_norm(x, L.attn_norm, eps_);
            auto kc = k_cache.select(0, l), vc = v_cache.select(0, l);
            auto q = symphony::rope_write_kv(L.qkv(h), cos, sin, write_slots, kc, vc, heads_);
            auto a = symphony::decode_attention(q, kc, vc, context_slots, lengths, scale);
            h = symphony::add_rms_norm(x, L.o(a.view({t, -1})), L.mlp_norm, eps_);
            delta = L.down(symphony::silu_mul(L.gate_up(h), false));
        }
        return x.add_(delta);
    }

    int64_t layers() const { return int64_t(layers_.size()); }

   private:
    std::vector<Layer> layers_;
    int64_t heads_;
    double eps_;
};

}  // namespace

void add_decode_stack(pybind11::module_& m) {
    namespace py = pybind11;
    py::class_<DecodeStack>(m, "DecodeStack",
                            "A decode step's layers as one call (decode_stack.cpp): DecodeStack(norms, kinds, weights, "
                            "heads, eps); kinds 0 fp32 {w}, 1 int8 {q, scale}, 2 int4 {packed, scale, minimum}, "
                            "3 oneDNN fp32 {packed}, 4 / 5 fp32 from exact Q4_1 / Q8_0 blocks {blocks}")
        .def(py::init<std::vector<torch::Tensor>, std::vector<int64_t>, std::vector<std::vector<torch::Tensor>>,
                      int64_t, double>(),
             py::arg("norms"), py::arg("kinds"), py::arg("weights"), py::arg("heads"), py::arg("eps"))
        // The GIL is let go for the step: LIP threads run their Python meanwhile, as they do between the
        // per-call kernels' calls.
        .def("run", &DecodeStack::run, "every layer of a decode step; x is updated in place and returned",
             py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("write_slots"), py::arg("k_cache"),
             py::arg("v_cache"), py::arg("context_slots"), py::arg("lengths"), py::arg("scale"),
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("layers", &DecodeStack::layers);
}
