// Package accel is the Go binding of accel, an embeddable training runtime, over its C ABI
// (include/accel/accel.h). It uses cgo and the standard library only.
//
// The header and the library are found with pkg-config (#cgo pkg-config: accel): an
// installed libaccel's accel.pc, or, from a build tree, the accel-uninstalled.pc meson
// writes, with PKG_CONFIG_PATH=BUILD/meson-uninstalled. At run time the dynamic loader
// finds libaccel.so: a system prefix, LD_LIBRARY_PATH, or an rpath
// (CGO_LDFLAGS=-Wl,-rpath,DIR).
//
// Every type is safe for concurrent use. A Context serialises the calls on it and on the
// objects made from it (a mutex: the ABI lets one thread at a time use a context); a
// simulated rank's Context (SimRun) may be used only by the goroutine running that rank's
// function, and refuses other goroutines with an error; a Tokenizer is immutable and needs
// no lock. Objects (Context, Model, Tensor, Optimizer, Scheduler, DataLoader, SimReport,
// Inference, Tokenizer) are used through pointers whose state is shared by copies of their
// values; each has a Close method (idempotent, safe against concurrent use and concurrent
// Close) and a finalizer as a safety net; using an object after Close, or after the
// Context that made it was closed, returns an error matching ErrClosed (an Inference
// outlives its Context: only its own Close ends it).
// Strings passed to the library are refused (ErrInvalidArgument) when they hold a NUL
// byte. Errors are *Error values carrying the accel status and the library's message.
package accel

/*
#cgo pkg-config: accel
#include "shim.h"

*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// BindingMajor is the major version of libaccel this binding was written for.
const BindingMajor = 0

// HeaderVersion is the ACCEL_VERSION_NUMBER of the header the binding was compiled with.
const HeaderVersion = int(C.ACCEL_VERSION_NUMBER)

// Version returns the loaded library's version number (MAJOR*10000+MINOR*100+PATCH) and string.
func Version() (int, string) {
	return int(C.accel_version_number()), C.GoString(C.accel_version_string())
}

// checkVersion compares a library version number with the binding's major version.
func checkVersion(number int, str string) error {
	if major := number / 10000; major != BindingMajor {
		return &Error{Status: StatusUnsupported, Op: "version check", Message: fmt.Sprintf(
			"libaccel %s is loaded, this binding was written for %d.x: use the Go binding of libaccel %d.x, or libaccel %d.x",
			str, BindingMajor, major, BindingMajor)}
	}
	return nil
}

var (
	versionOnce sync.Once
	versionErr  error
)

// libCheck runs the version check once, at the first entry point that needs the library.
func libCheck() error {
	versionOnce.Do(func() {
		n, s := Version()
		versionErr = checkVersion(n, s)
	})
	return versionErr
}

// resErr turns a wrapper's result into an error; it frees the copied message.
func resErr(op string, r C.ag_res) error {
	if r.status == C.ACCEL_OK {
		return nil
	}
	msg := ""
	if r.msg != nil {
		msg = C.GoString(r.msg)
		C.free(unsafe.Pointer(r.msg))
	}
	return &Error{Status: Status(r.status), Op: op, Message: msg}
}

// String is the status's name as the library spells it ("ACCEL_ERR_IO").
func (s Status) String() string { return C.GoString(C.accel_status_name(C.accel_status(s))) }

// DType is an element type (accel_dtype).
type DType int32

// The element types.
const (
	Float32  DType = C.ACCEL_FLOAT32
	Float16  DType = C.ACCEL_FLOAT16
	BFloat16 DType = C.ACCEL_BFLOAT16
	Int64    DType = C.ACCEL_INT64
	Int32    DType = C.ACCEL_INT32
	Uint8    DType = C.ACCEL_UINT8
	Float64  DType = C.ACCEL_FLOAT64
	Int8     DType = C.ACCEL_INT8
)

// Size is the size in bytes of one element (accel_dtype_size); 0 for an unknown dtype.
func (d DType) Size() int { return int(C.accel_dtype_size(C.accel_dtype(d))) }

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	case Int64:
		return "int64"
	case Int32:
		return "int32"
	case Uint8:
		return "uint8"
	case Float64:
		return "float64"
	case Int8:
		return "int8"
	}
	return fmt.Sprintf("DType(%d)", int32(d))
}

// Precision is accel_precision.
type Precision int32

const (
	PrecisionNo   Precision = C.ACCEL_PRECISION_NO
	PrecisionBF16 Precision = C.ACCEL_PRECISION_BF16
	PrecisionFP16 Precision = C.ACCEL_PRECISION_FP16
	// PrecisionAuto is bf16 where the context's device computes it natively, else fp32
	// (PrecisionNo). Init resolves it (Context.MixedPrecision says to what); EstimateMemory
	// refuses it.
	PrecisionAuto Precision = C.ACCEL_PRECISION_AUTO
)

// Device is accel_device.
type Device int32

const (
	DeviceAuto Device = C.ACCEL_DEVICE_AUTO
	DeviceCPU  Device = C.ACCEL_DEVICE_CPU
	DeviceCUDA Device = C.ACCEL_DEVICE_CUDA
)

// Strategy is accel_strategy.
type Strategy int32

const (
	StrategyNo          Strategy = C.ACCEL_STRATEGY_NO
	StrategyDDP         Strategy = C.ACCEL_STRATEGY_DDP
	StrategyZero1       Strategy = C.ACCEL_STRATEGY_ZERO1
	StrategyZero2       Strategy = C.ACCEL_STRATEGY_ZERO2
	StrategyZero3       Strategy = C.ACCEL_STRATEGY_ZERO3
	StrategyShardGradOp Strategy = C.ACCEL_STRATEGY_SHARD_GRAD_OP
	StrategyFullShard   Strategy = C.ACCEL_STRATEGY_FULL_SHARD
)

// Backend is accel_backend.
type Backend int32

const (
	BackendAuto Backend = C.ACCEL_BACKEND_AUTO
	BackendGloo Backend = C.ACCEL_BACKEND_GLOO
	BackendNCCL Backend = C.ACCEL_BACKEND_NCCL
	BackendSim  Backend = C.ACCEL_BACKEND_SIM
)

// Offload is accel_offload: what lives in host memory instead of the device's.
type Offload int32

const (
	// OffloadNone keeps everything on the device.
	OffloadNone Offload = C.ACCEL_OFFLOAD_NONE
	// OffloadOptimizer is ZeRO-Offload: the optimizer's state and the fp32 master weights
	// live in host memory and each step runs on the CPU; the same weights, bit for bit, as
	// OffloadNone.
	OffloadOptimizer Offload = C.ACCEL_OFFLOAD_OPTIMIZER
	// OffloadParameters (ZeRO-3 only) is OffloadOptimizer and each rank's shard of the
	// working weights in host memory too, copied to the device unit by unit for its gathers.
	OffloadParameters Offload = C.ACCEL_OFFLOAD_PARAMETERS
)

// Activation is accel_activation.
type Activation int32

const (
	ActReLU    Activation = C.ACCEL_ACT_RELU
	ActGELU    Activation = C.ACCEL_ACT_GELU
	ActTanh    Activation = C.ACCEL_ACT_TANH
	ActSigmoid Activation = C.ACCEL_ACT_SIGMOID
)

// Schedule is accel_schedule.
type Schedule int32

const (
	ScheduleConstant Schedule = C.ACCEL_SCHEDULE_CONSTANT
	ScheduleLinear   Schedule = C.ACCEL_SCHEDULE_LINEAR
	ScheduleCosine   Schedule = C.ACCEL_SCHEDULE_COSINE
)

// ReduceOp is accel_reduce_op.
type ReduceOp int32

const (
	ReduceSum  ReduceOp = C.ACCEL_REDUCE_SUM
	ReduceMean ReduceOp = C.ACCEL_REDUCE_MEAN
	ReduceMax  ReduceOp = C.ACCEL_REDUCE_MAX
	ReduceMin  ReduceOp = C.ACCEL_REDUCE_MIN
	ReduceProd ReduceOp = C.ACCEL_REDUCE_PROD
)

// cbool converts a Go bool to a C int flag.
func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
