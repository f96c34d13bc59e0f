// Quantized frozen weights for LoRA on a small-memory base (issue 37, docs/memory.md
// "Quantized bases"): NF4 and FP4 in blocks of 64 with optional double quantization of the
// absmax, and LLM.int8's row-wise int8, byte for byte as bitsandbytes writes them, and the
// linear layer that dequantizes its weight in the forward and again in the backward's input
// gradient (the dequantized weight is never kept).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel {

enum class QuantType { None = 0, NF4 = 1, FP4 = 2, Int8 = 3 };

// "nf4", "fp4", "int8" ("none" for None).
const char* quant_name(QuantType t);

// One quantized weight [out, in] (a Linear's layout; GPT-2's Conv1D weights are transposed
// first, as transformers does before bitsandbytes quantizes them).
struct QuantizedWeight {
  QuantType type = QuantType::None;
  int64_t rows = 0, cols = 0;            // the weight's [out, in]
  torch::ScalarType dtype = torch::kFloat;  // what dequantize gives (the model's weights' dtype)
  int64_t blocksize = 64;                // NF4/FP4: values per absmax
  // NF4/FP4: uint8 [ceil(n / 2)], two codes per byte, the first value in the high nibble
  // (bitsandbytes' packing, the odd last value paired with a 0). Int8: int8 [out, in] (CB).
  torch::Tensor data;
  // NF4/FP4: float32 [blocks], or with double quantization uint8 [blocks] (codes of the
  // dynamic map); Int8: float32 [out] (SCB, each row's absmax).
  torch::Tensor absmax;
  torch::Tensor absmax2;  // double quantization: float32 [ceil(blocks / 256)]
  float offset = 0.0f;    // double quantization: the absmax's mean, subtracted before
  bool double_quant() const { return absmax2.defined(); }
  int64_t numel() const { return rows * cols; }
  // The bytes this weight holds (data, absmax, absmax2).
  int64_t bytes() const;
};

// Quantizes `w` (2-D, float32, bfloat16 or float16; any device: the work is on the CPU, the
// result on w's device). NF4/FP4: bitsandbytes' quantize_4bit (blocksize 64); with
// `double_quant`, its compress_statistics (the absmax minus its mean, in blocks of 256 with
// the dynamic 8-bit map). Int8: Int8Params' quantization (the weight rounded to float16,
// round(w * 127 / rowmax)). `dtype`: what the weight dequantizes to.
QuantizedWeight quantize_weight(const torch::Tensor& w, QuantType type, bool double_quant, torch::ScalarType dtype);

// The weight [rows, cols] in q.dtype on q's device: bitsandbytes' dequantize_4bit (code times
// absmax in float32, then rounded to the dtype) or, for int8, CB * SCB / 127.
torch::Tensor dequantize_weight(const QuantizedWeight& q);

// y = x W^T + b with W dequantized; the backward gives x's gradient (W dequantized again),
// none for W or b (frozen). x [..., cols] in any floating dtype: W is used in x's dtype.
torch::Tensor quantized_linear(const torch::Tensor& x, const QuantizedWeight& q, const torch::Tensor& bias);

namespace quant_detail {
// The pieces, for the tests that compare them with bitsandbytes'.
// The absmax's float32 values (double quantization undone: code[q] * absmax2 + offset).
torch::Tensor absmax_values(const QuantizedWeight& q);
// quantize_blockwise of float32 values with the dynamic map (bitsandbytes' CPU kernel):
// codes uint8 [n] and absmax float32 [ceil(n / blocksize)].
std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& values, int64_t blocksize);
// The double quantization of a float32 absmax given its offset.
void double_quantize(QuantizedWeight& q, const torch::Tensor& absmax, float offset);
// The dynamic map (256 values) the double quantization uses.
const float* dynamic_map();
// dequantize_weight with tensor operations on the weight's own device (what a GPU runs; the
// CPU runs a loop): the same values, bit for bit.
torch::Tensor dequantize_with_ops(const QuantizedWeight& q);
}  // namespace quant_detail

}  // namespace accel
