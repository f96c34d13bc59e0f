// Quantized frozen weights (quant.h): bitsandbytes' NF4, FP4, double quantization and
// LLM.int8 bytes, and the linear layer that dequantizes per call.
//
// The arithmetic follows bitsandbytes 0.50's CPU paths step by step (the fixtures of
// tests/fixtures/quant, made by scripts/quant_fixtures.py, hold its bytes):
// - quantize_4bit (backends/default/ops.py): per block of 64, absmax = max |w|; full blocks
//   scaled by w * (1 / max(absmax, 1e-38)), the last partial block by w / max(absmax, 1e-38)
//   (whose stored absmax is the clamped one); clamped to [-1, 1]; the code is the number of
//   midpoints between sorted levels below the value (torch.bucketize), mapped back through the
//   levels' argsort for FP4; packed two per byte, the first in the high nibble.
// - compress_statistics (functional.quantize_4bit): offset = mean(absmax) (torch's float
//   reduction), then quantize_blockwise(absmax - offset, 256) with the dynamic map. The CPU
//   kernel of 0.50 (csrc/cpu_ops.cpp, quantize_cpu_impl) is not an exact nearest-level search:
//   it multiplies by 1 / absmax, maps the value to one of 65,536 bins of [-1, 1]
//   (uint16((v + 1) * 0.5 * 65535 + 0.5)) and takes the level the bin's left edge is nearest
//   to (build_quantize_lut); a block whose absmax is 0 is all code 0. Replayed here exactly.
// - dequantize: level * absmax in float32, rounded to the dtype; the absmax of a double
//   quantization is dynamic[code] * absmax2 + offset.
// - Int8Params (nn/modules.py, backends/default/ops.py int8_vectorwise_quant): the weight in
//   float16, row absmax, round(w * (127 / absmax)) (ties to even); dequantized as
//   CB * SCB * (1 / 127) (int8_vectorwise_dequant).
#include "runtime/models/quant.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "base/status.h"

namespace accel {

namespace {

// bitsandbytes' get_4bit_type("nf4") and ("fp4"), as float32.
constexpr float kNF4[16] = {
    -0x1.0p+0f, -0x1.647362p-1f, -0x1.0cd66p-1f, -0x1.94654p-2f,
    -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0x0.0p+0f,
    0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f, 0x1.5a0674p-2f,
    0x1.c3497p-2f, 0x1.200f56p-1f, 0x1.722766p-1f, 0x1.0p+0f,
};
constexpr float kFP4[16] = {
    0x0.0p+0f, 0x1.555556p-8f, 0x1.555556p-1f, 0x1.0p+0f,
    0x1.555556p-2f, 0x1.0p-1f, 0x1.555556p-3f, 0x1.0p-2f,
    0x0.0p+0f, -0x1.555556p-8f, -0x1.555556p-1f, -0x1.0p+0f,
    -0x1.555556p-2f, -0x1.0p-1f, -0x1.555556p-3f, -0x1.0p-2f,
};
// torch.argsort of the FP4 levels (its order for the two zeros, which bucketize's result
// goes through): the level index of each sorted position.
constexpr uint8_t kFP4Order[16] = {11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3};
// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), sorted, as float32.
constexpr float kDynamic[256] = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, -0x1.df999ap-1f, -0x1.d86666p-1f,
    -0x1.d13334p-1f, -0x1.cap-1f, -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f, -0x1.893334p-1f, -0x1.82p-1f,
    -0x1.7accccp-1f, -0x1.73999ap-1f, -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f, -0x1.32ccccp-1f, -0x1.2b999ap-1f,
    -0x1.246668p-1f, -0x1.1d3334p-1f, -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f, -0x1.b8ccccp-2f, -0x1.aa6666p-2f,
    -0x1.9cp-2f, -0x1.8d9998p-2f, -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, -0x1.0cp-2f, -0x1.fb3332p-3f,
    -0x1.de6666p-3f, -0x1.c1999ap-3f, -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f, -0x1.93d70ap-4f, -0x1.8851eep-4f,
    -0x1.7ccccep-4f, -0x1.7147aep-4f, -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, -0x1.09999ap-4f, -0x1.fc28f6p-5f,
    -0x1.e51ebap-5f, -0x1.ce147ap-5f, -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f, -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f,
    -0x1.a147aep-6f, -0x1.733334p-6f, -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, -0x1.e978d4p-8f, -0x1.c49ba6p-8f,
    -0x1.9fbe76p-8f, -0x1.7ae148p-8f, -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, -0x1.eecbfep-11f, -0x1.b3d07cp-11f,
    -0x1.78d5p-11f, -0x1.3dd982p-11f, -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, -0x1.040bfep-17f, -0x1.b43528p-19f,
    -0x1.27476ep-21f, 0x0.0p+0f, 0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f, 0x1.19ce0ap-12f, 0x1.8fc506p-12f,
    0x1.02de02p-11f, 0x1.3dd982p-11f, 0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, 0x1.0c49bap-8f, 0x1.3126e8p-8f,
    0x1.56041ap-8f, 0x1.7ae148p-8f, 0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f, 0x1.d1eb86p-7f, 0x1.170a3ep-6f,
    0x1.451ebap-6f, 0x1.733334p-6f, 0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, 0x1.88f5c2p-5f, 0x1.ap-5f,
    0x1.b70a3ep-5f, 0x1.ce147ap-5f, 0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f, 0x1.4eb854p-4f, 0x1.5a3d7p-4f,
    0x1.65c29p-4f, 0x1.7147aep-4f, 0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, 0x1.6b3334p-3f, 0x1.88p-3f,
    0x1.a4ccccp-3f, 0x1.c1999ap-3f, 0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f, 0x1.626666p-2f, 0x1.70ccccp-2f,
    0x1.7f3334p-2f, 0x1.8d9998p-2f, 0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f, 0x1.079998p-1f, 0x1.0eccccp-1f,
    0x1.16p-1f, 0x1.1d3334p-1f, 0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f, 0x1.5ep-1f, 0x1.653334p-1f,
    0x1.6c6668p-1f, 0x1.73999ap-1f, 0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f, 0x1.b46666p-1f, 0x1.bb999ap-1f,
    0x1.c2ccccp-1f, 0x1.cap-1f, 0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1.0p+0f,
};

const float* levels(QuantType t) { return t == QuantType::NF4 ? kNF4 : kFP4; }

// The 15 midpoints between the sorted levels and the level index of each sorted position.
struct Buckets {
  float mid[15];
  uint8_t index[16];
};

Buckets buckets(QuantType t) {
  Buckets b{};
  const float* code = levels(t);
  for (int k = 0; k < 16; ++k) b.index[k] = t == QuantType::NF4 ? static_cast<uint8_t>(k) : kFP4Order[k];
  for (int k = 0; k < 15; ++k) b.mid[k] = (code[b.index[k]] + code[b.index[k + 1]]) / 2.0f;
  return b;
}

// torch.bucketize(x, mid, right=False): the number of midpoints below x.
inline uint8_t bucket(const Buckets& b, float x) {
  return b.index[std::lower_bound(b.mid, b.mid + 15, x) - b.mid];
}

inline float clamp1(float x) { return std::min(std::max(x, -1.0f), 1.0f); }

// The float32 values of the weight, row-major, on the CPU.
torch::Tensor host_float(const torch::Tensor& w) {
  return w.detach().to(torch::kCPU).to(torch::kFloat).contiguous();
}

}  // namespace

const char* quant_name(QuantType t) {
  switch (t) {
    case QuantType::NF4: return "nf4";
    case QuantType::FP4: return "fp4";
    case QuantType::Int8: return "int8";
    case QuantType::None: break;
  }
  return "none";
}

int64_t QuantizedWeight::bytes() const {
  int64_t n = 0;
  for (const auto* t : {&data, &absmax, &absmax2})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(t->element_size());
  return n;
}

namespace quant_detail {

const float* dynamic_map() { return kDynamic; }

namespace {

// bitsandbytes' 65,536-bin table: bin i (the value -1 + 2i / 65535) -> the first level whose
// midpoint with the next is not below it.
struct BlockwiseLut {
  uint8_t bin[65536];
  BlockwiseLut() {
    float mid[255];
    for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (kDynamic[i] + kDynamic[i + 1]);
    int code = 0;
    for (int i = 0; i < 65536; ++i) {
      const float v = -1.0f + (2.0f * static_cast<float>(i)) / 65535.0f;
      while (code < 255 && mid[code] < v) ++code;
      bin[i] = static_cast<uint8_t>(code);
    }
  }
};

inline uint8_t blockwise_code(const BlockwiseLut& lut, float v) {
  v = clamp1(v);
  const float a = (v + 1.0f) * 0.5f;
  const float b = a * 65535.0f;  // two roundings, as bitsandbytes (no fused multiply-add)
  return lut.bin[static_cast<uint16_t>(b + 0.5f)];
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& values, int64_t blocksize) {
  static const BlockwiseLut lut;
  const torch::Tensor a = host_float(values).reshape({-1});
  const int64_t n = a.numel(), blocks = (n + blocksize - 1) / blocksize;
  torch::Tensor codes = torch::empty({n}, torch::kUInt8), absmax = torch::empty({blocks}, torch::kFloat);
  const float* A = a.data_ptr<float>();
  uint8_t* out = codes.data_ptr<uint8_t>();
  float* am = absmax.data_ptr<float>();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s = b * blocksize, e = std::min(n, s + blocksize);
      float m = 0.0f;
      for (int64_t i = s; i < e; ++i) m = std::max(m, std::fabs(A[i]));
      am[b] = m;
      const float inv = m == 0.0f ? 0.0f : 1.0f / m;
      for (int64_t i = s; i < e; ++i) out[i] = m == 0.0f ? 0 : blockwise_code(lut, A[i] * inv);
    }
  });
  return {codes, absmax};
}

void double_quantize(QuantizedWeight& q, const torch::Tensor& absmax, float offset) {
  const torch::Tensor shifted = host_float(absmax) - offset;  // float32, as bitsandbytes' absmax - offset
  auto [codes, absmax2] = quantize_blockwise(shifted, 256);
  q.absmax = codes;
  q.absmax2 = absmax2;
  q.offset = offset;
}

torch::Tensor absmax_values(const QuantizedWeight& q) {
  if (!q.double_quant()) return host_float(q.absmax);
  const torch::Tensor codes = q.absmax.to(torch::kCPU).contiguous(), a2 = host_float(q.absmax2);
  const int64_t n = codes.numel();
  torch::Tensor out = torch::empty({n}, torch::kFloat);
  const uint8_t* c = codes.data_ptr<uint8_t>();
  const float* s = a2.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float v = kDynamic[c[i]] * s[i / 256];
    o[i] = v + q.offset;
  }
  return out;
}

}  // namespace quant_detail

QuantizedWeight quantize_weight(const torch::Tensor& w, QuantType type, bool double_quant, torch::ScalarType dtype) {
  ACCEL_CHECK(type != QuantType::None, Status::InvalidArgument, "quantize_weight: no quantization type");
  ACCEL_CHECK(w.defined() && w.dim() == 2, Status::InvalidArgument, "a quantized weight is 2-D, not ",
              w.defined() ? w.dim() : 0, "-D");
  ACCEL_CHECK(w.scalar_type() == torch::kFloat || w.scalar_type() == torch::kBFloat16 ||
                  w.scalar_type() == torch::kHalf,
              Status::InvalidArgument, "a quantized weight is float32, bfloat16 or float16, not ",
              c10::toString(w.scalar_type()));
  ACCEL_CHECK(type != QuantType::Int8 || !double_quant, Status::InvalidArgument,
              "double quantization applies to NF4 and FP4, not int8");
  QuantizedWeight q;
  q.type = type;
  q.rows = w.size(0);
  q.cols = w.size(1);
  q.dtype = dtype;
  const torch::Device dev = w.device();
  torch::NoGradGuard ng;
  if (type == QuantType::Int8) {
    // Int8Params: the weight in float16, then float32 arithmetic
    const torch::Tensor h = w.detach().to(torch::kCPU).to(torch::kHalf).to(torch::kFloat).contiguous();
    torch::Tensor cb = torch::empty({q.rows, q.cols}, torch::kChar), scb = torch::empty({q.rows}, torch::kFloat);
    const float* W = h.data_ptr<float>();
    int8_t* C = cb.data_ptr<int8_t>();
    float* S = scb.data_ptr<float>();
    const int64_t cols = q.cols;
    at::parallel_for(0, q.rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = W + r * cols;
        float m = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(row[c]));
        S[r] = m;
        const float k = (1.0f / m) * 127.0f;  // torch's 127.0 / t: t.reciprocal() * 127
        for (int64_t c = 0; c < cols; ++c) {
          const float v = std::nearbyint(row[c] * k);
          C[r * cols + c] = std::isnan(v) ? 0 : static_cast<int8_t>(v);  // a zero row: 0 * inf
        }
      }
    });
    q.data = cb.to(dev);
    q.absmax = scb.to(dev);
    return q;
  }
  const torch::Tensor a = host_float(w).reshape({-1});
  ACCEL_CHECK(torch::isfinite(a).all().item<bool>(), Status::InvalidArgument,
              "the weight to quantize has non-finite values");
  const int64_t n = a.numel(), bs = q.blocksize, full = n / bs, blocks = (n + bs - 1) / bs;
  const Buckets bk = buckets(type);
  torch::Tensor packed = torch::empty({(n + 1) / 2}, torch::kUInt8), absmax = torch::empty({blocks}, torch::kFloat);
  const float* A = a.data_ptr<float>();
  uint8_t* P = packed.data_ptr<uint8_t>();
  float* am = absmax.data_ptr<float>();
  // block by block (64 values: whole bytes); the last block may be partial and odd
  at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
    uint8_t codes[64];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s = b * bs, e = std::min(n, s + bs), len = e - s;
      float m = 0.0f;
      for (int64_t i = s; i < e; ++i) m = std::max(m, std::fabs(A[i]));
      if (b < full) {
        am[b] = m;
        const float r = 1.0f / std::max(m, 1e-38f);
        for (int64_t i = 0; i < len; ++i) codes[i] = bucket(bk, clamp1(A[s + i] * r));
      } else {
        const float c = std::max(m, 1e-38f);
        am[b] = c;
        for (int64_t i = 0; i < len; ++i) codes[i] = bucket(bk, clamp1(A[s + i] / c));
      }
      int64_t len2 = len;
      if (len2 % 2) codes[len2++] = bucket(bk, 0.0f);  // bitsandbytes pads an odd count with a 0
      for (int64_t i = 0; i < len2; i += 2) P[(s + i) / 2] = static_cast<uint8_t>((codes[i] << 4) | codes[i + 1]);
    }
  });
  q.data = packed.to(dev);
  if (double_quant) {
    const float offset = absmax.mean().item<float>();  // torch's float reduction, as bitsandbytes'
    quant_detail::double_quantize(q, absmax, offset);
    q.absmax = q.absmax.to(dev);
    q.absmax2 = q.absmax2.to(dev);
  } else {
    q.absmax = absmax.to(dev);
  }
  return q;
}

namespace quant_detail {

torch::Tensor dequantize_with_ops(const QuantizedWeight& q) {
  const torch::Device dev = q.data.device();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(dev);
  // the absmax, double quantization undone: dynamic[code] * absmax2 + offset, in float32
  torch::Tensor am;
  if (q.double_quant()) {
    const torch::Tensor dyn = torch::from_blob(const_cast<float*>(kDynamic), {256}, torch::kFloat).to(dev);
    const int64_t blocks = q.absmax.numel();
    const torch::Tensor scale = q.absmax2.to(f32).repeat_interleave(256).narrow(0, 0, blocks);
    am = dyn.index_select(0, q.absmax.to(torch::kLong)) * scale + q.offset;
  } else {
    am = q.absmax.to(f32);
  }
  // the codes, high nibble first, then level * absmax per block of 64, then the dtype
  const torch::Tensor bytes = q.data.to(torch::kInt);
  const torch::Tensor codes = torch::stack({bytes.__rshift__(4), bytes.bitwise_and(15)}, 1).reshape({-1});
  const int64_t n = q.numel();
  const torch::Tensor table = torch::from_blob(const_cast<float*>(levels(q.type)), {16}, torch::kFloat).to(dev);
  const torch::Tensor v = table.index_select(0, codes.narrow(0, 0, n).to(torch::kLong));
  const torch::Tensor scale = am.repeat_interleave(q.blocksize).narrow(0, 0, n);
  return (v * scale).to(q.dtype).view({q.rows, q.cols});
}

}  // namespace quant_detail

torch::Tensor dequantize_weight(const QuantizedWeight& q) {
  ACCEL_CHECK(q.type != QuantType::None && q.data.defined(), Status::InvalidArgument, "the weight is not quantized");
  const torch::Device dev = q.data.device();
  if (q.type != QuantType::Int8 && !dev.is_cpu()) return quant_detail::dequantize_with_ops(q);
  if (q.type == QuantType::Int8) {
    // int8_vectorwise_dequant: CB * SCB * (1 / 127) in float32
    torch::Tensor w = q.data.to(torch::kFloat) * q.absmax.to(dev, torch::kFloat).view({-1, 1});
    return (w * 7.874015718698502e-3).to(q.dtype);
  }
  const torch::Tensor am = quant_detail::absmax_values(q);
  const torch::Tensor packed = q.data.to(torch::kCPU).contiguous();
  const int64_t n = q.numel(), bs = q.blocksize, blocks = (n + bs - 1) / bs;
  const float* code = levels(q.type);
  const uint8_t* P = packed.data_ptr<uint8_t>();
  const float* M = am.data_ptr<float>();
  torch::Tensor out = torch::empty({q.rows, q.cols}, q.dtype == torch::kFloat ? torch::kFloat : q.dtype);
  auto run = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const float s = M[b];
        const int64_t e = std::min(n, (b + 1) * bs);
        for (int64_t i = b * bs; i < e; ++i) {
          const uint8_t byte = P[i / 2];
          const float v = code[(i % 2) ? (byte & 0x0F) : (byte >> 4)] * s;
          o[i] = static_cast<T>(v);
        }
      }
    });
  };
  if (q.dtype == torch::kFloat) {
    run(out.data_ptr<float>());
  } else if (q.dtype == torch::kBFloat16) {
    run(out.data_ptr<c10::BFloat16>());
  } else {
    ACCEL_CHECK(q.dtype == torch::kHalf, Status::InvalidArgument, "a quantized weight dequantizes to float32, "
                "bfloat16 or float16, not ", c10::toString(q.dtype));
    run(out.data_ptr<c10::Half>());
  }
  return out.to(dev);
}

namespace {

// The weight rebuilt from what a forward saved.
QuantizedWeight from_saved(const torch::autograd::variable_list& t, const std::vector<int64_t>& meta, double offset) {
  QuantizedWeight q;
  q.type = static_cast<QuantType>(meta[0]);
  q.rows = meta[1];
  q.cols = meta[2];
  q.dtype = static_cast<torch::ScalarType>(meta[3]);
  q.blocksize = meta[4];
  q.data = t[0];
  q.absmax = t[1];
  if (t[2].numel() > 0) q.absmax2 = t[2];
  q.offset = static_cast<float>(offset);
  return q;
}

// y = x W^T; backward: dx = dy W (W dequantized again), nothing for W.
struct QuantLinearFn : public torch::autograd::Function<QuantLinearFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& data,
                               const torch::Tensor& absmax, const torch::Tensor& absmax2, std::vector<int64_t> meta,
                               double offset) {
    const QuantizedWeight q = from_saved({data, absmax, absmax2}, meta, offset);
    const torch::Tensor w = dequantize_weight(q);
    ctx->saved_data["data"] = data;
    ctx->saved_data["absmax"] = absmax;
    ctx->saved_data["absmax2"] = absmax2;
    ctx->saved_data["meta"] = meta;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return torch::linear(x, w.scalar_type() == x.scalar_type() ? w : w.to(x.scalar_type()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const QuantizedWeight q =
        from_saved({ctx->saved_data["data"].toTensor(), ctx->saved_data["absmax"].toTensor(),
                    ctx->saved_data["absmax2"].toTensor()},
                   ctx->saved_data["meta"].toIntVector(), ctx->saved_data["offset"].toDouble());
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const torch::Tensor& gy = grads[0];
    torch::Tensor w = dequantize_weight(q);
    if (w.scalar_type() != gy.scalar_type()) w = w.to(gy.scalar_type());
    torch::Tensor gx = torch::matmul(gy, w);
    if (gx.scalar_type() != x_dtype) gx = gx.to(x_dtype);
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor quantized_linear(const torch::Tensor& x, const QuantizedWeight& q, const torch::Tensor& bias) {
  ACCEL_CHECK(x.size(-1) == q.cols, Status::InvalidArgument, "the input has ", x.size(-1), " features, the quantized "
              "weight ", q.cols);
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) {
    const torch::Tensor w = dequantize_weight(q);
    return torch::linear(x, w.scalar_type() == x.scalar_type() ? w : w.to(x.scalar_type()), bias);
  }
  const torch::Tensor a2 = q.double_quant() ? q.absmax2 : torch::empty({0}, torch::kFloat);
  std::vector<int64_t> meta = {static_cast<int64_t>(q.type), q.rows, q.cols, static_cast<int64_t>(q.dtype),
                               q.blocksize};
  // the (frozen) bias outside the function: an undefined tensor cannot be one of its inputs
  torch::Tensor y = QuantLinearFn::apply(x, q.data, q.absmax, a2, meta, static_cast<double>(q.offset));
  return bias.defined() ? y + bias.detach() : y;
}

}  // namespace accel
