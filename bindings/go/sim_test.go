package accel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func simOpts(n int32) *SimOptions {
	s := DefaultSimOptions()
	s.WorldSize = n
	s.TimeoutSeconds = 20
	s.EngineThreads = 1
	return &s
}

func ctxOpts() *Options {
	o := DefaultOptions()
	o.Seed = 42
	o.NumThreads = 1
	return &o
}

func TestSimCollectives(t *testing.T) {
	const n = 3
	got := make([]string, n)
	rep, err := SimRun(simOpts(n), ctxOpts(), func(ctx *Context) error {
		r := must(ctx.ProcessIndex())
		if np := must(ctx.NumProcesses()); np != n {
			return fmt.Errorf("num_processes %d", np)
		}
		main := must(ctx.IsMainProcess())
		lmain := must(ctx.IsLocalMainProcess())
		local := must(ctx.LocalProcessIndex())
		if main != (r == 0) || lmain != (local == 0) || local != r {
			return fmt.Errorf("main %v local main %v local %d", main, lmain, local)
		}
		x := must(NewTensor([]float32{float32(r + 1), float32(10 * (r + 1))}, 2))
		defer x.Close()
		var line []string
		for _, op := range []ReduceOp{ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd} {
			y := must(ctx.Reduce(x, op))
			v := must(ToSlice[float32](y))
			y.Close()
			line = append(line, fmt.Sprint(v))
		}
		b := must(NewTensor([]int64{int64(100 + r)}, 1))
		defer b.Close()
		bc := must(ctx.Broadcast(b, 1))
		line = append(line, fmt.Sprint(must(ToSlice[int64](bc))))
		bc.Close()
		g := must(ctx.Gather(b))
		line = append(line, fmt.Sprint(must(ToSlice[int64](g))))
		g.Close()
		gm := must(ctx.GatherForMetrics(b)) // not a loader batch: gathered whole
		line = append(line, fmt.Sprint(must(ToSlice[int64](gm))))
		gm.Close()
		// rank r has r+1 elements; padded to 3 with -1
		vals := make([]float64, r+1)
		for i := range vals {
			vals[i] = float64(r)
		}
		p := must(NewTensor(vals, int64(r+1)))
		defer p.Close()
		pd := must(ctx.PadAcrossProcesses(p, 0, -1, false))
		line = append(line, fmt.Sprint(must(ToSlice[float64](pd))))
		pd.Close()
		pf := must(ctx.PadAcrossProcesses(p, -1, 9, true))
		line = append(line, fmt.Sprint(must(ToSlice[float64](pf))))
		pf.Close()
		if err := ctx.Barrier(); err != nil {
			return err
		}
		if _, err := ctx.Broadcast(b, 7); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("broadcast root 7: %v", err)
		}
		if err := ctx.ChargeCompute(0.25, "fake forward"); err != nil {
			return err
		}
		if err := ctx.ChargeCompute(-1, ""); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("charge -1: %v", err)
		}
		chk(ctx.Print("printed once, by rank 0"))
		got[r] = strings.Join(line, " ")
		return nil
	})
	ok(t, err)
	defer rep.Close()
	want := []string{
		"[6 60] [2 20] [3 30] [1 10] [6 6000] [101] [100 101 102] [100 101 102] [0 -1 -1] [9 9 0]",
		"[6 60] [2 20] [3 30] [1 10] [6 6000] [101] [100 101 102] [100 101 102] [1 1 -1] [9 1 1]",
		"[6 60] [2 20] [3 30] [1 10] [6 6000] [101] [100 101 102] [100 101 102] [2 2 2] [2 2 2]",
	}
	for r := range want {
		if got[r] != want[r] {
			t.Errorf("rank %d:\n got %s\nwant %s", r, got[r], want[r])
		}
	}
	if ws := must(rep.WorldSize()); ws != n {
		t.Fatal(ws)
	}
	for r := 0; r < n; r++ {
		rr := must(rep.Rank(r))
		if rr.Status != StatusOK || rr.Error != "" || rr.PeakBytes == 0 {
			t.Fatalf("rank %d %+v", r, rr)
		}
	}
	if ps := must(rep.PredictedSeconds()); ps < 0.25 || ps > 1 {
		t.Fatal("predicted", ps)
	}
	_, err = rep.Rank(n)
	wantErr(t, err, ErrInvalidArgument, "rank")
	rep.Close()
	_, err = rep.WorldSize()
	wantErr(t, err, ErrClosed, "closed")
}

func TestSimDDPTrainsSameWeights(t *testing.T) {
	o := ctxOpts()
	o.Strategy = StrategyDDP
	w := make([][]float32, 2)
	rep, err := SimRun(simOpts(2), o, func(ctx *Context) error {
		chk(ctx.SetSeed(uint64(ctx.mustRank()), true)) // different initial weights per rank...
		s := newSetup(t, ctx, nil, 2)                  // ...DDP broadcasts rank 0's at prepare
		for i := 0; i < 3; i++ {
			s.trainStep(t)
		}
		p := must(s.model.Parameter(0))
		w[ctx.mustRank()] = must(ToSlice[float32](p))
		p.Close()
		s.loader.Close()
		s.sched.Close()
		s.opt.Close()
		s.model.Close()
		return nil
	})
	ok(t, err)
	rep.Close()
	for i := range w[0] {
		if w[0][i] != w[1][i] {
			t.Fatalf("weights differ at %d: %v %v", i, w[0][i], w[1][i])
		}
	}
}

func (c *Context) mustRank() int { return must(c.ProcessIndex()) }

func TestSimRankFailures(t *testing.T) {
	// rank 1 panics; rank 0 waits in a barrier and fails because its peer is gone
	var kept *Context
	rep, err := SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		if ctx.mustRank() == 1 {
			kept = ctx
			panic("boom at rank 1")
		}
		return ctx.Barrier()
	})
	if rep == nil {
		t.Fatal("no report", err)
	}
	defer rep.Close()
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 {
		t.Fatalf("%v", err)
	}
	e := wantErr(t, err, ErrInternal, "boom at rank 1")
	if !strings.Contains(e.Message, "panic") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatal(err)
	}
	r1 := must(rep.Rank(1))
	if r1.Status != StatusInternal || !strings.Contains(r1.Error, "boom at rank 1") {
		t.Fatalf("%+v", r1)
	}
	if r0 := must(rep.Rank(0)); r0.Status == StatusOK {
		t.Fatalf("rank 0 %+v", r0)
	}
	// the borrowed context is invalid after its function
	_, err = kept.ProcessIndex()
	wantErr(t, err, ErrClosed, "context")
	ok(t, kept.Close())

	// a returned error: plain, and wrapping an accel error (status kept)
	rep2, err := SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		if ctx.mustRank() == 0 {
			return errors.New("rank 0 gives up")
		}
		return nil
	})
	rep2.Close()
	errors.As(err, &re)
	if re == nil || re.Rank != 0 {
		t.Fatal(err)
	}
	wantErr(t, err, ErrInternal, "rank 0 gives up")
	_, err = SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		if ctx.mustRank() == 1 {
			_, err := ctx.Step() // before prepare
			return fmt.Errorf("training: %w", err)
		}
		return nil
	})
	errors.As(err, &re)
	if re.Rank != 1 {
		t.Fatal(err)
	}
	wantErr(t, err, ErrInvalidState, "accel_step")

	// invalid options fail before any rank runs
	ran := false
	rep3, err := SimRun(simOpts(0), nil, func(ctx *Context) error { ran = true; return nil })
	wantErr(t, err, ErrInvalidArgument, "world_size")
	if rep3 != nil || ran {
		t.Fatal("ran with invalid options")
	}
	so := simOpts(2)
	so.DeviceMemory = "0"
	_, err = SimRun(so, nil, func(ctx *Context) error { return nil })
	wantErr(t, err, ErrInvalidArgument, "device_memory")
	bad := ctxOpts()
	bad.Device = DeviceCUDA
	_, err = SimRun(simOpts(2), bad, func(ctx *Context) error { return nil })
	wantErr(t, err, ErrUnsupported, "")
	_, err = SimRun(nil, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "fn")
	// a memory budget exceeded fails that rank with OUT_OF_MEMORY
	so = simOpts(1)
	so.DeviceMemory = "1KiB"
	rep4, err := SimRun(so, ctxOpts(), func(ctx *Context) error {
		_, err := ctx.NewMLP(DefaultMLPOptions(64, 256, 10))
		return err
	})
	if rep4 != nil {
		rep4.Close()
	}
	wantErr(t, err, ErrOutOfMemory, "")
}

func TestCheckpoints(t *testing.T) {
	ctx := newCtx(t, nil)
	s := newSetup(t, ctx, nil, 2)
	s.trainStep(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	ok(t, ctx.SaveState(ck))
	if lc := must(ctx.LastCheckpoint()); lc != ck {
		t.Fatal(lc)
	}
	if _, err := os.Stat(filepath.Join(ck, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	p := must(s.model.Parameter(0))
	saved := must(ToSlice[float32](p))
	p.Close()
	s.trainStep(t)
	s.trainStep(t)
	// a user's file is never overwritten
	user := filepath.Join(dir, "notes.txt")
	ok(t, os.WriteFile(user, []byte("mine"), 0o644))
	wantErr(t, ctx.SaveState(user), ErrInvalidArgument, "accel_save_state")
	if b, _ := os.ReadFile(user); string(b) != "mine" {
		t.Fatal("user file changed")
	}
	other := filepath.Join(dir, "other")
	ok(t, os.MkdirAll(other, 0o755))
	ok(t, os.WriteFile(filepath.Join(other, "x"), nil, 0o644))
	wantErr(t, ctx.SaveState(other), ErrInvalidArgument, "accel_save_state")
	// load restores the weights
	ok(t, ctx.LoadState(ck))
	p = must(s.model.Parameter(0))
	loaded := must(ToSlice[float32](p))
	p.Close()
	for i := range saved {
		if saved[i] != loaded[i] {
			t.Fatal("weights not restored")
		}
	}
	wantErr(t, ctx.LoadState(filepath.Join(dir, "missing")), ErrIO, "accel_load_state")
	// projects: SaveState("") writes the next checkpoint_N
	s.trainStep(t)
	proj := filepath.Join(dir, "proj")
	po := DefaultProjectOptions(proj)
	po.TotalLimit = 1
	ok(t, ctx.SetProject(po))
	ok(t, ctx.SaveState(""))
	s.trainStep(t)
	ok(t, ctx.SaveState(""))
	entries, err := os.ReadDir(filepath.Join(proj, "checkpoints"))
	ok(t, err)
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "checkpoint_") {
		t.Fatalf("%v", entries)
	}
	ok(t, ctx.LoadState(""))
	if lc := must(ctx.LastCheckpoint()); !strings.HasPrefix(lc, filepath.Join(proj, "checkpoints")) {
		t.Fatal(lc)
	}
	wantErr(t, ctx.SetProject(ProjectOptions{}), ErrInvalidArgument, "project_dir")
}

// TestCgocheck2 runs the package's other tests again in a child process with
// GODEBUG=cgocheck=2, which checks every pointer the binding passes to C.
func TestCgocheck2(t *testing.T) {
	if os.Getenv("ACCEL_GO_CGOCHECK_CHILD") != "" {
		t.Skip("child")
	}
	if testing.Short() {
		t.Skip("short")
	}
	if strings.Contains(os.Getenv("GODEBUG"), "cgocheck=2") {
		t.Skip("this run checks with GODEBUG=cgocheck=2 already")
	}
	if raceEnabled {
		t.Skip("under -race: the README's command runs GODEBUG=cgocheck=2 go test separately")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^Test[^C]|^TestC[^g]", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=cgocheck=2", "ACCEL_GO_CGOCHECK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("cgocheck=2 run failed: %v\n%s", err, out)
	}
}

// runChild runs the test named name in a child process with ACCEL_GO_CHILD=name and
// returns its combined output and exit error.
func runChild(t *testing.T, name string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), "ACCEL_GO_CHILD="+name), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSimGoexit: runtime.Goexit (t.Fatal) inside a rank function cannot be survived (a
// goroutine C called cannot exit); the process must stop with a message naming the cause
// and the rank, not hang and not with the runtime's bare "internal lockOSThread error".
func TestSimGoexit(t *testing.T) {
	if os.Getenv("ACCEL_GO_CHILD") == "TestSimGoexit" {
		SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
			if ctx.mustRank() == 1 {
				t.Fatal("t.Fatal inside a rank") // runtime.Goexit
			}
			return ctx.Barrier()
		})
		t.Log("SimRun returned")
		return
	}
	out, err := runChild(t, "TestSimGoexit")
	if err == nil || strings.Contains(out, "SimRun returned") {
		t.Fatalf("the child survived a Goexit in a rank: %v\n%s", err, out)
	}
	if !strings.Contains(out, "the function of rank 1 called runtime.Goexit") {
		t.Fatalf("no clear message:\n%s", out)
	}
}

// TestSimGatherForMetrics: 2 ranks, a dataset of 5, batch 2, even_batches: the last round
// is padded with wrapped-around samples, which GatherForMetrics drops, so every sample is
// counted exactly once; Gather keeps the duplicates.
func TestSimGatherForMetrics(t *testing.T) {
	var metrics, whole [2][]float32
	rep, err := SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		r := ctx.mustRank()
		x := must(NewTensor([]float32{0, 1, 2, 3, 4}, 5, 1))
		defer x.Close()
		lo := DefaultDataLoaderOptions()
		lo.BatchSize = 2
		l := must(ctx.NewDataLoader(x, nil, lo))
		defer l.Close()
		chk(ctx.Prepare(nil, nil, nil, l))
		return l.Each(func(b, _ *Tensor) error {
			gm := must(ctx.GatherForMetrics(b))
			metrics[r] = append(metrics[r], must(ToSlice[float32](gm))...)
			gm.Close()
			g := must(ctx.Gather(b))
			whole[r] = append(whole[r], must(ToSlice[float32](g))...)
			g.Close()
			return nil
		})
	})
	ok(t, err)
	rep.Close()
	for r := 0; r < 2; r++ {
		if fmt.Sprint(metrics[r]) != "[0 1 2 3 4]" {
			t.Errorf("rank %d: gather_for_metrics gave %v, want every sample once", r, metrics[r])
		}
		if len(whole[r]) != 8 {
			t.Errorf("rank %d: gather gave %v, want 8 rows (duplicates kept)", r, whole[r])
		}
	}
}

// TestSimIterableLoader: 2 ranks, a dataset of 5, batch 2, Iterable: the stream is sharded
// as Accelerate's IterableDatasetShard, in rounds of 4 samples with rank r taking slice r; the
// last, partial round [4] is completed with the first round's samples ([4 0 1 2]). Shuffle
// with Iterable is refused.
func TestSimIterableLoader(t *testing.T) {
	var batches [2][][]int64
	var mismatch [2]string
	var shuffleErr [2]error
	rep, err := SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		r := ctx.mustRank()
		x := must(NewTensor([]float32{0, 1, 2, 3, 4}, 5, 1))
		defer x.Close()
		y := must(NewTensor([]int64{0, 1, 2, 3, 4}, 5))
		defer y.Close()
		lo := DefaultDataLoaderOptions()
		lo.BatchSize = 2
		lo.Iterable = true
		l := must(ctx.NewDataLoader(x, y, lo))
		defer l.Close()
		chk(ctx.Prepare(nil, nil, nil, l))
		chk(l.Each(func(b, tg *Tensor) error {
			xs, ys := must(ToSlice[float32](b)), must(ToSlice[int64](tg))
			if fmt.Sprint(xs) != fmt.Sprint(ys) {
				mismatch[r] = fmt.Sprintf("inputs %v, targets %v", xs, ys)
			}
			batches[r] = append(batches[r], ys)
			return nil
		}))
		lo.Shuffle = true
		if bad, err := ctx.NewDataLoader(x, y, lo); err == nil {
			bad.Close()
		} else {
			shuffleErr[r] = err
		}
		return nil
	})
	ok(t, err)
	rep.Close()
	want := [2]string{"[[0 1] [4 0]]", "[[2 3] [1 2]]"}
	for r := 0; r < 2; r++ {
		if got := fmt.Sprint(batches[r]); got != want[r] {
			t.Errorf("rank %d: batches %s, want %s", r, got, want[r])
		}
		if mismatch[r] != "" {
			t.Errorf("rank %d: %s", r, mismatch[r])
		}
		wantErr(t, shuffleErr[r], ErrInvalidArgument, "shuffle must be 0 for an iterable loader")
	}
}

// trainWithOffload trains an MLP with AdamW on 2 simulated DDP ranks (4 steps of 8 samples a
// rank) and returns the run's report, rank 0's weights before and after, and the run's error.
func trainWithOffload(offload Offload, hostMemory string) (*SimReport, [][]float32, [][]float32, error) {
	so := simOpts(2)
	so.HostMemory = hostMemory
	o := ctxOpts()
	o.Strategy = StrategyDDP
	o.Offload = offload
	var before, after [][]float32
	rep, err := SimRun(so, o, func(ctx *Context) error {
		x := make([]float32, 64*8)
		y := make([]int64, 64)
		for i := range x {
			x[i] = float32(i*37%101) / 101
		}
		for i := range y {
			y[i] = int64(i * 7 % 3)
		}
		xs := must(NewTensor(x, 64, 8))
		defer xs.Close()
		ys := must(NewTensor(y, 64))
		defer ys.Close()
		m := must(ctx.NewMLP(DefaultMLPOptions(8, 16, 3)))
		defer m.Close()
		ao := DefaultAdamWOptions()
		ao.LR = 1e-2
		opt := must(ctx.NewAdamW(m, &ao))
		defer opt.Close()
		lo := DefaultDataLoaderOptions()
		lo.BatchSize, lo.Shuffle, lo.Seed = 8, true, 3
		l := must(ctx.NewDataLoader(xs, ys, lo))
		defer l.Close()
		if err := ctx.Prepare(m, opt, nil, l); err != nil {
			return err
		}
		params := func() [][]float32 {
			n, _ := must2(m.NumParameters())
			out := make([][]float32, n)
			for i := range out {
				p := must(m.Parameter(i))
				out[i] = must(ToSlice[float32](p))
				p.Close()
			}
			return out
		}
		first := params()
		for l.Next() {
			xb, yb := l.Batch()
			logits := must(m.Forward(xb))
			loss := must(ctx.CrossEntropy(logits, yb))
			logits.Close()
			if err := ctx.Backward(loss); err != nil {
				loss.Close()
				return err
			}
			loss.Close()
			if _, err := ctx.Step(); err != nil {
				return err
			}
		}
		if err := l.Err(); err != nil {
			return err
		}
		if ctx.mustRank() == 0 {
			before, after = first, params()
		}
		return nil
	})
	return rep, before, after, err
}

func TestSimOffloadSameWeights(t *testing.T) {
	off, before, wOff, err := trainWithOffload(OffloadOptimizer, "")
	ok(t, err)
	defer off.Close()
	on, _, wOn, err := trainWithOffload(OffloadNone, "")
	ok(t, err)
	defer on.Close()
	if len(wOff) != 4 || len(wOn) != 4 {
		t.Fatalf("%d %d parameter tensors", len(wOff), len(wOn))
	}
	for i := range wOff {
		moved := false
		for j := range wOff[i] {
			if math.Float32bits(wOff[i][j]) != math.Float32bits(wOn[i][j]) {
				t.Fatalf("parameter %d differs at %d: %v (offload) %v (none)", i, j, wOff[i][j], wOn[i][j])
			}
			moved = moved || wOff[i][j] != before[i][j]
		}
		if !moved {
			t.Fatalf("parameter %d did not move", i)
		}
	}
	for r := 0; r < 2; r++ {
		ro := must(off.Rank(r))
		if ro.Status != StatusOK || ro.PeakBytes == 0 || ro.HostPeakBytes == 0 || ro.HostTransferBytes == 0 ||
			ro.HostTransferSeconds <= 0 {
			t.Fatalf("offload rank %d: %+v", r, ro)
		}
		rn := must(on.Rank(r))
		if rn.Status != StatusOK || rn.PeakBytes == 0 || rn.HostPeakBytes != 0 || rn.HostTransferBytes != 0 ||
			rn.HostTransferSeconds != 0 {
			t.Fatalf("no-offload rank %d: %+v", r, rn)
		}
	}
	// the transfers are charged to the predicted time
	if must(off.PredictedSeconds()) <= must(on.PredictedSeconds()) {
		t.Fatal("offload's transfers are not in the predicted time")
	}
}

func TestSimOffloadHostMemory(t *testing.T) {
	rep, _, _, err := trainWithOffload(OffloadOptimizer, "1KiB")
	if rep == nil {
		t.Fatal("no report", err)
	}
	defer rep.Close()
	e := wantErr(t, err, ErrOutOfMemory, "host")
	var re *RankError
	if !errors.As(err, &re) {
		t.Fatalf("%v", err)
	}
	if rr := must(rep.Rank(re.Rank)); rr.Status != StatusOutOfMemory || !strings.Contains(rr.Error, "host") {
		t.Fatalf("%+v (%v)", rr, e)
	}
	// without offload nothing lives in host memory: the same budget is never reached
	rep2, _, _, err := trainWithOffload(OffloadNone, "1KiB")
	ok(t, err)
	defer rep2.Close()
	for r := 0; r < 2; r++ {
		if rr := must(rep2.Rank(r)); rr.HostPeakBytes != 0 {
			t.Fatalf("%+v", rr)
		}
	}
	// a budget as DeviceMemory's: "0" and a NUL byte are refused before any rank runs
	so := simOpts(2)
	so.HostMemory = "0"
	rep3, err := SimRun(so, ctxOpts(), func(ctx *Context) error { return nil })
	wantErr(t, err, ErrInvalidArgument, "host_memory")
	if rep3 != nil {
		t.Fatal("a report for invalid options")
	}
	so.HostMemory = "1Gi\x00B"
	_, err = SimRun(so, ctxOpts(), func(ctx *Context) error { return nil })
	wantErr(t, err, ErrInvalidArgument, "HostMemory")
}

func TestSimOffloadRefusals(t *testing.T) {
	// an offload value that is no accel_offload: refused by Init and by SimRun before any rank runs
	for _, bad := range []Offload{3, -1, 7} {
		o := ctxOpts()
		o.Device = DeviceCPU
		o.Offload = bad
		ctx, err := Init(o)
		wantErr(t, err, ErrInvalidArgument, "offload")
		if ctx != nil {
			t.Fatal("a context with an invalid offload")
		}
		ran := false
		rep, err := SimRun(simOpts(2), o, func(ctx *Context) error { ran = true; return nil })
		wantErr(t, err, ErrInvalidArgument, "offload")
		if rep != nil || ran {
			t.Fatal("ran with an invalid offload")
		}
	}
	for _, good := range []Offload{OffloadNone, OffloadOptimizer} {
		o := ctxOpts()
		o.Device = DeviceCPU
		o.Offload = good
		ok(t, must(Init(o)).Close())
	}
	// parameter offload is ZeRO-3's
	po := ctxOpts()
	po.Device = DeviceCPU
	po.Offload = OffloadParameters
	_, err := Init(po)
	wantErr(t, err, ErrInvalidArgument, "only ZeRO-3")
	po.Strategy = StrategyZero3
	ok(t, must(Init(po)).Close())
	// a rank outside the report is refused by the host accessor
	o := ctxOpts()
	o.Offload = OffloadOptimizer
	rep, err := SimRun(simOpts(2), o, func(ctx *Context) error { return nil })
	ok(t, err)
	s := must(rep.acquire("test"))
	for _, r := range []int{2, -1, 1 << 31, 1 << 32} {
		_, err = rep.Rank(r)
		wantErr(t, err, ErrInvalidArgument, "rank")
		_, _, _, err = s.rankHost(r) // the host accessor itself, not only accel_sim_report_rank before it
		e := wantErr(t, err, ErrInvalidArgument, "rank")
		if r < 1<<31 && !strings.Contains(e.Message, fmt.Sprintf("accel_sim_report_rank_host: rank %d is not in this 2-rank report", r)) {
			t.Fatal(e.Message)
		}
	}
	s.release()
	rr := must(rep.Rank(1)) // no optimizer was made: nothing was offloaded
	if rr.HostPeakBytes != 0 || rr.HostTransferBytes != 0 || rr.HostTransferSeconds != 0 {
		t.Fatalf("%+v", rr)
	}
	rep.Close()
	_, err = rep.Rank(0)
	wantErr(t, err, ErrClosed, "closed")
}
