package accel

/*
#include "shim.h"

static ag_res ag_model_num_parameters(const accel_model *m, size_t *t, int64_t *e) { return ag_fail(accel_model_num_parameters(m, t, e)); }
static ag_res ag_model_parameter_name(const accel_model *m, size_t i, const char **out) { return ag_fail(accel_model_parameter_name(m, i, out)); }
static ag_res ag_optimizer_lr(const accel_optimizer *o, double *out) { return ag_fail(accel_optimizer_lr(o, out)); }
static ag_res ag_scheduler_steps(const accel_scheduler *s, int64_t *out) { return ag_fail(accel_scheduler_steps(s, out)); }
static ag_res ag_dataloader_epoch(const accel_dataloader *l, int64_t *out) { return ag_fail(accel_dataloader_epoch(l, out)); }
static ag_res ag_dataloader_num_batches(const accel_dataloader *l, int64_t *out) { return ag_fail(accel_dataloader_num_batches(l, out)); }
static ag_res ag_dataloader_set_epoch(accel_dataloader *l, int64_t e) { return ag_fail(accel_dataloader_set_epoch(l, e)); }
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// ctxObj is the shared state of a Model, Optimizer, Scheduler or DataLoader: the context
// that made it (kept reachable), the bookkeeping of its C handle, and the handle. The
// user-facing types hold a pointer to it, so copies of their values share it; the
// finalizer is on it.
type ctxObj struct {
	ctx *ctxState
	st  *objState
	h   unsafe.Pointer
}

// lock takes the object's context for a call on the object (the caller calls
// o.ctx.unlock()) and returns the handle, or ErrClosed.
func (o *ctxObj) lock(op, what string) (unsafe.Pointer, error) {
	if o == nil {
		return nil, errArg(op, "%s is nil", what)
	}
	if err := o.ctx.lock(op); err != nil {
		return nil, err
	}
	if o.st.userClosed {
		o.ctx.unlock()
		return nil, errClosed(op, what)
	}
	return o.h, nil
}

// in returns the handle of an object passed to a call of context c, whose lock the caller
// holds. An object of another context is refused here, as the library would, but without
// touching it (its own context's lock is not held).
func (o *ctxObj) in(c *ctxState, op, what string) (unsafe.Pointer, error) {
	if o == nil {
		return nil, errArg(op, "%s is nil", what)
	}
	if o.ctx != c {
		return nil, errArg(op, "the %s belongs to another context (objects are used with the Context that made them)", what)
	}
	if o.st.userClosed {
		return nil, errClosed(op, what)
	}
	return o.h, nil
}

// newCtxObj registers a new object of c (c's lock held) and sets its finalizer.
func newCtxObj(c *ctxState, h unsafe.Pointer, destroy func(), dep *objState) *ctxObj {
	o := &ctxObj{ctx: c, h: h, st: c.newObj(destroy, dep)}
	runtime.SetFinalizer(o, func(o *ctxObj) { o.ctx.queue(o.st) })
	return o
}

func (o *ctxObj) close() {
	if o == nil {
		return
	}
	runtime.SetFinalizer(o, nil)
	o.ctx.closeObj(o.st)
}

// ---- models ----

// Model is a trainable model (accel_model) made by a Context. Safe for concurrent use as
// its Context is; a copy of a Model value shares its state.
type Model struct {
	o *ctxObj
}

func (m *Model) obj() *ctxObj {
	if m == nil {
		return nil
	}
	return m.o
}

func (m *Model) lock(op string) (*C.accel_model, error) {
	h, err := m.obj().lock(op, "model")
	return (*C.accel_model)(h), err
}

func (m *Model) in(c *ctxState, op string) (*C.accel_model, error) {
	h, err := m.obj().in(c, op, "model")
	return (*C.accel_model)(h), err
}

// wrapModel wraps a new model of c (c's lock held).
func (c *ctxState) wrapModel(h *C.accel_model) *Model {
	return &Model{o: newCtxObj(c, unsafe.Pointer(h), func() { C.accel_model_destroy(h) }, nil)}
}

// Close releases the model (accel_model_destroy), at once, or when its Context closes if
// the model was prepared on it (the context still uses it). It waits for a call in
// progress on the Context. Idempotent.
func (m *Model) Close() error {
	m.obj().close()
	return nil
}

// NewMLP creates the built-in multi-layer perceptron (accel_model_create_mlp).
func (c *Context) NewMLP(opts MLPOptions) (*Model, error) {
	const op = "accel_model_create_mlp"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	co, free := opts.toC()
	defer free()
	var out *C.accel_model
	if err = c.err(op, C.accel_model_create_mlp(h, &co, &out)); err != nil {
		return nil, err
	}
	return c.st.wrapModel(out), nil
}

// LoadTorchScript loads a TorchScript module saved by torch.jit.save.
func (c *Context) LoadTorchScript(path string) (*Model, error) {
	const op = "accel_model_load_torchscript"
	cs, err := cString(op, "path", path)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cs))
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	var out *C.accel_model
	if err = c.err(op, C.accel_model_load_torchscript(h, cs, &out)); err != nil {
		return nil, err
	}
	return c.st.wrapModel(out), nil
}

// releaseAll ends the uses tensorHandles started.
func releaseAll(ss []*tensorState) {
	for _, s := range ss {
		s.release()
	}
}

// tensorHandles acquires inputs for a forward (accel_model_forward, accel_inference_run)
// and gives the C array of their handles: its first element (nil when there are none) and
// its length, and the uses to end with releaseAll (also on error). One input uses one and
// st (no allocation); the array holds C pointers only, so cgo may pass it.
func tensorHandles(op string, inputs []*Tensor, one *[1]*C.accel_tensor, st *[1]*tensorState) (**C.accel_tensor, C.size_t, []*tensorState, error) {
	hs := one[:0]
	ss := st[:0]
	if len(inputs) > 1 {
		hs = make([]*C.accel_tensor, 0, len(inputs))
		ss = make([]*tensorState, 0, len(inputs))
	}
	for _, t := range inputs {
		s, th, err := t.acquire(op)
		if err != nil {
			return nil, 0, ss, err
		}
		ss = append(ss, s)
		hs = append(hs, th)
	}
	if len(hs) == 0 {
		return nil, 0, ss, nil
	}
	return &hs[0], C.size_t(len(hs)), ss, nil
}

// Forward runs the model on inputs (accel_model_forward) and returns a new tensor.
func (m *Model) Forward(inputs ...*Tensor) (*Tensor, error) {
	const op = "accel_model_forward"
	h, err := m.lock(op)
	if err != nil {
		return nil, err
	}
	c := m.o.ctx
	defer c.unlock()
	var one [1]*C.accel_tensor
	var st [1]*tensorState
	p, n, ss, err := tensorHandles(op, inputs, &one, &st)
	defer releaseAll(ss)
	if err != nil {
		return nil, err
	}
	var out *C.accel_tensor
	if err = c.err(op, C.accel_model_forward(c.h, h, p, n, &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// SetTraining switches between training (true) and evaluation mode.
func (m *Model) SetTraining(training bool) error {
	const op = "accel_model_set_training"
	h, err := m.lock(op)
	if err != nil {
		return err
	}
	c := m.o.ctx
	defer c.unlock()
	return c.err(op, C.accel_model_set_training(c.h, h, cbool(training)))
}

// NumParameters returns the number of parameter tensors and of scalar parameters.
func (m *Model) NumParameters() (tensors int, elements int64, err error) {
	const op = "accel_model_num_parameters"
	h, err := m.lock(op)
	if err != nil {
		return 0, 0, err
	}
	defer m.o.ctx.unlock()
	var t C.size_t
	var e C.int64_t
	err = resErr(op, C.ag_model_num_parameters(h, &t, &e))
	return int(t), int64(e), err
}

// ParameterName returns the name of parameter index ("layers.0.weight").
func (m *Model) ParameterName(index int) (string, error) {
	const op = "accel_model_parameter_name"
	if index < 0 {
		return "", errArg(op, "index must be >= 0, got %d", index)
	}
	h, err := m.lock(op)
	if err != nil {
		return "", err
	}
	defer m.o.ctx.unlock()
	var out *C.char
	err = resErr(op, C.ag_model_parameter_name(h, C.size_t(index), &out))
	return goStr(out), err
}

// Parameter returns a copy of parameter index (fp32 master weights) as a host tensor.
// Under ZeRO it is a collective.
func (m *Model) Parameter(index int) (*Tensor, error) {
	return m.indexedTensor("accel_model_parameter", index,
		func(c *C.accel_context, h *C.accel_model, i C.size_t, out **C.accel_tensor) C.accel_status {
			return C.accel_model_parameter(c, h, i, out)
		})
}

// ParameterGrad returns a copy of parameter index's gradient (fp32, host) as the next Step
// will apply it: unscaled, averaged over the processes (gathered under ZeRO: a collective).
// Read it after the accumulation's last Backward and before Step.
func (m *Model) ParameterGrad(index int) (*Tensor, error) {
	return m.indexedTensor("accel_model_parameter_grad", index,
		func(c *C.accel_context, h *C.accel_model, i C.size_t, out **C.accel_tensor) C.accel_status {
			return C.accel_model_parameter_grad(c, h, i, out)
		})
}

// indexedTensor runs op, a call of the model's context that makes a host tensor from
// parameter index (Parameter, ParameterGrad).
func (m *Model) indexedTensor(op string, index int,
	f func(c *C.accel_context, h *C.accel_model, i C.size_t, out **C.accel_tensor) C.accel_status) (*Tensor, error) {
	if index < 0 {
		return nil, errArg(op, "index must be >= 0, got %d", index)
	}
	h, err := m.lock(op)
	if err != nil {
		return nil, err
	}
	c := m.o.ctx
	defer c.unlock()
	var out *C.accel_tensor
	if err = c.err(op, f(c.h, h, C.size_t(index), &out)); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// pathOp runs a call of the model that takes a path (checked for NUL bytes).
func (m *Model) pathOp(op, what, path string, f func(c *C.accel_context, h *C.accel_model, p *C.char) C.accel_status) error {
	cs, err := cString(op, what, path)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cs))
	h, err := m.lock(op)
	if err != nil {
		return err
	}
	c := m.o.ctx
	defer c.unlock()
	return c.err(op, f(c.h, h, cs))
}

// Save writes the trained weights to path (accel_save_model): safetensors, or TorchScript
// for a path ending in ".pt" and a model loaded with LoadTorchScript.
func (m *Model) Save(path string) error {
	return m.pathOp("accel_save_model", "path", path, func(c *C.accel_context, h *C.accel_model, p *C.char) C.accel_status {
		return C.accel_save_model(c, h, p)
	})
}

// ---- optimizers and schedulers ----

// Optimizer is an accel_optimizer made for a model (safe for concurrent use as its
// Context is; copies of the value share it).
type Optimizer struct {
	o *ctxObj
}

func (o *Optimizer) obj() *ctxObj {
	if o == nil {
		return nil
	}
	return o.o
}

// Close releases the optimizer, at once or, if prepared, when its Context closes. Idempotent.
func (o *Optimizer) Close() error {
	o.obj().close()
	return nil
}

func (c *Context) newOptimizer(op string, model *Model, f func(*C.accel_context, *C.accel_model, **C.accel_optimizer) C.accel_status) (*Optimizer, error) {
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	mh, err := model.in(c.st, op)
	if err != nil {
		return nil, err
	}
	var out *C.accel_optimizer
	if err = c.err(op, f(h, mh, &out)); err != nil {
		return nil, err
	}
	return &Optimizer{o: newCtxObj(c.st, unsafe.Pointer(out), func() { C.accel_optimizer_destroy(out) }, model.o.st)}, nil
}

// NewSGD creates an SGD optimizer for all parameters of model; opts nil means the defaults.
func (c *Context) NewSGD(model *Model, opts *SGDOptions) (*Optimizer, error) {
	return c.newOptimizer("accel_optimizer_create_sgd", model, func(h *C.accel_context, m *C.accel_model, out **C.accel_optimizer) C.accel_status {
		if opts == nil {
			return C.accel_optimizer_create_sgd(h, m, nil, out)
		}
		co := opts.toC()
		return C.accel_optimizer_create_sgd(h, m, &co, out)
	})
}

// NewAdamW creates an AdamW optimizer; opts nil means the defaults.
func (c *Context) NewAdamW(model *Model, opts *AdamWOptions) (*Optimizer, error) {
	return c.newOptimizer("accel_optimizer_create_adamw", model, func(h *C.accel_context, m *C.accel_model, out **C.accel_optimizer) C.accel_status {
		if opts == nil {
			return C.accel_optimizer_create_adamw(h, m, nil, out)
		}
		co := opts.toC()
		return C.accel_optimizer_create_adamw(h, m, &co, out)
	})
}

// NewLAMB creates a LAMB optimizer; opts nil means the defaults.
func (c *Context) NewLAMB(model *Model, opts *LAMBOptions) (*Optimizer, error) {
	return c.newOptimizer("accel_optimizer_create_lamb", model, func(h *C.accel_context, m *C.accel_model, out **C.accel_optimizer) C.accel_status {
		if opts == nil {
			return C.accel_optimizer_create_lamb(h, m, nil, out)
		}
		co := opts.toC()
		return C.accel_optimizer_create_lamb(h, m, &co, out)
	})
}

// LR returns the optimizer's current learning rate.
func (o *Optimizer) LR() (float64, error) {
	const op = "accel_optimizer_lr"
	h, err := o.obj().lock(op, "optimizer")
	if err != nil {
		return 0, err
	}
	defer o.o.ctx.unlock()
	var out C.double
	err = resErr(op, C.ag_optimizer_lr((*C.accel_optimizer)(h), &out))
	return float64(out), err
}

// Scheduler is an accel_scheduler setting an optimizer's learning rate (safe for
// concurrent use as its Context is; copies of the value share it).
type Scheduler struct {
	o *ctxObj
}

func (s *Scheduler) obj() *ctxObj {
	if s == nil {
		return nil
	}
	return s.o
}

// Close releases the scheduler, at once or, if prepared, when its Context closes. Idempotent.
func (s *Scheduler) Close() error {
	s.obj().close()
	return nil
}

// NewScheduler creates a learning-rate scheduler for opt (accel_scheduler_create).
func (c *Context) NewScheduler(opt *Optimizer, opts SchedulerOptions) (*Scheduler, error) {
	const op = "accel_scheduler_create"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	oh, err := opt.obj().in(c.st, op, "optimizer")
	if err != nil {
		return nil, err
	}
	co := opts.toC()
	var out *C.accel_scheduler
	if err = c.err(op, C.accel_scheduler_create(h, (*C.accel_optimizer)(oh), &co, &out)); err != nil {
		return nil, err
	}
	return &Scheduler{o: newCtxObj(c.st, unsafe.Pointer(out), func() { C.accel_scheduler_destroy(out) }, opt.o.st)}, nil
}

// Steps returns the number of real steps the scheduler has taken.
func (s *Scheduler) Steps() (int64, error) {
	const op = "accel_scheduler_steps"
	h, err := s.obj().lock(op, "scheduler")
	if err != nil {
		return 0, err
	}
	defer s.o.ctx.unlock()
	var out C.int64_t
	err = resErr(op, C.ag_scheduler_steps((*C.accel_scheduler)(h), &out))
	return int64(out), err
}

// ---- data loading ----

// DataLoader yields batches of an in-memory dataset (accel_dataloader). Iterate like a
// bufio.Scanner:
//
//	for loader.Next() {
//		x, y := loader.Batch()
//		...
//	}
//	if err := loader.Err(); err != nil { ... }
//
// Next returns false at the end of an epoch (or on an error); calling it again starts the
// next epoch. The tensors Batch returns belong to the loader and are closed by the next
// Next (or Close); NextBatch hands out tensors the caller owns instead. Safe for
// concurrent use as its Context is (though goroutines sharing one iteration share its
// batches: Next on one closes the batch another holds, whose uses then get ErrClosed).
type DataLoader struct {
	l *loaderObj
}

type loaderObj struct {
	ctxObj
	itmu       sync.Mutex // guards the iteration's fields; taken inside the context's lock
	curX, curY *Tensor
	err        error
}

func (l *DataLoader) obj() *ctxObj {
	if l == nil || l.l == nil {
		return nil
	}
	return &l.l.ctxObj
}

// Close releases the loader (and the current batch), at once or, if prepared, when its
// Context closes. Idempotent.
func (l *DataLoader) Close() error {
	if l == nil || l.l == nil {
		return nil
	}
	l.l.dropBatch()
	runtime.SetFinalizer(l.l, nil)
	l.l.ctx.closeObj(l.l.st)
	return nil
}

// NewDataLoader creates a loader over inputs[i] / targets[i] (both copied); targets may be nil.
func (c *Context) NewDataLoader(inputs, targets *Tensor, opts DataLoaderOptions) (*DataLoader, error) {
	const op = "accel_dataloader_create"
	h, err := c.lock(op)
	if err != nil {
		return nil, err
	}
	defer c.st.unlock()
	is, ih, err := inputs.acquire(op)
	if err != nil {
		return nil, err
	}
	defer is.release()
	ts, th, err := targets.acquire(op)
	if err != nil {
		return nil, err
	}
	defer ts.release()
	co := opts.toC()
	var out *C.accel_dataloader
	if err = c.err(op, C.accel_dataloader_create(h, ih, th, &co, &out)); err != nil {
		return nil, err
	}
	return c.st.wrapLoader(out), nil
}

// wrapLoader wraps a new loader of c (c's lock held).
func (c *ctxState) wrapLoader(out *C.accel_dataloader) *DataLoader {
	l := &loaderObj{ctxObj: ctxObj{ctx: c, h: unsafe.Pointer(out),
		st: c.newObj(func() { C.accel_dataloader_destroy(out) }, nil)}}
	runtime.SetFinalizer(l, func(l *loaderObj) { l.ctx.queue(l.st) })
	return &DataLoader{l: l}
}

// nextBatch is NextBatch with the context's lock held (so that Next can store the batch
// before another goroutine's Next runs).
func (l *loaderObj) nextBatch(op string) (inputs, targets *Tensor, err error) {
	var x, y *C.accel_tensor
	if err = l.ctx.err(op, C.accel_dataloader_next(l.ctx.h, (*C.accel_dataloader)(l.h), &x, &y)); err != nil {
		return nil, nil, err
	}
	return wrapTensor(x), wrapTensor(y), nil
}

// NextBatch yields the next batch of the current epoch as tensors the caller owns
// (targets nil when the loader has none). At the end of an epoch it returns nil, nil, nil
// and advances to the next epoch.
func (l *DataLoader) NextBatch() (inputs, targets *Tensor, err error) {
	const op = "accel_dataloader_next"
	if _, err = l.obj().lock(op, "data loader"); err != nil {
		return nil, nil, err
	}
	defer l.l.ctx.unlock()
	return l.l.nextBatch(op)
}

func (l *loaderObj) dropBatch() {
	l.itmu.Lock()
	x, y := l.curX, l.curY
	l.curX, l.curY = nil, nil
	l.itmu.Unlock()
	x.Close()
	y.Close()
}

// Next advances to the next batch (closing the previous one); false at the end of the
// epoch or on an error (see Err).
func (l *DataLoader) Next() bool {
	const op = "accel_dataloader_next"
	if l == nil || l.l == nil {
		return false
	}
	lo := l.l
	lo.dropBatch()
	_, err := lo.lock(op, "data loader")
	var x, y *Tensor
	if err == nil {
		x, y, err = lo.nextBatch(op)
		defer lo.ctx.unlock()
	}
	lo.itmu.Lock()
	defer lo.itmu.Unlock()
	lo.err = err
	if err != nil || x == nil {
		return false
	}
	lo.curX, lo.curY = x, y
	return true
}

// Batch returns the current batch (valid until the next Next or Close).
func (l *DataLoader) Batch() (inputs, targets *Tensor) {
	if l == nil || l.l == nil {
		return nil, nil
	}
	l.l.itmu.Lock()
	defer l.l.itmu.Unlock()
	return l.l.curX, l.l.curY
}

// Err returns the error that ended the last Next, or nil at a normal end of epoch.
func (l *DataLoader) Err() error {
	if l == nil || l.l == nil {
		return errArg("accel_dataloader_next", "data loader is nil")
	}
	l.l.itmu.Lock()
	defer l.l.itmu.Unlock()
	return l.l.err
}

// Each runs fn on every remaining batch of the current epoch, stopping at fn's first error.
func (l *DataLoader) Each(fn func(inputs, targets *Tensor) error) error {
	for l.Next() {
		if err := fn(l.Batch()); err != nil {
			return err
		}
	}
	return l.Err()
}

func (l *DataLoader) int64Query(op string, f func(*C.accel_dataloader, *C.int64_t) C.ag_res) (int64, error) {
	h, err := l.obj().lock(op, "data loader")
	if err != nil {
		return 0, err
	}
	defer l.l.ctx.unlock()
	var out C.int64_t
	err = resErr(op, f((*C.accel_dataloader)(h), &out))
	return int64(out), err
}

// Epoch returns the current epoch (0-based).
func (l *DataLoader) Epoch() (int64, error) {
	return l.int64Query("accel_dataloader_epoch", func(h *C.accel_dataloader, o *C.int64_t) C.ag_res { return C.ag_dataloader_epoch(h, o) })
}

// NumBatches returns the number of batches in one epoch (this process's share once prepared).
func (l *DataLoader) NumBatches() (int64, error) {
	return l.int64Query("accel_dataloader_num_batches", func(h *C.accel_dataloader, o *C.int64_t) C.ag_res {
		return C.ag_dataloader_num_batches(h, o)
	})
}

// SetEpoch sets the epoch and rewinds to its first batch.
func (l *DataLoader) SetEpoch(epoch int64) error {
	const op = "accel_dataloader_set_epoch"
	h, err := l.obj().lock(op, "data loader")
	if err != nil {
		return err
	}
	defer l.l.ctx.unlock()
	return resErr(op, C.ag_dataloader_set_epoch((*C.accel_dataloader)(h), C.int64_t(epoch)))
}
