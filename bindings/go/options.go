package accel

/*
#include "shim.h"

static void ag_options_init(accel_options *o) {
    if (accel_options_init(o, ACCEL_OPTIONS_VERSION) != ACCEL_OK) { accel_options d = ACCEL_OPTIONS_INIT; *o = d; }
}
static void ag_mlp_options_init(accel_mlp_options *o) {
    if (accel_mlp_options_init(o, ACCEL_MLP_OPTIONS_VERSION) != ACCEL_OK) { accel_mlp_options d = ACCEL_MLP_OPTIONS_INIT; *o = d; }
}
static void ag_sgd_options_init(accel_sgd_options *o) {
    if (accel_sgd_options_init(o, ACCEL_SGD_OPTIONS_VERSION) != ACCEL_OK) { accel_sgd_options d = ACCEL_SGD_OPTIONS_INIT; *o = d; }
}
static void ag_adamw_options_init(accel_adamw_options *o) {
    if (accel_adamw_options_init(o, ACCEL_ADAMW_OPTIONS_VERSION) != ACCEL_OK) { accel_adamw_options d = ACCEL_ADAMW_OPTIONS_INIT; *o = d; }
}
static void ag_lamb_options_init(accel_lamb_options *o) {
    if (accel_lamb_options_init(o, ACCEL_LAMB_OPTIONS_VERSION) != ACCEL_OK) { accel_lamb_options d = ACCEL_LAMB_OPTIONS_INIT; *o = d; }
}
static void ag_scheduler_options_init(accel_scheduler_options *o) {
    if (accel_scheduler_options_init(o, ACCEL_SCHEDULER_OPTIONS_VERSION) != ACCEL_OK) { accel_scheduler_options d = ACCEL_SCHEDULER_OPTIONS_INIT; *o = d; }
}
static void ag_dataloader_options_init(accel_dataloader_options *o) {
    if (accel_dataloader_options_init(o, ACCEL_DATALOADER_OPTIONS_VERSION) != ACCEL_OK) { accel_dataloader_options d = ACCEL_DATALOADER_OPTIONS_INIT; *o = d; }
}
static void ag_sim_options_init(accel_sim_options *o) {
    if (accel_sim_options_init(o, ACCEL_SIM_OPTIONS_VERSION) != ACCEL_OK) { accel_sim_options d = ACCEL_SIM_OPTIONS_INIT; *o = d; }
}
static void ag_project_options_init(accel_project_options *o) {
    if (accel_project_options_init(o, ACCEL_PROJECT_OPTIONS_VERSION) != ACCEL_OK) { accel_project_options d = ACCEL_PROJECT_OPTIONS_INIT; *o = d; }
}*/
import "C"

import (
	"unsafe"
)

// The ag_*_options_init wrappers above fill a struct with the loaded library's defaults
// for the header's version (accel_*_options_init), or, should the library not know that
// version (an older minor release), with the header's own ACCEL_*_OPTIONS_INIT defaults:
// the DefaultXxx functions never fail (and never panic); a library that does not know the
// version refuses the struct, with its message, where it is used.

// Options configures a Context (accel_options). Start from DefaultOptions(): the zero
// value is not the defaults (a zero GradientAccumulationSteps is refused).
type Options struct {
	MixedPrecision            Precision
	GradientAccumulationSteps int32
	Seed                      uint64
	Device                    Device
	DeviceIndex               int32
	LossScaleInit             float64
	LossScaleGrowthFactor     float64
	LossScaleBackoffFactor    float64
	LossScaleGrowthInterval   int32
	NumThreads                int32
	Strategy                  Strategy
	BucketBytes               int64
	Backend                   Backend
	TimeoutSeconds            float64
	// Offload: OffloadNone (the default, or the ACCEL_OFFLOAD environment variable when left
	// at it) or OffloadOptimizer (the optimizer's state and master weights in host memory).
	Offload Offload
}

// DefaultOptions returns the library's defaults (accel_options_init).
func DefaultOptions() Options {
	var c C.accel_options
	C.ag_options_init(&c)
	return Options{
		MixedPrecision: Precision(c.mixed_precision), GradientAccumulationSteps: int32(c.gradient_accumulation_steps),
		Seed: uint64(c.seed), Device: Device(c.device), DeviceIndex: int32(c.device_index),
		LossScaleInit: float64(c.loss_scale_init), LossScaleGrowthFactor: float64(c.loss_scale_growth_factor),
		LossScaleBackoffFactor: float64(c.loss_scale_backoff_factor), LossScaleGrowthInterval: int32(c.loss_scale_growth_interval),
		NumThreads: int32(c.num_threads), Strategy: Strategy(c.strategy), BucketBytes: int64(c.bucket_bytes),
		Backend: Backend(c.backend), TimeoutSeconds: float64(c.timeout_seconds), Offload: Offload(c.offload),
	}
}

func (o *Options) toC() C.accel_options {
	var c C.accel_options
	C.ag_options_init(&c)
	c.mixed_precision = C.accel_precision(o.MixedPrecision)
	c.gradient_accumulation_steps = C.int32_t(o.GradientAccumulationSteps)
	c.seed = C.uint64_t(o.Seed)
	c.device = C.accel_device(o.Device)
	c.device_index = C.int32_t(o.DeviceIndex)
	c.loss_scale_init = C.double(o.LossScaleInit)
	c.loss_scale_growth_factor = C.double(o.LossScaleGrowthFactor)
	c.loss_scale_backoff_factor = C.double(o.LossScaleBackoffFactor)
	c.loss_scale_growth_interval = C.int32_t(o.LossScaleGrowthInterval)
	c.num_threads = C.int32_t(o.NumThreads)
	c.strategy = C.accel_strategy(o.Strategy)
	c.bucket_bytes = C.int64_t(o.BucketBytes)
	c.backend = C.accel_backend(o.Backend)
	c.timeout_seconds = C.double(o.TimeoutSeconds)
	c.offload = C.accel_offload(o.Offload)
	return c
}

// MLPOptions describes the built-in multi-layer perceptron (accel_mlp_options).
type MLPOptions struct {
	LayerSizes []int64 // input, hidden..., output
	Activation Activation
	Dropout    float64
	Bias       bool
}

// DefaultMLPOptions returns the library's defaults with the given layer sizes.
func DefaultMLPOptions(layerSizes ...int64) MLPOptions {
	var c C.accel_mlp_options
	C.ag_mlp_options_init(&c)
	return MLPOptions{LayerSizes: append([]int64(nil), layerSizes...), Activation: Activation(c.activation),
		Dropout: float64(c.dropout), Bias: c.bias != 0}
}

// toC fills a C struct; layer_sizes is copied to C memory (a Go pointer may not be stored
// in memory passed to C). The caller calls the returned free function.
func (o *MLPOptions) toC() (C.accel_mlp_options, func()) {
	var c C.accel_mlp_options
	C.ag_mlp_options_init(&c)
	var sizes *C.int64_t
	if n := len(o.LayerSizes); n > 0 {
		sizes = (*C.int64_t)(C.malloc(C.size_t(n) * 8))
		copy(unsafe.Slice((*int64)(unsafe.Pointer(sizes)), n), o.LayerSizes)
	}
	c.layer_sizes = sizes
	c.num_layer_sizes = C.size_t(len(o.LayerSizes))
	c.activation = C.accel_activation(o.Activation)
	c.dropout = C.double(o.Dropout)
	if o.Bias {
		c.bias = 1
	} else {
		c.bias = 0
	}
	return c, func() { C.free(unsafe.Pointer(sizes)) }
}

// SGDOptions is accel_sgd_options.
type SGDOptions struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
}

// DefaultSGDOptions returns the library's defaults (lr 0.01).
func DefaultSGDOptions() SGDOptions {
	var c C.accel_sgd_options
	C.ag_sgd_options_init(&c)
	return SGDOptions{LR: float64(c.lr), Momentum: float64(c.momentum), Dampening: float64(c.dampening),
		WeightDecay: float64(c.weight_decay), Nesterov: c.nesterov != 0}
}

func (o *SGDOptions) toC() C.accel_sgd_options {
	var c C.accel_sgd_options
	C.ag_sgd_options_init(&c)
	c.lr, c.momentum, c.dampening, c.weight_decay = C.double(o.LR), C.double(o.Momentum), C.double(o.Dampening), C.double(o.WeightDecay)
	c.nesterov = C.int32_t(cbool(o.Nesterov))
	return c
}

// AdamWOptions is accel_adamw_options.
type AdamWOptions struct{ LR, Beta1, Beta2, Eps, WeightDecay float64 }

// DefaultAdamWOptions returns the library's defaults (lr 1e-3, weight decay 0.01).
func DefaultAdamWOptions() AdamWOptions {
	var c C.accel_adamw_options
	C.ag_adamw_options_init(&c)
	return AdamWOptions{float64(c.lr), float64(c.beta1), float64(c.beta2), float64(c.eps), float64(c.weight_decay)}
}

func (o *AdamWOptions) toC() C.accel_adamw_options {
	var c C.accel_adamw_options
	C.ag_adamw_options_init(&c)
	c.lr, c.beta1, c.beta2, c.eps, c.weight_decay = C.double(o.LR), C.double(o.Beta1), C.double(o.Beta2), C.double(o.Eps), C.double(o.WeightDecay)
	return c
}

// LAMBOptions is accel_lamb_options.
type LAMBOptions struct{ LR, Beta1, Beta2, Eps, WeightDecay float64 }

// DefaultLAMBOptions returns the library's defaults (lr 1e-3, eps 1e-6).
func DefaultLAMBOptions() LAMBOptions {
	var c C.accel_lamb_options
	C.ag_lamb_options_init(&c)
	return LAMBOptions{float64(c.lr), float64(c.beta1), float64(c.beta2), float64(c.eps), float64(c.weight_decay)}
}

func (o *LAMBOptions) toC() C.accel_lamb_options {
	var c C.accel_lamb_options
	C.ag_lamb_options_init(&c)
	c.lr, c.beta1, c.beta2, c.eps, c.weight_decay = C.double(o.LR), C.double(o.Beta1), C.double(o.Beta2), C.double(o.Eps), C.double(o.WeightDecay)
	return c
}

// SchedulerOptions is accel_scheduler_options.
type SchedulerOptions struct {
	Kind        Schedule
	WarmupSteps int64
	TotalSteps  int64
	MinLRRatio  float64
}

// DefaultSchedulerOptions returns the library's defaults (constant, no warm-up).
func DefaultSchedulerOptions() SchedulerOptions {
	var c C.accel_scheduler_options
	C.ag_scheduler_options_init(&c)
	return SchedulerOptions{Schedule(c.kind), int64(c.warmup_steps), int64(c.total_steps), float64(c.min_lr_ratio)}
}

func (o *SchedulerOptions) toC() C.accel_scheduler_options {
	var c C.accel_scheduler_options
	C.ag_scheduler_options_init(&c)
	c.kind = C.accel_schedule(o.Kind)
	c.warmup_steps, c.total_steps = C.int64_t(o.WarmupSteps), C.int64_t(o.TotalSteps)
	c.min_lr_ratio = C.double(o.MinLRRatio)
	return c
}

// DataLoaderOptions is accel_dataloader_options.
type DataLoaderOptions struct {
	BatchSize    int64
	Shuffle      bool
	Seed         uint64
	DropLast     bool
	EvenBatches  bool
	SplitBatches bool
	// Iterable reads the samples as a stream, in their order, sharded as Accelerate's
	// IterableDatasetShard (version 3); Shuffle must be false.
	Iterable bool
}

// DefaultDataLoaderOptions returns the library's defaults (batch 1, even batches).
func DefaultDataLoaderOptions() DataLoaderOptions {
	var c C.accel_dataloader_options
	C.ag_dataloader_options_init(&c)
	return DataLoaderOptions{BatchSize: int64(c.batch_size), Shuffle: c.shuffle != 0, Seed: uint64(c.seed),
		DropLast: c.drop_last != 0, EvenBatches: c.even_batches != 0, SplitBatches: c.split_batches != 0,
		Iterable: c.iterable != 0}
}

func (o *DataLoaderOptions) toC() C.accel_dataloader_options {
	var c C.accel_dataloader_options
	C.ag_dataloader_options_init(&c)
	c.batch_size = C.int64_t(o.BatchSize)
	c.shuffle = C.int32_t(cbool(o.Shuffle))
	c.seed = C.uint64_t(o.Seed)
	c.drop_last = C.int32_t(cbool(o.DropLast))
	c.even_batches = C.int32_t(cbool(o.EvenBatches))
	c.split_batches = C.int32_t(cbool(o.SplitBatches))
	c.iterable = C.int32_t(cbool(o.Iterable))
	return c
}

// SimOptions is accel_sim_options. Empty strings stand for NULL (DeviceMemory "": the
// topology's GPU memory, 79.15 GiB for 8xH100, "unlimited" for none; HostMemory "": unlimited;
// Faults, TracePath "": none).
type SimOptions struct {
	WorldSize      int32
	DeviceMemory   string
	Topology       string
	TimeoutSeconds float64
	Faults         string
	TracePath      string
	EngineThreads  int32
	// HostMemory is each rank's host-memory budget, where OffloadOptimizer keeps the
	// optimizer's state and master weights ("64GiB", a size as DeviceMemory's). Over it the
	// rank fails with ErrOutOfMemory naming host memory.
	HostMemory string
}

func goStr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// DefaultSimOptions returns the library's defaults (2 ranks, "8xH100", 60 s).
func DefaultSimOptions() SimOptions {
	var c C.accel_sim_options
	C.ag_sim_options_init(&c)
	return SimOptions{WorldSize: int32(c.world_size), DeviceMemory: goStr(c.device_memory), Topology: goStr(c.topology),
		TimeoutSeconds: float64(c.timeout_seconds), Faults: goStr(c.faults), TracePath: goStr(c.trace_path),
		EngineThreads: int32(c.engine_threads), HostMemory: goStr(c.host_memory)}
}

func (o *SimOptions) toC(s *cstrs) C.accel_sim_options {
	var c C.accel_sim_options
	C.ag_sim_options_init(&c)
	c.world_size = C.int32_t(o.WorldSize)
	const op = "accel_sim_run"
	c.device_memory = s.str(op, "DeviceMemory", o.DeviceMemory)
	c.topology = s.str(op, "Topology", o.Topology)
	c.timeout_seconds = C.double(o.TimeoutSeconds)
	c.faults = s.str(op, "Faults", o.Faults)
	c.trace_path = s.str(op, "TracePath", o.TracePath)
	c.engine_threads = C.int32_t(o.EngineThreads)
	c.host_memory = s.str(op, "HostMemory", o.HostMemory)
	return c
}

// ProjectOptions is accel_project_options.
type ProjectOptions struct {
	ProjectDir string
	TotalLimit int32 // keep the newest N automatic checkpoints; 0 = all
}

// DefaultProjectOptions returns the library's defaults with the given directory.
func DefaultProjectOptions(dir string) ProjectOptions {
	var c C.accel_project_options
	C.ag_project_options_init(&c)
	return ProjectOptions{ProjectDir: dir, TotalLimit: int32(c.total_limit)}
}

func (o *ProjectOptions) toC(s *cstrs) C.accel_project_options {
	var c C.accel_project_options
	C.ag_project_options_init(&c)
	c.project_dir = s.str("accel_set_project", "ProjectDir", o.ProjectDir)
	c.total_limit = C.int32_t(o.TotalLimit)
	return c
}
