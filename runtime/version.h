// The library's version as the runtime records it (a checkpoint's manifest says which accel
// wrote it). The public header's ACCEL_VERSION_STRING is the same text: capi/common.cpp
// checks at compile time that the two agree, so the runtime needs no part of the C ABI.
#pragma once

namespace accel {
inline constexpr const char kVersion[] = "0.1.0";
}  // namespace accel
