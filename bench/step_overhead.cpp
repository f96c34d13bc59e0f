// bench_step_overhead: the time of one training step through accel's C ABI against the
// same step written directly against libtorch, in one process, interleaved.
//
// A step is: the loader's next batch, the forward, the cross-entropy loss, the backward,
// the optimizer step and the zeroing of the gradients. Both sides train the same model
// (the libtorch side starts from a copy of accel's initial weights), with AdamW and the
// same hyper-parameters, on the same data, with batches drawn exactly as accel's loader
// draws them (a per-epoch torch::randperm from a generator seeded with seed + epoch, then
// index_select), in fp32 without accumulation, with the same number of intra-op threads.
// Blocks of steps alternate between the two sides for several rounds (the side that goes
// first alternates too); a block's time divided by its steps is one sample, and the
// medians of the samples are reported (and, less disturbed by other processes, the
// medians of single steps timed one by one: *_step_p50_us), one JSON line per model:
//
//   {"bench":"step_overhead","model":"mlp-64-128-64-10","batch":32,"threads":2,...,
//    "accel_us":…,"baseline_us":…,"ratio":…}
//
// ratio = accel_us / baseline_us (the target is <= 1.05), overhead_us = accel_us -
// baseline_us. As both sides do the same arithmetic, their weights at the end must agree:
// "max_abs_diff" is the largest difference between them (0 when the two loops really do
// the same work on the same batches).
//
// The thread count every side ran with is reported as "threads".
//
//   bench_step_overhead [--quick] [--rounds N] [--steps N] [--warmup N] [--threads N[,N...]]
//                       [--model SUBSTRING] [--data PATH] [--breakdown] [--bf16]
//                       [--peers PYTHON [--peers-script PATH]]
//
// --bf16 adds, per model, accel's step under bf16 autocast against its fp32 step:
// {"bench":"precision",...,"fp32_us":…,"bf16_us":…,"bf16_over_fp32":…} (with --peers, the
// same for PyTorch 2.x's loop: "pytorch_fp32_us", "pytorch_bf16_us", "pytorch_bf16_over_fp32").
//
// First it prints this CPU's sgemm rate through libtorch's BLAS (1024 x 1024 fp32, best of
// 10): {"bench":"sgemm","n":1024,"threads":…,"best_us":…,"gflops":…}, the peak the MLPs'
// achieved FLOP/s are measured against (--model sgemm prints it alone).
//
// --breakdown adds, per model and side, one "step_overhead_breakdown" line with the
// median time of each phase of a step (next, forward, loss, backward, step).
//
// --peers PYTHON adds accel's peers, PyTorch 2.x eager and Accelerate 1.x, run by
// bench/peers/peers.py under that interpreter (scripts/bench makes a venv with them): the
// same model, batch, optimizer, precision and thread count, their blocks of steps
// interleaved with accel's and the baseline's in the same rounds, one more JSON line per
// model: {"bench":"peers",...,"accel_us":…,"pytorch_us":…,"accelerate_us":…,
// "vs_pytorch":…,"vs_accelerate":…} (accel's time over the peer's; lower is better).
//
// Every model's line carries the achieved FLOP/s of its matrix products ("gflops": the
// forward's, the weight gradients' and the input gradients' of every layer but the first)
// and their fraction of the sgemm rate measured with the same threads ("sgemm_fraction").
//
// Thread counts: --threads N or a list (--threads 1,2); by default 1 and the number of CPUs
// (std::thread::hardware_concurrency), each model measured at each.
#include <accel/accel.h>
#include <torch/torch.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
#endif
#ifndef PEERS_DEFAULT_SCRIPT
#define PEERS_DEFAULT_SCRIPT "bench/peers/peers.py"
#endif

namespace {

#define ACHECK(ctx, call)                                                                            \
  do {                                                                                               \
    accel_status s_ = (call);                                                                        \
    if (s_ != ACCEL_OK) {                                                                            \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, accel_status_name(s_), accel_last_error(ctx)); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------------------------------
// Data

struct Dataset {
  torch::Tensor x;  // float32 [n, features]
  torch::Tensor y;  // int64 [n]
};

// The training split of examples/c/train_digits.c: the UCI digits (pixels / 16), shuffled
// with xorshift64* seeded 42 (as digits_split in examples/c/digits.h), the first 80%.
Dataset load_digits(const std::string& path) {
  constexpr int kFeatures = 64;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s (pass --data PATH)\n", path.c_str());
    std::exit(1);
  }
  std::vector<float> xs;
  std::vector<int64_t> ys;
  char line[1024];
  while (gzgets(f, line, sizeof line)) {
    if (line[0] == '\n' || line[0] == '\0') continue;
    char* p = line;
    for (int j = 0; j <= kFeatures; ++j) {
      char* end = nullptr;
      long v = std::strtol(p, &end, 10);
      if (end == p) {
        std::fprintf(stderr, "%s: line %zu is malformed\n", path.c_str(), ys.size() + 1);
        std::exit(1);
      }
      if (j < kFeatures)
        xs.push_back(static_cast<float>(v) / 16.0f);
      else
        ys.push_back(v);
      p = end + (*end == ',');
    }
  }
  gzclose(f);
  const int64_t n = static_cast<int64_t>(ys.size());
  if (n == 0) {
    std::fprintf(stderr, "%s: no samples read\n", path.c_str());
    std::exit(1);
  }
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  uint64_t s = 42;
  for (int64_t i = n - 1; i > 0; --i) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const auto j = static_cast<int64_t>((s * 2685821657736338717ull) % static_cast<uint64_t>(i + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  const int64_t n_test = static_cast<int64_t>(static_cast<double>(n) * 0.2 + 0.5), n_train = n - n_test;
  auto all_x = torch::from_blob(xs.data(), {n, kFeatures}, torch::kFloat);
  auto all_y = torch::from_blob(ys.data(), {n}, torch::kLong);
  auto idx = torch::from_blob(perm.data(), {n_train}, torch::kLong);
  return {all_x.index_select(0, idx).contiguous(), all_y.index_select(0, idx).contiguous()};
}

Dataset random_data(int64_t n, int64_t features, int64_t classes, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({n, features}, gen, torch::kFloat), torch::randint(classes, {n}, gen, torch::kLong)};
}

// ---------------------------------------------------------------------------------------
// The two sides. step(phases) runs one training step; when `phases` is not null it
// receives the time of each phase in microseconds.

enum Phase { kNext, kForward, kLoss, kBackward, kStep, kPhases };
const char* const kPhaseNames[kPhases] = {"next", "forward", "loss", "backward", "step"};
using Phases = std::array<double, kPhases>;

struct Hyper {
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  uint64_t seed = 42;
};

accel_tensor* host_tensor(const torch::Tensor& t) {
  auto c = t.contiguous();
  const accel_dtype dt = c.scalar_type() == torch::kLong ? ACCEL_INT64 : ACCEL_FLOAT32;
  accel_tensor* out = nullptr;
  ACHECK(nullptr, accel_tensor_create(dt, c.sizes().data(), static_cast<size_t>(c.dim()), c.data_ptr(), &out));
  return out;
}

torch::Tensor to_torch(const accel_tensor* t) {
  int64_t shape[16];
  size_t ndim = 0, nbytes = 0;
  ACHECK(nullptr, accel_tensor_ndim(t, &ndim));
  ACHECK(nullptr, accel_tensor_shape(t, shape, 16));
  ACHECK(nullptr, accel_tensor_nbytes(t, &nbytes));
  auto out = torch::empty(torch::IntArrayRef(shape, ndim), torch::kFloat);
  ACHECK(nullptr, accel_tensor_copy_to_host(t, out.data_ptr(), nbytes));
  return out;
}

class AccelSide {
 public:
  AccelSide(const std::vector<int64_t>& sizes, int64_t batch, const Dataset& data, const Hyper& h, int threads,
            accel_precision precision = ACCEL_PRECISION_NO) {
    accel_options opts = ACCEL_OPTIONS_INIT;
    opts.seed = h.seed;
    opts.device = ACCEL_DEVICE_CPU;
    opts.num_threads = threads;
    opts.mixed_precision = precision;
    opts.gradient_accumulation_steps = 1;
    ACHECK(nullptr, accel_init(&opts, &ctx_));
    accel_mlp_options mlp = ACCEL_MLP_OPTIONS_INIT;
    mlp.layer_sizes = sizes.data();
    mlp.num_layer_sizes = sizes.size();
    mlp.activation = ACCEL_ACT_RELU;
    ACHECK(ctx_, accel_model_create_mlp(ctx_, &mlp, &model_));
    accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
    ao.lr = h.lr;
    ao.beta1 = h.beta1;
    ao.beta2 = h.beta2;
    ao.eps = h.eps;
    ao.weight_decay = h.weight_decay;
    ACHECK(ctx_, accel_optimizer_create_adamw(ctx_, model_, &ao, &opt_));
    accel_tensor* xs = host_tensor(data.x);
    accel_tensor* ys = host_tensor(data.y);
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    lo.batch_size = batch;
    lo.shuffle = 1;
    lo.seed = h.seed;
    ACHECK(ctx_, accel_dataloader_create(ctx_, xs, ys, &lo, &loader_));
    accel_tensor_destroy(xs);
    accel_tensor_destroy(ys);
    ACHECK(ctx_, accel_prepare(ctx_, model_, opt_, nullptr, loader_));
  }
  AccelSide(const AccelSide&) = delete;
  AccelSide& operator=(const AccelSide&) = delete;
  ~AccelSide() {
    accel_dataloader_destroy(loader_);
    accel_optimizer_destroy(opt_);
    accel_model_destroy(model_);
    accel_destroy(ctx_);
  }

  // The model's current weights, as host tensors in accel's parameter order.
  std::vector<torch::Tensor> parameters() const {
    size_t n = 0;
    ACHECK(ctx_, accel_model_num_parameters(model_, &n, nullptr));
    std::vector<torch::Tensor> out;
    for (size_t i = 0; i < n; ++i) {
      accel_tensor* t = nullptr;
      ACHECK(ctx_, accel_model_parameter(ctx_, model_, i, &t));
      out.push_back(to_torch(t));
      accel_tensor_destroy(t);
    }
    return out;
  }

  void step(Phases* ph) {
    Clock::time_point t = ph ? Clock::now() : Clock::time_point();
    auto lap = [&](Phase p) {
      if (!ph) return;
      (*ph)[p] = us_since(t);
      t = Clock::now();
    };
    accel_tensor *x = nullptr, *y = nullptr, *logits = nullptr, *loss = nullptr;
    ACHECK(ctx_, accel_dataloader_next(ctx_, loader_, &x, &y));
    if (!x) ACHECK(ctx_, accel_dataloader_next(ctx_, loader_, &x, &y));  // the epoch ended: start the next
    lap(kNext);
    ACHECK(ctx_, accel_model_forward(ctx_, model_, &x, 1, &logits));
    lap(kForward);
    ACHECK(ctx_, accel_loss_cross_entropy(ctx_, logits, y, &loss));
    lap(kLoss);
    ACHECK(ctx_, accel_backward(ctx_, loss));
    lap(kBackward);
    ACHECK(ctx_, accel_step(ctx_, nullptr));  // optimizer step, then the gradients set to none
    accel_tensor_destroy(loss);
    accel_tensor_destroy(logits);
    accel_tensor_destroy(y);
    accel_tensor_destroy(x);
    lap(kStep);
  }

 private:
  accel_context* ctx_ = nullptr;
  accel_model* model_ = nullptr;
  accel_optimizer* opt_ = nullptr;
  accel_dataloader* loader_ = nullptr;
};

// The same step with libtorch alone: weights as plain tensors (torch::linear + ReLU, as
// torch::nn::Linear computes), torch::optim::AdamW, gradients set to none after the step
// (what accel does, and PyTorch 2's default).
class TorchSide {
 public:
  TorchSide(std::vector<torch::Tensor> initial, int64_t batch, const Dataset& data, const Hyper& h)
      : params_(std::move(initial)), x_(data.x.clone()), y_(data.y.clone()), batch_(batch), seed_(h.seed) {
    for (auto& p : params_) p.requires_grad_(true);
    opt_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(h.lr).betas(std::make_tuple(h.beta1, h.beta2)).eps(h.eps).weight_decay(
                     h.weight_decay));
  }

  const std::vector<torch::Tensor>& parameters() const { return params_; }

  void step(Phases* ph) {
    Clock::time_point t = ph ? Clock::now() : Clock::time_point();
    auto lap = [&](Phase p) {
      if (!ph) return;
      (*ph)[p] = us_since(t);
      t = Clock::now();
    };
    torch::Tensor x, y;
    if (!next(x, y)) next(x, y);
    lap(kNext);
    torch::Tensor h = x;
    const size_t layers = params_.size() / 2;
    for (size_t i = 0; i < layers; ++i) {
      h = torch::linear(h, params_[2 * i], params_[2 * i + 1]);
      if (i + 1 < layers) h = torch::relu(h);
    }
    lap(kForward);
    torch::Tensor loss = torch::nn::functional::cross_entropy(h, y);
    lap(kLoss);
    loss.backward();
    lap(kBackward);
    opt_->step();
    for (auto& p : params_) p.mutable_grad().reset();
    loss.reset();  // released here as accel's side releases its handles in this phase
    h.reset();
    x.reset();
    y.reset();
    lap(kStep);
  }

 private:
  // accel's loader: epoch e's order is randperm(N) from a generator seeded seed + e.
  bool next(torch::Tensor& x, torch::Tensor& y) {
    const int64_t n = x_.size(0), batches = (n + batch_ - 1) / batch_;
    if (pos_ >= batches) {
      ++epoch_;
      pos_ = 0;
      return false;
    }
    if (order_epoch_ != epoch_) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
      order_ = torch::randperm(n, gen, torch::kLong);
      order_epoch_ = epoch_;
    }
    const int64_t start = pos_ * batch_, len = std::min(batch_, n - start);
    auto idx = order_.narrow(0, start, len);
    x = x_.index_select(0, idx);
    y = y_.index_select(0, idx);
    ++pos_;
    return true;
  }

  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> opt_;
  torch::Tensor x_, y_, order_;
  int64_t batch_;
  uint64_t seed_;
  int64_t epoch_ = 0, pos_ = 0, order_epoch_ = -1;
};

// The peers (PyTorch eager, Accelerate) in a child process running bench/peers/peers.py
// --serve: commands on its stdin, one answer line each on its stdout.
struct PeerBlock {
  double total_us = 0;
  std::vector<double> step_us, fetch_us;
};

class PeerProcess {
 public:
  PeerProcess(const std::string& python, const std::string& script, const std::vector<int64_t>& sizes,
              int64_t batch, int threads, const std::string& data) {
    std::string size_list;
    for (auto v : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(v);
    std::vector<std::string> args = {python, script, "--serve", "--sizes", size_list, "--batch", std::to_string(batch),
                                     "--threads", std::to_string(threads)};
    if (sizes.front() == 64 && sizes.back() == 10) {
      args.push_back("--data");
      args.push_back(data);
    }
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) fail("pipe: " + std::string(std::strerror(errno)));
    std::fflush(stdout);
    pid_ = fork();
    if (pid_ < 0) fail("fork: " + std::string(std::strerror(errno)));
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      close(to_child[0]);
      close(to_child[1]);
      close(from_child[0]);
      close(from_child[1]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      std::fprintf(stderr, "step_overhead: cannot run %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
    // "ready TORCH_VERSION ACCELERATE_VERSION THREADS"
    const std::vector<std::string> ready = split(read_line());
    if (ready.size() != 4 || ready[0] != "ready") fail("unexpected first line from the peers' process");
    torch_version_ = ready[1];
    accelerate_version_ = ready[2];
    threads_ = std::atoi(ready[3].c_str());
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  ~PeerProcess() {
    if (to_) {
      std::fputs("quit\n", to_);
      std::fclose(to_);
    }
    if (from_) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

  const std::string& torch_version() const { return torch_version_; }
  const std::string& accelerate_version() const { return accelerate_version_; }
  int threads() const { return threads_; }

  PeerBlock run(const char* side, int steps) {
    const auto f = ask("run " + std::string(side) + " " + std::to_string(steps));
    if (f.size() != 2 + 2 * static_cast<size_t>(steps)) fail("a block's answer has " + std::to_string(f.size()) + " fields");
    PeerBlock b;
    b.total_us = std::atof(f[1].c_str());
    for (int i = 0; i < steps; ++i) {
      b.step_us.push_back(std::atof(f[2 + static_cast<size_t>(i)].c_str()));
      b.fetch_us.push_back(std::atof(f[2 + static_cast<size_t>(steps + i)].c_str()));
    }
    return b;
  }

  double sgemm_us() {
    const auto f = ask("sgemm");
    if (f.size() != 2) fail("unexpected answer to sgemm");
    return std::atof(f[1].c_str());
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::fprintf(stderr, "step_overhead: the peers' process (%s): %s\n", PEERS_DEFAULT_SCRIPT, what.c_str());
    std::exit(1);
  }

  static std::vector<std::string> split(const std::string& line) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && line[i] == ' ') ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ') ++j;
      if (j > i) out.push_back(line.substr(i, j - i));
      i = j;
    }
    return out;
  }

  std::string read_line() {
    char* buf = nullptr;
    size_t cap = 0;
    const ssize_t n = getline(&buf, &cap, from_);
    std::string line = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    std::free(buf);
    if (n <= 0) fail("it ended (see its messages above)");
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }

  std::vector<std::string> ask(const std::string& command) {
    if (std::fprintf(to_, "%s\n", command.c_str()) < 0 || std::fflush(to_) != 0) fail("it ended (see its messages above)");
    auto f = split(read_line());
    if (f.empty() || f[0] != "ok") fail("'" + command + "' failed");
    return f;
  }

  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::string torch_version_, accelerate_version_;
  int threads_ = 0;
};

// ---------------------------------------------------------------------------------------

struct Config {
  int rounds = 15;
  int steps = 0;   // steps per block; 0: the model's default
  int warmup = -1; // warm-up steps per side; -1: the model's default
  std::vector<int> threads; // empty: 1 and libtorch's default
  bool quick = false, breakdown = false, bf16 = false;
  std::string model_filter, data = DIGITS_DEFAULT_PATH;
  std::string peers_python, peers_script = PEERS_DEFAULT_SCRIPT;
};

struct ModelSpec {
  std::string name;
  std::vector<int64_t> sizes;
  int64_t batch;
  int steps, warmup;  // defaults per block and for warm-up
  bool digits;        // the UCI digits, else random data
};

std::string model_name(const std::vector<int64_t>& sizes) {
  std::string s = "mlp";
  for (auto v : sizes) s += "-" + std::to_string(v);
  return s;
}

// The floating-point operations of a step's matrix products: per layer (in x out weights),
// 2·batch·in·out for the forward and as many for the weight gradient, and as many again for
// the input gradient of every layer but the first (the data needs none).
double step_flops(const std::vector<int64_t>& sizes, int64_t batch) {
  double f = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    const double mm = 2.0 * static_cast<double>(batch) * static_cast<double>(sizes[l]) * static_cast<double>(sizes[l + 1]);
    f += (l == 0 ? 2 : 3) * mm;
  }
  return f;
}

// This CPU's sgemm rate through libtorch's BLAS (the peak the MLPs are measured against):
// C = A x B of 1024 x 1024 fp32 matrices, best of 10 after 2 warm-ups, with the current
// thread count.
double sgemm_best_us() {
  const int64_t n = 1024;
  const at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  at::Tensor c = at::empty({n, n});
  double best = 1e30;
  for (int i = 0; i < 12; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) best = std::min(best, s);
  }
  return best * 1e6;
}

constexpr double kSgemmFlops = 2.0 * 1024 * 1024 * 1024;

void run_model(const ModelSpec& spec, const Config& cfg, int threads, double sgemm_us) {
  const Dataset data = spec.digits ? load_digits(cfg.data) : random_data(4096, spec.sizes.front(), spec.sizes.back(), 7);
  const Hyper h;
  int steps = cfg.steps > 0 ? cfg.steps : spec.steps;
  int warmup = cfg.warmup >= 0 ? cfg.warmup : spec.warmup;
  int rounds = cfg.rounds;
  if (cfg.quick) {
    if (cfg.steps <= 0) steps = std::max(2, steps / 4);
    if (cfg.warmup < 0) warmup = std::max(2, warmup / 4);
  }

  AccelSide acc(spec.sizes, spec.batch, data, h, threads);
  TorchSide base(acc.parameters(), spec.batch, data, h);  // the same initial weights
  at::set_num_threads(threads);                           // (accel_init set it too)
  const int used_threads = at::get_num_threads();
  std::unique_ptr<PeerProcess> peers;
  if (!cfg.peers_python.empty()) {
    peers = std::make_unique<PeerProcess>(cfg.peers_python, cfg.peers_script, spec.sizes, spec.batch, threads, cfg.data);
    if (peers->threads() != used_threads) {
      std::fprintf(stderr, "step_overhead: the peers run %d threads, accel %d\n", peers->threads(), used_threads);
      std::exit(1);
    }
  }

  std::fprintf(stderr, "step_overhead: %s batch %" PRId64 " (%s, %" PRId64 " samples), %d threads, %d rounds x %d steps, warm-up %d%s\n",
               spec.name.c_str(), spec.batch, spec.digits ? "digits" : "random", data.x.size(0), used_threads, rounds,
               steps, warmup, peers ? ", with PyTorch and Accelerate" : "");

  // The sides: accel, the libtorch baseline, then the peers when asked for.
  enum Side { kAccel, kBaseline, kPyTorch, kAccelerate, kSides };
  const char* const side_names[kSides] = {"accel", "baseline", "pytorch", "accelerate"};
  const int sides = peers ? 4 : 2;
  for (int i = 0; i < warmup; ++i) acc.step(nullptr);
  for (int i = 0; i < warmup; ++i) base.step(nullptr);
  if (peers) {
    peers->run(side_names[kPyTorch], warmup);
    peers->run(side_names[kAccelerate], warmup);
  }

  // A block's mean step time is one sample (it includes every cost, periodic ones such as
  // the per-epoch permutation too). Each step is timed as well: the median single step is
  // less disturbed when other processes take the CPU now and then. The order of the sides
  // rotates from round to round, so drifts cancel out.
  std::array<std::vector<double>, kSides> samples, per_step, fetch;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < sides; ++k) {
      const int side = (k + r) % sides;
      if (side >= kPyTorch) {
        PeerBlock b = peers->run(side_names[side], steps);
        samples[side].push_back(b.total_us / steps);
        per_step[side].insert(per_step[side].end(), b.step_us.begin(), b.step_us.end());
        fetch[side].insert(fetch[side].end(), b.fetch_us.begin(), b.fetch_us.end());
        continue;
      }
      const auto t0 = Clock::now();
      auto prev = t0;
      for (int i = 0; i < steps; ++i) {
        if (side == kAccel) acc.step(nullptr); else base.step(nullptr);
        const auto now = Clock::now();
        per_step[side].push_back(std::chrono::duration<double, std::micro>(now - prev).count());
        prev = now;
      }
      samples[side].push_back(std::chrono::duration<double, std::micro>(prev - t0).count() / steps);
    }
  }

  std::array<std::vector<double>, kPhases> acc_ph, base_ph;
  if (cfg.breakdown) {
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const bool accel_turn = (k == 0) == (r % 2 == 0);
        for (int i = 0; i < steps; ++i) {
          Phases ph{};
          if (accel_turn) acc.step(&ph); else base.step(&ph);
          for (int p = 0; p < kPhases; ++p) (accel_turn ? acc_ph : base_ph)[p].push_back(ph[p]);
        }
      }
    }
  }

  // Both sides took the same steps on the same batches: their weights must agree.
  double max_diff = 0.0;
  {
    auto a = acc.parameters();
    const auto& b = base.parameters();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      max_diff = std::max(max_diff, (a[i] - b[i].detach()).abs().max().item<double>());
    if (a.size() != b.size()) max_diff = INFINITY;
  }

  const double a_us = median(samples[kAccel]), b_us = median(samples[kBaseline]);
  const double a_p50 = median(per_step[kAccel]), b_p50 = median(per_step[kBaseline]);
  const double flops = step_flops(spec.sizes, spec.batch), sgemm_gflops = kSgemmFlops / sgemm_us / 1e3;
  const double gflops = flops / a_us / 1e3;
  std::printf("{\"bench\":\"step_overhead\",\"model\":\"%s\",\"batch\":%" PRId64
              ",\"threads\":%d,\"rounds\":%d,\"steps\":%d,\"accel_us\":%.1f,\"baseline_us\":%.1f,\"ratio\":%.3f,"
              "\"overhead_us\":%.1f,\"accel_step_p50_us\":%.1f,\"baseline_step_p50_us\":%.1f,\"step_p50_ratio\":%.3f,"
              "\"max_abs_diff\":%.3g,\"gflops\":%.2f,\"sgemm_gflops\":%.2f,\"sgemm_fraction\":%.3f}\n",
              spec.name.c_str(), spec.batch, used_threads, rounds, steps, a_us, b_us, a_us / b_us, a_us - b_us, a_p50,
              b_p50, a_p50 / b_p50, max_diff, gflops, sgemm_gflops, gflops / sgemm_gflops);
  if (peers) {
    const double pt_us = median(samples[kPyTorch]), ac_us = median(samples[kAccelerate]);
    const double peer_sgemm_gflops = kSgemmFlops / peers->sgemm_us() / 1e3;
    std::printf("{\"bench\":\"peers\",\"model\":\"%s\",\"batch\":%" PRId64
                ",\"threads\":%d,\"rounds\":%d,\"steps\":%d,\"torch\":\"%s\",\"accelerate\":\"%s\","
                "\"accel_us\":%.1f,\"pytorch_us\":%.1f,\"accelerate_us\":%.1f,\"vs_pytorch\":%.3f,\"vs_accelerate\":%.3f,"
                "\"accel_step_p50_us\":%.1f,\"pytorch_step_p50_us\":%.1f,\"accelerate_step_p50_us\":%.1f,"
                "\"pytorch_fetch_us\":%.1f,\"accelerate_fetch_us\":%.1f,"
                "\"accel_gflops\":%.2f,\"pytorch_gflops\":%.2f,\"accelerate_gflops\":%.2f,"
                "\"sgemm_gflops\":%.2f,\"peer_sgemm_gflops\":%.2f,\"sgemm_fraction\":%.3f}\n",
                spec.name.c_str(), spec.batch, used_threads, rounds, steps, peers->torch_version().c_str(),
                peers->accelerate_version().c_str(), a_us, pt_us, ac_us, a_us / pt_us, a_us / ac_us, a_p50,
                median(per_step[kPyTorch]), median(per_step[kAccelerate]), median(fetch[kPyTorch]),
                median(fetch[kAccelerate]), gflops, flops / pt_us / 1e3, flops / ac_us / 1e3, sgemm_gflops,
                peer_sgemm_gflops, gflops / sgemm_gflops);
  }
  if (cfg.breakdown) {
    for (int side = 0; side < 2; ++side) {
      const auto& ph = side == 0 ? acc_ph : base_ph;
      std::printf("{\"bench\":\"step_overhead_breakdown\",\"model\":\"%s\",\"side\":\"%s\"", spec.name.c_str(),
                  side == 0 ? "accel" : "baseline");
      double total = 0;
      for (int p = 0; p < kPhases; ++p) {
        const double m = median(ph[p]);
        total += m;
        std::printf(",\"%s_us\":%.1f", kPhaseNames[p], m);
      }
      std::printf(",\"sum_us\":%.1f}\n", total);
    }
  }
  if (cfg.bf16) {  // accel's step in bf16 autocast against its fp32 step, blocks interleaved
    AccelSide half(spec.sizes, spec.batch, data, h, threads, ACCEL_PRECISION_BF16);
    for (int i = 0; i < warmup; ++i) half.step(nullptr);
    std::vector<double> fp32, bf16;
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const bool half_turn = (k == 0) == (r % 2 == 0);
        const auto t0 = Clock::now();
        for (int i = 0; i < steps; ++i) (half_turn ? half : acc).step(nullptr);
        (half_turn ? bf16 : fp32).push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / steps);
      }
    }
    const double f = median(fp32), b = median(bf16);
    std::printf("{\"bench\":\"precision\",\"model\":\"%s\",\"batch\":%" PRId64 ",\"threads\":%d,\"fp32_us\":%.1f,"
                "\"bf16_us\":%.1f,\"bf16_over_fp32\":%.3f",
                spec.name.c_str(), spec.batch, used_threads, f, b, b / f);
    if (peers) {  // the same comparison in PyTorch 2.x (its own kernels for bf16)
      std::vector<double> pf, pb;
      peers->run(side_names[kPyTorch], warmup);
      peers->run("pytorch_bf16", warmup);
      for (int r = 0; r < rounds; ++r) {
        for (int k = 0; k < 2; ++k) {
          const bool half_turn = (k == 0) == (r % 2 == 0);
          const PeerBlock blk = peers->run(half_turn ? "pytorch_bf16" : side_names[kPyTorch], steps);
          (half_turn ? pb : pf).push_back(blk.total_us / steps);
        }
      }
      std::printf(",\"torch\":\"%s\",\"pytorch_fp32_us\":%.1f,\"pytorch_bf16_us\":%.1f,\"pytorch_bf16_over_fp32\":%.3f",
                  peers->torch_version().c_str(), median(pf), median(pb), median(pb) / median(pf));
    }
    std::printf("}\n");
  }
  std::fflush(stdout);
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--quick] [--rounds N] [--steps N] [--warmup N] [--threads N[,N...]] [--model SUBSTRING]\n"
               "          [--data digits.csv.gz] [--breakdown] [--bf16] [--peers PYTHON [--peers-script PATH]]\n",
               argv0);
  std::exit(2);
}

int int_arg(int argc, char** argv, int& i) {
  if (i + 1 >= argc) usage(argv[0]);
  char* end = nullptr;
  long v = std::strtol(argv[++i], &end, 10);
  if (*end != '\0' || v < 0 || v > 1000000) usage(argv[0]);
  return static_cast<int>(v);
}

// "1,2" -> {1, 2}: thread counts, each from 1 to 1024.
std::vector<int> threads_arg(int argc, char** argv, int& i) {
  if (i + 1 >= argc) usage(argv[0]);
  std::vector<int> out;
  const char* p = argv[++i];
  while (true) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 1 || v > 1024 || (*end != ',' && *end != '\0')) usage(argv[0]);
    out.push_back(static_cast<int>(v));
    if (*end == '\0') break;
    p = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") cfg.quick = true;
    else if (a == "--breakdown") cfg.breakdown = true;
    else if (a == "--bf16") cfg.bf16 = true;
    else if (a == "--rounds") cfg.rounds = std::max(1, int_arg(argc, argv, i));
    else if (a == "--steps") cfg.steps = int_arg(argc, argv, i);
    else if (a == "--warmup") cfg.warmup = int_arg(argc, argv, i);
    else if (a == "--threads") cfg.threads = threads_arg(argc, argv, i);
    else if (a == "--model" && i + 1 < argc) cfg.model_filter = argv[++i];
    else if (a == "--data" && i + 1 < argc) cfg.data = argv[++i];
    else if (a == "--peers" && i + 1 < argc) cfg.peers_python = argv[++i];
    else if (a == "--peers-script" && i + 1 < argc) cfg.peers_script = argv[++i];
    else usage(argv[0]);
  }
  bool rounds_given = false;
  for (int i = 1; i < argc; ++i) rounds_given = rounds_given || std::strcmp(argv[i], "--rounds") == 0;
  if (cfg.quick && !rounds_given) cfg.rounds = 5;
  if (cfg.threads.empty()) {  // one thread, and one per CPU this process may run on when that is more
    cfg.threads.push_back(1);
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    if (cpus > 1) cfg.threads.push_back(cpus);
  }
  signal(SIGPIPE, SIG_IGN);  // a peers' process that ends is reported, not fatal by signal

  const std::vector<ModelSpec> specs = {
      {model_name({64, 128, 64, 10}), {64, 128, 64, 10}, 32, 200, 200, true},
      {model_name({1024, 1024, 1024, 1024, 10}), {1024, 1024, 1024, 1024, 10}, 64, 4, 3, false},
  };
  const bool sgemm_only = !cfg.model_filter.empty() && std::string("sgemm").find(cfg.model_filter) != std::string::npos;
  int ran = 0;
  for (const int threads : cfg.threads) {
    at::set_num_threads(threads);  // the same intra-op thread count for every side
    const double sgemm_us = sgemm_best_us();
    std::printf("{\"bench\":\"sgemm\",\"n\":1024,\"threads\":%d,\"best_us\":%.1f,\"gflops\":%.2f}\n", threads, sgemm_us,
                kSgemmFlops / sgemm_us / 1e3);
    std::fflush(stdout);
    if (sgemm_only) {
      ++ran;
      continue;
    }
    for (const auto& s : specs) {
      if (!cfg.model_filter.empty() && s.name.find(cfg.model_filter) == std::string::npos) continue;
      run_model(s, cfg, threads, sgemm_us);
      ++ran;
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "no model matches '%s'\n", cfg.model_filter.c_str());
    return 2;
  }
  return 0;
}
