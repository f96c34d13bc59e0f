// train_digits trains accel's MLP [64,128,64,10] (ReLU) on the UCI digits on 2 simulated
// ranks (accel_sim_run) with DDP, AdamW lr 6e-3 (3e-3 per rank, as the C example scales it), a cosine schedule with 5% warm-up, batch
// 32 per rank, 20 epochs, and prints the held-out accuracy on its last line:
//
//	go run ./examples/train_digits [--data PATH] [--epochs N]
package main

import (
	"flag"
	"fmt"
	"os"

	accel "github.com/accel-dev/accel/bindings/go"
	"github.com/accel-dev/accel/bindings/go/internal/digits"
)

// evaluate returns the accuracy of model on set: one forward in eval mode, argmax on the host.
func evaluate(model *accel.Model, set *digits.Set) (float64, error) {
	x, err := accel.NewTensor(set.X, int64(set.N), digits.Features)
	if err != nil {
		return 0, err
	}
	defer x.Close()
	if err := model.SetTraining(false); err != nil {
		return 0, err
	}
	defer model.SetTraining(true)
	logits, err := model.Forward(x)
	if err != nil {
		return 0, err
	}
	defer logits.Close()
	out, err := accel.ToSlice[float32](logits) // converted to float32 whatever the precision
	if err != nil {
		return 0, err
	}
	correct := 0
	for i := 0; i < set.N; i++ {
		row := out[i*digits.Classes : (i+1)*digits.Classes]
		best := 0
		for k := range row {
			if row[k] > row[best] {
				best = k
			}
		}
		if int64(best) == set.Y[i] {
			correct++
		}
	}
	return float64(correct) / float64(set.N), nil
}

func main() {
	data := flag.String("data", digits.DefaultPath(), "digits.csv.gz")
	epochs := flag.Int("epochs", 20, "epochs")
	flag.Parse()

	all, err := digits.Load(*data)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	train, test := digits.Split(all, 0.2, 42)
	fmt.Printf("digits: %d training samples, %d held out\n", train.N, test.N)
	xs, err := accel.NewTensor(train.X, int64(train.N), digits.Features)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer xs.Close()
	ys, err := accel.NewTensor(train.Y, int64(train.N))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer ys.Close()

	opts := accel.DefaultOptions()
	opts.Seed = 42
	opts.Strategy = accel.StrategyDDP
	sim := accel.DefaultSimOptions()
	sim.WorldSize = 2
	var accuracy float64

	rankFn := func(ctx *accel.Context) error {
		model, err := ctx.NewMLP(accel.DefaultMLPOptions(digits.Features, 128, 64, digits.Classes))
		if err != nil {
			return err
		}
		defer model.Close()
		ao := accel.DefaultAdamWOptions()
		ao.LR = 6e-3 // 3e-3 per rank, as the C example scales it
		opt, err := ctx.NewAdamW(model, &ao)
		if err != nil {
			return err
		}
		defer opt.Close()
		lo := accel.DefaultDataLoaderOptions()
		lo.BatchSize, lo.Shuffle, lo.Seed = 32, true, 42
		loader, err := ctx.NewDataLoader(xs, ys, lo)
		if err != nil {
			return err
		}
		defer loader.Close()
		if err := ctx.Prepare(nil, nil, nil, loader); err != nil { // shards the batches
			return err
		}
		batches, err := loader.NumBatches() // this rank's share
		if err != nil {
			return err
		}
		so := accel.DefaultSchedulerOptions()
		so.Kind = accel.ScheduleCosine
		so.TotalSteps = int64(*epochs) * batches
		so.WarmupSteps = so.TotalSteps / 20
		sched, err := ctx.NewScheduler(opt, so)
		if err != nil {
			return err
		}
		defer sched.Close()
		if err := ctx.Prepare(model, opt, sched, nil); err != nil {
			return err
		}
		var last accel.StepResult
		for epoch := 0; epoch < *epochs; epoch++ {
			lossSum, n := 0.0, 0
			err := loader.Each(func(x, y *accel.Tensor) error {
				logits, err := model.Forward(x)
				if err != nil {
					return err
				}
				defer logits.Close()
				loss, err := ctx.CrossEntropy(logits, y)
				if err != nil {
					return err
				}
				defer loss.Close()
				l, err := loss.Item()
				if err != nil {
					return err
				}
				if err := ctx.Backward(loss); err != nil {
					return err
				}
				if last, err = ctx.Step(); err != nil {
					return err
				}
				lossSum += l
				n++
				return nil
			})
			if err != nil {
				return err
			}
			// the mean loss over both ranks
			mine, err := accel.NewTensor([]float64{lossSum / float64(n)}, 1)
			if err != nil {
				return err
			}
			mean, err := ctx.Reduce(mine, accel.ReduceMean)
			mine.Close()
			if err != nil {
				return err
			}
			global, err := mean.Item()
			mean.Close()
			if err != nil {
				return err
			}
			lr, err := opt.LR()
			if err != nil {
				return err
			}
			acc, err := evaluate(model, test)
			if err != nil {
				return err
			}
			if err := ctx.Print(fmt.Sprintf("epoch %2d/%d  loss %.4f  lr %.2e  steps %d  test-accuracy %.4f",
				epoch+1, *epochs, global, lr, last.OptimizerSteps, acc)); err != nil {
				return err
			}
			if main, _ := ctx.IsMainProcess(); main {
				accuracy = acc
			}
		}
		return nil
	}

	fmt.Printf("training on %d simulated GPUs (%s), strategy ddp, precision fp32\n", sim.WorldSize, sim.Topology)
	rep, err := accel.SimRun(&sim, &opts, rankFn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "training failed:", err)
		os.Exit(1)
	}
	defer rep.Close()
	for r := 0; r < int(sim.WorldSize); r++ {
		rr, err := rep.Rank(r)
		if err == nil {
			fmt.Printf("rank %d peak device memory %.1f KiB\n", r, float64(rr.PeakBytes)/1024)
		}
	}
	if ps, err := rep.PredictedSeconds(); err == nil {
		fmt.Printf("predicted on %s: %.3f ms for the run\n", sim.Topology, ps*1e3)
	}
	fmt.Printf("accuracy: %.4f\n", accuracy)
}
