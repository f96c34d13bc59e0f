// The data loader: each epoch's order, and Accelerate's sharding of batches across processes
// (runtime/data.cpp).
#pragma once

#include <optional>
#include <vector>

#include "runtime/options.h"

namespace accel {

// Data

struct DataLoaderConfig {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  // Sharding across processes, with Accelerate's batch-sampler semantics (used when the
  // loader is prepared on a world of more than one process):
  bool even_batches = true;   // wrap around from the start so every process gets as many full batches
  bool split_batches = false; // each batch is split across processes (batch_size must divide by their number)
};

struct Batch {
  torch::Tensor inputs, targets;  // targets undefined when the loader has none
  bool last = false;              // the last batch of its epoch
  int64_t valid = 0;              // leading rows that are not duplicates added by even_batches
};

// One process's batch in an epoch: sample indices, and how many of them are not
// wrap-around duplicates (they come first).
struct PlannedBatch {
  std::vector<int64_t> indices;
  int64_t valid = 0;
};

// Accelerate's BatchSamplerShard: the batches process `rank` of `world` gets from the
// epoch's sample order. world == 1 gives the plain batches.
std::vector<PlannedBatch> shard_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last,
                                        int rank, int world, bool split_batches, bool even_batches);

// A loader over tensors in host memory. Epoch e's order is torch.randperm(N) drawn from a
// generator seeded with seed + e (as Accelerate's SeedableRandomSampler), so every
// process and every resumed run sees the same order; each process then takes its shard.
class DataLoader {
 public:
  DataLoader(torch::Tensor inputs, torch::Tensor targets, DataLoaderConfig cfg);
  // This process's batches per epoch (the same on every process with even_batches).
  int64_t num_batches();
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  int64_t num_samples() const { return inputs_.size(0); }
  const DataLoaderConfig& config() const { return cfg_; }
  void set_epoch(int64_t epoch);
  // Resumes at batch `position` of `epoch` (a checkpoint's data position).
  void restore(int64_t epoch, int64_t position);
  // Makes this loader yield process `rank`'s share of `world` (checks split_batches' divisibility).
  void shard(int rank, int world);
  // Every process's number of batches per epoch (index = rank; one entry when not sharded).
  // They differ only without even_batches; they do not depend on the epoch's order.
  const std::vector<int64_t>& batches_per_process();
  // The next batch on `device`, or nullopt at the end of the epoch (then the epoch advances).
  std::optional<Batch> next(const torch::Device& device);

 private:
  const std::vector<PlannedBatch>& plan();

  torch::Tensor inputs_, targets_;
  DataLoaderConfig cfg_;
  int rank_ = 0, world_ = 1;
  int64_t epoch_ = 0, position_ = 0;
  int64_t plan_epoch_ = -1;
  std::vector<int64_t> per_process_;  // batches_per_process(), computed once per sharding
  std::vector<PlannedBatch> plan_;
};

}  // namespace accel
