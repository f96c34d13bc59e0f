// A cart-pole in Box2D at a fixed 500 Hz tick, with a dynamics network that learns online
// while the loop keeps its rate (docs/on-device.md).
//
//   cartpole [--seconds S] [--warmup S] [--hz N] [--trainer thread|inline|off]
//            [--hidden N] [--batch N] [--threads N] [--seed N] [--json] [--bench]
//
// The loop's thread, every tick:
//   1. reads the state (cart position and velocity, pole angle and angular velocity),
//   2. picks the force on the cart (an exploration controller: a smooth random force and a
//      spring towards the track's centre, so every state and force gets visited),
//   3. asks the network for the state's rate of change under that force (accel_inference_run
//      on an inference copy: the latest published weights, no autograd, one thread),
//   4. steps the physics (Box2D's b2World::Step, 1/hz seconds),
//   5. scores the prediction against what the physics did, and stores the sample.
// A training thread (--trainer thread) samples mini-batches from the stored experience,
// trains the model with accel_train_micro_batches (at most 8 micro-batches a call) and
// publishes the weights after each call (accel_publish_weights). With --trainer inline the
// loop itself trains between ticks instead, with the time left in the tick as the budget
// (max_seconds): the way a single-threaded engine schedules training between frames.
//
// For --warmup seconds the trainer is off: the tick latency measured then is the baseline.
// The run prints the prediction error with the first weights and at the end, the tick
// latency (p50, p99, max) with the trainer off and on, the age of the weights inference used,
// the training steps per second, the library's size, the resident memory, and the time from
// accel_init to the first training step. --json prints them as one JSON line
// ({"bench":"realtime",...}); --bench alternates the trainer off and on in one-second blocks
// (so both see the same machine), as bench_realtime does.
//
// The engine is Box2D 2.4 (Debian's libbox2d-dev, C++): a packaged, widely used rigid-body
// engine with joints and motors, enough for a cart on a rail and a pole on a hinge.
#include <accel/accel.h>
#include <box2d/box2d.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kIn = 6;   // x, xdot, sin(theta), cos(theta), thetadot, force (normalised)
constexpr int kOut = 4;  // d/dt of x, xdot, theta, thetadot over one tick (normalised)

[[noreturn]] void die(const char* what, accel_status s, const accel_context* ctx) {
  std::fprintf(stderr, "cartpole: %s: %s (%s)\n", what, accel_last_error(ctx), accel_status_name(s));
  std::exit(1);
}
#define TRY(ctx, call)                              \
  do {                                              \
    accel_status s_ = (call);                       \
    if (s_ != ACCEL_OK) die(#call, s_, (ctx));      \
  } while (0)

double now_s() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Args {
  double seconds = 10, warmup = 2;
  int hz = 500, hidden = 64, batch = 64, threads = 0;
  uint64_t seed = 1;
  std::string trainer = "thread";
  bool json = false, bench = false;
};

// ---------------------------------------------------------------------------------------
// The physics: a cart on a rail (a prismatic joint with limits) and a pole on a hinge.

struct State {
  double x, xdot, theta, thetadot;
};

class CartPole {
 public:
  explicit CartPole(double dt) : world_(b2Vec2(0.0f, -9.81f)), dt_(static_cast<float>(dt)) {
    b2BodyDef gd;
    b2Body* ground = world_.CreateBody(&gd);
    b2BodyDef cd;
    cd.type = b2_dynamicBody;
    cd.position.Set(0.0f, 0.0f);
    cart_ = world_.CreateBody(&cd);
    b2PolygonShape cart_box;
    cart_box.SetAsBox(0.25f, 0.1f);  // 0.5 m x 0.2 m, 1 kg
    b2FixtureDef cf;
    cf.shape = &cart_box;
    cf.density = 1.0f / (0.5f * 0.2f);
    cart_->CreateFixture(&cf);
    b2PrismaticJointDef rail;
    rail.Initialize(ground, cart_, cart_->GetPosition(), b2Vec2(1.0f, 0.0f));
    rail.enableLimit = true;  // wide: the explorer's spring keeps the cart well inside (a stop's impulse is no dynamics to learn)
    rail.lowerTranslation = -5.0f;
    rail.upperTranslation = 5.0f;
    world_.CreateJoint(&rail);
    b2BodyDef pd;
    pd.type = b2_dynamicBody;
    pd.position.Set(0.0f, 0.5f);  // upright, hinged at the cart's centre
    pd.angle = 0.05f;
    pole_ = world_.CreateBody(&pd);
    b2PolygonShape pole_box;
    pole_box.SetAsBox(0.025f, 0.5f);  // 1 m long, 0.1 kg
    b2FixtureDef pf;
    pf.shape = &pole_box;
    pf.density = 0.1f / (0.05f * 1.0f);
    pole_->CreateFixture(&pf);
    b2RevoluteJointDef hinge;
    hinge.Initialize(cart_, pole_, b2Vec2(0.0f, 0.0f));
    world_.CreateJoint(&hinge);
  }
  State state() const {
    return {cart_->GetPosition().x, cart_->GetLinearVelocity().x, pole_->GetAngle(), pole_->GetAngularVelocity()};
  }
  void step(double force) {
    cart_->ApplyForceToCenter(b2Vec2(static_cast<float>(force), 0.0f), true);
    world_.Step(dt_, 8, 3);
  }

 private:
  b2World world_;
  float dt_;
  b2Body* cart_ = nullptr;
  b2Body* pole_ = nullptr;
};

// The exploration controller: an Ornstein-Uhlenbeck force plus a spring and damper that keep
// the cart near the rail's centre.
class Explorer {
 public:
  explicit Explorer(uint64_t seed, double dt) : rng_(seed), dt_(dt) {}
  double force(const State& s) {
    std::normal_distribution<double> n(0.0, 1.0);
    noise_ += -noise_ * 2.0 * dt_ + 12.0 * std::sqrt(dt_) * n(rng_);
    return std::clamp(noise_ - 4.0 * s.x - 2.0 * s.xdot, -20.0, 20.0);
  }

 private:
  std::mt19937_64 rng_;
  double dt_;
  double noise_ = 0;
};

// What the network sees and predicts, normalised by the spread of a short offline roll-out.
struct Normaliser {
  double in_scale[kIn] = {1, 1, 1, 1, 1, 1};
  double out_scale[kOut] = {1, 1, 1, 1};

  static void raw(const State& s, double force, double* in) {
    in[0] = s.x;
    in[1] = s.xdot;
    in[2] = std::sin(s.theta);
    in[3] = std::cos(s.theta);
    in[4] = s.thetadot;
    in[5] = force;
  }
  static void rates(const State& a, const State& b, double dt, double* out) {
    out[0] = (b.x - a.x) / dt;
    out[1] = (b.xdot - a.xdot) / dt;
    out[2] = std::remainder(b.theta - a.theta, 2 * M_PI) / dt;
    out[3] = (b.thetadot - a.thetadot) / dt;
  }
  // Root mean squares from 4 simulated seconds of the explorer (not in real time).
  void fit(uint64_t seed, double dt) {
    CartPole sim(dt);
    Explorer ex(seed ^ 0x9e3779b97f4a7c15ULL, dt);
    double sin_[kIn] = {0}, sout[kOut] = {0};
    const int n = static_cast<int>(4.0 / dt);
    for (int i = 0; i < n; ++i) {
      const State a = sim.state();
      const double f = ex.force(a);
      sim.step(f);
      double in[kIn], out[kOut];
      raw(a, f, in);
      rates(a, sim.state(), dt, out);
      for (int k = 0; k < kIn; ++k) sin_[k] += in[k] * in[k];
      for (int k = 0; k < kOut; ++k) sout[k] += out[k] * out[k];
    }
    for (int k = 0; k < kIn; ++k) in_scale[k] = k == 2 || k == 3 ? 1.0 : std::max(1e-3, std::sqrt(sin_[k] / n));
    for (int k = 0; k < kOut; ++k) out_scale[k] = std::max(1e-3, std::sqrt(sout[k] / n));
  }
  void input(const State& s, double force, float* in) const {
    double r[kIn];
    raw(s, force, r);
    for (int k = 0; k < kIn; ++k) in[k] = static_cast<float>(r[k] / in_scale[k]);
  }
  void target(const State& a, const State& b, double dt, float* out) const {
    double r[kOut];
    rates(a, b, dt, r);
    for (int k = 0; k < kOut; ++k) out[k] = static_cast<float>(r[k] / out_scale[k]);
  }
};

// ---------------------------------------------------------------------------------------
// Experience: written by the loop, read by the trainer, without a lock. The loop writes
// sample n into slot n % capacity and then publishes the count (release); the trainer
// reads the count (acquire) and samples from slots the loop will not overwrite for at
// least `guard` more ticks (seconds at 500 Hz), longer than one sampling takes.

class Experience {
 public:
  static constexpr size_t capacity = 1 << 17, guard = 1024;
  Experience() : in_(capacity * kIn), out_(capacity * kOut) {}
  void push(const float* in, const float* out) {
    const size_t n = count_.load(std::memory_order_relaxed);
    std::memcpy(&in_[(n % capacity) * kIn], in, sizeof(float) * kIn);
    std::memcpy(&out_[(n % capacity) * kOut], out, sizeof(float) * kOut);
    count_.store(n + 1, std::memory_order_release);
  }
  size_t size() const { return count_.load(std::memory_order_acquire); }
  // `rows` random samples into xs [rows, kIn] and ys [rows, kOut]; false when there are too few.
  bool sample(std::mt19937_64& rng, size_t rows, std::vector<float>& xs, std::vector<float>& ys) const {
    const size_t n = size();
    if (n < 256) return false;
    const size_t lo = n > capacity - guard ? n - (capacity - guard) : 0;
    std::uniform_int_distribution<size_t> pick(lo, n - 1);
    xs.resize(rows * kIn);
    ys.resize(rows * kOut);
    for (size_t r = 0; r < rows; ++r) {
      const size_t i = pick(rng) % capacity;
      std::memcpy(&xs[r * kIn], &in_[i * kIn], sizeof(float) * kIn);
      std::memcpy(&ys[r * kOut], &out_[i * kOut], sizeof(float) * kOut);
    }
    return true;
  }

 private:
  std::vector<float> in_, out_;
  std::atomic<size_t> count_{0};
};

// ---------------------------------------------------------------------------------------
// Training: the context, the model and its optimizer belong to whichever thread trains.

struct Trainer {
  accel_context* ctx = nullptr;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  std::mt19937_64 rng;
  std::vector<float> xs, ys;
  int batch = 64;
  std::atomic<int64_t> steps{0}, publishes{0};

  // At most `micro` micro-batches of fresh samples (max_seconds > 0: within that budget),
  // then a publication. False when there is not enough experience yet.
  bool round(const Experience& exp, int micro, double max_seconds) {
    const size_t rows = static_cast<size_t>(batch) * static_cast<size_t>(micro);
    if (!exp.sample(rng, rows, xs, ys)) return false;
    const int64_t xshape[2] = {static_cast<int64_t>(rows), kIn}, yshape[2] = {static_cast<int64_t>(rows), kOut};
    accel_tensor *x = nullptr, *y = nullptr;
    TRY(ctx, accel_tensor_create(ACCEL_FLOAT32, xshape, 2, xs.data(), &x));
    TRY(ctx, accel_tensor_create(ACCEL_FLOAT32, yshape, 2, ys.data(), &y));
    accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
    lo.batch_size = batch;
    accel_dataloader* loader = nullptr;
    TRY(ctx, accel_dataloader_create(ctx, x, y, &lo, &loader));
    accel_train_result r{};
    r.version = ACCEL_TRAIN_RESULT_VERSION;
    TRY(ctx, accel_train_micro_batches(ctx, model, loader, ACCEL_LOSS_MSE, micro, max_seconds, &r));
    accel_dataloader_destroy(loader);
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    steps += r.optimizer_steps;
    TRY(ctx, accel_publish_weights(ctx, model, nullptr));
    ++publishes;
    return true;
  }
};

// ---------------------------------------------------------------------------------------
// Figures

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - (p > 0));
  return v[i];
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

long rss_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::atol(line.c_str() + n + 1);
  return -1;
}

long library_bytes() {
  Dl_info where{};
  struct stat st {};
  if (dladdr(reinterpret_cast<void*>(&accel_init), &where) && where.dli_fname && stat(where.dli_fname, &st) == 0)
    return static_cast<long>(st.st_size);
  return -1;
}

Args parse(int argc, char** argv) {
  Args a;
#ifdef REALTIME_BENCH
  a.bench = a.json = true;
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cartpole: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--seconds") a.seconds = std::atof(value());
    else if (k == "--warmup") a.warmup = std::atof(value());
    else if (k == "--hz") a.hz = std::atoi(value());
    else if (k == "--hidden") a.hidden = std::atoi(value());
    else if (k == "--batch") a.batch = std::atoi(value());
    else if (k == "--threads") a.threads = std::atoi(value());
    else if (k == "--seed") a.seed = std::strtoull(value(), nullptr, 10);
    else if (k == "--trainer") a.trainer = value();
    else if (k == "--json") a.json = true;
    else if (k == "--bench") a.bench = a.json = true;
    else {
      const bool help = k == "--help" || k == "-h";
      std::fprintf(help ? stdout : stderr,
                   "usage: cartpole [--seconds S] [--warmup S] [--hz N] [--trainer thread|inline|off] [--hidden N]\n"
                   "                [--batch N] [--threads N] [--seed N] [--json] [--bench]\n");
      std::exit(help ? 0 : 2);
    }
  }
  if (!(a.seconds > 0) || a.warmup < 0 || a.warmup >= a.seconds || a.hz < 1 || a.hz > 100000 || a.hidden < 1 ||
      a.batch < 1 || a.threads < 0 ||
      (a.trainer != "thread" && a.trainer != "inline" && a.trainer != "off")) {
    std::fprintf(stderr, "cartpole: need seconds > warmup >= 0, hz in [1, 100000], hidden, batch >= 1, "
                         "--trainer thread|inline|off\n");
    std::exit(2);
  }
  return a;
}

// The time from accel_init to the end of the first optimizer step in a fresh context (the
// first of this process: the library's first calls included), with this example's model.
double cold_start_ms(int hidden, int batch) {
  const double t0 = now_s();
  accel_options o = ACCEL_OPTIONS_INIT;
  o.device = ACCEL_DEVICE_CPU;
  accel_context* ctx = nullptr;
  TRY(nullptr, accel_init(&o, &ctx));
  const int64_t sizes[] = {kIn, hidden, hidden, kOut};
  accel_mlp_options mo = ACCEL_MLP_OPTIONS_INIT;
  mo.layer_sizes = sizes;
  mo.num_layer_sizes = 4;
  mo.activation = ACCEL_ACT_TANH;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  TRY(ctx, accel_model_create_mlp(ctx, &mo, &model));
  TRY(ctx, accel_optimizer_create_adamw(ctx, model, nullptr, &opt));
  TRY(ctx, accel_prepare(ctx, model, opt, nullptr, nullptr));
  std::vector<float> xs(static_cast<size_t>(batch) * kIn, 0.5f), ys(static_cast<size_t>(batch) * kOut, 0.25f);
  const int64_t xshape[2] = {batch, kIn}, yshape[2] = {batch, kOut};
  accel_tensor *x = nullptr, *y = nullptr, *out = nullptr, *loss = nullptr;
  TRY(ctx, accel_tensor_create(ACCEL_FLOAT32, xshape, 2, xs.data(), &x));
  TRY(ctx, accel_tensor_create(ACCEL_FLOAT32, yshape, 2, ys.data(), &y));
  TRY(ctx, accel_model_forward(ctx, model, &x, 1, &out));
  TRY(ctx, accel_loss_mse(ctx, out, y, &loss));
  TRY(ctx, accel_backward(ctx, loss));
  TRY(ctx, accel_step(ctx, nullptr));
  const double ms = (now_s() - t0) * 1e3;
  for (accel_tensor* t : {x, y, out, loss}) accel_tensor_destroy(t);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  accel_destroy(ctx);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const double dt = 1.0 / args.hz;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  const double first_step_ms = cold_start_ms(args.hidden, args.batch);
  // Training gets the cores the loop does not use; inference runs on the loop's one thread.
  accel_options o = ACCEL_OPTIONS_INIT;
  o.seed = args.seed;
  o.device = ACCEL_DEVICE_CPU;
  o.num_threads = args.threads > 0 ? args.threads : static_cast<int32_t>(std::max(1u, cores - 1));
  Trainer tr;
  tr.rng.seed(args.seed);
  tr.batch = args.batch;
  TRY(nullptr, accel_init(&o, &tr.ctx));
  const int64_t sizes[] = {kIn, args.hidden, args.hidden, kOut};
  accel_mlp_options mo = ACCEL_MLP_OPTIONS_INIT;
  mo.layer_sizes = sizes;
  mo.num_layer_sizes = 4;
  mo.activation = ACCEL_ACT_TANH;
  TRY(tr.ctx, accel_model_create_mlp(tr.ctx, &mo, &tr.model));
  accel_adamw_options ao = ACCEL_ADAMW_OPTIONS_INIT;
  ao.lr = 3e-3;
  ao.weight_decay = 0;
  TRY(tr.ctx, accel_optimizer_create_adamw(tr.ctx, tr.model, &ao, &tr.opt));
  TRY(tr.ctx, accel_prepare(tr.ctx, tr.model, tr.opt, nullptr, nullptr));
  accel_inference_options io = ACCEL_INFERENCE_OPTIONS_INIT;  // one thread
  accel_inference* inf = nullptr;
  TRY(tr.ctx, accel_inference_create(tr.ctx, tr.model, &io, &inf));

  Normaliser norm;
  norm.fit(args.seed, dt);
  CartPole world(dt);
  Explorer explorer(args.seed, dt);
  Experience exp;

  // The trainer: on its own thread (off until `train` says so), or inline in the loop.
  std::atomic<bool> train{false}, stop{false};
  std::thread trainer;
  if (args.trainer == "thread")
    trainer = std::thread([&] {
      while (!stop.load()) {
        if (!train.load() || !tr.round(exp, 8, 0.0)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });

  const int64_t ticks = static_cast<int64_t>(std::llround(args.seconds * args.hz));
  const int64_t warm = static_cast<int64_t>(std::llround(args.warmup * args.hz));
  std::vector<double> work_off, work_on, age_on, err_first, err_last;
  work_off.reserve(static_cast<size_t>(ticks));
  work_on.reserve(static_cast<size_t>(ticks));
  int64_t overruns = 0;
  const int64_t shape[2] = {1, kIn};
  float in[kIn], pred[kOut], actual[kOut];
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  const double t_loop = now_s();
  double on_seconds = 0, on_since = 0;
  int64_t publishes_at_on = 0;
  for (int64_t t = 0; t < ticks; ++t) {
    // the trainer's schedule: off during the warm-up; --bench alternates one-second blocks after it
    const bool on = args.trainer != "off" && t >= warm && (!args.bench || ((t - warm) / args.hz) % 2 == 1);
    if (on != train.load()) {
      if (on) {
        on_since = now_s();
        publishes_at_on = tr.publishes.load();
      } else
        on_seconds += now_s() - on_since;
      train.store(on);
    }
    next.tv_nsec += static_cast<long>(1e9 * dt);
    while (next.tv_nsec >= 1000000000L) {
      next.tv_nsec -= 1000000000L;
      next.tv_sec += 1;
    }
    const double t0 = now_s();
    // 1-3: the state, the force, the network's prediction with the latest weights
    const State s = world.state();
    const double force = explorer.force(s);
    norm.input(s, force, in);
    accel_tensor *x = nullptr, *y = nullptr;
    TRY(nullptr, accel_tensor_create(ACCEL_FLOAT32, shape, 2, in, &x));
    TRY(nullptr, accel_inference_run(inf, &x, 1, &y));
    TRY(nullptr, accel_tensor_copy_to_host(y, pred, sizeof pred));
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
    // 4-5: the physics, the prediction's error, the sample
    world.step(force);
    norm.target(s, world.state(), dt, actual);
    double err = 0;
    for (int k = 0; k < kOut; ++k) err += (pred[k] - actual[k]) * (pred[k] - actual[k]) / kOut;
    exp.push(in, actual);
    const double work = now_s() - t0;
    if (t < warm) err_first.push_back(err);
    if (t >= ticks - args.hz) err_last.push_back(err);
    if (on)
      work_on.push_back(work * 1e6);
    else if (!args.bench || t >= warm)  // --bench: the warm-up (cold caches) is not the baseline
      work_off.push_back(work * 1e6);
    if (on && tr.publishes.load() > publishes_at_on) {  // the age once this block's trainer has published
      double age = 0;
      TRY(nullptr, accel_inference_weights(inf, nullptr, &age));
      age_on.push_back(age * 1e3);
    }
    if (on && args.trainer == "inline") {  // train in what is left of this tick, keeping a quarter spare
      const double left = dt * 0.75 - (now_s() - t0);
      if (left > 0) tr.round(exp, 8, left);
    }
    timespec wake{};
    clock_gettime(CLOCK_MONOTONIC, &wake);
    if (wake.tv_sec > next.tv_sec || (wake.tv_sec == next.tv_sec && wake.tv_nsec > next.tv_nsec))
      ++overruns;  // this tick's work ran into the next tick
    else
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
  }
  const double loop_seconds = now_s() - t_loop;
  if (train.load()) on_seconds += now_s() - on_since;
  stop.store(true);
  if (trainer.joinable()) trainer.join();
  uint64_t version = 0;
  TRY(nullptr, accel_inference_weights(inf, &version, nullptr));
  accel_inference_destroy(inf);

  const double e0 = mean(err_first), e1 = mean(err_last);
  const double p99_off = percentile(work_off, 0.99), p99_on = percentile(work_on, 0.99);
  const double steps_per_s = on_seconds > 0 ? static_cast<double>(tr.steps.load()) / on_seconds : 0.0;
  if (args.json) {
    std::printf("{\"bench\":\"realtime\",\"engine\":\"box2d-%d.%d.%d\",\"task\":\"cartpole-dynamics\",\"hz\":%d,"
                "\"trainer\":\"%s\",\"cores\":%u,\"train_threads\":%d,\"ticks\":%lld,\"overruns\":%lld,"
                "\"p50_off_us\":%.1f,\"p99_off_us\":%.1f,\"max_off_us\":%.1f,"
                "\"p50_on_us\":%.1f,\"p99_on_us\":%.1f,\"max_on_us\":%.1f,\"p99_ratio\":%.3f,"
                "\"weights_age_ms_mean\":%.2f,\"weights_age_ms_p99\":%.2f,\"train_steps_per_s\":%.1f,"
                "\"publishes\":%lld,\"weights_version\":%llu,\"error_first\":%.4f,\"error_last\":%.4f,"
                "\"lib_bytes\":%ld,\"rss_kib\":%ld,\"peak_rss_kib\":%ld,\"init_to_first_step_ms\":%.1f,"
                "\"loop_seconds\":%.2f}\n",
                b2_version.major, b2_version.minor, b2_version.revision, args.hz, args.trainer.c_str(), cores,
                o.num_threads, static_cast<long long>(ticks), static_cast<long long>(overruns),
                percentile(work_off, 0.5), p99_off, percentile(work_off, 1.0), percentile(work_on, 0.5), p99_on,
                percentile(work_on, 1.0), p99_on / p99_off, mean(age_on), percentile(age_on, 0.99), steps_per_s,
                static_cast<long long>(tr.publishes.load()), static_cast<unsigned long long>(version), e0, e1,
                library_bytes(), rss_kib("VmRSS:"), rss_kib("VmHWM:"), first_step_ms, loop_seconds);
  } else {
    std::printf("cart-pole in Box2D %d.%d.%d at %d Hz for %.1f s (%lld ticks, %lld overran their tick), trainer: %s\n",
                b2_version.major, b2_version.minor, b2_version.revision, args.hz, loop_seconds,
                static_cast<long long>(ticks), static_cast<long long>(overruns), args.trainer.c_str());
    std::printf("tick work, trainer off: p50 %.1f us  p99 %.1f us  max %.1f us  (%zu ticks)\n", percentile(work_off, 0.5),
                p99_off, percentile(work_off, 1.0), work_off.size());
    if (!work_on.empty()) {
      std::printf("tick work, trainer on:  p50 %.1f us  p99 %.1f us  max %.1f us  (%zu ticks)  p99 ratio %.3f\n",
                  percentile(work_on, 0.5), p99_on, percentile(work_on, 1.0), work_on.size(), p99_on / p99_off);
      std::printf("weights used by inference: %.2f ms old on average, p99 %.2f ms; %lld publications, the last tick "
                  "used version %llu\n",
                  mean(age_on), percentile(age_on, 0.99), static_cast<long long>(tr.publishes.load()),
                  static_cast<unsigned long long>(version));
      std::printf("training: %lld steps of %d samples, %.1f steps/s on %d thread(s)\n",
                  static_cast<long long>(tr.steps.load()), args.batch, steps_per_s, o.num_threads);
    }
    std::printf("libaccel: %.1f MiB; resident memory %.1f MiB (peak %.1f MiB); accel_init to first step %.1f ms\n",
                static_cast<double>(library_bytes()) / (1 << 20), static_cast<double>(rss_kib("VmRSS:")) / 1024,
                static_cast<double>(rss_kib("VmHWM:")) / 1024, first_step_ms);
    std::printf("prediction error (mean squared, normalised; 1 = no better than predicting 0):\n");
    std::printf("  first weights (first %.1f s): %.4f\n", args.warmup, e0);
    std::printf("  last second:                %.4f\n", e1);
  }
  accel_optimizer_destroy(tr.opt);
  accel_model_destroy(tr.model);
  accel_destroy(tr.ctx);
  return 0;
}
