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
//                [--lora-targets M,...] [--attention auto|eager|fused] [--json]
//       the memory per GPU of training a causal LM (a named shape, a config.json or its
//       directory): weights, gradients, optimizer state, activations, the peak; a table, or
//       JSON lines (one per strategy) (runtime/models/memory_estimate.h, docs/lm.md)
//   accel version
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "base/text.h"
#include "runtime/blas.h"
#include "runtime/checkpoint_format.h"
#include "runtime/comm/factory.h"
#include "runtime/comm/nccl/nccl.h"
#include "runtime/paths.h"

#include "accel/accel.h"
#include "runtime/comm/communicator.h"
#include "runtime/safetensors.h"
#include "sim/world.h"
#include "tools/launch.h"

namespace {

using accel::comm::DataType;
using accel::comm::RedOp;
using accel::sim::CollKind;

struct BenchArgs {
  std::string op = "all_reduce";
  std::string ranks = "8";
  std::string min_bytes = "1MiB", max_bytes = "64MiB", predict_to = "8GiB";
  std::string topology = "8xH100";
  std::string dtype = "float32";
  std::string redop = "sum";
  double factor = 2.0;
  int iters = 5, warmup = 1;
  std::string max_measure = "2GiB";
  bool json = false;
};

const std::map<std::string, CollKind>& kinds() {
  static const std::map<std::string, CollKind> k = {{"all_reduce", CollKind::AllReduce},
                                                    {"reduce_scatter", CollKind::ReduceScatter},
                                                    {"all_gather", CollKind::AllGather},
                                                    {"broadcast", CollKind::Broadcast},
                                                    {"reduce", CollKind::Reduce}};
  return k;
}

DataType parse_dtype(const std::string& s) {
  for (int i = 0; i < accel::comm::kNumDataTypes; ++i)
    if (s == accel::comm::dtype_name(static_cast<DataType>(i))) return static_cast<DataType>(i);
  throw accel::Error(accel::Status::InvalidArgument, "unknown dtype '" + s + "' (float32, float16, bfloat16, int32, ...)");
}

RedOp parse_redop(const std::string& s) {
  for (int i = 0; i < accel::comm::kNumRedOps; ++i)
    if (s == accel::comm::op_name(static_cast<RedOp>(i))) return static_cast<RedOp>(i);
  throw accel::Error(accel::Status::InvalidArgument, "unknown reduction '" + s + "' (sum, prod, max, min, avg)");
}

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  for (int n : out)
    if (n < 1) throw accel::Error(accel::Status::InvalidArgument, "rank counts must be >= 1");
  if (out.empty()) throw accel::Error(accel::Status::InvalidArgument, "no rank count in '" + s + "'");
  return out;
}

// Measured seconds per operation for `bytes` (nccl-tests' size) on n ranks, or -1 when the
// buffers would not fit the --max-measure budget.
double measure(CollKind kind, uint64_t bytes, int n, DataType t, RedOp op, const BenchArgs& a, uint64_t max_measure) {
  const size_t es = accel::comm::dtype_size(t);
  // per-rank send and recv buffer sizes for nccl-tests' "size" convention
  uint64_t send_b = bytes, recv_b = bytes;
  if (kind == CollKind::ReduceScatter) recv_b = bytes / n;
  if (kind == CollKind::AllGather) send_b = bytes / n;
  if ((send_b + recv_b) * static_cast<uint64_t>(n) > max_measure) return -1;
  accel::sim::WorldOptions wo;
  wo.world_size = n;
  wo.topology = a.topology;
  wo.timeout_seconds = 600;
  accel::sim::World world(wo);
  double per_op = -1;
  auto rep = world.run([&](accel::sim::Rank& rk) {
    std::vector<char> send(send_b), recv(recv_b);
    std::memset(send.data(), rk.rank() + 1, send.size());
    std::memset(recv.data(), 0, recv.size());
    const size_t count = send_b / es;
    auto& c = rk.comm();
    auto once = [&] {
      switch (kind) {
        case CollKind::AllReduce: c.all_reduce(send.data(), recv.data(), count, t, op)->wait(); break;
        case CollKind::ReduceScatter: c.reduce_scatter(send.data(), recv.data(), recv_b / es, t, op)->wait(); break;
        case CollKind::AllGather: c.all_gather(send.data(), recv.data(), count, t)->wait(); break;
        case CollKind::Broadcast: c.broadcast(send.data(), recv.data(), count, t, 0)->wait(); break;
        case CollKind::Reduce: c.reduce(send.data(), recv.data(), count, t, op, 0)->wait(); break;
        default: break;
      }
    };
    for (int i = 0; i < a.warmup; ++i) once();
    c.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) once();
    c.barrier();
    if (rk.rank() == 0) per_op = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.iters;
  });
  if (!rep.ok()) throw accel::Error(accel::Status::Internal, rep.first_error());
  return per_op;
}

int sim_bench(const BenchArgs& a) {
  auto it = kinds().find(a.op);
  if (it == kinds().end()) throw accel::Error(accel::Status::InvalidArgument, "unknown collective '" + a.op + "'");
  const CollKind kind = it->second;
  const DataType t = parse_dtype(a.dtype);
  const RedOp op = parse_redop(a.redop);
  const accel::sim::Topology topo = accel::sim::topology_preset(a.topology);
  const uint64_t lo = accel::text::parse_bytes(a.min_bytes), hi = accel::text::parse_bytes(a.max_bytes);
  const uint64_t predict_hi = std::max(hi, accel::text::parse_bytes(a.predict_to));
  const uint64_t max_measure = accel::text::parse_bytes(a.max_measure);
  if (lo == 0 || lo > hi) throw accel::Error(accel::Status::InvalidArgument, "need 0 < --min-bytes <= --max-bytes");
  if (a.factor <= 1.0) throw accel::Error(accel::Status::InvalidArgument, "--factor must be > 1");
  const size_t es = accel::comm::dtype_size(t);
  for (int n : parse_ranks(a.ranks)) {
    if (!a.json) {
      std::printf("# accel sim bench: %s, %d ranks, %s, %s, topology %s (%s)\n", a.op.c_str(), n, a.dtype.c_str(),
                  a.redop.c_str(), topo.name.c_str(), topo.description.c_str());
      std::printf("# measured: wall time of the simulator on this machine (real bytes); predicted: the cost model on %s\n",
                  topo.name.c_str());
      std::printf("# %12s %12s %14s %14s %10s %11s %11s\n", "size(B)", "count", "measured(us)", "predicted(us)", "algorithm",
                  "algbw(GB/s)", "busbw(GB/s)");
    }
    for (double b = static_cast<double>(lo); b <= static_cast<double>(predict_hi) * 1.0000001; b *= a.factor) {
      // a size every rank's share divides evenly
      uint64_t bytes = static_cast<uint64_t>(b);
      uint64_t unit = es * static_cast<uint64_t>(n);
      bytes = std::max<uint64_t>(unit, bytes / unit * unit);
      auto est = accel::sim::collective_cost(topo, kind, bytes, n);
      const double algbw = static_cast<double>(bytes) / est.seconds / 1e9;
      const double busbw = algbw * accel::sim::busbw_factor(kind, n);
      const double measured = bytes <= hi ? measure(kind, bytes, n, t, op, a, max_measure) : -1;
      const uint64_t count = (kind == CollKind::AllGather || kind == CollKind::ReduceScatter) ? bytes / es / n : bytes / es;
      if (a.json) {
        std::printf("{\"bench\":\"sim_bench\",\"op\":\"%s\",\"ranks\":%d,\"dtype\":\"%s\",\"topology\":\"%s\",\"bytes\":%llu,"
                    "\"count\":%llu,\"measured_us\":%s,\"predicted_us\":%.3f,\"algorithm\":\"%s\",\"algbw_gbps\":%.3f,"
                    "\"busbw_gbps\":%.3f}\n",
                    a.op.c_str(), n, a.dtype.c_str(), topo.name.c_str(), static_cast<unsigned long long>(bytes),
                    static_cast<unsigned long long>(count),
                    measured < 0 ? "null" : std::to_string(measured * 1e6).c_str(), est.seconds * 1e6,
                    est.algorithm.c_str(), algbw, busbw);
      } else {
        char m[32];
        if (measured < 0)
          std::snprintf(m, sizeof m, "%s", "-");
        else
          std::snprintf(m, sizeof m, "%.1f", measured * 1e6);
        std::printf("  %12llu %12llu %14s %14.1f %10s %11.2f %11.2f\n", static_cast<unsigned long long>(bytes),
                    static_cast<unsigned long long>(count), m, est.seconds * 1e6, est.algorithm.c_str(), algbw, busbw);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

// A checkpoint's file, checked against the manifest's size and CRC-32.
std::string checked(const std::string& dir, const std::map<std::string, accel::ckpt::FileEntry>& files,
                    const std::string& name) {
  const std::string path = dir + "/" + name;
  auto it = files.find(name);
  ACCEL_CHECK(it != files.end(), accel::Status::Format, dir, "/manifest.json does not list '", name, "'");
  std::string bytes = accel::safetensors::read_file(path);
  ACCEL_CHECK(bytes.size() == it->second.bytes, accel::Status::Format, path, ": ", bytes.size(),
              " bytes, the manifest says ", it->second.bytes, " (truncated?)");
  ACCEL_CHECK(accel::safetensors::crc32_hex(bytes.data(), bytes.size()) == it->second.crc32, accel::Status::Format, path,
              ": CRC-32 does not match the manifest (corrupted)");
  return bytes;
}

int merge_weights(const std::string& dir, const std::string& out) {
  using accel::Status;
  const std::string mpath = dir + "/" + accel::ckpt::names::kManifest;
  // the output never replaces anything but an earlier safetensors file
  accel::paths::check_file_target(out, accel::paths::FileKind::Safetensors, "OUT");
  const accel::ckpt::Manifest m = accel::ckpt::parse_manifest(accel::safetensors::read_file(mpath), mpath);
  const auto& files = m.files;
  uint64_t file_bytes = 0;  // the values the checkpoint's files can hold bound what the shapes may claim
  for (const auto& [name, f] : files) file_bytes += f.bytes;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> values;
  for (const auto& p : m.parameters) {
    names.push_back(p.name);
    shapes.push_back(p.shape);
    uint64_t n = 1;
    for (int64_t d : p.shape) {
      ACCEL_CHECK(d == 0 || n <= file_bytes / 4 / static_cast<uint64_t>(d), Status::Format, mpath, ": the shape of '",
                  p.name, "' holds more values than the checkpoint's files");
      n *= static_cast<uint64_t>(d);
    }
    values.emplace_back(static_cast<size_t>(n));
  }
  std::vector<int64_t> covered(names.size(), 0);
  auto take = [&](const std::string& file, const std::string& bytes, const std::string& name, size_t pi, int64_t start,
                  int64_t len) {
    const auto h = accel::safetensors::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), dir + "/" + file);
    for (const auto& t : h.tensors) {
      if (t.name != name) continue;
      ACCEL_CHECK(t.dtype == "F32" && static_cast<int64_t>(t.end - t.begin) == len * 4, accel::Status::Format, dir, "/",
                  file, ": '", name, "' is not ", len, " fp32 values");
      ACCEL_CHECK(start >= 0 && start + len <= static_cast<int64_t>(values[pi].size()), accel::Status::Format, mpath,
                  ": a range of '", name, "' is outside the parameter");
      std::memcpy(values[pi].data() + start, bytes.data() + h.data_start + t.begin, static_cast<size_t>(len) * 4);
      covered[pi] += len;
      return;
    }
    accel::fail(accel::Status::Format, dir, "/", file, ": no tensor '", name, "'");
  };
  size_t files_read = 0;
  if (m.layout == "full") {
    const std::string bytes = checked(dir, files, accel::ckpt::names::kModel);
    ++files_read;
    for (size_t i = 0; i < names.size(); ++i) take(accel::ckpt::names::kModel, bytes, names[i], i, 0, static_cast<int64_t>(values[i].size()));
  } else {
    for (const auto& sh : m.shards) {
      const std::string bytes = checked(dir, files, sh.model);
      ++files_read;
      for (const auto& pc : sh.pieces) {
        ACCEL_CHECK(pc.param < names.size(), accel::Status::Format, mpath, ": a shard names parameter ", pc.param, " of ",
                    names.size());
        take(sh.model, bytes, names[pc.param], pc.param, pc.start, pc.len);
      }
    }
  }
  std::vector<accel::safetensors::TensorView> views;
  size_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    ACCEL_CHECK(covered[i] == static_cast<int64_t>(values[i].size()), accel::Status::Format, mpath, ": the shards hold ",
                covered[i], " of the ", values[i].size(), " values of '", names[i], "'");
    views.push_back({names[i], "F32", shapes[i], values[i].data(), values[i].size() * 4});
    total += values[i].size() * 4;
  }
  accel::safetensors::write_file_atomic(out, accel::safetensors::serialize(views, {{"format", "pt"}}));
  std::printf("merged %zu parameters (%zu bytes of fp32) from %zu file%s of %s into %s\n", names.size(), total, files_read,
              files_read == 1 ? "" : "s", dir.c_str(), out.c_str());
  return 0;
}

}  // namespace

// `accel env`: what a bug report needs, as `accelerate env` prints it.
int env() {
  {  // a matmul large enough to go through BLAS, so that the BLAS is loaded and initialised
    const at::Tensor a = at::ones({64, 64});
    (void)at::mm(a, a).sum().item<float>();
  }
  const accel::blas::Info b = accel::blas::info();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const char* obl = std::getenv("OPENBLAS_NUM_THREADS");
  std::printf("- accel version: %s (ACCEL_VERSION_NUMBER %d, libaccel.so.0)\n", accel_version_string(),
              accel_version_number());
  std::printf("- libtorch version: %s (C++ ABI %s)\n", TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI ? "cxx11" : "pre-cxx11");
  std::printf("- BLAS: %s%s%s\n", b.name.c_str(), b.details.empty() ? "" : ", ", b.details.c_str());
  std::printf("- BLAS library: %s\n", b.path.empty() ? "(none mapped)" : b.path.c_str());
  std::printf("- threads: libtorch intra-op %d, inter-op %d, BLAS %s; %u cores; OMP_NUM_THREADS=%s, "
              "OPENBLAS_NUM_THREADS=%s\n",
              static_cast<int>(at::get_num_threads()), static_cast<int>(at::get_num_interop_threads()),
              b.threads > 0 ? std::to_string(b.threads).c_str() : "(follows OpenMP or unknown)",
              std::thread::hardware_concurrency(), omp ? omp : "unset", obl ? obl : "unset");
  std::printf("- libtorch built with: OpenMP %s, MKL %s, LAPACK %s, MKL-DNN %s\n", at::hasOpenMP() ? "yes" : "no",
              at::hasMKL() ? "yes" : "no", at::hasLAPACK() ? "yes" : "no", at::hasMKLDNN() ? "yes" : "no");
  {  // the kernel sets the CPU libraries picked (docs/performance.md, "Kernel sets": how to pick lower ones)
    auto var = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v && *v ? v : "unset");
    };
    const accel::blas::Cpu& c = accel::blas::cpu();
    std::printf("- CPU: %s; AVX2 %s, AVX-512 %s, AVX-512 BF16 %s, AMX-BF16 %s; ATEN_CPU_CAPABILITY=%s, "
                "ONEDNN_MAX_CPU_ISA=%s, OPENBLAS_CORETYPE=%s\n",
                c.model.empty() ? "(unknown)" : c.model.c_str(), c.avx2 ? "yes" : "no", c.avx512 ? "yes" : "no",
                c.avx512_bf16 ? "yes" : "no", c.amx_bf16 ? "yes" : "no", var("ATEN_CPU_CAPABILITY").c_str(),
                var("ONEDNN_MAX_CPU_ISA").c_str(), var("OPENBLAS_CORETYPE").c_str());
    std::string why;
    const bool native = accel::blas::cpu_bf16_native(&why);
    std::printf("- bf16 on this CPU: %s (%s); mixed precision auto trains in %s here\n", native ? "native" : "not native",
                why.c_str(), native ? "bf16" : "fp32");
  }
  const bool cuda = torch::cuda::is_available();
  std::printf("- devices: CPU%s\n",
              cuda ? (", CUDA x" + std::to_string(torch::cuda::device_count())).c_str()
                   : "; CUDA: not available (this libtorch or machine has none)");
  std::printf("- communication backends: %s\n", accel::comm::backend_names().c_str());
  try {  // the simulated NCCL that ACCEL_BACKEND=sim loads (accel launch --backend sim)
    std::printf("- simulated NCCL (ACCEL_BACKEND=sim): %s\n", accel::comm::sim_nccl_library().c_str());
  } catch (const std::exception& e) {
    std::printf("- simulated NCCL (ACCEL_BACKEND=sim): not loadable: %s\n", e.what());
  }
  try {  // the real NCCL and CUDA runtime that ACCEL_BACKEND=nccl loads (never linked)
    std::printf("- NCCL and CUDA runtime (ACCEL_BACKEND=nccl, loaded at run time): %s\n",
                accel::comm::real_nccl_library().c_str());
  } catch (const std::exception& e) {
    std::printf("- NCCL and CUDA runtime (ACCEL_BACKEND=nccl, loaded at run time): not found: %s\n", e.what());
  }
  std::printf("- simulator topologies:");
  for (const auto& name : accel::sim::topology_preset_names()) std::printf(" %s", name.c_str());
  std::printf("\n");
  return 0;
}

struct EstimateArgs {
  std::string model;
  std::string precision = "no", dtype = "float32", optimizer = "adamw", strategy, attention = "auto";
  std::string lora_targets;
  int world = 1;
  int64_t batch = 1, seq = 0, lora_rank = 0;
  bool ckpt = false, json = false;
};

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

int main(int argc, char** argv) {
  CLI::App app{"accel: an embeddable training runtime; tools for its simulator"};
  app.require_subcommand(1);
  auto* version = app.add_subcommand("version", "print the library version");
  auto* envcmd = app.add_subcommand("env", "versions, BLAS, threads, devices and backends: paste it into a bug report");
  auto* sim = app.add_subcommand("sim", "the multi-GPU simulator");
  sim->require_subcommand(1);
  BenchArgs a;
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
  bench->add_option("--iters,-i", a.iters, "timed iterations per size")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--warmup,-w", a.warmup, "untimed iterations per size")->capture_default_str()->check(CLI::NonNegativeNumber);
  bench->add_option("--max-measure", a.max_measure, "skip measuring sizes whose buffers (all ranks) exceed this")
      ->capture_default_str();
  bench->add_flag("--json", a.json, "JSON lines instead of a table");
  auto* topos = sim->add_subcommand("topologies", "list the cost model's topology presets");
  std::string merge_dir, merge_out;
  auto* merge = app.add_subcommand("merge-weights", "one consolidated model.safetensors from a checkpoint directory");
  merge->add_option("dir", merge_dir, "the checkpoint directory (accel_save_state)")->required();
  merge->add_option("out", merge_out, "the safetensors file to write")->required();
  EstimateArgs ea;
  auto* est = app.add_subcommand("estimate-memory", "memory per GPU of training a causal LM (weights, gradients, "
                                                    "optimizer state, activations)");
  est->add_option("model", ea.model,
                  "a named shape (gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-7b, llama-13b, llama-70b, tiny-llama), "
                  "a config.json or its directory")
      ->required();
  est->add_option("--mixed-precision", ea.precision, "no, bf16 or fp16 (autocast, fp32 master weights)")->capture_default_str();
  est->add_option("--dtype", ea.dtype, "the parameters' dtype: float32 or bfloat16")->capture_default_str();
  est->add_option("--optimizer", ea.optimizer, "adamw, sgd, momentum, adafactor or lamb")->capture_default_str();
  est->add_option("--strategy", ea.strategy, "no, ddp, zero1, zero2, zero3, or a comma-separated list (default: no "
                                             "for one GPU, all four for several)");
  est->add_option("--num-processes,-n", ea.world, "GPUs (processes)")->capture_default_str()->check(CLI::PositiveNumber);
  est->add_option("--batch,-b", ea.batch, "sequences per micro-batch and GPU")->capture_default_str()->check(CLI::PositiveNumber);
  est->add_option("--seq,-s", ea.seq, "tokens per sequence (default: min(1024, max_position_embeddings))");
  est->add_flag("--gradient-checkpointing", ea.ckpt, "recompute each block in backward");
  est->add_option("--lora-rank", ea.lora_rank, "LoRA adapters of this rank (0: full fine-tuning)")->capture_default_str();
  est->add_option("--lora-targets", ea.lora_targets, "the adapted modules (default: PEFT's for the family)");
  est->add_option("--attention", ea.attention, "auto (this build's kernel), eager or fused")->capture_default_str();
  est->add_flag("--json", ea.json, "JSON lines (one per strategy) instead of a table");
  accel::launch::Options launch_options;
  auto* launch = accel::launch::add_command(app, launch_options);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*launch) {
      return accel::launch::run(*launch, launch_options);
    } else if (*envcmd) {
      return env();
    } else if (*version) {
      std::printf("accel %s (library %d)\n", accel_version_string(), accel_version_number());
    } else if (*topos) {
      for (const auto& name : accel::sim::topology_preset_names()) {
        // "Nx8x..." presets: describe the two-node one
        auto t = accel::sim::topology_preset(name.rfind("Nx", 0) == 0 ? "2" + name.substr(1) : name);
        std::printf("%-14s %s\n", name.c_str(), t.description.c_str());
      }
    } else if (*bench) {
      return sim_bench(a);
    } else if (*est) {
      return estimate(ea);
    } else if (*merge) {
      return merge_weights(merge_dir, merge_out);
    }
  } catch (const accel::Error& e) {
    std::fprintf(stderr, "accel: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accel: %s\n", e.what());
    return 1;
  }
  return 0;
}
