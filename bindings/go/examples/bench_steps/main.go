// bench_steps measures the binding's per-step overhead with the loop every accel binding
// (and C) runs: one process, CPU, fp32, 1 thread, seed 42; all 1,797 digits; MLP
// [64,128,64,10]; AdamW lr 3e-3; loader batch 32, shuffle, seed 42. One step = next batch
// (again at an epoch's end) -> forward -> cross-entropy -> backward -> step -> release the
// four tensors. Prints one JSON line: {"lang":"go","steps":N,"us_per_step":X}.
//
// The training goroutine is pinned to its OS thread (runtime.LockOSThread), as the README
// advises for a training loop: the C++ runtime's and the C allocator's per-thread caches
// stay warm. Unpinned, the goroutine moves between threads between cgo calls and a step
// took 3-8% longer on the development machine (-unpinned measures that).
//
//	go run ./examples/bench_steps [--data PATH] [--warmup 200] [--steps 2000] [-unpinned]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	accel "github.com/accel-dev/accel/bindings/go"
	"github.com/accel-dev/accel/bindings/go/internal/digits"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench_steps:", err)
	os.Exit(1)
}

func main() {
	data := flag.String("data", digits.DefaultPath(), "digits.csv.gz")
	warmup := flag.Int("warmup", 200, "untimed steps")
	steps := flag.Int("steps", 2000, "timed steps")
	unpinned := flag.Bool("unpinned", false, "do not pin the goroutine to its OS thread")
	flag.Parse()
	if !*unpinned {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}

	all, err := digits.Load(*data)
	if err != nil {
		fail(err)
	}
	opts := accel.DefaultOptions()
	opts.NumThreads = 1
	opts.Seed = 42
	ctx, err := accel.Init(&opts)
	if err != nil {
		fail(err)
	}
	defer ctx.Close()
	xs, err := accel.NewTensor(all.X, int64(all.N), digits.Features)
	if err != nil {
		fail(err)
	}
	ys, err := accel.NewTensor(all.Y, int64(all.N))
	if err != nil {
		fail(err)
	}
	model, err := ctx.NewMLP(accel.DefaultMLPOptions(digits.Features, 128, 64, digits.Classes))
	if err != nil {
		fail(err)
	}
	defer model.Close()
	ao := accel.DefaultAdamWOptions()
	ao.LR = 3e-3
	opt, err := ctx.NewAdamW(model, &ao)
	if err != nil {
		fail(err)
	}
	defer opt.Close()
	lo := accel.DefaultDataLoaderOptions()
	lo.BatchSize, lo.Shuffle, lo.Seed, lo.DropLast = 32, true, 42, false
	loader, err := ctx.NewDataLoader(xs, ys, lo)
	if err != nil {
		fail(err)
	}
	defer loader.Close()
	xs.Close()
	ys.Close()
	if err := ctx.Prepare(model, opt, nil, loader); err != nil {
		fail(err)
	}

	step := func() error {
		x, y, err := loader.NextBatch()
		if err != nil {
			return err
		}
		if x == nil { // end of the epoch: the next call starts the next one
			if x, y, err = loader.NextBatch(); err != nil {
				return err
			}
		}
		logits, err := model.Forward(x)
		if err != nil {
			return err
		}
		loss, err := ctx.CrossEntropy(logits, y)
		if err != nil {
			return err
		}
		if err := ctx.Backward(loss); err != nil {
			return err
		}
		if _, err := ctx.Step(); err != nil {
			return err
		}
		x.Close()
		y.Close()
		logits.Close()
		loss.Close()
		return nil
	}
	for i := 0; i < *warmup; i++ {
		if err := step(); err != nil {
			fail(err)
		}
	}
	start := time.Now() // monotonic
	for i := 0; i < *steps; i++ {
		if err := step(); err != nil {
			fail(err)
		}
	}
	elapsed := time.Since(start)
	us := 0.0
	if *steps > 0 {
		us = float64(elapsed.Nanoseconds()) / 1e3 / float64(*steps)
	}
	line, _ := json.Marshal(struct {
		Lang      string  `json:"lang"`
		Steps     int     `json:"steps"`
		UsPerStep float64 `json:"us_per_step"`
	}{"go", *steps, float64(int64(us*10+0.5)) / 10})
	fmt.Println(string(line))
}
