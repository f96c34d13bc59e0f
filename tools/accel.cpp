// The `accel` command-line tool.
//
//   accel sim bench [--op all_reduce] [--ranks 8] [--min-bytes 1MiB] [--max-bytes 64MiB]
//                   [--predict-to 8GiB] [--topology 8xH100] [--dtype float32] [--iters 5] [--json]
//       nccl-tests for the simulator: sweeps a collective over sizes on N simulated ranks
//       and prints, per size, the wall time measured on this machine (the simulator moves
//       the real bytes) and the cost model's predicted time on the topology, with algbw
//       and busbw in nccl-tests' sense.
//   accel sim topologies      the cost model's presets
//   accel merge-weights DIR OUT
//       writes one consolidated model.safetensors (fp32, standard format) from a checkpoint
//       directory of accel_save_state, whatever its layout (ZeRO's per-process shards are
//       reassembled); every file is checked against the manifest first
//   accel launch -n N [--nnodes M] [--node-rank R] [--master-addr A] [--master-port P]
//                [--backend B] [--strategy S] [--mixed-precision P] [--timeout SECONDS]
//                [--max-restarts K] [--log-dir DIR] [--grace-period SECONDS] PROGRAM [ARGS...]
//       starts N processes of PROGRAM with torchrun's variables, relays their output
//       prefixed with the rank, stops and reports the group on a failure (tools/launch.h,
//       docs/launch.md)
//   accel estimate-memory MODEL [--mixed-precision no|bf16|fp16] [--dtype float32|bfloat16]
//                [--optimizer adamw|sgd|momentum|adafactor|lamb] [--strategy S[,S...]] [-n N]
//                [--batch B] [--seq T] [--gradient-checkpointing] [--lora-rank R]
//                [--lora-targets M,...] [--attention auto|eager|fused] [--offload none|optimizer]
//                [--quantization none|nf4|fp4|int8] [--double-quant] [--json]
//                [--budget SIZE [--host-budget SIZE] [--topology T] [--plans K] [--sort S]]
//       the memory per GPU of training a causal LM (a named shape, a config.json or its
//       directory): weights, gradients, optimizer state, activations, the peak, host memory
//       under offload; a table, or JSON lines (one per strategy) (runtime/models/
//       memory_estimate.h, docs/lm.md). With --budget: the plans that fit, best first
//       (docs/memory.md, "Plans that fit")
//   accel version, accel --version
//
// This file holds main: the command line (CLI11; the one other file that includes it is
// tools/launch/command.cpp, the launcher's flags) and the dispatch. This executable is
// torch-free (the launcher, --version, --help); the commands that need the runtime are in
// libaccel-tools.so (tools/commands.h, tools/module.cpp), loaded with dlopen when one runs:
// first beside this executable (the build tree), then from the installed library directory. A usage error (CLI11's,
// or a subcommand's own checks) exits 2, whatever CLI11's code; --help and --version exit 0;
// a mistyped command is answered with the closest one. Each subcommand is a file
// of its own: tools/commands.h lists them; `accel launch`: tools/launch.h.
#include <CLI/CLI.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "accel/accel.h"
#include "base/files.h"
#include "base/status.h"
#include "tools/commands.h"
#include "tools/launch.h"

namespace {

// An integer option's lower bound, said in words ("must be at least 1 (got 0)"); CLI11's
// PositiveNumber prints its range up to DBL_MAX, a 300-digit number.
CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        long long x = 0;
        if (!CLI::detail::lexical_cast(v, x)) return "'" + v + "' is not a whole number";
        if (x < min) return "must be at least " + std::to_string(min) + " (got " + v + ")";
        return "";
      },
      ">=" + std::to_string(min));
}

// The optimal string alignment distance (an edit, or two neighbours swapped, counts 1).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// When the command line names a command that does not exist (`accel lanuch`, `accel sim
// bnech`), what to say: the word, and the closest command (a prefix of one, or at most a
// third of its letters off); "" when every word names a command.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* level = &app;
  std::string path = "accel";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;  // the levels that hold commands take no option values
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : level->get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
      if (sub->get_name() == word) next = sub;
    }
    if (names.empty()) return "";
    if (next) {
      if (next->get_subcommands([](const CLI::App*) { return true; }).empty()) return "";
      level = next;
      path += " " + word;
      continue;
    }
    std::string best;
    size_t best_d = std::string::npos;
    for (const auto& n : names) {
      const size_t dn = n.rfind(word, 0) == 0 ? 0 : distance(word, n);
      if (dn < best_d) best_d = dn, best = n;
    }
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    if (best_d <= std::max<size_t>(1, best.size() / 3))
      return "'" + word + "' is not an " + path + " command; did you mean '" + best + "'? (" + path +
             " --help lists them: " + all + ")";
    return "'" + word + "' is not an " + path + " command (" + path + " --help lists them: " + all + ")";
  }
  return "";
}

// Runs a command of libaccel-tools.so: loads it (beside this executable, or where it was
// installed: ACCEL_TOOLS_MODULE_DIR), finds its entry and hands it what was parsed.
int run_module(const accel::tools::Invocation& inv) {
  std::vector<std::string> candidates;
  const std::string dir = accel::files::own_directory();
  if (!dir.empty()) candidates.push_back(dir + "/libaccel-tools.so");
  candidates.push_back(std::string(ACCEL_TOOLS_MODULE_DIR) + "/libaccel-tools.so");
  std::string why;
  for (const auto& path : candidates) {
    if (access(path.c_str(), F_OK) != 0) continue;
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      why += (why.empty() ? "" : "; ") + (e ? std::string(e) : path);
      continue;
    }
    auto entry = reinterpret_cast<accel::tools::ToolsEntry>(dlsym(h, accel::tools::kToolsEntryName));
    if (!entry) {
      why += (why.empty() ? "" : "; ") + path + " has no " + accel::tools::kToolsEntryName;
      continue;
    }
    std::fflush(stdout);
    return entry(&inv, accel::tools::kToolsInterface);  // never unloaded: its static state lives to exit
  }
  if (why.empty()) {
    why = "not found (looked for";
    for (const auto& c : candidates) why += " " + c;
    why += ")";
  }
  std::fprintf(stderr, "accel: '%s' needs libaccel-tools.so, which could not be loaded: %s\n", inv.command.c_str(),
               why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"accel: an embeddable training runtime; tools for its simulator"};
  app.require_subcommand(1);
  const std::string version_text =
      std::string("accel ") + ACCEL_VERSION_STRING + " (library " + std::to_string(ACCEL_VERSION_NUMBER) + ")";
  app.set_version_flag("--version", version_text, "print the version and exit");
  auto* version = app.add_subcommand("version", "print the library version");
  auto* envcmd = app.add_subcommand("env", "versions, BLAS, threads, devices and backends: paste it into a bug report");
  auto* sim = app.add_subcommand("sim", "the multi-GPU simulator");
  sim->require_subcommand(1);
  accel::tools::Invocation inv;
  accel::tools::BenchArgs& a = inv.bench;
  auto* bench = sim->add_subcommand("bench", "nccl-tests for the simulator: measured and predicted collective times");
  bench->add_option("--op", a.op, "all_reduce, reduce_scatter, all_gather, broadcast, reduce")->capture_default_str();
  bench->add_option("--ranks,-n", a.ranks, "rank counts, comma-separated (e.g. 2,4,8)")->capture_default_str();
  bench->add_option("--min-bytes,-b", a.min_bytes, "smallest size (nccl-tests' size)")->capture_default_str();
  bench->add_option("--max-bytes,-e", a.max_bytes, "largest size measured on this machine")->capture_default_str();
  bench->add_option("--predict-to", a.predict_to, "continue the sweep up to this size with predictions only")
      ->capture_default_str();
  bench->add_option("--factor,-f", a.factor, "size multiplier between steps")->capture_default_str();
  bench->add_option("--topology,-t", a.topology, "cost-model preset (accel sim topologies)")->capture_default_str();
  bench->add_option("--dtype,-d", a.dtype, "data type")->capture_default_str();
  bench->add_option("--redop,-o", a.redop, "reduction")->capture_default_str();
  bench->add_option("--iters,-i", a.iters, "timed iterations per size")->capture_default_str()->check(at_least(1));
  bench->add_option("--warmup,-w", a.warmup, "untimed iterations per size")->capture_default_str()->check(at_least(0));
  bench->add_option("--max-measure", a.max_measure, "skip measuring sizes whose buffers (all ranks) exceed this")
      ->capture_default_str();
  bench->add_option("--algo", a.algo, "force the algorithm, in NCCL_ALGO's syntax (Ring, Tree, NVLS, NVLSTree; "
                                      "^NVLS excludes); default: NCCL_ALGO, else the cost model's pick");
  bench->add_flag("--json", a.json, "JSON lines instead of a table");
  auto* topos = sim->add_subcommand("topologies", "list the cost model's topology presets");
  accel::tools::StepArgs& sa = inv.step;
  auto* step = sim->add_subcommand("step", "a training step's collectives replayed on up to 100,000+ simulated GPUs: "
                                           "its predicted time");
  step->add_option("--ranks,-n", sa.ranks, "GPUs (ranks); default: the recording's, else 8")->check(at_least(1));
  step->add_option("--program", sa.program, "replay a recorded run (ACCEL_SIM_PROGRAM=FILE while it ran on "
                                            "simulated ranks) instead of --strategy's pattern");
  step->add_option("--topology,-t", sa.topology, "cost-model preset (default: 8xH100, or Nx8xH100-IB for more than 8)");
  step->add_option("--strategy,-s", sa.strategy, "ddp or zero3")->capture_default_str();
  step->add_option("--params", sa.params, "model parameters")->capture_default_str();
  step->add_option("--tokens", sa.tokens, "tokens per GPU per step")->capture_default_str();
  step->add_option("--layers", sa.layers, "layers (zero3 gathers one at a time)")->capture_default_str()->check(at_least(1));
  step->add_option("--bucket", sa.bucket, "ddp's gradient bucket")->capture_default_str();
  step->add_option("--slow", sa.slow, "RANK:FACTOR, a straggler whose compute takes FACTOR times as long (repeatable)");
  step->add_flag("--json", sa.json, "one JSON line instead of text");
  std::string& merge_dir = inv.merge_dir;
  std::string& merge_out = inv.merge_out;
  auto* merge = app.add_subcommand("merge-weights", "one consolidated model.safetensors from a checkpoint directory");
  merge->add_option("dir", merge_dir, "the checkpoint directory (accel_save_state)")->required();
  merge->add_option("out", merge_out, "the safetensors file to write")->required();
  accel::tools::EstimateArgs& ea = inv.estimate;
  auto* est = app.add_subcommand("estimate-memory", "memory per GPU of training a causal LM (weights, gradients, "
                                                    "optimizer state, activations)");
  est->add_option("model", ea.model,
                  "a named shape (gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-7b, llama-13b, llama-70b, llama-3.2-1b, "
                  "llama-3.2-3b, llama-3.1-8b, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, qwen3-0.6b, mistral-7b, phi-3-mini, "
                  "gemma-2-2b, gemma-3-1b, smollm2-135m, smollm2-1.7b, smollm3-3b, tiny-llama), "
                  "a config.json or its directory")
      ->required();
  est->add_option("--mixed-precision", ea.precision, "no, bf16 or fp16 (autocast, fp32 master weights)")->capture_default_str();
  est->add_option("--dtype", ea.dtype, "the parameters' dtype: float32 or bfloat16")->capture_default_str();
  est->add_option("--optimizer", ea.optimizer, "adamw, sgd, momentum, adafactor or lamb")->capture_default_str();
  est->add_option("--strategy", ea.strategy, "no, ddp, zero1, zero2, zero3, or a comma-separated list (default: no "
                                             "for one GPU, all four for several)");
  est->add_option("--num-processes,-n", ea.world, "GPUs (processes)")->capture_default_str()->check(at_least(1));
  est->add_option("--batch,-b", ea.batch, "sequences per micro-batch and GPU")->capture_default_str()->check(at_least(1));
  est->add_option("--seq,-s", ea.seq, "tokens per sequence (default: min(1024, max_position_embeddings))");
  est->add_flag("--gradient-checkpointing", ea.ckpt, "recompute each block in backward");
  est->add_option("--lora-rank", ea.lora_rank, "LoRA adapters of this rank (0: full fine-tuning)")->capture_default_str();
  est->add_option("--lora-targets", ea.lora_targets, "the adapted modules (default: PEFT's for the family)");
  est->add_option("--attention", ea.attention, "auto (this build's kernel), eager or fused")->capture_default_str();
  est->add_option("--offload", ea.offload, "none, optimizer (its state and ZeRO's master in host memory) or parameters "
                                          "(ZeRO-3: its shard of the weights too)");
  est->add_option("--quantization", ea.quantization, "the LoRA base's linear weights: none, nf4, fp4 or int8");
  est->add_flag("--double-quant", ea.double_quant, "NF4's or FP4's absmax quantized again");
  est->add_option("--budget", ea.budget,
                  "the device memory of one GPU (16GB, 80GiB): print the plans that fit, best first (strategy, offload, "
                  "quantization, checkpointing, LoRA; what is not given is searched)");
  est->add_option("--host-budget", ea.host_budget, "with --budget: the host memory per GPU the plans may use");
  est->add_option("--topology", ea.topology, "with --budget: the preset whose GPU, links and host link price each "
                                            "plan's step (accel sim topologies)")
      ->capture_default_str();
  est->add_option("--plans", ea.plans, "with --budget: how many plans to print")->capture_default_str()->check(at_least(1));
  est->add_option("--sort", ea.sort, "with --budget: fidelity (full fine-tuning first, then LoRA, int8, NF4; then "
                                     "the step time), time (the predicted step) or memory (device bytes)")
      ->capture_default_str();
  est->add_flag("--json", ea.json, "JSON lines (one per strategy, or per plan) instead of a table");
  accel::launch::Options launch_options;
  auto* launch = accel::launch::add_command(app, launch_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string unknown = unknown_command(app, argc, argv);
    if (!unknown.empty()) {
      std::fprintf(stderr, "accel: %s\n", unknown.c_str());
    } else {
      app.exit(e);  // CLI11's message and its hint; the status is the tool's
    }
    return 2;
  }
  if (*version) {
    std::printf("accel %s (library %d)\n", ACCEL_VERSION_STRING, ACCEL_VERSION_NUMBER);
    return 0;
  }
  if (*launch) return accel::tools::report_errors([&] { return accel::launch::run(*launch, launch_options); });
  inv.command = *envcmd ? "env" : *topos ? "sim topologies" : *bench ? "sim bench" : *step ? "sim step" : *est ? "estimate-memory"
                : *merge ? "merge-weights" : "";
  if (inv.command.empty()) return 0;
  return run_module(inv);
}
