package accel

import (
	"errors"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rtTrainer is a context training an MLP (5 -> 16 -> 3, tanh) with AdamW (lr 0.01) on the CPU,
// prepared, and 8 samples with their targets.
type rtTrainer struct {
	ctx    *Context
	model  *Model
	opt    *Optimizer
	xs, ys []float32 // 8 x 5, 8 x 3
}

func newRTTrainer(t *testing.T, accum int32, seed uint64) *rtTrainer {
	t.Helper()
	tr := &rtTrainer{ctx: newCtx(t, func(o *Options) {
		o.Device = DeviceCPU
		o.GradientAccumulationSteps = accum
		o.Seed = seed
	})}
	mo := DefaultMLPOptions(5, 16, 3)
	mo.Activation = ActTanh
	tr.model = must(tr.ctx.NewMLP(mo))
	ao := DefaultAdamWOptions()
	ao.LR = 0.01
	tr.opt = must(tr.ctx.NewAdamW(tr.model, &ao))
	ok(t, tr.ctx.Prepare(tr.model, tr.opt, nil, nil))
	for i := 0; i < 8*5; i++ {
		tr.xs = append(tr.xs, float32(math.Sin(0.7*float64(i))))
	}
	for i := 0; i < 8*3; i++ {
		tr.ys = append(tr.ys, float32(math.Cos(0.3*float64(i))))
	}
	return tr
}

// forward is the model's own forward on xs (training mode: the MLP has no dropout, so the
// values of evaluation mode).
func (tr *rtTrainer) forward() []float32 {
	x := must(NewTensor(tr.xs, 8, 5))
	defer x.Close()
	y := must(tr.model.Forward(x))
	defer y.Close()
	return must(ToSlice[float32](y))
}

// step is one MSE step on (xs, ys) through the calls TrainMicroBatches replaces.
func (tr *rtTrainer) step() {
	x := must(NewTensor(tr.xs, 8, 5))
	target := must(NewTensor(tr.ys, 8, 3))
	y := must(tr.model.Forward(x))
	loss := must(tr.ctx.MSE(y, target))
	chk(tr.ctx.Backward(loss))
	must(tr.ctx.Step())
	for _, p := range []*Tensor{x, target, y, loss} {
		p.Close()
	}
}

// allWeights is every parameter of model, concatenated.
func allWeights(m *Model) []float32 {
	n, _ := must2(m.NumParameters())
	var w []float32
	for i := 0; i < n; i++ {
		p := must(m.Parameter(i))
		w = append(w, must(ToSlice[float32](p))...)
		p.Close()
	}
	return w
}

// sameBits reports whether a and b hold the same float32 values bit for bit.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// runInf runs inf on the rows of xs (5 features each) and returns the output.
func runInf(inf *Inference, xs []float32) ([]float32, error) {
	x := must(NewTensor(xs, int64(len(xs)/5), 5))
	defer x.Close()
	y, err := inf.Run(x)
	if err != nil {
		return nil, err
	}
	defer y.Close()
	return ToSlice[float32](y)
}

func weightsVersion(t *testing.T, inf *Inference) uint64 {
	t.Helper()
	v, age, err := inf.Weights()
	ok(t, err)
	if !(age >= 0) {
		t.Fatalf("age %v", age)
	}
	return v
}

func TestInferenceRunsTheForwardAndTakesPublishedWeights(t *testing.T) {
	if o := DefaultInferenceOptions(); o.NumThreads != 1 {
		t.Fatalf("%+v", o)
	}
	tr := newRTTrainer(t, 1, 3)
	inf := must(tr.ctx.Inference(tr.model, nil))
	defer inf.Close()
	if v := weightsVersion(t, inf); v != 1 { // the creation published version 1
		t.Fatal(v)
	}
	before := tr.forward()
	if got := must(runInf(inf, tr.xs)); !sameBits(got, before) {
		t.Fatalf("the copy's output %v differs from the model's forward %v", got, before)
	}

	tr.step()
	after := tr.forward()
	if sameBits(after, before) {
		t.Fatal("the step did not change the output")
	}
	if got := must(runInf(inf, tr.xs)); !sameBits(got, before) {
		t.Fatal("a step the trainer did not publish reached inference")
	}
	if v := weightsVersion(t, inf); v != 1 {
		t.Fatal(v)
	}
	if v := must(tr.ctx.PublishWeights(tr.model)); v != 2 {
		t.Fatal("published version", v)
	}
	if v := weightsVersion(t, inf); v != 1 {
		t.Fatal("a copy changes weights only when a run starts; version", v)
	}
	if got := must(runInf(inf, tr.xs)); !sameBits(got, after) {
		t.Fatal("the published step did not reach inference")
	}
	if v := weightsVersion(t, inf); v != 2 {
		t.Fatal(v)
	}
	if v := must(tr.ctx.PublishWeights(tr.model)); v != 3 { // the same weights again: a new version
		t.Fatal(v)
	}

	// a second copy starts with the current weights (a new publication); the first takes
	// them at its next run
	tr.step()
	now := tr.forward()
	inf2 := must(tr.ctx.Inference(tr.model, &InferenceOptions{NumThreads: 2}))
	defer inf2.Close()
	if v := weightsVersion(t, inf2); v != 4 {
		t.Fatal(v)
	}
	if got := must(runInf(inf2, tr.xs)); !sameBits(got, now) {
		t.Fatal("second copy")
	}
	if got := must(runInf(inf, tr.xs)); !sameBits(got, now) || weightsVersion(t, inf) != 4 {
		t.Fatal("the first copy did not take the latest weights")
	}

	// the output is an ordinary tensor: a loss (with autograd) may read it
	x := must(NewTensor(tr.xs, 8, 5))
	defer x.Close()
	y := must(inf.Run(x))
	defer y.Close()
	target := must(NewTensor(tr.ys, 8, 3))
	defer target.Close()
	loss := must(tr.ctx.MSE(y, target))
	defer loss.Close()
	if v := must(loss.Item()); !(v > 0) {
		t.Fatal(v)
	}
}

// TestInferenceOutlivesItsModelAndContext: Close on the model and the context neither closes
// nor invalidates the copy, and the copy does not keep the context reachable.
func TestInferenceOutlivesItsModelAndContext(t *testing.T) {
	tr := newRTTrainer(t, 1, 3)
	inf := must(tr.ctx.Inference(tr.model, nil))
	defer inf.Close()
	tr.step()
	if v := must(tr.ctx.PublishWeights(tr.model)); v != 2 {
		t.Fatal(v)
	}
	want := tr.forward()
	ok(t, tr.opt.Close())
	ok(t, tr.model.Close())
	ok(t, tr.ctx.Close())
	_, err := tr.ctx.PublishWeights(tr.model)
	wantErr(t, err, ErrClosed, "accel_publish_weights")
	_, err = tr.ctx.Inference(tr.model, nil)
	wantErr(t, err, ErrClosed, "accel_inference_create")
	if got := must(runInf(inf, tr.xs)); !sameBits(got, want) {
		t.Fatal("the copy changed when its model and context closed")
	}
	if v := weightsVersion(t, inf); v != 2 {
		t.Fatal(v)
	}

	// dropped without Close: the context's finalizer runs while the copy lives, and the
	// copy keeps working
	var finalized atomic.Bool
	ctxFinalized = func() { finalized.Store(true) }
	defer func() { ctxFinalized = nil }()
	var inf2 *Inference
	var want2 []float32
	func() {
		o := DefaultOptions()
		o.Seed, o.NumThreads, o.Device = 7, 1, DeviceCPU
		ctx := must(Init(&o))
		m := must(ctx.NewMLP(DefaultMLPOptions(5, 4, 2)))
		inf2 = must(ctx.Inference(m, nil))
		x := must(NewTensor(tr.xs, 8, 5))
		y := must(m.Forward(x))
		want2 = must(ToSlice[float32](y))
		x.Close()
		y.Close()
	}()
	defer inf2.Close()
	closed := finalized.Load
	for i := 0; i < 100 && !closed(); i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if !closed() {
		t.Fatal("the context was not finalized while its inference copy lived (the copy keeps it reachable?)")
	}
	if got := must(runInf(inf2, tr.xs)); !sameBits(got, want2) {
		t.Fatal("the copy changed when its context was finalized")
	}
}

// TestInferenceOnAnotherGoroutine: the test goroutine trains and publishes while another
// runs the copy as fast as it can: every output is exactly the model's output for the
// version the run reports, so no run saw a set being written, and the runs saw several
// versions (they never waited for the trainer).
func TestInferenceOnAnotherGoroutine(t *testing.T) {
	tr := newRTTrainer(t, 1, 3)
	inf := must(tr.ctx.Inference(tr.model, nil))
	defer inf.Close()
	expected := map[uint64][]float32{1: tr.forward()} // the trainer's alone until the reader ends
	type seenRun struct {
		version uint64
		out     []float32
	}
	var (
		seen     []seenRun // the reader's alone until it ends
		readErr  error
		runs     atomic.Int64
		distinct atomic.Int64
		done     atomic.Bool
		stopped  atomic.Bool // the reader ended
		wg       sync.WaitGroup
	)
	xs := append([]float32(nil), tr.xs...)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stopped.Store(true)
		runtime.LockOSThread() // as a real inference loop would (Run sets its thread's intra-op threads)
		defer runtime.UnlockOSThread()
		last := uint64(0)
		for !done.Load() {
			y, err := runInf(inf, xs)
			if err != nil {
				readErr = err
				return
			}
			v, _, err := inf.Weights()
			if err != nil {
				readErr = err
				return
			}
			seen = append(seen, seenRun{v, y})
			if v != last {
				last = v
				distinct.Add(1)
			}
			runs.Add(1)
		}
	}()
	var final uint64
	start := time.Now()
	for i := 0; !stopped.Load() && (i < 100 || (distinct.Load() < 3 && time.Since(start) < 10*time.Second)); i++ {
		tr.step()
		v, err := tr.ctx.PublishWeights(tr.model)
		if err != nil {
			done.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		expected[v] = tr.forward()
		final = v
	}
	// let the reader run on the last weights too
	for before := runs.Load(); runs.Load() < before+3 && !stopped.Load() && time.Since(start) < 20*time.Second; {
		time.Sleep(time.Millisecond)
	}
	done.Store(true)
	wg.Wait()
	ok(t, readErr)
	versions := map[uint64]int{}
	for _, r := range seen {
		want, found := expected[r.version]
		if !found {
			t.Fatalf("a run reported version %d, never published", r.version)
		}
		if !sameBits(r.out, want) {
			t.Fatalf("the run of version %d saw other weights", r.version)
		}
		versions[r.version]++
	}
	if len(versions) < 3 {
		t.Fatalf("the runs saw too few versions: %v", versions)
	}
	if versions[final] == 0 {
		t.Fatalf("no run saw the last version %d: %v", final, versions)
	}
	t.Logf("%d runs saw %d of %d versions", len(seen), len(versions), final)
}

// TestInferenceOneGoroutineAtATime: overlapping uses of one copy are refused (ErrInvalidState),
// never raced; Close waits for a run in progress, and the goroutine then sees ErrClosed.
func TestInferenceOneGoroutineAtATime(t *testing.T) {
	tr := newRTTrainer(t, 1, 3)
	inf := must(tr.ctx.Inference(tr.model, nil))
	want := tr.forward()
	x := must(NewTensor(tr.xs, 8, 5))
	defer x.Close()

	inf.s.mu.Lock() // as another goroutine's run in progress
	_, err := inf.Run(x)
	wantErr(t, err, ErrInvalidState, "in use by another goroutine")
	_, _, err = inf.Weights()
	wantErr(t, err, ErrInvalidState, "accel_inference_weights")
	inf.s.mu.Unlock()

	// two goroutines on one copy: each run succeeds with the right output or is refused
	var okRuns, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				got, err := runInf(inf, tr.xs)
				switch {
				case err == nil && sameBits(got, want):
					okRuns.Add(1)
				case errors.Is(err, ErrInvalidState) && !errors.Is(err, ErrClosed):
					refused.Add(1)
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal("a run returned neither the output nor ErrInvalidState:", err)
	}
	if okRuns.Load() == 0 {
		t.Fatal("no run succeeded")
	}
	t.Logf("%d runs, %d refused while the other goroutine ran", okRuns.Load(), refused.Load())

	// Close from the test goroutine while another goroutine runs: it waits, then the runs fail
	ended := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		for {
			if _, err := runInf(inf, tr.xs); err != nil && !(errors.Is(err, ErrInvalidState) && !errors.Is(err, ErrClosed)) {
				ended <- err
				return
			}
		}
	}()
	<-started
	time.Sleep(5 * time.Millisecond)
	ok(t, inf.Close())
	wantErr(t, <-ended, ErrClosed, "accel_inference_run: the inference copy is closed")
}

// TestInferenceTorchScript: a copy of a TorchScript module gives the module's output.
func TestInferenceTorchScript(t *testing.T) {
	path := torchScriptModel(t)
	ctx := newCtx(t, func(o *Options) { o.Device = DeviceCPU })
	m := must(ctx.LoadTorchScript(path))
	defer m.Close()
	inf := must(ctx.Inference(m, nil))
	defer inf.Close()
	img := make([]float32, 2*64)
	for i := range img {
		img[i] = float32(i%17) / 16
	}
	x := must(NewTensor(img, 2, 64))
	defer x.Close()
	ok(t, m.SetTraining(false))
	want := must(m.Forward(x))
	defer want.Close()
	got := must(inf.Run(x))
	defer got.Close()
	if !sameBits(must(ToSlice[float32](want)), must(ToSlice[float32](got))) {
		t.Fatal("the module's copy differs from the module")
	}
}

func TestInferenceErrors(t *testing.T) {
	tr := newRTTrainer(t, 1, 3)
	for _, bad := range []int32{0, -1, 4097} {
		_, err := tr.ctx.Inference(tr.model, &InferenceOptions{NumThreads: bad})
		e := wantErr(t, err, ErrInvalidArgument, "num_threads must be in [1, 4096], got "+strconv.Itoa(int(bad)))
		if e.Op != "accel_inference_create" {
			t.Fatal(e.Op)
		}
	}
	_, err := tr.ctx.Inference(nil, nil)
	wantErr(t, err, ErrInvalidArgument, "model is nil")
	_, err = tr.ctx.PublishWeights(nil)
	wantErr(t, err, ErrInvalidArgument, "model is nil")
	other := newRTTrainer(t, 1, 3)
	_, err = other.ctx.Inference(tr.model, nil)
	wantErr(t, err, ErrInvalidArgument, "another context")
	_, err = other.ctx.PublishWeights(tr.model)
	wantErr(t, err, ErrInvalidArgument, "another context")

	inf := must(tr.ctx.Inference(tr.model, nil))
	// the message of a failed run is the library's (thread-local in C: read in the same call)
	wrong := must(NewTensor(make([]float32, 8), 2, 4))
	defer wrong.Close()
	_, err = inf.Run(wrong)
	wantErr(t, err, ErrInvalidArgument, "accel_inference_run: inputs[0]: the MLP expects input [batch, 5], got [2, 4]")
	_, err = inf.Run(nil)
	wantErr(t, err, ErrInvalidArgument, "inputs[0] is NULL")
	_, err = inf.Run()
	wantErr(t, err, ErrInvalidArgument, "num_inputs must be 1 (the MLP takes one input tensor), got 0")
	ok(t, wrong.Close())
	_, err = inf.Run(wrong)
	wantErr(t, err, ErrClosed, "tensor")

	// a closed model: ErrClosed; a closed copy: ErrClosed, Close idempotent
	ok(t, inf.Close())
	ok(t, inf.Close())
	x := must(NewTensor(tr.xs, 8, 5))
	defer x.Close()
	_, err = inf.Run(x)
	e := wantErr(t, err, ErrClosed, "accel_inference_run: the inference copy is closed")
	if !errors.Is(e, ErrInvalidState) {
		t.Fatal(e)
	}
	_, _, err = inf.Weights()
	wantErr(t, err, ErrClosed, "accel_inference_weights")
	var none *Inference
	_, err = none.Run(x)
	wantErr(t, err, ErrInvalidArgument, "inference is nil")
	_, _, err = none.Weights()
	wantErr(t, err, ErrInvalidArgument, "inference is nil")
	ok(t, none.Close())
	m := must(tr.ctx.NewMLP(DefaultMLPOptions(5, 3)))
	ok(t, m.Close())
	_, err = tr.ctx.Inference(m, nil)
	wantErr(t, err, ErrClosed, "accel_inference_create")
	_, err = tr.ctx.PublishWeights(m)
	wantErr(t, err, ErrClosed, "accel_publish_weights")

	// dropped copies are released by their finalizers
	for i := 0; i < 5; i++ {
		must(tr.ctx.Inference(tr.model, nil))
	}
	runtime.GC()
	runtime.GC()
}

// rtData: rows samples of 5 features and 3 targets.
type rtData struct{ xs, ys []float32 }

func newRTData(rows int) rtData {
	var d rtData
	for i := 0; i < rows*5; i++ {
		d.xs = append(d.xs, float32(math.Sin(0.37*float64(i))))
	}
	for i := 0; i < rows*3; i++ {
		d.ys = append(d.ys, float32(math.Cos(0.11*float64(i))))
	}
	return d
}

func (d rtData) loader(t *testing.T, ctx *Context, batch int64, targets, shuffle bool) *DataLoader {
	t.Helper()
	x := must(NewTensor(d.xs, int64(len(d.xs)/5), 5))
	defer x.Close()
	var y *Tensor
	if targets {
		y = must(NewTensor(d.ys, int64(len(d.ys)/3), 3))
		defer y.Close()
	}
	lo := DefaultDataLoaderOptions()
	lo.BatchSize, lo.Shuffle, lo.Seed = batch, shuffle, 5
	l := must(ctx.NewDataLoader(x, y, lo))
	t.Cleanup(func() { l.Close() })
	return l
}

// TestTrainMicroBatchesIsTheLoopOfCalls: two contexts with the same seed, one training with
// Next, Forward, MSE, Backward and Step, the other with TrainMicroBatches, hold the same
// weights bit for bit after each call (gradient accumulation 2).
func TestTrainMicroBatchesIsTheLoopOfCalls(t *testing.T) {
	d := newRTData(20) // 5 batches of 4 an epoch
	a, b := newRTTrainer(t, 2, 3), newRTTrainer(t, 2, 3)
	la, lb := d.loader(t, a.ctx, 4, true, true), d.loader(t, b.ctx, 4, true, true)
	ok(t, a.ctx.Prepare(nil, nil, nil, la))
	ok(t, b.ctx.Prepare(nil, nil, nil, lb))
	var losses []float64
	steps := int32(0)
	loop := func(n int) {
		t.Helper()
		for i := 0; i < n && la.Next(); i++ {
			x, y := la.Batch()
			out := must(a.model.Forward(x))
			loss := must(a.ctx.MSE(out, y))
			ok(t, a.ctx.Backward(loss))
			if r := must(a.ctx.Step()); r.Stepped {
				steps++
			}
			losses = append(losses, must(loss.Item()))
			out.Close()
			loss.Close()
		}
		ok(t, la.Err())
	}
	mean := func() float64 {
		s := 0.0
		for _, l := range losses {
			s += l
		}
		return s / float64(len(losses))
	}

	loop(3)
	r := must(b.ctx.TrainMicroBatches(b.model, lb, LossMSE, 3, 0))
	if r.MicroBatches != 3 || r.OptimizerSteps != 1 || steps != 1 || r.SkippedSteps != 0 || r.EpochEnded ||
		r.MeanLoss != mean() || !(r.Seconds >= 0) {
		t.Fatalf("%+v; the loop: %d steps, mean loss %v", r, steps, mean())
	}
	if !sameBits(allWeights(a.model), allWeights(b.model)) {
		t.Fatal("the weights differ after 3 micro-batches")
	}

	// the rest of the epoch: 2 batches, the last a real step (the end of the data), then the end
	losses, steps = nil, 0
	loop(3) // 2 batches, then the end of the epoch
	r = must(b.ctx.TrainMicroBatches(b.model, lb, LossMSE, 10, 0))
	if r.MicroBatches != 2 || r.OptimizerSteps != 2 || steps != 2 || !r.EpochEnded || r.MeanLoss != mean() {
		t.Fatalf("%+v; the loop: %d steps, mean loss %v", r, steps, mean())
	}
	if !sameBits(allWeights(a.model), allWeights(b.model)) {
		t.Fatal("the weights differ at the end of the epoch")
	}
	if e := must(lb.Epoch()); e != 1 {
		t.Fatal("epoch", e)
	}
	// the next call starts the next epoch
	r = must(b.ctx.TrainMicroBatches(b.model, lb, LossMSE, 1, 0))
	loop(1)
	if r.MicroBatches != 1 || r.EpochEnded || !sameBits(allWeights(a.model), allWeights(b.model)) {
		t.Fatalf("%+v, or the weights differ in the next epoch", r)
	}

	// a time budget: at least one micro-batch runs; the second would end past 1 ns
	r = must(b.ctx.TrainMicroBatches(b.model, lb, LossMSE, 50, 1e-9))
	if r.MicroBatches != 1 || r.EpochEnded {
		t.Fatalf("%+v", r)
	}
	// a generous one: the bound is the count
	r = must(b.ctx.TrainMicroBatches(b.model, lb, LossMSE, 2, 60))
	if r.MicroBatches != 2 {
		t.Fatalf("%+v", r)
	}
}

// TestTrainMicroBatchesPublishToInference: the frame loop's use: train two micro-batches,
// publish, run the copy. 4 batches an epoch: every third call finds the epoch's end at once
// (no micro-batch, NaN mean loss) and the next starts the next epoch.
func TestTrainMicroBatchesPublishToInference(t *testing.T) {
	d := newRTData(16)
	tr := newRTTrainer(t, 1, 3)
	l := d.loader(t, tr.ctx, 4, true, true)
	inf := must(tr.ctx.Inference(tr.model, nil))
	defer inf.Close()
	for frame := 0; frame < 7; frame++ {
		r := must(tr.ctx.TrainMicroBatches(tr.model, l, LossMSE, 2, 0))
		if frame%3 == 2 {
			if r.MicroBatches != 0 || r.OptimizerSteps != 0 || !r.EpochEnded || !math.IsNaN(r.MeanLoss) {
				t.Fatalf("frame %d: %+v", frame, r)
			}
		} else if r.MicroBatches != 2 || r.OptimizerSteps != 2 || r.EpochEnded || math.IsNaN(r.MeanLoss) {
			t.Fatalf("frame %d: %+v", frame, r)
		}
		if v := must(tr.ctx.PublishWeights(tr.model)); v != uint64(frame+2) {
			t.Fatal(v)
		}
		if got := must(runInf(inf, tr.xs)); !sameBits(got, tr.forward()) {
			t.Fatalf("frame %d: the copy differs from the model", frame)
		}
	}
	if e := must(l.Epoch()); e != 2 {
		t.Fatal("epoch", e)
	}
}

func TestTrainMicroBatchesLosses(t *testing.T) {
	// cross-entropy: an MLP classifier trained by the call gets better on its data
	tr := newRTTrainer(t, 1, 3)
	var xs []float32
	var ys []int64
	for i := 0; i < 60; i++ {
		c := i % 3
		for k := 0; k < 5; k++ {
			v := 0.1 * float32(math.Sin(float64(i*5+k)))
			if k == c {
				v++
			}
			xs = append(xs, v)
		}
		ys = append(ys, int64(c))
	}
	X, Y := must(NewTensor(xs, 60, 5)), must(NewTensor(ys, 60))
	defer X.Close()
	defer Y.Close()
	lo := DefaultDataLoaderOptions()
	lo.BatchSize = 6
	l := must(tr.ctx.NewDataLoader(X, Y, lo))
	defer l.Close()
	first := must(tr.ctx.TrainMicroBatches(tr.model, l, LossCrossEntropy, 10, 0))
	var last TrainResult
	for e := 0; e < 10; e++ {
		last = must(tr.ctx.TrainMicroBatches(tr.model, l, LossCrossEntropy, 10, 0))
	}
	if !(last.MeanLoss < first.MeanLoss*0.5) {
		t.Fatalf("the loss went from %v to %v", first.MeanLoss, last.MeanLoss)
	}

	// the causal LM loss on a token loader equals LMForward's; an inference copy of the LM
	// gives the model's logits
	ctx := newCtx(t, func(o *Options) { o.Device = DeviceCPU })
	lm := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	opt := must(ctx.NewSGD(lm, nil))
	ok(t, ctx.Prepare(lm, opt, nil, nil))
	var toks []int64
	for i := 0; i < 64; i++ {
		toks = append(toks, int64(i*7%50))
	}
	tokens := must(NewTensor(toks, 64))
	defer tokens.Close()
	ld := DefaultLMDataOptions()
	ld.BlockSize = 8
	dl := DefaultDataLoaderOptions()
	dl.BatchSize = 2
	lml := must(ctx.NewLMDataLoader(tokens, nil, ld, dl))
	defer lml.Close()
	ids, labels := must2(lml.NextBatch())
	if labels == nil {
		labels = ids
	}
	out := must(lm.LMForward(ids, nil, labels))
	want := must(out.Loss.Item())
	ok(t, lml.SetEpoch(0))
	inf := must(ctx.Inference(lm, nil))
	defer inf.Close()
	r := must(ctx.TrainMicroBatches(lm, lml, LossCausalLM, 1, 0))
	if r.MicroBatches != 1 || r.OptimizerSteps != 1 || math.Abs(r.MeanLoss-want) > 1e-6*math.Abs(want) {
		t.Fatalf("%+v, LMForward's loss %v", r, want)
	}
	if v := must(ctx.PublishWeights(lm)); v != 2 {
		t.Fatal(v)
	}
	ok(t, lm.SetTraining(false))
	logits := must(lm.Forward(ids))
	defer logits.Close()
	got := must(inf.Run(ids))
	defer got.Close()
	if !sameBits(must(ToSlice[float32](logits)), must(ToSlice[float32](got))) {
		t.Fatal("the LM's copy differs from the LM")
	}
	_, err := ctx.TrainMicroBatches(lm, lml, LossCausalLM, 1, 0)
	wantErr(t, err, ErrInvalidState, "evaluation mode")
}

func TestTrainMicroBatchesErrors(t *testing.T) {
	d := newRTData(8)
	tr := newRTTrainer(t, 1, 3)
	l := d.loader(t, tr.ctx, 4, true, true)
	refused := func(sentinel error, loss Loss, n int32, secs float64, says string, loader *DataLoader, ctx *Context, model *Model) {
		t.Helper()
		if loader == nil {
			loader = l
		}
		if ctx == nil {
			ctx = tr.ctx
		}
		if model == nil {
			model = tr.model
		}
		r, err := ctx.TrainMicroBatches(model, loader, loss, n, secs)
		e := wantErr(t, err, sentinel, says)
		if e.Op != "accel_train_micro_batches" || r != (TrainResult{}) {
			t.Fatalf("%+v %+v", e, r)
		}
	}
	refused(ErrInvalidArgument, LossMSE, 0, 0, "max_micro_batches must be >= 1, got 0", nil, nil, nil)
	refused(ErrInvalidArgument, LossMSE, 1, -1, "max_seconds must be finite and >= 0, got -1", nil, nil, nil)
	refused(ErrInvalidArgument, LossMSE, 1, math.NaN(), "max_seconds must be finite", nil, nil, nil)
	refused(ErrInvalidArgument, LossMSE, 1, math.Inf(1), "max_seconds must be finite", nil, nil, nil)
	refused(ErrInvalidArgument, Loss(9), 1, 0, "loss must be an accel_loss (0..2), got 9", nil, nil, nil)
	refused(ErrInvalidArgument, Loss(-1), 1, 0, "loss must be an accel_loss (0..2), got -1", nil, nil, nil)
	refused(ErrInvalidArgument, LossCausalLM, 1, 0, "ACCEL_LOSS_CAUSAL_LM needs a causal LM", nil, nil, nil)
	refused(ErrInvalidArgument, LossMSE, 1, 0, "the loader has no targets", d.loader(t, tr.ctx, 4, false, true), nil, nil)
	ok(t, tr.model.SetTraining(false))
	refused(ErrInvalidState, LossMSE, 1, 0, "evaluation mode", nil, nil, nil)
	ok(t, tr.model.SetTraining(true))

	// a model the context has not prepared; a loader of another context; nil and closed objects
	fresh := newCtx(t, func(o *Options) { o.Device = DeviceCPU })
	m := must(fresh.NewMLP(DefaultMLPOptions(5, 3)))
	defer m.Close()
	fl := d.loader(t, fresh, 4, true, true)
	refused(ErrInvalidState, LossMSE, 1, 0, "accel_prepare has not bound this model", fl, fresh, m)
	refused(ErrInvalidArgument, LossMSE, 1, 0, "belongs to another context", fl, nil, nil)
	_, err := tr.ctx.TrainMicroBatches(nil, l, LossMSE, 1, 0)
	wantErr(t, err, ErrInvalidArgument, "model is nil")
	_, err = tr.ctx.TrainMicroBatches(tr.model, nil, LossMSE, 1, 0)
	wantErr(t, err, ErrInvalidArgument, "data loader is nil")
	closedLoader := d.loader(t, tr.ctx, 4, true, true)
	ok(t, closedLoader.Close())
	_, err = tr.ctx.TrainMicroBatches(tr.model, closedLoader, LossMSE, 1, 0)
	wantErr(t, err, ErrClosed, "accel_train_micro_batches")
	ok(t, fresh.Close())
	_, err = fresh.TrainMicroBatches(m, fl, LossMSE, 1, 0)
	wantErr(t, err, ErrClosed, "context")

	// a NaN loss in the second micro-batch: the first stays trained
	bad := newRTData(8)
	bad.ys[3*5] = float32(math.NaN()) // row 5: the second batch of 4, in order
	nl := bad.loader(t, tr.ctx, 4, true, false)
	before := allWeights(tr.model)
	refused(ErrNonFinite, LossMSE, 2, 0, "", nl, nil, nil)
	if sameBits(allWeights(tr.model), before) {
		t.Fatal("the first micro-batch was not trained")
	}
}
