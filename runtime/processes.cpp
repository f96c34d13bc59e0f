// The Accelerator across the processes of its world: the next batch and the uneven-data guard
// (processes whose loaders would make different numbers of collectives fail with a message
// instead of hanging), and the process utilities in Accelerate's names (reduce, broadcast,
// gather, pad_across_processes, gather_for_metrics).
#include <algorithm>
#include <sstream>

#include "comm/tensors.h"
#include "runtime/accelerator.h"
#include "runtime/strategy/strategy.h"

namespace accel {

std::optional<Batch> Accelerator::next_batch(DataLoader& loader) {
  const bool ours = prepared(&loader);
  auto b = loader.next(device_);
  if (b && ours) {
    end_of_data_ = b->last;
    last_rows_ = b->inputs.size(0);
    last_valid_ = b->valid;
    last_loader_ = &loader;
    last_position_ = loader.position();
  }
  if (!b && ours) {
    // The epoch is over here. Processes with more batches (even_batches off) are about to
    // make collectives this one will not: say so here, where they fail at theirs, instead of
    // leaving them waiting.
    auto it = std::find(epoch_collectives_.begin(), epoch_collectives_.end(), &loader);
    const bool trained = it != epoch_collectives_.end();
    if (trained) epoch_collectives_.erase(it);
    if (last_loader_ == &loader) last_loader_ = nullptr;
    if (trained && comm_->size() > 1) {
      const auto& counts = loader.batches_per_process();
      const int64_t mine = collectives_per_epoch(counts[static_cast<size_t>(comm_->rank())]);
      for (size_t r = 0; r < counts.size(); ++r)
        ACCEL_CHECK(collectives_per_epoch(counts[r]) <= mine, Status::InvalidState, uneven_message(loader, false));
    }
  }
  return b;
}

int64_t Accelerator::collectives_through(int64_t position, int64_t batches) const {
  // DDP and ZeRO-1 communicate on the micro-batches that complete the gradients (every K-th
  // and the epoch's last); ZeRO-2 reduce-scatters every micro-batch, ZeRO-3 gathers for
  // every forward
  const Cadence c = strategy_->cadence();
  if (c == Cadence::EveryMicroBatch || c == Cadence::EveryForward) return position;
  const int64_t k = opts_.gradient_accumulation_steps;
  return position / k + (position == batches && position % k != 0 ? 1 : 0);
}

std::string Accelerator::uneven_message(DataLoader& loader, bool ahead) {
  const auto& counts = loader.batches_per_process();
  const size_t me = static_cast<size_t>(comm_->rank());
  size_t other = 0;  // the process that differs most from this one
  for (size_t r = 0; r < counts.size(); ++r)
    if (ahead ? counts[r] < counts[other] : counts[r] > counts[other]) other = r;
  const char* what = strategy_->collectives_noun();
  std::ostringstream m;
  m << "the prepared data loader gives process " << me << " " << counts[me] << " batches per epoch and process " << other << " "
    << counts[other] << " (even_batches is off), so under " << strategy_name(opts_.strategy) << " with "
    << opts_.gradient_accumulation_steps << " accumulation step(s) they make " << collectives_per_epoch(counts[me]) << " and "
    << collectives_per_epoch(counts[other]) << " " << what << " per epoch: "
    << (ahead ? "batch " + std::to_string(last_position_) + " of this epoch has no counterpart on process " + std::to_string(other)
              : std::string("the others are still training on batches this process does not have"))
    << ", and the processes would wait for each other forever (on GPUs, a hang). Turn even_batches on (the default: "
       "the last round wraps around), set drop_last, or use a dataset that divides evenly";
  return m.str();
}

void Accelerator::check_even_collectives() {
  DataLoader* loader = last_loader_;
  if (comm_->size() <= 1 || !loader || loader->config().even_batches) return;  // even batches: equal shares
  const auto& counts = loader->batches_per_process();
  int64_t fewest = counts.front();
  for (int64_t c : counts) fewest = std::min(fewest, c);
  // the collectives this process has made in the epoch once this one is made
  const int64_t made = collectives_through(last_position_, loader->num_batches());
  ACCEL_CHECK(made <= collectives_per_epoch(fewest), Status::InvalidState, uneven_message(*loader, true));
  if (std::find(epoch_collectives_.begin(), epoch_collectives_.end(), loader) == epoch_collectives_.end())
    epoch_collectives_.push_back(loader);
}

// ---------------------------------------------------------------------------------------
// Process utilities

namespace {
torch::Tensor host_contiguous(const torch::Tensor& t) {
  ACCEL_CHECK(t.defined(), Status::InvalidArgument, "no tensor");
  return t.detach().to(torch::kCPU).contiguous();
}

std::string dims_str(const int64_t* d, int64_t n) {
  std::string s = "[";
  for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

// Every process's dtype, rank and shape, exchanged before a collective whose sizes depend on
// them, so that a mismatch is a clear error on every process instead of a mismatched
// collective. Row r: {dtype, ndim, extra, dims[16]}.
std::vector<int64_t> Accelerator::describe_across(const torch::Tensor& x, int64_t extra) {
  std::vector<int64_t> mine(kRow, 0), all(kRow * static_cast<size_t>(comm_->size()));
  mine[0] = static_cast<int64_t>(x.scalar_type());
  mine[1] = x.dim();
  mine[2] = extra;
  for (int64_t d = 0; d < x.dim() && d < 16; ++d) mine[static_cast<size_t>(3 + d)] = x.size(d);
  comm::host_all_gather(*comm_, mine.data(), all.data(), kRow, comm::DataType::Int64);
  for (int r = 0; r < comm_->size(); ++r) {
    const int64_t* row = &all[kRow * static_cast<size_t>(r)];
    ACCEL_CHECK(row[0] == all[0], Status::InvalidArgument, "tensor: the dtypes differ across processes: process 0 has ",
                c10::toString(static_cast<c10::ScalarType>(all[0])), ", process ", r, " has ",
                c10::toString(static_cast<c10::ScalarType>(row[0])));
    ACCEL_CHECK(row[1] == all[1], Status::InvalidArgument, "tensor: the number of dimensions differs across processes: ",
                "process 0 has ", dims_str(&all[3], all[1]), ", process ", r, " has ", dims_str(row + 3, row[1]));
  }
  return all;
}

torch::Tensor Accelerator::reduce(const torch::Tensor& t, comm::RedOp op) {
  torch::Tensor r = host_contiguous(t).clone();
  comm::host_all_reduce(*comm_, r.data_ptr(), static_cast<size_t>(r.numel()), comm::dtype_of(r.scalar_type()), op);
  return r.device() == device_ ? r : r.to(device_);
}

torch::Tensor Accelerator::broadcast(const torch::Tensor& t, int root) {
  ACCEL_CHECK(root >= 0 && root < comm_->size(), Status::InvalidArgument, "root must be in [0, ", comm_->size(),
              ") (a process index), got ", root);
  torch::Tensor r = host_contiguous(t).clone();
  comm::host_broadcast(*comm_, r.data_ptr(), static_cast<size_t>(r.numel()), comm::dtype_of(r.scalar_type()), root);
  return r.device() == device_ ? r : r.to(device_);
}

torch::Tensor Accelerator::gather(const torch::Tensor& t) {
  torch::Tensor x = host_contiguous(t);
  ACCEL_CHECK(x.dim() >= 1, Status::InvalidArgument, "gather needs a tensor of at least one dimension, got a scalar");
  const int n = comm_->size();
  // the shapes first: a clear error instead of silently mixed rows
  const std::vector<int64_t> all = describe_across(x, 0);
  const size_t nd = static_cast<size_t>(x.dim());
  for (int r = 0; r < n; ++r)
    for (size_t d = 0; d < nd; ++d)
      ACCEL_CHECK(all[kRow * static_cast<size_t>(r) + 3 + d] == all[3 + d], Status::InvalidArgument,
                  "gather needs the same shape on every process: process 0 has ", dims_str(&all[3], x.dim()),
                  ", process ", r, " has ", dims_str(&all[kRow * static_cast<size_t>(r) + 3], x.dim()),
                  " (pad_across_processes makes them equal)");
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape[0] *= n;
  torch::Tensor out = torch::empty(out_shape, x.options());
  comm::host_all_gather(*comm_, x.data_ptr(), out.data_ptr(), static_cast<size_t>(x.numel()), comm::dtype_of(x.scalar_type()));
  return out.device() == device_ ? out : out.to(device_);
}

torch::Tensor Accelerator::pad_across_processes(const torch::Tensor& t, int64_t dim, double value, bool pad_first) {
  torch::Tensor x = host_contiguous(t);
  ACCEL_CHECK(x.dim() >= 1, Status::InvalidArgument, "pad_across_processes needs a tensor of at least one dimension");
  ACCEL_CHECK(dim >= -x.dim() && dim < x.dim(), Status::InvalidArgument, "dim must be in [", -x.dim(), ", ", x.dim(),
              ") for a tensor ", shape_str(x), ", got ", dim);
  if (dim < 0) dim += x.dim();
  if (!x.is_floating_point()) {  // the pad value must be one of the dtype's values: [lo, end)
    const double half = std::ldexp(1.0, static_cast<int>(x.element_size()) * 8 - 1);
    const bool unsigned_bytes = x.scalar_type() == torch::kByte;
    const double lo = unsigned_bytes ? 0.0 : -half, end = unsigned_bytes ? 2 * half : half;
    ACCEL_CHECK(std::isfinite(value) && value == std::floor(value) && value >= lo && value < end,
                Status::InvalidArgument, "pad_value must be an integer in the range of ", c10::toString(x.scalar_type()),
                " for this tensor, got ", value);
  }
  const int n = comm_->size();
  const std::vector<int64_t> all = describe_across(x, dim);
  for (int r = 0; r < n; ++r)
    ACCEL_CHECK(all[kRow * static_cast<size_t>(r) + 2] == dim, Status::InvalidArgument,
                "dim differs across processes: process 0 pads dimension ", all[2], ", process ", r, " dimension ",
                all[kRow * static_cast<size_t>(r) + 2]);
  const int64_t size = x.size(dim);
  int64_t target = 0;
  for (int r = 0; r < n; ++r) target = std::max(target, all[kRow * static_cast<size_t>(r) + 3 + static_cast<size_t>(dim)]);
  torch::Tensor out = x;
  if (target > size) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape[static_cast<size_t>(dim)] = target;
    out = torch::full(shape, value, x.options());
    out.narrow(dim, pad_first ? target - size : 0, size).copy_(x);
  }
  return out.device() == device_ ? out : out.to(device_);
}

torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& t) {
  torch::Tensor x = host_contiguous(t);
  ACCEL_CHECK(x.dim() >= 1, Status::InvalidArgument, "gather_for_metrics needs a tensor of at least one dimension");
  // this process's rows that are not even_batches' duplicates (they come first)
  int64_t keep = x.size(0);
  if (last_rows_ == x.size(0) && last_valid_ >= 0) keep = last_valid_;
  const torch::Tensor mine = x.narrow(0, 0, keep);
  const int n = comm_->size();
  std::vector<int64_t> counts(static_cast<size_t>(n));
  comm::host_all_gather(*comm_, &keep, counts.data(), 1, comm::DataType::Int64);
  torch::Tensor padded = pad_across_processes(mine, 0, 0.0, false).to(torch::kCPU);
  torch::Tensor all = gather(padded).to(torch::kCPU);
  const int64_t per = padded.size(0);
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < n; ++r) parts.push_back(all.narrow(0, r * per, counts[static_cast<size_t>(r)]));
  torch::Tensor out = torch::cat(parts, 0);
  return out.device() == device_ ? out : out.to(device_);
}

}  // namespace accel
