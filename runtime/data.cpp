// The data loader: each epoch's order, Accelerate's sharding of batches across processes,
// and batches gathered from host tensors.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/data.h"
#include "runtime/paths.h"
#include "runtime/safetensors.h"

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

std::vector<PlannedBatch> shard_stream(const std::vector<int64_t>& order, int64_t b, bool drop_last, int rank,
                                       int world, bool split_batches) {
  if (world <= 1) return shard_batches(order, b, drop_last, 0, 1, false, false);  // Accelerate shards no stream then
  const int64_t round = split_batches ? b : b * world, per = split_batches ? b / world : b;
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<PlannedBatch> plan;
  int64_t s = 0;
  for (; s + round <= n; s += round) {
    PlannedBatch p;
    p.indices.assign(order.begin() + s + rank * per, order.begin() + s + (rank + 1) * per);
    p.valid = per;
    plan.push_back(std::move(p));
  }
  if (drop_last || s == n || per == 0) return plan;
  std::vector<int64_t> last(order.begin() + s, order.end());
  const int64_t real = n - s;
  const std::vector<int64_t> first = s > 0 ? std::vector<int64_t>(order.begin(), order.begin() + round) : last;
  while (static_cast<int64_t>(last.size()) < round) last.insert(last.end(), first.begin(), first.end());
  PlannedBatch p;
  p.indices.assign(last.begin() + rank * per, last.begin() + (rank + 1) * per);
  p.valid = std::clamp<int64_t>(real - rank * per, 0, per);
  plan.push_back(std::move(p));
  return plan;
}

namespace {
void check_iterable(const DataLoaderConfig& cfg) {
  ACCEL_CHECK(!cfg.iterable || !cfg.shuffle, Status::InvalidArgument,
              "shuffle must be 0 for an iterable loader (a stream is read in its one order)");
  ACCEL_CHECK(!cfg.iterable || !cfg.group_by_length, Status::InvalidArgument,
              "group_by_length needs a map-style loader (an iterable one reads the stream in its order)");
}
}  // namespace

DataLoader::DataLoader(torch::Tensor inputs, torch::Tensor targets, DataLoaderConfig cfg) : cfg_(cfg) {
  check_iterable(cfg);
  ACCEL_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.size(0) >= 1, Status::InvalidArgument,
              "the loader's inputs need at least one sample along dimension 0, got ",
              inputs.defined() ? shape_str(inputs) : std::string("no tensor"));
  ACCEL_CHECK(!targets.defined() || (targets.dim() >= 1 && targets.size(0) == inputs.size(0)), Status::InvalidArgument,
              "inputs ", shape_str(inputs), " and targets ", targets.defined() ? shape_str(targets) : "", " differ in the number of samples");
  ACCEL_CHECK(cfg.batch_size >= 1, Status::InvalidArgument, "batch_size must be >= 1, got ", cfg.batch_size);
  inputs_ = inputs.to(torch::kCPU).contiguous();
  if (targets.defined()) targets_ = targets.to(torch::kCPU).contiguous();
  // with drop_last and fewer samples than a batch the loader yields no batch, as Accelerate's
  // (and PyTorch's) does: not an error (tests/runtime/test_runtime.cpp, Sharding.MatchesAcceleratesTable)
}

DataLoader::DataLoader(std::shared_ptr<const SampleSource> source, DataLoaderConfig cfg)
    : source_(std::move(source)), cfg_(cfg) {
  check_iterable(cfg);
  ACCEL_CHECK(source_ && source_->size() >= 1, Status::InvalidArgument, "the loader has no samples");
  ACCEL_CHECK(cfg.batch_size >= 1, Status::InvalidArgument, "batch_size must be >= 1, got ", cfg.batch_size);
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
    std::vector<int64_t> order(static_cast<size_t>(num_samples()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    for (int r = 0; r < world_; ++r)
      per_process_.push_back(static_cast<int64_t>(
          (cfg_.iterable ? shard_stream(order, cfg_.batch_size, cfg_.drop_last, r, world_, cfg_.split_batches)
                         : shard_batches(order, cfg_.batch_size, cfg_.drop_last, r, world_, cfg_.split_batches,
                                         cfg_.even_batches))
              .size()));
  }
  return per_process_;
}

const std::vector<PlannedBatch>& DataLoader::plan() {
  if (plan_epoch_ != epoch_) {
    const int64_t n = num_samples();
    std::vector<int64_t> order(static_cast<size_t>(n));
    if (cfg_.shuffle) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg_.seed + static_cast<uint64_t>(epoch_));
      auto perm = torch::randperm(n, gen, torch::kLong);
      std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
    } else {
      for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    }
    if (cfg_.group_by_length && source_) {
      // transformers' get_length_grouped_indices over the global batch (batch x processes):
      // megabatches of up to 50 global batches, each sorted by length, longest first, and
      // the longest sample of all moved to the very first position (an out-of-memory shows
      // at once)
      const int64_t global = cfg_.split_batches ? cfg_.batch_size : cfg_.batch_size * world_;
      int64_t mult = std::min<int64_t>(n / (global * 4), 50);
      if (mult == 0) mult = 1;
      const int64_t mega = mult * global;
      std::vector<size_t> firsts;
      for (int64_t s = 0; s < n; s += mega) {
        auto b = order.begin() + s, e = order.begin() + std::min(n, s + mega);
        std::stable_sort(b, e, [&](int64_t x, int64_t y) { return source_->length(x) > source_->length(y); });
        firsts.push_back(static_cast<size_t>(s));
      }
      size_t best = 0;
      for (size_t k = 1; k < firsts.size(); ++k)
        if (source_->length(order[firsts[k]]) > source_->length(order[firsts[best]])) best = k;
      std::swap(order[0], order[firsts[best]]);
    }
    plan_ = cfg_.iterable
                ? shard_stream(order, cfg_.batch_size, cfg_.drop_last, rank_, world_, cfg_.split_batches)
                : shard_batches(order, cfg_.batch_size, cfg_.drop_last, rank_, world_, cfg_.split_batches,
                                cfg_.even_batches);
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
  if (source_) {
    auto c = source_->collate_all(pb.indices);
    b.inputs = std::move(c.inputs);
    b.targets = std::move(c.targets);
    b.mask = std::move(c.mask);
    if (!device.is_cpu()) {
      b.inputs = b.inputs.to(device);
      b.targets = b.targets.to(device);
      if (b.mask.defined()) b.mask = b.mask.to(device);
    }
    ++position_;
    b.last = position_ == static_cast<int64_t>(p.size());
    return b;
  }
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

// ---------------------------------------------------------------------------------------
// Causal-LM data

namespace {

constexpr char kTokenMagic[8] = {'A', 'C', 'C', 'E', 'L', 'T', 'O', 'K'};
constexpr size_t kTokenHeader = 24;

template <class T>
T get_le(const std::string& s, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}
template <class T>
void put_le(std::string& s, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

class LMSource final : public SampleSource {
 public:
  // labels: undefined (the labels are the tokens) or laid out as tokens
  LMSource(torch::Tensor tokens, torch::Tensor labels, std::vector<std::pair<int64_t, int64_t>> spans, LMDataConfig cfg)
      : tokens_(std::move(tokens)), labels_(std::move(labels)), spans_(std::move(spans)), cfg_(cfg) {}
  int64_t size() const override { return static_cast<int64_t>(spans_.size()); }
  int64_t length(int64_t i) const override { return spans_[static_cast<size_t>(i)].second; }
  std::pair<torch::Tensor, torch::Tensor> collate(const std::vector<int64_t>& indices) const override {
    auto c = collate_all(indices);
    return {c.inputs, c.targets};
  }
  Collated collate_all(const std::vector<int64_t>& indices) const override {
    int64_t T = 0;
    for (int64_t i : indices) T = std::max(T, length(i));
    if (cfg_.pad_to_multiple_of > 1) T = (T + cfg_.pad_to_multiple_of - 1) / cfg_.pad_to_multiple_of * cfg_.pad_to_multiple_of;
    const int64_t B = static_cast<int64_t>(indices.size());
    auto ids = torch::full({B, T}, cfg_.pad_id, torch::kLong);
    auto labels = torch::full({B, T}, int64_t{-100}, torch::kLong);
    auto mask = torch::zeros({B, T}, torch::kLong);
    const int64_t* src = tokens_.data_ptr<int64_t>();
    const int64_t* lsrc = labels_.defined() ? labels_.data_ptr<int64_t>() : src;
    int64_t* di = ids.data_ptr<int64_t>();
    int64_t* dl = labels.data_ptr<int64_t>();
    int64_t* dm = mask.data_ptr<int64_t>();
    for (int64_t r = 0; r < B; ++r) {
      const auto& [start, len] = spans_[static_cast<size_t>(indices[static_cast<size_t>(r)])];
      const int64_t at = r * T + (cfg_.pad_left ? T - len : 0);
      std::memcpy(di + at, src + start, static_cast<size_t>(len) * sizeof(int64_t));
      std::memcpy(dl + at, lsrc + start, static_cast<size_t>(len) * sizeof(int64_t));
      std::fill(dm + at, dm + at + len, int64_t{1});
    }
    return {ids, labels, mask};
  }

 private:
  torch::Tensor tokens_;                            // int64, contiguous, host
  torch::Tensor labels_;                            // the same layout, or undefined
  std::vector<std::pair<int64_t, int64_t>> spans_;  // (start, length) per sample
  LMDataConfig cfg_;
};

}  // namespace

torch::Tensor read_token_file(const std::string& path) {
  ACCEL_CHECK(!path.empty(), Status::InvalidArgument, "path is empty");
  const std::string raw = safetensors::read_file(path);
  ACCEL_CHECK(raw.size() >= kTokenHeader && std::memcmp(raw.data(), kTokenMagic, 8) == 0, Status::Format, "'", path,
              "' is not a token file (it does not start with \"ACCELTOK\" and a ", kTokenHeader, "-byte header)");
  const uint32_t version = get_le<uint32_t>(raw, 8), width = get_le<uint32_t>(raw, 12);
  const uint64_t count = get_le<uint64_t>(raw, 16);
  ACCEL_CHECK(version == 1, Status::Format, "'", path, "': token file version ", version,
              " is not known to this library (it reads version 1)");
  ACCEL_CHECK(width == 2 || width == 4, Status::Format, "'", path, "': the token width is ", width,
              " bytes; a token file holds 2- or 4-byte tokens");
  const uint64_t bytes = raw.size() - kTokenHeader;
  ACCEL_CHECK(count <= bytes / width && bytes == count * width, Status::Format, "'", path, "': the header says ", count,
              " tokens of ", width, " bytes, the file holds ", bytes, " bytes of tokens",
              count > bytes / width ? " (truncated)" : "");
  auto out = torch::empty({static_cast<int64_t>(count)}, torch::kLong);
  int64_t* d = out.data_ptr<int64_t>();
  for (uint64_t i = 0; i < count; ++i)
    d[i] = width == 2 ? static_cast<int64_t>(get_le<uint16_t>(raw, kTokenHeader + 2 * i))
                      : static_cast<int64_t>(get_le<uint32_t>(raw, kTokenHeader + 4 * i));
  return out;
}

void write_token_file(const std::string& path, const torch::Tensor& tokens, int token_bytes) {
  ACCEL_CHECK(token_bytes == 2 || token_bytes == 4, Status::InvalidArgument, "token_bytes must be 2 or 4, got ",
              token_bytes);
  ACCEL_CHECK(tokens.defined() && tokens.dim() == 1, Status::InvalidArgument, "tokens must be one-dimensional, got ",
              tokens.defined() ? shape_str(tokens) : std::string("none"));
  ACCEL_CHECK(tokens.scalar_type() == torch::kLong || tokens.scalar_type() == torch::kInt, Status::InvalidArgument,
              "tokens must be int64 or int32, got ", c10::toString(tokens.scalar_type()));
  paths::check_file_target(path, paths::FileKind::TokenFile, "path");
  const torch::Tensor t = tokens.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t n = t.numel();
  const int64_t limit = token_bytes == 2 ? int64_t{1} << 16 : int64_t{1} << 32;
  if (n > 0) {
    auto mm = torch::aminmax(t);
    const int64_t lo = std::get<0>(mm).item<int64_t>(), hi = std::get<1>(mm).item<int64_t>();
    ACCEL_CHECK(lo >= 0 && hi < limit, Status::InvalidArgument, "token ", lo < 0 ? lo : hi, " does not fit in ",
                token_bytes, " bytes (0..", limit - 1, ")");
  }
  std::string out(kTokenMagic, 8);
  out.reserve(kTokenHeader + static_cast<size_t>(n) * static_cast<size_t>(token_bytes));
  put_le<uint32_t>(out, 1);
  put_le<uint32_t>(out, static_cast<uint32_t>(token_bytes));
  put_le<uint64_t>(out, static_cast<uint64_t>(n));
  const int64_t* s = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (token_bytes == 2)
      put_le<uint16_t>(out, static_cast<uint16_t>(s[i]));
    else
      put_le<uint32_t>(out, static_cast<uint32_t>(s[i]));
  }
  safetensors::write_file_atomic(path, out);
}

std::shared_ptr<const SampleSource> make_lm_source(const torch::Tensor& tokens, const torch::Tensor& offsets,
                                                   const LMDataConfig& cfg) {
  ACCEL_CHECK(tokens.defined() && tokens.dim() == 1, Status::InvalidArgument, "tokens must be one-dimensional, got ",
              tokens.defined() ? shape_str(tokens) : std::string("none"));
  ACCEL_CHECK(tokens.scalar_type() == torch::kLong || tokens.scalar_type() == torch::kInt, Status::InvalidArgument,
              "tokens must be int64 or int32, got ", c10::toString(tokens.scalar_type()));
  ACCEL_CHECK(cfg.pad_to_multiple_of >= 0, Status::InvalidArgument, "pad_to_multiple_of must be >= 0, got ",
              cfg.pad_to_multiple_of);
  ACCEL_CHECK(cfg.max_length >= 0, Status::InvalidArgument, "max_length must be >= 0, got ", cfg.max_length);
  // the source's own copy (as the header promises): the caller may release or reuse its tensor
  torch::Tensor t = tokens.to(torch::kCPU, torch::kLong, /*non_blocking=*/false, /*copy=*/true).contiguous();
  const int64_t n = t.numel();
  std::vector<std::pair<int64_t, int64_t>> spans;
  if (!offsets.defined()) {
    ACCEL_CHECK(cfg.block_size >= 2, Status::InvalidArgument,
                "block_size must be >= 2 (a block of tokens is one sample; the loss predicts tokens 2..block_size), "
                "got ", cfg.block_size);
    ACCEL_CHECK(n >= cfg.block_size, Status::InvalidArgument, n, " tokens make no block of ", cfg.block_size);
    for (int64_t s = 0; s + cfg.block_size <= n; s += cfg.block_size) spans.emplace_back(s, cfg.block_size);
  } else {
    ACCEL_CHECK(offsets.dim() == 1 && offsets.numel() >= 2, Status::InvalidArgument,
                "offsets must be [sequences + 1] (at least 2 values), got ", shape_str(offsets));
    ACCEL_CHECK(offsets.scalar_type() == torch::kLong || offsets.scalar_type() == torch::kInt, Status::InvalidArgument,
                "offsets must be int64 or int32, got ", c10::toString(offsets.scalar_type()));
    ACCEL_CHECK(cfg.block_size == 0, Status::InvalidArgument,
                "block_size is for a token stream without offsets; with offsets, set max_length instead");
    const torch::Tensor o = offsets.to(torch::kCPU, torch::kLong).contiguous();
    const int64_t* op = o.data_ptr<int64_t>();
    const int64_t m = o.numel();
    ACCEL_CHECK(op[0] == 0 && op[m - 1] == n, Status::InvalidArgument, "offsets must start at 0 and end at the ", n,
                " tokens, got ", op[0], " ... ", op[m - 1]);
    for (int64_t d = 0; d + 1 < m; ++d) {
      ACCEL_CHECK(op[d + 1] >= op[d], Status::InvalidArgument, "offsets must not decrease: offsets[", d, "] = ", op[d],
                  ", offsets[", d + 1, "] = ", op[d + 1]);
      int64_t len = op[d + 1] - op[d];
      if (cfg.max_length > 0) len = std::min(len, cfg.max_length);
      if (len > 0) spans.emplace_back(op[d], len);
    }
    ACCEL_CHECK(!spans.empty(), Status::InvalidArgument, "every sequence is empty");
  }
  return std::make_shared<LMSource>(std::move(t), torch::Tensor(), std::move(spans), cfg);
}

std::shared_ptr<const SampleSource> make_sft_source(const std::vector<std::vector<int32_t>>& ids,
                                                    const std::vector<std::vector<int32_t>>& labels,
                                                    const LMDataConfig& cfg, bool packing) {
  ACCEL_CHECK(ids.size() == labels.size() && !ids.empty(), Status::InvalidArgument, "no example");
  ACCEL_CHECK(cfg.max_length >= 0, Status::InvalidArgument, "max_length must be >= 0, got ", cfg.max_length);
  ACCEL_CHECK(!packing || cfg.max_length >= 2, Status::InvalidArgument,
              "packing needs max_length >= 2 (the length of the packed blocks), got ", cfg.max_length);
  ACCEL_CHECK(cfg.pad_to_multiple_of >= 0, Status::InvalidArgument, "pad_to_multiple_of must be >= 0, got ",
              cfg.pad_to_multiple_of);
  int64_t n = 0;
  for (const auto& v : ids) n += static_cast<int64_t>(v.size());
  auto t = torch::empty({n}, torch::kLong), l = torch::empty({n}, torch::kLong);
  int64_t* tp = t.data_ptr<int64_t>();
  int64_t* lp = l.data_ptr<int64_t>();
  std::vector<std::pair<int64_t, int64_t>> spans;
  int64_t at = 0;
  for (size_t e = 0; e < ids.size(); ++e) {
    ACCEL_CHECK(ids[e].size() == labels[e].size(), Status::InvalidArgument, "example ", e, " has ", ids[e].size(),
                " ids and ", labels[e].size(), " labels");
    std::copy(ids[e].begin(), ids[e].end(), tp + at);
    std::copy(labels[e].begin(), labels[e].end(), lp + at);
    int64_t len = static_cast<int64_t>(ids[e].size());
    if (!packing && len > 0) spans.emplace_back(at, cfg.max_length > 0 ? std::min(len, cfg.max_length) : len);
    at += len;
  }
  if (packing)
    for (int64_t s = 0; s < n; s += cfg.max_length) spans.emplace_back(s, std::min(cfg.max_length, n - s));
  ACCEL_CHECK(!spans.empty(), Status::InvalidArgument, "every example is empty");
  return std::make_shared<LMSource>(std::move(t), std::move(l), std::move(spans), cfg);
}

}  // namespace accel
