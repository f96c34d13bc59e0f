// The C ABI, continued: every published options version accepted (and only its bytes read or
// written), DDP and ZeRO on simulated ranks, checkpoints (a round trip, saves that never
// destroy what they did not write, running out of file descriptors), pad/gather refusals,
// the memory estimate, and the trackers (accel_init_trackers, accel_log).
#include "common.h"

using namespace capi_test;  // NOLINT(google-build-using-namespace)

namespace {

// Every version an options struct ever had is accepted by its _init, which stores it and
// writes only that version's bytes (a program built against an older header passes its
// shorter struct); 0 and versions past the current one are refused, the struct untouched.
template <class T>
void every_version(const char* name, accel_status (*init)(T*, uint32_t), uint32_t current) {
  SCOPED_TRACE(name);
  for (uint32_t v = 1; v <= current; ++v) {
    T o;
    std::memset(&o, 0x5a, sizeof o);
    ASSERT_EQ(init(&o, v), ACCEL_OK) << accel_last_error(nullptr);
    EXPECT_EQ(o.version, v);
  }
  for (uint32_t v : {0u, current + 1, 1000u}) {
    T o, before;
    std::memset(&o, 0x5a, sizeof o);
    std::memcpy(&before, &o, sizeof o);
    EXPECT_EQ(init(&o, v), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "version " + std::to_string(v) + " is not known"))
        << accel_last_error(nullptr);
    EXPECT_TRUE(contains(accel_last_error(nullptr), "it knows 1.." + std::to_string(current)))
        << accel_last_error(nullptr);
    EXPECT_EQ(std::memcmp(&o, &before, sizeof o), 0) << "a refused version changed the struct";
  }
}

// The bytes of `o` from `from` to its end still hold the 0x5a they were set to.
template <class T>
bool untouched_from(const T& o, size_t from) {
  const auto* b = reinterpret_cast<const unsigned char*>(&o);
  for (size_t i = from; i < sizeof o; ++i)
    if (b[i] != 0x5a) return false;
  return true;
}

TEST(Versions, EveryPublishedVersionIsAcceptedAndOnlyItsBytesAreWritten) {
  every_version("accel_options", accel_options_init, ACCEL_OPTIONS_VERSION);
  every_version("accel_mlp_options", accel_mlp_options_init, ACCEL_MLP_OPTIONS_VERSION);
  every_version("accel_sgd_options", accel_sgd_options_init, ACCEL_SGD_OPTIONS_VERSION);
  every_version("accel_adamw_options", accel_adamw_options_init, ACCEL_ADAMW_OPTIONS_VERSION);
  every_version("accel_lamb_options", accel_lamb_options_init, ACCEL_LAMB_OPTIONS_VERSION);
  every_version("accel_scheduler_options", accel_scheduler_options_init, ACCEL_SCHEDULER_OPTIONS_VERSION);
  every_version("accel_dataloader_options", accel_dataloader_options_init, ACCEL_DATALOADER_OPTIONS_VERSION);
  every_version("accel_sim_options", accel_sim_options_init, ACCEL_SIM_OPTIONS_VERSION);
  every_version("accel_project_options", accel_project_options_init, ACCEL_PROJECT_OPTIONS_VERSION);

  // accel_options version 1 ends before `strategy` (git 27556aa appended strategy and
  // bucket_bytes as version 2): its defaults, and not a byte after
  accel_options o;
  std::memset(&o, 0x5a, sizeof o);
  ASSERT_EQ(accel_options_init(&o, 1), ACCEL_OK);
  EXPECT_EQ(o.version, 1u);
  EXPECT_EQ(o.mixed_precision, ACCEL_PRECISION_NO);
  EXPECT_EQ(o.gradient_accumulation_steps, 1);
  EXPECT_EQ(o.seed, 0u);
  EXPECT_EQ(o.loss_scale_init, 65536.0);
  EXPECT_EQ(o.loss_scale_growth_interval, 2000);
  EXPECT_EQ(o.num_threads, 0);
  EXPECT_TRUE(untouched_from(o, offsetof(accel_options, strategy)));
  // ... and accel_init reads no further: 0x5a5a5a5a would be refused as a strategy
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(&o, &ctx), ACCEL_OK) << accel_last_error(nullptr);
  accel_destroy(ctx);
  o.version = 2;
  EXPECT_EQ(accel_init(&o, &ctx), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(nullptr), "strategy")) << accel_last_error(nullptr);
  ASSERT_EQ(accel_options_init(&o, 2), ACCEL_OK);
  EXPECT_EQ(o.strategy, ACCEL_STRATEGY_NO);
  EXPECT_EQ(o.bucket_bytes, 25 * 1024 * 1024);

  // accel_dataloader_options version 1 ends before even_batches (git e93abbe)
  accel_dataloader_options d;
  std::memset(&d, 0x5a, sizeof d);
  ASSERT_EQ(accel_dataloader_options_init(&d, 1), ACCEL_OK);
  EXPECT_EQ(d.version, 1u);
  EXPECT_EQ(d.batch_size, 1);
  EXPECT_EQ(d.shuffle, 0);
  EXPECT_EQ(d.seed, 0u);
  EXPECT_EQ(d.drop_last, 0);
  EXPECT_TRUE(untouched_from(d, offsetof(accel_dataloader_options, even_batches)));
  ASSERT_EQ(accel_dataloader_options_init(&d, 2), ACCEL_OK);
  EXPECT_EQ(d.even_batches, 1);
  EXPECT_EQ(d.split_batches, 0);
}

// Under the simulator a version-1 dataloader struct followed by garbage (0x5a5a5a5a would
// turn split_batches on and halve the batches) gives whole batches of batch_size.
accel_status whole_batches(accel_context* ctx, void* user) {
  auto* rows = static_cast<std::atomic<int64_t>*>(user);
  accel_dataloader_options d;
  std::memset(&d, 0x5a, sizeof d);
  accel_status s = accel_dataloader_options_init(&d, 1);
  if (s != ACCEL_OK) return s;
  d.batch_size = 4;
  std::vector<float> x(16);
  accel_tensor* X = make_f32({16, 1}, x);
  accel_dataloader* dl = nullptr;
  if ((s = accel_dataloader_create(ctx, X, nullptr, &d, &dl)) != ACCEL_OK) return s;
  if ((s = accel_prepare(ctx, nullptr, nullptr, nullptr, dl)) != ACCEL_OK) return s;
  accel_tensor* xb = nullptr;
  if ((s = accel_dataloader_next(ctx, dl, &xb, nullptr)) != ACCEL_OK) return s;
  int64_t shape[2] = {0, 0};
  if (xb && (s = accel_tensor_shape(xb, shape, 2)) != ACCEL_OK) return s;
  rows->fetch_add(shape[0]);
  accel_tensor_destroy(xb);
  accel_dataloader_destroy(dl);
  accel_tensor_destroy(X);
  return ACCEL_OK;
}

TEST(Versions, AVersionOneLoaderIsReadNoFurtherThanItsBytes) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 2;
  std::atomic<int64_t> rows{0};
  ASSERT_EQ(accel_sim_run(&so, nullptr, whole_batches, &rows, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(rows.load(), 8);  // two ranks, a whole batch of 4 each (split_batches would give 2 each)
}

// DDP through the C ABI: ranks train on different data, and stay identical.
accel_status ddp_rank(accel_context* ctx, void* user) {
  auto* out = static_cast<std::vector<std::vector<float>>*>(user);
  return train_and_average(ctx, out);
}

TEST(Sim, DdpKeepsRanksIdentical) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_DDP;
  o.seed = 9;
  std::vector<std::vector<float>> w(3);
  ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &w, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(w[r], w[0]);  // different data, averaged gradients: the same weights
  o.strategy = ACCEL_STRATEGY_NO;
  std::vector<std::vector<float>> alone(3);
  ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &alone, nullptr), ACCEL_OK);
  EXPECT_NE(std::vector<float>(alone[1].begin(), alone[1].begin() + 64), std::vector<float>(alone[0].begin(), alone[0].begin() + 64));
}

// ZeRO through the C ABI, by enum and by the environment variable's names (FSDP's too):
// the same weights as DDP; accel_model_parameter gathers the shards.
TEST(Sim, ZeroStagesMatchDdp) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 4;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_DDP;
  o.seed = 9;
  std::vector<std::vector<float>> ddp(4);
  ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &ddp, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  auto close_to_ddp = [&](const std::vector<std::vector<float>>& w, const char* what) {
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(w[r].size(), ddp[0].size()) << what;
      for (size_t i = 0; i < w[r].size(); ++i) EXPECT_NEAR(w[r][i], ddp[0][i], 1e-5) << what << " rank " << r << " at " << i;
    }
  };
  for (accel_strategy st : {ACCEL_STRATEGY_ZERO1, ACCEL_STRATEGY_SHARD_GRAD_OP, ACCEL_STRATEGY_FULL_SHARD}) {
    o.strategy = st;
    std::vector<std::vector<float>> w(4);
    ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &w, nullptr), ACCEL_OK) << accel_last_error(nullptr);
    close_to_ddp(w, "enum");
  }
  o.strategy = ACCEL_STRATEGY_NO;
  for (const char* name : {"zero1", "ZERO2", "shard_grad_op", "zero3", "FULL_SHARD"}) {
    ::setenv("ACCEL_STRATEGY", name, 1);
    std::vector<std::vector<float>> w(4);
    ASSERT_EQ(accel_sim_run(&so, &o, ddp_rank, &w, nullptr), ACCEL_OK) << accel_last_error(nullptr);
    close_to_ddp(w, name);
  }
  ::unsetenv("ACCEL_STRATEGY");
}

// LAMB's trust ratio needs whole tensors: ZeRO refuses it at prepare on every rank,
// before any communication; DDP trains with it.
accel_status lamb_rank(accel_context* ctx, void*) {
  int64_t sizes[] = {4, 8, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 3;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  accel_lamb_options lo;
  accel_status s = accel_lamb_options_init(&lo, ACCEL_LAMB_OPTIONS_VERSION);
  if (s == ACCEL_OK) s = accel_model_create_mlp(ctx, &m, &model);
  if (s == ACCEL_OK) s = accel_optimizer_create_lamb(ctx, model, &lo, &opt);
  if (s == ACCEL_OK) s = accel_prepare(ctx, model, opt, nullptr, nullptr);
  for (int step = 0; step < 3 && s == ACCEL_OK; ++step) {
    accel_tensor* x = make_f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
    accel_tensor* y = make_i64({2}, {0, 2});
    accel_tensor *logits = nullptr, *loss = nullptr;
    s = accel_model_forward(ctx, model, &x, 1, &logits);
    if (s == ACCEL_OK) s = accel_loss_cross_entropy(ctx, logits, y, &loss);
    if (s == ACCEL_OK) s = accel_backward(ctx, loss);
    if (s == ACCEL_OK) s = accel_step(ctx, nullptr);
    for (auto* t : {x, y, logits, loss}) accel_tensor_destroy(t);
  }
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  return s;
}

TEST(Sim, ZeroRefusesLambDdpTrainsWithIt) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  accel_options o = ACCEL_OPTIONS_INIT;
  o.strategy = ACCEL_STRATEGY_ZERO2;
  accel_sim_report* rep = nullptr;
  EXPECT_EQ(accel_sim_run(&so, &o, lamb_rank, nullptr, &rep), ACCEL_ERR_UNSUPPORTED);
  ASSERT_NE(rep, nullptr);
  for (int32_t r = 0; r < 3; ++r) {
    accel_status st = ACCEL_OK;
    const char* err = nullptr;
    ASSERT_EQ(accel_sim_report_rank(rep, r, &st, &err, nullptr), ACCEL_OK);
    EXPECT_EQ(st, ACCEL_ERR_UNSUPPORTED);
    EXPECT_TRUE(contains(err, "ZeRO cannot shard the LAMB optimizer")) << err;
  }
  accel_sim_report_destroy(rep);
  o.strategy = ACCEL_STRATEGY_DDP;
  EXPECT_EQ(accel_sim_run(&so, &o, lamb_rank, nullptr, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  accel_lamb_options bad = ACCEL_LAMB_OPTIONS_INIT;
  bad.version = 7;
  EXPECT_EQ(accel_lamb_options_init(&bad, 7), ACCEL_ERR_INVALID_ARGUMENT);
}

// Checkpoint calls through the C ABI: argument and state errors, and a round trip.
TEST(Checkpoint, ArgumentsStateAndARoundTrip) {
  accel_context* ctx = nullptr;
  ASSERT_EQ(accel_init(nullptr, &ctx), ACCEL_OK);
  EXPECT_EQ(accel_save_state(nullptr, "x"), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_save_state(ctx, "x"), ACCEL_ERR_INVALID_STATE);  // nothing prepared
  EXPECT_TRUE(contains(accel_last_error(ctx), "before accel_prepare")) << accel_last_error(ctx);
  accel_project_options po;
  ASSERT_EQ(accel_project_options_init(&po, ACCEL_PROJECT_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(accel_set_project(ctx, &po), ACCEL_ERR_INVALID_ARGUMENT);  // no directory
  int64_t sizes[] = {4, 3};
  accel_mlp_options m = ACCEL_MLP_OPTIONS_INIT;
  m.layer_sizes = sizes;
  m.num_layer_sizes = 2;
  accel_model* model = nullptr;
  accel_optimizer* opt = nullptr;
  ASSERT_EQ(accel_model_create_mlp(ctx, &m, &model), ACCEL_OK);
  ASSERT_EQ(accel_optimizer_create_sgd(ctx, model, nullptr, &opt), ACCEL_OK);
  ASSERT_EQ(accel_prepare(ctx, model, opt, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(accel_load_state(ctx, nullptr), ACCEL_ERR_INVALID_ARGUMENT);  // no project
  EXPECT_TRUE(contains(accel_last_error(ctx), "project directory")) << accel_last_error(ctx);
  const std::string proj = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/accel_capi_proj_" +
                           std::to_string(::getpid());
  po.project_dir = proj.c_str();
  ASSERT_EQ(accel_set_project(ctx, &po), ACCEL_OK);
  EXPECT_EQ(accel_load_state(ctx, nullptr), ACCEL_ERR_IO);  // nothing saved yet
  ASSERT_EQ(accel_save_state(ctx, nullptr), ACCEL_OK) << accel_last_error(ctx);
  const char* where = nullptr;
  ASSERT_EQ(accel_last_checkpoint(ctx, &where), ACCEL_OK);
  EXPECT_EQ(std::string(where), proj + "/checkpoints/checkpoint_0");
  accel_tensor* before = nullptr;
  ASSERT_EQ(accel_model_parameter(ctx, model, 0, &before), ACCEL_OK);
  // train one step, then load: the weights come back
  accel_tensor* x = make_f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  accel_tensor* y = make_i64({2}, {0, 2});
  accel_tensor *logits = nullptr, *loss = nullptr, *after = nullptr;
  ASSERT_EQ(accel_model_forward(ctx, model, &x, 1, &logits), ACCEL_OK);
  ASSERT_EQ(accel_loss_cross_entropy(ctx, logits, y, &loss), ACCEL_OK);
  ASSERT_EQ(accel_backward(ctx, loss), ACCEL_OK);
  EXPECT_EQ(accel_save_state(ctx, nullptr), ACCEL_ERR_INVALID_STATE);  // between backward and step
  ASSERT_EQ(accel_step(ctx, nullptr), ACCEL_OK);
  ASSERT_EQ(accel_load_state(ctx, nullptr), ACCEL_OK) << accel_last_error(ctx);
  ASSERT_EQ(accel_model_parameter(ctx, model, 0, &after), ACCEL_OK);
  EXPECT_EQ(host_floats(after), host_floats(before));
  for (auto* t : {x, y, logits, loss, before, after}) accel_tensor_destroy(t);
  accel_optimizer_destroy(opt);
  accel_model_destroy(model);
  accel_destroy(ctx);
  std::filesystem::remove_all(proj);
}

}  // namespace

namespace {
std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

// A save never destroys what it did not write: a regular file, a directory of the user's,
// a symbolic link, a device, a user's file where the save's temporary would go. Each is
// refused (ACCEL_ERR_INVALID_ARGUMENT, saying what is there) and left as it was; an empty
// directory and an earlier checkpoint (or an earlier saved model) are replaced.
TEST(Checkpoint, ASaveNeverDestroysWhatItDidNotWrite) {
  namespace fs = std::filesystem;
  Fixture f;
  const fs::path root = tmp_path("paths");
  fs::remove_all(root);
  fs::create_directories(root / "mine");
  std::ofstream(root / "notes.txt") << "my notes";
  std::ofstream(root / "mine" / "data.csv") << "1,2";
  fs::create_symlink(root / "mine", root / "link");
  std::ofstream(root / ".ck.tmp") << "not a leftover";
  struct Refusal {
    std::string path, says;
  };
  const Refusal refusals[] = {
      {(root / "notes.txt").string(), "is a regular file, not an accel checkpoint"},
      {(root / "mine").string(), "is a directory that is not an accel checkpoint"},
      {(root / "link").string(), "is a symbolic link to"},
      {"/dev/null", "is a character device"},
      {(root / "ck").string(), "uses the temporary path"},
  };
  for (const auto& r : refusals) {
    EXPECT_EQ(accel_save_state(f.ctx, r.path.c_str()), ACCEL_ERR_INVALID_ARGUMENT) << r.path;
    EXPECT_TRUE(contains(accel_last_error(f.ctx), "accel_save_state: ")) << accel_last_error(f.ctx);
    EXPECT_TRUE(contains(accel_last_error(f.ctx), r.says)) << accel_last_error(f.ctx);
  }
  EXPECT_EQ(accel_save_state(f.ctx, ""), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(accel_last_error(f.ctx), "dir is empty"));
  EXPECT_EQ(slurp((root / "notes.txt").string()), "my notes");
  EXPECT_EQ(slurp((root / "mine" / "data.csv").string()), "1,2");
  EXPECT_TRUE(fs::is_symlink(root / "link"));
  EXPECT_EQ(slurp((root / ".ck.tmp").string()), "not a leftover");
  fs::remove(root / ".ck.tmp");
  // an earlier checkpoint is replaced; so is an empty directory
  ASSERT_OK(f.ctx, accel_save_state(f.ctx, (root / "ck").c_str()));
  ASSERT_OK(f.ctx, accel_save_state(f.ctx, (root / "ck").c_str()));
  fs::create_directory(root / "empty");
  ASSERT_OK(f.ctx, accel_save_state(f.ctx, (root / "empty").c_str()));
  EXPECT_TRUE(fs::exists(root / "empty" / "manifest.json"));
  // a checkpoint directory with a file of the user's added is no longer only a checkpoint
  std::ofstream(root / "ck" / "README") << "keep";
  EXPECT_EQ(accel_save_state(f.ctx, (root / "ck").c_str()), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(slurp((root / "ck" / "README").string()), "keep");

  // accel_save_model: the same classes; an earlier safetensors file is replaced
  for (const auto& r : {Refusal{(root / "notes.txt").string(), "is a regular file that is not a safetensors file"},
                        Refusal{(root / "mine").string(), "is a directory"},
                        Refusal{(root / "link").string(), "is a symbolic link"},
                        Refusal{"/dev/null", "is a character device"}, Refusal{"", "path is empty"}}) {
    EXPECT_EQ(accel_save_model(f.ctx, f.model, r.path.c_str()), ACCEL_ERR_INVALID_ARGUMENT) << r.path;
    EXPECT_TRUE(contains(accel_last_error(f.ctx), r.says)) << accel_last_error(f.ctx);
  }
  EXPECT_EQ(slurp((root / "notes.txt").string()), "my notes");
  ASSERT_OK(f.ctx, accel_save_model(f.ctx, f.model, (root / "model.safetensors").c_str()));
  ASSERT_OK(f.ctx, accel_save_model(f.ctx, f.model, (root / "model.safetensors").c_str()));
  fs::remove_all(root);
}

// pad_across_processes and gather with tensors whose rank or dtype differ across processes:
// INVALID_ARGUMENT on every process naming both (not a mismatched collective, not OK).
struct Ragged {
  std::vector<accel_status> pad, gather;
  std::vector<std::string> pad_msg, gather_msg;
};

accel_status ragged_ranks(accel_context* ctx, void* user) {
  auto* c = static_cast<Ragged*>(user);
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  // rank 0: float [2]; rank 1: float [2, 1] (pad); rank 1: int64 [2] (gather)
  accel_tensor* a = rank == 0 ? make_f32({2}, {1, 2}) : make_f32({2, 1}, {1, 2});
  accel_tensor* b = rank == 0 ? make_f32({2}, {1, 2}) : make_i64({2}, {1, 2});
  accel_tensor* out = nullptr;
  c->pad[rank] = accel_pad_across_processes(ctx, a, 0, 0.0, 0, &out);
  c->pad_msg[rank] = accel_last_error(ctx);
  c->gather[rank] = accel_gather(ctx, b, &out);
  c->gather_msg[rank] = accel_last_error(ctx);
  accel_tensor_destroy(a);
  accel_tensor_destroy(b);
  return out == nullptr ? ACCEL_OK : ACCEL_ERR_INTERNAL;
}

TEST(Sim, PadAndGatherRefuseTensorsThatDifferInRankOrDtype) {
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  Ragged c{{ACCEL_OK, ACCEL_OK}, {ACCEL_OK, ACCEL_OK}, {"", ""}, {"", ""}};
  ASSERT_EQ(accel_sim_run(&so, nullptr, ragged_ranks, &c, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(c.pad[r], ACCEL_ERR_INVALID_ARGUMENT) << c.pad_msg[r];
    EXPECT_TRUE(contains(c.pad_msg[r].c_str(), "the number of dimensions differs across processes: process 0 has [2], process 1 has [2, 1]"))
        << c.pad_msg[r];
    EXPECT_EQ(c.gather[r], ACCEL_ERR_INVALID_ARGUMENT) << c.gather_msg[r];
    EXPECT_TRUE(contains(c.gather_msg[r].c_str(), "the dtypes differ across processes: process 0 has Float, process 1 has Long"))
        << c.gather_msg[r];
  }
}

// Out of file descriptors: a load reports ACCEL_ERR_OUT_OF_MEMORY naming what ran out and
// changes nothing; with descriptors back, the same load succeeds. In a child: the limit is
// process-wide.
TEST(Checkpoint, RunningOutOfFileDescriptorsIsAResourceError) {
  const std::string dir = tmp_path("fds");
  std::filesystem::remove_all(dir);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // the CPU: a forked child cannot initialise CUDA where this process already has
    Fixture f(ACCEL_PRECISION_NO, true, 1, ACCEL_DEVICE_CPU);
    if (accel_save_state(f.ctx, dir.c_str()) != ACCEL_OK) ::_exit(3);
    const int lowest_free = ::dup(0);  // the number the next open would get
    ::close(lowest_free);
    struct rlimit old {};
    ::getrlimit(RLIMIT_NOFILE, &old);
    const struct rlimit none = {static_cast<rlim_t>(lowest_free), old.rlim_max};  // not one more
    if (::setrlimit(RLIMIT_NOFILE, &none) != 0) ::_exit(4);
    const accel_status s = accel_load_state(f.ctx, dir.c_str());
    const std::string msg = accel_last_error(f.ctx);
    ::setrlimit(RLIMIT_NOFILE, &old);
    std::fprintf(stderr, "status %d: %s\n", s, msg.c_str());
    if (s != ACCEL_ERR_OUT_OF_MEMORY || !contains(msg.c_str(), "Too many open files")) ::_exit(1);
    ::_exit(accel_load_state(f.ctx, dir.c_str()) == ACCEL_OK ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove_all(dir);
}

// accel_estimate_memory through the C ABI: a named shape's published counts, a config.json
// directory, the fields of an older out-struct version left alone.
TEST(MemoryEstimate, ThroughTheCABI) {
  accel_memory_estimate_options o;
  ASSERT_EQ(accel_memory_estimate_options_init(&o, ACCEL_MEMORY_ESTIMATE_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(o.optimizer, ACCEL_OPTIMIZER_ADAMW);
  EXPECT_EQ(o.world_size, 1);
  accel_memory_estimate e{};
  e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
  ASSERT_EQ(accel_estimate_memory("llama-7b", &o, &e), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(e.parameters, 6738415616);
  EXPECT_EQ(e.trainable_parameters, 6738415616);
  EXPECT_EQ(e.seq_len, 1024);
  EXPECT_EQ(e.weights, 4ull * 6738415616ull);
  EXPECT_EQ(e.gradients, 4ull * 6738415616ull);
  EXPECT_EQ(e.optimizer_state, 8ull * 6738415616ull);
  EXPECT_GT(e.activations, 0u);
  EXPECT_GE(e.total, e.weights + e.gradients + e.optimizer_state + e.activations);
  EXPECT_TRUE(e.attention == 1 || e.attention == 2);
  // LoRA on 8 GPUs under ZeRO-3: the adapters of q_proj and v_proj, rank 16
  o.lora_rank = 16;
  o.strategy = ACCEL_STRATEGY_ZERO3;
  o.world_size = 8;
  o.mixed_precision = ACCEL_PRECISION_BF16;
  ASSERT_EQ(accel_estimate_memory("llama-7b", &o, &e), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(e.trainable_parameters, 32LL * 2 * 16 * (4096 + 4096));
  // a config.json in a directory: a tiny GPT-2 (tied head): wte + wpe + 2 blocks + ln_f
  const auto dir = std::filesystem::temp_directory_path() / ("accel_estimate_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "vocab_size": 100, "n_embd": 16, "n_layer": 2,
      "n_head": 2, "n_positions": 32})";
  accel_memory_estimate_options d = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
  ASSERT_EQ(accel_estimate_memory(dir.c_str(), &d, &e), ACCEL_OK) << accel_last_error(nullptr);
  const int64_t block = 2 * 16 + (16 * 48 + 48) + (16 * 16 + 16) + 2 * 16 + (16 * 64 + 64) + (64 * 16 + 16);
  EXPECT_EQ(e.parameters, 100 * 16 + 32 * 16 + 2 * block + 2 * 16);
  EXPECT_EQ(e.seq_len, 32);  // min(1024, n_positions)
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Trackers (accel_init_trackers, accel_log, accel_end_training)

namespace tracker_tests {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
std::filesystem::path fresh_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("accel_trackers_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d;
}
struct TrackerRanks {
  std::string dir;
  int32_t all_processes = 0;
  std::atomic<int> failures{0};
};
accel_status log_on_rank(accel_context* ctx, void* user) {
  auto* t = static_cast<TrackerRanks*>(user);
  accel_tracker_options o = ACCEL_TRACKER_OPTIONS_INIT;
  o.log_dir = t->dir.c_str();
  o.writers = ACCEL_LOG_JSONL;
  o.all_processes = t->all_processes;
  if (accel_init_trackers(ctx, &o) != ACCEL_OK) return ACCEL_ERR_INTERNAL;
  int32_t rank = 0;
  accel_process_index(ctx, &rank);
  const char* names[1] = {"rank"};
  const double v[1] = {static_cast<double>(rank)};
  if (accel_log(ctx, 1, names, v, 1) != ACCEL_OK) ++t->failures;
  const char* twice[2] = {"a", "a"};  // every process checks its arguments, writing or not
  const double w[2] = {1, 2};
  if (accel_log(ctx, 1, twice, w, 2) != ACCEL_ERR_INVALID_ARGUMENT) ++t->failures;
  return accel_end_training(ctx);
}
}  // namespace tracker_tests

TEST(Trackers, WriteJsonLinesCsvAndTensorBoardFiles) {
  using namespace tracker_tests;
  const auto dir = fresh_dir("write");
  Fixture f(ACCEL_PRECISION_NO, false, 1, ACCEL_DEVICE_CPU);
  const char* names[2] = {"loss", "lr"};
  const double v[2] = {0.25, 1e-3};
  EXPECT_EQ(accel_log(f.ctx, 0, names, v, 2), ACCEL_ERR_INVALID_STATE);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("accel_init_trackers"), std::string::npos);
  EXPECT_EQ(accel_end_training(f.ctx), ACCEL_OK);  // none open: nothing to do
  accel_tracker_options o;
  ASSERT_EQ(accel_tracker_options_init(&o, ACCEL_TRACKER_OPTIONS_VERSION), ACCEL_OK);
  EXPECT_EQ(o.writers, 0u);
  EXPECT_EQ(o.log_dir, nullptr);
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);  // no log_dir
  const std::string d = (dir / "run").string();
  o.log_dir = d.c_str();
  o.writers = ACCEL_LOG_JSONL | ACCEL_LOG_CSV | ACCEL_LOG_TENSORBOARD;
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK) << accel_last_error(f.ctx);
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_STATE);
  ASSERT_EQ(accel_log(f.ctx, 3, names, v, 2), ACCEL_OK) << accel_last_error(f.ctx);
  const double nan_and_inf[2] = {NAN, INFINITY};
  ASSERT_EQ(accel_log(f.ctx, 4, names, nan_and_inf, 2), ACCEL_OK);
  const char* twice[2] = {"loss", "loss"};
  EXPECT_EQ(accel_log(f.ctx, 5, twice, v, 2), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("'loss' appears twice"), std::string::npos);
  const char* empty[1] = {""};
  EXPECT_EQ(accel_log(f.ctx, 5, empty, v, 1), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_log(f.ctx, -1, names, v, 2), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(accel_log(f.ctx, 5, names, v, 0), ACCEL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  EXPECT_EQ(accel_log(f.ctx, 6, names, v, 2), ACCEL_ERR_INVALID_STATE);

  // JSON lines: one per call, what was logged (not-finite as null); CSV: a row per scalar
  const std::string jl = slurp(dir / "run" / "metrics.jsonl");
  const auto nl = jl.find('\n');
  ASSERT_NE(nl, std::string::npos) << jl;
  EXPECT_EQ(jl.rfind("{\"step\":3,\"wall_time\":", 0), 0u) << jl;
  EXPECT_NE(jl.find("\"values\":{\"loss\":0.25,\"lr\":0.001}}\n"), std::string::npos) << jl;
  EXPECT_NE(jl.find("{\"step\":4,"), std::string::npos) << jl;
  EXPECT_NE(jl.find("\"values\":{\"loss\":null,\"lr\":null}}\n"), std::string::npos) << jl;
  EXPECT_EQ(std::count(jl.begin(), jl.end(), '\n'), 2);
  const std::string csv = slurp(dir / "run" / "metrics.csv");
  EXPECT_EQ(csv.rfind("wall_time,step,name,value\n", 0), 0u) << csv;
  EXPECT_NE(csv.find(",3,loss,0.25\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",3,lr,0.001\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",4,loss,nan\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",4,lr,inf\n"), std::string::npos) << csv;
  // the event file: TFRecords; the first holds the file version
  std::vector<std::filesystem::path> events;
  for (const auto& e : std::filesystem::directory_iterator(dir / "run"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events.push_back(e.path());
  ASSERT_EQ(events.size(), 1u);
  const std::string ev = slurp(events[0]);
  ASSERT_GT(ev.size(), 16u);
  uint64_t first = 0;
  std::memcpy(&first, ev.data(), 8);
  EXPECT_EQ(ev.substr(12, first).find("brain.Event:2"), first - 13);  // the last field of the first record
  EXPECT_NE(ev.find("loss"), std::string::npos);

  // again: the lines and rows are appended to, a new event file is written
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK) << accel_last_error(f.ctx);
  ASSERT_EQ(accel_log(f.ctx, 7, names, v, 2), ACCEL_OK);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  const std::string jl2 = slurp(dir / "run" / "metrics.jsonl");
  EXPECT_EQ(jl2.substr(0, jl.size()), jl);
  EXPECT_EQ(std::count(jl2.begin(), jl2.end(), '\n'), 3);
  EXPECT_EQ(slurp(dir / "run" / "metrics.csv").find("wall_time", 1), std::string::npos) << "a second header";
  size_t n_events = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "run"))
    n_events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(n_events, 2u);
  std::filesystem::remove_all(dir);
}

TEST(Trackers, WritersFromTheEnvironmentAndHostilePaths) {
  using namespace tracker_tests;
  const auto dir = fresh_dir("env");
  std::filesystem::create_directories(dir);
  Fixture f(ACCEL_PRECISION_NO, false, 1, ACCEL_DEVICE_CPU);
  accel_tracker_options o = ACCEL_TRACKER_OPTIONS_INIT;
  const std::string d = (dir / "a").string();
  o.log_dir = d.c_str();
  ::setenv("ACCEL_LOG_WITH", "csv, bogus", 1);
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("ACCEL_LOG_WITH 'csv, bogus': 'bogus' is not a writer"),
            std::string::npos)
      << accel_last_error(f.ctx);
  ::setenv("ACCEL_LOG_WITH", "csv", 1);
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK) << accel_last_error(f.ctx);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  ::unsetenv("ACCEL_LOG_WITH");
  EXPECT_TRUE(std::filesystem::exists(dir / "a" / "metrics.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a" / "metrics.jsonl"));
  // default without the variable: JSON lines
  const std::string b = (dir / "b").string();
  o.log_dir = b.c_str();
  ASSERT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_OK);
  ASSERT_EQ(accel_end_training(f.ctx), ACCEL_OK);
  EXPECT_TRUE(std::filesystem::exists(dir / "b" / "metrics.jsonl"));
  // writers outside the three
  o.writers = 8;
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  o.writers = ACCEL_LOG_JSONL;
  // a log_dir that is a file; a metrics file that is a symbolic link: refused, nothing written
  std::ofstream(dir / "notes.txt") << "mine";
  const std::string file = (dir / "notes.txt").string();
  o.log_dir = file.c_str();
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("is a regular file, not a directory"), std::string::npos)
      << accel_last_error(f.ctx);
  std::filesystem::create_directories(dir / "c");
  std::filesystem::create_symlink(dir / "notes.txt", dir / "c" / "metrics.jsonl");
  const std::string c = (dir / "c").string();
  o.log_dir = c.c_str();
  EXPECT_EQ(accel_init_trackers(f.ctx, &o), ACCEL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(accel_last_error(f.ctx)).find("is a symbolic link"), std::string::npos)
      << accel_last_error(f.ctx);
  EXPECT_EQ(slurp(dir / "notes.txt"), "mine");
  const char* names[1] = {"x"};
  const double v[1] = {1};
  EXPECT_EQ(accel_log(f.ctx, 0, names, v, 1), ACCEL_ERR_INVALID_STATE) << "a failed init left trackers open";
  std::filesystem::remove_all(dir);
}

TEST(Trackers, TheMainProcessWritesUnlessEveryProcessIsAsked) {
  using namespace tracker_tests;
  const auto dir = fresh_dir("ranks");
  accel_sim_options so = ACCEL_SIM_OPTIONS_INIT;
  so.world_size = 3;
  TrackerRanks t;
  t.dir = (dir / "main").string();
  ASSERT_EQ(accel_sim_run(&so, nullptr, log_on_rank, &t, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(t.failures.load(), 0);
  const std::string jl = slurp(dir / "main" / "metrics.jsonl");
  EXPECT_EQ(std::count(jl.begin(), jl.end(), '\n'), 1) << jl;
  EXPECT_NE(jl.find("\"values\":{\"rank\":0.0}"), std::string::npos) << jl;
  EXPECT_FALSE(std::filesystem::exists(dir / "main" / "process-1"));
  TrackerRanks all;
  all.dir = (dir / "all").string();
  all.all_processes = 1;
  ASSERT_EQ(accel_sim_run(&so, nullptr, log_on_rank, &all, nullptr), ACCEL_OK) << accel_last_error(nullptr);
  EXPECT_EQ(all.failures.load(), 0);
  for (int r = 0; r < 3; ++r) {
    const std::string l = slurp(dir / "all" / ("process-" + std::to_string(r)) / "metrics.jsonl");
    EXPECT_NE(l.find("\"values\":{\"rank\":" + std::to_string(r) + ".0}"), std::string::npos) << r << ": " << l;
  }
  std::filesystem::remove_all(dir);
}
