package accel

// Tokenizers against Hugging Face tokenizers and SentencePiece (tests/fixtures/tokenizers,
// made by scripts/lm_fixtures --tokenizers; its README says how): every corpus string (the
// "hex" entries as raw bytes, not UTF-8) gives the ids and the decoded text the fixtures
// hold, batches are padded and truncated as tokenizers' enable_padding/enable_truncation do,
// and the .model files give SentencePiece's ids. Then the errors and concurrent use.

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func tokFixture(parts ...string) string {
	return filepath.Join(append([]string{"..", "..", "tests", "fixtures", "tokenizers"}, parts...)...)
}

// tokCorpus reads corpus.json: each entry's text, or its "hex" bytes (not UTF-8) as a Go
// string holding those bytes.
func tokCorpus(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(tokFixture("corpus.json"))
	ok(t, err)
	var entries []struct {
		Text *string `json:"text"`
		Hex  *string `json:"hex"`
	}
	ok(t, json.Unmarshal(raw, &entries))
	out := make([]string, len(entries))
	hexes := 0
	for i, e := range entries {
		switch {
		case e.Text != nil:
			out[i] = *e.Text
		case e.Hex != nil:
			b, err := hex.DecodeString(*e.Hex)
			ok(t, err)
			out[i] = string(b)
			hexes++
		default:
			t.Fatalf("corpus entry %d has neither text nor hex", i)
		}
	}
	if len(out) < 300 || hexes == 0 {
		t.Fatalf("%d strings, %d of them bytes: not the corpus the README describes", len(out), hexes)
	}
	return out
}

// tokExpected is a family's expected.json.
type tokExpected struct {
	AddSpecial [][]int64 `json:"add_special"`
	Plain      [][]int64 `json:"plain"`
	Decode     []string  `json:"decode"`
	DecodeSkip []string  `json:"decode_skip"`
	Batch      struct {
		Texts     []int `json:"texts"`
		PadID     int64 `json:"pad_id"`
		MaxLength int64 `json:"max_length"`
		Cases     []struct {
			PaddingSide    string    `json:"padding_side"`
			TruncationSide string    `json:"truncation_side"`
			IDs            [][]int64 `json:"ids"`
			Mask           [][]int64 `json:"mask"`
		} `json:"cases"`
	} `json:"batch"`
	SentencePiece *struct {
		IDs    [][]int64 `json:"ids"`
		Decode []string  `json:"decode"`
	} `json:"sentencepiece"`
	// Chat: what transformers' apply_chat_template renders with the family's template, for
	// each conversation of conversations.json and add_generation_prompt: the text and its
	// ids, or an error (a conversation the template refuses).
	Chat []struct {
		Conversation        int     `json:"conversation"`
		AddGenerationPrompt bool    `json:"add_generation_prompt"`
		Text                string  `json:"text"`
		IDs                 []int64 `json:"ids"`
		Error               *string `json:"error"`
	} `json:"chat"`
}

func readExpected(t *testing.T, family string) tokExpected {
	t.Helper()
	raw, err := os.ReadFile(tokFixture(family, "expected.json"))
	ok(t, err)
	var e tokExpected
	ok(t, json.Unmarshal(raw, &e))
	return e
}

func loadTok(t *testing.T, path string) *Tokenizer {
	t.Helper()
	tok, err := LoadTokenizer(path)
	ok(t, err)
	t.Cleanup(func() { tok.Close() })
	return tok
}

func side(s string) Side {
	if s == "left" {
		return SideLeft
	}
	return SideRight
}

// checkCorpus encodes every string with and without the special tokens and decodes the
// expected ids with and without them; it reports the first few differences and their count.
func checkCorpus(t *testing.T, tok *Tokenizer, texts []string, exp tokExpected) {
	t.Helper()
	if len(exp.AddSpecial) != len(texts) || len(exp.Plain) != len(texts) || len(exp.Decode) != len(texts) ||
		len(exp.DecodeSkip) != len(texts) {
		t.Fatalf("expected.json holds %d/%d/%d/%d entries for %d strings", len(exp.AddSpecial), len(exp.Plain),
			len(exp.Decode), len(exp.DecodeSkip), len(texts))
	}
	add, plain := DefaultEncodeOptions(), DefaultEncodeOptions()
	add.ReplaceInvalidUTF8, plain.ReplaceInvalidUTF8 = true, true // valid UTF-8 is unchanged by it
	plain.AddSpecialTokens = false
	differing, tokens := 0, 0
	for i, s := range texts {
		var gotAdd, gotPlain []int64
		var err error
		if i%2 == 0 { // both entry points, on alternate strings
			gotAdd, err = tok.Encode(s, &add)
			ok(t, err)
			gotPlain, err = tok.Encode(s, &plain)
		} else {
			gotAdd, err = tok.EncodeBytes([]byte(s), &add)
			ok(t, err)
			gotPlain, err = tok.EncodeBytes([]byte(s), &plain)
		}
		ok(t, err)
		d, err := tok.Decode(exp.AddSpecial[i], false)
		ok(t, err)
		ds, err := tok.Decode(exp.AddSpecial[i], true)
		ok(t, err)
		tokens += len(exp.AddSpecial[i])
		if !reflect.DeepEqual(gotAdd, exp.AddSpecial[i]) || !reflect.DeepEqual(gotPlain, exp.Plain[i]) ||
			d != exp.Decode[i] || ds != exp.DecodeSkip[i] {
			if differing++; differing <= 5 {
				t.Errorf("string %d %q:\n  accel %v\n  hf    %v\n  plain accel %v\n  plain hf    %v\n  decode accel %q\n  decode hf    %q\n  skip accel %q\n  skip hf    %q",
					i, s, gotAdd, exp.AddSpecial[i], gotPlain, exp.Plain[i], d, exp.Decode[i], ds, exp.DecodeSkip[i])
			}
		}
	}
	t.Logf("%d strings, %d tokens, %d differing", len(texts), tokens, differing)
	if differing != 0 {
		t.Fatalf("%d of %d strings differ from Hugging Face tokenizers", differing, len(texts))
	}
}

// checkBatches: the padded, truncated batches of every case (padding and truncation on
// each side), ids and mask.
func checkBatches(t *testing.T, tok *Tokenizer, texts []string, exp tokExpected) {
	t.Helper()
	b := exp.Batch
	var batch []string
	for _, i := range b.Texts {
		batch = append(batch, texts[i])
	}
	if len(b.Cases) != 4 {
		t.Fatalf("%d batch cases", len(b.Cases))
	}
	for _, c := range b.Cases {
		o := DefaultEncodeOptions()
		o.MaxLength, o.PadID = b.MaxLength, b.PadID
		o.PaddingSide, o.TruncationSide = side(c.PaddingSide), side(c.TruncationSide)
		ids, mask, err := tok.EncodeBatch(batch, &o)
		ok(t, err)
		shape := []int64{int64(len(c.IDs)), int64(len(c.IDs[0]))}
		if s := must(ids.Shape()); !reflect.DeepEqual(s, shape) {
			t.Fatalf("padding %s, truncation %s: ids %v, want %v", c.PaddingSide, c.TruncationSide, s, shape)
		}
		if s := must(mask.Shape()); !reflect.DeepEqual(s, shape) {
			t.Fatalf("padding %s, truncation %s: mask %v, want %v", c.PaddingSide, c.TruncationSide, s, shape)
		}
		var wantIDs, wantMask []int64
		for r := range c.IDs {
			wantIDs = append(wantIDs, c.IDs[r]...)
			wantMask = append(wantMask, c.Mask[r]...)
		}
		if got := must(ToSlice[int64](ids)); !reflect.DeepEqual(got, wantIDs) {
			t.Errorf("padding %s, truncation %s: ids\n  accel %v\n  hf    %v", c.PaddingSide, c.TruncationSide, got, wantIDs)
		}
		if got := must(ToSlice[int64](mask)); !reflect.DeepEqual(got, wantMask) {
			t.Errorf("padding %s, truncation %s: mask\n  accel %v\n  hf    %v", c.PaddingSide, c.TruncationSide, got, wantMask)
		}
		ids.Close()
		mask.Close()
	}
}

// TestTokenizerFamilies: every family's tokenizer.json (loaded from its directory) gives
// Hugging Face tokenizers' ids, text and batches on the whole corpus; each .model gives
// SentencePiece's ids and text.
func TestTokenizerFamilies(t *testing.T) {
	texts := tokCorpus(t)
	for _, family := range []string{"gpt2", "smollm2", "llama3", "qwen2", "llama2", "mistral", "phi3", "gemma"} {
		family := family
		t.Run(family, func(t *testing.T) {
			exp := readExpected(t, family)
			tok := loadTok(t, tokFixture(family))
			checkCorpus(t, tok, texts, exp)
			checkBatches(t, tok, texts, exp)
			model := tokFixture(family, "tokenizer.model")
			if _, err := os.Stat(model); err != nil {
				if exp.SentencePiece != nil {
					t.Fatalf("expected.json has SentencePiece ids but %v", err)
				}
				return
			}
			if exp.SentencePiece == nil || len(exp.SentencePiece.IDs) != len(texts) || len(exp.SentencePiece.Decode) != len(texts) {
				t.Fatal("expected.json lacks SentencePiece's ids or text")
			}
			sp := loadTok(t, model)
			o := DefaultEncodeOptions()
			o.AddSpecialTokens, o.ReplaceInvalidUTF8 = false, true
			differing := 0
			for i, s := range texts {
				got, err := sp.Encode(s, &o)
				ok(t, err)
				want := exp.SentencePiece.IDs[i]
				d, err := sp.Decode(want, true)
				ok(t, err)
				if !reflect.DeepEqual(got, want) || d != exp.SentencePiece.Decode[i] {
					if differing++; differing <= 5 {
						t.Errorf("%s.model string %d %q:\n  accel %v\n  spm   %v\n  decode %q, spm %q", family, i, s, got,
							want, d, exp.SentencePiece.Decode[i])
					}
				}
			}
			t.Logf("tokenizer.model: %d strings, %d differing from SentencePiece", len(texts), differing)
			if differing != 0 {
				t.Fatalf("%d strings differ from SentencePiece", differing)
			}
		})
	}
}

// TestTokenizerFileAndModelPaths: a tokenizer.json named directly gives what its directory
// gives; a .model's special tokens come from the tokenizer_config.json beside it, and adding
// them adds Llama's BOS.
func TestTokenizerFileAndModelPaths(t *testing.T) {
	texts := tokCorpus(t)
	exp := readExpected(t, "llama2")
	file := loadTok(t, tokFixture("llama2", "tokenizer.json"))
	sp := loadTok(t, tokFixture("llama2", "tokenizer.model"))
	for i := 0; i < 20; i++ {
		got := must(file.Encode(texts[i], nil))
		if !reflect.DeepEqual(got, exp.AddSpecial[i]) {
			t.Fatalf("string %d: %v, want %v", i, got, exp.AddSpecial[i])
		}
		withBOS := must(sp.Encode(texts[i], nil)) // the defaults: special tokens added
		want := append([]int64{1}, exp.SentencePiece.IDs[i]...)
		if !reflect.DeepEqual(withBOS, want) {
			t.Fatalf(".model string %d with BOS: %v, want %v", i, withBOS, want)
		}
	}
	for _, tok := range []*Tokenizer{file, sp} {
		if n := must(tok.VocabSize()); n != 1000 {
			t.Fatalf("vocab size %d", n)
		}
		if b, e, u := must(tok.BOSID()), must(tok.EOSID()), must(tok.UnkID()); b != 1 || e != 2 || u != 0 {
			t.Fatalf("bos %d eos %d unk %d", b, e, u)
		}
	}
}

// TestTokenizerVocabulary: the special ids, token <-> id both ways, the special flag.
func TestTokenizerVocabulary(t *testing.T) {
	type special struct{ bos, eos, pad, unk int64 }
	for _, c := range []struct {
		family string
		vocab  int64
		ids    special
	}{
		{"qwen2", 1203, special{-1, 1200, 1201, -1}},
		{"llama2", 1000, special{1, 2, -1, 0}},
		{"gemma", 1000, special{2, 1, 0, 3}},
	} {
		tok := loadTok(t, tokFixture(c.family))
		if n := must(tok.VocabSize()); n != c.vocab {
			t.Errorf("%s: vocab size %d, want %d", c.family, n, c.vocab)
		}
		got := special{must(tok.BOSID()), must(tok.EOSID()), must(tok.PadID()), must(tok.UnkID())}
		if got != c.ids {
			t.Errorf("%s: special ids %+v, want %+v", c.family, got, c.ids)
		}
		if id := must(tok.SpecialID(TokenEOS)); id != c.ids.eos {
			t.Errorf("%s: SpecialID(TokenEOS) %d", c.family, id)
		}
		// every id's text maps back to it (the first of equal texts)
		for id := int64(0); id < c.vocab; id++ {
			text, _, err := tok.IDToToken(id)
			ok(t, err)
			if back := must(tok.TokenToID(text)); back != id {
				t.Fatalf("%s: id %d is %q, which maps to %d", c.family, id, text, back)
			}
		}
		if id := must(tok.TokenToID("no such token, surely")); id != -1 {
			t.Errorf("%s: an unknown token has id %d", c.family, id)
		}
	}
	qwen := loadTok(t, tokFixture("qwen2"))
	text, sp, err := qwen.IDToToken(1202)
	ok(t, err)
	if text != "<|im_start|>" || !sp {
		t.Fatalf("id 1202: %q special %v", text, sp)
	}
	if id := must(qwen.TokenToID("<|im_end|>")); id != 1200 {
		t.Fatal(id)
	}
	ids := must(qwen.Encode("<|im_start|>user\nhi<|im_end|>", nil))
	if ids[0] != 1202 || ids[len(ids)-1] != 1200 {
		t.Fatalf("special tokens in the text: %v", ids)
	}
	if s := must(qwen.Decode(ids, true)); s != "user\nhi" {
		t.Fatalf("decoded without specials: %q", s)
	}
	gemma := loadTok(t, tokFixture("gemma"))
	text, sp, err = gemma.IDToToken(5) // an added token that is not special
	ok(t, err)
	if text != "<start_of_turn>" || sp {
		t.Fatalf("gemma id 5: %q special %v", text, sp)
	}
}

// TestTokenizerEncodeOptions: the defaults, truncation, padding rules, text with NUL bytes,
// the empty text, and a decode longer than the binding's first guess of its size.
func TestTokenizerEncodeOptions(t *testing.T) {
	d := DefaultEncodeOptions()
	want := EncodeOptions{AddSpecialTokens: true, ReplaceInvalidUTF8: false, MaxLength: 0, TruncationSide: SideRight,
		PaddingSide: SideRight, PadToMaxLength: false, PadToMultipleOf: 0, PadID: -1}
	if d != want {
		t.Fatalf("defaults %+v, want %+v", d, want)
	}
	if SideRight != 0 || SideLeft != 1 || TokenBOS != 0 || TokenUnk != 3 {
		t.Fatal("enum values differ from accel.h")
	}
	tok := loadTok(t, tokFixture("llama2"))
	texts := tokCorpus(t)
	exp := readExpected(t, "llama2")
	full := exp.AddSpecial[1]
	o := DefaultEncodeOptions()
	o.MaxLength = 5
	if got := must(tok.Encode(texts[1], &o)); !reflect.DeepEqual(got, full[:5]) {
		t.Fatalf("truncated right: %v, want %v", got, full[:5])
	}
	// padding to a fixed width, rounded to a multiple; the tokenizer has no padding token: 0
	o = DefaultEncodeOptions()
	o.MaxLength, o.PadToMaxLength, o.PadToMultipleOf = 30, true, 8
	ids, mask, err := tok.EncodeBatch([]string{texts[0], texts[2]}, &o)
	ok(t, err)
	if s := must(ids.Shape()); !reflect.DeepEqual(s, []int64{2, 32}) {
		t.Fatalf("shape %v", s)
	}
	row := must(ToSlice[int64](ids))[:32]
	m := must(ToSlice[int64](mask))[:32]
	n := len(exp.AddSpecial[0])
	if !reflect.DeepEqual(row[:n], exp.AddSpecial[0]) || row[n] != 0 || m[n-1] != 1 || m[n] != 0 {
		t.Fatalf("row 0 %v mask %v", row, m)
	}
	ids.Close()
	mask.Close()
	// a NUL byte is text like any other; the empty text gives BOS alone
	nul := must(tok.Encode("a\x00b", nil))
	if len(nul) < 3 || nul[0] != 1 {
		t.Fatalf("text with a NUL byte: %v", nul)
	}
	if e := must(tok.Encode("", nil)); !reflect.DeepEqual(e, []int64{1}) {
		t.Fatalf("empty text: %v", e)
	}
	if e := must(tok.EncodeBytes(nil, &plainEncodeOptions)); len(e) != 0 {
		t.Fatalf("empty text without special tokens: %v", e)
	}
	if s := must(tok.Decode(nil, false)); s != "" {
		t.Fatalf("no ids: %q", s)
	}
	// a batch with empty texts only
	ids, mask, err = tok.EncodeBatch([]string{"", ""}, &plainEncodeOptions)
	ok(t, err)
	if nm := must(ids.Numel()); nm != 0 {
		t.Fatalf("%d ids for empty texts", nm)
	}
	ids.Close()
	mask.Close()

	// decoded text longer than the first buffer the binding tries (8 bytes an id + 64)
	qwen := loadTok(t, tokFixture("qwen2"))
	best, bestText := int64(-1), ""
	vocab := must(qwen.VocabSize())
	for id := int64(0); id < vocab; id++ {
		if _, sp, _ := qwen.IDToToken(id); sp {
			continue
		}
		if s := must(qwen.Decode([]int64{id}, false)); len(s) > len(bestText) {
			best, bestText = id, s
		}
	}
	if len(bestText) <= 8 {
		t.Fatalf("the longest token decodes to %q", bestText)
	}
	long := make([]int64, 200)
	for i := range long {
		long[i] = best
	}
	if s := must(qwen.Decode(long, false)); s != strings.Repeat(bestText, 200) {
		t.Fatalf("long decode: %d bytes, want %d", len(s), 200*len(bestText))
	}
}

// plainEncodeOptions: the defaults without special tokens.
var plainEncodeOptions = func() EncodeOptions {
	o := DefaultEncodeOptions()
	o.AddSpecialTokens = false
	return o
}()

// TestTokenizerErrors: what bad input gets, with the library's status and message.
func TestTokenizerErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing", "tokenizer.json")
	_, err := LoadTokenizer(missing)
	e := wantErr(t, err, ErrIO, "does not exist")
	if !strings.Contains(e.Message, missing) || e.Op != "accel_tokenizer_load" {
		t.Fatalf("the path is not named: %+v", e)
	}
	_, err = LoadTokenizer(t.TempDir()) // a directory with neither file
	wantErr(t, err, ErrIO, "neither tokenizer.json nor tokenizer.model")
	bad := filepath.Join(t.TempDir(), "tokenizer.json")
	ok(t, os.WriteFile(bad, []byte(`{"model": `), 0o644))
	_, err = LoadTokenizer(bad)
	wantErr(t, err, ErrFormat, "tokenizer.json")
	_, err = LoadTokenizer("")
	wantErr(t, err, ErrInvalidArgument, "empty")

	tok := loadTok(t, tokFixture("llama2"))
	// invalid UTF-8: refused, naming the byte offset; replaced when asked
	_, err = tok.Encode("abc\xffdef", nil)
	e = wantErr(t, err, ErrInvalidArgument, "at byte 3")
	if e.Op != "accel_tokenizer_encode" || !strings.Contains(e.Error(), "ACCEL_ERR_INVALID_ARGUMENT") {
		t.Fatalf("%+v", e)
	}
	_, err = tok.EncodeBytes([]byte{'o', 'k', 0xc3, 0x28}, nil)
	wantErr(t, err, ErrInvalidArgument, "at byte 2")
	_, _, err = tok.EncodeBatch([]string{"fine", "x\xe2\x82"}, nil)
	wantErr(t, err, ErrInvalidArgument, "texts[1]")
	o := DefaultEncodeOptions()
	o.ReplaceInvalidUTF8 = true
	must(tok.Encode("abc\xffdef", &o))
	// decode and id lookups out of range
	_, err = tok.Decode([]int64{1, 1000}, false)
	wantErr(t, err, ErrInvalidArgument, "ids[1] = 1000")
	_, err = tok.Decode([]int64{-1}, true)
	wantErr(t, err, ErrInvalidArgument, "ids[0] = -1")
	_, _, err = tok.IDToToken(1000)
	wantErr(t, err, ErrInvalidArgument, "outside [0, 1000)")
	_, _, err = tok.IDToToken(-5)
	wantErr(t, err, ErrInvalidArgument, "id -5")
	_, err = tok.SpecialID(SpecialToken(9))
	wantErr(t, err, ErrInvalidArgument, "which 9")
	// options outside their domain
	for _, c := range []struct {
		mod  func(*EncodeOptions)
		want string
	}{
		{func(o *EncodeOptions) { o.MaxLength = -1 }, "max_length -1"},
		{func(o *EncodeOptions) { o.PadToMultipleOf = -2 }, "pad_to_multiple_of"},
		{func(o *EncodeOptions) { o.PadID = -2 }, "pad_id"},
		{func(o *EncodeOptions) { o.TruncationSide = Side(7) }, "truncation_side"},
		{func(o *EncodeOptions) { o.PaddingSide = Side(-1) }, "padding_side"},
	} {
		o := DefaultEncodeOptions()
		c.mod(&o)
		_, err = tok.Encode("hello", &o)
		wantErr(t, err, ErrInvalidArgument, c.want)
	}
	o = DefaultEncodeOptions()
	o.PadToMaxLength = true
	_, _, err = tok.EncodeBatch([]string{"a"}, &o)
	wantErr(t, err, ErrInvalidArgument, "pad_to_max_length")
	o = DefaultEncodeOptions()
	o.PadID = 5000
	_, _, err = tok.EncodeBatch([]string{"a"}, &o)
	wantErr(t, err, ErrInvalidArgument, "outside the vocabulary")
	_, _, err = tok.EncodeBatch(nil, nil)
	wantErr(t, err, ErrInvalidArgument, "count is 0")
}

// TestTokenizerConcurrentUse: goroutines encode, decode and batch on one tokenizer at once
// (no lock: it is immutable), each getting the fixtures' ids.
func TestTokenizerConcurrentUse(t *testing.T) {
	texts := tokCorpus(t)
	exp := readExpected(t, "qwen2")
	tok := loadTok(t, tokFixture("qwen2"))
	o := DefaultEncodeOptions()
	o.ReplaceInvalidUTF8 = true
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(texts); i += 3 {
				got, err := tok.Encode(texts[i], &o)
				if err != nil {
					errs <- err
					return
				}
				if !reflect.DeepEqual(got, exp.AddSpecial[i]) {
					errs <- errors.New("string " + texts[i] + ": other ids on a goroutine")
					return
				}
				if d, err := tok.Decode(got, false); err != nil || d != exp.Decode[i] {
					errs <- errors.New("decode of " + texts[i] + " differs on a goroutine")
					return
				}
				if i%20 == 0 {
					ids, mask, err := tok.EncodeBatch(texts[i:i+3], &o)
					if err != nil {
						errs <- err
						return
					}
					ids.Close()
					mask.Close()
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTokenizerFinalizer: dropped tokenizers (and a copy of one's value kept past the
// original) are released by their finalizers; a kept copy works.
func TestTokenizerFinalizer(t *testing.T) {
	var kept Tokenizer
	for i := 0; i < 10; i++ {
		tok := must(LoadTokenizer(tokFixture("gpt2")))
		must(tok.Encode("dropped", nil))
		if i == 3 {
			kept = *tok
		}
	}
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	if ids := must(kept.Encode("hello", nil)); len(ids) == 0 {
		t.Fatal("no ids from the kept copy")
	}
	ok(t, kept.Close())
}

// tokConversations reads conversations.json (role/content objects fill ChatMessage).
func tokConversations(t *testing.T) [][]ChatMessage {
	t.Helper()
	raw, err := os.ReadFile(tokFixture("conversations.json"))
	ok(t, err)
	var convs [][]ChatMessage
	ok(t, json.Unmarshal(raw, &convs))
	if len(convs) < 3 || convs[1][0].Role != "system" || convs[0][1].Content == "" {
		t.Fatalf("not the conversations the fixtures' README describes: %+v", convs)
	}
	return convs
}

// chatFamilies: the families whose expected.json has a "chat" list, and the format their
// chat_template is.
var chatFamilies = []struct {
	family string
	format ChatFormat
}{
	{"qwen2", ChatChatML}, {"smollm2", ChatChatML}, {"llama3", ChatLlama3}, {"gemma", ChatGemma},
	{"phi3", ChatPhi3}, {"mistral", ChatMistral},
}

// TestTokenizerChat: ApplyChat renders every conversation, with and without the generation
// prompt, as transformers' apply_chat_template does with each family's template (the text
// and its ids, from ChatAuto and from the format named), and refuses what the template
// refuses (ErrInvalidArgument); a tokenizer without chat_template renders a named format
// only; a conversation longer than the binding's first guess of the size; concurrent use.
func TestTokenizerChat(t *testing.T) {
	if ChatAuto != 0 || ChatChatML != 1 || ChatLlama3 != 2 || ChatGemma != 3 || ChatPhi3 != 4 || ChatMistral != 5 {
		t.Fatal("enum values differ from accel.h")
	}
	convs := tokConversations(t)
	checked, refused, wantChecked, wantRefused := 0, 0, 0, 0
	for _, f := range chatFamilies {
		exp := readExpected(t, f.family)
		if len(exp.Chat) != 2*len(convs) {
			t.Fatalf("%s: %d chat cases for %d conversations", f.family, len(exp.Chat), len(convs))
		}
		tok := loadTok(t, tokFixture(f.family))
		for _, c := range exp.Chat {
			if c.Error != nil {
				wantRefused += 2
			} else {
				wantChecked += 2
			}
			for _, format := range []ChatFormat{ChatAuto, f.format} {
				text, err := tok.ApplyChat(format, convs[c.Conversation], c.AddGenerationPrompt)
				if c.Error != nil {
					e := wantErr(t, err, ErrInvalidArgument, "accel_tokenizer_apply_chat")
					if e.Op != "accel_tokenizer_apply_chat" || text != "" {
						t.Fatalf("%s conversation %d: %+v, text %q", f.family, c.Conversation, e, text)
					}
					refused++
					continue
				}
				ok(t, err)
				if text != c.Text {
					t.Errorf("%s (format %d) conversation %d, generation prompt %v:\n  accel %q\n  hf    %q",
						f.family, format, c.Conversation, c.AddGenerationPrompt, text, c.Text)
				}
				if ids := must(tok.Encode(text, &plainEncodeOptions)); !reflect.DeepEqual(ids, c.IDs) {
					t.Errorf("%s conversation %d: ids\n  accel %v\n  hf    %v", f.family, c.Conversation, ids, c.IDs)
				}
				checked++
			}
		}
	}
	t.Logf("%d renderings equal transformers', %d refused as it refuses them", checked, refused)
	if checked != wantChecked || refused != wantRefused || checked < 56 {
		t.Fatalf("%d renderings checked, %d refused; the fixtures hold %d and %d", checked, refused, wantChecked, wantRefused)
	}

	// gpt2's tokenizer has no chat_template: ChatAuto is refused, a named format renders
	gpt2 := loadTok(t, tokFixture("gpt2"))
	_, err := gpt2.ApplyChat(ChatAuto, convs[0], false)
	wantErr(t, err, ErrInvalidArgument, "chat_template")
	text := must(gpt2.ApplyChat(ChatChatML, convs[0], true))
	if !strings.HasPrefix(text, "<|im_start|>user\n") || !strings.HasSuffix(text, "<|im_start|>assistant\n") {
		t.Fatalf("ChatML on gpt2: %q", text)
	}

	// longer than the first buffer the binding tries: the library says the size, a second
	// call renders it (Llama 3's markers are more bytes a message than the guess allows)
	llama3 := loadTok(t, tokFixture("llama3"))
	var long []ChatMessage
	want := "<|begin_of_text|>"
	for i := 0; i < 300; i++ {
		m := ChatMessage{Role: "user", Content: fmt.Sprintf("q%d", i)}
		if i%2 == 1 {
			m = ChatMessage{Role: "assistant", Content: fmt.Sprintf("a%d", i)}
		}
		long = append(long, m)
		want += "<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + m.Content + "<|eot_id|>"
	}
	if got := must(llama3.ApplyChat(ChatAuto, long, false)); got != want {
		t.Fatalf("a long conversation: %d bytes, want %d", len(got), len(want))
	}

	// goroutines render on one tokenizer at once
	qwen := loadTok(t, tokFixture("qwen2"))
	exp := readExpected(t, "qwen2")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				c := exp.Chat[i%len(exp.Chat)]
				text, err := qwen.ApplyChat(ChatAuto, convs[c.Conversation], c.AddGenerationPrompt)
				if err == nil && text != c.Text {
					err = fmt.Errorf("conversation %d rendered %q on a goroutine", c.Conversation, text)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTokenizerChatErrors: what each refusal gets, with the library's status and message.
func TestTokenizerChatErrors(t *testing.T) {
	qwen := loadTok(t, tokFixture("qwen2"))
	chat := []ChatMessage{{"user", "hi"}, {"assistant", "hello"}}
	for _, f := range []ChatFormat{6, -1, 42} {
		_, err := qwen.ApplyChat(f, chat, false)
		wantErr(t, err, ErrInvalidArgument, fmt.Sprintf("format %d", f))
	}
	_, err := qwen.ApplyChat(ChatLlama3, chat, false) // Llama 3 needs a BOS token qwen2 lacks
	wantErr(t, err, ErrInvalidArgument, "BOS")
	_, err = qwen.ApplyChat(ChatAuto, []ChatMessage{{"user", "a\xff"}}, false)
	wantErr(t, err, ErrInvalidArgument, "messages[0].content")
	// a NUL byte is refused in Go, naming the field (C would read the string cut short)
	_, err = qwen.ApplyChat(ChatAuto, []ChatMessage{{"user", "hi"}, {"assistant", "a\x00b"}}, false)
	e := wantErr(t, err, ErrInvalidArgument, "messages[1].Content contains a NUL byte")
	if e.Op != "accel_tokenizer_apply_chat" {
		t.Fatalf("%+v", e)
	}
	_, err = qwen.ApplyChat(ChatAuto, []ChatMessage{{"us\x00er", "hi"}}, false)
	wantErr(t, err, ErrInvalidArgument, "messages[0].Role contains a NUL byte")

	gemma := loadTok(t, tokFixture("gemma"))
	_, err = gemma.ApplyChat(ChatAuto, []ChatMessage{{"system", "be brief"}, {"user", "hi"}}, true)
	wantErr(t, err, ErrInvalidArgument, "system role")
	mistral := loadTok(t, tokFixture("mistral"))
	_, err = mistral.ApplyChat(ChatAuto, []ChatMessage{{"user", "a"}, {"user", "b"}}, false)
	wantErr(t, err, ErrInvalidArgument, "alternate")

	// a chat_template of none of the formats
	dir := t.TempDir()
	raw, err := os.ReadFile(tokFixture("qwen2", "tokenizer.json"))
	ok(t, err)
	ok(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644))
	ok(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "{{ messages }}"}`), 0o644))
	odd := loadTok(t, dir)
	_, err = odd.ApplyChat(ChatAuto, chat, false)
	wantErr(t, err, ErrUnsupported, "none of the formats")
	if text := must(odd.ApplyChat(ChatChatML, chat, false)); !strings.HasPrefix(text, "<|im_start|>user\nhi<|im_end|>") {
		t.Fatalf("a named format on it: %q", text)
	}
}
