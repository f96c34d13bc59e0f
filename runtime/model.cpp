// Models (built-in MLP, TorchScript), losses and weight export.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <fstream>

#include "base/files.h"
#include "runtime/compat.h"
#include "runtime/model.h"
#include "runtime/precision.h"
#include "runtime/safetensors.h"

namespace accel {

std::vector<std::vector<size_t>> Model::units() const { return units_of_all(params_.size()); }

std::vector<std::vector<size_t>> Model::units_of_all(size_t nparams) {
  std::vector<size_t> all(nparams);
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return {all};
}

int64_t Model::num_elements() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

// ---------------------------------------------------------------------------------------
// The built-in MLP

namespace {

class MLP final : public Model {
 public:
  MLP(const MLPConfig& cfg, at::Generator gen) : cfg_(cfg), gen_(std::move(gen)) {
    ACCEL_CHECK(cfg.sizes.size() >= 2, Status::InvalidArgument,
                "num_layer_sizes must be >= 2 (an input and an output size), got ", cfg.sizes.size());
    int64_t total = 0;  // parameters, checked against overflow (of their bytes too)
    for (size_t i = 0; i < cfg.sizes.size(); ++i) {
      ACCEL_CHECK(cfg.sizes[i] >= 1, Status::InvalidArgument, "layer_sizes[", i, "] must be >= 1, got ", cfg.sizes[i]);
      if (i == 0) continue;
      const int64_t in = cfg.sizes[i - 1], out = cfg.sizes[i], limit = INT64_MAX / 8;
      ACCEL_CHECK(in <= limit / out && in * out <= limit - out - total, Status::InvalidArgument, "layer_sizes[", i - 1,
                  "] x layer_sizes[", i, "] = ", in, " x ", out, " weights: the parameter count overflows");
      total += in * out + out;
    }
    ACCEL_CHECK(cfg.dropout >= 0.0 && cfg.dropout < 1.0, Status::InvalidArgument, "dropout must be in [0, 1), got ",
                cfg.dropout);
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i + 1 < cfg.sizes.size(); ++i) {
      int64_t in = cfg.sizes[i], out = cfg.sizes[i + 1];
      double bound = 1.0 / std::sqrt(static_cast<double>(in));
      auto w = torch::empty({out, in}, torch::kFloat).uniform_(-bound, bound, gen_);
      names.push_back("layers." + std::to_string(i) + ".weight");
      params.push_back(w.requires_grad_(true));
      if (cfg.bias) {
        auto b = torch::empty({out}, torch::kFloat).uniform_(-bound, bound, gen_);
        names.push_back("layers." + std::to_string(i) + ".bias");
        params.push_back(b.requires_grad_(true));
      }
    }
    set_parameters(std::move(names), std::move(params));
  }

  torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    ACCEL_CHECK(inputs.size() == 1, Status::InvalidArgument, "num_inputs must be 1 (the MLP takes one input tensor), got ",
                inputs.size());
    torch::Tensor x = inputs[0];
    ACCEL_CHECK(x.dim() == 2 && x.size(1) == cfg_.sizes[0], Status::InvalidArgument, "inputs[0]: the MLP expects input [batch, ",
                cfg_.sizes[0], "], got ", shape_str(x));
    ACCEL_CHECK(x.is_floating_point(), Status::InvalidArgument, "inputs[0]: the MLP expects a floating-point input, got ",
                c10::toString(x.scalar_type()));
    if (x.scalar_type() != torch::kFloat) x = x.to(torch::kFloat);
    const auto& p = parameters();
    const size_t layers = cfg_.sizes.size() - 1;
    const size_t per = cfg_.bias ? 2 : 1;
    for (size_t i = 0; i < layers; ++i) {
      if (mode.gate) mode.gate->before(i);
      torch::Tensor w = p[i * per];
      torch::Tensor b = cfg_.bias ? p[i * per + 1] : torch::Tensor();
      if (mode.emulate_fp16) {
        // weights may be held in fp16 (ZeRO's working copy): compute in fp32 on fp16 values
        if (w.scalar_type() != torch::kFloat) w = w.to(torch::kFloat);
        if (b.defined() && b.scalar_type() != torch::kFloat) b = b.to(torch::kFloat);
        x = round_through_fp16(torch::linear(round_through_fp16(x), round_through_fp16(w), round_through_fp16(b)));
      } else if (w.scalar_type() != x.scalar_type() && !compat::autocast_enabled(x.device().type())) {
        x = torch::linear(x.to(w.scalar_type()), w, b).to(torch::kFloat);
      } else {
        x = torch::linear(x, w, b);
      }
      if (mode.gate) mode.gate->after(i, x);
      if (i + 1 < layers) {
        x = activate(x);
        if (mode.emulate_fp16) x = round_through_fp16(x);
        if (training_ && cfg_.dropout > 0.0) {
          auto keep = torch::empty_like(x).bernoulli_(1.0 - cfg_.dropout, gen_);
          x = x * keep / (1.0 - cfg_.dropout);
        }
      }
    }
    return x;
  }

  void to(const torch::Device& device) override {
    std::vector<torch::Tensor> moved;
    for (const auto& t : parameters()) {
      if (t.device() == device) {
        moved.push_back(t);
      } else {
        moved.push_back(t.detach().to(device).requires_grad_(true));
      }
    }
    set_parameters(parameter_names(), std::move(moved));
  }
  void train(bool on) override { training_ = on; }
  bool is_training() const override { return training_; }
  std::vector<std::vector<size_t>> units() const override {
    const size_t per = cfg_.bias ? 2 : 1;
    std::vector<std::vector<size_t>> u(cfg_.sizes.size() - 1);
    for (size_t i = 0; i < u.size(); ++i)
      for (size_t j = 0; j < per; ++j) u[i].push_back(i * per + j);
    return u;
  }
  bool gates_units() const override { return true; }
  bool casts_weights() const override { return true; }
  std::unique_ptr<Model> clone() const override {  // the shapes from the configuration: ZeRO-3 may hold none here
    auto c = std::make_unique<MLP>(cfg_, at::detail::createCPUGenerator(0));
    c->training_ = training_;
    return c;
  }

 private:
  torch::Tensor activate(const torch::Tensor& x) const {
    switch (cfg_.activation) {
      case Activation::ReLU: return torch::relu(x);
      case Activation::GELU: return torch::gelu(x);
      case Activation::Tanh: return torch::tanh(x);
      case Activation::Sigmoid: return torch::sigmoid(x);
    }
    return x;
  }

  MLPConfig cfg_;
  at::Generator gen_;
  bool training_ = true;
};

// ---------------------------------------------------------------------------------------
// TorchScript

class ScriptModel final : public Model {
 public:
  ScriptModel(torch::jit::Module m, std::string path)
      : module_(std::move(m)), path_(std::move(path)), rounding_(std::make_shared<bool>(false)) {
    refresh();
    for (const auto& p : parameters()) p.requires_grad_(true);
    module_.train(true);
  }

  torch::Tensor forward(const std::vector<torch::Tensor>& inputs, const ForwardMode& mode) override {
    std::vector<torch::jit::IValue> args;
    args.reserve(inputs.size());
    for (const auto& t : inputs) args.emplace_back(mode.emulate_fp16 ? round_through_fp16(t) : t);
    torch::jit::IValue out;
    try {
      out = module_.forward(std::move(args));
    } catch (const c10::Error& e) {
      fail(Status::InvalidArgument, "the TorchScript forward failed on inputs ", describe(inputs), ": ",
           first_line(e.what_without_backtrace()));
    } catch (const std::runtime_error& e) {  // the interpreter rethrows errors as runtime_error
      fail(Status::InvalidArgument, "the TorchScript forward failed on inputs ", describe(inputs), ": ",
           first_line(e.what()));
    }
    ACCEL_CHECK(out.isTensor(), Status::Format, "the TorchScript forward returned ", out.tagKind(),
                ", accel expects a tensor");
    auto y = out.toTensor();
    return mode.emulate_fp16 ? round_through_fp16(y) : y;
  }

  void to(const torch::Device& device) override {
    module_.to(device);
    refresh();
  }
  void train(bool on) override { module_.train(on); }
  bool is_training() const override { return module_.is_training(); }

  std::vector<torch::Tensor> buffers() const override {
    std::vector<torch::Tensor> out;
    for (const auto& nb : module_.named_buffers(/*recurse=*/true)) out.push_back(nb.value);
    return out;
  }

  bool from_torchscript() const override { return true; }
  std::unique_ptr<Model> clone() const override {
    // the module as loaded, from its file: the live one's parameters may be sharded by ZeRO
    auto c = std::make_unique<ScriptModel>(reload("an inference copy loads"), path_);
    ACCEL_CHECK(c->parameters().size() == parameters().size() && c->buffers().size() == buffers().size(),
                Status::Internal, "the TorchScript file '", path_, "' changed since it was loaded");
    c->module_.train(module_.is_training());
    return c;
  }
  void export_torchscript(const std::vector<torch::Tensor>& weights, const std::string& path) const override {
    // a fresh copy of the module as it was loaded, with the trained weights: the live one's
    // parameters may be sharded or in 16 bits
    torch::jit::Module m = reload("exporting needs");
    torch::NoGradGuard ng;
    size_t i = 0;
    for (const auto& np : m.named_parameters(/*recurse=*/true)) {
      ACCEL_CHECK(i < weights.size() && np.value.sizes() == weights[i].sizes(), Status::Internal,
                  "the TorchScript file changed since it was loaded: parameter '", np.name, "'");
      np.value.copy_(weights[i++]);
    }
    auto live = module_.named_buffers(/*recurse=*/true).begin();
    for (const auto& nb : m.named_buffers(/*recurse=*/true)) {
      nb.value.copy_((*live).value.to(torch::kCPU));
      ++live;
    }
    std::string tmp;  // made with O_EXCL: never a file we did not make (base/files.h)
    if (files::Result r = files::make_temporary(path, tmp); !r) fail(status_of_errno(r.err), r.message);
    try {
      m.save(tmp);
    } catch (const c10::Error& e) {
      ::unlink(tmp.c_str());
      fail(Status::IO, "cannot write '", tmp, "': ", first_line(e.what_without_backtrace()));
    }
    if (files::Result r = files::commit(tmp, path); !r) fail(status_of_errno(r.err), r.message);
  }

  void set_grad_rounding(bool on) override {
    *rounding_ = on;
    if (!on || hooked_) return;
    hooked_ = true;
    std::shared_ptr<bool> flag = rounding_;
    for (const auto& p : parameters()) {
      p.register_hook([flag](const torch::Tensor& g) -> torch::Tensor {
        return *flag ? g.to(torch::kHalf).to(g.scalar_type()) : g;
      });
    }
  }

 private:
  // The module again from the file it came from, on the CPU (IO error: `why` the file is needed).
  torch::jit::Module reload(const char* why) const {
    try {
      return torch::jit::load(path_, torch::kCPU);
    } catch (const c10::Error& e) {
      fail(Status::IO, why, " the TorchScript file the model came from, '", path_, "': ",
           first_line(e.what_without_backtrace()));
    }
  }
  void refresh() {
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    for (const auto& np : module_.named_parameters(/*recurse=*/true)) {
      names.push_back(np.name);
      params.push_back(np.value);
    }
    set_parameters(std::move(names), std::move(params));
  }
  static std::string describe(const std::vector<torch::Tensor>& ts) {
    std::string s;
    for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + shape_str(ts[i]) + " " + c10::toString(ts[i].scalar_type());
    return s;
  }
  static std::string first_line(const std::string& s) {
    // TorchScript errors carry a stack of source locations; keep the informative lines.
    std::istringstream in(s);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty() && line.find_first_not_of(" ~^") != std::string::npos) last = line;
    return last.empty() ? s : last;
  }

  torch::jit::Module module_;
  std::string path_;
  std::shared_ptr<bool> rounding_;
  bool hooked_ = false;
};

}  // namespace

std::unique_ptr<Model> make_mlp(const MLPConfig& cfg, at::Generator gen) {
  return std::make_unique<MLP>(cfg, std::move(gen));
}

std::unique_ptr<Model> load_torchscript(const std::string& path) {
  ACCEL_CHECK(!path.empty(), Status::InvalidArgument, "path is empty");
  struct stat st {};
  ACCEL_CHECK(::stat(path.c_str(), &st) == 0, Status::IO, "cannot open TorchScript file '", path, "': ",
              std::strerror(errno));
  ACCEL_CHECK(S_ISREG(st.st_mode), Status::IO, "'", path, "' is not a regular file");
  {
    std::ifstream probe(path, std::ios::binary);
    ACCEL_CHECK(probe.good(), Status::IO, "cannot read TorchScript file '", path, "'");
  }
  torch::jit::Module m;
  try {
    m = torch::jit::load(path);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    fail(Status::Format, "'", path, "' is not a TorchScript module: ", what.substr(0, what.find('\n')));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {  // the archive reader's own errors
    fail(Status::Format, "'", path, "' is not a TorchScript module: ", e.what());
  }
  ACCEL_CHECK(m.find_method("forward").has_value(), Status::Format, "the TorchScript module in '", path,
              "' has no forward method");
  return std::make_unique<ScriptModel>(std::move(m), path);
}

void save_safetensors(const std::vector<std::string>& names, const std::vector<torch::Tensor>& tensors,
                      const std::string& path) {
  std::vector<torch::Tensor> host;
  std::vector<safetensors::TensorView> views;
  host.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    host.push_back(tensors[i].detach().to(torch::kCPU, torch::kFloat).contiguous());
    const auto& t = host.back();
    views.push_back({names[i], "F32", t.sizes().vec(), t.data_ptr(), t.numel() * sizeof(float)});
  }
  safetensors::write_file_atomic(path, safetensors::serialize(views, {{"format", "pt"}}));
}

void save_model_safetensors(const Model& model, const std::string& path) {
  save_safetensors(model.parameter_names(), model.parameters(), path);
}

// ---------------------------------------------------------------------------------------
// Losses

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  ACCEL_CHECK(logits.dim() == 2, Status::InvalidArgument, "cross-entropy logits must be [batch, classes], got ",
              shape_str(logits));
  ACCEL_CHECK(logits.is_floating_point(), Status::InvalidArgument, "cross-entropy logits must be floating-point, got ",
              c10::toString(logits.scalar_type()));
  ACCEL_CHECK(targets.dim() == 1, Status::InvalidArgument, "cross-entropy targets must be [batch] class indices, got ",
              shape_str(targets));
  ACCEL_CHECK(targets.scalar_type() == torch::kLong || targets.scalar_type() == torch::kInt ||
                  targets.scalar_type() == torch::kByte,
              Status::InvalidArgument, "cross-entropy targets must be int64, int32 or uint8 class indices, got ",
              c10::toString(targets.scalar_type()));
  ACCEL_CHECK(targets.size(0) == logits.size(0), Status::InvalidArgument, "cross-entropy batch sizes differ: logits ",
              shape_str(logits), ", targets ", shape_str(targets));
  ACCEL_CHECK(logits.size(0) > 0, Status::InvalidArgument, "cross-entropy of an empty batch");
  auto t = targets.to(logits.device(), torch::kLong);
  const int64_t classes = logits.size(1);
  int64_t lo = 0, hi = 0;
  if (t.is_cpu()) {  // a plain scan: cheaper than two reductions and their syncs on small batches
    auto c = t.contiguous();
    const int64_t* p = c.data_ptr<int64_t>();
    lo = hi = p[0];
    for (int64_t i = 1, n = c.numel(); i < n; ++i) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
  } else if (((t < 0) | (t >= classes)).any().item<bool>()) {  // one device sync when all is well
    auto mm = torch::aminmax(t);
    lo = std::get<0>(mm).item<int64_t>();
    hi = std::get<1>(mm).item<int64_t>();
  }
  ACCEL_CHECK(lo >= 0 && hi < classes, Status::InvalidArgument, "targets: class index ", (lo < 0 ? lo : hi),
              " is out of range for ", classes, " classes");
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), t);
}

torch::Tensor mse(const torch::Tensor& input, const torch::Tensor& target) {
  ACCEL_CHECK(input.sizes() == target.sizes(), Status::InvalidArgument, "MSE shapes differ: input ", shape_str(input),
              ", target ", shape_str(target));
  ACCEL_CHECK(input.is_floating_point() && target.is_floating_point(), Status::InvalidArgument,
              "MSE needs floating-point input and target, got ", c10::toString(input.scalar_type()), " and ",
              c10::toString(target.scalar_type()));
  ACCEL_CHECK(input.numel() > 0, Status::InvalidArgument, "MSE of an empty tensor");
  return torch::mse_loss(input.to(torch::kFloat), target.to(input.device(), torch::kFloat));
}

}  // namespace accel
