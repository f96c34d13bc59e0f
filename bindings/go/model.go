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
	"unsafe"
)

// ctxObj is what Model, Optimizer, Scheduler and DataLoader share: the Context that made
// them (kept reachable) and the shared bookkeeping of their C handle.
type ctxObj struct {
	ctx *Context
	st  *objState
}

func (o *ctxObj) check(op, what string) error {
	if o == nil || o.st == nil {
		return errArg(op, "%s is nil", what)
	}
	if o.st.userClosed || o.ctx.st.closed {
		return errClosed(op, what)
	}
	o.ctx.st.drain()
	return nil
}

// ---- models ----

// Model is a trainable model (accel_model) made by a Context.
type Model struct {
	ctxObj
	h *C.accel_model
}

func (c *Context) wrapModel(h *C.accel_model) *Model {
	m := &Model{h: h}
	m.ctx = c
	m.st = c.st.newObj(func() { C.accel_model_destroy(h) }, nil)
	runtime.SetFinalizer(m, func(m *Model) { m.st.finalize() })
	return m
}

// Close releases the model (accel_model_destroy), at once, or when its Context closes if
// the model was prepared on it (the context still uses it). Idempotent.
func (m *Model) Close() error {
	if m == nil || m.st == nil {
		return nil
	}
	runtime.SetFinalizer(m, nil)
	m.st.close()
	return nil
}

func (m *Model) handle(op string) (*C.accel_model, error) {
	if m == nil {
		return nil, errArg(op, "model is nil")
	}
	if err := m.check(op, "model"); err != nil {
		return nil, err
	}
	return m.h, nil
}

// NewMLP creates the built-in multi-layer perceptron (accel_model_create_mlp).
func (c *Context) NewMLP(opts MLPOptions) (*Model, error) {
	const op = "accel_model_create_mlp"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	co, free := opts.toC()
	defer free()
	var out *C.accel_model
	err = c.err(op, C.accel_model_create_mlp(h, &co, &out))
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return c.wrapModel(out), nil
}

// LoadTorchScript loads a TorchScript module saved by torch.jit.save.
func (c *Context) LoadTorchScript(path string) (*Model, error) {
	const op = "accel_model_load_torchscript"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var out *C.accel_model
	err = c.err(op, C.accel_model_load_torchscript(h, cs, &out))
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return c.wrapModel(out), nil
}

// tensorHandles gives the C array of inputs' handles for a forward (accel_model_forward,
// accel_inference_run): its first element (nil when there are none) and its length. One input
// uses one (no allocation); the array holds C pointers only, so cgo may pass it.
func tensorHandles(op string, inputs []*Tensor, one *[1]*C.accel_tensor) (**C.accel_tensor, C.size_t, error) {
	hs := one[:0]
	if len(inputs) > 1 {
		hs = make([]*C.accel_tensor, 0, len(inputs))
	}
	for _, t := range inputs {
		th, err := t.handle(op)
		if err != nil {
			return nil, 0, err
		}
		hs = append(hs, th)
	}
	if len(hs) == 0 {
		return nil, 0, nil
	}
	return &hs[0], C.size_t(len(hs)), nil
}

// Forward runs the model on inputs (accel_model_forward) and returns a new tensor.
func (m *Model) Forward(inputs ...*Tensor) (*Tensor, error) {
	const op = "accel_model_forward"
	h, err := m.handle(op)
	if err != nil {
		return nil, err
	}
	var one [1]*C.accel_tensor
	p, n, err := tensorHandles(op, inputs, &one)
	if err != nil {
		return nil, err
	}
	var out *C.accel_tensor
	err = m.ctx.err(op, C.accel_model_forward(m.ctx.st.h, h, p, n, &out))
	runtime.KeepAlive(m)
	runtime.KeepAlive(inputs)
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// SetTraining switches between training (true) and evaluation mode.
func (m *Model) SetTraining(training bool) error {
	const op = "accel_model_set_training"
	h, err := m.handle(op)
	if err != nil {
		return err
	}
	err = m.ctx.err(op, C.accel_model_set_training(m.ctx.st.h, h, cbool(training)))
	runtime.KeepAlive(m)
	return err
}

// NumParameters returns the number of parameter tensors and of scalar parameters.
func (m *Model) NumParameters() (tensors int, elements int64, err error) {
	const op = "accel_model_num_parameters"
	h, err := m.handle(op)
	if err != nil {
		return 0, 0, err
	}
	var t C.size_t
	var e C.int64_t
	err = resErr(op, C.ag_model_num_parameters(h, &t, &e))
	runtime.KeepAlive(m)
	return int(t), int64(e), err
}

// ParameterName returns the name of parameter index ("layers.0.weight").
func (m *Model) ParameterName(index int) (string, error) {
	const op = "accel_model_parameter_name"
	h, err := m.handle(op)
	if err != nil {
		return "", err
	}
	if index < 0 {
		return "", errArg(op, "index must be >= 0, got %d", index)
	}
	var out *C.char
	err = resErr(op, C.ag_model_parameter_name(h, C.size_t(index), &out))
	s := goStr(out)
	runtime.KeepAlive(m)
	return s, err
}

// Parameter returns a copy of parameter index (fp32 master weights) as a host tensor.
// Under ZeRO it is a collective.
func (m *Model) Parameter(index int) (*Tensor, error) {
	const op = "accel_model_parameter"
	h, err := m.handle(op)
	if err != nil {
		return nil, err
	}
	if index < 0 {
		return nil, errArg(op, "index must be >= 0, got %d", index)
	}
	var out *C.accel_tensor
	err = m.ctx.err(op, C.accel_model_parameter(m.ctx.st.h, h, C.size_t(index), &out))
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// Save writes the trained weights to path (accel_save_model): safetensors, or TorchScript
// for a path ending in ".pt" and a model loaded with LoadTorchScript.
func (m *Model) Save(path string) error {
	const op = "accel_save_model"
	h, err := m.handle(op)
	if err != nil {
		return err
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	err = m.ctx.err(op, C.accel_save_model(m.ctx.st.h, h, cs))
	runtime.KeepAlive(m)
	return err
}

// ---- optimizers and schedulers ----

// Optimizer is an accel_optimizer made for a model.
type Optimizer struct {
	ctxObj
	h *C.accel_optimizer
}

// Close releases the optimizer, at once or, if prepared, when its Context closes. Idempotent.
func (o *Optimizer) Close() error {
	if o == nil || o.st == nil {
		return nil
	}
	runtime.SetFinalizer(o, nil)
	o.st.close()
	return nil
}

func (o *Optimizer) handle(op string) (*C.accel_optimizer, error) {
	if o == nil {
		return nil, errArg(op, "optimizer is nil")
	}
	if err := o.check(op, "optimizer"); err != nil {
		return nil, err
	}
	return o.h, nil
}

func (c *Context) newOptimizer(op string, model *Model, f func(*C.accel_context, *C.accel_model, **C.accel_optimizer) C.accel_status) (*Optimizer, error) {
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	mh, err := model.handle(op)
	if err != nil {
		return nil, err
	}
	var out *C.accel_optimizer
	err = c.err(op, f(h, mh, &out))
	runtime.KeepAlive(c)
	runtime.KeepAlive(model)
	if err != nil {
		return nil, err
	}
	o := &Optimizer{h: out}
	o.ctx = c
	o.st = c.st.newObj(func() { C.accel_optimizer_destroy(out) }, model.st)
	runtime.SetFinalizer(o, func(o *Optimizer) { o.st.finalize() })
	return o, nil
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
	h, err := o.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.double
	err = resErr(op, C.ag_optimizer_lr(h, &out))
	runtime.KeepAlive(o)
	return float64(out), err
}

// Scheduler is an accel_scheduler setting an optimizer's learning rate.
type Scheduler struct {
	ctxObj
	h *C.accel_scheduler
}

// Close releases the scheduler, at once or, if prepared, when its Context closes. Idempotent.
func (s *Scheduler) Close() error {
	if s == nil || s.st == nil {
		return nil
	}
	runtime.SetFinalizer(s, nil)
	s.st.close()
	return nil
}

func (s *Scheduler) handle(op string) (*C.accel_scheduler, error) {
	if s == nil {
		return nil, errArg(op, "scheduler is nil")
	}
	if err := s.check(op, "scheduler"); err != nil {
		return nil, err
	}
	return s.h, nil
}

// NewScheduler creates a learning-rate scheduler for opt (accel_scheduler_create).
func (c *Context) NewScheduler(opt *Optimizer, opts SchedulerOptions) (*Scheduler, error) {
	const op = "accel_scheduler_create"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	oh, err := opt.handle(op)
	if err != nil {
		return nil, err
	}
	co := opts.toC()
	var out *C.accel_scheduler
	err = c.err(op, C.accel_scheduler_create(h, oh, &co, &out))
	runtime.KeepAlive(c)
	runtime.KeepAlive(opt)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{h: out}
	s.ctx = c
	s.st = c.st.newObj(func() { C.accel_scheduler_destroy(out) }, opt.st)
	runtime.SetFinalizer(s, func(s *Scheduler) { s.st.finalize() })
	return s, nil
}

// Steps returns the number of real steps the scheduler has taken.
func (s *Scheduler) Steps() (int64, error) {
	const op = "accel_scheduler_steps"
	h, err := s.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.int64_t
	err = resErr(op, C.ag_scheduler_steps(h, &out))
	runtime.KeepAlive(s)
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
// Next (or Close); NextBatch hands out tensors the caller owns instead.
type DataLoader struct {
	ctxObj
	h          *C.accel_dataloader
	curX, curY *Tensor
	err        error
}

// Close releases the loader (and the current batch), at once or, if prepared, when its
// Context closes. Idempotent.
func (l *DataLoader) Close() error {
	if l == nil || l.st == nil {
		return nil
	}
	runtime.SetFinalizer(l, nil)
	l.dropBatch()
	l.st.close()
	return nil
}

func (l *DataLoader) handle(op string) (*C.accel_dataloader, error) {
	if l == nil {
		return nil, errArg(op, "data loader is nil")
	}
	if err := l.check(op, "data loader"); err != nil {
		return nil, err
	}
	return l.h, nil
}

// NewDataLoader creates a loader over inputs[i] / targets[i] (both copied); targets may be nil.
func (c *Context) NewDataLoader(inputs, targets *Tensor, opts DataLoaderOptions) (*DataLoader, error) {
	const op = "accel_dataloader_create"
	h, err := c.handle(op)
	if err != nil {
		return nil, err
	}
	ih, err := inputs.handle(op)
	if err != nil {
		return nil, err
	}
	th, err := targets.handle(op)
	if err != nil {
		return nil, err
	}
	co := opts.toC()
	var out *C.accel_dataloader
	err = c.err(op, C.accel_dataloader_create(h, ih, th, &co, &out))
	runtime.KeepAlive(c)
	runtime.KeepAlive(inputs)
	runtime.KeepAlive(targets)
	if err != nil {
		return nil, err
	}
	return c.wrapLoader(out), nil
}

func (c *Context) wrapLoader(out *C.accel_dataloader) *DataLoader {
	l := &DataLoader{h: out}
	l.ctx = c
	l.st = c.st.newObj(func() { C.accel_dataloader_destroy(out) }, nil)
	runtime.SetFinalizer(l, func(l *DataLoader) { l.dropBatch(); l.st.finalize() })
	return l
}

// NextBatch yields the next batch of the current epoch as tensors the caller owns
// (targets nil when the loader has none). At the end of an epoch it returns nil, nil, nil
// and advances to the next epoch.
func (l *DataLoader) NextBatch() (inputs, targets *Tensor, err error) {
	const op = "accel_dataloader_next"
	h, err := l.handle(op)
	if err != nil {
		return nil, nil, err
	}
	var x, y *C.accel_tensor
	err = l.ctx.err(op, C.accel_dataloader_next(l.ctx.st.h, h, &x, &y))
	runtime.KeepAlive(l)
	if err != nil {
		return nil, nil, err
	}
	return wrapTensor(x), wrapTensor(y), nil
}

func (l *DataLoader) dropBatch() {
	if l == nil {
		return
	}
	l.curX.Close()
	l.curY.Close()
	l.curX, l.curY = nil, nil
}

// Next advances to the next batch (closing the previous one); false at the end of the
// epoch or on an error (see Err).
func (l *DataLoader) Next() bool {
	if l == nil {
		return false
	}
	l.dropBatch()
	l.err = nil
	x, y, err := l.NextBatch()
	if err != nil {
		l.err = err
		return false
	}
	if x == nil {
		return false
	}
	l.curX, l.curY = x, y
	return true
}

// Batch returns the current batch (valid until the next Next or Close).
func (l *DataLoader) Batch() (inputs, targets *Tensor) {
	if l == nil {
		return nil, nil
	}
	return l.curX, l.curY
}

// Err returns the error that ended the last Next, or nil at a normal end of epoch.
func (l *DataLoader) Err() error {
	if l == nil {
		return errArg("accel_dataloader_next", "data loader is nil")
	}
	return l.err
}

// Each runs fn on every remaining batch of the current epoch, stopping at fn's first error.
func (l *DataLoader) Each(fn func(inputs, targets *Tensor) error) error {
	for l.Next() {
		if err := fn(l.curX, l.curY); err != nil {
			return err
		}
	}
	return l.Err()
}

// Epoch returns the current epoch (0-based).
func (l *DataLoader) Epoch() (int64, error) {
	const op = "accel_dataloader_epoch"
	h, err := l.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.int64_t
	err = resErr(op, C.ag_dataloader_epoch(h, &out))
	runtime.KeepAlive(l)
	return int64(out), err
}

// NumBatches returns the number of batches in one epoch (this process's share once prepared).
func (l *DataLoader) NumBatches() (int64, error) {
	const op = "accel_dataloader_num_batches"
	h, err := l.handle(op)
	if err != nil {
		return 0, err
	}
	var out C.int64_t
	err = resErr(op, C.ag_dataloader_num_batches(h, &out))
	runtime.KeepAlive(l)
	return int64(out), err
}

// SetEpoch sets the epoch and rewinds to its first batch.
func (l *DataLoader) SetEpoch(epoch int64) error {
	const op = "accel_dataloader_set_epoch"
	h, err := l.handle(op)
	if err != nil {
		return err
	}
	err = resErr(op, C.ag_dataloader_set_epoch(h, C.int64_t(epoch)))
	runtime.KeepAlive(l)
	return err
}
