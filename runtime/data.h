// The data loader: each epoch's order, and Accelerate's sharding of batches across processes
// (runtime/data.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
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
  // Length-grouped sampling (a SampleSource's loaders): each epoch's order in megabatches
  // sorted by length, longest first, as transformers' LengthGroupedSampler.
  bool group_by_length = false;
  // The dataset read as a stream, in its order, and shared as Accelerate shares an
  // IterableDataset (shard_stream below); no shuffling, no length grouping, even_batches unused.
  bool iterable = false;
};

// Samples that are not rows of two tensors: sequences of different lengths collated into a
// padded batch (the language-model loaders below).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t length(int64_t i) const = 0;  // for length-grouped sampling
  // The batch of these samples on the host: {inputs, targets}.
  virtual std::pair<torch::Tensor, torch::Tensor> collate(const std::vector<int64_t>& indices) const = 0;
  // ... and the attention mask (1 for a token, 0 for padding), where the source pads.
  struct Collated {
    torch::Tensor inputs, targets, mask;
  };
  virtual Collated collate_all(const std::vector<int64_t>& indices) const {
    auto [i, t] = collate(indices);
    return {i, t, torch::Tensor()};
  }
};

struct Batch {
  torch::Tensor inputs, targets;  // targets undefined when the loader has none
  torch::Tensor mask;             // the attention mask of a padded batch (undefined otherwise)
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

// Accelerate's IterableDatasetShard (what prepare_data_loader does to an IterableDataset): the
// stream `order` is read in rounds of batch_size x world samples (batch_size with
// split_batches); process `rank` gets slice `rank` of each full round (batch_size samples, or
// batch_size / world with split_batches) as one batch. Without drop_last a last, partial
// round is completed by repeating the first full round (or itself, when there is none) and
// shared the same way; its repeats are not `valid`. With drop_last it is dropped.
std::vector<PlannedBatch> shard_stream(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last, int rank,
                                       int world, bool split_batches);

// A loader over tensors in host memory. Epoch e's order is torch.randperm(N) drawn from a
// generator seeded with seed + e (as Accelerate's SeedableRandomSampler), so every
// process and every resumed run sees the same order; each process then takes its shard.
class DataLoader {
 public:
  DataLoader(torch::Tensor inputs, torch::Tensor targets, DataLoaderConfig cfg);
  DataLoader(std::shared_ptr<const SampleSource> source, DataLoaderConfig cfg);
  // This process's batches per epoch (the same on every process with even_batches).
  int64_t num_batches();
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  int64_t num_samples() const { return source_ ? source_->size() : inputs_.size(0); }
  bool has_targets() const { return source_ != nullptr || targets_.defined(); }
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
  std::shared_ptr<const SampleSource> source_;  // or samples from a source
  DataLoaderConfig cfg_;
  int rank_ = 0, world_ = 1;
  int64_t epoch_ = 0, position_ = 0;
  int64_t plan_epoch_ = -1;
  std::vector<int64_t> per_process_;  // batches_per_process(), computed once per sharding
  std::vector<PlannedBatch> plan_;
};

// ---------------------------------------------------------------------------------------
// Causal-LM data (docs/lm.md, "Data")

// The packed token file: "ACCELTOK", uint32 version (1), uint32 token width in bytes (2 or
// 4), uint64 count, then the tokens as little-endian unsigned integers.
// read_token_file returns them as int64 [count] (IO, or Format naming what is wrong);
// write_token_file writes int64/int32 tokens (each in [0, 2^(8 width))) atomically, replacing
// nothing but an earlier token file.
torch::Tensor read_token_file(const std::string& path);
void write_token_file(const std::string& path, const torch::Tensor& tokens, int token_bytes);

struct LMDataConfig {
  int64_t block_size = 0;          // no offsets: fixed blocks of this many tokens
  int64_t max_length = 0;          // offsets: sequences are cut to this many tokens (0: whole)
  int64_t pad_id = 0;              // the id padding positions get in input_ids
  int64_t pad_to_multiple_of = 0;  // dynamic padding to a multiple of this (0 or 1: the longest)
  bool pad_left = false;           // padding before the tokens (the mask says where)
};

// A causal-LM sample source over int64/int32 `tokens` [N]. Without `offsets`: the
// non-overlapping blocks of block_size tokens (the last partial block dropped), each one
// sample. With `offsets` (int64 [D + 1], 0 = offsets[0] <= ... <= offsets[D] = N): sequence d
// is tokens[offsets[d], offsets[d+1]), cut to max_length; empty sequences are skipped.
// collate gives {input_ids int64 [B, T], labels int64 [B, T]} with T the longest sequence of
// the batch (rounded up to pad_to_multiple_of), padding on the right: input_ids pad_id and
// labels -100 there (labels are the ids elsewhere; the loss shifts them).
std::shared_ptr<const SampleSource> make_lm_source(const torch::Tensor& tokens, const torch::Tensor& offsets,
                                                   const LMDataConfig& cfg);

// Fine-tuning examples (ids[i] and labels[i], -100 where the loss is masked) as a causal-LM
// source: each example one sample, cut to cfg.max_length; or, with `packing`, the examples
// concatenated and cut into blocks of cfg.max_length tokens (the last partial block kept,
// padded). Padding as make_lm_source's: input_ids pad_id, labels -100, on cfg.pad_left's side.
std::shared_ptr<const SampleSource> make_sft_source(const std::vector<std::vector<int32_t>>& ids,
                                                    const std::vector<std::vector<int32_t>>& labels,
                                                    const LMDataConfig& cfg, bool packing);

}  // namespace accel
