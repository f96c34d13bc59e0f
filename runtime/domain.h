// The domains of numeric inputs: one check per kind of domain, one message shape
// ("weight_decay must be finite and >= 0, got inf"), used by every validator. Torch-free.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/status.h"

namespace accel::domain {

// finite and > 0
inline void positive(const char* name, double v) {
  ACCEL_CHECK(std::isfinite(v) && v > 0, Status::InvalidArgument, name, " must be finite and > 0, got ", v);
}
// finite and >= 0
inline void non_negative(const char* name, double v) {
  ACCEL_CHECK(std::isfinite(v) && v >= 0, Status::InvalidArgument, name, " must be finite and >= 0, got ", v);
}
// in [lo, hi] (so finite)
inline void closed(const char* name, double v, double lo, double hi) {
  ACCEL_CHECK(v >= lo && v <= hi, Status::InvalidArgument, name, " must be in [", lo, ", ", hi, "], got ", v);
}
// in [lo, hi)
inline void half_open(const char* name, double v, double lo, double hi) {
  ACCEL_CHECK(v >= lo && v < hi, Status::InvalidArgument, name, " must be in [", lo, ", ", hi, "), got ", v);
}
// in (lo, hi)
inline void open(const char* name, double v, double lo, double hi) {
  ACCEL_CHECK(v > lo && v < hi, Status::InvalidArgument, name, " must be in (", lo, ", ", hi, "), got ", v);
}
// finite and > lo
inline void above(const char* name, double v, double lo) {
  ACCEL_CHECK(std::isfinite(v) && v > lo, Status::InvalidArgument, name, " must be finite and > ", lo, ", got ", v);
}
// an integer >= lo
inline void at_least(const char* name, int64_t v, int64_t lo) {
  ACCEL_CHECK(v >= lo, Status::InvalidArgument, name, " must be >= ", lo, ", got ", v);
}
// an integer in [lo, hi]
inline void within(const char* name, int64_t v, int64_t lo, int64_t hi) {
  ACCEL_CHECK(v >= lo && v <= hi, Status::InvalidArgument, name, " must be in [", lo, ", ", hi, "], got ", v);
}

}  // namespace accel::domain
