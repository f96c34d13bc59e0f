// bench_ddp_processes: DDP and ZeRO-2 on two real processes (accel's Gloo backend) against
// one process training the same model on the global batch.
//
// For each model and strategy, one JSON line:
//
//   {"bench":"ddp_processes","strategy":"ddp","model":"mlp-64-128-64-10","procs":2,"batch":32,
//    "global_batch":64,"multi_us":…,"single_us":…,"single2_us":…,"ratio":…,"vs_single2":…}
//
// multi_us: the optimizer step of 2 processes (this executable re-run with a hidden --worker
//   flag), each with micro-batch B and 1 intra-op thread, through accel's C++ runtime as an
//   application uses it (Accelerator with the communicator world::make_process_group makes
//   for backend "gloo", prepare, next_batch / forward / cross_entropy / backward / step; AdamW).
//   A timed block is: a barrier, K steps, a barrier; its time over K is one sample, the
//   slower process's.
// single_us: one process (this one) training the same model on the global batch 2B with
//   1 intra-op thread (and the BLAS's: Options.num_threads); single2_us the same with 2.
// independent_us: the same 2 processes with no strategy (each trains on its own half of the
//   batches; no gradient exchange): the arithmetic split in two and nothing else, the best
//   that 2 processes can do here.
// ratio = multi_us / single_us; vs_single2 = multi_us / single2_us; independent_ratio =
// independent_us / single_us; vs_independent = multi_us / independent_us (what the
// strategy's communication and bookkeeping cost).
//
// With --peers PYTHON (scripts/bench passes its venv's), PyTorch 2.x on the same 2 processes'
// worth of work: bench/peers/ddp_peer.py run by that interpreter as 2 processes with
// torchrun's variables, 1 thread each, the same model, micro-batch, AdamW and data, timed in
// blocks the same way and interleaved with accel's: torch_ddp_us (DistributedDataParallel,
// Gloo) and torch_fsdp_us (FSDP2, fully_shard with reshard_after_forward=False: ZeRO-2).
// vs_torch_ddp = multi_us / torch_ddp_us, vs_torch_fsdp = multi_us / torch_fsdp_us (accel's
// step time over the peer's, lower is better) on both lines (DDP's and ZeRO-2's). Without
// the peers, or where a peer fails (FSDP2 where this torch cannot run it on CPU and Gloo),
// those fields are null and peers_note says why.
//
// The three worker pairs are started once per model and stay up; each round runs one block
// of every variant (DDP pair, ZeRO-2 pair, independent pair, single with 1 thread and 2, and
// with --peers PyTorch's DDP and FSDP2), in an order that rotates from round to round, while
// the others wait (an idle pair blocks on a pipe), so drifts fall on all of them alike; the
// figures are the medians over the rounds.
//
// What the ratio can be at best here (2 cores): two processes with one thread each do half
// the arithmetic each, in parallel, so ideal data parallelism gives ratio -> 0.5 plus the
// communication (the all-reduce of the gradients, or ZeRO-2's reduce-scatter and
// all-gather); against one process with two threads (vs_single2) the same cores do the same
// work, so ~1.0 is the best, minus what one process loses to threading small matrices.
//
//   bench_ddp_processes [--quick] [--rounds N] [--steps-scale X] [--model SUBSTRING]
//                       [--peers PYTHON [--peers-script PATH]]
//
// Unknown options are ignored with a warning (scripts/bench passes its extra arguments to
// every benchmark).
#include <fcntl.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/procs.h"
#include "runtime/world.h"
#include "runtime/runtime.h"

#ifndef DDP_PEER_DEFAULT_SCRIPT
#define DDP_PEER_DEFAULT_SCRIPT "bench/peers/ddp_peer.py"
#endif

namespace {

using namespace accel;
using bench::median;
using bench::mono_s;

struct ModelCase {
  std::string name;
  std::vector<int64_t> sizes;
  int64_t batch;  // per process
  int steps;      // per timed block
};

const std::vector<ModelCase> kModels = {{"mlp-64-128-64-10", {64, 128, 64, 10}, 32, 200},
                                        {"mlp-512-1024-1024-10", {512, 1024, 1024, 10}, 64, 20}};
constexpr int kProcs = 2;
constexpr int kBatchesPerEpoch = 50;  // of the global batch: the data set's size

// The same data in every process: a fixed seed.
std::pair<torch::Tensor, torch::Tensor> make_data(const ModelCase& c) {
  const int64_t n = c.batch * kProcs * kBatchesPerEpoch;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto X = torch::randn({n, c.sizes.front()}, gen);
  auto Y = torch::randint(0, c.sizes.back(), {n}, gen, torch::kLong);
  return {X, Y};
}

struct Trainer {
  std::unique_ptr<Accelerator> acc;
  std::shared_ptr<Model> model;
  std::shared_ptr<Optimizer> opt;
  std::shared_ptr<DataLoader> loader;

  Trainer(const ModelCase& c, Strategy s, int threads, int64_t batch, std::shared_ptr<comm::Communicator> comm,
          const torch::Tensor& X, const torch::Tensor& Y) {
    Options o;
    o.device = DeviceKind::CPU;
    o.seed = 1;
    o.strategy = s;
    o.num_threads = threads;
    acc = std::make_unique<Accelerator>(o, std::move(comm));
    MLPConfig m;
    m.sizes = c.sizes;
    model = make_mlp(m, acc->generator());
    opt = std::make_shared<Optimizer>(model, AdamWConfig{});
    DataLoaderConfig lc;
    lc.batch_size = batch;
    lc.shuffle = true;
    lc.seed = 3;
    loader = std::make_shared<DataLoader>(X, Y, lc);
    acc->prepare(model, opt, nullptr, loader);
  }
  // `steps` more optimizer steps.
  void run(int steps) {
    const int64_t target = acc->optimizer_steps() + steps;
    while (acc->optimizer_steps() < target) {
      auto b = acc->next_batch(*loader);
      if (!b) continue;  // the end of an epoch
      acc->backward(cross_entropy(acc->forward(*model, {b->inputs}), b->targets));
      acc->step();
    }
  }
};

// ---------------------------------------------------------------------------------------
// A worker: one of the 2 processes. Reads commands on stdin ("run K", "quit"); answers
// "result SECONDS" on stdout after each block.

int worker(int rank, int port, const ModelCase& c, Strategy s) {
  comm::GroupConfig gc;
  gc.backend = "gloo";
  gc.rank = rank;
  gc.world_size = kProcs;
  gc.local_rank = rank;
  gc.local_world_size = kProcs;
  gc.master_addr = "127.0.0.1";
  gc.master_port = port;
  gc.timeout = std::chrono::seconds(300);
  auto comm = world::make_process_group(gc);
  auto [X, Y] = make_data(c);
  Trainer t(c, s, 1, c.batch, comm, X, Y);
  t.run(3);  // warm-up
  char line[256];
  while (std::fgets(line, sizeof line, stdin)) {
    int k = 0;
    if (std::sscanf(line, "run %d", &k) == 1 && k > 0) {
      comm->barrier();
      const double t0 = mono_s();
      t.run(k);
      comm->barrier();
      const double dt = mono_s() - t0;
      std::printf("result %.9f\n", dt);
      std::fflush(stdout);
    } else if (std::strncmp(line, "quit", 4) == 0) {
      comm->barrier();
      return 0;
    } else {
      std::fprintf(stderr, "ddp_processes worker %d: unknown command '%s'\n", rank, line);
      return 2;
    }
  }
  std::fprintf(stderr, "ddp_processes worker %d: its parent went away\n", rank);
  return 1;
}

// A pair of workers and the pipes to them.
struct Pair {
  Strategy strategy;
  std::vector<pid_t> pids;
  std::vector<FILE*> to, from;
};

Pair start_pair(const ModelCase& c, Strategy s) {
  Pair p;
  p.strategy = s;
  const int port = bench::free_port();
  const std::string exe = bench::self_exe();
  for (int r = 0; r < kProcs; ++r) {
    int cmd[2], res[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0) {
      std::perror("ddp_processes: pipe2");
      std::exit(1);
    }
    const pid_t pid = bench::spawn({exe, "--worker", std::to_string(r), "--port", std::to_string(port), "--model-name",
                                    c.name, "--strategy", strategy_name(s)},
                                   cmd[0], res[1]);
    if (pid < 0) {
      std::perror("ddp_processes: fork");
      std::exit(1);
    }
    close(cmd[0]);
    close(res[1]);
    p.pids.push_back(pid);
    p.to.push_back(fdopen(cmd[1], "w"));
    p.from.push_back(fdopen(res[0], "r"));
  }
  return p;
}

// One block of `steps` on the pair: the slower process's seconds per step.
double run_pair(Pair& p, int steps) {
  for (FILE* f : p.to) {
    std::fprintf(f, "run %d\n", steps);
    std::fflush(f);
  }
  double slowest = 0;
  for (size_t r = 0; r < p.from.size(); ++r) {
    char line[256];
    double d = -1;
    while (std::fgets(line, sizeof line, p.from[r])) {
      if (std::sscanf(line, "result %lf", &d) == 1) break;
      std::fprintf(stderr, "[worker %zu] %s", r, line);  // anything else a worker printed
    }
    if (d < 0) {
      std::fprintf(stderr, "ddp_processes: %s worker %zu ended without a result: %s\n", strategy_name(p.strategy), r,
                   bench::wait_all({p.pids[r]}, 30).c_str());
      std::exit(1);
    }
    slowest = std::max(slowest, d);
  }
  return slowest / steps;
}

std::string stop_pair(Pair& p) {
  for (FILE* f : p.to) {
    std::fprintf(f, "quit\n");
    std::fclose(f);
  }
  for (FILE* f : p.from) std::fclose(f);
  return bench::wait_all(p.pids, 60);
}

// The PyTorch peers: 2 processes of bench/peers/ddp_peer.py (DDP and FSDP2 in each), with
// torchrun's variables. `note` says why a side has no figures (empty: both run).
struct PeerPair {
  std::vector<pid_t> pids;
  std::vector<FILE*> to, from;
  std::string torch_version, note;
  bool ddp = false, fsdp = false;
};

// Reads a peer's next line (its other output goes to stderr); "" when it ended.
std::string peer_line(FILE* f) {
  char line[4096];
  if (!std::fgets(line, sizeof line, f)) return "";
  std::string s = line;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string stop_peers(PeerPair& p) {
  for (FILE* f : p.to) {
    std::fprintf(f, "quit\n");
    std::fclose(f);
  }
  for (FILE* f : p.from) std::fclose(f);
  const std::string err = p.pids.empty() ? "" : bench::wait_all(p.pids, 60, "peer");
  p.to.clear(), p.from.clear(), p.pids.clear();
  return err;
}

PeerPair start_peers(const std::string& python, const std::string& script, const ModelCase& c) {
  PeerPair p;
  std::string sizes;
  for (int64_t v : c.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(v);
  const int port = bench::free_port();
  for (int r = 0; r < kProcs; ++r) {
    int cmd[2], res[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0) {
      std::perror("ddp_processes: pipe2");
      std::exit(1);
    }
    const std::vector<std::string> env = {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                                          "WORLD_SIZE=" + std::to_string(kProcs),
                                          "LOCAL_WORLD_SIZE=" + std::to_string(kProcs), "MASTER_ADDR=127.0.0.1",
                                          "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"};
    const pid_t pid = bench::spawn({python, script, "--sizes", sizes, "--batch", std::to_string(c.batch), "--batches",
                                    std::to_string(kBatchesPerEpoch), "--threads", "1"},
                                   cmd[0], res[1], env);
    close(cmd[0]);
    close(res[1]);
    if (pid < 0) {
      close(cmd[1]);
      close(res[0]);
      p.note = "cannot start " + python;
      stop_peers(p);
      return p;
    }
    p.pids.push_back(pid);
    p.to.push_back(fdopen(cmd[1], "w"));
    p.from.push_back(fdopen(res[0], "r"));
  }
  // "ready TORCH_VERSION THREADS FSDP" from each
  std::string fsdp;
  for (int r = 0; r < kProcs; ++r) {
    const std::string line = peer_line(p.from[r]);
    char version[128], status[2048];
    int threads = 0;
    if (std::sscanf(line.c_str(), "ready %127s %d %2047s", version, &threads, status) != 3) {
      p.note = "the peers did not start (" + python + " " + script + " " +
               (line.empty() ? "ended before 'ready': see its errors above" : "answered '" + line + "'") + ")";
      const std::string err = stop_peers(p);
      if (!err.empty()) p.note += "; " + err;
      return p;
    }
    p.torch_version = version;
    if (threads != 1) p.note = "the peers run " + std::to_string(threads) + " threads, not 1";
    if (r == 0) fsdp = status;
  }
  p.ddp = true;
  p.fsdp = fsdp == "ok";
  if (!p.fsdp) {  // its error, spaces restored
    std::string e;
    for (size_t i = 0; i < fsdp.size(); ++i)
      if (fsdp[i] == '%' && i + 2 < fsdp.size()) {
        e += static_cast<char>(std::strtol(fsdp.substr(i + 1, 2).c_str(), nullptr, 16));
        i += 2;
      } else {
        e += fsdp[i];
      }
    p.note = "FSDP2 (fully_shard, reshard_after_forward=False) does not run on CPU and Gloo in torch " +
             p.torch_version + ": " + e;
  }
  return p;
}

// One block of `steps` of a peer side ("ddp", "fsdp"): the slower process's seconds per
// step; NaN (and the side turned off, with a note) where a process answered an error.
double run_peers(PeerPair& p, const char* side, int steps) {
  for (FILE* f : p.to) {
    std::fprintf(f, "run %s %d\n", side, steps);
    std::fflush(f);
  }
  double slowest = 0;
  std::string error;
  for (size_t r = 0; r < p.from.size(); ++r) {
    const std::string line = peer_line(p.from[r]);
    double d = -1;
    if (std::sscanf(line.c_str(), "result %lf", &d) != 1 || d < 0) {
      if (error.empty()) error = line.empty() ? "peer " + std::to_string(r) + " ended" : line;
      continue;
    }
    slowest = std::max(slowest, d);
  }
  if (!error.empty()) {
    std::fprintf(stderr, "ddp_processes: the PyTorch %s peer: %s\n", side, error.c_str());
    p.note = std::string("the PyTorch ") + side + " peer failed: " + error;
    p.ddp = p.fsdp = false;  // a failed collective may leave the pair out of step: no more blocks
    return NAN;
  }
  return slowest / steps;
}

double run_single(const ModelCase& c, int threads, int steps, const torch::Tensor& X, const torch::Tensor& Y) {
  Trainer t(c, Strategy::None, threads, c.batch * kProcs, nullptr, X, Y);
  t.run(3);  // warm-up
  const double t0 = mono_s();
  t.run(steps);
  return (mono_s() - t0) / steps;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--worker") == 0) {
    int rank = -1, port = 0;
    std::string model, strategy;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i], v = argv[i + 1];
      if (a == "--worker") rank = std::atoi(v.c_str());
      else if (a == "--port") port = std::atoi(v.c_str());
      else if (a == "--model-name") model = v;
      else if (a == "--strategy") strategy = v;
    }
    const ModelCase* c = nullptr;
    for (const auto& m : kModels)
      if (m.name == model) c = &m;
    const auto s = parse_strategy(strategy);
    if (rank < 0 || rank >= kProcs || port <= 0 || !c || !s) {
      std::fprintf(stderr, "ddp_processes worker: bad arguments\n");
      return 2;
    }
    try {
      return worker(rank, port, *c, *s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddp_processes worker %d: %s\n", rank, e.what());
      return 1;
    }
  }

  int rounds = 7;
  double scale = 1.0;
  std::string only, peers_python, peers_script = DDP_PEER_DEFAULT_SCRIPT;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      rounds = 3;
      scale = 0.25;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--steps-scale" && i + 1 < argc) {
      scale = std::atof(argv[++i]);
    } else if (a == "--model" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--peers" && i + 1 < argc) {
      peers_python = argv[++i];
    } else if (a == "--peers-script" && i + 1 < argc) {
      peers_script = argv[++i];
    } else if (a == "--threads" && i + 1 < argc) {
      std::fprintf(stderr, "ddp_processes: ignoring --threads %s (the thread counts are this benchmark's subject)\n", argv[++i]);
    } else if (a == "-h" || a == "--help") {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--rounds N] [--steps-scale X] [--model SUBSTRING] [--peers PYTHON "
                   "[--peers-script PATH]]\n",
                   argv[0]);
      return 2;
    } else {
      std::fprintf(stderr, "ddp_processes: ignoring unknown option '%s'\n", a.c_str());
    }
  }
  if (rounds < 1 || !(scale > 0)) {
    std::fprintf(stderr, "ddp_processes: --rounds >= 1 and --steps-scale > 0\n");
    return 2;
  }

  signal(SIGPIPE, SIG_IGN);  // a peer that ends is reported, not fatal by signal
  // the last pair trains without a strategy: each process its own half of the batches, no
  // gradient exchange (what 2 processes on this machine can do at best)
  const std::vector<Strategy> strategies = {Strategy::DDP, Strategy::Zero2, Strategy::None};
  for (const auto& c : kModels) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    const int steps = std::max(2, static_cast<int>(c.steps * scale));
    auto [X, Y] = make_data(c);
    std::vector<Pair> pairs;
    for (Strategy s : strategies) pairs.push_back(start_pair(c, s));
    PeerPair peers;
    if (peers_python.empty()) peers.note = "no peers (--peers PYTHON: scripts/bench passes its venv's)";
    else peers = start_peers(peers_python, peers_script, c);
    // variants: 0..pairs-1 the pairs, then single with 1 and with 2 threads, then the PyTorch
    // peers' DDP and FSDP2 (skipped, NaN, where they do not run)
    const size_t nv = pairs.size() + 4, kTorchDDP = pairs.size() + 2, kTorchFSDP = pairs.size() + 3;
    std::vector<std::vector<double>> samples(nv);
    run_single(c, 1, 2, X, Y);  // warm-up of this process
    for (int r = 0; r < rounds; ++r) {
      std::fprintf(stderr, "ddp_processes: %s round %d/%d\n", c.name.c_str(), r + 1, rounds);
      for (size_t k = 0; k < nv; ++k) {
        const size_t v = (k + static_cast<size_t>(r)) % nv;
        double s = NAN;
        if (v < pairs.size()) s = run_pair(pairs[v], steps);
        else if (v == kTorchDDP) s = peers.ddp ? run_peers(peers, "ddp", steps) : NAN;
        else if (v == kTorchFSDP) s = peers.fsdp ? run_peers(peers, "fsdp", steps) : NAN;
        else s = run_single(c, v == pairs.size() ? 1 : 2, steps, X, Y);
        if (!std::isnan(s)) samples[v].push_back(s);
      }
    }
    if (!peers.pids.empty()) {
      const std::string err = stop_peers(peers);
      if (!err.empty()) std::fprintf(stderr, "ddp_processes: the PyTorch peers: %s\n", err.c_str());
    }
    int failed = 0;
    for (auto& p : pairs) {
      const std::string err = stop_pair(p);
      if (!err.empty()) {
        std::fprintf(stderr, "ddp_processes: %s workers: %s\n", strategy_name(p.strategy), err.c_str());
        ++failed;
      }
    }
    const double single_us = median(samples[pairs.size()]) * 1e6, single2_us = median(samples[pairs.size() + 1]) * 1e6;
    const double independent_us = median(samples[pairs.size() - 1]) * 1e6;
    // the peers' medians over the blocks they ran (NaN, printed null, where none did)
    const double torch_ddp_us = median(samples[kTorchDDP]) * 1e6, torch_fsdp_us = median(samples[kTorchFSDP]) * 1e6;
    for (size_t i = 0; i + 1 < pairs.size(); ++i) {
      const double multi_us = median(samples[i]) * 1e6;
      std::printf(
          "{\"bench\":\"ddp_processes\",\"strategy\":\"%s\",\"model\":\"%s\",\"procs\":%d,\"batch\":%lld,"
          "\"global_batch\":%lld,\"threads_per_proc\":1,\"backend\":\"gloo\",\"steps\":%d,\"rounds\":%d,"
          "\"multi_us\":%.1f,\"single_us\":%.1f,\"single2_us\":%.1f,\"independent_us\":%.1f,\"ratio\":%.3f,"
          "\"vs_single2\":%.3f,\"independent_ratio\":%.3f,\"vs_independent\":%.3f,\"torch\":%s,"
          "\"torch_ddp_us\":%s,\"torch_fsdp_us\":%s,\"vs_torch_ddp\":%s,\"vs_torch_fsdp\":%s,\"peers_note\":%s}\n",
          strategy_name(pairs[i].strategy), c.name.c_str(), kProcs, static_cast<long long>(c.batch),
          static_cast<long long>(c.batch * kProcs), steps, rounds, multi_us, single_us, single2_us, independent_us,
          multi_us / single_us, multi_us / single2_us, independent_us / single_us, multi_us / independent_us,
          peers.torch_version.empty() ? "null" : bench::json_str(peers.torch_version).c_str(),
          bench::json_num(torch_ddp_us, "%.1f").c_str(), bench::json_num(torch_fsdp_us, "%.1f").c_str(),
          bench::json_num(multi_us / torch_ddp_us, "%.3f").c_str(),
          bench::json_num(multi_us / torch_fsdp_us, "%.3f").c_str(),
          peers.note.empty() ? "null" : bench::json_str(peers.note).c_str());
      std::fflush(stdout);
    }
    if (failed) return 1;
  }
  return 0;
}
