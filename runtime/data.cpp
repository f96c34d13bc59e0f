// The data loader: each epoch's order, Accelerate's sharding of batches across processes,
// and batches gathered from host tensors.
#include <algorithm>
#include <cstring>

#include "runtime/data.h"

namespace accel {

std::vector<PlannedBatch> shard_batches(const std::vector<int64_t>& order, int64_t b, bool drop_last, int rank,
                                        int world, bool split_batches, bool even_batches) {
  using Idx = std::vector<int64_t>;
  std::vector<Idx> batches;
  const int64_t n = static_cast<int64_t>(order.size());
  for (int64_t s = 0; s < n; s += b) {
    if (drop_last && s + b > n) break;
    batches.emplace_back(order.begin() + s, order.begin() + std::min(n, s + b));
  }
  std::vector<PlannedBatch> plan;
  auto full = [](Idx v) {
    PlannedBatch p;
    p.valid = static_cast<int64_t>(v.size());
    p.indices = std::move(v);
    return p;
  };
  if (world <= 1) {
    for (auto& batch : batches) plan.push_back(full(std::move(batch)));
    return plan;
  }
  const int64_t P = world, nb = static_cast<int64_t>(batches.size());
  if (nb == 0) return plan;
  if (split_batches) {
    // every batch is cut into P slices of b/P; rank r takes slice r
    const int64_t bl = b / P;
    auto slice = [&](const Idx& v) {
      Idx out;
      for (int64_t i = bl * rank; i < std::min<int64_t>(bl * (rank + 1), static_cast<int64_t>(v.size())); ++i)
        out.push_back(v[static_cast<size_t>(i)]);
      return out;
    };
    for (const auto& batch : batches)
      if (static_cast<int64_t>(batch.size()) == b) plan.push_back(full(slice(batch)));
    const Idx& last = batches.back();
    if (!drop_last && static_cast<int64_t>(last.size()) < b) {
      if (!even_batches) {
        if (static_cast<int64_t>(last.size()) > bl * rank) plan.push_back(full(slice(last)));
      } else {
        Idx initial = batches.front();
        while (static_cast<int64_t>(initial.size()) < b) initial.insert(initial.end(), initial.begin(), initial.end());
        Idx padded = last;
        padded.insert(padded.end(), initial.begin(), initial.end());
        PlannedBatch p;
        p.indices = slice(padded);
        p.valid = std::clamp<int64_t>(static_cast<int64_t>(last.size()) - bl * rank, 0, bl);
        plan.push_back(std::move(p));
      }
    }
    return plan;
  }
  // batch i goes to process i % P, yielded only once the whole round is complete
  Idx initial, to_yield;
  for (int64_t idx = 0; idx < nb; ++idx) {
    const Idx& batch = batches[static_cast<size_t>(idx)];
    if (!drop_last && idx < P) initial.insert(initial.end(), batch.begin(), batch.end());
    if (idx % P == rank) to_yield = batch;
    if (idx % P == P - 1 && static_cast<int64_t>(batch.size()) == b) {
      plan.push_back(full(to_yield));
      to_yield.clear();
    }
  }
  if (drop_last || initial.empty()) return plan;
  if (!even_batches) {
    if (!to_yield.empty()) plan.push_back(full(to_yield));
    return plan;
  }
  if (static_cast<int64_t>(to_yield.size()) == b) plan.push_back(full(to_yield));
  while (static_cast<int64_t>(initial.size()) < P * b) initial.insert(initial.end(), initial.begin(), initial.end());
  int64_t idx = nb - 1;
  Idx batch = batches.back();
  if (static_cast<int64_t>(batch.size()) == b) {
    batch.clear();
    ++idx;
  }
  // complete the last round from the start of the data, so every process gets a full batch
  size_t cycle = 0;
  while (idx % P != 0 || !batch.empty()) {
    const int64_t valid = static_cast<int64_t>(batch.size());
    const size_t need = static_cast<size_t>(b) - batch.size();
    batch.insert(batch.end(), initial.begin() + static_cast<std::ptrdiff_t>(cycle),
                 initial.begin() + static_cast<std::ptrdiff_t>(cycle + need));
    if (idx % P == rank) {
      PlannedBatch p;
      p.indices = batch;
      p.valid = valid;
      plan.push_back(std::move(p));
    }
    cycle += need;
    batch.clear();
    ++idx;
  }
  return plan;
}

DataLoader::DataLoader(torch::Tensor inputs, torch::Tensor targets, DataLoaderConfig cfg) : cfg_(cfg) {
  ACCEL_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.size(0) >= 1, Status::InvalidArgument,
              "the loader's inputs need at least one sample along dimension 0, got ",
              inputs.defined() ? shape_str(inputs) : std::string("no tensor"));
  ACCEL_CHECK(!targets.defined() || (targets.dim() >= 1 && targets.size(0) == inputs.size(0)), Status::InvalidArgument,
              "inputs ", shape_str(inputs), " and targets ", targets.defined() ? shape_str(targets) : "", " differ in the number of samples");
  ACCEL_CHECK(cfg.batch_size >= 1, Status::InvalidArgument, "batch_size must be >= 1, got ", cfg.batch_size);
  inputs_ = inputs.to(torch::kCPU).contiguous();
  if (targets.defined()) targets_ = targets.to(torch::kCPU).contiguous();
  ACCEL_CHECK(!cfg.drop_last || inputs_.size(0) >= cfg.batch_size, Status::InvalidArgument, "with drop_last, ",
              inputs.size(0), " samples make no full batch of ", cfg.batch_size);
}

void DataLoader::shard(int rank, int world) {
  ACCEL_CHECK(world >= 1 && rank >= 0 && rank < world, Status::InvalidArgument, "bad shard ", rank, " of ", world);
  ACCEL_CHECK(!cfg_.split_batches || cfg_.batch_size % world == 0, Status::InvalidArgument, "split_batches needs a batch size (",
              cfg_.batch_size, ") divisible by the number of processes (", world, ")");
  rank_ = rank;
  world_ = world;
  plan_epoch_ = -1;
  per_process_.clear();
}

const std::vector<int64_t>& DataLoader::batches_per_process() {
  if (per_process_.empty()) {
    std::vector<int64_t> order(static_cast<size_t>(inputs_.size(0)));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    for (int r = 0; r < world_; ++r)
      per_process_.push_back(static_cast<int64_t>(
          shard_batches(order, cfg_.batch_size, cfg_.drop_last, r, world_, cfg_.split_batches, cfg_.even_batches).size()));
  }
  return per_process_;
}

const std::vector<PlannedBatch>& DataLoader::plan() {
  if (plan_epoch_ != epoch_) {
    const int64_t n = inputs_.size(0);
    std::vector<int64_t> order(static_cast<size_t>(n));
    if (cfg_.shuffle) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg_.seed + static_cast<uint64_t>(epoch_));
      auto perm = torch::randperm(n, gen, torch::kLong);
      std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
    } else {
      for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    }
    plan_ = shard_batches(order, cfg_.batch_size, cfg_.drop_last, rank_, world_, cfg_.split_batches, cfg_.even_batches);
    plan_epoch_ = epoch_;
  }
  return plan_;
}

int64_t DataLoader::num_batches() { return static_cast<int64_t>(plan().size()); }

void DataLoader::set_epoch(int64_t epoch) {
  ACCEL_CHECK(epoch >= 0, Status::InvalidArgument, "epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  position_ = 0;
}

void DataLoader::restore(int64_t epoch, int64_t position) {
  ACCEL_CHECK(epoch >= 0 && position >= 0, Status::InvalidArgument, "bad data position: epoch ", epoch, ", batch ", position);
  epoch_ = epoch;
  position_ = std::min<int64_t>(position, static_cast<int64_t>(plan().size()));
}

std::optional<Batch> DataLoader::next(const torch::Device& device) {
  const auto& p = plan();
  if (position_ >= static_cast<int64_t>(p.size())) {
    ++epoch_;
    position_ = 0;
    return std::nullopt;
  }
  const PlannedBatch& pb = p[static_cast<size_t>(position_)];
  const int64_t len = static_cast<int64_t>(pb.indices.size());
  Batch b;
  b.valid = pb.valid;
  const bool contiguous = len > 0 && pb.indices.back() - pb.indices.front() == len - 1 &&
                          std::is_sorted(pb.indices.begin(), pb.indices.end());
  if (contiguous) {
    b.inputs = inputs_.narrow(0, pb.indices.front(), len);
    if (targets_.defined()) b.targets = targets_.narrow(0, pb.indices.front(), len);
  } else {
    auto idx = torch::from_blob(const_cast<int64_t*>(pb.indices.data()), {len}, torch::kLong);
    b.inputs = inputs_.index_select(0, idx);
    if (targets_.defined()) b.targets = targets_.index_select(0, idx);
  }
  if (!device.is_cpu()) {
    b.inputs = b.inputs.to(device);
    if (b.targets.defined()) b.targets = b.targets.to(device);
  }
  ++position_;
  b.last = position_ == static_cast<int64_t>(p.size());
  return b;
}

}  // namespace accel
