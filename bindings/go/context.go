package accel

/*
#include "shim.h"

static ag_res ag_init(const accel_options *o, accel_context **out) { return ag_fail(accel_init(o, out)); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ctxState is a context's shared state: the Context value (and its copies) and every
// object made from it point at it. It holds no pointer back to those objects, so the
// finalizer on it (and those on the objects) make no cycles.
//
// Concurrency: the ABI lets one thread at a time use a context and the objects made from
// it. mu serialises every C call on the context or its objects (held for the call), so
// any number of goroutines may use them. A simulated rank's context (borrowed) is further
// tied to its rank's OS thread: the simulator schedules ranks by thread (its rank state,
// wake-ups and memory accounting are per thread), and a call made for rank R from another
// thread corrupts that schedule (it hung past the timeout): such calls are refused.
type ctxState struct {
	mu       sync.Mutex // held for each C call on the context or its objects
	h        *C.accel_context
	closed   atomic.Bool // set under mu; read without it for a fast ErrClosed
	borrowed bool        // a simulator rank's context: never destroyed by Go
	tid      int64       // borrowed: the OS thread of the rank (the only one allowed)
	rank     int         // borrowed: the rank
	pinned   []*objState // objects bound by Prepare: kept until the context closes (under mu)
	// Objects finalized (or closed from a thread that may not call the context) while the
	// context was open. A finalizer must not wait for a call in progress (mu), so it only
	// queues the object under pmu; the next call (under mu) or Close destroys it.
	pmu        sync.Mutex
	pending    []*objState
	pendClosed bool // Close took the queue: later finalizers release directly
	hasPending atomic.Bool
}

// lock takes the context for one call (the caller calls unlock): ErrClosed once closed,
// and, for a simulated rank's context, an error on a thread other than the rank's.
func (c *ctxState) lock(op string) error {
	if c.closed.Load() {
		return errClosed(op, "context")
	}
	if c.borrowed && osThreadID() != c.tid {
		return c.errThread(op)
	}
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return errClosed(op, "context")
	}
	if c.hasPending.Load() {
		c.drain()
	}
	return nil
}

func (c *ctxState) unlock() { c.mu.Unlock() }

func (c *ctxState) errThread(op string) error {
	return &Error{Status: StatusInvalidState, Op: op, Message: fmt.Sprintf(
		"%s: this Context (and what was made from it) belongs to simulated rank %d and may be used only "+
			"by the goroutine running rank %d's function, on the rank's own thread: the simulator ties each rank "+
			"to its thread. Use it there, and pass plain values (not the Context) to other goroutines",
		op, c.rank, c.rank)}
}

// drain destroys the queued objects. Called with mu held.
func (c *ctxState) drain() {
	c.pmu.Lock()
	q := c.pending
	c.pending = nil
	c.hasPending.Store(false)
	c.pmu.Unlock()
	for _, o := range q {
		if !o.userClosed {
			o.userClosed = true
			o.release()
		}
	}
}

// objState tracks a model, optimizer, scheduler or loader made from a context; its fields
// are used under the context's mu. Its C handle is destroyed once the user closed it (or
// it was finalized) and nothing pins it: Prepare pins an object until the context closes
// (the context borrows it and uses it in Backward, Step, Next...), an optimizer pins its
// model and a scheduler its optimizer.
type objState struct {
	destroy    func()
	userClosed bool
	destroyed  bool
	prepared   bool
	pins       int
	dep        *objState
}

// release destroys the object when allowed. Called with the context's mu held.
func (o *objState) release() {
	if o.destroyed || !o.userClosed || o.pins > 0 {
		return
	}
	o.destroyed = true
	o.destroy()
	if o.dep != nil {
		o.dep.pins--
		o.dep.release()
	}
}

// newObj registers an object; called with mu held.
func (c *ctxState) newObj(destroy func(), dep *objState) *objState {
	o := &objState{destroy: destroy, dep: dep}
	if dep != nil {
		dep.pins++
	}
	return o
}

// closeObj is the Close of a context object: it waits for a call in progress. On a
// simulated rank's context, from another thread, it only queues the object (as a
// finalizer does): the rank's thread destroys it.
func (c *ctxState) closeObj(o *objState) {
	if c.borrowed && !c.closed.Load() && osThreadID() != c.tid {
		c.queue(o)
		return
	}
	c.mu.Lock()
	if !o.userClosed {
		o.userClosed = true
		o.release()
	}
	c.mu.Unlock()
}

// queue is the finalizer of a context object: while the context is open, the destruction
// is left to the next call (see pending); once closed, it happens here.
func (c *ctxState) queue(o *objState) {
	c.pmu.Lock()
	if !c.pendClosed {
		c.pending = append(c.pending, o)
		c.hasPending.Store(true)
		c.pmu.Unlock()
		return
	}
	c.pmu.Unlock()
	c.mu.Lock() // no call runs on a closed context: mu is free at once
	if !o.userClosed {
		o.userClosed = true
		o.release()
	}
	c.mu.Unlock()
}

// invalidate ends the context for Go: later uses are ErrClosed; queued objects and objects
// pinned by Prepare and already closed by the user are destroyed now. destroyCtx destroys
// the C context afterwards (objects first, which the ABI allows in either order). It waits
// for a call in progress.
func (c *ctxState) invalidate(destroyCtx bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return
	}
	c.closed.Store(true)
	c.pmu.Lock()
	c.pendClosed = true
	c.pmu.Unlock()
	c.drain()
	for _, o := range c.pinned {
		o.pins--
		o.release()
	}
	c.pinned = nil
	if destroyCtx && !c.borrowed {
		C.accel_destroy(c.h)
	}
}

// ctxFinalized, when set (by tests), is called after a context's finalizer ran.
var ctxFinalized func()

func finalizeCtx(st *ctxState) {
	st.invalidate(true)
	if f := ctxFinalized; f != nil {
		f()
	}
}

// Context is an accel context (the Accelerator): it makes models, optimizers, schedulers
// and loaders, and trains them.
//
// A *Context, and the objects made from it, are safe for concurrent use: the binding
// serialises their calls with a mutex (the ABI's one-thread-at-a-time rule), so two
// goroutines never run C calls on one context at once. (Calls of a training step from two
// goroutines still interleave step by step; give each its own Context to train in
// parallel.) Close waits for a call in progress. A simulated rank's Context (SimRun) is
// the exception: only the goroutine running that rank's function may use it (an error
// says so otherwise).
//
// The state lives behind a pointer: a copy of a Context value shares it. Objects keep
// their Context's state reachable, so its finalizer never runs while they live; Close
// ends it at once.
type Context struct {
	st *ctxState
}

// Init creates a context (accel_init). opts nil means DefaultOptions().
func Init(opts *Options) (*Context, error) {
	if err := libCheck(); err != nil {
		return nil, err
	}
	var co *C.accel_options
	if opts != nil {
		c := opts.toC()
		co = &c
	}
	var h *C.accel_context
	if err := resErr("accel_init", C.ag_init(co, &h)); err != nil {
		return nil, err
	}
	st := &ctxState{h: h}
	runtime.SetFinalizer(st, finalizeCtx)
	return &Context{st: st}, nil
}

// Close destroys the context (accel_destroy) and the objects it borrowed through Prepare
// that were already closed, after any call in progress on another goroutine. Objects made
// from it stay to be closed, but any use now returns ErrClosed. Idempotent. On a simulator
// rank's context it only ends its use (from the rank's goroutine; elsewhere it is refused
// until the rank's function returns, when it is a no-op).
func (c *Context) Close() error {
	if c == nil || c.st == nil {
		return nil
	}
	st := c.st
	if st.borrowed {
		if st.closed.Load() {
			return nil
		}
		if osThreadID() != st.tid {
			return st.errThread("Context.Close")
		}
	} else {
		runtime.SetFinalizer(st, nil)
	}
	st.invalidate(true)
	return nil
}

// lock takes the context for one call; the caller calls c.st.unlock().
func (c *Context) lock(op string) (*C.accel_context, error) {
	if c == nil || c.st == nil {
		return nil, errArg(op, "ctx is nil (or a zero Context value: contexts come from Init and SimRun)")
	}
	if err := c.st.lock(op); err != nil {
		return nil, err
	}
	return c.st.h, nil
}

// err builds the error of a failed call that took this context: the message is the
// context's own (accel_last_error(ctx)), read under the context's lock.
func (c *ctxState) err(op string, st C.accel_status) error {
	if st == C.ACCEL_OK {
		return nil
	}
	return &Error{Status: Status(st), Op: op, Message: C.GoString(C.accel_last_error(c.h))}
}

func (c *Context) err(op string, st C.accel_status) error { return c.st.err(op, st) }

// DeviceKind returns the device the context placed itself on.
func (c *Context) DeviceKind() (Device, error) {
	const op = "accel_device_kind"
	h, err := c.lock(op)
	if err != nil {
		return 0, err
	}
	defer c.st.unlock()
	var out C.accel_device
	err = c.err(op, C.accel_device_kind(h, &out))
	return Device(out), err
}

// MixedPrecision returns the precision the context trains in: its Options.MixedPrecision (or
// ACCEL_MIXED_PRECISION), with PrecisionAuto resolved for its device to PrecisionBF16 or
// PrecisionNo; never PrecisionAuto.
func (c *Context) MixedPrecision() (Precision, error) {
	const op = "accel_mixed_precision"
	h, err := c.lock(op)
	if err != nil {
		return 0, err
	}
	defer c.st.unlock()
	var out C.accel_precision
	err = c.err(op, C.accel_mixed_precision(h, &out))
	return Precision(out), err
}

// ---- training ----

// Prepare binds the objects to the context (accel_prepare); any may be nil. The context
// borrows them: from here on, Close on a prepared model, optimizer, scheduler or loader
// only ends its use from Go, and its memory is released when the Context closes.
func (c *Context) Prepare(model *Model, opt *Optimizer, sched *Scheduler, loader *DataLoader) error {
	const op = "accel_prepare"
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	var (
		hs  [4]unsafe.Pointer
		sts []*objState
	)
	for i, o := range [4]struct {
		obj  *ctxObj
		what string
	}{{model.obj(), "model"}, {opt.obj(), "optimizer"}, {sched.obj(), "scheduler"}, {loader.obj(), "data loader"}} {
		if o.obj == nil {
			continue // nil (or a zero value): NULL
		}
		if hs[i], err = o.obj.in(c.st, op, o.what); err != nil {
			return err
		}
		sts = append(sts, o.obj.st)
	}
	err = c.err(op, C.accel_prepare(h, (*C.accel_model)(hs[0]), (*C.accel_optimizer)(hs[1]),
		(*C.accel_scheduler)(hs[2]), (*C.accel_dataloader)(hs[3])))
	if err != nil {
		return err
	}
	for _, o := range sts {
		if !o.prepared {
			o.prepared = true
			o.pins++
			c.st.pinned = append(c.st.pinned, o)
		}
	}
	return nil
}

// CrossEntropy is the mean cross-entropy of logits [batch, classes] against int64 (or
// int32) class indices [batch] (accel_loss_cross_entropy).
func (c *Context) CrossEntropy(logits, targets *Tensor) (*Tensor, error) {
	const op = "accel_loss_cross_entropy"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	ls, lh, err := logits.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ls.release()
	ts, th, err := targets.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ts.release()
	var out *C.accel_tensor
	err = c.err(op, C.accel_loss_cross_entropy(h, lh, th, &out))
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// MSE is the mean squared error of input against a float target of the same shape.
func (c *Context) MSE(input, target *Tensor) (*Tensor, error) {
	const op = "accel_loss_mse"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	is, ih, err := input.acquire(op)
	if err != nil {
		return nil, err
	}
	defer is.release()
	ts, th, err := target.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ts.release()
	var out *C.accel_tensor
	err = c.err(op, C.accel_loss_mse(h, ih, th, &out))
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// Backward backpropagates a scalar loss (accel_backward).
func (c *Context) Backward(loss *Tensor) error {
	const op = "accel_backward"
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	ls, lh, err := loss.acquire(op)
	if err != nil {
		return err
	}
	defer ls.release()
	err = c.err(op, C.accel_backward(h, lh))
	return err
}

// SyncGradients reports whether the next Step is a real optimizer step.
func (c *Context) SyncGradients() (bool, error) {
	const op = "accel_sync_gradients"
	h, err := c.lock(op)
	if err != nil {
		return false, err
	}
	defer c.st.unlock()
	var out C.int
	err = c.err(op, C.accel_sync_gradients(h, &out))
	return out != 0, err
}

// ClipGradNorm clips the gradients to a global L2 norm of maxNorm and returns the norm
// before clipping (NaN on an accumulation micro-step).
func (c *Context) ClipGradNorm(maxNorm float64) (float64, error) {
	const op = "accel_clip_grad_norm"
	h, err := c.lock(op)
	if err != nil {
		return 0, err
	}
	defer c.st.unlock()
	var out C.double
	err = c.err(op, C.accel_clip_grad_norm(h, C.double(maxNorm), &out))
	return float64(out), err
}

// StepResult is accel_step_result.
type StepResult struct {
	Stepped        bool    // the optimizer really stepped
	Skipped        bool    // an fp16 step was skipped for inf/NaN gradients
	SyncStep       bool    // a gradient-synchronising (real or skipped) step
	LossScale      float64 // after this call (1 unless fp16)
	OptimizerSteps int64
	MicroSteps     int64
}

// Step ends a micro-batch (accel_step).
func (c *Context) Step() (StepResult, error) {
	const op = "accel_step"
	h, err := c.lock(op)
	if err != nil {
		return StepResult{}, err
	}
	defer c.st.unlock()
	var r C.accel_step_result
	err = c.err(op, C.accel_step(h, &r))
	return StepResult{Stepped: r.stepped != 0, Skipped: r.skipped != 0, SyncStep: r.sync_step != 0,
		LossScale: float64(r.loss_scale), OptimizerSteps: int64(r.optimizer_steps), MicroSteps: int64(r.micro_steps)}, err
}

// LossScale returns the current loss scale (1 unless fp16).
func (c *Context) LossScale() (float64, error) {
	const op = "accel_loss_scale"
	h, err := c.lock(op)
	if err != nil {
		return 0, err
	}
	defer c.st.unlock()
	var out C.double
	err = c.err(op, C.accel_loss_scale(h, &out))
	return float64(out), err
}

// ---- processes ----

func (c *Context) int32Query(op string, f func(*C.accel_context, *C.int32_t) C.accel_status) (int, error) {
	h, err := c.lock(op)
	if err != nil {
		return 0, err
	}
	defer c.st.unlock()
	var out C.int32_t
	err = c.err(op, f(h, &out))
	return int(out), err
}

// ProcessIndex is this process's (rank's) index in its world.
func (c *Context) ProcessIndex() (int, error) {
	return c.int32Query("accel_process_index", func(h *C.accel_context, o *C.int32_t) C.accel_status { return C.accel_process_index(h, o) })
}

// NumProcesses is the number of processes (ranks) in the world.
func (c *Context) NumProcesses() (int, error) {
	return c.int32Query("accel_num_processes", func(h *C.accel_context, o *C.int32_t) C.accel_status { return C.accel_num_processes(h, o) })
}

// LocalProcessIndex is the process's index on its node.
func (c *Context) LocalProcessIndex() (int, error) {
	return c.int32Query("accel_local_process_index", func(h *C.accel_context, o *C.int32_t) C.accel_status {
		return C.accel_local_process_index(h, o)
	})
}

// IsMainProcess reports whether this is process 0.
func (c *Context) IsMainProcess() (bool, error) {
	const op = "accel_is_main_process"
	h, err := c.lock(op)
	if err != nil {
		return false, err
	}
	defer c.st.unlock()
	var out C.int
	err = c.err(op, C.accel_is_main_process(h, &out))
	return out != 0, err
}

// IsLocalMainProcess reports whether this is the main process of its node.
func (c *Context) IsLocalMainProcess() (bool, error) {
	const op = "accel_is_local_main_process"
	h, err := c.lock(op)
	if err != nil {
		return false, err
	}
	defer c.st.unlock()
	var out C.int
	err = c.err(op, C.accel_is_local_main_process(h, &out))
	return out != 0, err
}

// Barrier waits until every process has called it (wait_for_everyone).
func (c *Context) Barrier() error {
	const op = "accel_barrier"
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, C.accel_barrier(h))
	return err
}

func (c *Context) tensorOp(op string, t *Tensor, f func(*C.accel_context, *C.accel_tensor, **C.accel_tensor) C.accel_status) (*Tensor, error) {
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	ts, th, err := t.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ts.release()
	var out *C.accel_tensor
	err = c.err(op, f(h, th, &out))
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// Reduce reduces t element-wise across all processes; every process receives the result.
func (c *Context) Reduce(t *Tensor, op ReduceOp) (*Tensor, error) {
	return c.tensorOp("accel_reduce", t, func(h *C.accel_context, th *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_reduce(h, th, C.accel_reduce_op(op), out)
	})
}

// Broadcast gives every process a copy of process root's tensor.
func (c *Context) Broadcast(t *Tensor, root int) (*Tensor, error) {
	return c.tensorOp("accel_broadcast", t, func(h *C.accel_context, th *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_broadcast(h, th, C.int32_t(root), out)
	})
}

// Gather concatenates every process's tensor along dimension 0, in process order.
func (c *Context) Gather(t *Tensor) (*Tensor, error) {
	return c.tensorOp("accel_gather", t, func(h *C.accel_context, th *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_gather(h, th, out)
	})
}

// GatherForMetrics gathers evaluation outputs, dropping the rows even_batches duplicated.
func (c *Context) GatherForMetrics(t *Tensor) (*Tensor, error) {
	return c.tensorOp("accel_gather_for_metrics", t, func(h *C.accel_context, th *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_gather_for_metrics(h, th, out)
	})
}

// PadAcrossProcesses pads dimension dim of every process's tensor to the largest size.
func (c *Context) PadAcrossProcesses(t *Tensor, dim int, padValue float64, padFirst bool) (*Tensor, error) {
	return c.tensorOp("accel_pad_across_processes", t, func(h *C.accel_context, th *C.accel_tensor, out **C.accel_tensor) C.accel_status {
		return C.accel_pad_across_processes(h, th, C.int32_t(dim), C.double(padValue), cbool(padFirst), out)
	})
}

// Print writes message and a newline to standard output on the main process only.
func (c *Context) Print(message string) error {
	const op = "accel_print"
	cs, err := cString(op, "message", message)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cs))
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, C.accel_print(h, cs))
	return err
}

// SetSeed reseeds the context's generator (plus the process index when perProcess).
func (c *Context) SetSeed(seed uint64, perProcess bool) error {
	const op = "accel_set_seed"
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, C.accel_set_seed(h, C.uint64_t(seed), cbool(perProcess)))
	return err
}

// ChargeCompute charges seconds of compute to this rank's virtual clock in the simulator
// (accel_sim_charge_compute; a no-op outside it). label may be "".
func (c *Context) ChargeCompute(seconds float64, label string) error {
	const op = "accel_sim_charge_compute"
	var cs *C.char
	if label != "" {
		var err error
		if cs, err = cString(op, "label", label); err != nil {
			return err
		}
		defer C.free(unsafe.Pointer(cs))
	}
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, C.accel_sim_charge_compute(h, C.double(seconds), cs))
	return err
}

// ---- checkpoints ----

// SetProject sets the project directory SaveState("") and LoadState("") use.
func (c *Context) SetProject(opts ProjectOptions) error {
	const op = "accel_set_project"
	var s cstrs
	defer s.free()
	co := opts.toC(&s)
	if s.err != nil {
		return s.err
	}
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, C.accel_set_project(h, &co))
	return err
}

func (c *Context) dirOp(op, dir string, f func(*C.accel_context, *C.char) C.accel_status) error {
	var cs *C.char // "" -> NULL: the project's checkpoint
	if dir != "" {
		var err error
		if cs, err = cString(op, "dir", dir); err != nil {
			return err
		}
		defer C.free(unsafe.Pointer(cs))
	}
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, f(h, cs))
	return err
}

// SaveState saves the whole training state to dir; "" means the project's next
// checkpoint (SetProject). A collective.
func (c *Context) SaveState(dir string) error {
	return c.dirOp("accel_save_state", dir, func(h *C.accel_context, d *C.char) C.accel_status { return C.accel_save_state(h, d) })
}

// LoadState restores what SaveState saved; "" means the project's newest checkpoint.
func (c *Context) LoadState(dir string) error {
	return c.dirOp("accel_load_state", dir, func(h *C.accel_context, d *C.char) C.accel_status { return C.accel_load_state(h, d) })
}

// LastCheckpoint is the directory of the last successful SaveState or LoadState ("" before).
func (c *Context) LastCheckpoint() (string, error) {
	const op = "accel_last_checkpoint"
	h, err := c.lock(op)
	if err != nil {
		return "", err
	}
	defer c.st.unlock()
	var out *C.char
	err = c.err(op, C.accel_last_checkpoint(h, &out))
	s := goStr(out)
	return s, err
}
