// See kernels.h. This file is compiled with -ffp-contract=off (only the fused multiply-adds
// written as std::fma are fused, as in libtorch's kernels) and -fno-math-errno (so the
// square root vectorizes), and with OpenMP.
#include "runtime/optim/kernels.h"

#include <algorithm>
#include <cmath>

namespace accel::optim {

namespace {

constexpr int64_t kChunk = int64_t{1} << 15;  // elements per task

// Runs f(begin, count) over [0, n) in chunks on `threads` OpenMP threads (one: inline).
template <class F>
void chunked(int64_t n, int threads, F&& f) {
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  if (threads <= 1 || tasks <= 1) return f(int64_t{0}, n);
#pragma omp parallel for num_threads(std::min<int64_t>(threads, tasks)) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) f(t * kChunk, std::min(kChunk, n - t * kChunk));
}

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define ACCEL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define ACCEL_VECTOR_CLONES
#endif

// libtorch (CPU): p.mul_(1 - lr*wd); m.mul_(b1).add_(g, 1-b1) (a fused multiply-add);
// v.mul_(b2).addcmul_(g, g, 1-b2) (contracted to one too); denom = sqrt(v) / sqrt(bc2) + eps;
// p.addcdiv_(m, denom, -lr/bc1), which is p + (-lr/bc1 * m) / denom.
ACCEL_VECTOR_CLONES
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                 const AdamWCoefficients& c) {
  const AdamWCoefficients k = c;
  for (int64_t i = 0; i < n; ++i) {
    const float w = k.decay ? p[i] * k.decay_factor : p[i];
    const float gi = g[i];
    const float mi = std::fma(gi, k.one_minus_beta1, m[i] * k.beta1);
    const float vi = std::fma(k.one_minus_beta2 * gi, gi, v[i] * k.beta2);
    const float denom = std::sqrt(vi) / k.sqrt_bias_correction2 + k.eps;
    p[i] = w + (k.neg_step_size * mi) / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

// libtorch: d = g.add(p, wd); buf = clone(d) at first, else buf.mul_(momentum).add_(d, 1 -
// dampening); d = nesterov ? d.add(buf, momentum) : buf; p.add_(d, -lr). Each add with a
// factor is a fused multiply-add.
ACCEL_VECTOR_CLONES
void sgd_range(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n, const SGDCoefficients& c) {
  const SGDCoefficients k = c;
  for (int64_t i = 0; i < n; ++i) {
    float d = k.decay ? std::fma(p[i], k.weight_decay, g[i]) : g[i];
    if (k.momentum) {
      const float b = k.first ? d : std::fma(d, k.one_minus_dampening, buf[i] * k.momentum_factor);
      buf[i] = b;
      d = k.nesterov ? std::fma(b, k.momentum_factor, d) : b;
    }
    p[i] = std::fma(d, k.neg_lr, p[i]);
  }
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWCoefficients& c, int threads) {
  chunked(n, threads, [&](int64_t at, int64_t k) { adamw_range(p + at, g + at, m + at, v + at, k, c); });
}

void sgd(float* p, const float* g, float* buf, int64_t n, const SGDCoefficients& c, int threads) {
  chunked(n, threads, [&](int64_t at, int64_t k) { sgd_range(p + at, g + at, buf ? buf + at : nullptr, k, c); });
}

}  // namespace accel::optim
