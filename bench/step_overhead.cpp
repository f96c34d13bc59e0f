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
// Threads: --threads N, else libtorch's default (at::get_num_threads() at start-up);
// the count both sides ran with is reported as "threads".
//
//   bench_step_overhead [--quick] [--rounds N] [--steps N] [--warmup N] [--threads N]
//                       [--model SUBSTRING] [--data PATH] [--breakdown]
//
// --bf16 adds, per model, accel's step under bf16 autocast against its fp32 step:
// {"bench":"precision",...,"fp32_us":…,"bf16_us":…,"bf16_over_fp32":…}.
//
// First it prints this CPU's sgemm rate through libtorch's BLAS (1024 x 1024 fp32, best of
// 10): {"bench":"sgemm","n":1024,"threads":…,"best_us":…,"gflops":…}, the peak the MLPs'
// achieved FLOP/s are measured against (--model sgemm prints it alone).
//
// --breakdown adds, per model and side, one "step_overhead_breakdown" line with the
// median time of each phase of a step (next, forward, loss, backward, step).
#include <accel/accel.h>
#include <torch/torch.h>
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
#include <vector>

#ifndef DIGITS_DEFAULT_PATH
#define DIGITS_DEFAULT_PATH "examples/data/digits.csv.gz"
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

// ---------------------------------------------------------------------------------------

struct Config {
  int rounds = 15;
  int steps = 0;   // steps per block; 0: the model's default
  int warmup = -1; // warm-up steps per side; -1: the model's default
  int threads = 0; // 0: libtorch's default
  bool quick = false, breakdown = false, bf16 = false;
  std::string model_filter, data = DIGITS_DEFAULT_PATH;
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

void run_model(const ModelSpec& spec, const Config& cfg, int threads) {
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

  std::fprintf(stderr, "step_overhead: %s batch %" PRId64 " (%s, %" PRId64 " samples), %d threads, %d rounds x %d steps, warm-up %d\n",
               spec.name.c_str(), spec.batch, spec.digits ? "digits" : "random", data.x.size(0), used_threads, rounds,
               steps, warmup);

  for (int i = 0; i < warmup; ++i) acc.step(nullptr);
  for (int i = 0; i < warmup; ++i) base.step(nullptr);

  // A block's mean step time is one sample (it includes every cost, periodic ones such as
  // the per-epoch permutation too). Each step is timed as well: the median single step is
  // less disturbed when other processes take the CPU now and then.
  std::vector<double> acc_samples, base_samples, acc_steps, base_steps;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool accel_turn = (k == 0) == (r % 2 == 0);  // who goes first alternates
      auto& per_step = accel_turn ? acc_steps : base_steps;
      const auto t0 = Clock::now();
      auto prev = t0;
      for (int i = 0; i < steps; ++i) {
        if (accel_turn) acc.step(nullptr); else base.step(nullptr);
        const auto now = Clock::now();
        per_step.push_back(std::chrono::duration<double, std::micro>(now - prev).count());
        prev = now;
      }
      (accel_turn ? acc_samples : base_samples).push_back(std::chrono::duration<double, std::micro>(prev - t0).count() / steps);
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

  const double a_us = median(acc_samples), b_us = median(base_samples);
  const double a_p50 = median(acc_steps), b_p50 = median(base_steps);
  std::printf("{\"bench\":\"step_overhead\",\"model\":\"%s\",\"batch\":%" PRId64
              ",\"threads\":%d,\"rounds\":%d,\"steps\":%d,\"accel_us\":%.1f,\"baseline_us\":%.1f,\"ratio\":%.3f,"
              "\"overhead_us\":%.1f,\"accel_step_p50_us\":%.1f,\"baseline_step_p50_us\":%.1f,\"step_p50_ratio\":%.3f,"
              "\"max_abs_diff\":%.3g}\n",
              spec.name.c_str(), spec.batch, used_threads, rounds, steps, a_us, b_us, a_us / b_us, a_us - b_us, a_p50,
              b_p50, a_p50 / b_p50, max_diff);
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
                "\"bf16_us\":%.1f,\"bf16_over_fp32\":%.3f}\n",
                spec.name.c_str(), spec.batch, used_threads, f, b, b / f);
  }
  std::fflush(stdout);
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--quick] [--rounds N] [--steps N] [--warmup N] [--threads N] [--model SUBSTRING]\n"
               "          [--data digits.csv.gz] [--breakdown] [--bf16]\n",
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
    else if (a == "--threads") cfg.threads = int_arg(argc, argv, i);
    else if (a == "--model" && i + 1 < argc) cfg.model_filter = argv[++i];
    else if (a == "--data" && i + 1 < argc) cfg.data = argv[++i];
    else usage(argv[0]);
  }
  bool rounds_given = false;
  for (int i = 1; i < argc; ++i) rounds_given = rounds_given || std::strcmp(argv[i], "--rounds") == 0;
  if (cfg.quick && !rounds_given) cfg.rounds = 5;

  // The same intra-op thread count for both sides: the one asked for, else libtorch's default.
  const int threads = cfg.threads > 0 ? cfg.threads : at::get_num_threads();
  at::set_num_threads(threads);

  // This CPU's sgemm rate through libtorch's BLAS (the peak the MLPs are measured against):
  // C = A x B of 1024 x 1024 fp32 matrices, best of 10 after 2 warm-ups.
  int ran = 0;
  if (cfg.model_filter.empty() || std::string("sgemm").find(cfg.model_filter) != std::string::npos) {
    ++ran;
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
    std::printf("{\"bench\":\"sgemm\",\"n\":%" PRId64 ",\"threads\":%d,\"best_us\":%.1f,\"gflops\":%.2f}\n", n,
                threads, best * 1e6, 2.0 * n * n * n / best / 1e9);
    std::fflush(stdout);
  }

  const std::vector<ModelSpec> specs = {
      {model_name({64, 128, 64, 10}), {64, 128, 64, 10}, 32, 200, 200, true},
      {model_name({1024, 1024, 1024, 1024, 10}), {1024, 1024, 1024, 1024, 10}, 64, 4, 3, false},
  };
  for (const auto& s : specs) {
    if (!cfg.model_filter.empty() && s.name.find(cfg.model_filter) == std::string::npos) continue;
    run_model(s, cfg, threads);
    ++ran;
  }
  if (ran == 0) {
    std::fprintf(stderr, "no model matches '%s'\n", cfg.model_filter.c_str());
    return 2;
  }
  return 0;
}
