// `accel estimate-memory`: the memory per GPU of training a causal LM, through the C ABI's
// accel_estimate_memory (runtime/models/memory_estimate.h, docs/lm.md), and with --budget
// the plans that fit, best first (docs/memory.md, "Plans that fit"). Torch-free.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "accel/accel.h"
#include "base/status.h"
#include "base/text.h"
#include "sim/cost.h"
#include "tools/commands.h"

namespace accel::tools {
namespace {

std::string human_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (bytes >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024));
  else if (bytes >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

const std::map<std::string, int>& strategy_table() {
  static const std::map<std::string, int> t = {{"no", 0},    {"ddp", 1},           {"zero1", 2},      {"zero2", 3},
                                               {"zero3", 4}, {"shard_grad_op", 3}, {"full_shard", 4}};
  return t;
}

int pick(const std::map<std::string, int>& table, const std::string& v, const char* what) {
  auto it = table.find(v);
  if (it == table.end()) {
    std::string known;
    for (const auto& [k, x] : table) known += (known.empty() ? "" : ", ") + k;
    throw accel::Error(accel::Status::InvalidArgument, std::string(what) + " '" + v + "' is not one of " + known);
  }
  return it->second;
}

const std::map<std::string, int>& offload_table() {
  static const std::map<std::string, int> t = {
      {"none", ACCEL_OFFLOAD_NONE}, {"optimizer", ACCEL_OFFLOAD_OPTIMIZER}, {"parameters", ACCEL_OFFLOAD_PARAMETERS}};
  return t;
}
const std::map<std::string, int>& quant_table() {
  static const std::map<std::string, int> t = {
      {"none", ACCEL_QUANT_NONE}, {"nf4", ACCEL_QUANT_NF4}, {"fp4", ACCEL_QUANT_FP4}, {"int8", ACCEL_QUANT_INT8}};
  return t;
}
const char* offload_label(int o) {
  return o == ACCEL_OFFLOAD_PARAMETERS ? "parameters" : o == ACCEL_OFFLOAD_OPTIMIZER ? "optimizer" : "none";
}
const char* quant_label(int q) { return q == ACCEL_QUANT_NF4 ? "nf4" : q == ACCEL_QUANT_FP4 ? "fp4" : q == ACCEL_QUANT_INT8 ? "int8" : "none"; }

// The options every row shares (precision, dtype, optimizer, shape of the batch, LoRA targets).
accel_memory_estimate_options common_options(const EstimateArgs& a) {
  static const std::map<std::string, int> precisions = {{"no", 0}, {"fp32", 0}, {"bf16", 1}, {"fp16", 2}};
  static const std::map<std::string, int> optimizers = {
      {"sgd", 0}, {"momentum", 1}, {"adamw", 2}, {"adafactor", 3}, {"lamb", 4}};
  static const std::map<std::string, int> attentions = {{"auto", 0}, {"eager", 1}, {"fused", 2}};
  static const std::map<std::string, int> dtypes = {{"float32", ACCEL_FLOAT32}, {"bfloat16", ACCEL_BFLOAT16}};
  accel_memory_estimate_options o = ACCEL_MEMORY_ESTIMATE_OPTIONS_INIT;
  o.mixed_precision = static_cast<accel_precision>(pick(precisions, a.precision, "--mixed-precision"));
  o.weights_dtype = static_cast<accel_dtype>(pick(dtypes, a.dtype, "--dtype"));
  o.optimizer = static_cast<accel_optimizer_kind>(pick(optimizers, a.optimizer, "--optimizer"));
  o.attention = pick(attentions, a.attention, "--attention");
  o.world_size = a.world;
  o.micro_batch = a.batch;
  o.seq_len = a.seq;
  o.gradient_checkpointing = a.ckpt;
  o.lora_rank = static_cast<int32_t>(a.lora_rank);
  o.lora_target_modules = a.lora_targets.empty() ? nullptr : a.lora_targets.c_str();
  o.offload = static_cast<accel_offload>(a.offload.empty() ? 0 : pick(offload_table(), a.offload, "--offload"));
  o.quantization =
      static_cast<accel_quantization>(a.quantization.empty() ? 0 : pick(quant_table(), a.quantization, "--quantization"));
  o.double_quant = a.double_quant;
  return o;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string s; std::getline(ss, s, ',');) out.push_back(s);
  return out;
}

// One configuration the plan search tried: what it sets, the estimate, the predicted step.
struct Plan {
  std::string strategy;
  bool ckpt = false, double_quant = false;
  int offload = 0, quant = 0;
  int64_t lora = 0;
  accel_memory_estimate e{};
  double compute = 0, comm = 0, transfer = 0, step = 0;
  int fidelity = 0;  // 0 full fine-tuning, 1 LoRA, 2 LoRA on an int8 base, 3 on a 4-bit one
  std::string label() const {
    std::string l = lora == 0 ? "full fine-tuning" : "LoRA r" + std::to_string(lora);
    if (quant) l += std::string(" on an ") + (quant == ACCEL_QUANT_INT8 ? "int8" : quant == ACCEL_QUANT_NF4 ? "NF4" : "FP4") +
                    " base" + (double_quant ? " (double quant)" : "");
    if (strategy != "no") l += ", " + strategy;
    if (offload) l += offload == ACCEL_OFFLOAD_PARAMETERS ? " + optimizer and parameter offload" : " + optimizer offload";
    if (ckpt) l += " + checkpointing";
    return l;
  }
};

// The plans: every combination of what the command line left open, estimated, the step
// priced on the topology (docs/memory.md, "Plans that fit").
int plans(const EstimateArgs& a) {
  const uint64_t budget = accel::text::parse_bytes(a.budget, "--budget");
  const uint64_t host_budget = a.host_budget.empty() ? 0 : accel::text::parse_bytes(a.host_budget, "--host-budget");
  static const std::map<std::string, int> sorts = {{"fidelity", 0}, {"time", 1}, {"memory", 2}};
  const int sort = pick(sorts, a.sort, "--sort");
  const accel::sim::Topology topo = accel::sim::topology_preset(a.topology);
  accel_memory_estimate_options base = common_options(a);
  {  // the command line itself must be valid (its own errors, not a plan's)
    accel_memory_estimate e{};
    e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
    base.strategy = static_cast<accel_strategy>(a.world > 1 ? 1 : 0);
    if (!a.strategy.empty()) base.strategy = static_cast<accel_strategy>(pick(strategy_table(), split(a.strategy).front(), "--strategy"));
    if (accel_estimate_memory(a.model.c_str(), &base, &e) != ACCEL_OK)
      throw accel::Error(accel::Status::InvalidArgument, accel_last_error(nullptr));
  }
  const std::vector<std::string> strategies =
      !a.strategy.empty() ? split(a.strategy) : a.world > 1 ? std::vector<std::string>{"ddp", "zero1", "zero2", "zero3"}
                                                            : std::vector<std::string>{"no"};
  std::vector<int> offloads = {ACCEL_OFFLOAD_NONE, ACCEL_OFFLOAD_OPTIMIZER, ACCEL_OFFLOAD_PARAMETERS};
  if (!a.offload.empty()) offloads = {pick(offload_table(), a.offload, "--offload")};
  const std::vector<bool> ckpts = a.ckpt ? std::vector<bool>{true} : std::vector<bool>{false, true};
  const std::vector<int64_t> ranks = a.lora_rank > 0 ? std::vector<int64_t>{a.lora_rank} : std::vector<int64_t>{0, 16};
  std::vector<int> quants = {ACCEL_QUANT_NONE, ACCEL_QUANT_INT8, ACCEL_QUANT_NF4};
  if (!a.quantization.empty()) quants = {pick(quant_table(), a.quantization, "--quantization")};
  std::vector<Plan> all;
  std::map<std::string, std::string> skipped;  // why a kind of plan was not possible, once each
  for (const auto& s : strategies)
    for (int64_t r : ranks)
      for (int q : quants) {
        if (q != ACCEL_QUANT_NONE && r == 0) continue;  // a quantized base trains through adapters
        for (int off : offloads)
          for (bool ck : ckpts) {
            if (off == ACCEL_OFFLOAD_PARAMETERS && s != "zero3" && s != "full_shard") continue;  // ZeRO-3's shard
            Plan p;
            p.strategy = s;
            p.offload = off;
            p.ckpt = ck;
            p.quant = q;
            p.lora = r;
            // NF4/FP4 searched: QLoRA's double quantization; given: as the command line says
            p.double_quant = (q == ACCEL_QUANT_NF4 || q == ACCEL_QUANT_FP4) && (a.quantization.empty() || a.double_quant);
            accel_memory_estimate_options o = base;
            o.strategy = static_cast<accel_strategy>(pick(strategy_table(), s, "--strategy"));
            o.offload = static_cast<accel_offload>(off);
            o.gradient_checkpointing = ck;
            o.quantization = static_cast<accel_quantization>(q);
            o.double_quant = p.double_quant;
            o.lora_rank = static_cast<int32_t>(r);
            p.e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
            if (accel_estimate_memory(a.model.c_str(), &o, &p.e) != ACCEL_OK) {
              skipped.emplace(r == 0 ? "full fine-tuning with " + s : "LoRA with " + s, accel_last_error(nullptr));
              continue;
            }
            p.fidelity = r == 0 ? 0 : q == ACCEL_QUANT_NONE ? 1 : q == ACCEL_QUANT_INT8 ? 2 : 3;
            // the step on the topology: forward 2 P T FLOPs, backward 4 P T (LoRA: 2 P T, the
            // input gradients), one more forward under checkpointing, at gpu_flops x mfu; the
            // strategy's communication of the trained parameters, hidden behind that compute as
            // the simulator's estimate_step hides it; the offload's transfers over the host link:
            // the gradients' copies beside the backward (what it does not hide is exposed), the
            // rest (the weights at the step, ZeRO-3's gathers from the host) serial
            const double P = static_cast<double>(p.e.parameters), Pt = static_cast<double>(p.e.trainable_parameters);
            const double tokens = static_cast<double>(a.batch) * static_cast<double>(p.e.seq_len);
            const double rate = topo.gpu_flops * topo.mfu;
            const double fwd = 2 * P * tokens;
            p.compute = (fwd * (r == 0 ? 3 : 2) + (ck ? fwd : 0)) / rate;
            if (a.world > 1 && Pt > 0) {
              // estimate_step's compute is 6 Pt T' / rate: T' chosen so that it is this plan's
              const double t_equiv = p.compute * rate / (6 * Pt);
              p.comm = accel::sim::estimate_step(topo, s == "no" ? "ddp" : s, Pt, t_equiv, a.world).exposed;
            }
            if (topo.host_link_bandwidth > 0) {
              const double bw = topo.host_link_bandwidth, grads = static_cast<double>(p.e.gradient_transfer_bytes);
              const double backward = ((r == 0 ? 2 * fwd : fwd) + (ck ? fwd : 0)) / rate;
              p.transfer = (static_cast<double>(p.e.transfer_bytes) - grads) / bw + std::max(0.0, grads / bw - backward);
            }
            p.step = p.compute + p.comm + p.transfer;
            all.push_back(p);
          }
      }
  auto fits = [&](const Plan& p) { return p.e.total <= budget && (host_budget == 0 || p.e.host <= host_budget); };
  std::vector<Plan> ok;
  for (const auto& p : all)
    if (fits(p)) ok.push_back(p);
  auto key = [&](const Plan& p) {
    if (sort == 1) return std::make_tuple(p.step, static_cast<double>(p.fidelity), static_cast<double>(p.e.total));
    if (sort == 2) return std::make_tuple(static_cast<double>(p.e.total), p.step, static_cast<double>(p.fidelity));
    return std::make_tuple(static_cast<double>(p.fidelity), p.step, static_cast<double>(p.e.total));
  };
  std::stable_sort(ok.begin(), ok.end(), [&](const Plan& x, const Plan& y) { return key(x) < key(y); });
  const std::string gpus = std::to_string(a.world) + (a.world == 1 ? " GPU" : " GPUs");
  if (a.json) {
    int rank = 0;
    for (const auto& p : ok) {
      if (rank >= a.plans) break;
      nlohmann::json j;
      j["plan"] = ++rank;
      j["model"] = a.model;
      j["training"] = p.lora == 0 ? "full" : "lora";
      j["lora_rank"] = p.lora;
      j["quantization"] = quant_label(p.quant);
      j["double_quant"] = p.double_quant;
      j["strategy"] = p.strategy;
      j["offload"] = offload_label(p.offload);
      j["gradient_checkpointing"] = p.ckpt;
      j["world_size"] = a.world;
      j["topology"] = topo.name;
      j["device_bytes"] = p.e.total;
      j["host_bytes"] = p.e.host;
      j["transfer_bytes_per_step"] = p.e.transfer_bytes;
      j["gradient_transfer_bytes_per_step"] = p.e.gradient_transfer_bytes;
      j["budget_bytes"] = budget;
      j["step_seconds"] = p.step;
      j["compute_seconds"] = p.compute;
      j["exposed_comm_seconds"] = p.comm;
      j["transfer_seconds"] = p.transfer;
      std::printf("%s\n", j.dump().c_str());
    }
  } else {
    std::printf("%s on %s with %s each (%s: %.0f TFLOP/s at %.0f%% MFU, host link %.1f GB/s a direction); %s, %s "
                "weights, %s; micro-batch %lld x %lld tokens\n",
                a.model.c_str(), gpus.c_str(), human_bytes(static_cast<double>(budget)).c_str(), topo.name.c_str(),
                topo.gpu_flops / 1e12, 100 * topo.mfu, topo.host_link_bandwidth / 1e9,
                a.precision == "bf16" ? "bf16 autocast" : a.precision == "fp16" ? "fp16 autocast" : "no autocast",
                a.dtype.c_str(), a.optimizer.c_str(), static_cast<long long>(a.batch),
                static_cast<long long>(all.empty() ? a.seq : all.front().e.seq_len));
    std::printf("%zu of %zu plans fit%s, best first (by %s):\n\n", ok.size(), all.size(),
                host_budget ? (" (host memory " + human_bytes(static_cast<double>(host_budget)) + " per GPU)").c_str() : "",
                sort == 1 ? "predicted step time" : sort == 2 ? "device memory" : "fidelity, then predicted step time");
    if (!ok.empty()) {
      std::printf("%3s  %-76s %12s %12s %12s %10s\n", "#", "plan", "device/GPU", "host/GPU", "moved/step", "step");
      int rank = 0;
      for (const auto& p : ok) {
        if (rank >= a.plans) break;
        char step[32];
        std::snprintf(step, sizeof step, p.step >= 1 ? "%.2f s" : "%.1f ms", p.step >= 1 ? p.step : p.step * 1e3);
        std::printf("%3d  %-76s %12s %12s %12s %10s\n", ++rank, p.label().c_str(),
                    human_bytes(static_cast<double>(p.e.total)).c_str(), human_bytes(static_cast<double>(p.e.host)).c_str(),
                    human_bytes(static_cast<double>(p.e.transfer_bytes)).c_str(), step);
      }
      if (ok.size() > static_cast<size_t>(a.plans))
        std::printf("     ... and %zu more (--plans %zu)\n", ok.size() - static_cast<size_t>(a.plans), ok.size());
      const Plan& b = ok.front();
      std::printf("\nBest: %s on %s: %s, %s per GPU", a.model.c_str(), gpus.c_str(), b.label().c_str(),
                  human_bytes(static_cast<double>(b.e.total)).c_str());
      if (b.e.host) std::printf(" and %s of host memory", human_bytes(static_cast<double>(b.e.host)).c_str());
      std::printf(".\n");
    }
    for (const auto& [what, why] : skipped) std::printf("Not possible: %s (%s)\n", what.c_str(), why.c_str());
    std::printf("\nStep times are the cost model's (the compute at the preset's rate, the strategy's exposed "
                "communication, the offload's transfers: the gradients' beside the backward, the rest serial): "
                "docs/memory.md, \"Plans that fit\".\n");
  }
  if (ok.empty()) {
    const Plan* smallest = nullptr;
    for (const auto& p : all)
      if (!smallest || p.e.total < smallest->e.total) smallest = &p;
    if (smallest)
      std::fprintf(stderr, "accel: no plan fits in %s per GPU%s; the smallest, %s, needs %s (host %s)\n",
                   human_bytes(static_cast<double>(budget)).c_str(), host_budget ? " and the host budget" : "",
                   smallest->label().c_str(), human_bytes(static_cast<double>(smallest->e.total)).c_str(),
                   human_bytes(static_cast<double>(smallest->e.host)).c_str());
    else
      std::fprintf(stderr, "accel: no plan could be estimated\n");
    return 1;
  }
  return 0;
}

}  // namespace

// accel estimate-memory: the C ABI's accel_estimate_memory, once per strategy; with
// --budget, the plans that fit.
int estimate(const EstimateArgs& a) {
  if (!a.budget.empty()) return plans(a);
  ACCEL_CHECK(a.host_budget.empty(), accel::Status::InvalidArgument, "--host-budget goes with --budget (the plans that fit)");
  accel_memory_estimate_options o = common_options(a);
  const std::string list = a.strategy.empty() ? (a.world > 1 ? "ddp,zero1,zero2,zero3" : "no") : a.strategy;
  std::vector<std::pair<std::string, accel_memory_estimate>> rows;
  for (const std::string& s : split(list)) {
    o.strategy = static_cast<accel_strategy>(pick(strategy_table(), s, "--strategy"));
    accel_memory_estimate e{};
    e.version = ACCEL_MEMORY_ESTIMATE_VERSION;
    if (accel_estimate_memory(a.model.c_str(), &o, &e) != ACCEL_OK) {
      std::fprintf(stderr, "accel: %s\n", accel_last_error(nullptr));
      return 2;
    }
    rows.emplace_back(s, e);
    if (a.json) {
      nlohmann::json j;
      j["model"] = a.model;
      j["parameters"] = e.parameters;
      j["trainable_parameters"] = e.trainable_parameters;
      j["mixed_precision"] = a.precision;
      j["weights_dtype"] = a.dtype;
      j["optimizer"] = a.optimizer;
      j["strategy"] = s;
      j["world_size"] = a.world;
      j["micro_batch"] = a.batch;
      j["seq_len"] = e.seq_len;
      j["gradient_checkpointing"] = a.ckpt;
      j["lora_rank"] = a.lora_rank;
      j["attention"] = e.attention == 2 ? "fused" : "eager";
      j["offload"] = offload_label(o.offload);
      j["quantization"] = quant_label(o.quantization);
      j["double_quant"] = a.double_quant;
      j["bytes_per_gpu"] = {{"weights", e.weights},         {"gradients", e.gradients},
                            {"optimizer", e.optimizer_state}, {"activations", e.activations},
                            {"temporaries", e.temporaries},   {"total", e.total},
                            {"host", e.host},                 {"transfer_per_step", e.transfer_bytes},
                            {"gradient_transfer_per_step", e.gradient_transfer_bytes}};
      std::printf("%s\n", j.dump().c_str());
    }
  }
  if (a.json) return 0;
  const accel_memory_estimate& f = rows.front().second;
  std::string extras;
  if (a.lora_rank > 0) extras += ", LoRA rank " + std::to_string(a.lora_rank);
  if (o.quantization) extras += std::string(" on a ") + quant_label(o.quantization) + " base" + (a.double_quant ? " (double quant)" : "");
  if (o.offload) extras += o.offload == ACCEL_OFFLOAD_PARAMETERS ? ", optimizer and parameters offloaded" : ", optimizer offloaded";
  std::printf("%s: %.4g M parameters (%.4g M trained); %s, %s weights, %s; %d GPU%s; micro-batch %lld x %lld tokens%s%s; "
              "%s attention\n\n",
              a.model.c_str(), f.parameters / 1e6, f.trainable_parameters / 1e6,
              a.precision == "bf16" ? "bf16 autocast" : a.precision == "fp16" ? "fp16 autocast" : "no autocast",
              a.dtype.c_str(), a.optimizer.c_str(), a.world, a.world == 1 ? "" : "s", static_cast<long long>(a.batch),
              static_cast<long long>(f.seq_len), a.ckpt ? ", gradient checkpointing" : "", extras.c_str(),
              f.attention == 2 ? "fused" : "eager");
  const bool host = o.offload != ACCEL_OFFLOAD_NONE;
  std::printf("%-8s %12s %12s %12s %12s %12s %12s", "strategy", "weights", "gradients", "optimizer", "activations",
              "temporaries", "total/GPU");
  if (host) std::printf(" %12s %12s", "host/GPU", "moved/step");
  std::printf("\n");
  for (const auto& [s, e] : rows) {
    std::printf("%-8s %12s %12s %12s %12s %12s %12s", s.c_str(), human_bytes(static_cast<double>(e.weights)).c_str(),
                human_bytes(static_cast<double>(e.gradients)).c_str(),
                human_bytes(static_cast<double>(e.optimizer_state)).c_str(),
                human_bytes(static_cast<double>(e.activations)).c_str(),
                human_bytes(static_cast<double>(e.temporaries)).c_str(), human_bytes(static_cast<double>(e.total)).c_str());
    if (host)
      std::printf(" %12s %12s", human_bytes(static_cast<double>(e.host)).c_str(),
                  human_bytes(static_cast<double>(e.transfer_bytes)).c_str());
    std::printf("\n");
  }
  std::printf("\nThe peak of a training step on each GPU%s. `accelerate estimate-memory` counts the weights only: %s in "
              "fp32, %s in 16 bits. --budget SIZE lists the plans that fit.\n",
              host ? " (device memory; host/GPU: what offload keeps in host memory)" : "",
              human_bytes(4.0 * static_cast<double>(f.parameters)).c_str(),
              human_bytes(2.0 * static_cast<double>(f.parameters)).c_str());
  return 0;
}

}  // namespace accel::tools
