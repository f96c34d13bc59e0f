// Internal status codes and the exception the runtime throws. Torch-free.
// The numeric values are those of accel_status in include/accel/accel.h.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace accel {

enum class Status : int {
  Ok = 0,
  InvalidArgument = -1,
  InvalidState = -2,
  OutOfMemory = -3,
  Communication = -4,
  Timeout = -5,
  IO = -6,
  Format = -7,
  Unsupported = -8,
  Internal = -9,
  NonFinite = -10,
};

// The runtime reports every expected failure by throwing an Error; capi/ turns it into a
// status code and a message.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// fail(Status::InvalidArgument, "batch size ", b, " must be positive")
template <class... Args>
[[noreturn]] void fail(Status status, Args&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(parts));
  throw Error(status, os.str());
}

// The status of a failed system call: a resource that ran out (file descriptors, kernel
// memory) is OutOfMemory, anything else IO.
inline Status status_of_errno(int e) {
  return (e == 24 /* EMFILE */ || e == 23 /* ENFILE */ || e == 12 /* ENOMEM */) ? Status::OutOfMemory : Status::IO;
}

#define ACCEL_CHECK(cond, status, ...)         \
  do {                                         \
    if (!(cond)) ::accel::fail(status, __VA_ARGS__); \
  } while (0)

}  // namespace accel
