// DDP (PyTorch's DistributedDataParallel): every process holds the whole model; gradients
// are averaged in buckets during backward. Internal to the runtime (runtime/strategy/).
#pragma once

#include <memory>

#include "runtime/strategy/strategy.h"

namespace accel {

std::unique_ptr<ParallelStrategy> make_ddp(const StrategySetup& setup);

}  // namespace accel
