// Which libtorch accel is compiled against, as a macro. Cheap to include (no ATen).
#pragma once

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

#ifndef TORCH_VERSION_MAJOR
#error "the libtorch version header did not define TORCH_VERSION_MAJOR"
#endif

#define ACCEL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
