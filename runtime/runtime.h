// accel's internal C++ runtime, all of it: the C ABI in capi/ wraps it thinly.
// UNSTABLE: this API changes without notice; programs use include/accel/accel.h.
// The parts (docs/architecture.md): options.h, precision.h, model.h, optim/optimizer.h,
// data.h, accelerator.h; the strategies in strategy/, the communicators in comm/.
#pragma once

#include "runtime/accelerator.h"
