// The optimizers' elementwise arithmetic, written once: AdamW's and SGD's update of one
// contiguous fp32 range, fused into a single pass over the parameter, its gradient and its
// state (libtorch's optimizers make one pass per term: five to seven over memory). Each
// term rounds as libtorch's CPU kernels round it (the same products, the same fused
// multiply-adds, in the same order), so the results are bit for bit those of libtorch
// 1.13's torch::optim::AdamW and torch::optim::SGD on the same CPU (2.x's kernels differ in
// a last bit here and there; tests/runtime/test_runtime.cpp FusedOptimizers). Torch-free; compiled for the
// CPU's best vector unit (AVX-512, AVX2+FMA, or portable code), chosen at load time, and
// split across `threads` OpenMP threads (libtorch's intra-op pool is OpenMP's too).
// Used by the unsharded Optimizer per parameter and by ZeRO per shard (runtime/optim/update.h).
#pragma once

#include <cstdint>

namespace accel::optim {

// AdamW's coefficients for one step, already in the fp32 in which libtorch applies them.
struct AdamWCoefficients {
  bool decay = false;       // weight_decay != 0
  float decay_factor = 1;   // 1 - lr * weight_decay
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float sqrt_bias_correction2 = 1;  // sqrt(1 - beta2^step)
  float eps = 0;
  float neg_step_size = 0;  // -lr / (1 - beta1^step)
};
// p, m (exp_avg), v (exp_avg_sq) updated in place from g, elements [0, n).
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWCoefficients& c, int threads);

struct SGDCoefficients {
  bool decay = false;       // weight_decay != 0
  float weight_decay = 0;
  bool momentum = false;    // momentum != 0
  float momentum_factor = 0, one_minus_dampening = 1;
  bool nesterov = false;
  bool first = false;       // the momentum buffer is new: it starts as the first update
  float neg_lr = 0;
};
// p and buf (the momentum buffer; unused without momentum) updated in place from g.
void sgd(float* p, const float* g, float* buf, int64_t n, const SGDCoefficients& c, int threads);

}  // namespace accel::optim
