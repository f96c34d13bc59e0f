// SGD's and AdamW's update of one tensor (update.h): the fused kernels for contiguous fp32
// host memory, libtorch's ops term by term for anything else.
#include "runtime/optim/update.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "runtime/optim/kernels.h"

namespace accel {

namespace {
// The fused kernels take contiguous fp32 host memory; anything else takes libtorch's ops.
bool fusable(std::initializer_list<const torch::Tensor*> ts) {
  for (const torch::Tensor* t : ts)
    if (!t->defined() || !t->device().is_cpu() || t->scalar_type() != torch::kFloat || !t->is_contiguous()) return false;
  return true;
}

// The kernels' threads: libtorch's intra-op count, one inside a parallel region.
int kernel_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }
}  // namespace

void adamw_update(const AdamWConfig& c, double lr, int64_t step, const torch::Tensor& param, const torch::Tensor& grad,
                  const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq) {
  const double bias_correction1 = 1 - std::pow(c.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(c.beta2, static_cast<double>(step));
  torch::Tensor p = param.detach();
  if (fusable({&p, &grad, &exp_avg, &exp_avg_sq}) && grad.numel() == p.numel()) {
    optim::AdamWCoefficients k;
    k.decay = c.weight_decay != 0;
    k.decay_factor = static_cast<float>(1 - lr * c.weight_decay);
    k.beta1 = static_cast<float>(c.beta1);
    k.one_minus_beta1 = static_cast<float>(1 - c.beta1);
    k.beta2 = static_cast<float>(c.beta2);
    k.one_minus_beta2 = static_cast<float>(1 - c.beta2);
    k.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
    k.eps = static_cast<float>(c.eps);
    k.neg_step_size = static_cast<float>(-(lr / bias_correction1));
    float *pp = p.data_ptr<float>(), *m = exp_avg.data_ptr<float>(), *v = exp_avg_sq.data_ptr<float>();
    const float* g = grad.data_ptr<float>();
    optim::adamw(pp, g, m, v, p.numel(), k, kernel_threads());
    return;
  }
  // libtorch's AdamW, term by term (what the kernel computes, on any device and dtype)
  if (c.weight_decay != 0) p.mul_(1 - lr * c.weight_decay);
  exp_avg.mul_(c.beta1).add_(grad, 1 - c.beta1);
  exp_avg_sq.mul_(c.beta2).addcmul_(grad, grad, 1 - c.beta2);
  torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(c.eps);
  p.addcdiv_(exp_avg, denom, -(lr / bias_correction1));
}

void sgd_update(const SGDConfig& c, double lr, const torch::Tensor& param, const torch::Tensor& grad,
                const torch::Tensor& momentum_buffer, bool first) {
  torch::Tensor p = param.detach();
  const bool momentum = c.momentum != 0;
  if (fusable({&p, &grad}) && (!momentum || fusable({&momentum_buffer})) && grad.numel() == p.numel()) {
    optim::SGDCoefficients k;
    k.decay = c.weight_decay != 0;
    k.weight_decay = static_cast<float>(c.weight_decay);
    k.momentum = momentum;
    k.momentum_factor = static_cast<float>(c.momentum);
    k.one_minus_dampening = static_cast<float>(1 - c.dampening);
    k.nesterov = c.nesterov;
    k.first = first;
    k.neg_lr = static_cast<float>(-lr);
    float* pp = p.data_ptr<float>();
    float* buf = momentum ? momentum_buffer.data_ptr<float>() : nullptr;
    const float* g = grad.data_ptr<float>();
    optim::sgd(pp, g, buf, p.numel(), k, kernel_threads());
    return;
  }
  // libtorch's SGD, term by term
  torch::Tensor d = grad;
  if (c.weight_decay != 0) d = d.add(p, c.weight_decay);
  if (momentum) {
    if (first)
      momentum_buffer.copy_(d);
    else
      momentum_buffer.mul_(c.momentum).add_(d, 1 - c.dampening);
    d = c.nesterov ? d.add(momentum_buffer, c.momentum) : momentum_buffer;
  }
  p.add_(d, -lr);
}

}  // namespace accel
