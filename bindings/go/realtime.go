package accel

/*
#include "shim.h"

static void ag_inference_options_init(accel_inference_options *o) {
    if (accel_inference_options_init(o, ACCEL_INFERENCE_OPTIONS_VERSION) != ACCEL_OK) { accel_inference_options d = ACCEL_INFERENCE_OPTIONS_INIT; *o = d; }
}
static ag_res ag_inference_run(accel_inference *inf, accel_tensor *const *in, size_t n, accel_tensor **out) { return ag_fail(accel_inference_run(inf, in, n, out)); }
static ag_res ag_inference_weights(const accel_inference *inf, uint64_t *v, double *age) { return ag_fail(accel_inference_weights(inf, v, age)); }
*/
import "C"

import (
	"runtime"
	"sync"
)

// ---- real time: inference beside training (docs/on-device.md) ----

// InferenceOptions is accel_inference_options.
type InferenceOptions struct {
	// NumThreads is the intra-op threads of the OS thread that calls Run (libtorch's OpenMP
	// threads are counted per thread: this sets the calling thread's); in [1, 4096], default 1.
	NumThreads int32
}

// DefaultInferenceOptions returns the library's defaults (one thread).
func DefaultInferenceOptions() InferenceOptions {
	var c C.accel_inference_options
	C.ag_inference_options_init(&c)
	return InferenceOptions{NumThreads: int32(c.num_threads)}
}

func (o *InferenceOptions) toC() C.accel_inference_options {
	var c C.accel_inference_options
	C.ag_inference_options_init(&c)
	if o == nil {
		return c
	}
	c.num_threads = C.int32_t(o.NumThreads)
	return c
}

// Inference is an inference copy of a model (accel_inference): the model's structure in
// evaluation mode, without autograd, running the weights last published with
// Context.PublishWeights (or those it was made with). It never waits for the trainer: a
// run takes the latest published weights at its start and keeps them to its end.
//
// An Inference is independent of its Context and model: it holds what it needs, may be
// used while the Context trains, publishes or saves checkpoints on another goroutine, and
// outlives the model and the Context (their Close neither closes nor invalidates it, and it
// does not keep them reachable). Close it (a finalizer is the safety net).
//
// It is used by one goroutine at a time, any goroutine: a Run or Weights that overlaps
// another goroutine's Run or Weights on the same copy fails with ErrInvalidState instead of
// racing, and Close waits for a call in progress. Several copies may run on several
// goroutines at once. Pin the goroutine that runs a copy (runtime.LockOSThread): Run sets
// the intra-op threads of the OS thread it runs on, which an unpinned goroutine leaves to
// the next goroutine scheduled there.
//
// The state lives behind a pointer: a copy of an Inference value shares it.
type Inference struct {
	s *infState
}

type infState struct {
	mu sync.Mutex // held by Run, Weights (TryLock: they do not wait) and Close
	h  *C.accel_inference
}

func (s *infState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil {
		C.accel_inference_destroy(s.h)
		s.h = nil
	}
}

// Close releases the copy (accel_inference_destroy), waiting for a Run or Weights of
// another goroutine in progress. Idempotent.
func (i *Inference) Close() error {
	if i == nil || i.s == nil {
		return nil
	}
	runtime.SetFinalizer(i.s, nil)
	i.s.close()
	return nil
}

// lock takes the copy for one call; the caller unlocks the returned state's mu.
func (i *Inference) lock(op string) (*infState, error) {
	if i == nil || i.s == nil {
		return nil, errArg(op, "inference is nil (or a zero Inference value)")
	}
	s := i.s
	if !s.mu.TryLock() {
		return nil, &Error{Status: StatusInvalidState, Op: op, Message: op +
			": the inference copy is in use by another goroutine (a copy is used by one goroutine at a time)"}
	}
	if s.h == nil {
		s.mu.Unlock()
		return nil, &Error{Status: StatusInvalidState, Op: op, closed: true, Message: op + ": the inference copy is closed"}
	}
	return s, nil
}

// Inference creates an inference copy of model on the context's device
// (accel_inference_create): the built-in MLP, a TorchScript module, a causal LM with or
// without LoRA adapters. It publishes the model's current weights (as PublishWeights, so
// under ZeRO every process calls it) and starts with them. opts nil: the defaults. The
// copy belongs to the caller and outlives model and ctx (see Inference). Errors match
// ErrInvalidArgument for a model of another context or an option outside its domain
// (NumThreads outside [1, 4096]); ErrUnsupported for a LoRA model whose base weights ZeRO
// shards (save it with SavePretrained and load that instead).
func (c *Context) Inference(model *Model, opts *InferenceOptions) (*Inference, error) {
	const op = "accel_inference_create"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	mh, err := model.in(c.st, op)
	if err != nil {
		return nil, err
	}
	co := opts.toC()
	var out *C.accel_inference
	if err = c.err(op, C.accel_inference_create(h, mh, &co, &out)); err != nil {
		return nil, err
	}
	s := &infState{h: out} // not among the context's objects: it outlives the context
	runtime.SetFinalizer(s, (*infState).close)
	return &Inference{s: s}, nil
}

// PublishWeights publishes model's current trained weights (fp32 masters, or a causal LM's
// own dtype) to every inference copy of it and returns their version
// (accel_publish_weights): 1 for the first publication (Inference's), then 2, 3, ... Each
// copy's next Run uses them; a Run in progress finishes with the weights it started with.
// The weights are copied, so training goes on at once. Under ZeRO every process calls it.
// Errors match ErrInvalidArgument for a model of another context; ErrOutOfMemory when no
// weight set can be allocated (the copies keep the weights they had).
func (c *Context) PublishWeights(model *Model) (uint64, error) {
	const op = "accel_publish_weights"
	h, err := c.lock(op)
	if err != nil {
		return 0, err
	}
	defer c.st.unlock()
	mh, err := model.in(c.st, op)
	if err != nil {
		return 0, err
	}
	var v C.uint64_t
	err = c.err(op, C.accel_publish_weights(h, mh, &v))
	if err != nil {
		return 0, err
	}
	return uint64(v), nil
}

// Run runs the copy's forward on inputs (accel_inference_run; borrowed, only read, on any
// device) with the latest published weights, in fp32 (a causal LM in its weights' dtype),
// and returns a new tensor without a graph, usable anywhere (also as a loss's input). Errors
// match ErrInvalidArgument as Model.Forward's (the input count, shapes and dtypes: the
// message says which) and for a nil input; ErrInvalidState while another goroutine uses
// the copy; ErrClosed after Close.
func (i *Inference) Run(inputs ...*Tensor) (*Tensor, error) {
	const op = "accel_inference_run"
	s, err := i.lock(op)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var one [1]*C.accel_tensor
	var st [1]*tensorState
	p, n, ss, err := tensorHandles(op, inputs, &one, &st)
	defer releaseAll(ss)
	if err != nil {
		return nil, err
	}
	var out *C.accel_tensor
	err = resErr(op, C.ag_inference_run(s.h, p, n, &out))
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// Weights returns the version of the weights the copy's last Run used (before any run:
// those it was made with) and how many seconds ago they were published (>= 0)
// (accel_inference_weights). Errors match ErrInvalidState while another goroutine uses the
// copy; ErrClosed after Close.
func (i *Inference) Weights() (version uint64, ageSeconds float64, err error) {
	const op = "accel_inference_weights"
	s, err := i.lock(op)
	if err != nil {
		return 0, 0, err
	}
	defer s.mu.Unlock()
	var v C.uint64_t
	var age C.double
	err = resErr(op, C.ag_inference_weights(s.h, &v, &age))
	if err != nil {
		return 0, 0, err
	}
	return uint64(v), float64(age), nil
}

// ---- bounded training between frames ----

// Loss is accel_loss: the loss TrainMicroBatches computes.
type Loss int32

const (
	LossMSE          Loss = C.ACCEL_LOSS_MSE           // MSE(forward(inputs), targets)
	LossCrossEntropy Loss = C.ACCEL_LOSS_CROSS_ENTROPY // CrossEntropy(forward(inputs), targets)
	LossCausalLM     Loss = C.ACCEL_LOSS_CAUSAL_LM     // a causal LM's next-token loss; labels: the targets, or the inputs when the loader has none
)

// TrainResult is accel_train_result: what one TrainMicroBatches call did.
type TrainResult struct {
	MicroBatches   int32 // micro-batches trained by this call
	OptimizerSteps int32 // real optimizer steps taken by this call
	SkippedSteps   int32 // fp16 steps skipped for inf/NaN gradients by this call
	// EpochEnded: the call stopped at the end of the loader's epoch (the loader has
	// advanced: the next call starts the next epoch).
	EpochEnded bool
	MeanLoss   float64 // the mean of the micro-batches' losses; NaN when none ran
	Seconds    float64 // the call's wall time
}

// TrainMicroBatches trains at most maxMicroBatches (>= 1) micro-batches of loader on the
// prepared model and optimizer (accel_train_micro_batches): for each, the next batch, the
// forward, the loss, Backward and Step, exactly as a loop of those calls does (gradient
// accumulation, mixed precision, the strategy and the scheduler included). It stops early
// at the end of the loader's epoch, and, when maxSeconds > 0, before a micro-batch that
// would end past maxSeconds after the call began, judged by the mean time of this call's
// micro-batches so far (at least one runs): a game loop trains between frames this way.
// With several processes each must train the same number of micro-batches, so maxSeconds
// must be 0 there. The loader's batches go to the call, not to Next/Batch.
//
// Errors are those of the calls it makes (ErrNonFinite for a NaN loss, ...): the
// micro-batches before the failing one stay trained. ErrInvalidState before Prepare bound
// this model and an optimizer, or with the model in evaluation mode; ErrInvalidArgument
// for maxMicroBatches < 1, a maxSeconds that is negative or not finite (or > 0 with
// several processes), an unknown loss, a loader without targets for LossMSE or
// LossCrossEntropy, LossCausalLM for a model that is not a causal LM, a model or loader of
// another context.
func (c *Context) TrainMicroBatches(model *Model, loader *DataLoader, loss Loss, maxMicroBatches int32, maxSeconds float64) (TrainResult, error) {
	const op = "accel_train_micro_batches"
	h, err := c.lock(op)
	if err != nil {
		return TrainResult{}, err
	}
	defer c.st.unlock()
	mh, err := model.in(c.st, op)
	if err != nil {
		return TrainResult{}, err
	}
	lh, err := loader.obj().in(c.st, op, "data loader")
	if err != nil {
		return TrainResult{}, err
	}
	out := C.accel_train_result{version: C.ACCEL_TRAIN_RESULT_VERSION} // the fields of this version
	err = c.err(op, C.accel_train_micro_batches(h, mh, (*C.accel_dataloader)(lh), C.accel_loss(loss), C.int32_t(maxMicroBatches),
		C.double(maxSeconds), &out))
	if err != nil {
		return TrainResult{}, err
	}
	return TrainResult{MicroBatches: int32(out.micro_batches), OptimizerSteps: int32(out.optimizer_steps),
		SkippedSteps: int32(out.skipped_steps), EpochEnded: out.epoch_ended != 0, MeanLoss: float64(out.mean_loss),
		Seconds: float64(out.seconds)}, nil
}
