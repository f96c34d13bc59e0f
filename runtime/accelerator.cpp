// The Accelerator: options, device placement, precision (autocast, loss scaling),
// gradient accumulation, process utilities. How the processes share the work is the
// strategy's (runtime/strategy/); checkpoints are in checkpoint.cpp.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/blas.h"
#include "runtime/compat.h"
#include "runtime/device_memory.h"
#include "runtime/paths.h"
#include "runtime/precision.h"
#include "runtime/accelerator.h"

#include "base/files.h"
#include "comm/store.h"
#include "comm/tensors.h"
#include "runtime/models/transformer.h"
#include "runtime/strategy/strategy.h"

namespace accel {

// ---------------------------------------------------------------------------------------
// The Accelerator

namespace {
// `simulated`: the communicator is the simulator's, whose GPUs are this machine's memory
// (its collectives copy host bytes): there auto is the CPU, and CUDA an error.
// CUDA is asked about only where it could be used: a forked child of a process that
// initialised CUDA cannot initialise it again, but it can still train on the CPU.
torch::Device pick_device(const Options& o, bool simulated) {
  switch (o.device) {
    case DeviceKind::CPU: return torch::Device(torch::kCPU);
    case DeviceKind::CUDA:
      ACCEL_CHECK(!simulated, Status::Unsupported,
                  "device CUDA under the simulator: simulated ranks run on the CPU (their GPUs are simulated in this "
                  "machine's memory); ask for ACCEL_DEVICE_AUTO or ACCEL_DEVICE_CPU, or use a real backend (nccl, gloo)");
      ACCEL_CHECK(torch::cuda::is_available(), Status::Unsupported,
                  "device CUDA was requested but CUDA is not available (this libtorch has no CUDA, or no GPU is visible)");
      ACCEL_CHECK(o.device_index < static_cast<int>(torch::cuda::device_count()), Status::InvalidArgument,
                  "device_index ", o.device_index, " but only ", torch::cuda::device_count(), " CUDA devices are visible");
      return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device_index));
    case DeviceKind::Auto:
    default:
      return !simulated && torch::cuda::is_available() ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(o.device_index)) : torch::Device(torch::kCPU);
  }
}
// libtorch's default generators: the CPU's always; CUDA's only where this context trains on
// CUDA (torch::manual_seed initialises CUDA, which a forked child of a process that has
// initialised it cannot do: a CPU context there must still work).
void seed_default_generators(uint64_t seed, const torch::Device& device) {
  if (device.is_cuda()) {
    torch::manual_seed(seed);
    return;
  }
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(cpu.mutex());
  cpu.set_current_seed(seed);
}
// Training on the CPU frees and allocates the same large tensors at every step (gradients,
// activations, buckets). glibc gives a block above its mmap threshold (128 KiB, raised as such
// blocks are freed, to 32 MiB at most) back to the kernel when it is freed, and trims free
// memory beyond 128 KiB off the heap's top, so the next step pays page faults and zeroed
// pages for the same bytes again: 13% of a step of the 512-1024-1024-10 MLP on one process
// here (docs/benchmarks.md, ddp_processes). Once per process, for a context on the CPU:
// blocks up to 32 MiB come from the heap, and up to 256 MiB of free heap is kept for the
// next step. ACCEL_MALLOC_TUNE=0, or the program's own settings (GLIBC_TUNABLES with
// malloc, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_), leave malloc as it is.
void keep_freed_memory() {
#ifdef __GLIBC__
  static std::once_flag once;
  std::call_once(once, [] {
    auto set = [](const char* name) { return std::getenv(name) != nullptr; };
    if (const char* v = std::getenv("ACCEL_MALLOC_TUNE")) {
      const std::string s(v);
      if (s == "0" || s == "off" || s == "false" || s == "no") return;
    }
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if ((tunables && std::strstr(tunables, "malloc")) || set("MALLOC_MMAP_THRESHOLD_") || set("MALLOC_TRIM_THRESHOLD_"))
      return;
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
#endif
}

}  // namespace

Accelerator::Accelerator(const Options& opts, std::shared_ptr<comm::Communicator> comm)
    : opts_((validate(opts), opts)),
      comm_(comm ? std::move(comm) : std::shared_ptr<comm::Communicator>(comm::make_local_communicator())),
      // simulated ranks, threads or processes on the simulated NCCL, keep their GPUs in this
      // machine's memory (both are clocks): they run on the CPU even where a real GPU is present
      device_(pick_device(opts, comm::clock_of(*comm_) != nullptr)),
      gen_(at::make_generator<at::CPUGeneratorImpl>(opts.seed)),
      scaler_(opts.precision == Precision::FP16, opts.loss_scale_init, opts.loss_scale_growth_factor,
              opts.loss_scale_backoff_factor, opts.loss_scale_growth_interval) {
  clock_ = comm::clock_of(*comm_);
  if (device_.is_cpu()) keep_freed_memory();
  // a rank of the in-process simulator: its tensors are charged to its simulated GPU's budget
  if (clock_ != nullptr) device_memory::install();
  if (opts_.precision == Precision::Auto) {  // bf16 where the device computes it natively, else fp32
    std::string why;
    const bool native = bf16_native(device_, &why);
    opts_.precision = native ? Precision::BF16 : Precision::No;
    static std::once_flag said;  // once per process, by the process (or simulated rank) 0
    if (!native && comm_->rank() == 0)
      std::call_once(said, [&] {
        std::fprintf(stderr,
                     "accel: mixed precision auto: training in fp32 on this CPU (%s: its bf16 matmuls would be "
                     "several times slower than fp32); ask for bf16 to use it anyway\n",
                     why.c_str());
      });
  }
  strategy_ = make_strategy(StrategySetup{opts_, *comm_, clock_, device_});
  if (opts_.num_threads > 0) {  // libtorch's intra-op pool and the BLAS's own threads, so they never oversubscribe
    at::set_num_threads(opts_.num_threads);
    blas::set_threads(opts_.num_threads);
  }
  // TorchScript models draw dropout masks and initial values from libtorch's default
  // generator; seed it too so their runs repeat.
  seed_default_generators(opts_.seed, device_);
}

Accelerator::~Accelerator() { files::unlock_file(project_lock_); }

int Accelerator::zero_stage_active() const { return strategy_->zero_stage(); }

std::vector<torch::Tensor> Accelerator::full_parameters(const Model& model) {
  if (&model == model_.get()) return strategy_->full_parameters();
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().to(torch::kCPU, torch::kFloat, false, true));
  return out;
}

torch::Tensor Accelerator::full_gradient(const Model& model, size_t index) {
  ACCEL_CHECK(model_ != nullptr && &model == model_.get(), Status::InvalidState,
              "gradients are read from the model accel_prepare bound (", model_ ? "this is another one" : "none yet", ")");
  const size_t n = model.parameters().size();
  ACCEL_CHECK(index < n, Status::InvalidArgument, "parameter index ", index, " out of range (the model has ", n, ")");
  ACCEL_CHECK(pending_, Status::InvalidState, "no gradients to read: accel_backward has not run since the last "
              "accel_step (which zeroes them)");
  ACCEL_CHECK(sync_, Status::InvalidState, "the gradients are complete after the accumulation's last micro-batch (",
              accum_count_, " of ", opts_.gradient_accumulation_steps, " so far): read them after it, before accel_step");
  finish_gradients();  // unscaled (fp16), token means applied: what the step would use (idempotent)
  return strategy_->full_gradient(index);
}

void Accelerator::write_on_main(const Model& model, const std::function<void(std::vector<torch::Tensor>&)>& write) {
  std::vector<torch::Tensor> params = full_parameters(model);  // a collective under ZeRO
  Status status = Status::Ok;
  std::string why;
  if (comm_->rank() == 0) {
    try {
      write(params);
    } catch (const Error& e) {
      why = e.what();
      status = e.status();
    }
  }
  agree(status, why);  // the outcome on every process, the file there on return
}

void Accelerator::save_model(const Model& model, const std::string& path) {
  const bool script = path.size() >= 3 && path.compare(path.size() - 3, 3, ".pt") == 0;
  ACCEL_CHECK(!script || model.from_torchscript(), Status::Unsupported, "only a model loaded from TorchScript exports as ",
              "TorchScript ('", path, "'); save the built-in MLP as .safetensors");
  write_on_main(model, [&](std::vector<torch::Tensor>& params) {
    paths::check_file_target(path, script ? paths::FileKind::TorchScript : paths::FileKind::Safetensors, "path");
    if (script)
      model.export_torchscript(params, path);
    else
      save_safetensors(model.parameter_names(), params, path);
  });
}

void Accelerator::save_pretrained(const Model& model, const std::string& dir) {
  write_on_main(model, [&](std::vector<torch::Tensor>& params) {
    const torch::ScalarType dt = lm_weights_dtype(model);
    if (lora_config_of(model)) params = merged_weights(model, params);  // the adapters merged in
    for (auto& p : params) p = p.to(dt);
    accel::save_pretrained(model, params, dir);
  });
}

void Accelerator::save_adapter(const Model& model, const std::string& dir) {
  write_on_main(model, [&](std::vector<torch::Tensor>& params) { accel::save_adapter(model, params, dir); });
}

void Accelerator::prepare(const std::shared_ptr<Model>& model, const std::shared_ptr<Optimizer>& opt,
                          const std::shared_ptr<Scheduler>& sched, const std::shared_ptr<DataLoader>& loader) {
  // Check everything first: a failed prepare changes nothing.
  std::shared_ptr<Model> m = model ? model : (opt ? opt->model() : model_);
  ACCEL_CHECK(!model_ || !m || m == model_, Status::InvalidState,
              "this context already trains another model; a context trains one model with one optimizer");
  ACCEL_CHECK(!opt || opt->model() == m, Status::InvalidArgument, "the optimizer was created for a different model");
  ACCEL_CHECK(!opt_ || !opt || opt == opt_, Status::InvalidState, "this context already steps another optimizer");
  std::shared_ptr<Optimizer> o = opt ? opt : opt_;
  ACCEL_CHECK(!sched || (o && sched->optimizer() == o), Status::InvalidArgument,
              "the scheduler belongs to an optimizer that is not prepared on this context");
  ACCEL_CHECK(!sched_ || !sched || sched == sched_, Status::InvalidState, "this context already has a scheduler");
  ACCEL_CHECK(!loader || !loader->config().split_batches || loader->config().batch_size % comm_->size() == 0,
              Status::InvalidArgument, "split_batches needs a batch size (", loader ? loader->config().batch_size : 0,
              ") divisible by the number of processes (", comm_->size(), ")");
  if (m && !model_) strategy_->check(m.get(), o.get());
  if (o && !opt_) strategy_->check(nullptr, o.get());
  ACCEL_CHECK(!o || opt_ || opts_.offload == Offload::None || o->shardable(), Status::Unsupported,
              "offload steps the optimizer in host memory with its elementwise kernels (AdamW, SGD, Adafactor); ",
              o ? o->name() : "", "'s update needs whole tensors on one device: use another optimizer or no offload");
  agree_on_configuration(m && !model_ ? m.get() : nullptr, o && !opt_ ? o.get() : nullptr,
                         loader && !prepared(loader.get()) ? loader.get() : nullptr);

  if (m && !model_) {
    m->to(device_);
    strategy_->prepare(*m);
    model_ = m;
  }
  if (o && !opt_) {
    o->set_offload(opts_.offload != Offload::None);  // before its state exists
    if (!strategy_->shards_state() && !o->bound()) o->bind();  // a sharding strategy keeps the state itself
    opt_ = o;
  }
  if (sched) sched_ = sched;
  if (loader && !prepared(loader.get())) {
    // Accelerate shards at prepare: every process gets its share of each epoch's batches
    if (comm_->size() > 1) loader->shard(comm_->rank(), comm_->size());
    loaders_.push_back(loader);
  }
}

void Accelerator::agree_on_configuration(const Model* m, const Optimizer* o, const DataLoader* l) {
  comm::Store* store = comm_->store();
  if (!store || comm_->size() == 1) return;
  std::vector<std::pair<std::string, std::string>> mine = {
      {"strategy", strategy_name(opts_.strategy)},
      {"mixed_precision", opts_.precision == Precision::BF16 ? "bf16" : opts_.precision == Precision::FP16 ? "fp16" : "no"},
      {"gradient_accumulation_steps", std::to_string(opts_.gradient_accumulation_steps)},
      {"bucket_bytes", std::to_string(opts_.bucket_bytes)},
      {"offload", offload_name(opts_.offload)},
  };
  if (m) {
    std::string shapes;
    for (const auto& p : m->parameters())
      shapes += (shapes.empty() ? "" : " ") + shape_str(p) + std::string(c10::toString(p.scalar_type()));
    mine.emplace_back("model", std::to_string(m->parameters().size()) + " parameters: " + shapes);
  }
  if (o) mine.emplace_back("optimizer", o->name());
  if (l) {
    const auto& c = l->config();
    mine.emplace_back("loader", "batch_size " + std::to_string(c.batch_size) + ", drop_last " + std::to_string(c.drop_last) +
                                    ", even_batches " + std::to_string(c.even_batches) + ", split_batches " +
                                    std::to_string(c.split_batches));
  }
  std::string text;
  for (const auto& [k, v] : mine) text += k + "=" + v + "\n";
  // Every process prepares in the same order, so the n-th prepare of each meets the others'.
  static std::atomic<int> generation{0};
  const std::string prefix = "accel/prepare/" + std::to_string(++generation) + "/";
  const int me = comm_->rank(), n = comm_->size();
  store->set(prefix + std::to_string(me), text);
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    store->wait(keys);
  } catch (const comm::CommError& e) {
    if (e.result() != comm::Result::Timeout) throw;
    std::string missing;
    for (int r = 0; r < n; ++r)
      if (!store->check(keys[r])) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw comm::CommError(comm::Result::Timeout, "process(es) " + missing + " did not reach accel_prepare within " +
                                                     std::to_string(store->timeout().count()) + " ms");
  }
  auto shorten = [](const std::string& v) { return v.size() > 160 ? v.substr(0, 157) + "..." : v; };
  std::string diffs;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    std::map<std::string, std::string> theirs;
    std::istringstream in(store->get_string(keys[r]));
    for (std::string line; std::getline(in, line);)
      if (size_t eq = line.find('='); eq != std::string::npos) theirs[line.substr(0, eq)] = line.substr(eq + 1);
    for (const auto& [k, v] : mine) {
      auto it = theirs.find(k);
      const std::string tv = it == theirs.end() ? "(nothing)" : it->second;
      if (tv != v)
        diffs += "; process " + std::to_string(r) + " has " + k + " " + shorten(tv) + ", this process (" +
                 std::to_string(me) + ") has " + shorten(v);
    }
    for (const auto& [k, v] : theirs)
      if (std::none_of(mine.begin(), mine.end(), [&](const auto& f) { return f.first == k; }))
        diffs += "; process " + std::to_string(r) + " prepares a " + k + " (" + shorten(v) + "), this process (" +
                 std::to_string(me) + ") none";
  }
  ACCEL_CHECK(diffs.empty(), Status::InvalidArgument, "the processes disagree", diffs);
}

bool Accelerator::prepared(const DataLoader* loader) const {
  for (const auto& l : loaders_)
    if (l.get() == loader) return true;
  return false;
}

torch::Tensor Accelerator::forward(Model& model, const std::vector<torch::Tensor>& inputs, lm_detail::KVCache* cache) {
  torch::Device target = model.parameters().empty() ? device_ : model.parameters().front().device();
  std::vector<torch::Tensor> placed;
  placed.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ACCEL_CHECK(inputs[i].defined(), Status::InvalidArgument, "input ", i, " is empty");
    placed.push_back(inputs[i].device() == target ? inputs[i] : inputs[i].to(target));
  }
  ForwardMode mode;
  mode.emulate_fp16 = emulate_fp16();
  mode.cache = cache;
  std::optional<torch::NoGradGuard> no_grad;
  if (!model.is_training()) no_grad.emplace();
  std::optional<compat::AutocastGuard> autocast;
  if (opts_.precision == Precision::BF16) {
    autocast.emplace(target.type(), torch::kBFloat16);
  } else if (opts_.precision == Precision::FP16 && target.is_cuda()) {
    autocast.emplace(target.type(), torch::kHalf);
  }
  if (&model != model_.get()) return model.forward(placed, mode);
  if (strategy_->cadence() == Cadence::EveryForward) check_even_collectives();
  fwd_rows_ = placed.empty() || placed[0].dim() == 0 ? 1
              : model.sequence_inputs() && placed[0].dim() >= 2 ? placed[0].size(0) * placed[0].size(1)
                                                              : placed[0].size(0);
  if (clock_)  // the simulator: charge the forward's estimated compute
    clock_->charge_flops(2.0 * static_cast<double>(fwd_rows_) * static_cast<double>(model.num_elements()), "forward");
  return strategy_->forward(model, placed, mode);
}

void Accelerator::set_seed(uint64_t seed, bool per_process) {
  const uint64_t s = seed + (per_process ? static_cast<uint64_t>(comm_->rank()) : 0);
  gen_.set_current_seed(s);
  seed_default_generators(s, device_);
}

void Accelerator::backward(const torch::Tensor& loss, int64_t tokens) {
  ACCEL_CHECK(model_ != nullptr, Status::InvalidState, "backward before accel_prepare bound a model");
  ACCEL_CHECK(loss.defined() && loss.numel() == 1, Status::InvalidArgument, "the loss must be a tensor of one element, got ",
              loss.defined() ? shape_str(loss) : std::string("none"));
  ACCEL_CHECK(loss.is_floating_point(), Status::InvalidArgument, "the loss must be floating-point");
  ACCEL_CHECK(loss.requires_grad(), Status::InvalidArgument,
              "the loss has no autograd graph (was the model in evaluation mode, or the loss computed from constants?)");
  if (!scaler_.enabled()) {
    const double v = loss.item<double>();
    ACCEL_CHECK(std::isfinite(v), Status::NonFinite, "the loss is ", v,
                "; gradients are unchanged and this micro-batch is not counted");
  }
  const int kind = tokens >= 0 ? 2 : 1;
  const int window = accum_count_ == 0 ? 0 : window_kind_;
  ACCEL_CHECK(window == 0 || window == kind, Status::InvalidArgument, "this accumulation window's losses were ",
              window == 2 ? "token means (causal-LM losses)" : "plain means", "; this one is ",
              kind == 2 ? "a token mean" : "a plain mean",
              ": one window's gradients are either a mean over its micro-batches or over its tokens, not both");
  // The common case (a 0-d fp32 loss, no accumulation, no scaling) adds nothing to the graph.
  torch::Tensor scaled = loss;
  if (scaled.dim() != 0 || scaled.scalar_type() != torch::kFloat) scaled = scaled.to(torch::kFloat).reshape({});
  if (kind == 2)  // the micro-batch's sum; step() divides by the global batch's tokens
    scaled = scaled * static_cast<double>(tokens);
  else if (opts_.gradient_accumulation_steps > 1)
    scaled = scaled / static_cast<double>(opts_.gradient_accumulation_steps);
  if (scaler_.enabled()) scaled = scaled * scaler_.scale();
  // this micro-batch completes the gradients (the strategy communicates accordingly)
  const bool sync = accum_count_ + 1 >= opts_.gradient_accumulation_steps || end_of_data_;
  if (communicates_in_backward(strategy_->cadence(), sync)) check_even_collectives();
  strategy_->backward(scaled, sync, fwd_rows_);
  if (accum_count_ == 0) window_tokens_ = 0;
  window_kind_ = kind;
  if (kind == 2) window_tokens_ += tokens;
  ++micro_steps_;
  ++accum_count_;
  sync_ = sync;
  pending_ = true;
}

bool Accelerator::unscale_once() {
  if (!scaler_.enabled()) return false;
  if (!unscaled_) {
    // as torch.cuda.amp: the reciprocal in double, applied in fp32
    found_inf_ = strategy_->unscale(scaler_);
    unscaled_ = true;
  }
  return found_inf_;
}

bool Accelerator::finish_gradients() {
  const bool inf = unscale_once();
  if (window_kind_ == 2 && !tokens_applied_) {
    // every process's tokens in this window: the gradients are sums over them, averaged over
    // the processes by the strategy, so processes / total makes them the global mean (a
    // strategy that does not synchronise gradients: this process's own mean)
    int64_t total = window_tokens_;
    double procs = 1.0;
    if (strategy_->cadence() != Cadence::Never) {
      comm::host_all_reduce(*comm_, &total, 1, comm::DataType::Int64, comm::RedOp::Sum);
      procs = static_cast<double>(comm_->size());
    }
    strategy_->scale_gradients(total > 0 ? procs / static_cast<double>(total) : 0.0);
    tokens_applied_ = true;
  }
  return inf;
}

double Accelerator::clip_grad_norm(double max_norm) {
  ACCEL_CHECK(model_ != nullptr, Status::InvalidState, "clip_grad_norm before accel_prepare bound a model");
  ACCEL_CHECK(std::isfinite(max_norm) && max_norm > 0, Status::InvalidArgument, "max_norm must be finite and > 0, got ",
              max_norm);
  if (!pending_ || !sync_) return std::nan("");
  finish_gradients();
  return strategy_->clip(max_norm);
}

StepResult Accelerator::step() {
  ACCEL_CHECK(model_ != nullptr && opt_ != nullptr, Status::InvalidState,
              "step before accel_prepare bound a model and an optimizer");
  StepResult r;
  if (pending_ && sync_) {
    if (clock_) clock_->on_step(optimizer_steps_ + 1);
    r.sync_step = true;
    if (finish_gradients()) {
      r.skipped = true;
      scaler_.update(true);
    } else {
      // offload: the step reads the gradients' host copies, made during the backward
      if (clock_) clock_->wait_host_transfers();
      strategy_->step(*opt_);
      // offload: the weights to the host and back, the gradients not copied yet (the simulator's link)
      if (const uint64_t moved = opt_->take_host_bytes(); moved && clock_)
        clock_->charge_host_transfer(moved, "offload: the step's copies (weights back)");
      scaler_.update(false);
      if (sched_) sched_->step();
      ++optimizer_steps_;
      r.stepped = true;
    }
    strategy_->zero_grad(*opt_);
    accum_count_ = 0;
    pending_ = false;
    unscaled_ = false;
    found_inf_ = false;
    tokens_applied_ = false;
    window_tokens_ = 0;
  }
  r.loss_scale = scaler_.scale();
  r.optimizer_steps = optimizer_steps_;
  r.micro_steps = micro_steps_;
  return r;
}

}  // namespace accel
