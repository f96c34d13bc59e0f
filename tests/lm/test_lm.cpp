// Causal language models (runtime/models/): GPT-2 and Llama against the fixtures that
// transformers wrote (tests/fixtures/lm/README.md): logits, loss and every gradient within
// 1e-4 relative; sharded and bf16 loading; save_pretrained round trips with Hugging Face's
// names; a broken directory is a clear error naming the tensor, field or file; a trained
// model saved for scripts/lm_reverse_check (transformers reproduces its logits).
#include <gtest/gtest.h>

#include "common.h"

namespace accel {
namespace {

using namespace lm_test;  // NOLINT(google-build-using-namespace)

// ---------------------------------------------------------------------------------------
// Parity with transformers

struct Parity {
  double logits_real = 0, logits_all = 0, loss = 0, grads = 0;
  std::string worst_grad;
};

Parity check_fixture(const std::string& name) {
  auto model = load_pretrained(fixture(name));
  auto ref = read_map(fixture(name) + "/reference.safetensors");
  const auto ids = ref.at("input_ids"), mask = ref.at("attention_mask"), labels = ref.at("labels");
  auto logits = model->forward({ids, mask}, ForwardMode{});
  EXPECT_EQ(logits.sizes(), ref.at("logits").sizes());
  Parity p;
  auto real = mask.ne(0).unsqueeze(-1).expand_as(logits);
  p.logits_real = max_rel(logits.masked_select(real), ref.at("logits").masked_select(real));
  p.logits_all = max_rel(logits, ref.at("logits"));
  auto loss = causal_lm_loss(logits, labels);
  p.loss = max_rel(loss, ref.at("loss"));
  loss.backward();
  const auto& names = model->parameter_names();
  size_t seen = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = ref.find("grad." + names[i]);
    EXPECT_NE(it, ref.end()) << "the reference has no gradient of " << names[i];
    if (it == ref.end()) continue;
    ++seen;
    const auto g = model->parameters()[i].grad();
    EXPECT_TRUE(g.defined()) << names[i];
    if (!g.defined()) continue;
    const double r = max_rel(g, it->second);
    if (r >= p.grads) {
      p.grads = r;
      p.worst_grad = names[i];
    }
  }
  size_t ref_grads = 0;
  for (const auto& [n, t] : ref) ref_grads += n.rfind("grad.", 0) == 0;
  EXPECT_EQ(seen, ref_grads) << "every reference gradient is a parameter";
  std::printf("[ %s ] max relative difference: logits %.3g at real positions (%.3g all), loss %.3g, gradients %.3g (%s)\n",
              name.c_str(), p.logits_real, p.logits_all, p.loss, p.grads, p.worst_grad.c_str());
  return p;
}

class LMFixture : public ::testing::TestWithParam<std::string> {};

// The bound, 1e-4 of each tensor's largest magnitude, is the arithmetic's, not one CPU's: the
// fixtures (made by transformers on another machine, tests/fixtures/lm/README.md) are 2-layer
// models whose longest dot product has 128 terms (hidden 32, intermediate/n_inner <= 128), and
// the forward and backward chain about 15 such reductions. fp32's unit roundoff is
// u = 2^-24 = 6.0e-8, so each reduction may differ by up to 128 u = 7.6e-6 relative from the same
// sum added in another order (worst case; about sqrt(128) u typically): 15 x 7.6e-6 = 1.1e-4 at
// worst, 1e-5 typically. Observed (2026-11-27, an AMD EPYC Zen 4): logits at most 8.4e-7,
// gradients 2.2e-6, on its own kernels, on scripts/kernel_set's AVX2 set and on the baseline
// (ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Nehalem); logits 1.1e-6 on an Intel Xeon.
TEST_P(LMFixture, MatchesTransformers) {
  const Parity p = check_fixture(GetParam());
  EXPECT_LT(p.logits_real, 1e-4);
  EXPECT_LT(p.logits_all, 1e-4);  // padding positions follow the same rules (README)
  EXPECT_LT(p.loss, 1e-4);
  EXPECT_LT(p.grads, 1e-4) << p.worst_grad;
}

TEST_P(LMFixture, SaveLoadRoundTripWithHuggingFaceNames) {
  TempDir tmp;
  auto model = load_pretrained(fixture(GetParam()));
  const std::string out = (tmp.path() / "saved").string();
  save_pretrained(*model, {}, out);
  // the saved names are exactly the fixture's (all shards)
  std::set<std::string> fixture_names, saved_names;
  for (const auto& e : fs::directory_iterator(fixture(GetParam()))) {
    const std::string f = e.path().filename().string();
    if (f.rfind("model", 0) == 0 && e.path().extension() == ".safetensors")
      for (auto& [n, t] : read_st(e.path().string())) fixture_names.insert(n);
  }
  auto saved = read_st(out + "/model.safetensors");
  for (auto& [n, t] : saved) saved_names.insert(n);
  EXPECT_EQ(saved_names, fixture_names);
  // in transformers' order (named_parameters)
  std::vector<std::string> order;
  for (auto& [n, t] : saved) order.push_back(n);
  EXPECT_EQ(order, model->parameter_names());
  // bit-exact
  auto again = load_pretrained(out);
  ASSERT_EQ(again->parameter_names(), model->parameter_names());
  for (size_t i = 0; i < model->parameters().size(); ++i)
    EXPECT_TRUE(torch::equal(again->parameters()[i], model->parameters()[i])) << model->parameter_names()[i];
  // the config reads back the same, fields accel does not read included
  const json a = json::parse(safetensors::read_file(fixture(GetParam()) + "/config.json"));
  const json b = json::parse(safetensors::read_file(out + "/config.json"));
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (it.key() == "n_inner") continue;  // null in the fixture: accel writes 4 * n_embd
    EXPECT_EQ(b.at(it.key()), it.value()) << it.key();
  }
  // saving again over an earlier save is allowed
  save_pretrained(*model, {}, out);
  EXPECT_FALSE(fs::exists(tmp.path() / ".saved.tmp"));
  EXPECT_FALSE(fs::exists(tmp.path() / ".saved.old"));
}

TEST_P(LMFixture, LoadsAsBF16) {
  auto f32 = load_pretrained(fixture(GetParam()));
  auto bf = load_pretrained(fixture(GetParam()), torch::kBFloat16);
  for (size_t i = 0; i < f32->parameters().size(); ++i) {
    EXPECT_EQ(bf->parameters()[i].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(bf->parameters()[i], f32->parameters()[i].to(torch::kBFloat16)))
        << f32->parameter_names()[i];
  }
  auto ref = read_map(fixture(GetParam()) + "/reference.safetensors");
  auto logits = bf->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
  EXPECT_EQ(logits.scalar_type(), torch::kFloat);
  const double r = max_rel(logits, ref.at("logits"));
  std::printf("[ %s ] bf16 weights: logits within %.3g relative\n", GetParam().c_str(), r);
  EXPECT_LT(r, 0.1);
  auto loss = causal_lm_loss(logits, ref.at("labels"));
  loss.backward();
  EXPECT_TRUE(bf->parameters()[0].grad().defined());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LMFixture,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama-tiny-tied", "llama-tiny-sharded",
                                           "llama-tiny-rope-linear", "llama-tiny-rope-dynamic", "llama-tiny-rope-yarn",
                                           "llama-tiny-rope-llama3", "llama-tiny-rope-longrope", "qwen2-tiny",
                                           "qwen3-tiny", "mistral-tiny", "phi3-tiny", "gemma2-tiny", "gemma3-tiny",
                                           "smollm3-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// Weights stored in fp16 or bf16 (config.json's dtype saying so) load into fp32 or bf16
// parameters: each value the stored one, for every family.
TEST(LM, LoadsHalfAndBFloat16Files) {
  for (const char* name : {"qwen2-tiny", "gemma3-tiny", "phi3-tiny"}) {
    for (auto [dt, label] : {std::pair<torch::ScalarType, const char*>{torch::kHalf, "float16"}, {torch::kBFloat16, "bfloat16"}}) {
      TempDir tmp;
      const std::string dir = tmp.copy_of(name);
      auto ts = read_st(dir + "/model.safetensors");
      for (auto& [n, t] : ts) t = t.to(dt);
      write_st(dir + "/model.safetensors", ts);
      json j = json::parse(safetensors::read_file(dir + "/config.json"));
      j["dtype"] = label;
      safetensors::write_file_atomic(dir + "/config.json", j.dump());
      auto stored = read_map(dir + "/model.safetensors");
      for (auto as : {torch::kFloat, torch::kBFloat16}) {
        auto model = load_pretrained(dir, as);
        for (size_t i = 0; i < model->parameters().size(); ++i) {
          const auto& n = model->parameter_names()[i];
          EXPECT_EQ(model->parameters()[i].scalar_type(), as);
          EXPECT_TRUE(torch::equal(model->parameters()[i], stored.at(n).to(as))) << name << " " << label << " " << n;
        }
      }
    }
  }
}

TEST(LM, ShardedLoadsAsUnsharded) {
  auto a = load_pretrained(fixture("llama-tiny"));
  auto b = load_pretrained(fixture("llama-tiny-sharded"));
  ASSERT_EQ(a->parameter_names(), b->parameter_names());
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_TRUE(torch::equal(a->parameters()[i], b->parameters()[i])) << a->parameter_names()[i];
}

// Each row alone, without padding, gives the same logits at its real positions.
TEST(LM, PaddingDoesNotChangeRealPositions) {
  for (const char* name : {"gpt2-tiny", "llama-tiny"}) {
    auto model = load_pretrained(fixture(name));
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    const auto ids = ref.at("input_ids"), mask = ref.at("attention_mask");
    torch::NoGradGuard ng;
    auto all = model->forward({ids, mask}, ForwardMode{});
    // right padding under causal attention: without the mask, real positions are the same
    // (the LM loaders yield no mask)
    auto unmasked = model->forward({ids}, ForwardMode{});
    for (int64_t b = 0; b < ids.size(0); ++b) {
      const int64_t len = mask[b].sum().item<int64_t>();
      auto alone = model->forward({ids.narrow(0, b, 1).narrow(1, 0, len)}, ForwardMode{});
      EXPECT_LT(max_rel(alone[0], all[b].narrow(0, 0, len)), 1e-5) << name << " row " << b;
      EXPECT_LT(max_rel(unmasked[b].narrow(0, 0, len), all[b].narrow(0, 0, len)), 1e-5) << name << " row " << b;
    }
  }
}

// Under the Accelerator with every strategy on 2 simulated ranks (each on the fixture's
// batch): one SGD step gives the fixture's weights minus lr times transformers' gradient.
// ZeRO-3 gathers per unit (embeddings, each block, final norm + head; a tied head gathers
// the embedding's unit again).
TEST(LM, OneStepUnderEveryStrategy) {
  const double lr = 0.1;
  for (const char* name : {"gpt2-tiny", "llama-tiny", "llama-tiny-tied", "qwen2-tiny", "qwen3-tiny", "mistral-tiny",
                           "phi3-tiny", "gemma2-tiny", "gemma3-tiny", "smollm3-tiny"}) {
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    auto base = load_pretrained(fixture(name));
    for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3})
    for (bool ckpt : {false, true}) {
      std::vector<torch::Tensor> after;
      auto rep = on_ranks(2, s, 1, [&](Accelerator& acc, sim::Rank& rk) {
        std::shared_ptr<Model> model = load_pretrained(fixture(name));
        set_gradient_checkpointing(*model, ckpt);
        SGDConfig sc;
        sc.lr = lr;
        auto opt = std::make_shared<Optimizer>(model, sc);
        acc.prepare(model, opt, nullptr, nullptr);
        auto logits = acc.forward(*model, {ref.at("input_ids"), ref.at("attention_mask")});
        acc.backward(causal_lm_loss(logits, ref.at("labels")));
        acc.step();
        auto full = acc.full_parameters(*model);
        if (rk.rank() == 0) after = full;
      });
      ASSERT_TRUE(rep.ok()) << name << " " << static_cast<int>(s) << ": " << rep.first_error();
      double worst = 0;
      for (size_t i = 0; i < after.size(); ++i) {
        const auto& n = base->parameter_names()[i];
        auto want = base->parameters()[i].detach() - lr * ref.at("grad." + n);
        // relative to the step's size
        const double d = (after[i] - want).abs().max().item<double>() /
                         std::max(lr * ref.at("grad." + n).abs().max().item<double>(), 1e-30);
        worst = std::max(worst, d);
      }
      std::printf("[ %s ] %s%s: one SGD step within %.3g of the step's size\n", name, strategy_name(s),
                  ckpt ? ", gradient checkpointing" : "", worst);
      EXPECT_LT(worst, 1e-3) << name << " " << strategy_name(s) << (ckpt ? " checkpointed" : "");
    }
  }
}

// Gradient read-back (accel_model_parameter_grad's runtime half): on 2 simulated ranks that
// each run the fixture's batch, under DDP and ZeRO 1-3, with an accumulation of 2 (the same
// batch twice: the mean is the batch's gradient), every rank reads transformers' gradient of
// every parameter; between the accumulation's micro-batches and after the step there is none.
// Under fp16 mixed precision (loss scale 65536) the gradient read back is unscaled: the
// language models compute in fp32 on the CPU (lm.md: fp16 emulation is not applied to them)
// and the scale is a power of two, so it is transformers' within the same 1e-4. (ZeRO with
// fp16 keeps 16-bit working weights, which CPU libtorch 1.13 cannot multiply: DDP here.)
TEST(LM, GradientReadBackUnderEveryStrategy) {
  struct Case {
    const char* name;
    Strategy s;
    Precision p;
  };
  std::vector<Case> cases;
  for (const char* name : {"qwen2-tiny", "gemma2-tiny"})
    for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) cases.push_back({name, s, Precision::No});
  cases.push_back({"qwen2-tiny", Strategy::DDP, Precision::FP16});
  for (const Case& c : cases) {
    const char* name = c.name;
    const Strategy s = c.s;
    const bool fp16 = c.p == Precision::FP16;
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    {
      std::vector<double> worst(2, 0.0);
      auto rep = on_ranks(2, s, 2, [&](Accelerator& acc, sim::Rank& rk) {
        std::shared_ptr<Model> model = load_pretrained(fixture(name));
        SGDConfig sc;
        sc.lr = 0.1;
        auto opt = std::make_shared<Optimizer>(model, sc);
        acc.prepare(model, opt, nullptr, nullptr);
        expect_error([&] { acc.full_gradient(*model, 0); }, Status::InvalidState, {"no gradients"});
        for (int micro = 0; micro < 2; ++micro) {
          auto logits = acc.forward(*model, {ref.at("input_ids"), ref.at("attention_mask")});
          acc.backward(causal_lm_loss(logits, ref.at("labels")));
          if (micro == 0) expect_error([&] { acc.full_gradient(*model, 0); }, Status::InvalidState, {"1 of 2"});
        }
        if (fp16) {
          EXPECT_EQ(acc.loss_scale(), 65536.0);  // the backward ran on the loss times this
        }
        for (size_t i = 0; i < model->parameters().size(); ++i) {
          const auto& want = ref.at("grad." + model->parameter_names()[i]);
          const auto got = acc.full_gradient(*model, i);
          EXPECT_EQ(got.sizes(), want.sizes()) << model->parameter_names()[i];
          worst[static_cast<size_t>(rk.rank())] = std::max(worst[static_cast<size_t>(rk.rank())], max_rel(got, want));
        }
        expect_error([&] { acc.full_gradient(*model, model->parameters().size()); }, Status::InvalidArgument,
                     {"out of range"});
        acc.step();
        expect_error([&] { acc.full_gradient(*model, 0); }, Status::InvalidState, {"no gradients"});
      }, c.p);
      ASSERT_TRUE(rep.ok()) << name << " " << strategy_name(s) << ": " << rep.first_error();
      std::printf("[ %s ] %s%s: gradients read back within %.3g (rank 0) and %.3g (rank 1) of transformers'\n", name,
                  strategy_name(s), fp16 ? ", fp16 (loss scale 65536)" : "", worst[0], worst[1]);
      EXPECT_LT(worst[0], 1e-4);
      EXPECT_LT(worst[1], 1e-4);
    }
  }
}

// The reverse round trip's accel half (scripts/lm_reverse_check runs transformers on it):
// a few plain SGD steps from the fixture, save_pretrained, and accel's logits of the trained
// model on the fixture's batch in accel_reference.safetensors inside the saved directory
// (input_ids, attention_mask, logits). With ACCEL_LM_EXPORT_DIR set, into
// $ACCEL_LM_EXPORT_DIR/<fixture> (kept); otherwise into a temporary directory. Here: the
// saved directory loads back to the same logits bit for bit.
TEST(LM, TrainedModelExportsForTransformers) {
  const double lr = 0.1;
  const int steps = 3;
  const char* env = std::getenv("ACCEL_LM_EXPORT_DIR");
  TempDir tmp;
  const fs::path root = env && *env ? fs::path(env) : tmp.path();
  for (const char* name : {"gpt2-tiny", "llama-tiny", "llama-tiny-tied", "qwen2-tiny", "qwen3-tiny", "mistral-tiny",
                           "phi3-tiny", "gemma2-tiny", "gemma3-tiny", "smollm3-tiny"}) {
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    const auto ids = ref.at("input_ids"), mask = ref.at("attention_mask"), labels = ref.at("labels");
    auto model = load_pretrained(fixture(name));
    model->train(true);
    double first = 0, last = 0;
    for (int s = 0; s < steps; ++s) {
      auto loss = causal_lm_loss(model->forward({ids, mask}, ForwardMode{}), labels);
      (s == 0 ? first : last) = loss.item<double>();
      loss.backward();
      torch::NoGradGuard ng;
      for (const auto& p : model->parameters()) {
        p.sub_(p.grad() * lr);
        p.grad().zero_();
      }
    }
    EXPECT_LT(last, first) << name;
    model->train(false);
    torch::Tensor logits;
    {
      torch::NoGradGuard ng;
      logits = model->forward({ids, mask}, ForwardMode{});
    }
    // trained: not the fixture's logits any more
    EXPECT_GT(max_rel(logits, ref.at("logits")), 1e-3) << name;
    const fs::path dir = root / name;
    fs::remove(dir / "accel_reference.safetensors");  // save_pretrained replaces only a pretrained directory
    save_pretrained(*model, {}, dir.string());
    write_st((dir / "accel_reference.safetensors").string(),
             {{"input_ids", ids}, {"attention_mask", mask}, {"logits", logits}});
    // accel's own round trip: the saved directory gives the same logits, bit for bit
    auto again = load_pretrained(dir.string());
    again->train(false);
    torch::NoGradGuard ng;
    auto back = again->forward({ids, mask}, ForwardMode{});
    EXPECT_TRUE(torch::equal(back, logits)) << name << ": " << max_rel(back, logits);
    EXPECT_TRUE(torch::equal(read_map((dir / "accel_reference.safetensors").string()).at("logits"), logits)) << name;
    std::printf("[ %s ] %d SGD steps (lr %g): loss %.6f -> %.6f; saved to %s\n", name, steps, lr, first, last,
                dir.string().c_str());
  }
  // LoRA: a trained adapter in PEFT's format (peft loads it onto the fixture: <name>-adapter,
  // with accel's logits beside it in <name>-adapter.reference.safetensors) and the merged
  // plain directory (transformers loads it: <name>-lora-merged)
  for (const char* name : {"gpt2-tiny", "llama-tiny", "qwen2-tiny", "qwen3-tiny", "mistral-tiny", "phi3-tiny",
                           "gemma2-tiny", "gemma3-tiny", "smollm3-tiny"}) {
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    const auto ids = ref.at("input_ids"), mask = ref.at("attention_mask"), labels = ref.at("labels");
    auto model = load_pretrained(fixture(name));
    LoraConfig lc;
    lc.r = 4;
    lc.alpha = 16;
    lc.target_modules = {"all-linear"};
    add_lora(*model, lc, at::detail::createCPUGenerator(9));
    for (int s = 0; s < steps; ++s) {
      auto loss = causal_lm_loss(model->forward({ids, mask}, ForwardMode{}), labels);
      loss.backward();
      torch::NoGradGuard ng;
      for (const auto& p : model->parameters()) {
        p.sub_(p.grad() * lr);
        p.grad().zero_();
      }
    }
    model->train(false);
    torch::Tensor logits;
    {
      torch::NoGradGuard ng;
      logits = model->forward({ids, mask}, ForwardMode{});
    }
    EXPECT_GT(max_rel(logits, ref.at("logits")), 1e-3) << name << ": the adapter changed nothing";
    const std::string base = name;
    const fs::path ad = root / (base + "-adapter");
    save_adapter(*model, {}, ad.string());
    write_st((root / (base + "-adapter.reference.safetensors")).string(),
             {{"input_ids", ids}, {"attention_mask", mask}, {"logits", logits}});
    const fs::path merged = root / (base + "-lora-merged");
    fs::remove(merged / "accel_reference.safetensors");
    save_pretrained(*model, merged_weights(*model, {}), merged.string());
    write_st((merged / "accel_reference.safetensors").string(),
             {{"input_ids", ids}, {"attention_mask", mask}, {"logits", logits}});
    std::printf("[ %s ] LoRA (all-linear, r 4) %d SGD steps: adapter saved to %s, merged to %s\n", name, steps,
                ad.string().c_str(), merged.string().c_str());
  }
}

// ---------------------------------------------------------------------------------------
// Creating from a config

TEST(LM, CreateFromConfigInitialisesAsTransformers) {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "llama-tiny-tied"}) {
    const LMConfig cfg = read_lm_config(fixture(name) + "/config.json");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    auto model = make_causal_lm(cfg, gen);
    auto loaded = load_pretrained(fixture(name));
    EXPECT_EQ(model->parameter_names(), loaded->parameter_names()) << name;
    for (size_t i = 0; i < model->parameters().size(); ++i) {
      const std::string& n = model->parameter_names()[i];
      const auto& t = model->parameters()[i];
      EXPECT_EQ(t.sizes(), loaded->parameters()[i].sizes()) << n;
      const bool norm = n.find("ln_") != std::string::npos || n.find("norm") != std::string::npos;
      if (norm && n.size() > 7 && n.substr(n.size() - 7) == ".weight") {
        EXPECT_TRUE(torch::equal(t, torch::ones_like(t))) << n;
      } else if (n.size() > 5 && n.substr(n.size() - 5) == ".bias") {
        EXPECT_TRUE(torch::equal(t, torch::zeros_like(t))) << n;
      } else {
        double want = cfg.initializer_range;
        if (n.find("c_proj.weight") != std::string::npos) want /= std::sqrt(2.0 * static_cast<double>(cfg.num_layers));
        EXPECT_NEAR(t.std().item<double>(), want, 0.15 * want) << n;
        EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.1 * want) << n;
      }
    }
    // the same seed, the same weights
    auto again = make_causal_lm(cfg, at::make_generator<at::CPUGeneratorImpl>(7));
    for (size_t i = 0; i < model->parameters().size(); ++i)
      EXPECT_TRUE(torch::equal(again->parameters()[i], model->parameters()[i]));
    // it trains: a step of SGD lowers the loss on the fixture's batch
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    auto loss = causal_lm_loss(model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{}),
                               ref.at("labels"));
    loss.backward();
    {
      torch::NoGradGuard ng;
      for (const auto& p : model->parameters()) p.sub_(p.grad() * 0.05);
    }
    auto loss2 = causal_lm_loss(model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{}),
                                ref.at("labels"));
    EXPECT_LT(loss2.item<double>(), loss.item<double>()) << name;
  }
}

TEST(LM, ConfigMadeInCode) {
  LMConfig c;  // transformers' Llama defaults, made small
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_layers = 1;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  auto m = make_causal_lm(c, gen);
  EXPECT_EQ(m->parameter_names().size(), 1u + 9u + 2u);
  EXPECT_EQ(m->units().size(), 3u);
  auto logits = m->forward({torch::randint(0, 64, {2, 5}, torch::kLong)}, ForwardMode{});
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5, 64}));
  // a save of it is read back (config.json written from scratch)
  TempDir tmp;
  save_pretrained(*m, {}, (tmp.path() / "made").string() + "/");
  auto again = load_pretrained((tmp.path() / "made").string());
  for (size_t i = 0; i < m->parameters().size(); ++i) EXPECT_TRUE(torch::equal(again->parameters()[i], m->parameters()[i]));
  const LMConfig back = read_lm_config((tmp.path() / "made/config.json").string());
  EXPECT_EQ(back.num_kv_heads, 1);
  EXPECT_EQ(back.head_dim, 4);
  c.num_kv_heads = 3;
  expect_error([&] { make_causal_lm(c, gen); }, Status::InvalidArgument, {"num_kv_heads"});
  c.num_kv_heads = 1;
  c.model_type = "gpt2";
  expect_error([&] { make_causal_lm(c, gen); }, Status::InvalidArgument, {"model_type"});
  // inputs are checked
  expect_error([&] { m->forward({torch::full({1, 3}, 64, torch::kLong)}, ForwardMode{}); }, Status::InvalidArgument,
               {"64", "vocab_size"});
  expect_error([&] { m->forward({torch::zeros({1, 3}, torch::kLong), torch::ones({1, 4}, torch::kLong)}, ForwardMode{}); },
               Status::InvalidArgument, {"attention_mask"});
}

TEST(LM, ConfigFromTransformers4) {
  // transformers 4 wrote rope_theta at the top level and torch_dtype
  json j = json::parse(safetensors::read_file(fixture("llama-tiny") + "/config.json"));
  j.erase("rope_parameters");
  j.erase("dtype");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = nullptr;
  j["torch_dtype"] = "bfloat16";
  j.erase("num_key_value_heads");
  j.erase("head_dim");
  const LMConfig c = parse_lm_config(j.dump(), "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  const LMConfig g = read_lm_config(fixture("gpt2-tiny") + "/config.json");
  EXPECT_EQ(g.intermediate_size, 128);  // n_inner null: 4 * n_embd
  EXPECT_EQ(g.head_dim, 8);
  EXPECT_EQ(g.activation, "gelu_new");
  EXPECT_TRUE(g.tie_word_embeddings);
}

// ---------------------------------------------------------------------------------------
// The loss

TEST(LM, LossIsTheMeanOverRealTargets) {
  torch::manual_seed(3);
  auto logits = torch::randn({2, 4, 5});
  auto labels = torch::tensor({1, 2, 3, -100, 4, 0, -100, -100}, torch::kLong).view({2, 4});
  // by hand: the logits at t predict labels[t + 1]; targets -100 skipped
  double sum = 0;
  int n = 0;
  auto lsm = torch::log_softmax(logits, -1);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t + 1 < 4; ++t) {
      const int64_t y = labels[b][t + 1].item<int64_t>();
      if (y == -100) continue;
      sum -= lsm[b][t][y].item<double>();
      ++n;
    }
  EXPECT_EQ(n, 3);  // row 0: 2 and 3; row 1: 0
  auto [s, count] = causal_lm_loss_sum(logits, labels);
  EXPECT_EQ(count, 3);
  EXPECT_NEAR(s.item<double>(), sum, 1e-5);
  EXPECT_NEAR(causal_lm_loss(logits, labels).item<double>(), sum / n, 1e-6);
  // no real targets: 0, not NaN
  auto none = torch::full({1, 3}, -100, torch::kLong);
  EXPECT_EQ(causal_lm_loss(logits.narrow(0, 0, 1).narrow(1, 0, 3), none).item<double>(), 0.0);
  // the fixture's loss from its logits
  auto ref = read_map(fixture("gpt2-tiny") + "/reference.safetensors");
  EXPECT_LT(max_rel(causal_lm_loss(ref.at("logits"), ref.at("labels")), ref.at("loss")), 1e-6);
  EXPECT_EQ(causal_lm_loss_sum(ref.at("logits"), ref.at("labels")).second, 23);
  expect_error([&] { causal_lm_loss(logits, labels.narrow(1, 0, 3)); }, Status::InvalidArgument, {"labels"});
  expect_error([&] { causal_lm_loss(logits, labels.clone().fill_(7)); }, Status::InvalidArgument, {"7", "out of range"});
}

// ---------------------------------------------------------------------------------------
// Errors: a broken copy of a fixture

// Gradient checkpointing recomputes each block in backward: the same loss and gradients as
// without it (fp32, within 1e-6 of the gradient's scale), also with dropout (the rerun draws
// the same masks) and under bf16 autocast.
TEST(LM, GradientCheckpointingGivesTheSameGradients) {
  struct Case {
    std::string name;
    bool dropout;
    bool bf16;
    bool lora = false;  // LoRA adapters (with dropout when `dropout`): the blocks' trainables are the adapters
  };
  for (const Case& c : {Case{"gpt2-tiny", false, false}, Case{"llama-tiny", false, false},
                        Case{"llama-tiny-tied", false, false}, Case{"gpt2-tiny", true, false},
                        Case{"llama-tiny", true, false}, Case{"llama-tiny", false, true},
                        Case{"llama-tiny", true, false, true}, Case{"gpt2-tiny", false, false, true},
                        Case{"qwen2-tiny", false, false}, Case{"qwen3-tiny", false, true}, Case{"mistral-tiny", false, false},
                        Case{"phi3-tiny", true, false}, Case{"phi3-tiny", false, false, true},
                        Case{"gemma2-tiny", false, false}, Case{"gemma3-tiny", false, true},
                        Case{"gemma3-tiny", true, false, true}, Case{"smollm3-tiny", false, false}}) {
    auto ref = read_map(fixture(c.name) + "/reference.safetensors");
    LMConfig cfg = read_lm_config(fixture(c.name) + "/config.json");
    if (c.dropout) cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = cfg.attention_dropout = 0.1;
    std::vector<std::vector<torch::Tensor>> grads;
    std::vector<double> losses;
    for (bool ckpt : {false, true}) {
      auto gen = at::detail::createCPUGenerator(7);
      auto model = make_causal_lm(cfg, gen);
      if (c.lora) {
        LoraConfig lc;
        lc.r = 2;
        lc.target_modules = {"all-linear"};
        lc.dropout = c.dropout ? 0.1 : 0.0;
        add_lora(*model, lc, at::detail::createCPUGenerator(8));
        torch::NoGradGuard ng;  // B away from zero, so the adapters change the output
        for (const auto& p : model->parameters()) p.normal_(0.0, 0.1, at::detail::createCPUGenerator(9));
      }
      set_gradient_checkpointing(*model, ckpt);
      EXPECT_EQ(gradient_checkpointing(*model), ckpt);
      torch::Tensor loss;
      {
        std::optional<compat::AutocastGuard> ac;
        if (c.bf16) ac.emplace(c10::DeviceType::CPU, torch::kBFloat16);
        auto logits = model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
        loss = causal_lm_loss(logits, ref.at("labels"));
      }
      loss.backward();
      losses.push_back(loss.item<double>());
      std::vector<torch::Tensor> g;
      for (const auto& p : model->parameters()) {
        EXPECT_TRUE(p.grad().defined());
        g.push_back(p.grad().clone());
      }
      grads.push_back(g);
    }
    double worst = 0;
    for (size_t i = 0; i < grads[0].size(); ++i) {
      const double scale = std::max(grads[0][i].abs().max().item<double>(), 1e-30);
      worst = std::max(worst, (grads[0][i] - grads[1][i]).abs().max().item<double>() / scale);
    }
    std::printf("[ %s%s%s%s ] checkpointed gradients within %.3g (loss %.9g vs %.9g)\n", c.name.c_str(),
                c.lora ? ", LoRA" : "", c.dropout ? ", dropout 0.1" : "", c.bf16 ? ", bf16 autocast" : "", worst,
                losses[0], losses[1]);
    EXPECT_EQ(losses[0], losses[1]) << c.name;
    EXPECT_LT(worst, 1e-6) << c.name << (c.dropout ? " dropout" : "") << (c.bf16 ? " bf16" : "");
  }
  MLPConfig mc;
  mc.sizes = {2, 2};
  auto mlp = make_mlp(mc, at::detail::createCPUGenerator(1));
  expect_error([&] { set_gradient_checkpointing(*mlp, true); }, Status::InvalidArgument, {"causal LMs"});
}

// What checkpointing saves: the per-rank peak on the simulator (every tensor the rank's thread
// allocates) for one training step of a small Llama, with and without it, at several sequence
// lengths. Checkpointing keeps one tensor per block instead of the block's activations.
TEST(LM, GradientCheckpointingLowersThePeak) {
  LMConfig cfg = parse_lm_config(R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 176, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 1024})", "config");
  std::printf("  seq  peak without  peak with  (MiB, one rank, batch 4)\n");
  double prev_saving = 0;
  for (int64_t T : {64, 128, 256}) {
    uint64_t peak[2] = {0, 0};
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      sim::WorldOptions wo;
      wo.world_size = 1;
      wo.timeout_seconds = 20;
      sim::World world(wo);
      auto rep = world.run([&](sim::Rank& rk) {
        (void)rk;
        auto model = make_causal_lm(cfg, at::detail::createCPUGenerator(3));
        set_gradient_checkpointing(*model, ckpt != 0);
        auto ids = torch::randint(0, cfg.vocab_size, {4, T}, at::detail::createCPUGenerator(4));
        auto loss = causal_lm_loss(model->forward({ids}, ForwardMode{}), ids);
        loss.backward();
      });
      ASSERT_TRUE(rep.ok()) << rep.first_error();
      peak[ckpt] = rep.ranks.at(0).peak_bytes;
    }
    std::printf("  %4lld  %12.2f  %9.2f\n", static_cast<long long>(T), peak[0] / 1048576.0, peak[1] / 1048576.0);
    EXPECT_LT(peak[1], peak[0]) << "T=" << T;
    const double saving = static_cast<double>(peak[0]) - static_cast<double>(peak[1]);
    EXPECT_GT(saving, prev_saving) << "the saving grows with the sequence (T=" << T << ")";
    prev_saving = saving;
  }
}

// The loss of a causal LM is a mean over real tokens. Under accumulation and across processes
// accel makes the step's gradient that of the mean over every real token of the global batch
// (Accelerator::backward with a token count), not a mean of per-micro-batch means: 2 ranks x
// 2 micro-batches with 3..40 real tokens each, against one process summing every token's loss.
TEST(LM, TokenMeanOverTheGlobalBatch) {
  const std::string name = "llama-tiny";
  const LMConfig cfg = read_lm_config(fixture(name) + "/config.json");
  // micro-batch m of rank r: 2 rows, length T, the last `pad` positions of row 1 padding
  struct Micro {
    torch::Tensor ids, mask, labels;
  };
  auto micro = [&](int r, int m) {
    const int64_t T = 6 + 5 * (2 * r + m), pad = (2 * r + m) % 2 ? T - 3 : 1;
    auto g = at::detail::createCPUGenerator(static_cast<uint64_t>(10 + 2 * r + m));
    Micro b;
    b.ids = torch::randint(0, cfg.vocab_size, {2, T}, g);
    b.mask = torch::ones({2, T}, torch::kLong);
    b.mask[1].narrow(0, T - pad, pad).fill_(0);
    b.labels = b.ids.masked_fill(b.mask.eq(0), -100);
    return b;
  };
  // the reference: one model, the sum of every token's loss over the total count
  auto ref_model = load_pretrained(fixture(name));
  torch::Tensor sum = torch::zeros({});
  int64_t count = 0;
  for (int r = 0; r < 2; ++r)
    for (int m = 0; m < 2; ++m) {
      const Micro b = micro(r, m);
      auto [ls, n] = causal_lm_loss_sum(ref_model->forward({b.ids, b.mask}, ForwardMode{}), b.labels);
      sum = sum + ls;
      count += n;
    }
  (sum / static_cast<double>(count)).backward();
  const double lr = 0.5;
  for (Strategy s : {Strategy::DDP, Strategy::Zero2, Strategy::Zero3}) {
    std::vector<torch::Tensor> after;
    auto rep = on_ranks(2, s, 2, [&](Accelerator& acc, sim::Rank& rk) {
      std::shared_ptr<Model> model = load_pretrained(fixture(name));
      SGDConfig sc;
      sc.lr = lr;
      auto opt = std::make_shared<Optimizer>(model, sc);
      acc.prepare(model, opt, nullptr, nullptr);
      for (int m = 0; m < 2; ++m) {
        const Micro b = micro(rk.rank(), m);
        auto [ls, n] = causal_lm_loss_sum(acc.forward(*model, {b.ids, b.mask}), b.labels);
        acc.backward(ls / static_cast<double>(n), n);
        acc.step();
      }
      auto full = acc.full_parameters(*model);
      if (rk.rank() == 0) after = full;
    });
    ASSERT_TRUE(rep.ok()) << strategy_name(s) << ": " << rep.first_error();
    double worst = 0;
    for (size_t i = 0; i < after.size(); ++i) {
      const auto& g = ref_model->parameters()[i].grad();
      auto want = ref_model->parameters()[i].detach() - lr * g;
      worst = std::max(worst, (after[i] - want).abs().max().item<double>() /
                                  std::max(lr * g.abs().max().item<double>(), 1e-30));
    }
    std::printf("[ %s ] %s, 2 ranks x 2 micro-batches, %lld tokens: the step within %.3g of the global token "
                "mean's\n", name.c_str(), strategy_name(s), static_cast<long long>(count), worst);
    EXPECT_LT(worst, 1e-4) << strategy_name(s);
  }
  // one window cannot mix the two kinds of loss
  Options o;
  o.device = DeviceKind::CPU;
  o.gradient_accumulation_steps = 2;
  Accelerator acc(o);
  std::shared_ptr<Model> model = load_pretrained(fixture(name));
  auto opt = std::make_shared<Optimizer>(model, SGDConfig{});
  acc.prepare(model, opt, nullptr, nullptr);
  const Micro b = micro(0, 0);
  auto [ls, n] = causal_lm_loss_sum(acc.forward(*model, {b.ids, b.mask}), b.labels);
  acc.backward(ls / static_cast<double>(n), n);
  auto plain = causal_lm_loss(acc.forward(*model, {b.ids, b.mask}), b.labels);
  expect_error([&] { acc.backward(plain); }, Status::InvalidArgument, {"token means", "not both"});
}

// ZeRO-3 gathers a transformer block's weights just before its forward and releases them
// after (runtime/strategy/zero_stage3.cpp: one unit per block), so an evaluation forward on 4
// simulated ranks raises the rank's memory by about one block's full weights above its shards,
// where DDP holds every weight all the time.
TEST(LM, Zero3GathersOneBlockAtATime) {
  LMConfig cfg = parse_lm_config(R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 128,
      "intermediate_size": 512, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 64})", "config");
  auto probe = make_causal_lm(cfg, at::detail::createCPUGenerator(1));
  int64_t total = 0, block = 0;
  for (const auto& p : probe->parameters()) total += p.numel() * 4;
  const auto units = probe->units();
  for (size_t i : units[1]) block += probe->parameters()[i].numel() * 4;
  const int W = 4;
  std::printf("  weights %.2f MiB, one block %.2f MiB, a rank's share of the weights %.2f MiB\n", total / 1048576.0,
              block / 1048576.0, total / W / 1048576.0);
  std::printf("  strategy  resident before  forward's rise (MiB, eval, batch 1 x 4 tokens)\n");
  for (Strategy s : {Strategy::DDP, Strategy::Zero3}) {
    std::vector<uint64_t> resident(W), rise(W);
    auto rep = on_ranks(W, s, 1, [&](Accelerator& acc, sim::Rank& rk) {
      std::shared_ptr<Model> model = make_causal_lm(cfg, at::detail::createCPUGenerator(1));
      auto opt = std::make_shared<Optimizer>(model, SGDConfig{});
      acc.prepare(model, opt, nullptr, nullptr);
      model->train(false);
      auto ids = torch::randint(0, 64, {1, 4}, at::detail::createCPUGenerator(2));
      acc.forward(*model, {ids});  // warm-up: libtorch's first-use allocations
      const auto& budget = rk.world().budget();
      rk.comm().barrier();
      if (rk.rank() == 0) budget->reset_peaks();
      rk.comm().barrier();
      const uint64_t before = budget->current(rk.rank());
      acc.forward(*model, {ids});
      resident[static_cast<size_t>(rk.rank())] = before;
      rise[static_cast<size_t>(rk.rank())] = budget->peak(rk.rank()) - before;
    });
    ASSERT_TRUE(rep.ok()) << rep.first_error();
    std::printf("  %-8s  %15.2f  %14.2f\n", strategy_name(s), resident[0] / 1048576.0, rise[0] / 1048576.0);
    if (s == Strategy::Zero3) {
      // what stays is the shards (a quarter of the weights, and of their gradients: ZeRO-3
      // allocates its gradient shard at prepare); a forward adds one block, not the model
      EXPECT_LT(resident[0], static_cast<uint64_t>(2 * total / W + block / 2));
      EXPECT_GT(rise[0], static_cast<uint64_t>(block * 9 / 10));
      EXPECT_LT(rise[0], static_cast<uint64_t>(block * 2));
    } else {
      EXPECT_GT(resident[0], static_cast<uint64_t>(total));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Generation with a KV cache

TEST(LMGenerate, CacheGivesTheFullForwardsLogitsAndTokens) {
  // (qwen2-tiny, mistral-tiny, phi3-tiny and the Gemmas have sliding windows of 4-6
  // positions: the cached keys beyond a window are masked as the full forward masks them)
  for (const char* name : {"gpt2-tiny", "llama-tiny", "llama-tiny-tied", "qwen2-tiny", "qwen3-tiny", "mistral-tiny",
                           "phi3-tiny", "gemma2-tiny", "gemma3-tiny", "smollm3-tiny"}) {
    auto model = load_pretrained(fixture(name));
    model->train(false);
    const LMConfig cfg = *lm_config_of(*model);
    auto fwd = [&](const torch::Tensor& ids, lm_detail::KVCache* cache) {
      ForwardMode m;
      m.cache = cache;
      return model->forward({ids}, m);
    };
    auto prompt = torch::randint(3, 120, {2, 5}, at::detail::createCPUGenerator(3));
    // the cache's logits, step by step, are the full forward's at each position
    torch::NoGradGuard ng;
    auto full = model->forward({prompt}, ForwardMode{});
    lm_detail::KVCache cache;
    auto first = fwd(prompt.narrow(1, 0, 3), &cache);
    cache.length += 3;
    auto rest = fwd(prompt.narrow(1, 3, 2), &cache);
    EXPECT_LT(max_rel(torch::cat({first, rest}, 1), full), 1e-5) << name;
    GenerateConfig g;
    g.max_new_tokens = 12;
    auto with = generate(fwd, prompt, g, cfg);
    g.use_cache = false;
    auto without = generate(fwd, prompt, g, cfg);
    EXPECT_EQ(with.sizes(), (std::vector<int64_t>{2, 17}));
    EXPECT_TRUE(torch::equal(with, without)) << name;
    EXPECT_TRUE(torch::equal(with.narrow(1, 0, 5), prompt));
    // greedy: every new token is the argmax of the full forward on what came before
    auto again = model->forward({with.narrow(1, 0, 16)}, ForwardMode{});
    EXPECT_TRUE(torch::equal(again.narrow(1, 4, 12).argmax(-1), with.narrow(1, 5, 12))) << name;
    // sampling: the seed decides; top_k 1 is greedy
    g.use_cache = true;
    g.temperature = 0.8;
    g.top_k = 10;
    g.seed = 5;
    auto s1 = generate(fwd, prompt, g, cfg), s2 = generate(fwd, prompt, g, cfg);
    EXPECT_TRUE(torch::equal(s1, s2));
    g.top_k = 1;
    EXPECT_TRUE(torch::equal(generate(fwd, prompt, g, cfg), with)) << name;
    // eos: a finished row repeats it, and generation stops when every row has finished
    g = GenerateConfig{};
    g.max_new_tokens = 12;
    g.eos_token_id = with[0][7].item<int64_t>();
    auto e = generate(fwd, prompt, g, cfg);
    EXPECT_LE(e.size(1), 17);
    for (int64_t j = 8; j < e.size(1); ++j) EXPECT_EQ(e[0][j].item<int64_t>(), g.eos_token_id) << name << " " << j;
    std::printf("[ %s ] greedy continuation with and without the KV cache: %s\n", name,
                torch::equal(with, without) ? "identical" : "DIFFERENT");
  }
  auto model = load_pretrained(fixture("gpt2-tiny"));
  auto fwd = [&](const torch::Tensor& ids, lm_detail::KVCache* cache) {
    ForwardMode m;
    m.cache = cache;
    return model->forward({ids}, m);
  };
  const LMConfig cfg = *lm_config_of(*model);
  auto prompt = torch::ones({1, 60}, torch::kLong);
  GenerateConfig g;
  g.max_new_tokens = 10;
  expect_error([&] { generate(fwd, prompt, g, cfg); }, Status::InvalidArgument, {"n_positions", "64"});
  g.max_new_tokens = 0;
  expect_error([&] { generate(fwd, prompt, g, cfg); }, Status::InvalidArgument, {"max_new_tokens"});
  g = GenerateConfig{};
  g.temperature = -1;
  expect_error([&] { generate(fwd, prompt.narrow(1, 0, 2), g, cfg); }, Status::InvalidArgument, {"temperature"});
}

// A left-padded batch of prompts of different lengths generates, row by row, what each prompt
// alone generates (positions counted per row, padding masked), with and without the KV cache;
// its logits at the real positions are the unpadded prompt's. (Not with dynamic RoPE: its
// frequencies follow the batch's longest position, in transformers as here.)
TEST(Generation, PaddedBatchContinuesEachPromptAsAlone) {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "llama-tiny-rope-yarn", "qwen2-tiny", "mistral-tiny",
                           "phi3-tiny", "gemma2-tiny", "gemma3-tiny", "smollm3-tiny"}) {
    auto model = load_pretrained(fixture(name));
    model->train(false);
    const LMConfig cfg = *lm_config_of(*model);
    LMForward fwd = [&](const std::vector<torch::Tensor>& in, lm_detail::KVCache* cache) {
      ForwardMode m;
      m.cache = cache;
      return model->forward(in, m);
    };
    auto gen = at::detail::createCPUGenerator(11);
    const std::vector<int64_t> lengths = {6, 2, 4};
    const int64_t S = 6;
    auto ids = torch::zeros({3, S}, torch::kLong), mask = torch::zeros({3, S}, torch::kLong);
    std::vector<torch::Tensor> prompts;
    for (size_t r = 0; r < lengths.size(); ++r) {
      auto p = torch::randint(3, 120, {1, lengths[r]}, gen);
      prompts.push_back(p);
      ids[static_cast<int64_t>(r)].narrow(0, S - lengths[r], lengths[r]).copy_(p[0]);
      mask[static_cast<int64_t>(r)].narrow(0, S - lengths[r], lengths[r]).fill_(1);
    }
    torch::NoGradGuard ng;
    {  // the logits at real positions: the padded row's are the prompt's alone
      auto pos = (mask.cumsum(1) - 1).masked_fill(mask.eq(0), 1);
      auto padded = model->forward({ids, mask, pos}, ForwardMode{});
      for (size_t r = 0; r < lengths.size(); ++r) {
        auto alone = model->forward({prompts[r]}, ForwardMode{});
        auto mine = padded[static_cast<int64_t>(r)].narrow(0, S - lengths[r], lengths[r]).unsqueeze(0);
        EXPECT_LT(max_rel(mine, alone), 1e-5) << name << " row " << r;
      }
    }
    GenerateConfig g;
    g.max_new_tokens = 8;
    for (const bool cache : {true, false}) {
      g.use_cache = cache;
      auto out = generate(fwd, ids, mask, g, cfg);
      ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, S + 8})) << name;
      EXPECT_TRUE(torch::equal(out.narrow(1, 0, S), ids)) << name;
      for (size_t r = 0; r < lengths.size(); ++r) {
        auto alone = generate(fwd, prompts[r], torch::Tensor(), g, cfg);
        EXPECT_TRUE(torch::equal(out[static_cast<int64_t>(r)].narrow(0, S, 8), alone[0].narrow(0, lengths[r], 8)))
            << name << " row " << r << (cache ? " with" : " without") << " the cache: " << out[static_cast<int64_t>(r)]
            << " vs " << alone[0];
      }
    }
    std::printf("[ %s ] a left-padded batch of 3 prompts (6, 2, 4 tokens) generates as each prompt alone\n", name);
  }
  // right padding, a row without tokens and a mask of another shape are refused
  auto model = load_pretrained(fixture("llama-tiny"));
  const LMConfig cfg = *lm_config_of(*model);
  LMForward fwd = [&](const std::vector<torch::Tensor>& in, lm_detail::KVCache* cache) {
    ForwardMode m;
    m.cache = cache;
    return model->forward(in, m);
  };
  auto ids = torch::ones({2, 3}, torch::kLong);
  GenerateConfig g;
  g.max_new_tokens = 2;
  expect_error([&] { generate(fwd, ids, torch::tensor({1, 1, 0, 1, 1, 1}, torch::kLong).view({2, 3}), g, cfg); },
               Status::InvalidArgument, {"row 0", "padding after a token", "LEFT"});
  expect_error([&] { generate(fwd, ids, torch::tensor({1, 1, 1, 0, 0, 0}, torch::kLong).view({2, 3}), g, cfg); },
               Status::InvalidArgument, {"row 1", "no token"});
  expect_error([&] { generate(fwd, ids, torch::ones({2, 4}, torch::kLong), g, cfg); }, Status::InvalidArgument,
               {"attention_mask", "shape"});
}

// ---------------------------------------------------------------------------------------
// LoRA against PEFT (tests/fixtures/lm/*-lora: adapters with random A and B)

TEST(LoRA, MatchesPeft) {
  for (const std::string base : {"gpt2-tiny", "llama-tiny", "qwen2-tiny", "phi3-tiny", "gemma2-tiny"}) {
    const std::string name = base + "-lora";
    auto model = load_pretrained(fixture(base));
    load_adapter(*model, fixture(name));
    ASSERT_NE(lora_config_of(*model), nullptr);
    auto ref = read_map(fixture(name) + "/reference.safetensors");
    auto logits = model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
    auto loss = causal_lm_loss(logits, ref.at("labels"));
    loss.backward();
    const double dl = max_rel(logits, ref.at("logits")), dloss = max_rel(loss, ref.at("loss"));
    double dg = 0;
    size_t grads = 0;
    for (size_t i = 0; i < model->parameters().size(); ++i) {
      const auto& g = ref.at("grad.base_model.model." + model->parameter_names()[i]);
      dg = std::max(dg, max_rel(model->parameters()[i].grad(), g));
      ++grads;
    }
    size_t ref_grads = 0;
    for (const auto& [k, v] : ref) ref_grads += k.rfind("grad.", 0) == 0;
    EXPECT_EQ(grads, ref_grads);
    // only the adapters are trainable: the base weights get no gradient
    auto* lm = dynamic_cast<const lm_detail::TransformerLM*>(model.get());
    for (const auto& w : lm->base_weights()) EXPECT_FALSE(w.requires_grad());
    // merging gives merge_and_unload's model: a plain directory with its logits
    TempDir tmp;
    save_pretrained(*model, merged_weights(*model, {}), (tmp.path() / "merged").string());
    auto plain = load_pretrained((tmp.path() / "merged").string());
    torch::NoGradGuard ng;
    const double dm = max_rel(plain->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{}),
                              ref.at("merged_logits"));
    std::printf("[ %s ] max relative difference from PEFT: logits %.3g, loss %.3g, adapter gradients %.3g (%zu), "
                "merged model's logits %.3g\n", name.c_str(), dl, dloss, dg, grads, dm);
    EXPECT_LT(dl, 1e-4);
    EXPECT_LT(dloss, 1e-4);
    EXPECT_LT(dg, 1e-4);
    EXPECT_LT(dm, 1e-4);
  }
}

TEST(LoRA, SaveLoadAndMergedSave) {
  TempDir tmp;
  auto ref = read_map(fixture("llama-tiny-lora") + "/reference.safetensors");
  auto model = load_pretrained(fixture("llama-tiny"));
  load_adapter(*model, fixture("llama-tiny-lora"));
  const std::string ad = (tmp.path() / "adapter").string();
  save_adapter(*model, {}, ad);
  save_adapter(*model, {}, ad);  // replaces its own
  auto again = load_pretrained(fixture("llama-tiny"));
  load_adapter(*again, ad);
  torch::NoGradGuard ng;
  auto a = model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
  auto b = again->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
  EXPECT_TRUE(torch::equal(a, b));
  // the merged save is a plain pretrained directory with the same logits (to float rounding)
  const std::string md = (tmp.path() / "merged").string();
  save_pretrained(*model, merged_weights(*model, {}), md);
  auto plain = load_pretrained(md);
  EXPECT_EQ(lora_config_of(*plain), nullptr);
  auto c = plain->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
  EXPECT_LT(max_rel(c, a), 1e-5);
  // what save_adapter refuses
  std::ofstream((tmp.path() / "notes.txt").string()) << "mine";
  expect_error([&] { save_adapter(*model, {}, (tmp.path() / "notes.txt").string()); }, Status::InvalidArgument,
               {"refusing"});
  expect_error([&] { save_adapter(*plain, {}, (tmp.path() / "x").string()); }, Status::InvalidArgument,
               {"no LoRA adapters"});
}

// LoRA trains under DDP and ZeRO 1-3 on 2 simulated ranks: the base weights do not move, the
// adapters do, identically on both ranks; and the per-rank peak of an AdamW step is lower
// than full fine-tuning's (no gradients and no optimizer state for the base weights).
TEST(LoRA, TrainsUnderEveryStrategyWithALowerPeak) {
  auto ref = read_map(fixture("llama-tiny") + "/reference.safetensors");
  LMConfig cfg = parse_lm_config(R"({"model_type": "llama", "vocab_size": 128, "hidden_size": 128,
      "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 64})", "config");
  std::printf("  strategy  peak full fine-tune  peak LoRA (MiB per rank, AdamW, 4 x 12 tokens)\n");
  for (Strategy s : {Strategy::DDP, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3}) {
    uint64_t peaks[2] = {0, 0};
    for (int lora = 0; lora < 2; ++lora) {
      std::vector<std::vector<torch::Tensor>> adapters(2);
      bool base_moved = false;
      auto rep = on_ranks(2, s, 1, [&](Accelerator& acc, sim::Rank& rk) {
        std::shared_ptr<Model> model = make_causal_lm(cfg, at::detail::createCPUGenerator(5));
        LoraConfig lc;
        lc.r = 4;
        lc.target_modules = {"all-linear"};
        if (lora) add_lora(*model, lc, at::detail::createCPUGenerator(6));
        auto* lm = dynamic_cast<const lm_detail::TransformerLM*>(model.get());
        std::vector<torch::Tensor> before;
        for (const auto& w : lm->base_weights()) before.push_back(w.detach().clone());
        AdamWConfig ac;
        ac.lr = 1e-2;
        auto opt = std::make_shared<Optimizer>(model, ac);
        acc.prepare(model, opt, nullptr, nullptr);
        auto ids = ref.at("input_ids").repeat({2, 1}).narrow(0, 0, 4);
        for (int step = 0; step < 2; ++step) {
          auto [sum, n] = causal_lm_loss_sum(acc.forward(*model, {ids}), ids);
          acc.backward(sum / static_cast<double>(n), n);
          acc.step();
        }
        auto full = acc.full_parameters(*model);
        adapters[static_cast<size_t>(rk.rank())] = full;
        if (lora)
          for (size_t i = 0; i < before.size(); ++i)
            if (!torch::equal(before[i], lm->base_weights()[i].detach())) base_moved = true;
      });
      ASSERT_TRUE(rep.ok()) << strategy_name(s) << ": " << rep.first_error();
      peaks[lora] = std::max(rep.ranks[0].peak_bytes, rep.ranks[1].peak_bytes);
      for (size_t i = 0; i < adapters[0].size(); ++i) EXPECT_TRUE(torch::equal(adapters[0][i], adapters[1][i]));
      if (lora) {
        EXPECT_FALSE(base_moved) << strategy_name(s);
        // B started at zero and moved: the adapters trained
        EXPECT_GT(adapters[0][1].abs().max().item<double>(), 0.0) << strategy_name(s);
      }
    }
    std::printf("  %-8s  %19.2f  %9.2f\n", strategy_name(s), peaks[0] / 1048576.0, peaks[1] / 1048576.0);
    EXPECT_LT(peaks[1], peaks[0]) << strategy_name(s);
  }
}
}  // namespace
}  // namespace accel
