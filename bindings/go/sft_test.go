package accel

// Fine-tuning data (NewSFTDataLoader) with the qwen2 tokenizer of tests/fixtures/tokenizers,
// as tests/lm/test_tokenizer.cpp (Tokenizer.FineTuningBatchesMaskThePrompts) checks it from
// C: labels on the assistant's answers only, padding where the attention mask says, on
// either side; truncation and packing; a model trained on the batches with their mask; the
// errors naming the file and line. Then the attention mask of NewLMDataLoader's batches.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// writeLines writes a JSONL file of the given objects (a blank line after the first).
func writeLines(t *testing.T, name string, objs ...interface{}) string {
	t.Helper()
	var b []byte
	for i, o := range objs {
		line, err := json.Marshal(o)
		ok(t, err)
		b = append(append(b, line...), '\n')
		if i == 0 {
			b = append(b, '\n') // blank lines are skipped
		}
	}
	path := filepath.Join(t.TempDir(), name)
	ok(t, os.WriteFile(path, b, 0o644))
	return path
}

// sftJSONL: two conversations, a prompt/completion line and a text line.
func sftJSONL(t *testing.T, convs [][]ChatMessage) string {
	t.Helper()
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	conv := func(c []ChatMessage) map[string]interface{} {
		var ms []msg
		for _, m := range c {
			ms = append(ms, msg{m.Role, m.Content})
		}
		return map[string]interface{}{"messages": ms}
	}
	return writeLines(t, "sft.jsonl", conv(convs[0]), conv(convs[2]),
		map[string]string{"prompt": "Question: what is 2 + 2?\nAnswer:", "completion": " 4"},
		map[string]string{"text": "Plain text trains on every token."})
}

// loaded: one epoch's rows (no shuffling: in the file's order), each as long as the batch.
type loaded struct{ ids, labels, mask [][]int64 }

func rows(t *testing.T, x *Tensor) [][]int64 {
	t.Helper()
	shape := must(x.Shape())
	v := must(ToSlice[int64](x))
	var out [][]int64
	for r := int64(0); r < shape[0]; r++ {
		out = append(out, v[r*shape[1]:(r+1)*shape[1]])
	}
	return out
}

// loadEpoch reads one epoch with Next/Batch (scanner) or NextBatch (owned tensors), and
// each batch's AttentionMask.
func loadEpoch(t *testing.T, l *DataLoader, scanner bool) loaded {
	t.Helper()
	var out loaded
	add := func(x, y *Tensor) {
		m := must(l.AttentionMask())
		defer m.Close()
		if xs, ms := must(x.Shape()), must(m.Shape()); !reflect.DeepEqual(xs, ms) {
			t.Fatalf("ids %v, mask %v", xs, ms)
		}
		out.ids = append(out.ids, rows(t, x)...)
		out.labels = append(out.labels, rows(t, y)...)
		out.mask = append(out.mask, rows(t, m)...)
	}
	if scanner {
		for l.Next() {
			add(l.Batch())
		}
		ok(t, l.Err())
		return out
	}
	for {
		x, y, err := l.NextBatch()
		ok(t, err)
		if x == nil {
			return out
		}
		add(x, y)
		x.Close()
		y.Close()
	}
}

func (b loaded) unmasked(r int) []int64 {
	var v []int64
	for _, x := range b.labels[r] {
		if x != -100 {
			v = append(v, x)
		}
	}
	return v
}

func (b loaded) real(r int) []int64 {
	var v []int64
	for k, x := range b.ids[r] {
		if b.mask[r][k] != 0 {
			v = append(v, x)
		}
	}
	return v
}

func TestSFTOptionsDefaults(t *testing.T) {
	d := DefaultSFTOptions()
	want := SFTOptions{ChatFormat: ChatAuto, CompletionOnlyLoss: true, AddEOS: true, MaxLength: 0, Packing: false,
		PaddingSide: SideRight, PadToMultipleOf: 0, PadID: -1}
	if d != want {
		t.Fatalf("defaults %+v, want %+v", d, want)
	}
	if lm := DefaultLMDataOptions(); lm.PaddingSide != SideRight {
		t.Fatalf("LM data defaults %+v", lm)
	}
}

// TestSFTBatchesMaskThePrompts: chat lines carry labels on the assistant's turns only (the
// answer and its end-of-turn token), prompt/completion lines on the completion and EOS,
// text lines everywhere; padding (Qwen's <|endoftext|>, label -100) on the side asked for,
// where the mask has its zeros; the ids are the rendered conversation's.
func TestSFTBatchesMaskThePrompts(t *testing.T) {
	convs := tokConversations(t)
	path := sftJSONL(t, convs)
	ctx := newCtx(t, nil)
	tok := loadTok(t, tokFixture("qwen2"))
	lo := DefaultDataLoaderOptions()
	lo.BatchSize, lo.Shuffle = 2, false
	decode := func(ids []int64) string { return must(tok.Decode(ids, false)) }
	for _, side := range []Side{SideRight, SideLeft} {
		so := DefaultSFTOptions()
		so.PaddingSide = side
		l := must(ctx.NewSFTDataLoader(tok, path, &so, &lo))
		if n := must(l.NumBatches()); n != 2 {
			t.Fatalf("%d batches", n)
		}
		b := loadEpoch(t, l, side == SideRight)
		if len(b.ids) != 4 {
			t.Fatalf("%d rows", len(b.ids))
		}
		if s := decode(b.unmasked(0)); s != convs[0][1].Content+"<|im_end|>\n" {
			t.Errorf("side %d: conversation 0's labels decode to %q", side, s)
		}
		if s := decode(b.unmasked(1)); s != convs[2][1].Content+"<|im_end|>\n" {
			t.Errorf("side %d: conversation 2's labels decode to %q", side, s)
		}
		if s := decode(b.unmasked(2)); s != " 4<|im_end|>" { // the completion and EOS
			t.Errorf("side %d: the completion's labels decode to %q", side, s)
		}
		if !reflect.DeepEqual(b.unmasked(3), b.real(3)) {
			t.Errorf("side %d: a text line's labels %v, its tokens %v", side, b.unmasked(3), b.real(3))
		}
		rendered := must(tok.ApplyChat(ChatAuto, convs[0], false))
		if want := must(tok.Encode(rendered, &plainEncodeOptions)); !reflect.DeepEqual(b.real(0), want) {
			t.Errorf("side %d: row 0 %v, the rendered conversation %v", side, b.real(0), want)
		}
		pads := 0
		for r := range b.ids {
			n, width := len(b.real(r)), len(b.ids[r])
			for k := range b.ids[r] {
				padZone := k >= n
				if side == SideLeft {
					padZone = k < width-n
				}
				if want := map[bool]int64{true: 0, false: 1}[padZone]; b.mask[r][k] != want {
					t.Fatalf("side %d row %d column %d: mask %d, want %d (%v)", side, r, k, b.mask[r][k], want, b.mask[r])
				}
				if padZone {
					pads++
					if b.ids[r][k] != 1201 || b.labels[r][k] != -100 {
						t.Fatalf("side %d row %d column %d: padding id %d label %d", side, r, k, b.ids[r][k], b.labels[r][k])
					}
				}
			}
		}
		if pads == 0 {
			t.Fatal("no padding in the batches")
		}
		// nil options are the defaults
		if side == SideRight {
			d := loadEpoch(t, must(ctx.NewSFTDataLoader(tok, path, nil, &lo)), false)
			if !reflect.DeepEqual(d, b) {
				t.Error("nil SFTOptions differ from DefaultSFTOptions()")
			}
		}
		ok(t, l.Close())
	}
	// nil loader options are DefaultDataLoaderOptions(): batches of one
	if n := must(must(ctx.NewSFTDataLoader(tok, path, nil, nil)).NumBatches()); n != 4 {
		t.Fatalf("%d batches of the default size 1", n)
	}

	// labels on every token; MaxLength cuts; packing makes full blocks
	so := DefaultSFTOptions()
	so.CompletionOnlyLoss, so.MaxLength = false, 8
	b := loadEpoch(t, must(ctx.NewSFTDataLoader(tok, path, &so, &lo)), true)
	for r := range b.ids {
		if len(b.ids[r]) > 8 {
			t.Fatalf("row %d of %d tokens", r, len(b.ids[r]))
		}
		for k, id := range b.ids[r] {
			want := int64(-100)
			if b.mask[r][k] != 0 {
				want = id
			}
			if b.labels[r][k] != want {
				t.Fatalf("row %d column %d: label %d, want %d", r, k, b.labels[r][k], want)
			}
		}
	}
	so.Packing = true
	p := loadEpoch(t, must(ctx.NewSFTDataLoader(tok, path, &so, &lo)), false)
	total := 0
	for r := range p.ids {
		n := len(p.real(r))
		if r+1 < len(p.ids) && n != 8 {
			t.Fatalf("block %d holds %d tokens", r, n)
		}
		total += n
	}
	if total <= 40 {
		t.Fatalf("%d tokens packed", total)
	}
}

// TestSFTTrainsWithTheMask: a small Qwen2-shaped model (the tokenizer's vocabulary) trains
// on left-padded fine-tuning batches passed to LMForward with their mask: the loss falls.
func TestSFTTrainsWithTheMask(t *testing.T) {
	convs := tokConversations(t)
	path := sftJSONL(t, convs)
	cfg := filepath.Join(t.TempDir(), "config.json")
	ok(t, os.WriteFile(cfg, []byte(`{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 1203,
 "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
 "initializer_range": 0.2, "tie_word_embeddings": true, "eos_token_id": 1200}`), 0o644))
	ctx := newCtx(t, nil)
	tok := loadTok(t, tokFixture("qwen2"))
	m := must(ctx.NewLM(cfg, nil))
	ao := DefaultAdamWOptions()
	ao.LR, ao.WeightDecay = 1e-2, 0
	opt := must(ctx.NewAdamW(m, &ao))
	so := DefaultSFTOptions()
	so.PaddingSide = SideLeft
	lo := DefaultDataLoaderOptions()
	lo.BatchSize, lo.Shuffle = 4, false
	l := must(ctx.NewSFTDataLoader(tok, path, &so, &lo))
	ok(t, ctx.Prepare(m, opt, nil, l))
	var losses []float64
	for epoch := 0; epoch < 8; epoch++ {
		for l.Next() {
			ids, labels := l.Batch()
			mask := must(l.AttentionMask())
			out := must(m.LMForward(ids, mask, labels))
			if out.NumTokens == 0 {
				t.Fatal("no target")
			}
			losses = append(losses, must(out.Loss.Item()))
			ok(t, ctx.Backward(out.Loss))
			must(ctx.Step())
			out.Loss.Close()
			out.Logits.Close()
			mask.Close()
		}
		ok(t, l.Err())
	}
	if len(losses) != 8 || losses[7] >= losses[0] {
		t.Fatalf("the loss did not fall: %v", losses)
	}
}

// TestSFTErrors: the library's status and message for each bad file or option.
func TestSFTErrors(t *testing.T) {
	convs := tokConversations(t)
	ctx := newCtx(t, nil)
	tok := loadTok(t, tokFixture("qwen2"))
	good := sftJSONL(t, convs)
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		ok(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	_, err := ctx.NewSFTDataLoader(tok, file("bad.jsonl", "{\"text\": \"a\"}\n{oops\n"), nil, nil)
	e := wantErr(t, err, ErrFormat, "bad.jsonl:2")
	if e.Op != "accel_sft_dataloader_create" {
		t.Fatalf("%+v", e)
	}
	_, err = ctx.NewSFTDataLoader(tok, file("shape.jsonl", "{\"text\": \"ok\"}\n{\"messages\": 3}\n"), nil, nil)
	wantErr(t, err, ErrFormat, "shape.jsonl:2")
	_, err = ctx.NewSFTDataLoader(tok, file("none.jsonl", "{\"input\": \"a\"}\n"), nil, nil)
	wantErr(t, err, ErrFormat, "none.jsonl:1")
	_, err = ctx.NewSFTDataLoader(tok, file("utf8.jsonl", "{\"text\": \"a\xff\"}\n"), nil, nil)
	wantErr(t, err, ErrFormat, "UTF-8")
	_, err = ctx.NewSFTDataLoader(tok, file("empty.jsonl", "\n\n"), nil, nil)
	wantErr(t, err, ErrInvalidArgument, "no example")
	_, err = ctx.NewSFTDataLoader(tok, filepath.Join(dir, "missing.jsonl"), nil, nil)
	wantErr(t, err, ErrIO, "missing.jsonl")
	_, err = ctx.NewSFTDataLoader(tok, "", nil, nil)
	wantErr(t, err, ErrInvalidArgument, "path")
	// a conversation the template refuses: Gemma has no system role
	gemma := loadTok(t, tokFixture("gemma"))
	sys := writeLines(t, "sys.jsonl", map[string]interface{}{"messages": []map[string]string{
		{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}}})
	_, err = ctx.NewSFTDataLoader(gemma, sys, nil, nil)
	e = wantErr(t, err, ErrInvalidArgument, "sys.jsonl:1")
	wantErr(t, e, ErrInvalidArgument, "system role")
	for _, c := range []struct {
		mod  func(*SFTOptions)
		want string
	}{
		{func(o *SFTOptions) { o.MaxLength = -1 }, "max_length"},
		{func(o *SFTOptions) { o.Packing = true }, "packing"},
		{func(o *SFTOptions) { o.PadToMultipleOf = -2 }, "pad_to_multiple_of"},
		{func(o *SFTOptions) { o.PadID = -2 }, "pad_id"},
		{func(o *SFTOptions) { o.PadID = 5000 }, "5000"},
		{func(o *SFTOptions) { o.ChatFormat = ChatFormat(6) }, "chat_format 6"},
		{func(o *SFTOptions) { o.ChatFormat = ChatFormat(-1) }, "chat_format -1"},
		{func(o *SFTOptions) { o.PaddingSide = Side(2) }, "padding_side 2"},
		{func(o *SFTOptions) { o.PaddingSide = Side(-1) }, "padding_side -1"},
	} {
		o := DefaultSFTOptions()
		c.mod(&o)
		_, err = ctx.NewSFTDataLoader(tok, good, &o, nil)
		wantErr(t, err, ErrInvalidArgument, c.want)
	}
	bad := DefaultDataLoaderOptions()
	bad.BatchSize = 0
	_, err = ctx.NewSFTDataLoader(tok, good, nil, &bad)
	wantErr(t, err, ErrInvalidArgument, "batch_size")
}

// TestAttentionMask: the mask of NewLMDataLoader's batches on either side; what
// AttentionMask refuses (no batch yet, the end of an epoch, a loader of tensors).
func TestAttentionMask(t *testing.T) {
	ctx := newCtx(t, nil)
	toks := must(NewTensor([]int64{5, 6, 7, 8, 9, 10, 11, 12, 13}, 9))
	offs := must(NewTensor([]int64{0, 2, 7, 9}, 4)) // sequences of 2, 5 and 2 tokens
	lo := DefaultDataLoaderOptions()
	lo.BatchSize = 3
	for _, side := range []Side{SideRight, SideLeft} {
		lm := DefaultLMDataOptions()
		lm.PaddingSide, lm.PadID = side, 1
		l := must(ctx.NewLMDataLoader(toks, offs, lm, lo))
		_, err := l.AttentionMask()
		wantErr(t, err, ErrInvalidState, "no batch")
		b := loadEpoch(t, l, true)
		want := loaded{
			ids:    [][]int64{{5, 6, 1, 1, 1}, {7, 8, 9, 10, 11}, {12, 13, 1, 1, 1}},
			labels: [][]int64{{5, 6, -100, -100, -100}, {7, 8, 9, 10, 11}, {12, 13, -100, -100, -100}},
			mask:   [][]int64{{1, 1, 0, 0, 0}, {1, 1, 1, 1, 1}, {1, 1, 0, 0, 0}},
		}
		if side == SideLeft {
			want = loaded{
				ids:    [][]int64{{1, 1, 1, 5, 6}, {7, 8, 9, 10, 11}, {1, 1, 1, 12, 13}},
				labels: [][]int64{{-100, -100, -100, 5, 6}, {7, 8, 9, 10, 11}, {-100, -100, -100, 12, 13}},
				mask:   [][]int64{{0, 0, 0, 1, 1}, {1, 1, 1, 1, 1}, {0, 0, 0, 1, 1}},
			}
		}
		if !reflect.DeepEqual(b, want) {
			t.Fatalf("side %d:\n  got  %v\n  want %v", side, b, want)
		}
		_, err = l.AttentionMask() // after the end of the epoch
		wantErr(t, err, ErrInvalidState, "no batch")
	}
	lm := DefaultLMDataOptions()
	lm.PaddingSide = Side(5)
	_, err := ctx.NewLMDataLoader(toks, offs, lm, lo)
	wantErr(t, err, ErrInvalidArgument, "padding_side 5")
	xs := must(NewTensor(make([]float32, 8), 4, 2))
	l := must(ctx.NewDataLoader(xs, nil, DefaultDataLoaderOptions()))
	if !l.Next() {
		t.Fatal(l.Err())
	}
	_, err = l.AttentionMask()
	wantErr(t, err, ErrInvalidArgument, "no attention mask")
}
