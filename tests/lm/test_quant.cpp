// Quantized bases (issue 37): NF4, FP4, double quantization and int8 bytes against
// bitsandbytes', and one QLoRA training step against peft + bitsandbytes
// (tests/fixtures/quant, made by scripts/quant_fixtures.py with bitsandbytes on the CPU).
#include <cstring>

#include "common.h"

namespace accel {
namespace {

using namespace lm_test;

const std::string kQuant = ACCEL_QUANT_FIXTURES;

// Bit-for-bit equality of two tensors of the same dtype and element count (NaN bits too).
bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel()) return false;
  const torch::Tensor x = a.to(torch::kCPU).contiguous(), y = b.to(torch::kCPU).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

int64_t mismatches(const torch::Tensor& a, const torch::Tensor& b) {
  return a.numel() != b.numel() ? -1 : (a.reshape({-1}).to(torch::kCPU) != b.reshape({-1}).to(torch::kCPU)).sum().item<int64_t>();
}

// How many float32 steps apart two floats are.
int64_t ulps(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  if ((x < 0) != (y < 0)) return std::abs(static_cast<int64_t>(x & 0x7fffffff)) + std::abs(static_cast<int64_t>(y & 0x7fffffff));
  return std::abs(static_cast<int64_t>(x) - static_cast<int64_t>(y));
}

TEST(Quant, FourBitBytesEqualBitsandbytes) {
  const auto ref = read_map(kQuant + "/bytes.safetensors");
  int cases = 0, checked = 0;
  for (const auto& [key, input] : ref) {
    if (key.size() < 6 || key.compare(key.size() - 6, 6, ".input") != 0) continue;
    const std::string name = key.substr(0, key.size() - 6);
    ++cases;
    // a 1-D case is one row
    const torch::Tensor w = input.dim() == 1 ? input.view({1, -1}) : input;
    for (QuantType t : {QuantType::NF4, QuantType::FP4})
      for (bool dq : {false, true}) {
        const std::string k = name + "." + quant_name(t) + (dq ? "dq" : "");
        SCOPED_TRACE(k);
        const QuantizedWeight q = quantize_weight(w, t, dq, input.scalar_type());
        EXPECT_TRUE(same_bytes(q.data, ref.at(k + ".packed"))) << mismatches(q.data, ref.at(k + ".packed"))
                                                                << " of " << q.data.numel() << " bytes differ";
        torch::Tensor plain_absmax;  // the float32 absmax before the double quantization
        if (!dq) {
          EXPECT_TRUE(same_bytes(q.absmax, ref.at(k + ".absmax")));
        } else {
          plain_absmax = quantize_weight(w, t, false, input.scalar_type()).absmax;
          // the offset is torch's float mean (its summation order follows the CPU's vector
          // width): the fixture's or a neighbour; the nested bytes are compared for the
          // fixture's offset, and directly when the offsets agree
          const float ref_offset = ref.at(k + ".offset").item<float>();
          EXPECT_LE(ulps(q.offset, ref_offset), 1) << q.offset << " vs " << ref_offset;
          QuantizedWeight again = q;
          quant_detail::double_quantize(again, plain_absmax, ref_offset);
          EXPECT_TRUE(same_bytes(again.absmax, ref.at(k + ".absmax")))
              << mismatches(again.absmax, ref.at(k + ".absmax")) << " of " << again.absmax.numel() << " codes differ";
          EXPECT_TRUE(same_bytes(again.absmax2, ref.at(k + ".absmax2")));
          if (q.offset == ref_offset) {
            EXPECT_TRUE(same_bytes(q.absmax, ref.at(k + ".absmax")));
            EXPECT_TRUE(same_bytes(q.absmax2, ref.at(k + ".absmax2")));
          }
          if (auto it = ref.find(k + ".dequant"); it != ref.end()) {
            // dequantized with the fixture's state: bitsandbytes' values bit for bit
            EXPECT_TRUE(same_bytes(dequantize_weight(again).reshape(input.sizes()), it->second))
                << mismatches(dequantize_weight(again), it->second) << " values differ";
          }
        }
        if (auto it = ref.find(k + ".dequant"); !dq && it != ref.end()) {
          EXPECT_TRUE(same_bytes(dequantize_weight(q).reshape(input.sizes()), it->second))
              << mismatches(dequantize_weight(q), it->second) << " values differ";
        }
        ++checked;
      }
  }
  EXPECT_GE(cases, 6);
  std::printf("[ quant ] %d cases x NF4/FP4 x plain/double: %d quantizations equal bitsandbytes' bytes\n", cases,
              checked);
}

// The tensor-operation dequantization (what a GPU runs) gives the CPU loop's values bit for bit.
TEST(Quant, DequantizationOnAnyDeviceIsTheSame) {
  const auto ref = read_map(kQuant + "/bytes.safetensors");
  int checked = 0;
  for (const std::string name : {"normal_f32", "odd_f32", "bf16", "edge_f32", "many_f32"})
    for (QuantType t : {QuantType::NF4, QuantType::FP4})
      for (bool dq : {false, true}) {
        const torch::Tensor& w = ref.at(name + ".input");
        for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
          const QuantizedWeight q = quantize_weight(w, t, dq, dtype);
          EXPECT_TRUE(same_bytes(quant_detail::dequantize_with_ops(q), dequantize_weight(q)))
              << name << " " << quant_name(t) << (dq ? " double" : "") << " " << c10::toString(dtype);
          ++checked;
        }
      }
  EXPECT_EQ(checked, 60);
}

TEST(Quant, Int8BytesEqualBitsandbytes) {
  const auto ref = read_map(kQuant + "/bytes.safetensors");
  int checked = 0;
  for (const auto& [key, cb] : ref) {
    if (key.size() < 8 || key.compare(key.size() - 8, 8, ".int8.CB") != 0) continue;
    const std::string name = key.substr(0, key.size() - 8);
    SCOPED_TRACE(name);
    const torch::Tensor& w = ref.at(name + ".input");
    const QuantizedWeight q = quantize_weight(w, QuantType::Int8, false, w.scalar_type());
    EXPECT_TRUE(same_bytes(q.data, cb)) << mismatches(q.data, cb) << " of " << cb.numel() << " differ";
    EXPECT_TRUE(same_bytes(q.absmax, ref.at(name + ".int8.SCB")));
    // dequantized (in float32): within half a step of the row's scale of the float16 weight
    QuantizedWeight qf = q;
    qf.dtype = torch::kFloat;
    const torch::Tensor back = dequantize_weight(qf);
    const torch::Tensor step = q.absmax.view({-1, 1}) / 127.0;
    const torch::Tensor err = (back - w.to(torch::kHalf).to(torch::kFloat)).abs() / step;
    EXPECT_LE(err.max().item<double>(), 0.5 + 1e-3);
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(Quant, RefusesBadInput) {
  expect_error([] { quantize_weight(torch::ones({4}), QuantType::NF4, false, torch::kFloat); },
               Status::InvalidArgument, {"2-D"});
  expect_error([] { quantize_weight(torch::ones({4, 4}, torch::kLong), QuantType::NF4, false, torch::kFloat); },
               Status::InvalidArgument, {"float32, bfloat16 or float16"});
  expect_error([] { quantize_weight(torch::ones({4, 4}), QuantType::Int8, true, torch::kFloat); },
               Status::InvalidArgument, {"double quantization"});
  auto w = torch::ones({4, 4});
  w[1][2] = std::nan("");
  expect_error([&] { quantize_weight(w, QuantType::FP4, false, torch::kFloat); }, Status::InvalidArgument,
               {"non-finite"});
}

// A quantized model computes what the same model with its dequantized weights computes: the
// quantization is the only difference (both families, GPT-2's Conv1D transposed).
TEST(QLoRA, ForwardIsTheDequantizedModels) {
  for (const std::string name : {"llama-tiny", "gpt2-tiny", "qwen2-tiny"})
    for (QuantType t : {QuantType::NF4, QuantType::FP4, QuantType::Int8}) {
      SCOPED_TRACE(name + " " + quant_name(t));
      auto ref = read_map(fixture(name) + "/reference.safetensors");
      auto model = load_pretrained(fixture(name));
      const auto plain_logits = [&] {
        torch::NoGradGuard ng;
        return model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
      }();
      quantize_base(*model, t, t != QuantType::Int8);
      EXPECT_EQ(quant_type_of(*model), t);
      TempDir tmp;
      save_pretrained(*load_pretrained(fixture(name)), merged_weights(*model, {}), (tmp.path() / "deq").string());
      auto deq = load_pretrained((tmp.path() / "deq").string());
      torch::NoGradGuard ng;
      const auto a = model->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
      const auto b = deq->forward({ref.at("input_ids"), ref.at("attention_mask")}, ForwardMode{});
      EXPECT_LT(max_rel(a, b), 1e-5);
      // and the quantization moved the logits (a check that cannot pass by accident)
      EXPECT_GT(max_rel(a, plain_logits), 1e-4);
    }
}

// One QLoRA training step (NF4, double quantization, float32 compute, LoRA r 4 on every
// linear module, AdamW) against transformers + bitsandbytes + peft on the CPU, on a Llama whose
// linear modules take 64 inputs (bitsandbytes' CPU dequantization is right for such rows only:
// scripts/quant_fixtures.py).
//
// Tolerance: both sides dequantize to the same float32 weights (checked through the bytes
// below) and then run the same float32 arithmetic in other orders. A dot product of K terms
// in another order differs by at most about K eps |x||w| (K = 64 here, eps = 2^-24 per
// rounding, so 64 * 6e-8 = 3.8e-6 of the terms' scale); through two blocks of about eight
// chained products, the softmax and the loss, 1e-4 of the scale bounds it with a margin of 3.
// AdamW's first step moves each adapter value by lr * g / (|g| + eps) = +-lr: the values
// after it are compared where |g| is above the gradients' own error.
TEST(QLoRA, StepMatchesPeftAndBitsandbytes) {
  const std::string dir = kQuant + "/qlora-llama";
  auto ref = read_map(dir + "/reference.safetensors");
  std::shared_ptr<Model> model = load_pretrained(dir + "/base");  // bfloat16 weights, float32 parameters
  quantize_base(*model, QuantType::NF4, true);
  // the base's bytes are transformers' (its quantization at load)
  auto* lm = model->as_lm();
  int weights = 0;
  for (size_t i = 0; i < lm->base_names().size(); ++i) {
    const QuantizedWeight* q = lm->quantized(i);
    const std::string& n = lm->base_names()[i];
    const std::string key = "base." + n.substr(0, n.size() - std::strlen(".weight"));
    ASSERT_EQ(q != nullptr, ref.count(key + ".packed") == 1) << n;
    if (!q) continue;
    EXPECT_TRUE(same_bytes(q->data, ref.at(key + ".packed"))) << n;
    const float off = ref.at(key + ".offset").item<float>();
    EXPECT_LE(ulps(q->offset, off), 1) << n;
    if (q->offset == off) {
      EXPECT_TRUE(same_bytes(q->absmax, ref.at(key + ".absmax"))) << n;
      EXPECT_TRUE(same_bytes(q->absmax2, ref.at(key + ".absmax2"))) << n;
    }
    ++weights;
  }
  EXPECT_EQ(weights, 14);
  load_adapter(*model, dir);
  ASSERT_EQ(model->parameters().size(), 28u);
  Options o;
  o.device = DeviceKind::CPU;
  Accelerator acc(o);
  AdamWConfig ac;
  ac.lr = 1e-2;
  ac.weight_decay = 0.01;
  auto opt = std::make_shared<Optimizer>(model, ac);
  acc.prepare(model, opt, nullptr, nullptr);
  auto logits = acc.forward(*model, {ref.at("input_ids"), ref.at("attention_mask")});
  auto loss = causal_lm_loss(logits, ref.at("labels"));
  acc.backward(loss);
  const double dl = max_rel(logits, ref.at("logits")), dloss = max_rel(loss, ref.at("loss"));
  double dg = 0;
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const auto& g = ref.at("grad." + model->parameter_names()[i]);
    grads.push_back(model->parameters()[i].grad().detach().clone());
    dg = std::max(dg, max_rel(grads.back(), g));
  }
  acc.step();
  double da = 0;
  int64_t compared = 0, skipped = 0;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const auto& g = ref.at("grad." + model->parameter_names()[i]);
    const auto& want = ref.at("after." + model->parameter_names()[i]);
    const torch::Tensor clear = g.abs() > 1e-3 * g.abs().max();  // far above the gradients' error
    const torch::Tensor diff = (model->parameters()[i].detach() - want).abs() / ac.lr;
    da = std::max(da, diff.masked_select(clear).max().item<double>());
    compared += clear.sum().item<int64_t>();
    skipped += clear.numel() - clear.sum().item<int64_t>();
  }
  std::printf("[ qlora ] NF4 + double quantization, LoRA r 4 on 14 modules, vs peft + bitsandbytes: logits %.3g, "
              "loss %.3g, gradients %.3g (relative); after AdamW %.3g of lr on %lld values (%lld with |g| below "
              "1e-3 of the tensor's largest not compared)\n",
              dl, dloss, dg, da, static_cast<long long>(compared), static_cast<long long>(skipped));
  EXPECT_LT(dl, 1e-4);
  EXPECT_LT(dloss, 1e-4);
  EXPECT_LT(dg, 1e-4);
  EXPECT_LT(da, 1e-3);
  EXPECT_GT(compared, 10 * skipped);
}

TEST(QLoRA, RefusalsNameTheWayOut) {
  std::shared_ptr<Model> model = load_pretrained(fixture("llama-tiny"));
  quantize_base(*model, QuantType::NF4, false);
  expect_error([&] { Optimizer opt(model, AdamWConfig{}); }, Status::InvalidState, {"quantized (nf4)", "LoRA"});
  expect_error([&] { quantize_base(*model, QuantType::FP4, false); }, Status::InvalidArgument, {"already"});
  TempDir tmp;
  expect_error([&] { save_pretrained(*model, {}, (tmp.path() / "x").string()); }, Status::InvalidArgument,
               {"quantized", "adapter"});
  LoraConfig lc;
  lc.r = 2;
  add_lora(*model, lc, at::detail::createCPUGenerator(1));
  EXPECT_NO_THROW(Optimizer(model, AdamWConfig{}));
  save_adapter(*model, {}, (tmp.path() / "adapter").string());  // the adapters save as PEFT's
  EXPECT_TRUE(fs::exists(tmp.path() / "adapter" / "adapter_model.safetensors"));
  auto other = load_pretrained(fixture("llama-tiny"));
  add_lora(*other, lc, at::detail::createCPUGenerator(1));
  expect_error([&] { quantize_base(*other, QuantType::NF4, false); }, Status::InvalidArgument, {"before adding LoRA"});
  auto third = load_pretrained(fixture("llama-tiny"));
  expect_error([&] { quantize_base(*third, QuantType::Int8, true); }, Status::InvalidArgument, {"int8"});
}

// QLoRA trains on two simulated ranks under DDP and ZeRO-3 (the adapters equal on both, the
// quantized base untouched), in less memory than LoRA on the float32 base; gradient
// checkpointing gives the same gradients through the dequantizing backward.
TEST(QLoRA, TrainsOnRanksInLessMemory) {
  auto ref = read_map(fixture("llama-tiny") + "/reference.safetensors");
  LMConfig cfg = parse_lm_config(R"({"model_type": "llama", "vocab_size": 128, "hidden_size": 256,
      "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 64})", "config");
  for (Strategy s : {Strategy::DDP, Strategy::Zero3}) {
    uint64_t peaks[2] = {0, 0};
    for (int quant = 0; quant < 2; ++quant) {
      std::vector<std::vector<torch::Tensor>> adapters(2);
      bool base_moved = false;
      auto rep = on_ranks(2, s, 1, [&](Accelerator& acc, sim::Rank& rk) {
        std::shared_ptr<Model> model = make_causal_lm(cfg, at::detail::createCPUGenerator(5));
        if (quant) quantize_base(*model, QuantType::NF4, true);
        LoraConfig lc;
        lc.r = 4;
        lc.target_modules = {"all-linear"};
        add_lora(*model, lc, at::detail::createCPUGenerator(6));
        auto* lm = model->as_lm();
        std::vector<torch::Tensor> before;
        for (size_t i = 0; i < lm->base_weights().size(); ++i)
          before.push_back(lm->quantized(i) ? lm->quantized(i)->data.clone() : lm->base_weights()[i].detach().clone());
        auto opt = std::make_shared<Optimizer>(model, AdamWConfig{});
        acc.prepare(model, opt, nullptr, nullptr);
        auto ids = ref.at("input_ids").repeat({2, 1}).narrow(0, 0, 4);
        for (int step = 0; step < 2; ++step) {
          auto [sum, n] = causal_lm_loss_sum(acc.forward(*model, {ids}), ids);
          acc.backward(sum / static_cast<double>(n), n);
          acc.step();
        }
        adapters[static_cast<size_t>(rk.rank())] = acc.full_parameters(*model);
        for (size_t i = 0; i < before.size(); ++i)
          if (!torch::equal(before[i], lm->quantized(i) ? lm->quantized(i)->data : lm->base_weights()[i].detach()))
            base_moved = true;
      });
      ASSERT_TRUE(rep.ok()) << strategy_name(s) << ": " << rep.first_error();
      peaks[quant] = std::max(rep.ranks[0].peak_bytes, rep.ranks[1].peak_bytes);
      for (size_t i = 0; i < adapters[0].size(); ++i) EXPECT_TRUE(torch::equal(adapters[0][i], adapters[1][i]));
      EXPECT_FALSE(base_moved) << strategy_name(s);
      EXPECT_GT(adapters[0][1].abs().max().item<double>(), 0.0) << strategy_name(s);
    }
    std::printf("[ qlora ] %-5s peak per rank: LoRA on the float32 base %.2f MiB, on the NF4 base %.2f MiB\n",
                strategy_name(s), peaks[0] / 1048576.0, peaks[1] / 1048576.0);
    EXPECT_LT(static_cast<double>(peaks[1]), 0.7 * static_cast<double>(peaks[0])) << strategy_name(s);
  }
  // checkpointing: the same gradients
  std::vector<torch::Tensor> g[2];
  for (int ck = 0; ck < 2; ++ck) {
    auto model = make_causal_lm(cfg, at::detail::createCPUGenerator(5));
    quantize_base(*model, QuantType::NF4, true);
    LoraConfig lc;
    lc.r = 4;
    lc.target_modules = {"all-linear"};
    add_lora(*model, lc, at::detail::createCPUGenerator(6));
    for (size_t i = 1; i < model->parameters().size(); i += 2)  // B non-zero: A gets gradients too
      model->parameters()[i].detach().normal_(0, 0.1, at::detail::createCPUGenerator(7));
    set_gradient_checkpointing(*model, ck == 1);
    auto ids = ref.at("input_ids");
    causal_lm_loss(model->forward({ids}, ForwardMode{}), ids).backward();
    for (const auto& p : model->parameters()) g[ck].push_back(p.grad().clone());
  }
  for (size_t i = 0; i < g[0].size(); ++i) EXPECT_LT(max_rel(g[1][i], g[0][i]), 1e-6) << i;
}

}  // namespace
}  // namespace accel
