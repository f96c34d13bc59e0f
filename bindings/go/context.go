package accel

/*
#include "shim.h"

static ag_res ag_init(const accel_options *o, accel_context **out) { return ag_fail(accel_init(o, out)); }
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ctxState is the part of a Context that objects made from it share. It carries no
// finalizer, so the objects can point at it without making finalizer cycles.
type ctxState struct {
	mu       sync.Mutex
	h        *C.accel_context
	closed   bool
	borrowed bool        // a simulator rank's context: never destroyed by Go
	pinned   []*objState // objects bound by Prepare: kept until the context closes
	// Objects whose finalizer ran while the context was open. A finalizer runs on its own
	// goroutine, and the ABI lets one thread at a time use a context and its objects, so
	// the finalizer only queues the object; the goroutine that uses the context destroys
	// it at its next call (drain), or Close does.
	pending    []*objState
	hasPending atomic.Bool
}

// drain destroys the objects finalized while the context was open. It runs on the
// goroutine that uses the context, before its next call.
func (c *ctxState) drain() {
	if !c.hasPending.Load() {
		return
	}
	c.mu.Lock()
	c.releasePending()
	c.mu.Unlock()
}

// releasePending destroys the queued objects. Called with c.mu held.
func (c *ctxState) releasePending() {
	for _, o := range c.pending {
		o.release()
	}
	c.pending = nil
	c.hasPending.Store(false)
}

// objState tracks a model, optimizer, scheduler or loader made from a context. Its C
// handle is destroyed once the user closed it (or it was finalized) and nothing pins it:
// Prepare pins an object until the context closes (the context borrows it and uses it in
// Backward, Step, Next...), an optimizer pins its model and a scheduler its optimizer.
type objState struct {
	ctx        *ctxState
	destroy    func()
	userClosed bool
	destroyed  bool
	prepared   bool
	pins       int
	dep        *objState
}

// release destroys the object when allowed. Called with ctx.mu held.
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

func (c *ctxState) newObj(destroy func(), dep *objState) *objState {
	o := &objState{ctx: c, destroy: destroy, dep: dep}
	if dep != nil {
		c.mu.Lock()
		dep.pins++
		c.mu.Unlock()
	}
	return o
}

// close is the Close of a context object.
func (o *objState) close() {
	c := o.ctx
	c.mu.Lock()
	if !o.userClosed {
		o.userClosed = true
		o.release()
	}
	c.mu.Unlock()
}

// finalize is the finalizer of a context object: as close, but while the context is open
// the destruction is left to the context's goroutine (see ctxState.pending).
func (o *objState) finalize() {
	c := o.ctx
	c.mu.Lock()
	if !o.userClosed {
		o.userClosed = true
		if c.closed {
			o.release()
		} else {
			c.pending = append(c.pending, o)
			c.hasPending.Store(true)
		}
	}
	c.mu.Unlock()
}

// invalidate ends the context for Go: later uses are ErrClosed; objects pinned by
// Prepare and already closed by the user are destroyed now. destroyCtx destroys the
// C context afterwards (objects first, which the ABI allows in either order).
func (c *ctxState) invalidate(destroyCtx bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.releasePending()
	for _, o := range c.pinned {
		o.pins--
		o.release()
	}
	c.pinned = nil
	if destroyCtx && !c.borrowed {
		C.accel_destroy(c.h)
	}
}

// Context is an accel context (the Accelerator): it makes models, optimizers, schedulers
// and loaders, and trains them. A Context and the objects made from it must be used by
// one goroutine at a time. Objects keep their Context reachable, so its finalizer never
// runs while they live; Close ends it at once.
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
	ctx := &Context{st: &ctxState{h: h}}
	runtime.SetFinalizer(ctx, (*Context).Close)
	return ctx, nil
}

// Close destroys the context (accel_destroy) and the objects it borrowed through Prepare
// that were already closed. Objects made from it stay to be closed, but any use now
// returns ErrClosed. Idempotent. On a simulator rank's context it only ends its use.
func (c *Context) Close() error {
	if c == nil || c.st == nil {
		return nil
	}
	runtime.SetFinalizer(c, nil)
	c.st.invalidate(true)
	return nil
}

func (c *Context) handle(op string) (*C.accel_context, error) {
	if c == nil || c.st == nil {
		return nil, errArg(op, "ctx is nil")
	}
	if c.st.closed {
		return nil, errClosed(op, "context")
	}
	c.st.drain()
	return c.st.h, nil
}

// err builds the error of a failed call that took this context: the message is the
// context's own (accel_last_error(ctx)), not thread-local, so it may be read after the call.
func (c *Context) err(op string, st C.accel_status) error {
	if st == C.ACCEL_OK {
		return nil
	}
	msg := C.GoString(C.accel_last_error(c.st.h))
	runtime.KeepAlive(c)
	return &Error{Status: Status(st), Op: op, Message: msg}
}

// DeviceKind returns the device the context placed itself on.
func (c *Context) DeviceKind() (Device, error) {
	const op = "accel_device_kind"
	h, err := c.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.accel_device
	err = c.err(op, C.accel_device_kind(h, &out))
	runtime.KeepAlive(c)
	return Device(out), err
}

// MixedPrecision returns the precision the context trains in: its Options.MixedPrecision (or
// ACCEL_MIXED_PRECISION), with PrecisionAuto resolved for its device to PrecisionBF16 or
// PrecisionNo; never PrecisionAuto.
func (c *Context) MixedPrecision() (Precision, error) {
	const op = "accel_mixed_precision"
	h, err := c.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.accel_precision
	err = c.err(op, C.accel_mixed_precision(h, &out))
	runtime.KeepAlive(c)
	return Precision(out), err
}

// ---- training ----

// Prepare binds the objects to the context (accel_prepare); any may be nil. The context
// borrows them: from here on, Close on a prepared model, optimizer, scheduler or loader
// only ends its use from Go, and its memory is released when the Context closes.
func (c *Context) Prepare(model *Model, opt *Optimizer, sched *Scheduler, loader *DataLoader) error {
	const op = "accel_prepare"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	var (
		mh  *C.accel_model
		oh  *C.accel_optimizer
		sh  *C.accel_scheduler
		lh  *C.accel_dataloader
		sts []*objState
	)
	if model != nil {
		if mh, err = model.handle(op); err != nil {
			return err
		}
		sts = append(sts, model.st)
	}
	if opt != nil {
		if oh, err = opt.handle(op); err != nil {
			return err
		}
		sts = append(sts, opt.st)
	}
	if sched != nil {
		if sh, err = sched.handle(op); err != nil {
			return err
		}
		sts = append(sts, sched.st)
	}
	if loader != nil {
		if lh, err = loader.handle(op); err != nil {
			return err
		}
		sts = append(sts, loader.st)
	}
	err = c.err(op, C.accel_prepare(h, mh, oh, sh, lh))
	runtime.KeepAlive(c)
	runtime.KeepAlive(model)
	runtime.KeepAlive(opt)
	runtime.KeepAlive(sched)
	runtime.KeepAlive(loader)
	if err != nil {
		return err
	}
	c.st.mu.Lock()
	for _, o := range sts {
		if !o.prepared && o.ctx == c.st {
			o.prepared = true
			o.pins++
			c.st.pinned = append(c.st.pinned, o)
		}
	}
	c.st.mu.Unlock()
	return nil
}

// CrossEntropy is the mean cross-entropy of logits [batch, classes] against int64 (or
// int32) class indices [batch] (accel_loss_cross_entropy).
func (c *Context) CrossEntropy(logits, targets *Tensor) (*Tensor, error) {
	const op = "accel_loss_cross_entropy"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	lh, err := logits.handle(op)
	if err != nil {
		return nil, err
	}
	th, err := targets.handle(op)
	if err != nil {
		return nil, err
	}
	var out *C.accel_tensor
	err = c.err(op, C.accel_loss_cross_entropy(h, lh, th, &out))
	runtime.KeepAlive(c)
	runtime.KeepAlive(logits)
	runtime.KeepAlive(targets)
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// MSE is the mean squared error of input against a float target of the same shape.
func (c *Context) MSE(input, target *Tensor) (*Tensor, error) {
	const op = "accel_loss_mse"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	ih, err := input.handle(op)
	if err != nil {
		return nil, err
	}
	th, err := target.handle(op)
	if err != nil {
		return nil, err
	}
	var out *C.accel_tensor
	err = c.err(op, C.accel_loss_mse(h, ih, th, &out))
	runtime.KeepAlive(c)
	runtime.KeepAlive(input)
	runtime.KeepAlive(target)
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// Backward backpropagates a scalar loss (accel_backward).
func (c *Context) Backward(loss *Tensor) error {
	const op = "accel_backward"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	lh, err := loss.handle(op)
	if err != nil {
		return err
	}
	err = c.err(op, C.accel_backward(h, lh))
	runtime.KeepAlive(c)
	runtime.KeepAlive(loss)
	return err
}

// SyncGradients reports whether the next Step is a real optimizer step.
func (c *Context) SyncGradients() (bool, error) {
	const op = "accel_sync_gradients"
	h, err := c.handle(op)
	if err != nil {
		return false, err
	}
	var out C.int
	err = c.err(op, C.accel_sync_gradients(h, &out))
	runtime.KeepAlive(c)
	return out != 0, err
}

// ClipGradNorm clips the gradients to a global L2 norm of maxNorm and returns the norm
// before clipping (NaN on an accumulation micro-step).
func (c *Context) ClipGradNorm(maxNorm float64) (float64, error) {
	const op = "accel_clip_grad_norm"
	h, err := c.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.double
	err = c.err(op, C.accel_clip_grad_norm(h, C.double(maxNorm), &out))
	runtime.KeepAlive(c)
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
	h, err := c.handle(op)
	if err != nil {
		return StepResult{}, err
	}
	var r C.accel_step_result
	err = c.err(op, C.accel_step(h, &r))
	runtime.KeepAlive(c)
	return StepResult{Stepped: r.stepped != 0, Skipped: r.skipped != 0, SyncStep: r.sync_step != 0,
		LossScale: float64(r.loss_scale), OptimizerSteps: int64(r.optimizer_steps), MicroSteps: int64(r.micro_steps)}, err
}

// LossScale returns the current loss scale (1 unless fp16).
func (c *Context) LossScale() (float64, error) {
	const op = "accel_loss_scale"
	h, err := c.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.double
	err = c.err(op, C.accel_loss_scale(h, &out))
	runtime.KeepAlive(c)
	return float64(out), err
}

// ---- processes ----

func (c *Context) int32Query(op string, f func(*C.accel_context, *C.int32_t) C.accel_status) (int, error) {
	h, err := c.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.int32_t
	err = c.err(op, f(h, &out))
	runtime.KeepAlive(c)
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
	h, err := c.handle(op)
	if err != nil {
		return false, err
	}
	var out C.int
	err = c.err(op, C.accel_is_main_process(h, &out))
	runtime.KeepAlive(c)
	return out != 0, err
}

// IsLocalMainProcess reports whether this is the main process of its node.
func (c *Context) IsLocalMainProcess() (bool, error) {
	const op = "accel_is_local_main_process"
	h, err := c.handle(op)
	if err != nil {
		return false, err
	}
	var out C.int
	err = c.err(op, C.accel_is_local_main_process(h, &out))
	runtime.KeepAlive(c)
	return out != 0, err
}

// Barrier waits until every process has called it (wait_for_everyone).
func (c *Context) Barrier() error {
	const op = "accel_barrier"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	err = c.err(op, C.accel_barrier(h))
	runtime.KeepAlive(c)
	return err
}

func (c *Context) tensorOp(op string, t *Tensor, f func(*C.accel_context, *C.accel_tensor, **C.accel_tensor) C.accel_status) (*Tensor, error) {
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	th, err := t.handle(op)
	if err != nil {
		return nil, err
	}
	var out *C.accel_tensor
	err = c.err(op, f(h, th, &out))
	runtime.KeepAlive(c)
	runtime.KeepAlive(t)
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
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	cs := C.CString(message)
	defer C.free(unsafe.Pointer(cs))
	err = c.err(op, C.accel_print(h, cs))
	runtime.KeepAlive(c)
	return err
}

// SetSeed reseeds the context's generator (plus the process index when perProcess).
func (c *Context) SetSeed(seed uint64, perProcess bool) error {
	const op = "accel_set_seed"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	err = c.err(op, C.accel_set_seed(h, C.uint64_t(seed), cbool(perProcess)))
	runtime.KeepAlive(c)
	return err
}

// ChargeCompute charges seconds of compute to this rank's virtual clock in the simulator
// (accel_sim_charge_compute; a no-op outside it). label may be "".
func (c *Context) ChargeCompute(seconds float64, label string) error {
	const op = "accel_sim_charge_compute"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	var cs *C.char
	if label != "" {
		cs = C.CString(label)
		defer C.free(unsafe.Pointer(cs))
	}
	err = c.err(op, C.accel_sim_charge_compute(h, C.double(seconds), cs))
	runtime.KeepAlive(c)
	return err
}

// ---- checkpoints ----

// SetProject sets the project directory SaveState("") and LoadState("") use.
func (c *Context) SetProject(opts ProjectOptions) error {
	const op = "accel_set_project"
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	var s cstrs
	defer s.free()
	co := opts.toC(&s)
	err = c.err(op, C.accel_set_project(h, &co))
	runtime.KeepAlive(c)
	return err
}

func (c *Context) dirOp(op, dir string, f func(*C.accel_context, *C.char) C.accel_status) error {
	h, err := c.handle(op)
	if err != nil {
		return err
	}
	var cs *C.char // "" -> NULL: the project's checkpoint
	if dir != "" {
		cs = C.CString(dir)
		defer C.free(unsafe.Pointer(cs))
	}
	err = c.err(op, f(h, cs))
	runtime.KeepAlive(c)
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
	h, err := c.handle(op)
	if err != nil {
		return "", err
	}
	var out *C.char
	err = c.err(op, C.accel_last_checkpoint(h, &out))
	s := goStr(out)
	runtime.KeepAlive(c)
	return s, err
}
