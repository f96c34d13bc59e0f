package accel

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func lmFixture(name string) string {
	return filepath.Join("..", "..", "tests", "fixtures", "lm", name)
}

// lmBatch: two rows of 6 tokens (vocab 128), the last 2 positions of row 1 padding; 8 real targets.
func lmBatch(t *testing.T) (ids, mask, labels *Tensor) {
	t.Helper()
	i := []int64{5, 17, 3, 99, 42, 7, 11, 2, 64, 8, 0, 0}
	m := []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}
	l := make([]int64, len(i))
	for k := range i {
		l[k] = i[k]
		if m[k] == 0 {
			l[k] = -100
		}
	}
	return must(NewTensor(i, 2, 6)), must(NewTensor(m, 2, 6)), must(NewTensor(l, 2, 6))
}

func TestLMTrainSaveReload(t *testing.T) {
	ctx := newCtx(t, nil)
	opts := DefaultLMOptions()
	opts.GradientCheckpointing = true
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), &opts))
	if name := must(m.ParameterName(0)); name != "model.embed_tokens.weight" {
		t.Fatal(name)
	}
	ao := DefaultAdamWOptions()
	ao.LR = 1e-2
	opt := must(ctx.NewAdamW(m, &ao))
	ok(t, ctx.Prepare(m, opt, nil, nil))
	ids, mask, labels := lmBatch(t)
	var losses []float64
	for i := 0; i < 5; i++ {
		out := must(m.LMForward(ids, mask, labels))
		if out.NumTokens != 8 {
			t.Fatalf("%d real targets, want 8", out.NumTokens)
		}
		if s := must(out.Logits.Shape()); !reflect.DeepEqual(s, []int64{2, 6, 128}) {
			t.Fatal(s)
		}
		losses = append(losses, must(out.Loss.Item()))
		ok(t, ctx.Backward(out.Loss))
		r := must(ctx.Step())
		if !r.Stepped {
			t.Fatal("no step")
		}
	}
	if losses[4] >= losses[0] {
		t.Fatalf("the loss did not fall: %v", losses)
	}
	dir := filepath.Join(t.TempDir(), "trained")
	ok(t, m.SavePretrained(dir))
	ok(t, m.SetTraining(false))
	mine := must(m.LMForward(ids, mask, nil))
	if mine.Loss != nil || mine.NumTokens != 0 {
		t.Fatal("a loss without labels")
	}
	back := must(ctx.LoadPretrained(dir, nil))
	ok(t, back.SetTraining(false))
	again := must(back.LMForward(ids, mask, nil))
	if !reflect.DeepEqual(must(ToSlice[float32](mine.Logits)), must(ToSlice[float32](again.Logits))) {
		t.Fatal("the reloaded model's logits differ")
	}
}

func TestLMFromConfigAndErrors(t *testing.T) {
	ctx := newCtx(t, nil)
	opts := LMOptions{DType: BFloat16}
	m := must(ctx.NewLM(lmFixture("gpt2-tiny"), &opts))
	dir := filepath.Join(t.TempDir(), "out")
	ok(t, m.SavePretrained(dir))
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	ok(t, err)
	if !strings.Contains(string(cfg), `"dtype": "bfloat16"`) {
		t.Fatal(string(cfg))
	}
	_, err = ctx.LoadPretrained(filepath.Join(t.TempDir(), "nothing"), nil)
	wantErr(t, err, ErrIO, "accel_model_load_pretrained")
	_, err = ctx.LoadPretrained(lmFixture("gpt2-tiny"), &LMOptions{DType: Int64})
	wantErr(t, err, ErrInvalidArgument, "dtype")
	bad := must(NewTensor([]int64{1, 100000}, 1, 2))
	_, err = m.LMForward(bad, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "out of range")
	_, err = m.LMForward(nil, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "inputIDs is nil")
	user := filepath.Join(t.TempDir(), "notes.txt")
	ok(t, os.WriteFile(user, []byte("mine"), 0o644))
	wantErr(t, m.SavePretrained(user), ErrInvalidArgument, "refusing")
	if b, _ := os.ReadFile(user); string(b) != "mine" {
		t.Fatal("user file changed")
	}
	mlp := must(ctx.NewMLP(DefaultMLPOptions(2, 2)))
	_, err = mlp.LMForward(must(NewTensor([]int64{1, 0}, 1, 2)), nil, nil)
	wantErr(t, err, ErrInvalidArgument, "not a causal LM")
}

func TestTokenFileAndLMLoader(t *testing.T) {
	ctx := newCtx(t, nil)
	var toks, offs []int64
	offs = append(offs, 0)
	for s := int64(0); s < 30; s++ {
		for k := int64(0); k < 2+s%10; k++ {
			toks = append(toks, (s*7+k)%128)
		}
		offs = append(offs, int64(len(toks)))
	}
	path := filepath.Join(t.TempDir(), "corpus.tok")
	ok(t, WriteTokenFile(path, must(NewTensor(toks, int64(len(toks)))), 2))
	back := must(ReadTokenFile(path))
	if !reflect.DeepEqual(must(ToSlice[int64](back)), toks) {
		t.Fatal("the token file read back differs")
	}
	lm := DefaultLMDataOptions()
	lm.PadToMultipleOf = 4
	lo := DefaultDataLoaderOptions()
	lo.BatchSize = 8
	loader := must(ctx.NewLMDataLoader(back, must(NewTensor(offs, int64(len(offs)))), lm, lo))
	m := must(ctx.LoadPretrained(lmFixture("gpt2-tiny"), nil))
	ao := DefaultAdamWOptions()
	opt := must(ctx.NewAdamW(m, &ao))
	ok(t, ctx.Prepare(m, opt, nil, loader))
	real := 0
	for {
		ids, labels, err := loader.NextBatch()
		ok(t, err)
		if ids == nil {
			break
		}
		if s := must(ids.Shape()); s[1]%4 != 0 {
			t.Fatal(s)
		}
		for _, v := range must(ToSlice[int64](labels)) {
			if v != -100 {
				real++
			}
		}
		out := must(m.LMForward(ids, nil, labels))
		ok(t, ctx.Backward(out.Loss))
		must(ctx.Step())
	}
	if real != len(toks) {
		t.Fatalf("%d real tokens, want %d", real, len(toks))
	}
	_, err := ReadTokenFile(filepath.Join(t.TempDir(), "none.tok"))
	wantErr(t, err, ErrIO, "accel_token_file_read")
	_, err = ctx.NewLMDataLoader(back, must(NewTensor([]int64{0, 5, 3}, 3)), lm, lo)
	wantErr(t, err, ErrInvalidArgument, "offsets")
}

func TestLoRATrainSaveReload(t *testing.T) {
	ctx := newCtx(t, nil)
	m := must(ctx.LoadPretrained(lmFixture("gpt2-tiny"), nil))
	lo := DefaultLoRAOptions()
	lo.R = 2
	lo.TargetModules = []string{"c_attn", "c_fc"}
	ok(t, m.AddLoRA(lo))
	if n, _ := must2(m.NumParameters()); n != 8 {
		t.Fatalf("%d parameters, want the 8 adapters", n)
	}
	ao := DefaultAdamWOptions()
	ao.LR = 1e-2
	opt := must(ctx.NewAdamW(m, &ao))
	ok(t, ctx.Prepare(m, opt, nil, nil))
	ids, mask, labels := lmBatch(t)
	for i := 0; i < 3; i++ {
		out := must(m.LMForward(ids, mask, labels))
		ok(t, ctx.Backward(out.Loss))
		must(ctx.Step())
	}
	dir := filepath.Join(t.TempDir(), "adapter")
	ok(t, m.SaveAdapter(dir))
	ok(t, m.SetTraining(false))
	mine := must(ToSlice[float32](must(m.LMForward(ids, mask, nil)).Logits))
	back := must(ctx.LoadPretrained(lmFixture("gpt2-tiny"), nil))
	ok(t, back.LoadAdapter(dir))
	ok(t, back.SetTraining(false))
	if !reflect.DeepEqual(must(ToSlice[float32](must(back.LMForward(ids, mask, nil)).Logits)), mine) {
		t.Fatal("the reloaded adapter's logits differ")
	}
	wantErr(t, m.AddLoRA(lo), ErrInvalidState, "prepared")
	other := must(ctx.LoadPretrained(lmFixture("gpt2-tiny"), nil))
	lo.TargetModules = []string{"q_proj"}
	wantErr(t, other.AddLoRA(lo), ErrInvalidArgument, "matches no module")
}

func TestQLoRANF4DoubleQuant(t *testing.T) {
	ctx := newCtx(t, nil)
	opts := DefaultLMOptions()
	opts.Quantization = QuantNF4
	opts.DoubleQuant = true
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), &opts))
	ids, mask, labels := lmBatch(t)
	ok(t, m.SetTraining(false))
	out := must(m.LMForward(ids, mask, nil))
	if s := must(out.Logits.Shape()); !reflect.DeepEqual(s, []int64{2, 6, 128}) {
		t.Fatal(s)
	}
	logits := must(ToSlice[float32](out.Logits))
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
	// the quantization took effect: the float32 model's logits differ
	plain := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	ok(t, plain.SetTraining(false))
	if reflect.DeepEqual(must(ToSlice[float32](must(plain.LMForward(ids, mask, nil)).Logits)), logits) {
		t.Fatal("the quantized model's logits equal the float32 model's")
	}
	ok(t, m.SetTraining(true))
	// a quantized base trains through adapters only, and is not saved as a base
	ao := DefaultAdamWOptions()
	ao.LR = 1e-2
	_, err := ctx.NewAdamW(m, &ao)
	wantErr(t, err, ErrInvalidState, "LoRA")
	dir := filepath.Join(t.TempDir(), "base")
	wantErr(t, m.SavePretrained(dir), ErrInvalidArgument, "quantized")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s was written (%v)", dir, err)
	}
	lo := DefaultLoRAOptions()
	lo.R = 2
	ok(t, m.AddLoRA(lo))
	n, _ := must2(m.NumParameters())
	names := make([]string, n)
	before := make([][]float32, n)
	for i := range names {
		names[i] = must(m.ParameterName(i))
		if !strings.Contains(names[i], ".lora_A.") && !strings.Contains(names[i], ".lora_B.") {
			t.Fatalf("parameter %d is %s, not an adapter", i, names[i])
		}
		before[i] = must(ToSlice[float32](must(m.Parameter(i))))
	}
	if n == 0 {
		t.Fatal("no adapters")
	}
	opt := must(ctx.NewAdamW(m, &ao))
	ok(t, ctx.Prepare(m, opt, nil, nil))
	step := must(m.LMForward(ids, mask, labels))
	if step.NumTokens != 8 {
		t.Fatalf("%d real targets, want 8", step.NumTokens)
	}
	loss := must(step.Loss.Item())
	if math.IsNaN(loss) || math.IsInf(loss, 0) || loss <= 0 {
		t.Fatalf("loss %v", loss)
	}
	ok(t, ctx.Backward(step.Loss))
	if r := must(ctx.Step()); !r.Stepped {
		t.Fatal("no step")
	}
	changedB := false
	for i := range names {
		after := must(ToSlice[float32](must(m.Parameter(i))))
		if !reflect.DeepEqual(after, before[i]) && strings.Contains(names[i], ".lora_B.") {
			changedB = true
		}
	}
	if !changedB {
		t.Fatal("the step changed no lora_B adapter")
	}
}

func TestQuantizationIsChecked(t *testing.T) {
	ctx := newCtx(t, nil)
	// Quantization is a plain int32: the library refuses a value it does not know
	for _, q := range []Quantization{42, -1, QuantInt8 + 1} {
		_, err := ctx.LoadPretrained(lmFixture("llama-tiny"), &LMOptions{Quantization: q})
		wantErr(t, err, ErrInvalidArgument, "quantization")
		_, err = ctx.NewLM(lmFixture("llama-tiny"), &LMOptions{Quantization: q})
		wantErr(t, err, ErrInvalidArgument, "quantization")
	}
	// double quantization is NF4's and FP4's only
	_, err := ctx.LoadPretrained(lmFixture("llama-tiny"), &LMOptions{Quantization: QuantInt8, DoubleQuant: true})
	wantErr(t, err, ErrInvalidArgument, "double_quant")
	if d := DefaultLMOptions(); d.Quantization != QuantNone || d.DoubleQuant {
		t.Fatalf("defaults %+v", d)
	}
	for _, q := range []Quantization{QuantFP4, QuantInt8} {
		m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), &LMOptions{Quantization: q}))
		if _, elems := must2(m.NumParameters()); elems <= 0 {
			t.Fatalf("quantization %d: %d parameters", q, elems)
		}
	}
}

func TestAdafactor(t *testing.T) {
	ctx := newCtx(t, nil)
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	o := DefaultAdafactorOptions()
	if !o.RelativeStep || !o.ScaleParameter || o.DecayRate != -0.8 {
		t.Fatalf("defaults %+v", o)
	}
	o.LR, o.RelativeStep, o.ScaleParameter = 1e-2, false, false
	opt := must(ctx.NewAdafactor(m, &o))
	ok(t, ctx.Prepare(m, opt, nil, nil))
	ids, mask, labels := lmBatch(t)
	var losses []float64
	for i := 0; i < 4; i++ {
		out := must(m.LMForward(ids, mask, labels))
		losses = append(losses, must(out.Loss.Item()))
		ok(t, ctx.Backward(out.Loss))
		must(ctx.Step())
	}
	if losses[3] >= losses[0] {
		t.Fatalf("the loss did not fall: %v", losses)
	}
	bad := DefaultAdafactorOptions()
	bad.LR = 1e-3
	_, err := ctx.NewAdafactor(must(ctx.LoadPretrained(lmFixture("gpt2-tiny"), nil)), &bad)
	wantErr(t, err, ErrInvalidArgument, "relative_step")
}

func TestGenerate(t *testing.T) {
	ctx := newCtx(t, nil)
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	ok(t, m.SetTraining(false))
	prompt := must(NewTensor([]int64{5, 17, 3, 99}, 1, 4))
	o := DefaultGenerateOptions()
	o.MaxNewTokens = 6
	out := must(m.Generate(prompt, &o))
	if s := must(out.Shape()); !reflect.DeepEqual(s, []int64{1, 10}) {
		t.Fatal(s)
	}
	o.UseCache = false
	again := must(m.Generate(prompt, &o))
	if !reflect.DeepEqual(must(ToSlice[int64](out)), must(ToSlice[int64](again))) {
		t.Fatal("the KV cache changed the tokens")
	}
	o.MaxNewTokens = 0
	_, err := m.Generate(prompt, &o)
	wantErr(t, err, ErrInvalidArgument, "max_new_tokens")
}

// TestGeneratePadded: a left-padded batch of two prompts (6 and 3 tokens) continues each
// prompt as it continues alone (greedy, with and without the KV cache; int64 and int32
// masks); right padding, a row without tokens, a mask of another shape and a nil mask are
// refused.
func TestGeneratePadded(t *testing.T) {
	ctx := newCtx(t, nil)
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	ok(t, m.SetTraining(false))
	prompts := [][]int64{{5, 17, 3, 99, 42, 7}, {64, 8, 11}}
	const S, N = 6, 8
	var ids, mask []int64
	for _, p := range prompts {
		for k := 0; k < S-len(p); k++ {
			ids, mask = append(ids, 0), append(mask, 0)
		}
		for _, id := range p {
			ids, mask = append(ids, id), append(mask, 1)
		}
	}
	it := must(NewTensor(ids, 2, S))
	defer it.Close()
	mask64 := must(NewTensor(mask, 2, S))
	defer mask64.Close()
	mask32 := make([]int32, len(mask))
	for i, v := range mask {
		mask32[i] = int32(v)
	}
	m32 := must(NewTensor(mask32, 2, S))
	defer m32.Close()
	o := DefaultGenerateOptions()
	o.MaxNewTokens = N
	for _, cache := range []bool{true, false} {
		o.UseCache = cache
		var alone [][]int64
		for _, p := range prompts {
			pt := must(NewTensor(p, 1, int64(len(p))))
			gen := must(m.Generate(pt, &o))
			out := must(ToSlice[int64](gen))
			alone = append(alone, out[len(p):])
			gen.Close()
			pt.Close()
		}
		for _, mk := range []*Tensor{mask64, m32} {
			out := must(m.GeneratePadded(it, mk, &o))
			if s := must(out.Shape()); !reflect.DeepEqual(s, []int64{2, S + N}) {
				t.Fatalf("shape %v", s)
			}
			got := rows(t, out)
			for r := range prompts {
				if !reflect.DeepEqual(got[r][:S], ids[r*S:(r+1)*S]) {
					t.Fatalf("row %d: the prompt became %v", r, got[r][:S])
				}
				if !reflect.DeepEqual(got[r][S:], alone[r]) {
					t.Errorf("cache %v, mask %v: row %d continues %v, alone %v", cache, must(mk.DType()), r, got[r][S:], alone[r])
				}
			}
			out.Close()
		}
	}
	right := must(NewTensor([]int64{1, 1, 0, 1, 1, 1}, 2, 3))
	three := must(NewTensor([]int64{0, 5, 6, 7, 8, 9}, 2, 3))
	_, err := m.GeneratePadded(three, right, &o)
	e := wantErr(t, err, ErrInvalidArgument, "padding after a token")
	wantErr(t, e, ErrInvalidArgument, "row 0")
	_, err = m.GeneratePadded(three, must(NewTensor([]int64{0, 0, 0, 1, 1, 1}, 2, 3)), &o)
	wantErr(t, err, ErrInvalidArgument, "no token")
	_, err = m.GeneratePadded(three, must(NewTensor([]int64{1, 1, 1, 1}, 2, 2)), nil)
	wantErr(t, err, ErrInvalidArgument, "attention_mask")
	_, err = m.GeneratePadded(three, nil, nil)
	wantErr(t, err, ErrInvalidArgument, "mask is nil")
	_, err = m.GeneratePadded(nil, right, nil)
	wantErr(t, err, ErrInvalidArgument, "inputIDs is nil")
	o.MaxNewTokens = 0
	_, err = m.GeneratePadded(it, mask64, &o)
	wantErr(t, err, ErrInvalidArgument, "max_new_tokens")
}

// llama7B is the parameter count of Llama-2-7B (EstimateMemory's named shape "llama-7b").
const llama7B = 6738415616

func TestEstimateMemory(t *testing.T) {
	d := DefaultMemoryEstimateOptions()
	if d.Optimizer != OptimizerAdamW || d.WorldSize != 1 || d.MicroBatch != 1 || d.SeqLen != 0 || d.Strategy != StrategyNo ||
		d.MixedPrecision != PrecisionNo || d.WeightsDType != Float32 || d.Attention != AttentionAuto || d.LoRARank != 0 {
		t.Fatalf("%+v", d)
	}
	e := must(EstimateMemory("llama-7b", nil))
	if e.Parameters != llama7B || e.TrainableParameters != llama7B {
		t.Fatalf("%+v", e)
	}
	// fp32 AdamW on one process: 4 bytes of weights, 4 of gradients, 8 of moments per parameter
	if e.Weights != 4*llama7B || e.Gradients != 4*llama7B || e.OptimizerState != 8*llama7B {
		t.Fatalf("%+v", e)
	}
	if e.Activations == 0 || e.Total < e.Weights+e.Gradients+e.OptimizerState+e.Activations {
		t.Fatalf("%+v", e)
	}
	if e.SeqLen != 1024 || (e.Attention != AttentionEager && e.Attention != AttentionFused) {
		t.Fatalf("%+v", e)
	}
	if same := must(EstimateMemory("llama-7b", &d)); same != e {
		t.Fatalf("defaults %+v vs nil %+v", same, e)
	}

	// LoRA on PEFT's default targets (q_proj, v_proj): A [r, 4096] + B [4096, r] per module and layer
	lo := DefaultMemoryEstimateOptions()
	lo.LoRARank = 16
	lora := must(EstimateMemory("llama-7b", &lo))
	if lora.Parameters != llama7B || lora.TrainableParameters != 32*2*16*(4096+4096) || lora.Total >= e.Total {
		t.Fatalf("%+v", lora)
	}
	lo.LoRATargetModules = []string{"q_proj", "v_proj"}
	if named := must(EstimateMemory("llama-7b", &lo)); named != lora {
		t.Fatalf("named targets %+v vs default %+v", named, lora)
	}
	// offload: the moments in host memory, 12 bytes a parameter moved per step (fp32); an NF4
	// base under LoRA holds fewer weight bytes than the fp32 one
	of := DefaultMemoryEstimateOptions()
	of.Offload = OffloadOptimizer
	off := must(EstimateMemory("llama-7b", &of))
	if e.Host != 0 || e.TransferBytes != 0 || off.OptimizerState != 0 || off.Host < 8*llama7B ||
		off.TransferBytes != 12*llama7B || off.GradientTransferBytes != 4*llama7B || off.Total >= e.Total {
		t.Fatalf("plain %+v, offloaded %+v", e, off)
	}
	q := DefaultMemoryEstimateOptions()
	q.LoRARank, q.Quantization, q.DoubleQuant = 16, QuantNF4, true
	if nf4 := must(EstimateMemory("llama-7b", &q)); nf4.Weights >= lora.Weights/4 {
		t.Fatalf("nf4 %+v vs fp32 base %+v", nf4, lora)
	}
	q.LoRARank = 0
	if _, err := EstimateMemory("llama-7b", &q); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a quantized base without LoRA: %v", err)
	}

	// ZeRO-3 over 64 processes with bf16 autocast: (4 + 2 + 2 + 8) / 64 bytes per parameter
	z := DefaultMemoryEstimateOptions()
	z.MixedPrecision, z.Strategy, z.WorldSize = PrecisionBF16, StrategyZero3, 64
	z3 := must(EstimateMemory("llama-7b", &z))
	if per := float64(z3.Weights+z3.Gradients+z3.OptimizerState) / llama7B; math.Abs(per-0.25) > 1e-6 {
		t.Fatalf("%v bytes per parameter: %+v", per, z3)
	}

	// the kernel asked for is the one reported; SGD keeps no state
	a := DefaultMemoryEstimateOptions()
	a.Attention = AttentionEager
	eager := must(EstimateMemory("llama-7b", &a))
	a.Attention = AttentionFused
	fused := must(EstimateMemory("llama-7b", &a))
	if eager.Attention != AttentionEager || fused.Attention != AttentionFused || fused.Activations >= eager.Activations {
		t.Fatalf("eager %+v fused %+v", eager, fused)
	}
	sg := DefaultMemoryEstimateOptions()
	sg.Optimizer, sg.SeqLen, sg.MicroBatch = OptimizerSGD, 512, 2
	if s := must(EstimateMemory("llama-7b", &sg)); s.OptimizerState != 0 || s.SeqLen != 512 {
		t.Fatalf("%+v", s)
	}

	// a config.json (or its directory) gives the parameters the model really has
	tiny := must(EstimateMemory(lmFixture("llama-tiny"), nil))
	if again := must(EstimateMemory(filepath.Join(lmFixture("llama-tiny"), "config.json"), nil)); again != tiny {
		t.Fatalf("dir %+v vs config.json %+v", tiny, again)
	}
	ctx := newCtx(t, nil)
	m := must(ctx.LoadPretrained(lmFixture("llama-tiny"), nil))
	if _, n, err := m.NumParameters(); err != nil || n != tiny.Parameters {
		t.Fatalf("model %d parameters (%v), estimate %d", n, err, tiny.Parameters)
	}
}

func TestEstimateMemoryErrors(t *testing.T) {
	_, err := EstimateMemory("llama-3b", nil)
	wantErr(t, err, ErrIO, "named shape")
	o := DefaultMemoryEstimateOptions()
	o.WorldSize = 4
	_, err = EstimateMemory("llama-7b", &o)
	wantErr(t, err, ErrInvalidArgument, "strategy")
	o.Optimizer, o.Strategy, o.WorldSize = OptimizerLAMB, StrategyZero2, 2
	_, err = EstimateMemory("llama-7b", &o)
	wantErr(t, err, ErrUnsupported, "LAMB")
	_, err = EstimateMemory("llama\x00-7b", nil)
	wantErr(t, err, ErrInvalidArgument, "NUL")
	var zero MemoryEstimateOptions // the zero value is not the defaults: micro-batch 0 is refused
	_, err = EstimateMemory("llama-7b", &zero)
	wantErr(t, err, ErrInvalidArgument, "accel_estimate_memory")
}
