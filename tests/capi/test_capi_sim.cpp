// The simulator through the C ABI: collectives on ranks, out-of-memory and mismatches, faults,
// the trace, options out of their domains, determinism, the prepared loader's sharding
// (Accelerate's semantics), uneven batches under DDP, process utilities, gather_for_metrics,
// seeds; and the version-1 options structs still accepted.
#include "common.h"

using namespace capi_test;  // NOLINT(google-build-using-namespace)

namespace {

struct SimCase {
  accel_reduce_op op;
  std::vector<float> got[8];
  std::vector<int32_t> index, size;
};

accel_status reduce_rank(accel_context* ctx, void* user) {
  auto* c = static_cast<SimCase*>(user);
  int32_t rank = -1, n = -1;
  accel_status s = accel_process_index(ctx, &rank);
  if (s == ACCEL_OK) s = accel_num_processes(ctx, &n);
  if (s != ACCEL_OK) return s;
  c->index[rank] = rank;
  c->size[rank] = n;
  std::vector<float> mine = {static_cast<float>(rank + 1), static_cast<float>(2 * rank), -1.0f};
  int64_t shape = 3;
  accel_tensor *t = nullptr, *r = nullptr;
  if ((s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, mine.data(), &t)) != ACCEL_OK) return s;
  s = accel_reduce(ctx, t, c->op, &r);
  if (s == ACCEL_OK) {
    c->got[rank].resize(3);
    s = accel_tensor_copy_to_host(r, c->got[rank].data(), 12);
  }
  if (s == ACCEL_OK) s = accel_barrier(ctx);
  accel_tensor_destroy(t);
  accel_tensor_destroy(r);
  return s;
}

TEST(Sim, ReduceAcrossFourRanks) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 4;
  struct Want {
    accel_reduce_op op;
    std::vector<float> v;
  } wants[] = {{ACCEL_REDUCE_SUM, {10, 12, -4}}, {ACCEL_REDUCE_MEAN, {2.5f, 3, -1}}, {ACCEL_REDUCE_MAX, {4, 6, -1}},
               {ACCEL_REDUCE_MIN, {1, 0, -1}},   {ACCEL_REDUCE_PROD, {24, 0, 1}}};
  for (const auto& w : wants) {
    SimCase c;
    c.op = w.op;
    c.index.assign(4, -1);
    c.size.assign(4, -1);
    accel_sim_report* rep = nullptr;
    ASSERT_EQ(accel_sim_run(&so, nullptr, reduce_rank, &c, &rep), ACCEL_OK) << accel_last_error(nullptr);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(c.got[r], w.v) << "op " << w.op << " rank " << r;
      EXPECT_EQ(c.index[r], r);
      EXPECT_EQ(c.size[r], 4);
    }
    int32_t n = 0;
    ASSERT_EQ(accel_sim_report_world_size(rep, &n), ACCEL_OK);
    EXPECT_EQ(n, 4);
    accel_status st;
    const char* err = nullptr;
    uint64_t peak = 0;
    ASSERT_EQ(accel_sim_report_rank(rep, 3, &st, &err, &peak), ACCEL_OK);
    EXPECT_EQ(st, ACCEL_OK);
    EXPECT_STREQ(err, "");
    EXPECT_GE(peak, 12u);  // at least the tensors it made
    double predicted = 0;
    ASSERT_EQ(accel_sim_report_predicted_seconds(rep, &predicted), ACCEL_OK);
    EXPECT_GT(predicted, 0.0);
    EXPECT_EQ(accel_sim_report_rank(rep, 4, &st, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
    accel_sim_report_destroy(rep);
  }
  // a single process reduces to itself
  Fixture f;
  float v[2] = {3, 4};
  int64_t shape = 2;
  accel_tensor *t = nullptr, *r = nullptr;
  ASSERT_EQ(accel_tensor_create(ACCEL_FLOAT32, &shape, 1, v, &t), ACCEL_OK);
  ASSERT_OK(f.ctx, accel_reduce(f.ctx, t, ACCEL_REDUCE_MEAN, &r));
  float back[2];
  ASSERT_EQ(accel_tensor_copy_to_host(r, back, sizeof back), ACCEL_OK);
  EXPECT_EQ(back[0], 3.f);
  EXPECT_EQ(accel_reduce(f.ctx, t, static_cast<accel_reduce_op>(17), &r), ACCEL_ERR_INVALID_ARGUMENT);
  int32_t idx = -1, n = -1;
  ASSERT_OK(f.ctx, accel_process_index(f.ctx, &idx));
  ASSERT_OK(f.ctx, accel_num_processes(f.ctx, &n));
  EXPECT_EQ(idx, 0);
  EXPECT_EQ(n, 1);
  ASSERT_OK(f.ctx, accel_barrier(f.ctx));
  accel_tensor_destroy(t);
  accel_tensor_destroy(r);
}

accel_status big_alloc_on_rank1(accel_context* ctx, void*) {
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> data(rank == 1 ? (1 << 19) : 16, 1.f);  // 2 MiB on rank 1
  int64_t shape = static_cast<int64_t>(data.size());
  accel_tensor* t = nullptr;
  accel_status s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, data.data(), &t);
  accel_tensor_destroy(t);
  return s;
}

TEST(Sim, OutOfMemoryOnOneRankIsReportedLikeCuda) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  so.device_memory = "1MiB";
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, big_alloc_on_rank1, nullptr, &rep), ACCEL_ERR_OUT_OF_MEMORY);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "rank 1: accel_tensor_create: libtorch: CUDA out of memory. Tried to "
                                                  "allocate 2.00 MiB. GPU 1 has a total capacity of 1024.00 KiB of which"))
      << accel_last_error(nullptr);
  ASSERT_NE(rep, nullptr);
  accel_status st;
  ASSERT_EQ(accel_sim_report_rank(rep, 1, &st, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_ERR_OUT_OF_MEMORY);
  ASSERT_EQ(accel_sim_report_rank(rep, 0, &st, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_OK);
  accel_sim_report_destroy(rep);
}

accel_status mismatched_reduce(accel_context* ctx, void*) {
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> data(rank == 1 ? 4 : 3, 1.f);
  int64_t shape = static_cast<int64_t>(data.size());
  accel_tensor *t = nullptr, *r = nullptr;
  accel_status s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, data.data(), &t);
  if (s == ACCEL_OK) s = accel_reduce(ctx, t, ACCEL_REDUCE_SUM, &r);
  accel_tensor_destroy(t);
  accel_tensor_destroy(r);
  return s;
}

TEST(Sim, MismatchedCollectivesFailInsteadOfHanging) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, mismatched_reduce, nullptr, &rep), ACCEL_ERR_INVALID_STATE);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "mismatched collectives at call #1")) << accel_last_error(nullptr);
  for (int r = 0; r < 2; ++r) {
    accel_status st;
    const char* err = nullptr;
    ASSERT_EQ(accel_sim_report_rank(rep, r, &st, &err, nullptr), ACCEL_OK);
    EXPECT_EQ(st, ACCEL_ERR_INVALID_STATE);
    EXPECT_TRUE(contains(err, "rank 1 called all_reduce #1(count=4, float32, sum)")) << err;
  }
  accel_sim_report_destroy(rep);
}

accel_status reduce_three_times(accel_context* ctx, void*) {
  float v = 1;
  int64_t shape = 1;
  accel_tensor* t = nullptr;
  accel_status s = accel_tensor_create(ACCEL_FLOAT32, &shape, 1, &v, &t);
  for (int i = 0; i < 3 && s == ACCEL_OK; ++i) {
    accel_tensor* r = nullptr;
    s = accel_sim_charge_compute(ctx, 0.01, "step");
    if (s == ACCEL_OK) s = accel_reduce(ctx, t, ACCEL_REDUCE_SUM, &r);
    accel_tensor_destroy(r);
  }
  accel_tensor_destroy(t);
  return s;
}

TEST(Sim, FaultsTraceAndBadOptions) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  so.faults = "kill:2@collective:2";
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_COMMUNICATION);
  accel_status st;
  const char* err = nullptr;
  ASSERT_EQ(accel_sim_report_rank(rep, 0, &st, &err, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_ERR_COMMUNICATION);
  EXPECT_TRUE(contains(err, "rank 2 died")) << err;
  accel_sim_report_destroy(rep);

  std::string trace = tmp_path("trace.json");
  so.faults = nullptr;
  so.trace_path = trace.c_str();
  so.topology = "8xA100";
  rep = nullptr;
  ASSERT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, &rep), ACCEL_OK) << accel_last_error(nullptr);
  double predicted = 0;
  ASSERT_EQ(accel_sim_report_predicted_seconds(rep, &predicted), ACCEL_OK);
  EXPECT_GT(predicted, 0.03);  // three charged 10 ms steps plus three all-reduces
  EXPECT_LT(predicted, 0.031);
  accel_sim_report_destroy(rep);
  std::ifstream in(trace);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(json.c_str(), "\"traceEvents\"")) << json.substr(0, 200);
  EXPECT_TRUE(contains(json.c_str(), "\"name\":\"all_reduce\""));
  EXPECT_TRUE(contains(json.c_str(), "\"topology\":\"8xA100\""));
  std::remove(trace.c_str());

  accel_sim_options bad = ACCEL_SIM_OPTIONS_INIT;
  bad.world_size = 0;
  rep = nullptr;
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rep, nullptr);
  bad = so;
  bad.trace_path = nullptr;
  bad.topology = "8xTPU";
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "unknown topology '8xTPU'; presets: 8xH100 8xA100 8xPCIe"));
  bad.topology = nullptr;
  bad.device_memory = "12 parsecs";
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  bad.device_memory = nullptr;
  bad.faults = "explode:1";
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  bad.faults = nullptr;
  bad.version = 77;
  EXPECT_EQ(accel_sim_run(&bad, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_sim_run(nullptr, nullptr, nullptr, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  accel_options cuda = ACCEL_OPTIONS_INIT;
  cuda.device = ACCEL_DEVICE_CUDA;
  EXPECT_EQ(accel_sim_run(nullptr, &cuda, reduce_three_times, nullptr, &rep), ACCEL_ERR_UNSUPPORTED);
  EXPECT_EQ(rep, nullptr);
}

[[maybe_unused]] accel_status count_rank(accel_context*, void* user) {  // unused under ASan (the test skips)
  static_cast<std::atomic<int>*>(user)->fetch_add(1);
  return ACCEL_OK;
}

// Threads that cannot all be created (the address space capped, so their stacks do not fit):
// ACCEL_ERR_OUT_OF_MEMORY naming what ran out, no rank runs, every started thread is joined
// and the process lives on (it used to terminate). Run in a child: the cap is process-wide.
TEST(Sim, ThreadsThatCannotBeCreatedAreAnErrorNotAnAbort) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: no room to cap it";
#else
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long vm_kib = 0;  // this process's current address space
    std::ifstream st("/proc/self/status");
    for (std::string line; std::getline(st, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::atol(line.c_str() + 7);
    const rlim_t cap = static_cast<rlim_t>(vm_kib + 512 * 1024) * 1024;  // room for ~60 8-MiB stacks
    const struct rlimit lim = {cap, cap};
    if (vm_kib == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    so.world_size = 2048;
    so.topology = "256x8xH100-IB";
    std::atomic<int> ran{0};
    accel_sim_report* rep = nullptr;
    const accel_status s = accel_sim_run(&so, nullptr, count_rank, &ran, &rep);
    // the message names the limit that binds: here the address space this child capped
    const bool named = contains(accel_last_error(nullptr), "could not start the thread of simulated rank") &&
                       contains(accel_last_error(nullptr), "the address-space limit binds: ulimit -v is");
    std::fprintf(stderr, "status %d, %d ranks ran: %s\n", s, ran.load(), accel_last_error(nullptr));
    if (s != ACCEL_ERR_OUT_OF_MEMORY || !named || ran.load() != 0 || rep != nullptr) ::_exit(1);
    so.world_size = 4;  // the process is still usable
    so.topology = nullptr;
    ::_exit(accel_sim_run(&so, nullptr, count_rank, &ran, nullptr) == ACCEL_OK && ran.load() == 4 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

// Simulator options out of their domains are refused with the argument named.
TEST(Sim, OptionsOutOfTheirDomains) {
  struct Case {
    void (*set)(accel_sim_options&);
    const char* message;
  };
  const Case cases[] = {
      {[](accel_sim_options& o) { o.world_size = 9; }, "world_size must be in [1, 8] (the GPUs of topology '8xH100'"},
      {[](accel_sim_options& o) { o.device_memory = "1.2.3GiB"; }, "device_memory '1.2.3GiB' has an unknown unit"},
      {[](accel_sim_options& o) { o.device_memory = "."; }, "device_memory '.' is not a size"},
      {[](accel_sim_options& o) { o.device_memory = "0"; }, "device_memory '0' is zero"},
      {[](accel_sim_options& o) { o.device_memory = "99999999999999999999TiB"; }, "is too large"},
      {[](accel_sim_options& o) { o.device_memory = "-1GiB"; }, "device_memory '-1GiB' is not a size"},
      {[](accel_sim_options& o) { o.timeout_seconds = NAN; }, "timeout_seconds must be finite and > 0, got nan"},
      {[](accel_sim_options& o) { o.timeout_seconds = INFINITY; }, "timeout_seconds must be finite and > 0, got inf"},
      {[](accel_sim_options& o) { o.engine_threads = -1; }, "engine_threads must be in [0, 1024]"},
      {[](accel_sim_options& o) { o.faults = "delay:0:inf"; }, "faults: 'delay:0:inf': SECONDS must be finite and >= 0, got inf"},
      {[](accel_sim_options& o) { o.faults = "delay:0:nan"; }, "SECONDS must be finite and >= 0, got nan"},
      {[](accel_sim_options& o) { o.faults = "kill:1@step:3junk"; }, "faults: cannot read 'kill:1@step:3junk'"},
  };
  for (const auto& c : cases) {
    accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
    c.set(so);
    accel_sim_report* rep = nullptr;
    EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(rep, nullptr);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "accel_sim_run: ")) << accel_last_error(nullptr);
    EXPECT_TRUE(contains(accel_last_error(nullptr), c.message)) << accel_last_error(nullptr);
  }
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;  // sizes that are fine
  for (const char* size : {"64MiB", "1.5GiB", "1000000", "80 GB"}) {
    so.device_memory = size;
    EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_OK) << size << ": " << accel_last_error(nullptr);
  }
  // the trace replaces an earlier trace, never a user's file
  so.device_memory = nullptr;
  const std::string notes = tmp_path("notes.txt"), trace = tmp_path("run.trace.json");
  std::ofstream(notes) << "my notes";
  so.trace_path = notes.c_str();
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "trace_path '" + notes + "' is a regular file that is not a Chrome trace"))
      << accel_last_error(nullptr);
  std::ifstream in(notes);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "my notes");
  so.trace_path = trace.c_str();
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(accel_sim_run(&so, nullptr, reduce_three_times, nullptr, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  std::remove(notes.c_str());
  std::remove(trace.c_str());
}

accel_status returns_seven(accel_context*, void*) { return static_cast<accel_status>(7); }

TEST(Sim, ARankFunctionReturningNoStatusIsAnError) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, nullptr, returns_seven, nullptr, &rep), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "fn returned 7, which is not an accel_status")) << accel_last_error(nullptr);
  accel_status st = ACCEL_OK;
  ASSERT_EQ(accel_sim_report_rank(rep, 1, &st, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(st, ACCEL_ERR_INVALID_ARGUMENT);
  accel_sim_report_destroy(rep);
}

TEST(Sim, TrainingOnRanksIsDeterministic) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 4;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.seed = 5;
  std::vector<std::vector<float>> a(4), b(4);
  ASSERT_EQ(accel_sim_run(&so, &o, train_and_average, &a, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  ASSERT_EQ(accel_sim_run(&so, &o, train_and_average, &b, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(a, b);
  EXPECT_NE(std::vector<float>(a[0].begin(), a[0].begin() + 64), std::vector<float>(a[1].begin(), a[1].begin() + 64));
  for (int r = 1; r < 4; ++r)  // the averages agree everywhere
    EXPECT_EQ(std::vector<float>(a[r].begin() + 64, a[r].end()), std::vector<float>(a[0].begin() + 64, a[0].end()));
}


// The loader prepared on a 2-rank world shards with Accelerate's semantics (DESIGN.md:
// P=2, b=3, N=22, even batches: rank 1's last batch is [21, 0, 1]).
struct ShardCase {
  int32_t split = 0, even = 1, iterable = 0, shuffle = 0;
  int64_t batch = 3, n = 22;
  std::vector<std::vector<int64_t>> got[2];
};

accel_status collect_shard(accel_context* ctx, void* user) {
  auto* c = static_cast<ShardCase*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> xs(static_cast<size_t>(c->n));
  std::vector<int64_t> ys(static_cast<size_t>(c->n));
  for (int64_t i = 0; i < c->n; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i), ys[static_cast<size_t>(i)] = i;
  accel_tensor* X = make_f32({c->n, 1}, xs);
  accel_tensor* Y = make_i64({c->n}, ys);
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = c->batch;
  lo.split_batches = c->split;
  lo.even_batches = c->even;
  lo.iterable = c->iterable;
  lo.shuffle = c->shuffle;
  accel_dataloader* dl = nullptr;
  accel_status s = accel_dataloader_create(ctx, X, Y, &lo, &dl);
  if (s == ACCEL_OK) s = accel_prepare(ctx, nullptr, nullptr, nullptr, dl);
  while (s == ACCEL_OK) {
    accel_tensor *x = nullptr, *y = nullptr;
    s = accel_dataloader_next(ctx, dl, &x, &y);
    if (s != ACCEL_OK || !x) break;
    int64_t len = 0;
    accel_tensor_numel(y, &len);
    std::vector<int64_t> v(static_cast<size_t>(len));
    s = accel_tensor_copy_to_host(y, v.data(), v.size() * 8);
    c->got[rank].push_back(v);
    accel_tensor_destroy(x);
    accel_tensor_destroy(y);
  }
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
  accel_tensor_destroy(Y);
  return s;
}

TEST(Sim, PreparedLoaderShardsLikeAccelerate) {
  using VV = std::vector<std::vector<int64_t>>;
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  ShardCase even;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &even, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(even.got[0], (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(even.got[1], (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}));
  ShardCase uneven;
  uneven.even = 0;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &uneven, nullptr), ACCEL_OK);
  EXPECT_EQ(uneven.got[1].back(), (std::vector<int64_t>{21}));
  ShardCase split;
  split.split = 1;
  split.batch = 4;
  split.n = 24;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &split, nullptr), ACCEL_OK);
  EXPECT_EQ(split.got[0], (VV{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}}));
  ShardCase bad;
  bad.split = 1;
  bad.batch = 3;
  EXPECT_EQ(accel_sim_run(&so, nullptr, collect_shard, &bad, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "split_batches needs a batch size (3) divisible by the number of processes (2)"))
      << accel_last_error(nullptr);
}

// An iterable loader shares its stream as Accelerate's IterableDatasetShard does: rounds of
// batch x processes samples, the last completed from the first round (N=22, b=3, P=2: the
// fourth round is 18..21 then 0, 1; N=5, b=2: 4 then 0, 1, 2); even_batches does not apply.
TEST(Sim, IterableLoaderShardsLikeAcceleratesIterableDatasetShard) {
  using VV = std::vector<std::vector<int64_t>>;
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  ShardCase stream;
  stream.iterable = 1;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &stream, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(stream.got[0], (VV{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(stream.got[1], (VV{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}));
  ShardCase small;
  small.iterable = 1;
  small.even = 0;  // not used by an iterable loader
  small.n = 5;
  small.batch = 2;
  ASSERT_EQ(accel_sim_run(&so, nullptr, collect_shard, &small, nullptr), ACCEL_OK);
  EXPECT_EQ(small.got[0], (VV{{0, 1}, {4, 0}}));
  EXPECT_EQ(small.got[1], (VV{{2, 3}, {1, 2}}));
  ShardCase shuffled;
  shuffled.iterable = 1;
  shuffled.shuffle = 1;
  EXPECT_EQ(accel_sim_run(&so, nullptr, collect_shard, &shuffled, nullptr), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "shuffle must be 0 for an iterable loader")) << accel_last_error(nullptr);
}

// Through the C ABI: DDP over a loader without even batches (P=2, b=3, N=20: 4 and 3
// batches). Process 0's fourth accel_backward and process 1's end of epoch return
// ACCEL_ERR_INVALID_STATE with the counts named; nothing hangs and the loop can go on.
struct UnevenDdp {
  accel_status failed[2] = {ACCEL_OK, ACCEL_OK};
  std::string where[2], message[2];
  int batches[2] = {0, 0};
};

accel_status train_uneven(accel_context* ctx, void* user) {
  auto* c = static_cast<UnevenDdp*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  const size_t r = static_cast<size_t>(rank);
  std::vector<float> xs(20 * 2);
  std::vector<int64_t> ys(20);
  for (size_t i = 0; i < 20; ++i) xs[2 * i] = static_cast<float>(i) / 20, xs[2 * i + 1] = 1, ys[i] = static_cast<int64_t>(i % 2);
  accel_tensor* X = make_f32({20, 2}, xs);
  accel_tensor* Y = make_i64({20}, ys);
  int64_t sizes[] = {2, 4, 2};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 3;
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 3;
  lo.even_batches = 0;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_dataloader* dl = nullptr;
  accel_status s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_optimizer_create_sgd(ctx, model, nullptr, &opt);
  if (s == ACCEL_OK) s = accel_dataloader_create(ctx, X, Y, &lo, &dl);
  if (s == ACCEL_OK) s = accel_prepare(ctx, model, opt, nullptr, dl);
  for (int epoch = 0; s == ACCEL_OK && epoch < 2; ++epoch)
    for (;;) {
      accel_tensor *x = nullptr, *y = nullptr, *logits = nullptr, *loss = nullptr;
      accel_status e = accel_dataloader_next(ctx, dl, &x, &y);
      if (e != ACCEL_OK) {
        if (c->failed[r] == ACCEL_OK) c->failed[r] = e, c->where[r] = "next", c->message[r] = accel_last_error(ctx);
        break;  // the epoch has advanced: go on with the next, as a forgiving loop would
      }
      if (!x) break;
      ++c->batches[r];
      if ((e = accel_model_forward(ctx, model, &x, 1, &logits)) == ACCEL_OK && (e = accel_loss_cross_entropy(ctx, logits, y, &loss)) == ACCEL_OK) {
        e = accel_backward(ctx, loss);
        if (e != ACCEL_OK && c->failed[r] == ACCEL_OK) c->failed[r] = e, c->where[r] = "backward", c->message[r] = accel_last_error(ctx);
        if (e == ACCEL_OK) e = accel_step(ctx, nullptr);
      }
      accel_tensor_destroy(x);
      accel_tensor_destroy(y);
      accel_tensor_destroy(logits);
      accel_tensor_destroy(loss);
      if (e != ACCEL_OK && c->where[r] != "backward") s = e;
    }
  accel_dataloader_destroy(dl);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  accel_tensor_destroy(X);
  accel_tensor_destroy(Y);
  return s;
}

TEST(Sim, UnevenBatchesUnderDdpFailEveryProcessInsteadOfHanging) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_DDP;
  UnevenDdp c;
  ASSERT_EQ(accel_sim_run(&so, &o, train_uneven, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(c.failed[0], ACCEL_ERR_INVALID_STATE);
  EXPECT_EQ(c.where[0], "backward");
  EXPECT_TRUE(contains(c.message[0].c_str(), "process 0 4 batches per epoch and process 1 3 (even_batches is off)")) << c.message[0];
  EXPECT_EQ(c.failed[1], ACCEL_ERR_INVALID_STATE);
  EXPECT_EQ(c.where[1], "next");
  EXPECT_TRUE(contains(c.message[1].c_str(), "process 1 3 batches per epoch and process 0 4")) << c.message[1];
  // both went on in step with each other: every epoch fails the same way, nothing mismatched
  EXPECT_EQ(c.batches[0], 8);
  EXPECT_EQ(c.batches[1], 6);
}

TEST(Misuse, VersionOneLoaderOptionsStillWork) {
  // the layout a program compiled against version 1 of the header passes
  struct V1 {
    uint32_t version;
    int64_t batch_size;
    int32_t shuffle;
    uint64_t seed;
    int32_t drop_last;
  } v1 = {1, 4, 0, 0, 1};
  Fixture f;
  accel_tensor* X = make_f32({10, 1}, std::vector<float>(10, 0.f));
  accel_dataloader* dl = nullptr;
  ASSERT_OK(f.ctx, accel_dataloader_create(f.ctx, X, nullptr, reinterpret_cast<const accel_dataloader_options*>(&v1), &dl));
  int64_t nb = 0;
  ASSERT_OK(f.ctx, accel_dataloader_num_batches(dl, &nb));
  EXPECT_EQ(nb, 2);  // drop_last read from the version-1 layout
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
}


// Process utilities on 10 simulated ranks (two nodes of 8 GPUs).
struct UtilCase {
  std::vector<int32_t> local;
  std::vector<int> main, local_main;
  std::vector<std::vector<float>> bcast, gathered, padded;
  std::vector<accel_status> bad_gather;
  std::vector<std::string> bad_msg;
};

accel_status utilities(accel_context* ctx, void* user) {
  auto* c = static_cast<UtilCase*>(user);
  int32_t rank = 0;
  accel_status s = accel_process_index(ctx, &rank);
  if (s == ACCEL_OK) s = accel_local_process_index(ctx, &c->local[rank]);
  if (s == ACCEL_OK) s = accel_is_main_process(ctx, &c->main[rank]);
  if (s == ACCEL_OK) s = accel_is_local_main_process(ctx, &c->local_main[rank]);
  if (s == ACCEL_OK) s = accel_print(ctx, "printed once, by the main process");
  float r = static_cast<float>(rank);
  accel_tensor* pair = make_f32({2}, {r, r});
  accel_tensor* ragged = make_f32({rank % 3 + 1}, std::vector<float>(static_cast<size_t>(rank % 3 + 1), r));
  accel_tensor *out = nullptr;
  if (s == ACCEL_OK && (s = accel_broadcast(ctx, pair, 2, &out)) == ACCEL_OK) c->bcast[rank] = host_floats(out);
  accel_tensor_destroy(out);
  out = nullptr;
  if (s == ACCEL_OK && (s = accel_gather(ctx, pair, &out)) == ACCEL_OK) c->gathered[rank] = host_floats(out);
  accel_tensor_destroy(out);
  out = nullptr;
  if (s == ACCEL_OK && (s = accel_pad_across_processes(ctx, ragged, 0, -1.0, 0, &out)) == ACCEL_OK)
    c->padded[rank] = host_floats(out);
  accel_tensor_destroy(out);
  out = nullptr;
  if (s == ACCEL_OK) {
    c->bad_gather[rank] = accel_gather(ctx, ragged, &out);
    c->bad_msg[rank] = accel_last_error(ctx);
  }
  accel_tensor_destroy(pair);
  accel_tensor_destroy(ragged);
  return s;
}

TEST(Sim, ProcessUtilities) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 10;
  so.topology = "2x8xH100-IB";  // 16 GPUs: more ranks than one 8-GPU node has
  UtilCase c;
  c.local.assign(10, -1);
  c.main.assign(10, -1);
  c.local_main.assign(10, -1);
  c.bcast.resize(10);
  c.gathered.resize(10);
  c.padded.resize(10);
  c.bad_gather.assign(10, ACCEL_OK);
  c.bad_msg.resize(10);
  ASSERT_EQ(accel_sim_run(&so, nullptr, utilities, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  std::vector<float> all;
  for (int r = 0; r < 10; ++r) all.insert(all.end(), {static_cast<float>(r), static_cast<float>(r)});
  for (int r = 0; r < 10; ++r) {
    EXPECT_EQ(c.local[r], r % 8);
    EXPECT_EQ(c.main[r], r == 0);
    EXPECT_EQ(c.local_main[r], r % 8 == 0);
    EXPECT_EQ(c.bcast[r], (std::vector<float>{2, 2}));
    EXPECT_EQ(c.gathered[r], all);
    std::vector<float> want(3, -1.f);
    for (int i = 0; i <= r % 3; ++i) want[static_cast<size_t>(i)] = static_cast<float>(r);
    EXPECT_EQ(c.padded[r], want);
    EXPECT_EQ(c.bad_gather[r], ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(c.bad_msg[r].c_str(), "gather needs the same shape on every process: process 0 has [1], process 1 has [2]"))
        << c.bad_msg[r];
  }
}

// gather_for_metrics over an uneven dataset (N=22, batch 3, 2 processes, even batches):
// every sample exactly once, although rank 1's last batch is [21, 0, 1].
struct MetricsCase {
  std::vector<float> seen;
  std::vector<float> plain;
};

accel_status metrics(accel_context* ctx, void* user) {
  auto* c = static_cast<MetricsCase*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  std::vector<float> xs(22);
  for (int i = 0; i < 22; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i);
  accel_tensor* X = make_f32({22, 1}, xs);
  accel_dataloader_options lo = ACCEL_DATALOADER_OPTIONS_INIT;
  lo.batch_size = 3;
  lo.shuffle = 1;
  lo.seed = 3;
  accel_dataloader* dl = nullptr;
  accel_status s = accel_dataloader_create(ctx, X, nullptr, &lo, &dl);
  if (s == ACCEL_OK) s = accel_prepare(ctx, nullptr, nullptr, nullptr, dl);
  while (s == ACCEL_OK) {
    accel_tensor *x = nullptr, *g = nullptr, *p = nullptr;
    if ((s = accel_dataloader_next(ctx, dl, &x, nullptr)) != ACCEL_OK || !x) break;
    s = accel_gather_for_metrics(ctx, x, &g);
    if (s == ACCEL_OK) s = accel_gather(ctx, x, &p);
    if (s == ACCEL_OK && rank == 0) {
      auto v = host_floats(g), w = host_floats(p);
      c->seen.insert(c->seen.end(), v.begin(), v.end());
      c->plain.insert(c->plain.end(), w.begin(), w.end());
    }
    accel_tensor_destroy(x);
    accel_tensor_destroy(g);
    accel_tensor_destroy(p);
  }
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
  return s;
}

TEST(Sim, GatherForMetricsCountsEverySampleOnce) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  MetricsCase c;
  ASSERT_EQ(accel_sim_run(&so, nullptr, metrics, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(c.plain.size(), 24u);  // a plain gather holds the two duplicates
  std::vector<float> sorted = c.seen;
  std::sort(sorted.begin(), sorted.end());
  std::vector<float> want(22);
  for (int i = 0; i < 22; ++i) want[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_EQ(sorted, want);
}

struct SeedCase {
  std::vector<std::vector<float>> w;
  int per_process = 0;
};

accel_status seeded_model(accel_context* ctx, void* user) {
  auto* c = static_cast<SeedCase*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  accel_status s = accel_set_seed(ctx, 7, c->per_process);
  int64_t sizes[] = {3, 2};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  accel_model* model = nullptr;
  accel_tensor* w = nullptr;
  if (s == ACCEL_OK) s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_model_parameter(ctx, model, 0, &w);
  if (s == ACCEL_OK) c->w[rank] = host_floats(w);
  accel_tensor_destroy(w);
  accel_model_destroy(model);
  return s;
}

TEST(Sim, SetSeedSharedOrPerProcess) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  SeedCase shared, per;
  shared.w.resize(2);
  per.w.resize(2);
  per.per_process = 1;
  ASSERT_EQ(accel_sim_run(&so, nullptr, seeded_model, &shared, nullptr), ACCEL_OK);
  ASSERT_EQ(accel_sim_run(&so, nullptr, seeded_model, &per, nullptr), ACCEL_OK);
  EXPECT_EQ(shared.w[0], shared.w[1]);
  EXPECT_NE(per.w[0], per.w[1]);
  EXPECT_EQ(per.w[0], shared.w[0]);  // process 0 adds 0
}


TEST(Misuse, VersionOneOptionsAndTheStrategyVariable) {
  accel_options v2 = ACCEL_OPTIONS_INIT;
  v2.version = 1;  // a version-1 caller's struct ends before `strategy`; the library reads no further
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(&v2, &ctx), ACCEL_OK) << accel_last_error(nullptr);
  accel_destroy(ctx);
  ::setenv("ACCEL_STRATEGY", "zero9", 1);
  EXPECT_EQ(accel_init(nullptr, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "ACCEL_STRATEGY='zero9' is not a strategy")) << accel_last_error(nullptr);
  ::setenv("ACCEL_STRATEGY", "ddp", 1);
  ASSERT_EQ(accel_init(nullptr, &ctx), ACCEL_OK);
  accel_destroy(ctx);
  ::unsetenv("ACCEL_STRATEGY");
  accel_options bad = ACCEL_OPTIONS_INIT;
  bad.strategy = static_cast<accel_strategy>(9);
  EXPECT_EQ(accel_init(&bad, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
}
}  // namespace
