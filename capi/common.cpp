// The C ABI: versions, status names and the last error.
#include <string_view>

#include "capi/internal.h"
#include "runtime/version.h"

using namespace accel::capi;

static_assert(std::string_view(ACCEL_VERSION_STRING) == accel::kVersion,
              "runtime/version.h and include/accel/accel.h must give the same version");

extern "C" {

int accel_version_number(void) { return ACCEL_VERSION_NUMBER; }
const char* accel_version_string(void) { return ACCEL_VERSION_STRING; }

const char* accel_status_name(accel_status s) {
  switch (raw(s)) {
    case ACCEL_OK: return "ACCEL_OK";
    case ACCEL_ERR_INVALID_ARGUMENT: return "ACCEL_ERR_INVALID_ARGUMENT";
    case ACCEL_ERR_INVALID_STATE: return "ACCEL_ERR_INVALID_STATE";
    case ACCEL_ERR_OUT_OF_MEMORY: return "ACCEL_ERR_OUT_OF_MEMORY";
    case ACCEL_ERR_COMMUNICATION: return "ACCEL_ERR_COMMUNICATION";
    case ACCEL_ERR_TIMEOUT: return "ACCEL_ERR_TIMEOUT";
    case ACCEL_ERR_IO: return "ACCEL_ERR_IO";
    case ACCEL_ERR_FORMAT: return "ACCEL_ERR_FORMAT";
    case ACCEL_ERR_UNSUPPORTED: return "ACCEL_ERR_UNSUPPORTED";
    case ACCEL_ERR_INTERNAL: return "ACCEL_ERR_INTERNAL";
    case ACCEL_ERR_NON_FINITE: return "ACCEL_ERR_NON_FINITE";
  }
  return "ACCEL_ERR_UNKNOWN";
}

const char* accel_last_error(const accel_context* ctx) { return ctx ? ctx->last_error.c_str() : tls_error.c_str(); }

}  // extern "C"
