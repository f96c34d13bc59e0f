// Models (the built-in MLP, TorchScript modules), the losses, and weight export.
#pragma once

#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/options.h"

namespace accel {

// Models

// Called by a model around the use of each of its parameter units in forward (ZeRO stage 3
// gathers a unit's weights before and frees them after).
class UnitGate {
 public:
  virtual ~UnitGate() = default;
  virtual void before(size_t unit) = 0;
  // `out` is the unit's output (a backward hook on it gathers the weights again)
  virtual void after(size_t unit, const torch::Tensor& out) = 0;
};

namespace lm_detail {
struct KVCache;
class TransformerLM;
}

struct ForwardMode {
  bool emulate_fp16 = false;  // round activations/weights/gradients through fp16
  UnitGate* gate = nullptr;   // when set, models that report gates_units() call it per unit
  // A causal LM's keys and values of the positions before inputs[0] (generation): the
  // forward attends to them, appends its own, and its positions continue after them.
  lm_detail::KVCache* cache = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) = 0;
  virtual void to(const torch::Device& device) = 0;
  virtual void train(bool on) = 0;
  virtual bool is_training() const = 0;
  // Parameters in a stable order with dotted names ("layers.0.weight").
  const std::vector<std::string>& parameter_names() const { return names_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  int64_t num_elements() const;
  // Rounds each parameter's gradient contribution through fp16 while `on` (set by the
  // Accelerator for fp16 emulation on models whose layers it cannot instrument).
  virtual void set_grad_rounding(bool on) { (void)on; }
  // Non-trainable state (e.g. batch-norm running statistics), in a stable order.
  virtual std::vector<torch::Tensor> buffers() const { return {}; }
  // Parameter units: indices of parameters used together (a layer), in forward order.
  // The default is one unit holding everything.
  virtual std::vector<std::vector<size_t>> units() const;
  static std::vector<std::vector<size_t>> units_of_all(size_t nparams);
  // True when forward calls ForwardMode::gate around each unit's use.
  virtual bool gates_units() const { return false; }
  // Writes a TorchScript file of this model with `weights` (fp32, model order). Only
  // models that came from TorchScript can (Unsupported otherwise).
  virtual bool from_torchscript() const { return false; }
  virtual void export_torchscript(const std::vector<torch::Tensor>& weights, const std::string& path) const {
    (void)weights;
    fail(Status::Unsupported, "only a model loaded from TorchScript exports as TorchScript ('", path,
         "'); save the built-in MLP as .safetensors");
  }
  // Whether forward accepts bf16/fp16 parameters with fp32 inputs outside autocast (the
  // built-in MLP casts); ZeRO keeps the working copy in fp32 for models that do not.
  virtual bool casts_weights() const { return false; }
  // Why its parameters cannot be trained (an optimizer refuses the model), or empty: a causal
  // LM with a quantized base and no adapters.
  virtual std::string untrainable() const { return {}; }
  // Whether inputs[0] is [batch, seq] with one sample per token (a language model): the
  // simulator's compute estimates count batch x seq rows.
  virtual bool sequence_inputs() const { return false; }
  // A model of the same structure with parameters and buffers of its own, for inference
  // beside training (runtime/inference.h): its parameters() and buffers() line up with this
  // model's one by one, their values unspecified (the caller adopts published ones); state
  // that is not published (a LoRA model's frozen base weights) is copied. It reads no
  // parameter of this model, which ZeRO-3 may have released. Unsupported for a model that
  // cannot be copied.
  virtual std::unique_ptr<Model> clone() const {
    fail(Status::Unsupported, "this kind of model cannot be copied for inference");
  }
  // The causal-LM capability (runtime/models/transformer.h): the model itself where it is a
  // causal LM (GPT-2, Llama), else null. What only LMs do (LoRA, Hugging Face I/O,
  // generation, gradient checkpointing) asks this instead of casting.
  virtual lm_detail::TransformerLM* as_lm() { return nullptr; }
  virtual const lm_detail::TransformerLM* as_lm() const { return nullptr; }

 protected:
  void set_parameters(std::vector<std::string> names, std::vector<torch::Tensor> params) {
    names_ = std::move(names);
    params_ = std::move(params);
  }

 private:
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;
};

enum class Activation { ReLU = 0, GELU = 1, Tanh = 2, Sigmoid = 3 };

struct MLPConfig {
  std::vector<int64_t> sizes;  // input, hidden..., output
  Activation activation = Activation::ReLU;
  double dropout = 0.0;
  bool bias = true;
};

// The built-in multi-layer perceptron. `gen` draws the initial weights (like torch.nn.Linear:
// U(-1/sqrt(fan_in), 1/sqrt(fan_in))) and the dropout masks.
std::unique_ptr<Model> make_mlp(const MLPConfig& cfg, at::Generator gen);

// Loads a TorchScript module (IO error when the file is missing, Format error when it is
// not a module with a forward method).
std::unique_ptr<Model> load_torchscript(const std::string& path);

// Writes the model's parameters (fp32, on the host) to `path` as safetensors, atomically.
void save_model_safetensors(const Model& model, const std::string& path);
void save_safetensors(const std::vector<std::string>& names, const std::vector<torch::Tensor>& tensors,
                      const std::string& path);

// ---------------------------------------------------------------------------------------
// Losses (fp32 whatever the input precision; validate shapes, dtypes and class ranges)

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);
torch::Tensor mse(const torch::Tensor& input, const torch::Tensor& target);

}  // namespace accel
