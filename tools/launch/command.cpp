// `accel launch`: the subcommand's flags (CLI11: PROGRAM and what follows are left to the
// program) and launch::run: the checks, then the launcher (tools/launch.h).
#include "tools/launch/internal.h"

#include <CLI/CLI.hpp>

#include <fcntl.h>

#include <string>
#include <utility>
#include <vector>

namespace accel::launch {

CLI::App* add_command(CLI::App& app, Options& o) {
  auto* sub = app.add_subcommand(
      "launch",
      "start N processes of a program with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...): "
      "accel launch -n N [options] PROGRAM [ARGS...]");
  sub->add_option("-n,--nproc-per-node,--nproc_per_node", o.nproc_per_node, "processes on this node")->required();
  sub->add_option("--nnodes", o.nnodes, "nodes (each runs its own accel launch)")->capture_default_str();
  sub->add_option("--node-rank,--node_rank", o.node_rank, "this node's index, 0..nnodes-1")->capture_default_str();
  sub->add_option("--master-addr,--master_addr", o.master_addr, "address of node 0 (the rendezvous)")
      ->capture_default_str();
  sub->add_option("--master-port,--master_port", o.master_port, "its port; 0: a free one (one node only)")
      ->capture_default_str();
  sub->add_option("--backend", o.backend, "ACCEL_BACKEND for the processes (auto, gloo, nccl, sim: simulated GPUs)");
  sub->add_option("--strategy", o.strategy, "ACCEL_STRATEGY (no, ddp, zero1, zero2, zero3, ...)");
  sub->add_option("--mixed-precision", o.mixed_precision, "ACCEL_MIXED_PRECISION (no, bf16, fp16)");
  sub->add_option("--offload", o.offload,
                  "ACCEL_OFFLOAD (none; optimizer: the optimizer's state and master weights in host memory; "
                  "parameters: ZeRO-3's shard of the weights too)");
  sub->add_option("--timeout", o.timeout, "ACCEL_TIMEOUT: the collectives' timeout in seconds (may be fractional)");
  sub->add_option("--max-restarts", o.max_restarts, "restart the whole group up to K times after a failure")
      ->capture_default_str();
  sub->add_option("--log-dir", o.log_dir, "also write each rank's output to DIR/rank_<R>.log");
  sub->add_option("--grace-period", o.grace_period, "seconds between SIGTERM and SIGKILL when stopping")
      ->capture_default_str();
  sub->add_flag("--warm-start", o.warm_start,
                "start PROGRAM once and fork every process from it after its libraries have loaded (a "
                "dynamically linked executable; others start as usual): libtorch's start-up once, not once per process");
  sub->add_option("--sim-gpu-mem", o.sim_gpu_mem,
                  "--backend sim: each simulated GPU's memory (80GiB, 16GB, ..., or unlimited); default: the preset's "
                  "GPU (79.15 GiB for 8xH100)")
      ->type_name("SIZE");
  sub->add_option("--sim-topology", o.sim_topology,
                  "--backend sim: the simulated machine (8xH100, 8xA100, 8xPCIe, Nx8xH100-IB); default: 8xH100")
      ->type_name("NAME");
  sub->add_option("--sim-trace", o.sim_trace, "--backend sim: write every rank's timeline to FILE (Chrome trace)")
      ->type_name("FILE");
  sub->add_option("--sim-faults", o.sim_faults,
                  "--backend sim: faults to inject, comma-separated (spaces after a comma are fine, an empty item "
                  "is refused): kill:RANK@collective:K, kill:RANK@step:K, delay:RANK:SECONDS (docs/simulator.md)")
      ->type_name("SPEC");
  sub->add_option("--sim-report", o.sim_report, "--backend sim: write the merged report to FILE as JSON")
      ->type_name("FILE");
  // PROGRAM and everything after it, options included, go to the program: the subcommand
  // stops parsing at its first positional argument (prefix_command) and leaves the rest in
  // remaining(). The positional below is for --help and for `--`: CLI11 keeps a `--` in
  // the subcommand only while it has a positional to fill; its validator refuses every
  // value, so the program's name is never consumed and stays first among the remaining.
  sub->add_option("PROGRAM", o.command, "the program (looked up in PATH), then its arguments")
      ->type_name("[ARGS...]")
      ->check(CLI::Validator([](std::string&) { return std::string("left to the launcher"); }, ""));
  sub->validate_positionals();
  sub->prefix_command();
  return sub;
}

int run(const CLI::App& sub, Options o) {
  o.command = sub.remaining();
  const bool separated = !o.command.empty() && o.command.front() == "--";
  if (separated) o.command.erase(o.command.begin());
  // the children's stdout and stderr must not land on a pipe's descriptor: keep 0..2 open
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
  try {
    std::vector<std::string> empty_sim_flags;  // given, but as ''
    for (const char* flag : {"--sim-gpu-mem", "--sim-topology", "--sim-trace", "--sim-faults", "--sim-report"})
      if (sub.count(flag) > 0 && sub.get_option(flag)->as<std::string>().empty()) empty_sim_flags.push_back(flag);
    validate(o, separated, empty_sim_flags);
    check_program(o.command.front());
    if (o.node_rank == 0 && o.master_port != 0) check_port_free(o.master_addr, static_cast<int>(o.master_port));
    if (o.master_port == 0) resolve(o.master_addr);
    Launcher launcher(std::move(o));
    launcher.open_logs();
    return launcher.run();
  } catch (const UsageError& e) {
    say(e.what());
    return 2;
  }
}

}  // namespace accel::launch
