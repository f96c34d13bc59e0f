// `accel estimate-memory`: the memory per GPU of training a causal LM, through the C ABI's
// accel_estimate_memory (runtime/models/memory_estimate.h, docs/lm.md). Torch-free.
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

}  // namespace

// accel estimate-memory: the C ABI's accel_estimate_memory, once per strategy.
int estimate(const EstimateArgs& a) {
  static const std::map<std::string, int> precisions = {{"no", 0}, {"fp32", 0}, {"bf16", 1}, {"fp16", 2}};
  static const std::map<std::string, int> strategies = {{"no", 0}, {"ddp", 1}, {"zero1", 2}, {"zero2", 3}, {"zero3", 4},
                                                        {"shard_grad_op", 3}, {"full_shard", 4}};
  static const std::map<std::string, int> optimizers = {
      {"sgd", 0}, {"momentum", 1}, {"adamw", 2}, {"adafactor", 3}, {"lamb", 4}};
  static const std::map<std::string, int> attentions = {{"auto", 0}, {"eager", 1}, {"fused", 2}};
  static const std::map<std::string, int> dtypes = {{"float32", ACCEL_FLOAT32}, {"bfloat16", ACCEL_BFLOAT16}};
  auto pick = [](const std::map<std::string, int>& table, const std::string& v, const char* what) {
    auto it = table.find(v);
    if (it == table.end()) {
      std::string known;
      for (const auto& [k, x] : table) known += (known.empty() ? "" : ", ") + k;
      throw accel::Error(accel::Status::InvalidArgument, std::string(what) + " '" + v + "' is not one of " + known);
    }
    return it->second;
  };
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
  const std::string list = a.strategy.empty() ? (a.world > 1 ? "ddp,zero1,zero2,zero3" : "no") : a.strategy;
  std::vector<std::pair<std::string, accel_memory_estimate>> rows;
  std::stringstream ss(list);
  for (std::string s; std::getline(ss, s, ',');) {
    o.strategy = static_cast<accel_strategy>(pick(strategies, s, "--strategy"));
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
      j["bytes_per_gpu"] = {{"weights", e.weights},         {"gradients", e.gradients},
                            {"optimizer", e.optimizer_state}, {"activations", e.activations},
                            {"temporaries", e.temporaries},   {"total", e.total}};
      std::printf("%s\n", j.dump().c_str());
    }
  }
  if (a.json) return 0;
  const accel_memory_estimate& f = rows.front().second;
  std::printf("%s: %.4g M parameters (%.4g M trained); %s, %s weights, %s; %d GPU%s; micro-batch %lld x %lld tokens%s%s; "
              "%s attention\n\n",
              a.model.c_str(), f.parameters / 1e6, f.trainable_parameters / 1e6,
              a.precision == "bf16" ? "bf16 autocast" : a.precision == "fp16" ? "fp16 autocast" : "no autocast",
              a.dtype.c_str(), a.optimizer.c_str(), a.world, a.world == 1 ? "" : "s", static_cast<long long>(a.batch),
              static_cast<long long>(f.seq_len), a.ckpt ? ", gradient checkpointing" : "",
              a.lora_rank > 0 ? (", LoRA rank " + std::to_string(a.lora_rank)).c_str() : "",
              f.attention == 2 ? "fused" : "eager");
  std::printf("%-8s %12s %12s %12s %12s %12s %12s\n", "strategy", "weights", "gradients", "optimizer", "activations",
              "temporaries", "total/GPU");
  for (const auto& [s, e] : rows)
    std::printf("%-8s %12s %12s %12s %12s %12s %12s\n", s.c_str(), human_bytes(static_cast<double>(e.weights)).c_str(),
                human_bytes(static_cast<double>(e.gradients)).c_str(),
                human_bytes(static_cast<double>(e.optimizer_state)).c_str(),
                human_bytes(static_cast<double>(e.activations)).c_str(),
                human_bytes(static_cast<double>(e.temporaries)).c_str(), human_bytes(static_cast<double>(e.total)).c_str());
  std::printf("\nThe peak of a training step on each GPU. `accelerate estimate-memory` counts the weights only: %s in "
              "fp32, %s in 16 bits.\n",
              human_bytes(4.0 * static_cast<double>(f.parameters)).c_str(),
              human_bytes(2.0 * static_cast<double>(f.parameters)).c_str());
  return 0;
}

}  // namespace accel::tools
