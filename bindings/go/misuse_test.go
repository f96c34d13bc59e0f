package accel

// Misuse a Go user can commit without unsafe: each must end in an error (or a re-panic in
// the caller's goroutine), never a crash, a hang or a data race. Run with -race and with
// GODEBUG=cgocheck=2 (the README's test command does both).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// anyErr accepts nil or an *Error (wrapped or not); anything else is a failure.
func anyErr(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if err != nil && !errors.As(err, &e) {
		t.Errorf("not an *accel.Error: %T %v", err, err)
	}
}

// TestConcurrentCallsOnOneContext: goroutines train, query and iterate on one Context and
// its objects at once. The calls are serialised: each succeeds or returns an *Error (an
// interleaving of two steps may be refused by the library), and the context still works.
func TestConcurrentCallsOnOneContext(t *testing.T) {
	ctx := newCtx(t, nil)
	s := newSetup(t, ctx, nil, 4)
	xs := make([]float32, 4*4)
	for i := range xs {
		xs[i] = float32(i%7) / 7
	}
	x := must(NewTensor(xs, 4, 4))
	defer x.Close()
	y := must(NewTensor([]int64{0, 1, 2, 0}, 4))
	defer y.Close()
	var wg sync.WaitGroup
	var stepped atomic.Int32
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				switch g {
				case 0, 1: // training steps
					logits, err := s.model.Forward(x)
					anyErr(t, err)
					if err != nil {
						continue
					}
					loss, err := ctx.CrossEntropy(logits, y)
					anyErr(t, err)
					if err == nil {
						anyErr(t, ctx.Backward(loss))
						r, err := ctx.Step()
						anyErr(t, err)
						if err == nil && r.Stepped {
							stepped.Add(1)
						}
					}
					logits.Close()
					loss.Close()
				case 2: // queries on the context and its objects
					_, err := s.opt.LR()
					anyErr(t, err)
					_, _, err = s.model.NumParameters()
					anyErr(t, err)
					p, err := s.model.Parameter(0)
					anyErr(t, err)
					p.Close()
					_, err = ctx.SyncGradients()
					anyErr(t, err)
				case 3: // the shared loader's iteration
					if !s.loader.Next() {
						anyErr(t, s.loader.Err())
						continue
					}
					bx, _ := s.loader.Batch()
					_, err := bx.Shape() // may have been closed by another Next meanwhile
					anyErr(t, err)
				}
			}
		}(g)
	}
	wg.Wait()
	t.Logf("%d steps", stepped.Load())
	if stepped.Load() == 0 {
		t.Fatal("no step succeeded")
	}
	// the context still trains
	logits := must(s.model.Forward(x))
	loss := must(ctx.CrossEntropy(logits, y))
	ok(t, ctx.Backward(loss))
	if _, err := ctx.Step(); err != nil {
		t.Fatal(err)
	}
	logits.Close()
	loss.Close()
}

// TestCloseRacesUse: Close racing uses and other Closes, on every type.
func TestCloseRacesUse(t *testing.T) {
	race := func(use func() error, close func() error) {
		t.Helper()
		var wg sync.WaitGroup
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					if g%3 == 0 && i == 5 {
						anyErr(t, close())
					}
					if err := use(); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("want nil or ErrClosed, got %v", err)
					}
				}
				anyErr(t, close())
			}(g)
		}
		wg.Wait()
		if err := use(); !errors.Is(err, ErrClosed) {
			t.Errorf("use after close: %v", err)
		}
	}
	for i := 0; i < 3; i++ {
		tn := must(NewTensor(make([]float32, 1024), 32, 32))
		race(func() error { _, err := ToSlice[float32](tn); return err }, tn.Close)

		ctx := newCtx(t, nil)
		m := must(ctx.NewMLP(DefaultMLPOptions(8, 4)))
		x := must(NewTensor(make([]float32, 16), 2, 8))
		race(func() error {
			out, err := m.Forward(x)
			out.Close()
			return err
		}, m.Close)
		race(func() error { _, err := ctx.DeviceKind(); return err }, ctx.Close)
		x.Close()

		rep := must(SimRun(simOpts(1), ctxOpts(), func(*Context) error { return nil }))
		race(func() error { _, err := rep.WorldSize(); return err }, rep.Close)

		tok := must(LoadTokenizer(tokFixture("gpt2")))
		race(func() error {
			if _, err := tok.Encode("hello world", nil); err != nil {
				return err
			}
			if _, err := tok.ApplyChat(ChatChatML, []ChatMessage{{"user", "hi"}}, true); err != nil {
				return err
			}
			_, err := tok.Decode([]int64{1, 2, 3}, true)
			return err
		}, tok.Close)

		// a causal-LM loader's batches and masks, racing its Close
		lctx := newCtx(t, nil)
		toks := must(NewTensor([]int64{5, 6, 7, 8, 9, 10, 11, 12, 13}, 9))
		lm := DefaultLMDataOptions()
		lm.BlockSize = 2
		ll := must(lctx.NewLMDataLoader(toks, nil, lm, DefaultDataLoaderOptions()))
		race(func() error {
			x, y, err := ll.NextBatch()
			x.Close()
			y.Close()
			if err != nil {
				return err
			}
			mk, err := ll.AttentionMask()
			mk.Close()
			if errors.Is(err, ErrInvalidState) && !errors.Is(err, ErrClosed) {
				return nil // another goroutine's NextBatch ended the epoch: no batch, as documented
			}
			return err
		}, ll.Close)
		toks.Close()

		tr := newRTTrainer(t, 1, 1)
		inf := must(tr.ctx.Inference(tr.model, nil))
		xi := must(NewTensor(tr.xs, 8, 5))
		race(func() error {
			out, err := inf.Run(xi)
			out.Close()
			if errors.Is(err, ErrInvalidState) && !errors.Is(err, ErrClosed) {
				return nil // another goroutine's run in progress: refused, as documented
			}
			return err
		}, inf.Close)
		xi.Close()
	}
}

// TestValueCopies: a copy of a handle type's value shares its state: no double free, and
// the copy keeps working when the original is dropped.
func TestValueCopies(t *testing.T) {
	tn := must(NewTensor([]float32{1, 2, 3}, 3))
	cp := *tn
	ok(t, cp.Close())
	ok(t, tn.Close())
	_, err := tn.Numel()
	wantErr(t, err, ErrClosed, "tensor")

	// the original dropped (its finalizer would have freed the handle under a copy)
	var kept Tensor
	func() { kept = *must(NewTensor([]float32{4, 5}, 2)) }()
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	if v := must(ToSlice[float32](&kept)); v[1] != 5 {
		t.Fatal(v)
	}
	ok(t, kept.Close())

	ctx := newCtx(t, nil)
	s := newSetup(t, ctx, nil, 4)
	cctx := *ctx
	cm, co, cl := *s.model, *s.opt, *s.loader
	must(cctx.DeviceKind())
	must(co.LR())
	ok(t, cm.Close())
	ok(t, s.model.Close())
	ok(t, co.Close())
	ok(t, cl.Close())
	ok(t, s.loader.Close())
	_, err = s.model.Forward()
	wantErr(t, err, ErrClosed, "model")
	ok(t, cctx.Close())
	ok(t, ctx.Close())
	_, err = ctx.DeviceKind()
	wantErr(t, err, ErrClosed, "context")

	rep := must(SimRun(simOpts(1), ctxOpts(), func(*Context) error { return nil }))
	crep := *rep
	ok(t, crep.Close())
	ok(t, rep.Close())

	tok := must(LoadTokenizer(tokFixture("gpt2")))
	ctok := *tok
	must(ctok.Encode("shared", nil))
	ok(t, ctok.Close())
	ok(t, tok.Close())
	_, err = tok.Encode("shared", nil)
	wantErr(t, err, ErrClosed, "tokenizer is closed")

	tr := newRTTrainer(t, 1, 1)
	inf := must(tr.ctx.Inference(tr.model, nil))
	cinf := *inf
	ok(t, cinf.Close())
	ok(t, inf.Close())
	_, _, err = inf.Weights()
	wantErr(t, err, ErrClosed, "closed")

	// zero values are refused, not dereferenced
	var zt Tensor
	_, err = zt.Item()
	wantErr(t, err, ErrClosed, "zero")
	ok(t, zt.Close())
	var zc Context
	_, err = zc.Step()
	wantErr(t, err, ErrInvalidArgument, "zero")
	ok(t, zc.Close())
	var zm Model
	_, err = zm.Forward()
	wantErr(t, err, ErrInvalidArgument, "nil")
	var zl DataLoader
	if zl.Next() || zl.Err() == nil {
		t.Fatal("a zero DataLoader iterated")
	}
	var zi Inference
	_, err = zi.Run()
	wantErr(t, err, ErrInvalidArgument, "nil")
	var zr SimReport
	_, err = zr.WorldSize()
	wantErr(t, err, ErrClosed, "report")
	var ztok Tokenizer
	_, err = ztok.VocabSize()
	wantErr(t, err, ErrClosed, "zero Tokenizer")
	_, err = ztok.ApplyChat(ChatAuto, nil, true)
	wantErr(t, err, ErrClosed, "zero Tokenizer")
	ok(t, ztok.Close())
	_, err = zl.AttentionMask()
	wantErr(t, err, ErrInvalidArgument, "nil")
	_, err = zm.GeneratePadded(&zt, &zt, nil)
	wantErr(t, err, ErrInvalidArgument, "nil")
}

// TestAnotherRanksContext: a simulated rank's Context (and its objects) used from another
// goroutine (another rank's, or one its own function started) is refused at once with an
// error naming the rank; it used to hang the run past the simulator's timeout.
func TestAnotherRanksContext(t *testing.T) {
	so := simOpts(2)
	so.TimeoutSeconds = 5
	var (
		mu    sync.Mutex
		ctx1  *Context
		mdl1  *Model
		errs  []error
		start = time.Now()
	)
	record := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	rep, err := SimRun(so, ctxOpts(), func(ctx *Context) error {
		rank := ctx.mustRank()
		if rank == 1 {
			m, err := ctx.NewMLP(DefaultMLPOptions(4, 2))
			if err != nil {
				return err
			}
			defer m.Close()
			mu.Lock()
			ctx1, mdl1 = ctx, m
			mu.Unlock()
		}
		if err := ctx.Barrier(); err != nil { // rank 1 has published its context
			return err
		}
		if rank == 0 {
			mu.Lock()
			c1, m1 := ctx1, mdl1
			mu.Unlock()
			record(c1.Barrier())        // rank 1's context on rank 0's thread
			_, err := c1.ProcessIndex() // ...
			record(err)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // and on other goroutines
				defer wg.Done()
				record(c1.Barrier())         // another rank's context
				_, err := ctx.ProcessIndex() // its own rank's, off the rank's goroutine
				record(err)
				_, err = m1.Forward() // an object of a rank's context
				record(err)
				record(ctx.Close()) // Close is refused there too
				record(m1.Close())  // an object's Close only queues it: nil
			}()
			wg.Wait()
		}
		return ctx.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
	rep.Close()
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("took %v: the misuse waited for the simulator's timeout", d)
	}
	if len(errs) != 7 {
		t.Fatalf("%d results", len(errs))
	}
	for i, err := range errs[:6] {
		if !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "belongs to simulated rank") {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if !strings.Contains(errs[0].Error(), "rank 1") || !strings.Contains(errs[3].Error(), "rank 0") {
		t.Errorf("the rank is not named: %v / %v", errs[0], errs[3])
	}
	ok(t, errs[6])
	// once the run is over, a kept context is closed (from any goroutine)
	_, err = ctx1.ProcessIndex()
	wantErr(t, err, ErrClosed, "context")
	ok(t, ctx1.Close())
}

// TestNULInStrings: every string that crosses into C is refused when it holds a NUL byte
// (C would see it cut short: a save would write to the truncated path and succeed).
func TestNULInStrings(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "out") + "\x00.ignored"
	ctx := newCtx(t, nil)
	s := newSetup(t, ctx, nil, 4)
	nul := func(err error, what string) {
		t.Helper()
		e := wantErr(t, err, ErrInvalidArgument, "NUL byte")
		if !strings.Contains(e.Message, what) {
			t.Errorf("%q does not name %q", e.Message, what)
		}
	}
	nul(s.model.Save(bad), "accel_save_model: path")
	nul(ctx.SaveState(bad), "accel_save_state: dir")
	nul(ctx.LoadState(bad), "accel_load_state: dir")
	_, err := ctx.LoadTorchScript(bad)
	nul(err, "accel_model_load_torchscript: path")
	nul(ctx.Print("a\x00b"), "accel_print: message")
	nul(ctx.ChargeCompute(1, "a\x00b"), "accel_sim_charge_compute: label")
	nul(ctx.SetProject(DefaultProjectOptions(bad)), "ProjectDir")
	to := DefaultTrackerOptions()
	to.LogDir = bad
	nul(ctx.InitTrackers(to), "LogDir")
	nul(ctx.Log(0, []string{"a\x00b"}, []float64{1}), "name")
	_, err = ctx.LoadPretrained(bad, nil)
	nul(err, "accel_model_load_pretrained: path")
	_, err = ctx.NewLM(bad, nil)
	nul(err, "accel_model_create_lm: path")
	lm := must(ctx.NewLM(lmFixture("gpt2-tiny"), nil))
	defer lm.Close()
	nul(lm.SavePretrained(bad), "accel_save_pretrained: dir")
	nul(lm.SaveAdapter(bad), "accel_save_adapter: dir")
	nul(lm.LoadAdapter(bad), "accel_model_load_adapter: dir")
	lo := DefaultLoRAOptions()
	lo.TargetModules = []string{"c_attn\x00"}
	nul(lm.AddLoRA(lo), "TargetModules")
	toks := must(NewTensor([]int64{1, 2, 3}, 3))
	defer toks.Close()
	nul(WriteTokenFile(bad, toks, 2), "accel_token_file_write: path")
	_, err = ReadTokenFile(bad)
	nul(err, "accel_token_file_read: path")
	_, err = LoadTokenizer(bad)
	nul(err, "accel_tokenizer_load: path")
	tok := must(LoadTokenizer(tokFixture("gpt2")))
	defer tok.Close()
	_, err = tok.TokenToID("the\x00")
	nul(err, "accel_tokenizer_token_to_id: token")
	_, err = tok.ApplyChat(ChatChatML, []ChatMessage{{"user", "hi"}, {"assistant", "a\x00b"}}, false)
	nul(err, "accel_tokenizer_apply_chat: messages[1].Content")
	_, err = tok.ApplyChat(ChatChatML, []ChatMessage{{"user\x00", "hi"}}, false)
	nul(err, "accel_tokenizer_apply_chat: messages[0].Role")
	_, err = ctx.NewSFTDataLoader(tok, bad, nil, nil)
	nul(err, "accel_sft_dataloader_create: path")
	_, err = EstimateMemory("gpt2\x00", nil)
	nul(err, "model")
	mo := DefaultMemoryEstimateOptions()
	mo.LoRARank, mo.LoRATargetModules = 4, []string{"q\x00"}
	_, err = EstimateMemory("gpt2", &mo)
	nul(err, "LoRATargetModules")
	so := simOpts(1)
	so.TracePath = bad
	rep, err := SimRun(so, ctxOpts(), func(*Context) error { return nil })
	nul(err, "TracePath")
	if rep != nil {
		t.Fatal("a report for refused options")
	}
	// nothing was written at the truncated paths
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("written: %v", entries)
	}
}

// TestWrongDTypeAndShape: wrong element types and shapes end in ErrInvalidArgument with a
// message that says what is wrong.
func TestWrongDTypeAndShape(t *testing.T) {
	_, err := NewTensor([]float32{1, 2, 3}, 2, 2)
	wantErr(t, err, ErrInvalidArgument, "shape [2 2] needs 4")
	_, err = NewTensorBytes(Float32, make([]byte, 6), 2)
	wantErr(t, err, ErrInvalidArgument, "no whole number")
	_, err = NewTensor([]float32{1}, -1)
	wantErr(t, err, ErrInvalidArgument, "accel_tensor_create")
	tn := must(NewTensor([]float32{1, 2, 3, 4}, 2, 2))
	defer tn.Close()
	wantErr(t, CopyTo(tn, make([]float32, 3)), ErrInvalidArgument, "accel_tensor_copy_to_host_as")
	_, err = tn.Item()
	wantErr(t, err, ErrInvalidArgument, "accel_tensor_item")

	ctx := newCtx(t, nil)
	m := must(ctx.NewMLP(DefaultMLPOptions(8, 4)))
	defer m.Close()
	_, err = m.Forward(tn) // 2 features where the MLP wants 8
	wantErr(t, err, ErrInvalidArgument, "accel_model_forward")
	x := must(NewTensor(make([]float32, 16), 2, 8))
	defer x.Close()
	logits := must(m.Forward(x))
	defer logits.Close()
	ft := must(NewTensor([]float32{0, 1}, 2)) // float class indices
	defer ft.Close()
	_, err = ctx.CrossEntropy(logits, ft)
	wantErr(t, err, ErrInvalidArgument, "accel_loss_cross_entropy")
	_, err = ctx.MSE(logits, tn) // [2, 4] against [2, 2]
	wantErr(t, err, ErrInvalidArgument, "accel_loss_mse")
}

// TestPanicsInCallbacks: a panic in a rank function comes back as the rank's error (with
// its value), on every rank at once too, and the next run works; a panic in a Go callback
// the binding calls itself (DataLoader.Each) reaches the caller's goroutine as a panic.
func TestPanicsInCallbacks(t *testing.T) {
	rep, err := SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		panic(fmt.Errorf("boom %d", ctx.mustRank()))
	})
	var re *RankError
	if !errors.As(err, &re) || !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("%v", err)
	}
	for r := 0; r < 2; r++ {
		rr := must(rep.Rank(r))
		if rr.Status != StatusInternal || !strings.Contains(rr.Error, fmt.Sprintf("panic: boom %d", r)) {
			t.Errorf("rank %d: %+v", r, rr)
		}
	}
	rep.Close()
	// a panic while the other rank waits in a collective: it fails (no hang)
	_, err = SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error {
		if ctx.mustRank() == 0 {
			var m map[string]int
			m["nil map"]++ // a runtime error
		}
		return ctx.Barrier()
	})
	if !errors.As(err, &re) || re.Rank != 0 || !strings.Contains(err.Error(), "nil map") {
		t.Fatalf("%v", err)
	}
	must(SimRun(simOpts(2), ctxOpts(), func(ctx *Context) error { return ctx.Barrier() })).Close()

	ctx := newCtx(t, nil)
	s := newSetup(t, ctx, nil, 4)
	func() {
		defer func() {
			if p := recover(); p != "in Each" {
				t.Fatalf("recovered %v", p)
			}
		}()
		s.loader.Each(func(x, y *Tensor) error { panic("in Each") })
	}()
	if !s.loader.Next() { // the loader goes on
		t.Fatal(s.loader.Err())
	}
}

// TestErrorTextOnce: a rank's error reads "accel: rank R failed: MESSAGE (STATUS)", with
// the prefix and the status once.
func TestErrorTextOnce(t *testing.T) {
	so := simOpts(2)
	so.Faults = "kill:1@collective:1"
	_, err := SimRun(so, ctxOpts(), func(ctx *Context) error { return ctx.Barrier() })
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "accel: rank ") || strings.Count(msg, "accel: ") != 1 || strings.Count(msg, "(ACCEL_ERR_") != 1 {
		t.Fatalf("%q", msg)
	}
	// a rank function's plain error: kept (errors.Is sees it), StatusInternal
	sentinel := errors.New("mine")
	_, err = SimRun(simOpts(1), ctxOpts(), func(*Context) error { return fmt.Errorf("wrapped: %w", sentinel) })
	if !errors.Is(err, sentinel) || !errors.Is(err, ErrInternal) || strings.Count(err.Error(), "accel: ") != 1 {
		t.Fatalf("%v", err)
	}
}

// TestTokenizerMisuse: a tokenizer closed twice, used after Close (every method), a nil
// *Tokenizer and a zero value: errors matching ErrClosed, never a crash; Close racing
// concurrent uses is in TestCloseRacesUse.
func TestTokenizerMisuse(t *testing.T) {
	tok := must(LoadTokenizer(tokFixture("llama2")))
	ids := must(tok.Encode("hello", nil))
	ok(t, tok.Close())
	ok(t, tok.Close()) // idempotent
	var nilTok *Tokenizer
	for _, tk := range []*Tokenizer{tok, nilTok, {}} {
		closed := func(err error, op string) {
			t.Helper()
			e := wantErr(t, err, ErrClosed, op)
			if !errors.Is(err, ErrInvalidState) || e.Op != op {
				t.Errorf("%+v", e)
			}
		}
		_, err := tk.VocabSize()
		closed(err, "accel_tokenizer_vocab_size")
		_, err = tk.BOSID()
		closed(err, "accel_tokenizer_special_id")
		_, err = tk.SpecialID(TokenPad)
		closed(err, "accel_tokenizer_special_id")
		_, err = tk.TokenToID("<s>")
		closed(err, "accel_tokenizer_token_to_id")
		_, _, err = tk.IDToToken(1)
		closed(err, "accel_tokenizer_id_to_token")
		_, err = tk.Encode("hello", nil)
		closed(err, "accel_tokenizer_encode")
		_, err = tk.EncodeBytes([]byte("hello"), nil)
		closed(err, "accel_tokenizer_encode")
		a, b, err := tk.EncodeBatch([]string{"hello"}, nil)
		closed(err, "accel_tokenizer_encode_batch")
		if a != nil || b != nil {
			t.Error("tensors from a closed tokenizer")
		}
		_, err = tk.Decode(ids, false)
		closed(err, "accel_tokenizer_decode")
		_, err = tk.ApplyChat(ChatAuto, []ChatMessage{{"user", "hi"}}, true)
		closed(err, "accel_tokenizer_apply_chat")
		ok(t, tk.Close())
	}
}

// TestFineTuningMisuse: NewSFTDataLoader, AttentionMask and GeneratePadded with nil, zero
// and closed handles (the context, the tokenizer, the loader, the model, the tensors) and
// objects of another context: errors (ErrClosed for what was closed), never a crash.
func TestFineTuningMisuse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sft.jsonl")
	ok(t, os.WriteFile(path, []byte(`{"prompt": "2 + 2 =", "completion": " 4"}`+"\n"), 0o644))
	tok := must(LoadTokenizer(tokFixture("qwen2")))
	defer tok.Close()
	ctx := newCtx(t, nil)
	const sd = "accel_sft_dataloader_create"

	// the context: nil, zero, closed
	var nilCtx *Context
	_, err := nilCtx.NewSFTDataLoader(tok, path, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "ctx is nil")
	_, err = (&Context{}).NewSFTDataLoader(tok, path, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "zero Context")
	closedCtx := newCtx(t, nil)
	ok(t, closedCtx.Close())
	_, err = closedCtx.NewSFTDataLoader(tok, path, nil, nil)
	wantErr(t, err, ErrClosed, sd)
	// the tokenizer: nil, zero, closed
	_, err = ctx.NewSFTDataLoader(nil, path, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "tokenizer is nil")
	_, err = ctx.NewSFTDataLoader(&Tokenizer{}, path, nil, nil)
	wantErr(t, err, ErrClosed, "zero Tokenizer")
	gone := must(LoadTokenizer(tokFixture("qwen2")))
	ok(t, gone.Close())
	_, err = ctx.NewSFTDataLoader(gone, path, nil, nil)
	e := wantErr(t, err, ErrClosed, "tokenizer is closed")
	if e.Op != sd {
		t.Fatalf("%+v", e)
	}
	// the loader works after the tokenizer closes (it keeps no reference to it)
	tok2 := must(LoadTokenizer(tokFixture("qwen2")))
	l := must(ctx.NewSFTDataLoader(tok2, path, nil, nil))
	ok(t, tok2.Close())
	x, y := must2(l.NextBatch())
	mk := must(l.AttentionMask())
	for _, tn := range []*Tensor{x, y, mk} {
		ok(t, tn.Close())
	}

	// AttentionMask: a nil loader, a closed one, one whose context closed
	var nilL *DataLoader
	_, err = nilL.AttentionMask()
	wantErr(t, err, ErrInvalidArgument, "data loader is nil")
	ok(t, l.Close())
	_, err = l.AttentionMask()
	wantErr(t, err, ErrClosed, "data loader")
	ctx3 := newCtx(t, nil)
	l3 := must(ctx3.NewSFTDataLoader(tok, path, nil, nil))
	x, y = must2(l3.NextBatch())
	x.Close()
	y.Close()
	ok(t, ctx3.Close())
	_, err = l3.AttentionMask()
	wantErr(t, err, ErrClosed, "context")
	ok(t, l3.Close())

	// GeneratePadded: a nil or closed model, an MLP, closed and zero tensors, a model whose
	// context closed
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	ids := must(NewTensor([]int64{0, 5, 6, 7, 8, 9}, 2, 3))
	defer ids.Close()
	mask := must(NewTensor([]int64{0, 1, 1, 1, 1, 1}, 2, 3))
	defer mask.Close()
	o := DefaultGenerateOptions()
	o.MaxNewTokens = 2
	out := must(m.GeneratePadded(ids, mask, &o))
	ok(t, out.Close())
	var nilM *Model
	_, err = nilM.GeneratePadded(ids, mask, &o)
	wantErr(t, err, ErrInvalidArgument, "model is nil")
	mlp := must(ctx.NewMLP(DefaultMLPOptions(3, 2)))
	_, err = mlp.GeneratePadded(ids, mask, &o)
	wantErr(t, err, ErrInvalidArgument, "not a causal LM")
	closedMask := must(NewTensor([]int64{0, 1, 1, 1, 1, 1}, 2, 3))
	ok(t, closedMask.Close())
	_, err = m.GeneratePadded(ids, closedMask, &o)
	wantErr(t, err, ErrClosed, "tensor")
	_, err = m.GeneratePadded(closedMask, mask, &o)
	wantErr(t, err, ErrClosed, "tensor")
	_, err = m.GeneratePadded(ids, &Tensor{}, &o)
	wantErr(t, err, ErrClosed, "zero Tensor")
	ok(t, m.Close())
	_, err = m.GeneratePadded(ids, mask, &o)
	wantErr(t, err, ErrClosed, "model")
	ctx4 := newCtx(t, nil)
	m4 := must(ctx4.LoadPretrained(lmFixture("llama-tiny"), nil))
	ok(t, ctx4.Close())
	_, err = m4.GeneratePadded(ids, mask, &o)
	wantErr(t, err, ErrClosed, "context")
}
