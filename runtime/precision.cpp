// Mixed precision: fp16 emulated by rounding, and dynamic loss scaling (precision.h).
#include "runtime/precision.h"

#include <cmath>
#include <limits>
#include <string>

#include "runtime/blas.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// fp16 emulation

namespace {
struct RoundFP16 : public torch::autograd::Function<RoundFP16> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) {
    return x.to(torch::kHalf).to(x.scalar_type());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    const auto& g = grads[0];
    return {g.to(torch::kHalf).to(g.scalar_type())};
  }
};
}  // namespace

torch::Tensor round_through_fp16(const torch::Tensor& x) {
  if (!x.defined() || !x.is_floating_point()) return x;
  return RoundFP16::apply(x);
}

// ---------------------------------------------------------------------------------------
// Native bf16

bool bf16_native(const torch::Device& device, std::string* why) {
  if (device.is_cuda()) {
    if (why) *why = "CUDA";
    return true;
  }
  return blas::cpu_bf16_native(why);
}

// ---------------------------------------------------------------------------------------
// Loss scaling

bool LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  if (!enabled_) return false;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return false;
  const double inv = inv_scale();
  if (grads.front().is_cuda()) {
    auto found = torch::zeros({1}, grads.front().options().dtype(torch::kFloat));
    auto inv_t = torch::full({1}, inv, grads.front().options().dtype(torch::kFloat));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv_t);
    return found.item<float>() != 0.0f;
  }
  torch::Tensor finite = torch::ones({}, torch::kBool);
  for (auto& g : grads) {
    g.mul_(inv);
    finite = finite.logical_and(torch::isfinite(g).all());
  }
  return !finite.item<bool>();
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  if (found_inf) {
    scale_ *= backoff_;
    tracker_ = 0;
    return;
  }
  if (++tracker_ >= interval_) {
    double grown = scale_ * growth_;
    if (std::isfinite(grown) && grown <= static_cast<double>(std::numeric_limits<float>::max())) scale_ = grown;
    tracker_ = 0;
  }
}

}  // namespace accel
