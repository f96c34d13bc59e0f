// Causal language models, continued (test_lm.cpp has the parity with transformers, configs,
// the loss, gradient checkpointing, generation and LoRA): adapter files that lie, Adafactor
// against transformers' and under DDP / ZeRO, causal-LM data (token files, blocks, dynamic
// padding, length grouping), broken model directories, and the memory estimate against the
// simulator's per-rank peak.
#include <gtest/gtest.h>

#include "common.h"

namespace accel {
namespace {

using namespace lm_test;  // NOLINT(google-build-using-namespace)

TEST(LoRAErrors, AdapterFilesThatLie) {
  TempDir tmp;
  auto copy = [&](const std::string& to) {
    fs::copy(fixture("llama-tiny-lora"), tmp.path() / to, fs::copy_options::recursive);
    return (tmp.path() / to).string();
  };
  auto edit_config = [&](const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
    const std::string p = dir + "/adapter_config.json";
    std::ifstream in(p);
    nlohmann::json j = nlohmann::json::parse(in);
    f(j);
    std::ofstream(p) << j.dump();
  };
  auto fresh = [] { return load_pretrained(fixture("llama-tiny")); };
  {  // fewer targets in the config than tensors in the file: an extra tensor
    const std::string d = copy("fewer");
    edit_config(d, [](nlohmann::json& j) { j["target_modules"] = {"q_proj"}; });
    auto m = fresh();
    expect_error([&] { load_adapter(*m, d); }, Status::Format, {"adapter_model.safetensors", "unexpected tensor", "lora_A.weight"});
    EXPECT_EQ(lora_config_of(*m), nullptr) << "a failed load leaves no adapters";
    EXPECT_EQ(m->parameters().size(), dynamic_cast<lm_detail::TransformerLM*>(m.get())->base_weights().size());
  }
  {  // another rank: shapes differ
    const std::string d = copy("rank");
    edit_config(d, [](nlohmann::json& j) { j["r"] = 8; });
    auto m = fresh();
    expect_error([&] { load_adapter(*m, d); }, Status::Format, {"shape", "r = 8"});
  }
  {  // more targets: a missing tensor
    const std::string d = copy("more");
    edit_config(d, [](nlohmann::json& j) { j["target_modules"] = "all-linear"; });
    auto m = fresh();
    load_adapter(*m, d);  // the fixture adapts every linear module: all-linear is the same set
    const std::string d2 = copy("missing");
    edit_config(d2, [](nlohmann::json& j) { j["target_modules"] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}; });
    auto m2 = fresh();
    expect_error([&] { load_adapter(*m2, d2); }, Status::InvalidArgument, {"lm_head", "matches no module"});
  }
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"use_dora", true}, {"bias", "all"}, {"modules_to_save", {"lm_head"}}, {"peft_type", "IA3"},
           {"rank_pattern", {{"q_proj", 2}}}}) {
    const std::string d = copy("u_" + field);
    edit_config(d, [&](nlohmann::json& j) { j[field] = value; });
    auto m = fresh();
    expect_error([&] { load_adapter(*m, d); }, Status::Unsupported, {field == "use_dora" ? "DoRA" : field});
  }
  auto m = fresh();
  expect_error([&] { load_adapter(*m, (tmp.path() / "none").string()); }, Status::IO, {"not a directory"});
  LoraConfig bad;
  bad.r = 0;
  expect_error([&] { add_lora(*m, bad, at::detail::createCPUGenerator(1)); }, Status::InvalidArgument, {"r must be"});
  bad.r = 2;
  bad.target_modules = {"c_attn"};
  expect_error([&] { add_lora(*m, bad, at::detail::createCPUGenerator(1)); }, Status::InvalidArgument,
               {"c_attn", "q_proj"});
  bad.target_modules = {};
  add_lora(*m, bad, at::detail::createCPUGenerator(1));
  EXPECT_EQ(m->parameters().size(), 8u);  // q_proj and v_proj of 2 layers, A and B each
  expect_error([&] { add_lora(*m, bad, at::detail::createCPUGenerator(1)); }, Status::InvalidArgument, {"already"});
}

// ---------------------------------------------------------------------------------------
// Adafactor against transformers' (tests/fixtures/lm/adafactor: 10 steps on llama-tiny with
// its reference gradients every step, three configurations)

TEST(Adafactor, MatchesTransformersOver10Steps) {
  auto ref = read_map(fixture("llama-tiny") + "/reference.safetensors");
  auto want = read_map(fixture("adafactor") + "/adafactor.safetensors");
  struct Cfg {
    std::string name;
    AdafactorConfig c;
  };
  AdafactorConfig relative, warmup, manual;
  warmup.warmup_init = true;
  manual.lr = 1e-2;
  manual.relative_step = false;
  manual.scale_parameter = false;
  manual.beta1 = 0.9;
  manual.weight_decay = 0.01;
  manual.clip_threshold = 0.5;
  manual.decay_rate = -0.6;
  for (const Cfg& k : {Cfg{"relative", relative}, Cfg{"warmup", warmup}, Cfg{"manual", manual}}) {
    std::shared_ptr<Model> model = load_pretrained(fixture("llama-tiny"));
    Optimizer opt(model, k.c);
    opt.bind();
    const auto& names = model->parameter_names();
    for (int step = 0; step < 10; ++step) {
      for (size_t i = 0; i < names.size(); ++i) model->parameters()[i].mutable_grad() = ref.at("grad." + names[i]).clone();
      opt.step();
    }
    double worst = 0;
    std::string where;
    size_t compared = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = want.find(k.name + "/10/" + names[i]);  // the fixture keeps layer 0 and the final norm
      if (it == want.end()) continue;
      ++compared;
      const double d = max_rel(model->parameters()[i].detach(), it->second);
      if (d > worst) {
        worst = d;
        where = names[i];
      }
    }
    // the state: rows + columns per matrix, the whole vector for a vector
    int64_t state = 0, weights = 0;
    const auto rows = opt.state("exp_avg_sq_row"), cols = opt.state("exp_avg_sq_col"), full = opt.state("exp_avg_sq");
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& p = model->parameters()[i];
      weights += p.numel();
      if (p.dim() == 2) {
        ASSERT_TRUE(rows[i].defined() && cols[i].defined() && !full[i].defined()) << names[i];
        EXPECT_EQ(rows[i].numel() + cols[i].numel(), p.size(0) + p.size(1));
        state += rows[i].numel() + cols[i].numel();
      } else {
        ASSERT_TRUE(full[i].defined() && !rows[i].defined()) << names[i];
        state += full[i].numel();
      }
    }
    std::printf("[ adafactor %s ] 10 steps: weights within %.3g of transformers' (worst %s of %zu); second-moment state %lld "
                "numbers for %lld weights\n", k.name.c_str(), worst, where.c_str(), compared, static_cast<long long>(state),
                static_cast<long long>(weights));
    EXPECT_EQ(compared, 10u) << "layer 0's 9 weights and the final norm";
    EXPECT_LT(worst, 1e-5) << k.name << " " << where;
  }
  AdafactorConfig bad;
  bad.lr = 1e-3;  // with relative_step
  expect_error([&] { validate(bad); }, Status::InvalidArgument, {"relative_step"});
  bad = AdafactorConfig{};
  bad.decay_rate = 0.5;
  expect_error([&] { validate(bad); }, Status::InvalidArgument, {"decay_rate"});
}

// Under DDP and ZeRO 1-3 on 2 simulated ranks, one process's trajectory (ZeRO all-reduces the
// row and column sums and the RMS sums of its chunks); a checkpoint resumes it exactly, and
// ZeRO's sharded checkpoint (the factors whole, written once) resumes under another strategy.
TEST(Adafactor, DDPZeROAndCheckpointResume) {
  auto ref = read_map(fixture("llama-tiny") + "/reference.safetensors");
  const auto ids = ref.at("input_ids"), mask = ref.at("attention_mask"), labels = ref.at("labels");
  AdafactorConfig c;
  c.beta1 = 0.9;
  c.weight_decay = 0.01;
  auto train = [&](Accelerator& acc, Model& model, int steps) {
    for (int s = 0; s < steps; ++s) {
      acc.backward(causal_lm_loss(acc.forward(model, {ids, mask}), labels));
      acc.step();
    }
  };
  // one process: 4 steps, save, 4 steps
  TempDir tmp;
  std::vector<torch::Tensor> straight;
  {
    Options o;
    o.device = DeviceKind::CPU;
    Accelerator acc(o);
    std::shared_ptr<Model> model = load_pretrained(fixture("llama-tiny"));
    auto opt = std::make_shared<Optimizer>(model, c);
    acc.prepare(model, opt, nullptr, nullptr);
    train(acc, *model, 4);
    acc.save_state((tmp.path() / "ckpt").string());
    train(acc, *model, 4);
    straight = acc.full_parameters(*model);
  }
  {
    Options o;
    o.device = DeviceKind::CPU;
    Accelerator acc(o);
    std::shared_ptr<Model> model = load_pretrained(fixture("llama-tiny"));
    auto opt = std::make_shared<Optimizer>(model, c);
    acc.prepare(model, opt, nullptr, nullptr);
    acc.load_state((tmp.path() / "ckpt").string());
    train(acc, *model, 4);
    auto resumed = acc.full_parameters(*model);
    for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(torch::equal(resumed[i], straight[i])) << i;
  }
  // 8 steps on 2 ranks (ZeRO-2 saving at 4), then resumes of ZeRO-2's checkpoint
  auto run = [&](Strategy s, const std::string& save, const std::string& load, int steps) {
    std::vector<torch::Tensor> after;
    auto rep = on_ranks(2, s, 1, [&](Accelerator& acc, sim::Rank& rk) {
      std::shared_ptr<Model> model = load_pretrained(fixture("llama-tiny"));
      auto opt = std::make_shared<Optimizer>(model, c);
      acc.prepare(model, opt, nullptr, nullptr);
      if (!load.empty()) acc.load_state(load);
      int left = steps;  // per rank (the ranks share this lambda's captures)
      if (!save.empty()) {
        train(acc, *model, 4);
        acc.save_state(save);
        left -= 4;
      }
      train(acc, *model, left);
      auto full = acc.full_parameters(*model);
      if (rk.rank() == 0) after = full;
    });
    EXPECT_TRUE(rep.ok()) << strategy_name(s) << ": " << rep.first_error();
    return after;
  };
  auto worst_vs = [&](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
    double worst = 0;
    EXPECT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, max_rel(a[i], b[i]));
    return worst;
  };
  const std::string zckpt = (tmp.path() / "zero2").string();
  std::map<std::string, std::vector<torch::Tensor>> runs;
  runs["DDP"] = run(Strategy::DDP, "", "", 8);
  runs["ZeRO-1"] = run(Strategy::Zero1, "", "", 8);
  runs["ZeRO-2"] = run(Strategy::Zero2, zckpt, "", 8);
  runs["ZeRO-3"] = run(Strategy::Zero3, "", "", 8);
  for (const auto& [name, after] : runs) {
    const double w = worst_vs(after, straight);
    std::printf("[ adafactor ] %s on 2 ranks: 8 steps within %.3g of one process's\n", name.c_str(), w);
    EXPECT_LT(w, 1e-5) << name;
  }
  // ZeRO-2's sharded checkpoint: the same strategy resumes bit for bit, DDP and ZeRO-3 resume it
  const auto same = run(Strategy::Zero2, "", zckpt, 4);
  for (size_t i = 0; i < same.size(); ++i) EXPECT_TRUE(torch::equal(same[i], runs["ZeRO-2"][i])) << i;
  for (Strategy s : {Strategy::DDP, Strategy::Zero3}) {
    const double w = worst_vs(run(s, "", zckpt, 4), straight);
    std::printf("[ adafactor ] ZeRO-2's checkpoint resumed under %s: within %.3g of one process's\n", strategy_name(s), w);
    EXPECT_LT(w, 1e-5) << strategy_name(s);
  }
}

// ---------------------------------------------------------------------------------------
// Causal-LM data

TEST(LMData, TokenFileRoundTripAndErrors) {
  TempDir tmp;
  auto toks = torch::tensor({0, 1, 65535, 42, 7}, torch::kLong);
  for (int width : {2, 4}) {
    const std::string path = tmp.path().string() + "/t" + std::to_string(width) + ".tok";
    write_token_file(path, toks, width);
    EXPECT_EQ(fs::file_size(path), 24u + 5u * static_cast<unsigned>(width));
    EXPECT_TRUE(torch::equal(read_token_file(path), toks));
    write_token_file(path, toks.narrow(0, 0, 2), width);  // an earlier token file is replaced
    EXPECT_EQ(read_token_file(path).numel(), 2);
  }
  const std::string p4 = tmp.path().string() + "/big.tok";
  write_token_file(p4, torch::tensor({int64_t{1} << 20}, torch::kLong), 4);
  EXPECT_EQ(read_token_file(p4).item<int64_t>(), int64_t{1} << 20);
  expect_error([&] { write_token_file(tmp.path().string() + "/x.tok", torch::tensor({70000}, torch::kLong), 2); },
               Status::InvalidArgument, {"70000", "2 bytes"});
  expect_error([&] { write_token_file(tmp.path().string() + "/x.tok", toks, 3); }, Status::InvalidArgument, {"token_bytes"});
  // never replaces another kind of file
  const std::string notes = tmp.path().string() + "/notes.txt";
  std::ofstream(notes) << "mine";
  expect_error([&] { write_token_file(notes, toks, 2); }, Status::InvalidArgument, {"not a token file"});
  std::ifstream in(notes);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "mine");
  // a truncated file, another kind of file, a missing one
  const std::string p2 = tmp.path().string() + "/t2.tok";
  write_token_file(p2, toks, 2);
  fs::resize_file(p2, fs::file_size(p2) - 1);
  expect_error([&] { read_token_file(p2); }, Status::Format, {"t2.tok", "truncated"});
  expect_error([&] { read_token_file(notes); }, Status::Format, {"not a token file"});
  expect_error([&] { read_token_file(tmp.path().string() + "/none.tok"); }, Status::IO, {"none.tok"});
}

TEST(LMData, BlocksAndDynamicPadding) {
  auto toks = torch::arange(1, 11, torch::kLong);  // 1..10
  // blocks of 4: [1..4], [5..8]; the rest dropped
  LMDataConfig bc;
  bc.block_size = 4;
  auto blocks = make_lm_source(toks, {}, bc);
  ASSERT_EQ(blocks->size(), 2);
  auto [bi, bl] = blocks->collate({1, 0});
  EXPECT_TRUE(torch::equal(bi, torch::tensor({{5, 6, 7, 8}, {1, 2, 3, 4}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(bl, bi));
  // sequences [1,2,3], [], [4..9], [10]: the empty one skipped; max_length 5 cuts the second
  LMDataConfig sc;
  sc.max_length = 5;
  sc.pad_id = 0;
  auto seqs = make_lm_source(toks, torch::tensor({0, 3, 3, 9, 10}, torch::kLong), sc);
  ASSERT_EQ(seqs->size(), 3);
  EXPECT_EQ(seqs->length(1), 5);
  auto [ids, labels] = seqs->collate({0, 2});
  EXPECT_TRUE(torch::equal(ids, torch::tensor({{1, 2, 3}, {10, 0, 0}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(labels, torch::tensor({{1, 2, 3}, {10, -100, -100}}, torch::kLong)));
  sc.pad_to_multiple_of = 8;
  sc.pad_id = 3;
  auto [ids8, labels8] = make_lm_source(toks, torch::tensor({0, 3, 3, 9, 10}, torch::kLong), sc)->collate({0, 1});
  EXPECT_EQ(ids8.sizes(), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(ids8[0][5].item<int64_t>(), 3);
  EXPECT_EQ(labels8[1][5].item<int64_t>(), -100);
  EXPECT_EQ(labels8[1][4].item<int64_t>(), 8);
  expect_error([&] { make_lm_source(toks, torch::tensor({0, 5, 4, 10}, torch::kLong), LMDataConfig{}); },
               Status::InvalidArgument, {"must not decrease", "offsets[2] = 4"});
  expect_error([&] { make_lm_source(toks, torch::tensor({0, 5, 9}, torch::kLong), LMDataConfig{}); },
               Status::InvalidArgument, {"end at the 10 tokens"});
  expect_error([&] { make_lm_source(toks, {}, LMDataConfig{}); }, Status::InvalidArgument, {"block_size"});
  bc.block_size = 11;
  expect_error([&] { make_lm_source(toks, {}, bc); }, Status::InvalidArgument, {"no block of 11"});
}

// Length-grouped sampling follows transformers' get_length_grouped_indices: megabatches of
// min(N / (4 x global batch), 50) global batches, each sorted longest first, the longest of
// all first; every sample once.
TEST(LMData, GroupByLength) {
  const int64_t N = 200, B = 4;
  std::vector<int64_t> offs{0};
  auto g = at::detail::createCPUGenerator(5);
  auto lens = torch::randint(1, 60, {N}, g);
  for (int64_t i = 0; i < N; ++i) offs.push_back(offs.back() + lens[i].item<int64_t>());
  auto toks = torch::ones({offs.back()}, torch::kLong);
  LMDataConfig lc;
  auto src = make_lm_source(toks, torch::tensor(offs, torch::kLong), lc);
  DataLoaderConfig dc;
  dc.batch_size = B;
  dc.shuffle = true;
  dc.seed = 3;
  dc.group_by_length = true;
  DataLoader dl(src, dc);
  std::vector<int64_t> seen;
  int64_t first_len = -1;
  while (auto b = dl.next(torch::kCPU)) {
    auto l = b->targets.ne(-100).sum(1);
    for (int64_t r = 0; r < l.size(0); ++r) seen.push_back(l[r].item<int64_t>());
    if (first_len < 0) first_len = l.max().item<int64_t>();
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), N);
  EXPECT_EQ(first_len, lens.max().item<int64_t>()) << "the longest sample comes first";
  // megabatches of min(200 / 16, 50) = 12 batches = 48 samples: sorted within, but for the
  // swapped first element
  const size_t mega = 48;
  for (size_t s = 0; s < seen.size(); s += mega)
    for (size_t i = s + 2; i < std::min(seen.size(), s + mega); ++i) EXPECT_GE(seen[i - 1], seen[i]) << i;
}

// What dynamic padding saves against padding every batch to the longest sequence of the data,
// on a skewed (log-normal) length distribution: the tokens computed, and one epoch's training
// time of a small Llama. Length grouping saves more.
TEST(LMData, DynamicPaddingSavesCompute) {
  // one intra-op thread: meson runs two test programs at once on this 2-core machine, and
  // libtorch 2.x's OpenMP threads spin-wait, so two programs of 2 threads each slow one
  // another down by 3-10x, shape-dependently (the timings would measure the contention)
  struct OneThread {
    int before = at::get_num_threads();
    OneThread() { at::set_num_threads(1); }
    ~OneThread() { at::set_num_threads(before); }
  } one_thread;
  const int64_t N = 96, B = 8, maxlen = 256;
  auto g = at::detail::createCPUGenerator(11);
  auto lens = torch::empty({N}).log_normal_(3.2, 0.8, g).round().clamp(4, maxlen).to(torch::kLong);
  std::vector<int64_t> offs{0};
  for (int64_t i = 0; i < N; ++i) offs.push_back(offs.back() + lens[i].item<int64_t>());
  auto toks = torch::randint(0, 256, {offs.back()}, g);
  LMConfig cfg = parse_lm_config(R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 512})", "config");
  struct Run {
    const char* what;
    int64_t pad_to, multiple;
    bool group;
  };
  std::printf("  %-34s %10s %10s %9s %10s (1 thread)\n", "padding", "tokens", "real", "useful", "epoch ms");
  double t_max = 0, t_dyn = 0;
  int64_t tok_max = 0, tok_dyn = 0;
  for (const Run& r : {Run{"to the longest of the data (256)", maxlen, 0, false}, Run{"dynamic", 0, 0, false},
                       Run{"dynamic, multiple of 8", 0, 8, false}, Run{"dynamic, grouped by length", 0, 0, true}}) {
    LMDataConfig lc;
    lc.pad_to_multiple_of = r.pad_to ? r.pad_to : r.multiple;
    DataLoaderConfig dc;
    dc.batch_size = B;
    dc.shuffle = true;
    dc.seed = 1;
    dc.group_by_length = r.group;
    DataLoader dl(make_lm_source(toks, torch::tensor(offs, torch::kLong), lc), dc);
    auto model = make_causal_lm(cfg, at::detail::createCPUGenerator(2));
    int64_t total = 0, real = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (auto b = dl.next(torch::kCPU)) {
      total += b->inputs.numel();
      real += b->targets.ne(-100).sum().item<int64_t>();
      causal_lm_loss(model->forward({b->inputs}, ForwardMode{}), b->targets).backward();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %-34s %10lld %10lld %8.1f%% %10.1f\n", r.what, static_cast<long long>(total),
                static_cast<long long>(real), 100.0 * real / total, ms);
    EXPECT_EQ(real, offs.back());
    if (r.pad_to) {
      t_max = ms;
      tok_max = total;
    } else if (!r.group && !r.multiple) {
      t_dyn = ms;
      tok_dyn = total;
    }
  }
  std::printf("  dynamic padding computes %.1f%% of the tokens and takes %.1f%% of the time of padding to 256\n",
              100.0 * tok_dyn / tok_max, 100.0 * t_dyn / t_max);
  EXPECT_LT(tok_dyn * 2, tok_max);
  EXPECT_LT(t_dyn, t_max);
}

TEST(LMErrors, MissingTensor) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny");
  auto ts = read_st(dir + "/model.safetensors");
  ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& p) { return p.first == "model.layers.1.mlp.up_proj.weight"; }),
           ts.end());
  write_st(dir + "/model.safetensors", ts);
  expect_error([&] { load_pretrained(dir); }, Status::Format,
               {"missing tensor 'model.layers.1.mlp.up_proj.weight'", "model.safetensors"});
}

TEST(LMErrors, ExtraTensor) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("gpt2-tiny");
  auto ts = read_st(dir + "/model.safetensors");
  ts.emplace_back("transformer.h.2.ln_1.weight", torch::ones({32}));
  write_st(dir + "/model.safetensors", ts);
  expect_error([&] { load_pretrained(dir); }, Status::Format,
               {"unexpected tensor 'transformer.h.2.ln_1.weight'", "model.safetensors"});
}

TEST(LMErrors, WrongShape) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny");
  auto ts = read_st(dir + "/model.safetensors");
  for (auto& [n, t] : ts)
    if (n == "model.layers.0.self_attn.k_proj.weight") t = torch::zeros({32, 32});  // as if no GQA
  write_st(dir + "/model.safetensors", ts);
  expect_error([&] { load_pretrained(dir); }, Status::Format,
               {"'model.layers.0.self_attn.k_proj.weight'", "[32, 32]", "[16, 32]", "model.safetensors"});
}

TEST(LMErrors, WrongDtype) {
  for (auto dt : {torch::kHalf, torch::kInt}) {
    TempDir tmp;
    const std::string dir = tmp.copy_of("gpt2-tiny");
    auto ts = read_st(dir + "/model.safetensors");
    for (auto& [n, t] : ts)
      if (n == "transformer.h.1.mlp.c_fc.bias") t = t.to(dt);
    write_st(dir + "/model.safetensors", ts);
    expect_error([&] { load_pretrained(dir); }, Status::Format,
                 {"'transformer.h.1.mlp.c_fc.bias'", dt == torch::kHalf ? "F16" : "I32", "model.safetensors"});
  }
}

TEST(LMErrors, TruncatedShard) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny-sharded");
  const std::string shard = dir + "/model-00002-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  expect_error([&] { load_pretrained(dir); }, Status::Format, {"model-00002-of-00003.safetensors"});
  // a shard that the index lists and that is gone
  fs::remove(shard);
  expect_error([&] { load_pretrained(dir); }, Status::IO, {"model-00002-of-00003.safetensors"});
}

TEST(LMErrors, ShardMissesATensorTheIndexLists) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny-sharded");
  const std::string shard = dir + "/model-00003-of-00003.safetensors";
  auto ts = read_st(shard);
  ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& p) { return p.first == "model.norm.weight"; }), ts.end());
  write_st(shard, ts);
  expect_error([&] { load_pretrained(dir); }, Status::Format,
               {"missing tensor 'model.norm.weight'", "model-00003-of-00003.safetensors"});
}

TEST(LMErrors, UnsupportedModelType) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny");
  json j = json::parse(safetensors::read_file(dir + "/config.json"));
  j["model_type"] = "falcon";
  safetensors::write_file_atomic(dir + "/config.json", j.dump());
  expect_error([&] { load_pretrained(dir); }, Status::Unsupported,
               {"'falcon'", "gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "config.json"});
}

// The families' own fields: sliding layers that disagree with the config, attention types
// accel lacks, partial rotary embeddings (Phi-4-mini's), and LoRA on Phi-3 without targets
// (PEFT has no default for it).
TEST(LMErrors, FamilyFields) {
  const json base = json::parse(safetensors::read_file(fixture("qwen2-tiny") + "/config.json"));
  auto refused = [&](const std::function<void(json&)>& edit, Status st, std::vector<std::string> words) {
    json j = base;
    edit(j);
    expect_error([&] { parse_lm_config(j.dump(), "qwen2/config.json"); }, st, std::move(words));
  };
  refused([](json& j) { j["layer_types"] = {"full_attention"}; }, Status::Format,
          {"qwen2/config.json", "'layer_types'", "one type per layer (2)"});
  refused([](json& j) { j["layer_types"] = {"full_attention", "chunked_attention"}; }, Status::Unsupported,
          {"layer_types[1]", "chunked_attention", "sliding_attention"});
  refused([](json& j) { j["sliding_window"] = nullptr; }, Status::Format, {"sliding_attention", "'sliding_window'"});
  refused([](json& j) { j["model_type"] = "phi3"; j["partial_rotary_factor"] = 0.75; }, Status::Unsupported,
          {"'partial_rotary_factor' 0.75"});
  // what each family reads: Qwen2 has q/k/v biases and no o_proj bias; its sliding layer
  const LMConfig q = parse_lm_config(base.dump(), "qwen2");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  EXPECT_EQ(q.sliding_window, 4);
  EXPECT_EQ(q.sliding_layers, (std::vector<uint8_t>{0, 1}));
  // an older Qwen2 config (no layer_types): the layers from max_window_layers on, when used
  json old = base;
  old.erase("layer_types");
  old["num_hidden_layers"] = 4;
  old["max_window_layers"] = 3;
  EXPECT_EQ(parse_lm_config(old.dump(), "qwen2").sliding_layers, (std::vector<uint8_t>{0, 0, 0, 1}));
  old["use_sliding_window"] = false;
  EXPECT_EQ(parse_lm_config(old.dump(), "qwen2").sliding_window, 0);
  // Qwen3's head_dim defaults to 128, not hidden / heads
  json q3 = json::parse(safetensors::read_file(fixture("qwen3-tiny") + "/config.json"));
  q3.erase("head_dim");
  EXPECT_EQ(parse_lm_config(q3.dump(), "qwen3").head_dim, 128);
  // Phi-3 reads "su" and "yarn" as longrope, as Phi3Config does
  json p3 = json::parse(safetensors::read_file(fixture("phi3-tiny") + "/config.json"));
  p3["rope_scaling"] = {{"type", "su"}, {"short_factor", {1.0, 1.0, 1.0, 1.0}}, {"long_factor", {1.0, 2.0, 4.0, 8.0}}};
  EXPECT_EQ(parse_lm_config(p3.dump(), "phi3").rope.type, "longrope");
  auto phi3 = load_pretrained(fixture("phi3-tiny"));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  expect_error([&] { add_lora(*phi3, LoraConfig{}, gen); }, Status::InvalidArgument,
               {"no default", "'phi3'", "qkv_proj", "gate_up_proj"});
}

// RoPE types transformers has and accel lacks, and the parameters each type needs.
TEST(LMErrors, UnsupportedOrIncompleteRopeScaling) {
  const json base = json::parse(safetensors::read_file(fixture("llama-tiny") + "/config.json"));
  json j = base;
  j["rope_parameters"]["rope_type"] = "proportional";
  expect_error([&] { parse_lm_config(j.dump(), "config.json"); }, Status::Unsupported,
               {"'proportional'", "\"llama3\"", "\"yarn\"", "rope_parameters"});
  j = base;
  j["rope_scaling"] = {{"type", "su"}, {"factor", 2.0}};  // rope_scaling wins over rope_parameters
  expect_error([&] { parse_lm_config(j.dump(), "config.json"); }, Status::Unsupported, {"'su'", "rope_scaling"});
  j = base;
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}};
  expect_error([&] { parse_lm_config(j.dump(), "config.json"); }, Status::Format,
               {"'llama3'", "'low_freq_factor'", "missing"});
  j = base;
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", -2.0}};
  expect_error([&] { parse_lm_config(j.dump(), "config.json"); }, Status::Format, {"'linear'", "positive 'factor'"});
  j = base;
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {1.0, 1.0, 1.0, 1.0}}};
  expect_error([&] { parse_lm_config(j.dump(), "config.json"); }, Status::Format, {"head_dim / 2 = 4", "got 2"});
  j = base;
  j["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  expect_error([&] { parse_lm_config(j.dump(), "config.json"); }, Status::Unsupported, {"'partial_rotary_factor' 0.5"});
}

// transformers 4's spelling (rope_scaling with "type", a top-level rope_theta) reads as 5's,
// and a save keeps every parameter as read (both spellings written).
TEST(LM, RopeScalingReadAndKept) {
  json j = json::parse(safetensors::read_file(fixture("llama-tiny") + "/config.json"));
  j.erase("rope_parameters");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const LMConfig c = parse_lm_config(j.dump(), "config.json");
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  const json out = lm_config_json(c);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    EXPECT_EQ(out.at(key).at("rope_type"), "llama3") << key;
    EXPECT_EQ(out.at(key).at("type"), "llama3") << key;  // as read
    EXPECT_EQ(out.at(key).at("factor"), 8.0) << key;
    EXPECT_EQ(out.at(key).at("low_freq_factor"), 1.0) << key;
    EXPECT_EQ(out.at(key).at("original_max_position_embeddings"), 8192) << key;
    EXPECT_EQ(out.at(key).at("rope_theta"), 500000.0) << key;
  }
  const LMConfig again = parse_lm_config(out.dump(), "saved config.json");
  EXPECT_EQ(again.rope.type, "llama3");
  EXPECT_EQ(again.rope.high_freq_factor, 4.0);
  // Phi-3 keeps original_max_position_embeddings at the top level, which transformers prefers
  j["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(parse_lm_config(j.dump(), "config.json").rope.original_max_position_embeddings, 4096);
}

TEST(LMErrors, MissingOrBadConfigField) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny");
  json j = json::parse(safetensors::read_file(dir + "/config.json"));
  j.erase("hidden_size");
  safetensors::write_file_atomic(dir + "/config.json", j.dump());
  expect_error([&] { load_pretrained(dir); }, Status::Format, {"'hidden_size'", "missing", "config.json"});
  json g = json::parse(safetensors::read_file(fixture("gpt2-tiny") + "/config.json"));
  g.erase("n_embd");
  expect_error([&] { parse_lm_config(g.dump(), "gpt2/config.json"); }, Status::Format, {"'n_embd'", "gpt2/config.json"});
  g = json::parse(safetensors::read_file(fixture("gpt2-tiny") + "/config.json"));
  g["n_head"] = "four";
  expect_error([&] { parse_lm_config(g.dump(), "config.json"); }, Status::Format, {"'n_head'", "integer"});
  g = json::parse(safetensors::read_file(fixture("gpt2-tiny") + "/config.json"));
  g.erase("model_type");
  expect_error([&] { parse_lm_config(g.dump(), "config.json"); }, Status::Format, {"'model_type'"});
  g = json::parse(safetensors::read_file(fixture("gpt2-tiny") + "/config.json"));
  g["activation_function"] = "quick_gelu";
  expect_error([&] { parse_lm_config(g.dump(), "config.json"); }, Status::Unsupported, {"quick_gelu"});
  expect_error([&] { parse_lm_config("{not json", "config.json"); }, Status::Format, {"config.json"});
}

TEST(LMErrors, TiedHeadPresentMustEqualTheEmbedding) {
  TempDir tmp;
  const std::string dir = tmp.copy_of("llama-tiny-tied");
  auto ts = read_st(dir + "/model.safetensors");
  torch::Tensor emb;
  for (auto& [n, t] : ts)
    if (n == "model.embed_tokens.weight") emb = t;
  ts.emplace_back("lm_head.weight", emb.clone());
  write_st(dir + "/model.safetensors", ts);
  auto m = load_pretrained(dir);  // present and equal: fine
  EXPECT_EQ(m->parameter_names().back(), "model.norm.weight");
  ts.back().second = emb + 1;
  write_st(dir + "/model.safetensors", ts);
  expect_error([&] { load_pretrained(dir); }, Status::Format, {"'lm_head.weight'", "tie_word_embeddings"});
}

TEST(LM, LoadsGPT2HubNames) {
  // the original gpt2 checkpoints: bare names (h.0..., wte) and causal-mask buffers
  TempDir tmp;
  const std::string dir = tmp.copy_of("gpt2-tiny");
  auto ts = read_st(dir + "/model.safetensors");
  for (auto& [n, t] : ts) n = n.substr(std::string("transformer.").size());
  ts.emplace_back("h.0.attn.bias", torch::ones({1, 1, 64, 64}));
  write_st(dir + "/model.safetensors", ts);
  auto a = load_pretrained(dir), b = load_pretrained(fixture("gpt2-tiny"));
  for (size_t i = 0; i < a->parameters().size(); ++i) EXPECT_TRUE(torch::equal(a->parameters()[i], b->parameters()[i]));
}

TEST(LMErrors, SaveRefusesWhatItDidNotWrite) {
  TempDir tmp;
  auto model = load_pretrained(fixture("gpt2-tiny"));
  // a fixture directory holds other files (reference.safetensors, manifest.json)
  const std::string dir = tmp.copy_of("gpt2-tiny");
  expect_error([&] { save_pretrained(*model, {}, dir); }, Status::InvalidArgument, {dir, "refusing"});
  EXPECT_TRUE(fs::exists(dir + "/reference.safetensors"));
  const std::string file = (tmp.path() / "notes.txt").string();
  std::ofstream(file) << "mine";
  expect_error([&] { save_pretrained(*model, {}, file); }, Status::InvalidArgument, {"notes.txt", "refusing"});
  // an empty directory is fine; the weights given are saved (bf16 here), config says so
  fs::create_directory(tmp.path() / "empty");
  std::vector<torch::Tensor> w;
  for (const auto& p : model->parameters()) w.push_back(p.detach().to(torch::kBFloat16));
  save_pretrained(*model, w, (tmp.path() / "empty").string());
  const LMConfig c = read_lm_config((tmp.path() / "empty/config.json").string());
  EXPECT_EQ(c.dtype, "bfloat16");
  auto bf = load_pretrained((tmp.path() / "empty").string(), torch::kBFloat16);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(torch::equal(bf->parameters()[i], w[i]));
  expect_error([&] { save_pretrained(*model, {w[0]}, (tmp.path() / "x").string()); }, Status::InvalidArgument,
               {"1 weights"});
}


// ---------------------------------------------------------------------------------------
// Memory: the simulator's per-rank peak of training steps

struct MemCase {
  std::string name;
  std::string config;  // config.json text
  Strategy strategy = Strategy::DDP;
  int world = 2;
  Precision precision = Precision::No;
  bool bf16_weights = false;
  std::string optimizer = "adamw";
  int64_t batch = 4, seq = 64;
  bool ckpt = false;
  int64_t lora = 0;
  std::vector<std::string> lora_targets;  // empty: PEFT's default
  int offload = 0;                        // Offload: 1 optimizer, 2 parameters (docs/memory.md)
  QuantType quant = QuantType::None;      // the base quantized before LoRA is added
  bool double_quant = false;
  bool steps_only = false;                // the peaks of the steps, from the end of prepare
};

struct MemPhases {
  uint64_t prepared = 0, forward = 0, backward = 0, stepped = 0, peak = 0, peak_fwd = 0;
  uint64_t host_peak = 0, transfer = 0;  // host memory; bytes between device and host over the steps
  std::vector<torch::Tensor> params;     // rank 0's after the steps, whole (steps_only cases)
};

MemPhases measure_memory(const MemCase& c) {
  const LMConfig cfg = parse_lm_config(c.config, c.name);
  std::vector<MemPhases> ph(static_cast<size_t>(c.world));
  sim::WorldOptions wo;
  wo.world_size = c.world;
  wo.timeout_seconds = 60;
  sim::World w(wo);
  auto rep = w.run([&](sim::Rank& rk) {
    Options o;
    o.seed = 1;
    o.device = DeviceKind::CPU;
    o.strategy = c.strategy;
    o.precision = c.precision;
    o.offload = static_cast<Offload>(c.offload);
    std::shared_ptr<comm::Communicator> cm(&rk.comm(), [](comm::Communicator*) {});
    Accelerator acc(o, cm);
    auto& budget = *rk.world().budget();
    const int r = rk.rank();
    std::shared_ptr<Model> model = make_causal_lm(cfg, at::detail::createCPUGenerator(5),
                                                  c.bf16_weights ? torch::kBFloat16 : torch::kFloat);
    set_gradient_checkpointing(*model, c.ckpt);
    if (c.quant != QuantType::None) quantize_base(*model, c.quant, c.double_quant);
    if (c.lora > 0) {
      LoraConfig lc;
      lc.r = c.lora;
      if (!c.lora_targets.empty()) lc.target_modules = c.lora_targets;
      add_lora(*model, lc, at::detail::createCPUGenerator(6));
    }

    std::shared_ptr<Optimizer> opt;
    if (c.optimizer == "adamw") opt = std::make_shared<Optimizer>(model, AdamWConfig{});
    else if (c.optimizer == "sgd") opt = std::make_shared<Optimizer>(model, SGDConfig{});
    else if (c.optimizer == "momentum") { SGDConfig sc; sc.momentum = 0.9; opt = std::make_shared<Optimizer>(model, sc); }
    else opt = std::make_shared<Optimizer>(model, AdafactorConfig{});
    acc.prepare(model, opt, nullptr, nullptr);
    if (c.steps_only) {
      // the load's peak (the float32 model before quantize_base or ZeRO's sharding; docs/
      // memory.md, "Loading") is not the steps': every rank prepares, then the peaks restart
      rk.comm().barrier();
      if (r == 0) budget.reset_peaks();
      rk.comm().barrier();
    }
    MemPhases& m = ph[static_cast<size_t>(r)];
    m.prepared = budget.current(r);
    auto ids = torch::randint(0, cfg.vocab_size, {c.batch, c.seq}, at::detail::createCPUGenerator(7));
    for (int step = 0; step < 2; ++step) {
      auto [sum, n] = causal_lm_loss_sum(acc.forward(*model, {ids}), ids);
      m.forward = budget.current(r);
      m.peak_fwd = std::max<uint64_t>(m.peak_fwd, budget.peak(r));
      acc.backward(sum / static_cast<double>(n), n);
      m.backward = budget.current(r);
      acc.step();
      m.stepped = budget.current(r);
    }
    m.peak = budget.peak(r);
    m.host_peak = budget.host_peak(r);
    if (c.steps_only) m.params = acc.full_parameters(*model);  // a collective: every rank
  });
  EXPECT_TRUE(rep.ok()) << c.name << ": " << rep.first_error();
  for (const auto& rr : rep.ranks) ph[static_cast<size_t>(rr.rank)].transfer = rr.host_transfer_bytes;
  MemPhases worst;
  for (const auto& p : ph)
    if (p.peak >= worst.peak) worst = p;
  return worst;
}

const char* kLlamaTiny = R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 176, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 1024})";
const char* kLlamaWide = R"({"model_type": "llama", "vocab_size": 512, "hidden_size": 256,
    "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
    "max_position_embeddings": 1024, "tie_word_embeddings": true})";
const char* kGPT2Tiny = R"({"model_type": "gpt2", "vocab_size": 300, "n_embd": 96, "n_layer": 3, "n_head": 4,
    "n_positions": 512})";

std::vector<MemCase> memory_grid() {
  std::vector<MemCase> g;
  auto add = [&](std::string name, const char* cfg, auto&& f) {
    MemCase c;
    c.name = std::move(name);
    c.config = cfg;
    f(c);
    g.push_back(c);
  };
  add("llama ddp fp32", kLlamaTiny, [](MemCase&) {});
  add("llama zero1", kLlamaTiny, [](MemCase& c) { c.strategy = Strategy::Zero1; });
  add("llama zero2", kLlamaTiny, [](MemCase& c) { c.strategy = Strategy::Zero2; });
  add("llama zero3 x4", kLlamaTiny, [](MemCase& c) { c.strategy = Strategy::Zero3; c.world = 4; });
  add("llama bf16 mixed", kLlamaTiny, [](MemCase& c) { c.precision = Precision::BF16; });
  add("llama bf16 weights", kLlamaTiny, [](MemCase& c) { c.bf16_weights = true; });
  add("llama ckpt T256", kLlamaTiny, [](MemCase& c) { c.ckpt = true; c.seq = 256; });
  add("llama T256", kLlamaTiny, [](MemCase& c) { c.seq = 256; });
  add("llama lora8", kLlamaTiny, [](MemCase& c) { c.lora = 8; });
  add("llama sgd zero3", kLlamaTiny, [](MemCase& c) { c.optimizer = "sgd"; c.strategy = Strategy::Zero3; });
  add("llama adafactor", kLlamaTiny, [](MemCase& c) { c.optimizer = "adafactor"; });
  add("llama adafactor zero2", kLlamaTiny, [](MemCase& c) { c.optimizer = "adafactor"; c.strategy = Strategy::Zero2; });
  add("wide adafactor zero3", kLlamaWide, [](MemCase& c) {
    c.optimizer = "adafactor";
    c.strategy = Strategy::Zero3;
    c.batch = 1;
    c.seq = 32;
  });
  add("wide ddp b1", kLlamaWide, [](MemCase& c) { c.batch = 1; c.seq = 32; });
  add("wide zero3 b1", kLlamaWide, [](MemCase& c) { c.batch = 1; c.seq = 32; c.strategy = Strategy::Zero3; });
  add("wide zero2 bf16", kLlamaWide, [](MemCase& c) { c.batch = 2; c.seq = 64; c.strategy = Strategy::Zero2; c.precision = Precision::BF16; });
  add("gpt2 ddp", kGPT2Tiny, [](MemCase&) {});
  add("gpt2 zero2 bf16", kGPT2Tiny, [](MemCase& c) { c.strategy = Strategy::Zero2; c.precision = Precision::BF16; });
  add("gpt2 momentum ckpt", kGPT2Tiny, [](MemCase& c) { c.optimizer = "momentum"; c.ckpt = true; c.seq = 128; });
  return g;
}

int strategy_code(Strategy s) {
  switch (s) {
    case Strategy::DDP: return 1;
    case Strategy::Zero1: return 2;
    case Strategy::Zero2: return 3;
    case Strategy::Zero3: return 4;
    default: return 0;
  }
}

MemoryEstimateConfig estimate_config(const MemCase& c) {
  MemoryEstimateConfig e;
  e.precision = c.precision == Precision::BF16 ? 1 : c.precision == Precision::FP16 ? 2 : 0;
  e.bf16_weights = c.bf16_weights;
  e.optimizer = c.optimizer == "adamw"      ? EstimateOptimizer::AdamW
                : c.optimizer == "sgd"      ? EstimateOptimizer::SGD
                : c.optimizer == "momentum" ? EstimateOptimizer::Momentum
                                            : EstimateOptimizer::Adafactor;
  e.strategy = strategy_code(c.strategy);
  e.world_size = c.world;
  e.micro_batch = c.batch;
  e.seq_len = c.seq;
  e.gradient_checkpointing = c.ckpt;
  e.lora_rank = c.lora;
  e.lora_targets = c.lora_targets;
  e.offload = c.offload;
  e.quantization = static_cast<int>(c.quant);
  e.double_quant = c.double_quant;
  return e;
}

// The estimate (accel estimate-memory) against the simulator's per-rank peak of two training
// steps (forward, backward, optimizer step) over a grid of tiny configurations: two families,
// every strategy, fp32, bf16 autocast and bf16 weights, four optimizers, checkpointing, LoRA,
// short and long sequences, activation-bound and state-bound shapes. Within 10% each.
TEST(MemoryEstimate, WithinTenPercentOfTheSimulator) {
  std::printf("  %-20s %12s %12s %8s  (per-rank peak, KiB; attention %s)\n", "case", "simulator", "estimate", "error",
              estimate_memory(parse_lm_config(kLlamaTiny, "c"), MemoryEstimateConfig{}).fused_attention ? "fused" : "eager");
  double worst = 0, sum = 0;
  const auto grid = memory_grid();
  ASSERT_GE(grid.size(), 12u);
  for (const auto& c : grid) {
    const MemPhases m = measure_memory(c);
    const MemoryEstimate e = estimate_memory(parse_lm_config(c.config, c.name), estimate_config(c));
    const double err = (e.total - static_cast<double>(m.peak)) / static_cast<double>(m.peak);
    std::printf("  %-20s %12.1f %12.1f %+7.1f%%\n", c.name.c_str(), m.peak / 1024.0, e.total / 1024.0, 100 * err);
    EXPECT_LT(std::fabs(err), 0.10) << c.name << ": measured " << m.peak << " B, estimated " << e.total << " B";
    worst = std::max(worst, std::fabs(err));
    sum += std::fabs(err);
  }
  std::printf("  %zu configurations: mean |error| %.1f%%, worst %.1f%%\n", grid.size(), 100 * sum / grid.size(),
              100 * worst);
}

// Offload and quantized bases (issue 37): the estimate's device peak, host peak and
// transfer volume against the simulator's, per rank, over two training steps: the optimizer
// offloaded under every strategy and optimizer, NF4/FP4/int8 bases under LoRA (with double
// quantization, checkpointing, ZeRO-3 and offload), on Llama and GPT-2. Within 10% each.
std::vector<MemCase> offload_quant_grid() {
  std::vector<MemCase> g;
  auto add = [&](std::string name, const char* cfg, auto&& f) {
    MemCase c;
    c.name = std::move(name);
    c.config = cfg;
    c.steps_only = true;
    f(c);
    g.push_back(c);
  };
  const std::vector<std::string> all = {"all-linear"};
  add("llama ddp offload", kLlamaTiny, [](MemCase& c) { c.offload = true; });
  add("llama zero1 offload", kLlamaTiny, [](MemCase& c) { c.offload = true; c.strategy = Strategy::Zero1; });
  add("llama zero2 bf16 off", kLlamaTiny, [](MemCase& c) {
    c.offload = true; c.strategy = Strategy::Zero2; c.precision = Precision::BF16; });
  add("llama zero3 x4 off", kLlamaTiny, [](MemCase& c) { c.offload = true; c.strategy = Strategy::Zero3; c.world = 4; });
  add("llama momentum off", kLlamaTiny, [](MemCase& c) { c.offload = true; c.optimizer = "momentum"; });
  add("llama adafactor off", kLlamaTiny, [](MemCase& c) { c.offload = true; c.optimizer = "adafactor"; });
  add("wide ddp b1 offload", kLlamaWide, [](MemCase& c) { c.offload = true; c.batch = 1; c.seq = 32; });
  add("wide zero3 bf16 off", kLlamaWide, [](MemCase& c) {
    c.offload = true; c.batch = 1; c.seq = 32; c.strategy = Strategy::Zero3; c.precision = Precision::BF16; });
  add("gpt2 ddp offload", kGPT2Tiny, [](MemCase& c) { c.offload = true; });
  add("llama zero3 bf16 params", kLlamaTiny, [](MemCase& c) {
    c.offload = 2; c.strategy = Strategy::Zero3; c.precision = Precision::BF16; });
  add("wide zero3 bf16 params", kLlamaWide, [](MemCase& c) {
    c.offload = 2; c.batch = 1; c.seq = 32; c.strategy = Strategy::Zero3; c.precision = Precision::BF16; });
  add("llama lora8 nf4", kLlamaTiny, [](MemCase& c) { c.lora = 8; c.quant = QuantType::NF4; });
  add("wide lora nf4 dq", kLlamaWide, [&](MemCase& c) {
    c.lora = 4; c.lora_targets = all; c.quant = QuantType::NF4; c.double_quant = true; c.batch = 1; c.seq = 32; });
  add("wide lora nf4 dq off", kLlamaWide, [&](MemCase& c) {
    c.lora = 4; c.lora_targets = all; c.quant = QuantType::NF4; c.double_quant = true; c.offload = true;
    c.batch = 1; c.seq = 32; });
  add("wide lora fp4 ckpt", kLlamaWide, [&](MemCase& c) {
    c.lora = 4; c.lora_targets = all; c.quant = QuantType::FP4; c.ckpt = true; c.batch = 2; c.seq = 64; });
  add("wide lora int8", kLlamaWide, [&](MemCase& c) {
    c.lora = 8; c.lora_targets = all; c.quant = QuantType::Int8; c.batch = 1; c.seq = 32; });
  add("wide lora nf4 zero3", kLlamaWide, [&](MemCase& c) {
    c.lora = 4; c.lora_targets = all; c.quant = QuantType::NF4; c.strategy = Strategy::Zero3; c.batch = 1; c.seq = 32; });
  add("gpt2 lora nf4 off", kGPT2Tiny, [](MemCase& c) { c.lora = 8; c.quant = QuantType::NF4; c.offload = true; });
  return g;
}

TEST(MemoryEstimate, OffloadAndQuantizationWithinTenPercentOfTheSimulator) {
  std::printf("  %-22s %10s %10s %7s %10s %10s %7s %10s %10s\n", "case (KiB per rank)", "device", "estimate", "error",
              "host", "estimate", "error", "transfer", "estimate");
  double worst = 0, sum = 0;
  int n = 0;
  const auto grid = offload_quant_grid();
  ASSERT_GE(grid.size(), 12u);
  auto err = [](double e, double m) { return m > 0 ? (e - m) / m : (e > 0 ? 1.0 : 0.0); };
  for (const auto& c : grid) {
    const MemPhases m = measure_memory(c);
    const MemoryEstimate e = estimate_memory(parse_lm_config(c.config, c.name), estimate_config(c));
    const double dev = err(e.total, static_cast<double>(m.peak)), host = err(e.host, static_cast<double>(m.host_peak));
    const double steps = 2;  // measure_memory's
    std::printf("  %-22s %10.1f %10.1f %+6.1f%% %10.1f %10.1f %+6.1f%% %10.1f %10.1f\n", c.name.c_str(), m.peak / 1024.0,
                e.total / 1024.0, 100 * dev, m.host_peak / 1024.0, e.host / 1024.0, 100 * host,
                m.transfer / steps / 1024.0, e.transfer_bytes / 1024.0);
    EXPECT_LT(std::fabs(dev), 0.10) << c.name << ": device peak " << m.peak << " B, estimated " << e.total << " B";
    EXPECT_LT(std::fabs(host), 0.10) << c.name << ": host peak " << m.host_peak << " B, estimated " << e.host << " B";
    // the transfers are counted, not estimated: the same bytes
    EXPECT_NEAR(e.transfer_bytes, static_cast<double>(m.transfer) / steps, 1.0) << c.name;
    EXPECT_EQ(c.offload != 0, m.host_peak > 0) << c.name;
    for (double x : {dev, host})
      if (c.offload || x != 0) worst = std::max(worst, std::fabs(x)), sum += std::fabs(x), ++n;
  }
  std::printf("  %zu configurations (%d peaks): mean |error| %.1f%%, worst %.1f%%\n", grid.size(), n, 100 * sum / n,
              100 * worst);
}

// Parameter offload under ZeRO-3 with bf16 working weights (the 16-bit shard in host memory,
// copied to the device unit by unit for each gather): the same weights bit for bit as
// without offload and as with the optimizer's alone, in less device memory than either.
TEST(MemoryEstimate, ParameterOffloadSameWeightsLessDeviceMemory) {
  MemPhases m[3];
  for (int off = 0; off < 3; ++off) {
    MemCase c;
    c.name = "llama zero3 bf16 offload " + std::to_string(off);
    c.config = kLlamaWide;
    c.strategy = Strategy::Zero3;
    c.precision = Precision::BF16;
    c.batch = 1;
    c.seq = 32;
    c.offload = off;
    c.steps_only = true;
    m[off] = measure_memory(c);
    ASSERT_FALSE(m[off].params.empty());
  }
  for (int off = 1; off < 3; ++off)
    for (size_t i = 0; i < m[0].params.size(); ++i)
      EXPECT_TRUE(torch::equal(m[0].params[i], m[off].params[i])) << "offload " << off << ", parameter " << i;
  EXPECT_LT(m[2].peak, m[1].peak);
  EXPECT_LT(m[1].peak, m[0].peak);
  EXPECT_GT(m[2].host_peak, m[1].host_peak);
  std::printf("  ZeRO-3 bf16, 2 ranks, device peak per rank: no offload %.1f KiB, optimizer %.1f KiB, parameters %.1f KiB "
              "(host %.1f and %.1f KiB; %.1f and %.1f KiB moved a step)\n",
              m[0].peak / 1024.0, m[1].peak / 1024.0, m[2].peak / 1024.0, m[1].host_peak / 1024.0,
              m[2].host_peak / 1024.0, m[1].transfer / 2048.0, m[2].transfer / 2048.0);
}

// The published arithmetic: parameter counts of the named shapes; a 7B model's fp32 weights
// (4 bytes each: 28 GB for 7.0e9, 26.95 GB for Llama-2-7B's 6.74e9, which `accelerate
// estimate-memory` prints as 25.1 GB, its GiB); AdamW's 16 bytes per parameter (4x the fp32
// weights: Accelerate's "training with Adam"); and the ZeRO paper's per-GPU model state for
// mixed precision with Adam on 64 GPUs (Rajbhandari et al. 2020, figure 1: 2+2+12 bytes per
// parameter; ZeRO-1 4 + 12/64, ZeRO-2 2 + 14/64, ZeRO-3 16/64).
TEST(MemoryEstimate, PublishedArithmetic) {
  const std::map<std::string, int64_t> counts = {{"gpt2", 124439808},    {"gpt2-medium", 354823168},
                                                 {"gpt2-large", 774030080}, {"gpt2-xl", 1557611200},
                                                 {"llama-7b", 6738415616},  {"llama-13b", 13015864320},
                                                 {"llama-70b", 68976648192}};
  for (const auto& [name, n] : counts) EXPECT_EQ(estimate_memory(name, MemoryEstimateConfig{}).parameters, n) << name;
  MemoryEstimateConfig fp32;
  const MemoryEstimate e7 = estimate_memory("llama-7b", fp32);
  EXPECT_DOUBLE_EQ(e7.weights, 4.0 * 6738415616);
  EXPECT_NEAR(e7.weights / 1e9, 26.95, 0.01);
  EXPECT_NEAR(e7.weights / (1024.0 * 1024 * 1024), 25.1, 0.05);  // accelerate estimate-memory's figure
  EXPECT_DOUBLE_EQ(e7.weights + e7.gradients + e7.optimizer, 16.0 * 6738415616);  // 4x: "training with Adam"
  MemoryEstimateConfig mixed;
  mixed.precision = 1;
  mixed.world_size = 64;
  const double psi = 6738415616.0;
  const std::map<int, double> per_param = {{1, 16.0}, {2, 4.0 + 12.0 / 64}, {3, 2.0 + 14.0 / 64}, {4, 16.0 / 64}};
  for (const auto& [s, bytes] : per_param) {
    mixed.strategy = s;
    const MemoryEstimate e = estimate_memory("llama-7b", mixed);
    const double state = e.weights + e.gradients + e.optimizer;
    // ZeRO pads each unit to a multiple of the world size: at most 63 elements a unit
    EXPECT_NEAR(state / psi, bytes, 1e-6) << "strategy " << s;
    std::printf("  llama-7b, bf16 + AdamW, 64 GPUs, strategy %d: model state %.2f GB per GPU (%.4f bytes/parameter)\n",
                s, state / 1e9, state / psi);
  }
  // with the activations: a 70B model with ZeRO-3 on 64 GPUs, 4 x 4096 tokens, checkpointing
  MemoryEstimateConfig big;
  big.precision = 1;
  big.strategy = 4;
  big.world_size = 64;
  big.micro_batch = 4;
  big.seq_len = 4096;
  big.gradient_checkpointing = true;
  big.attention = EstimateAttention::Fused;
  const MemoryEstimate e70 = estimate_memory("llama-70b", big);
  std::printf("  llama-70b, ZeRO-3 x 64, bf16, 4 x 4096, checkpointing: %.2f GiB per GPU (activations %.2f GiB)\n",
              e70.total / 1073741824.0, e70.activations / 1073741824.0);
  EXPECT_GT(e70.activations, 0);
  EXPECT_GT(e70.total, e70.weights + e70.gradients + e70.optimizer + e70.activations - 1);
}

TEST(MemoryEstimate, ClearErrors) {
  auto cfg = parse_lm_config(kLlamaTiny, "c");
  auto bad = [&](auto&& f, Status st, const std::string& part) {
    MemoryEstimateConfig o;
    f(o);
    expect_error([&] { estimate_memory(cfg, o); }, st, {part});
  };
  bad([](MemoryEstimateConfig& o) { o.world_size = 0; }, Status::InvalidArgument, "world_size");
  bad([](MemoryEstimateConfig& o) { o.world_size = 4; }, Status::InvalidArgument, "needs a strategy");
  bad([](MemoryEstimateConfig& o) { o.micro_batch = 0; }, Status::InvalidArgument, "micro_batch");
  bad([](MemoryEstimateConfig& o) { o.precision = 3; }, Status::InvalidArgument, "mixed_precision");
  bad([](MemoryEstimateConfig& o) { o.strategy = 9; }, Status::InvalidArgument, "strategy");
  bad([](MemoryEstimateConfig& o) { o.lora_rank = -1; }, Status::InvalidArgument, "lora_rank");
  bad([](MemoryEstimateConfig& o) { o.lora_rank = 4; o.lora_targets = {"nope"}; }, Status::InvalidArgument, "match no module");
  bad([](MemoryEstimateConfig& o) { o.strategy = 3; o.world_size = 2; o.optimizer = EstimateOptimizer::LAMB; },
      Status::Unsupported, "not LAMB");
  bad([](MemoryEstimateConfig& o) { o.strategy = 4; o.world_size = 2; o.bf16_weights = true; }, Status::Unsupported,
      "fp32 parameters");
  bad([](MemoryEstimateConfig& o) { o.bf16_weights = true; o.precision = 1; }, Status::InvalidArgument, "autocast");
  expect_error([] { estimate_memory("no-such-shape", MemoryEstimateConfig{}); }, Status::IO, {"named shape"});
  expect_error([] { estimate_memory("", MemoryEstimateConfig{}); }, Status::InvalidArgument, {"empty"});
}

}  // namespace
}  // namespace accel