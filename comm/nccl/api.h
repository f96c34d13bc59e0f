// The functions of NCCL and of the CUDA runtime that the nccl backend calls, as a table of
// pointers, so that one backend runs on either library:
//   - the real ones (libnccl.so.2, libcudart.so.N), loaded with dlopen the first time the
//     backend is asked for, in every build: nothing links them, so a build made where the
//     toolkit is found runs where it is not. Their types come from comm/nccl/nccl_abi.h's mirror of
//     nccl.h and cuda_runtime_api.h, or from the real headers where the toolkit is found at
//     configure time (ACCEL_HAVE_NCCL), and then the mirror is checked against them at
//     compile time (nccl.cpp);
//   - the simulated ones (libaccel-nccl-sim.so, sim/nccl/), loaded with dlopen, in every
//     build: ACCEL_BACKEND=sim. They add the simulator's extensions (virtual clock, steps,
//     memory, diagnosis), null in the real table.
// Included by comm/nccl/nccl.cpp only.
#pragma once

#include <cstddef>
#include <string>

#if defined(ACCEL_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>
#else
#include "comm/nccl/nccl_abi.h"
using namespace accel::nccl_abi;  // NOLINT: nccl.h's names, as the real header puts them
#define NCCL_CONFIG_INITIALIZER                                                                            \
  {                                                                                                        \
    sizeof(ncclConfig_t), accel::nccl_abi::kConfigMagic, 22800, accel::nccl_abi::kConfigUndefInt,          \
        accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt, \
        nullptr, accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt, nullptr,              \
        accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt, \
        accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt, accel::nccl_abi::kConfigUndefInt \
  }
#define cudaStreamNonBlocking accel::nccl_abi::kCudaStreamNonBlocking
#define cudaEventDisableTiming accel::nccl_abi::kCudaEventDisableTiming
#endif

namespace accel::comm {

struct NcclApi {
  const char* library = "";  // "libnccl" or the simulated library's path
  bool simulated = false;
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*);
  ncclResult_t (*ncclCommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
  const char* (*ncclGetLastError)(ncclComm_t);
  const char* (*ncclGetErrorString)(ncclResult_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  ncclResult_t (*ncclCommFinalize)(ncclComm_t);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclRedOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t);
  ncclResult_t (*ncclRedOpDestroy)(ncclRedOp_t, ncclComm_t);
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclAllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclBroadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclSend)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclRecv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  cudaError_t (*cudaGetDeviceCount)(int*);
  cudaError_t (*cudaSetDevice)(int);
  const char* (*cudaGetErrorString)(cudaError_t);
  cudaError_t (*cudaStreamCreateWithFlags)(cudaStream_t*, unsigned int);
  cudaError_t (*cudaStreamDestroy)(cudaStream_t);
  cudaError_t (*cudaEventCreateWithFlags)(cudaEvent_t*, unsigned int);
  cudaError_t (*cudaEventDestroy)(cudaEvent_t);
  cudaError_t (*cudaEventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*cudaEventQuery)(cudaEvent_t);
  cudaError_t (*cudaStreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned int);
  cudaError_t (*cudaMalloc)(void**, size_t);
  cudaError_t (*cudaFree)(void*);
  // the simulator's extensions (comm/nccl/nccl_abi.h); null for the real library
  void (*accelSimChargeCompute)(ncclComm_t, double, const char*) = nullptr;
  double (*accelSimFlopsPerSecond)(ncclComm_t) = nullptr;
  ncclResult_t (*accelSimOnStep)(ncclComm_t, long long) = nullptr;
  size_t (*accelSimDiagnose)(ncclComm_t, char*, size_t) = nullptr;
  void (*accelSimNote)(ncclComm_t, const char*) = nullptr;
  int (*accelSimMemCharge)(unsigned long long, char*, size_t) = nullptr;
  void (*accelSimMemRelease)(unsigned long long) = nullptr;
  size_t (*accelSimConfigError)(char*, size_t) = nullptr;
  int (*accelSimEventWait)(cudaEvent_t, unsigned int) = nullptr;
};

// The functions both libraries have, for filling the table (nccl.cpp: one list, two fills).
#define ACCEL_NCCL_FUNCTIONS(X)                                                                                    \
  X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommGetAsyncError) X(ncclGetLastError) X(ncclGetErrorString) \
  X(ncclCommAbort) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy)         \
  X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) X(ncclReduce) X(ncclSend) X(ncclRecv)   \
  X(ncclGroupStart) X(ncclGroupEnd) X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetErrorString)                  \
  X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaEventCreateWithFlags) X(cudaEventDestroy)               \
  X(cudaEventRecord) X(cudaEventQuery) X(cudaStreamWaitEvent) X(cudaMalloc) X(cudaFree)
// The simulator's extensions, which only the simulated library has.
#define ACCEL_NCCL_SIM_FUNCTIONS(X)                                                                   \
  X(accelSimChargeCompute) X(accelSimFlopsPerSecond) X(accelSimOnStep) X(accelSimDiagnose) X(accelSimNote) \
  X(accelSimMemCharge) X(accelSimMemRelease) X(accelSimConfigError) X(accelSimEventWait)

// The real NCCL and CUDA runtime (loaded once): ACCEL_NCCL_LIBRARY, else the libnccl already
// in the process (a CUDA libtorch's), else libnccl.so.2 on the loader's path; the CUDA runtime
// likewise (ACCEL_CUDART_LIBRARY, libcudart.so.13/.12/.11). Error(Unsupported) naming what
// was tried when either cannot be loaded or lacks a function.
const NcclApi& real_nccl_api();
// The simulated NCCL (loaded once): ACCEL_SIM_NCCL_LIBRARY, else libaccel-nccl-sim.so
// beside libaccel (or the program), else the loader's search path. Error(Unsupported)
// naming the paths tried when it cannot be loaded.
const NcclApi& sim_nccl_api();

}  // namespace accel::comm
