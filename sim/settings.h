// The simulator's settings as users write them, and the one parser that reads them, for
// every door into a simulated world: the C ABI's accel_sim_options (world_options, world.h),
// `accel launch --backend sim`'s --sim-* flags (tools/launch/options.cpp), and the ACCEL_SIM_*
// variables a process of a launched simulated world reads (sim/nccl/process.cpp). Each caller
// names the fields as its user wrote them, so an error says "--sim-gpu-mem '12XB' has an
// unknown unit" to a launcher's user and "device_memory ..." to the C ABI's. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/cost.h"
#include "sim/faults.h"

namespace accel::sim {

// The topology a world has when nobody names one.
constexpr const char* kDefaultTopology = "8xH100";

// The settings as text, as given.
struct SettingsText {
  int world_size = -1;            // < 0: not known where they are read (a process of a launched
                                  // world): the topology's size and the faults' ranks go unchecked
  std::string topology = kDefaultTopology;  // a preset of sim/cost.h
  std::optional<std::string> device_memory;  // a size (text::parse_bytes) or "unlimited"; none: the
                                             // topology's GPU memory (Topology::gpu_memory)
  std::optional<std::string> host_memory;    // each rank's host memory (offload); none: unlimited
  std::string faults;             // parse_faults' syntax; empty: none
};

// How the caller's user spells each field, for the messages.
struct SettingNames {
  std::string world_size = "world_size";
  std::string topology = "topology";
  std::string device_memory = "device_memory";
  std::string host_memory = "host_memory";
  std::string faults = "faults";
  bool prefix_topology_errors = false;  // "--sim-topology: unknown topology ..." (a flag among many)
};

// The settings, checked: Error(InvalidArgument) naming the field as `names` spells it, in this
// order: the topology (a preset that has at least world_size GPUs), the device memory, the faults.
struct Settings {
  Topology topology;
  uint64_t device_capacity = 0;  // bytes per simulated GPU (by default the preset's); 0: unlimited
  uint64_t host_capacity = 0;    // host memory per rank; 0: unlimited
  std::vector<Fault> faults;
};
Settings parse_settings(const SettingsText& text, const SettingNames& names = {});

// A simulated GPU's out-of-memory error, in PyTorch 2.x's layout (c10/cuda/CUDACachingAllocator.cpp,
// sizes as its format_size writes them) so that what parses a real one parses it: "CUDA out
// of memory. Tried to allocate 2.69 MiB. GPU 3 has a total capacity of 79.15 GiB of which
// 1.37 MiB is free. Including non-PyTorch memory, this process has ... memory in use. Of the
// allocated memory ... is allocated by PyTorch, and 0 bytes is reserved by PyTorch but
// unallocated." and then "(simulated: rank R, peak P)". `device`: the rank's GPU on its node.
std::string cuda_oom_message(uint64_t bytes, int device, uint64_t capacity, uint64_t in_use, int rank, uint64_t peak);

}  // namespace accel::sim
