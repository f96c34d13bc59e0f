// The part of nccl.h and of the CUDA runtime's API that accel's nccl backend calls, with
// their names, values and layouts (NCCL 2.28, CUDA 13), in a namespace of its own; and the
// simulator's extensions (accelSim*). The simulated NCCL library (sim/nccl/) implements
// these functions with C linkage, so that the backend (comm/nccl/) runs against it
// exactly as against libnccl and libcudart. Where the real headers are found, the backend
// checks at compile time that this mirror matches them (comm/nccl/api.h).
// Torch-free, CUDA-free.
#pragma once

#include <climits>
#include <cstddef>

namespace accel::nccl_abi {

struct ncclComm;
typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5, ncclMaxRedOp = 0x7fffffff } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

// ncclConfig_v22800: the simulator reads size, magic and blocking.
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;
constexpr unsigned int kConfigMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's
constexpr int kConfigUndefInt = INT_MIN;           // NCCL_CONFIG_UNDEF_INT

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600
} cudaError_t;
constexpr unsigned int kCudaStreamNonBlocking = 0x01;  // cudaStreamNonBlocking
constexpr unsigned int kCudaEventDisableTiming = 0x02;  // cudaEventDisableTiming

}  // namespace accel::nccl_abi

// The simulator's extensions, exported by the simulated library only (the backend finds
// them with dlsym; libnccl has none of them):
//   int    accelSimVersion(void)                          1: this library is the simulator
//   void   accelSimChargeCompute(ncclComm_t, double seconds, const char* label)
//   double accelSimFlopsPerSecond(ncclComm_t)             the preset's rate for estimated work
//   ncclResult_t accelSimOnStep(ncclComm_t, long long step)  an optimizer step starts (faults)
//   size_t accelSimDiagnose(ncclComm_t, char* buf, size_t len)  where every rank is, as text
//   void   accelSimNote(ncclComm_t, const char* why)      why this rank is about to abort: the
//          others' errors quote it
//   int    accelSimMemCharge(unsigned long long bytes, char* msg, size_t len)  0, or 1 with
//          a CUDA-shaped out-of-memory message: the process's simulated device memory
//   void   accelSimMemRelease(unsigned long long bytes)
//   size_t accelSimConfigError(char* buf, size_t len)     0, or the length of why an ACCEL_SIM_*
//          variable is bad: read before any process meets another, so each fails on its own
//   int    accelSimEventWait(cudaEvent_t, unsigned int microseconds)  1 once the event has
//          passed, 0 when the time ran out first: the host sleeps until the stream thread
//          passes it instead of polling (simulated processes share few cores)
//   size_t accelSimDataPaths(ncclComm_t, unsigned long long* counts, size_t len)  how the
//          collectives moved their data (through the arenas, cross-memory attach, the segment),
//          the attach system calls, the arena's resident bytes, and the shared collectives'
//          tickets this rank did and in all (sim/nccl/extensions.cpp);
//          for tests and diagnostics, not in the backend's table
