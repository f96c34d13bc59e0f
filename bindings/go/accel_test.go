package accel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// must panics on an error (Go cannot pass t and a multi-value call together).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// chk panics on an error: usable inside simulator rank functions (where t.Fatal's
// runtime.Goexit must not run), the trampoline turns the panic into a rank failure.
func chk(err error) {
	if err != nil {
		panic(err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func newCtx(t *testing.T, mod func(*Options)) *Context {
	t.Helper()
	o := DefaultOptions()
	o.Seed = 42
	o.NumThreads = 1
	if mod != nil {
		mod(&o)
	}
	ctx := must(Init(&o))
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// wantErr checks that err is an *Error of the sentinel's status whose message contains sub.
func wantErr(t *testing.T, err error, sentinel error, sub string) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error matching %v, got nil", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("want errors.Is(err, %v), got %v", sentinel, err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As *Error failed on %v", err)
	}
	if !strings.Contains(e.Message, sub) {
		t.Fatalf("message %q lacks %q", e.Message, sub)
	}
	return e
}

func TestVersion(t *testing.T) {
	n, s := Version()
	if n != 100 || s != "0.1.0" || HeaderVersion != 100 {
		t.Fatalf("version %d %q header %d", n, s, HeaderVersion)
	}
	ok(t, checkVersion(n, s))
	ok(t, checkVersion(9999, "0.99.99"))
	err := checkVersion(10203, "1.2.3")
	wantErr(t, err, ErrUnsupported, "libaccel 1.2.3 is loaded, this binding was written for 0.x")
	ok(t, libCheck())
}

func TestStatusAndSentinels(t *testing.T) {
	if StatusIO.String() != "ACCEL_ERR_IO" || Status(-99).String() != "ACCEL_ERR_UNKNOWN" {
		t.Fatal(StatusIO.String(), Status(-99).String())
	}
	e := &Error{Status: StatusIO, Message: "accel_x: gone", Op: "accel_x"}
	if !errors.Is(e, ErrIO) || errors.Is(e, ErrFormat) || errors.Is(e, ErrClosed) {
		t.Fatal("sentinel matching")
	}
	if errors.Is(ErrIO, &Error{Status: StatusIO}) { // a non-sentinel target matches only itself
		t.Fatal("non-sentinel target matched")
	}
	c := errClosed("accel_y", "model")
	if !errors.Is(c, ErrClosed) || !errors.Is(c, ErrInvalidState) || errors.Is(c, ErrInvalidArgument) {
		t.Fatal("closed matching")
	}
	if !strings.Contains(e.Error(), "accel_x: gone") || !strings.Contains(e.Error(), "ACCEL_ERR_IO") {
		t.Fatal(e.Error())
	}
	if DType(99).Size() != 0 || Float16.Size() != 2 || Int64.Size() != 8 {
		t.Fatal("dtype sizes")
	}
}

func TestDefaults(t *testing.T) {
	o := DefaultOptions()
	if o.GradientAccumulationSteps != 1 || o.LossScaleInit != 65536 || o.BucketBytes != 25<<20 ||
		o.LossScaleGrowthInterval != 2000 || o.Strategy != StrategyNo || o.MixedPrecision != PrecisionNo ||
		o.Offload != OffloadNone {
		t.Fatalf("%+v", o)
	}
	if a := DefaultAdamWOptions(); a.LR != 1e-3 || a.WeightDecay != 0.01 || a.Beta2 != 0.999 {
		t.Fatalf("%+v", a)
	}
	if l := DefaultLAMBOptions(); l.Eps != 1e-6 {
		t.Fatalf("%+v", l)
	}
	if s := DefaultSGDOptions(); s.LR != 0.01 || s.Nesterov {
		t.Fatalf("%+v", s)
	}
	if s := DefaultSimOptions(); s.WorldSize != 2 || s.Topology != "8xH100" || s.TimeoutSeconds != 60 || s.DeviceMemory != "" ||
		s.HostMemory != "" {
		t.Fatalf("%+v", s)
	}
	if d := DefaultDataLoaderOptions(); d.BatchSize != 1 || !d.EvenBatches || d.Shuffle || d.Iterable {
		t.Fatalf("%+v", d)
	}
	if m := DefaultMLPOptions(2, 3); !m.Bias || m.Activation != ActReLU || len(m.LayerSizes) != 2 {
		t.Fatalf("%+v", m)
	}
	if s := DefaultSchedulerOptions(); s.Kind != ScheduleConstant || s.WarmupSteps != 0 {
		t.Fatalf("%+v", s)
	}
	if p := DefaultProjectOptions("x"); p.ProjectDir != "x" || p.TotalLimit != 0 {
		t.Fatalf("%+v", p)
	}
}

func TestTensorRoundTrip(t *testing.T) {
	data := []float32{1, 2, 3, 4, 5, 6}
	x := must(NewTensor(data, 2, 3))
	defer x.Close()
	if dt := must(x.DType()); dt != Float32 {
		t.Fatal(dt)
	}
	if sh := must(x.Shape()); len(sh) != 2 || sh[0] != 2 || sh[1] != 3 {
		t.Fatal(sh)
	}
	if n := must(x.Numel()); n != 6 {
		t.Fatal(n)
	}
	if n := must(x.NBytes()); n != 24 {
		t.Fatal(n)
	}
	if n := must(x.NDim()); n != 2 {
		t.Fatal(n)
	}
	back := must(ToSlice[float32](x))
	for i := range data {
		if back[i] != data[i] {
			t.Fatal(back)
		}
	}
	as64 := must(ToSlice[float64](x)) // converted by the library
	if as64[5] != 6 {
		t.Fatal(as64)
	}
	raw := must(x.Bytes())
	if math.Float32frombits(binary.LittleEndian.Uint32(raw[4:])) != 2 {
		t.Fatal(raw)
	}
	i64 := must(NewTensor([]int64{7, -8, 9}, 3))
	defer i64.Close()
	if v := must(ToSlice[int64](i64)); v[1] != -8 {
		t.Fatal(v)
	}
	s := must(NewTensor([]float64{2.5})) // a scalar
	defer s.Close()
	if v := must(s.Item()); v != 2.5 || must(s.NDim()) != 0 {
		t.Fatal(v)
	}
	// float16 1.0 = 0x3c00, bfloat16 -2.0 = 0xc000, from raw bytes
	h := must(NewTensorBytes(Float16, []byte{0x00, 0x3c, 0x00, 0x40}, 2))
	defer h.Close()
	if v := must(ToSlice[float32](h)); v[0] != 1 || v[1] != 2 {
		t.Fatal(v)
	}
	b := must(NewTensorBytes(BFloat16, []byte{0x00, 0xc0}))
	defer b.Close()
	if v := must(b.Item()); v != -2 {
		t.Fatal(v)
	}
	buf := make([]byte, 4)
	ok(t, b.CopyBytesAs(Float32, buf))
	if math.Float32frombits(binary.LittleEndian.Uint32(buf)) != -2 {
		t.Fatal(buf)
	}
	for _, v := range []interface{ Close() error }{must(NewTensor([]int32{1}, 1)), must(NewTensor([]uint8{1}, 1)),
		must(NewTensor([]int8{-1}, 1)), must(NewTensor([]float32{}, 0, 4))} {
		v.Close()
	}
}

func TestTensorMisuse(t *testing.T) {
	_, err := NewTensor([]float32{1, 2, 3}, 2, 2)
	wantErr(t, err, ErrInvalidArgument, "needs 4")
	_, err = NewTensor([]float32{1}, -1)
	wantErr(t, err, ErrInvalidArgument, "accel_tensor_create")
	_, err = NewTensorBytes(DType(42), nil)
	wantErr(t, err, ErrInvalidArgument, "dtype")
	_, err = NewTensorBytes(Float16, []byte{1, 2, 3}, 1)
	wantErr(t, err, ErrInvalidArgument, "whole number")
	x := must(NewTensor([]float32{1, 2}, 2))
	_, err = x.Item()
	wantErr(t, err, ErrInvalidArgument, "accel_tensor_item")
	err = CopyTo(x, make([]float32, 3))
	wantErr(t, err, ErrInvalidArgument, "dst_bytes")
	ok(t, x.Close())
	ok(t, x.Close()) // idempotent
	_, err = x.Numel()
	wantErr(t, err, ErrClosed, "closed")
	_, err = ToSlice[float32](x)
	if !errors.Is(err, ErrInvalidState) {
		t.Fatal(err)
	}
}

func TestInvalidOptions(t *testing.T) {
	o := DefaultOptions()
	o.GradientAccumulationSteps = 0
	_, err := Init(&o)
	wantErr(t, err, ErrInvalidArgument, "gradient_accumulation_steps")
	o = DefaultOptions()
	o.LossScaleInit = math.NaN()
	_, err = Init(&o)
	wantErr(t, err, ErrInvalidArgument, "loss_scale_init")

	ctx := newCtx(t, nil)
	m := must(ctx.NewMLP(DefaultMLPOptions(4, 3)))
	defer m.Close()
	a := DefaultAdamWOptions()
	a.WeightDecay = math.Inf(1)
	_, err = ctx.NewAdamW(m, &a)
	e := wantErr(t, err, ErrInvalidArgument, "weight_decay")
	if e.Op != "accel_optimizer_create_adamw" || !strings.Contains(e.Message, "inf") {
		t.Fatalf("%+v", e)
	}
	s := DefaultSGDOptions()
	s.Nesterov = true
	_, err = ctx.NewSGD(m, &s)
	wantErr(t, err, ErrInvalidArgument, "nesterov")
	l := DefaultLAMBOptions()
	l.Beta1 = 1
	_, err = ctx.NewLAMB(m, &l)
	wantErr(t, err, ErrInvalidArgument, "beta1")
	_, err = ctx.NewMLP(DefaultMLPOptions(4))
	wantErr(t, err, ErrInvalidArgument, "num_layer_sizes")
	mo := DefaultMLPOptions(4, 3)
	mo.Dropout = 1
	_, err = ctx.NewMLP(mo)
	wantErr(t, err, ErrInvalidArgument, "dropout")
	opt := must(ctx.NewSGD(m, nil))
	defer opt.Close()
	so := DefaultSchedulerOptions()
	so.Kind = ScheduleCosine
	so.WarmupSteps, so.TotalSteps = 10, 5
	_, err = ctx.NewScheduler(opt, so)
	wantErr(t, err, ErrInvalidArgument, "total_steps")
	xs := must(NewTensor(make([]float32, 8), 2, 4))
	defer xs.Close()
	lo := DefaultDataLoaderOptions()
	lo.BatchSize = 0
	_, err = ctx.NewDataLoader(xs, nil, lo)
	wantErr(t, err, ErrInvalidArgument, "batch_size")
	// calls in the wrong order
	_, err = ctx.Step()
	wantErr(t, err, ErrInvalidState, "accel_step")
	_, err = ctx.NewMLP(MLPOptions{}) // the zero value is not the defaults
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
}

func TestMixedPrecision(t *testing.T) {
	// the default (PrecisionNo) reads ACCEL_MIXED_PRECISION: unset it for this test
	t.Setenv("ACCEL_MIXED_PRECISION", "")
	ok(t, os.Unsetenv("ACCEL_MIXED_PRECISION"))
	if PrecisionAuto != 3 {
		t.Fatal(PrecisionAuto)
	}
	with := func(p Precision) Precision {
		ctx := newCtx(t, func(o *Options) { o.Device, o.MixedPrecision = DeviceCPU, p })
		return must(ctx.MixedPrecision())
	}
	// AUTO is resolved at Init for the device: bf16 where it computes bf16 natively, else no
	auto := with(PrecisionAuto)
	if auto != PrecisionBF16 && auto != PrecisionNo {
		t.Fatalf("auto resolved to %d", auto)
	}
	if again := with(PrecisionAuto); again != auto {
		t.Fatalf("auto resolved to %d, then %d", auto, again)
	}
	if p := with(PrecisionBF16); p != PrecisionBF16 {
		t.Fatalf("bf16 reported as %d", p)
	}
	if p := with(PrecisionFP16); p != PrecisionFP16 {
		t.Fatalf("fp16 reported as %d", p)
	}
	if p := must(newCtx(t, nil).MixedPrecision()); p != PrecisionNo {
		t.Fatalf("the default reported as %d", p)
	}
	closed := newCtx(t, nil)
	ok(t, closed.Close())
	_, err := closed.MixedPrecision()
	if e := wantErr(t, err, ErrClosed, "closed"); e.Op != "accel_mixed_precision" {
		t.Fatalf("%+v", e)
	}
	// EstimateMemory refuses AUTO: an estimate has no device to resolve it for
	o := DefaultMemoryEstimateOptions()
	o.MixedPrecision = PrecisionAuto
	_, err = EstimateMemory("llama-7b", &o)
	wantErr(t, err, ErrInvalidArgument, "accel_estimate_memory")
}

func TestTorchScriptErrors(t *testing.T) {
	ctx := newCtx(t, nil)
	dir := t.TempDir()
	_, err := ctx.LoadTorchScript(filepath.Join(dir, "missing.pt"))
	wantErr(t, err, ErrIO, "accel_model_load_torchscript")
	txt := filepath.Join(dir, "text.pt")
	ok(t, os.WriteFile(txt, []byte("not a module\n"), 0o644))
	_, err = ctx.LoadTorchScript(txt)
	wantErr(t, err, ErrFormat, "accel_model_load_torchscript")
	_, err = ctx.LoadTorchScript("")
	wantErr(t, err, ErrInvalidArgument, "path")
}

// setup builds a small MLP [4,8,3] trained with SGD on 8 samples.
type setup struct {
	ctx    *Context
	model  *Model
	opt    *Optimizer
	sched  *Scheduler
	loader *DataLoader
}

func newSetup(t *testing.T, ctx *Context, so *SchedulerOptions, batch int64) *setup {
	s := &setup{ctx: ctx}
	s.model = must(ctx.NewMLP(DefaultMLPOptions(4, 8, 3)))
	sg := DefaultSGDOptions()
	sg.LR = 0.1
	s.opt = must(ctx.NewSGD(s.model, &sg))
	if so != nil {
		s.sched = must(ctx.NewScheduler(s.opt, *so))
	}
	x := make([]float32, 8*4)
	y := make([]int64, 8)
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	for i := range y {
		y[i] = int64(i % 3)
	}
	xs := must(NewTensor(x, 8, 4))
	ys := must(NewTensor(y, 8))
	lo := DefaultDataLoaderOptions()
	lo.BatchSize = batch
	s.loader = must(ctx.NewDataLoader(xs, ys, lo))
	xs.Close()
	ys.Close()
	chk(ctx.Prepare(s.model, s.opt, s.sched, s.loader))
	return s
}

// trainStep runs one batch; false at the end of an epoch.
func (s *setup) trainStep(t *testing.T) (StepResult, bool) {
	if !s.loader.Next() {
		chk(s.loader.Err())
		return StepResult{}, false
	}
	x, y := s.loader.Batch()
	logits := must(s.model.Forward(x))
	defer logits.Close()
	loss := must(s.ctx.CrossEntropy(logits, y))
	defer loss.Close()
	chk(s.ctx.Backward(loss))
	return must(s.ctx.Step()), true
}

func TestTrainingSchedulerClip(t *testing.T) {
	ctx := newCtx(t, func(o *Options) { o.Device = DeviceCPU })
	if d := must(ctx.DeviceKind()); d != DeviceCPU {
		t.Fatal(d)
	}
	so := DefaultSchedulerOptions()
	so.Kind = ScheduleLinear
	so.WarmupSteps, so.TotalSteps = 2, 6
	s := newSetup(t, ctx, &so, 2)
	defer s.model.Close()
	defer s.opt.Close()
	defer s.sched.Close()
	defer s.loader.Close()

	nt, ne := must2(s.model.NumParameters())
	if nt != 4 || ne != 4*8+8+8*3+3 {
		t.Fatal(nt, ne)
	}
	name := must(s.model.ParameterName(0))
	if !strings.Contains(name, "weight") {
		t.Fatal(name)
	}
	w0 := must(s.model.Parameter(0))
	if sh := must(w0.Shape()); sh[0] != 8 || sh[1] != 4 {
		t.Fatal(sh)
	}
	before := must(ToSlice[float32](w0))
	w0.Close()
	_, err := s.model.ParameterName(4)
	wantErr(t, err, ErrInvalidArgument, "index")

	if nb := must(s.loader.NumBatches()); nb != 4 {
		t.Fatal(nb)
	}
	// lr: warm-up 0 -> 0.1 over 2 steps, then linear decay to 0 at step 6
	wantLR := []float64{0, 0.05, 0.1, 0.075, 0.05, 0.025, 0}
	if lr := must(s.opt.LR()); !near(lr, wantLR[0]) {
		t.Fatal(lr)
	}
	// first step: clip value checks
	if !s.loader.Next() {
		t.Fatal("no batch")
	}
	x, y := s.loader.Batch()
	logits := must(s.model.Forward(x))
	loss := must(ctx.CrossEntropy(logits, y))
	if l := must(loss.Item()); !(l > 0.5 && l < 2) {
		t.Fatal("loss", l)
	}
	ok(t, ctx.Backward(loss))
	err = ctx.Backward(loss) // once per loss
	wantErr(t, err, ErrInvalidState, "accel_backward")
	if sg := must(ctx.SyncGradients()); !sg {
		t.Fatal("sync_gradients")
	}
	norm := must(ctx.ClipGradNorm(1e-3))
	if !(norm > 1e-3) {
		t.Fatal("norm", norm)
	}
	after := must(ctx.ClipGradNorm(1e9)) // the norm after the first clip
	if math.Abs(after-1e-3) > 1e-6 {
		t.Fatal("clipped norm", after)
	}
	_, err = ctx.ClipGradNorm(-1)
	wantErr(t, err, ErrInvalidArgument, "max_norm")
	// the gradients read back are the clipped ones the step will apply: their global norm is 1e-3
	var sq float64
	for i := 0; i < nt; i++ {
		g := must(s.model.ParameterGrad(i))
		for _, v := range must(ToSlice[float32](g)) {
			sq += float64(v) * float64(v)
		}
		g.Close()
	}
	if math.Abs(math.Sqrt(sq)-1e-3) > 1e-6 {
		t.Fatal("gradient norm read back", math.Sqrt(sq))
	}
	_, err = s.model.ParameterGrad(nt)
	wantErr(t, err, ErrInvalidArgument, "out of range")
	r := must(ctx.Step())
	if !r.Stepped || r.OptimizerSteps != 1 || r.MicroSteps != 1 || r.LossScale != 1 {
		t.Fatalf("%+v", r)
	}
	_, err = s.model.ParameterGrad(0)
	wantErr(t, err, ErrInvalidState, "no gradients")
	logits.Close()
	loss.Close()
	if lr := must(s.opt.LR()); !near(lr, wantLR[1]) {
		t.Fatal(lr)
	}
	// lr was 0 at step 1: weights unchanged; then they move
	w := must(s.model.Parameter(0))
	mid := must(ToSlice[float32](w))
	w.Close()
	if mid[0] != before[0] {
		t.Fatal("lr 0 step changed weights")
	}
	for step := 2; step <= 6; step++ {
		if _, more := s.trainStep(t); !more {
			_, more = s.trainStep(t) // next epoch
			if !more {
				t.Fatal("empty epoch")
			}
			if e := must(s.loader.Epoch()); e != 1 {
				t.Fatal("epoch", e)
			}
		}
		if lr := must(s.opt.LR()); !near(lr, wantLR[step]) {
			t.Fatalf("step %d lr %v want %v", step, lr, wantLR[step])
		}
	}
	if n := must(s.sched.Steps()); n != 6 {
		t.Fatal(n)
	}
	w = must(s.model.Parameter(0))
	end := must(ToSlice[float32](w))
	w.Close()
	if end[0] == before[0] {
		t.Fatal("weights did not move")
	}
	ok(t, s.loader.SetEpoch(3))
	if e := must(s.loader.Epoch()); e != 3 {
		t.Fatal(e)
	}
	// Each over one epoch
	n := 0
	ok(t, s.loader.Each(func(x, y *Tensor) error { n++; return nil }))
	if n != 4 {
		t.Fatal(n)
	}
	// NextBatch: caller-owned tensors; shapes and dtypes
	bx, by := must2(s.loader.NextBatch())
	if sh := must(bx.Shape()); sh[0] != 2 || sh[1] != 4 {
		t.Fatal(sh)
	}
	if dt := must(by.DType()); dt != Int64 {
		t.Fatal(dt)
	}
	// wrong shapes and dtypes
	_, err = s.model.Forward(by)
	wantErr(t, err, ErrInvalidArgument, "accel_model_forward")
	_, err = s.model.Forward(bx, bx)
	wantErr(t, err, ErrInvalidArgument, "accel_model_forward")
	lg := must(s.model.Forward(bx))
	_, err = ctx.CrossEntropy(lg, bx)
	wantErr(t, err, ErrInvalidArgument, "accel_loss_cross_entropy")
	_, err = ctx.MSE(lg, by)
	wantErr(t, err, ErrInvalidArgument, "accel_loss_mse")
	tgt := must(NewTensor(make([]float32, 6), 2, 3))
	mse := must(ctx.MSE(lg, tgt))
	if v := must(mse.Item()); !(v > 0) {
		t.Fatal(v)
	}
	for _, x := range []*Tensor{bx, by, lg, tgt, mse} {
		x.Close()
	}
	// eval mode: no graph
	ok(t, s.model.SetTraining(false))
	ok(t, s.model.SetTraining(true))
	ok(t, ctx.SetSeed(7, false))
	ok(t, ctx.Print("hello from the main process"))
	if ls := must(ctx.LossScale()); ls != 1 {
		t.Fatal(ls)
	}

	// save_model -> safetensors with the parameter names
	path := filepath.Join(t.TempDir(), "m.safetensors")
	ok(t, s.model.Save(path))
	raw, err := os.ReadFile(path)
	ok(t, err)
	hl := binary.LittleEndian.Uint64(raw[:8])
	var hdr map[string]json.RawMessage
	ok(t, json.Unmarshal(raw[8:8+hl], &hdr))
	if _, found := hdr[name]; !found || len(hdr) < 4 {
		t.Fatalf("header %v", hdr)
	}
	err = s.model.Save(filepath.Dir(path)) // a directory is refused
	wantErr(t, err, ErrInvalidArgument, "accel_save_model")
	err = s.model.Save(filepath.Join(filepath.Dir(path), "m.pt"))
	wantErr(t, err, ErrUnsupported, "accel_save_model")
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

func TestFP16LossScale(t *testing.T) {
	ctx := newCtx(t, func(o *Options) {
		o.MixedPrecision = PrecisionFP16
		o.Device = DeviceCPU
		o.LossScaleInit = 1024
		o.LossScaleGrowthInterval = 2
	})
	s := newSetup(t, ctx, nil, 4)
	if ls := must(ctx.LossScale()); ls != 1024 {
		t.Fatal(ls)
	}
	r, _ := s.trainStep(t)
	if !r.Stepped || r.Skipped || r.LossScale != 1024 {
		t.Fatalf("%+v", r)
	}
	r, _ = s.trainStep(t)
	if r.LossScale != 2048 || must(ctx.LossScale()) != 2048 { // grew after 2 good steps
		t.Fatalf("%+v", r)
	}
}

func TestCloseAndPrepareHazard(t *testing.T) {
	ctx := newCtx(t, nil)
	s := newSetup(t, ctx, nil, 4)
	if !s.loader.Next() {
		t.Fatal("no batch")
	}
	x, y := s.loader.Batch()
	logits := must(s.model.Forward(x))
	loss := must(ctx.CrossEntropy(logits, y))
	// Closing prepared objects while the context is open: their memory stays until the
	// context closes (the context still uses them).
	ok(t, s.model.Close())
	ok(t, s.opt.Close())
	ok(t, s.opt.Close())
	ok(t, s.loader.Close())
	_, err := s.model.Forward(x)
	wantErr(t, err, ErrClosed, "accel_model_forward")
	_, err = s.opt.LR()
	wantErr(t, err, ErrClosed, "accel_optimizer_lr")
	if s.loader.Next() || !errors.Is(s.loader.Err(), ErrClosed) {
		t.Fatal("closed loader", s.loader.Err())
	}
	ok(t, ctx.Backward(loss)) // uses the model's graph and parameters
	r := must(ctx.Step())     // uses the optimizer
	if !r.Stepped {
		t.Fatal(r)
	}
	err = ctx.Prepare(s.model, nil, nil, nil)
	wantErr(t, err, ErrClosed, "accel_prepare")
	logits.Close()
	loss.Close()

	// objects of a closed context
	ctx2 := must(Init(nil))
	m := must(ctx2.NewMLP(DefaultMLPOptions(4, 2)))
	ok(t, ctx2.Close())
	ok(t, ctx2.Close())
	_, err = m.Parameter(0)
	wantErr(t, err, ErrClosed, "closed")
	_, _, err = m.NumParameters()
	wantErr(t, err, ErrClosed, "closed")
	_, err = ctx2.NewMLP(DefaultMLPOptions(4, 2))
	wantErr(t, err, ErrClosed, "context")
	ok(t, m.Close()) // destroyed after its context: allowed

	// a handle of another context
	ctx3 := newCtx(t, nil)
	m3 := must(ctx3.NewMLP(DefaultMLPOptions(4, 2)))
	ctx4 := newCtx(t, nil)
	err = ctx4.Prepare(m3, nil, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "accel_prepare")
	_, err = ctx4.NewSGD(m3, nil)
	wantErr(t, err, ErrInvalidArgument, "accel_optimizer_create_sgd")
	var nilModel *Model
	_, err = nilModel.Forward()
	wantErr(t, err, ErrInvalidArgument, "nil")
}

func TestFinalizers(t *testing.T) {
	for i := 0; i < 20; i++ {
		func() {
			o := DefaultOptions()
			o.NumThreads = 1
			ctx, err := Init(&o)
			ok(t, err)
			m := must(ctx.NewMLP(DefaultMLPOptions(4, 8, 2)))
			opt := must(ctx.NewAdamW(m, nil))
			sc := must(ctx.NewScheduler(opt, DefaultSchedulerOptions()))
			x := must(NewTensor(make([]float32, 16), 4, 4))
			l := must(ctx.NewDataLoader(x, nil, DefaultDataLoaderOptions()))
			if i%2 == 0 {
				ok(t, ctx.Prepare(m, opt, sc, l))
				if !l.Next() {
					t.Fatal("no batch")
				}
				bx, by := l.Batch()
				if by != nil {
					t.Fatal("targets without a target tensor")
				}
				out := must(m.Forward(bx))
				_ = out // dropped: the finalizer releases it
			}
			if i%3 == 0 {
				m.Close() // some closed explicitly, the rest dropped
			}
			rep, err := SimRun(&SimOptions{WorldSize: 1, Topology: "8xH100", TimeoutSeconds: 10}, &o, func(c *Context) error {
				_, err := c.NewMLP(DefaultMLPOptions(2, 2)) // dropped inside the rank
				return err
			})
			ok(t, err)
			_ = rep
		}()
		runtime.GC()
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
}

// torchScriptModel is the TorchScript MLP (64 -> 10) the build writes: ACCEL_TEST_TORCHSCRIPT,
// else the checkout's build/tests/digits_model.pt; the test skips, saying why, without one.
func torchScriptModel(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ACCEL_TEST_TORCHSCRIPT"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "build", "tests", "digits_model.pt"))
	if err == nil {
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("no TorchScript model file to load: ACCEL_TEST_TORCHSCRIPT is not set and %s is missing (%v)", p, err)
	return ""
}

// TestTorchScriptLoad loads the TorchScript MLP (64 -> 10) named by ACCEL_TEST_TORCHSCRIPT,
// runs it and saves it back as TorchScript and as safetensors.
func TestTorchScriptLoad(t *testing.T) {
	path := torchScriptModel(t)
	ctx := newCtx(t, nil)
	m, err := ctx.LoadTorchScript(path)
	ok(t, err)
	defer m.Close()
	nt, ne := must2(m.NumParameters())
	if nt < 2 || ne < 64*10 {
		t.Fatal(nt, ne)
	}
	x := must(NewTensor(make([]float32, 3*64), 3, 64))
	defer x.Close()
	y := must(m.Forward(x))
	defer y.Close()
	if sh := must(y.Shape()); len(sh) != 2 || sh[0] != 3 || sh[1] != 10 {
		t.Fatal(sh)
	}
	dir := t.TempDir()
	ok(t, m.Save(filepath.Join(dir, "copy.pt")))
	m2 := must(ctx.LoadTorchScript(filepath.Join(dir, "copy.pt")))
	defer m2.Close()
	y2 := must(m2.Forward(x))
	defer y2.Close()
	a, b := must(ToSlice[float32](y)), must(ToSlice[float32](y2))
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("reloaded model differs at %d: %v %v", i, a[i], b[i])
		}
	}
}

// TestSaveModelRoundTrip reads the safetensors file back (header JSON and data) and
// compares every tensor with Parameter.
func TestSaveModelRoundTrip(t *testing.T) {
	ctx := newCtx(t, nil)
	m := must(ctx.NewMLP(DefaultMLPOptions(4, 8, 3)))
	defer m.Close()
	path := filepath.Join(t.TempDir(), "m.safetensors")
	ok(t, m.Save(path))
	raw, err := os.ReadFile(path)
	ok(t, err)
	hl := binary.LittleEndian.Uint64(raw[:8])
	var hdr map[string]struct {
		DType   string  `json:"dtype"`
		Shape   []int64 `json:"shape"`
		Offsets [2]int  `json:"data_offsets"`
	}
	ok(t, json.Unmarshal(raw[8:8+hl], &hdr))
	delete(hdr, "__metadata__") // optional free-form metadata
	data := raw[8+hl:]
	nt, _ := must2(m.NumParameters())
	if len(hdr) != nt {
		t.Fatalf("%d tensors in the file, %d parameters", len(hdr), nt)
	}
	for i := 0; i < nt; i++ {
		name := must(m.ParameterName(i))
		e, found := hdr[name]
		if !found || e.DType != "F32" {
			t.Fatalf("%s: %+v", name, e)
		}
		p := must(m.Parameter(i))
		want := must(ToSlice[float32](p))
		sh := must(p.Shape())
		p.Close()
		if fmt.Sprint(sh) != fmt.Sprint(e.Shape) || e.Offsets[1]-e.Offsets[0] != 4*len(want) {
			t.Fatalf("%s: shape %v offsets %v, parameter %v", name, e.Shape, e.Offsets, sh)
		}
		for j, w := range want {
			got := math.Float32frombits(binary.LittleEndian.Uint32(data[e.Offsets[0]+4*j:]))
			if got != w {
				t.Fatalf("%s[%d]: file %v, parameter %v", name, j, got, w)
			}
		}
	}
	// the file is replaced by a later save; a user's file is not
	ok(t, m.Save(path))
	user := filepath.Join(filepath.Dir(path), "notes.txt")
	ok(t, os.WriteFile(user, []byte("mine"), 0o644))
	wantErr(t, m.Save(user), ErrInvalidArgument, "accel_save_model")
	if b, _ := os.ReadFile(user); string(b) != "mine" {
		t.Fatal("user file changed")
	}
}

// TestFinalizerDefersToContext: a finalizer runs on its own goroutine, while another may be
// using the context; it only queues a context object, whose C handle the context's own
// goroutine destroys at its next call.
func TestFinalizerDefersToContext(t *testing.T) {
	ctx := newCtx(t, nil)
	var st *objState
	func() {
		m := must(ctx.NewMLP(DefaultMLPOptions(4, 2)))
		st = m.o.st
	}() // m is dropped
	queued := func() bool {
		ctx.st.mu.Lock()
		defer ctx.st.mu.Unlock()
		ctx.st.pmu.Lock()
		defer ctx.st.pmu.Unlock()
		return len(ctx.st.pending) == 1 && !st.destroyed
	}
	for i := 0; i < 100 && !queued(); i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if !queued() {
		t.Fatal("the finalizer did not queue the model (or destroyed it on its own goroutine)")
	}
	_ = must(ctx.DeviceKind()) // the context's goroutine: destroys it now
	ctx.st.mu.Lock()
	ctx.st.pmu.Lock()
	done := st.destroyed && st.userClosed && len(ctx.st.pending) == 0
	ctx.st.pmu.Unlock()
	ctx.st.mu.Unlock()
	if !done {
		t.Fatal("the queued model was not destroyed at the context's next call")
	}
}
