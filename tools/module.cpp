// libaccel-tools.so: the `accel` tool's commands that need the runtime (tools/commands.h),
// loaded by main (tools/accel.cpp) only when one of them runs. The runtime is linked into
// it statically, as it was into the tool: never beside libaccel.so.
#include <cstdio>

#include "tools/commands.h"

extern "C" __attribute__((visibility("default"))) int accel_tools_run(const accel::tools::Invocation* inv,
                                                                      int built_against) {
  namespace t = accel::tools;
  if (built_against != t::kToolsInterface) {
    std::fprintf(stderr, "accel: libaccel-tools.so is from another build of accel (interface %d, the tool's %d): "
                 "install or rebuild both together\n", t::kToolsInterface, built_against);
    return 2;
  }
  return t::report_errors([&] {
    if (inv->command == "env") return t::env();
    if (inv->command == "sim topologies") return t::sim_topologies();
    if (inv->command == "sim bench") return t::sim_bench(inv->bench);
    if (inv->command == "sim step") return t::sim_step(inv->step);
    if (inv->command == "estimate-memory") return t::estimate(inv->estimate);
    if (inv->command == "merge-weights") return t::merge_weights(inv->merge_dir, inv->merge_out);
    std::fprintf(stderr, "accel: libaccel-tools.so has no command '%s'\n", inv->command.c_str());
    return 2;
  });
}
