package accel

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// jsonlRecord is a line of metrics.jsonl; a value that is not finite is null (nil here).
type jsonlRecord struct {
	Step     int64               `json:"step"`
	WallTime float64             `json:"wall_time"`
	Values   map[string]*float64 `json:"values"`
	order    []string            // the names in the line's order
}

func readJSONL(t *testing.T, path string) []jsonlRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	ok(t, err)
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatalf("%s does not end with a newline: %q", path, data)
	}
	var recs []jsonlRecord
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var r jsonlRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		// the order of the names: decode "values" token by token
		var raw struct {
			Values json.RawMessage `json:"values"`
		}
		ok(t, json.Unmarshal([]byte(line), &raw))
		dec := json.NewDecoder(bytes.NewReader(raw.Values))
		must(dec.Token()) // {
		for dec.More() {
			k := must(dec.Token())
			r.order = append(r.order, k.(string))
			must(dec.Token()) // the value (a number or null)
		}
		recs = append(recs, r)
	}
	return recs
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	ok(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	ok(t, err)
	return rows
}

func eventFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	ok(t, err)
	return m
}

func TestTrackersWriteJSONLinesCSVAndTensorBoard(t *testing.T) {
	ctx := newCtx(t, nil)
	names := []string{"loss", "lr", "accuracy"}
	wantErr(t, ctx.Log(0, names, []float64{1, 2, 3}), ErrInvalidState, "accel_init_trackers")
	ok(t, ctx.EndTraining()) // none open: nothing to do

	o := DefaultTrackerOptions()
	if o.LogDir != "" || o.Writers != 0 || o.AllProcesses {
		t.Fatalf("%+v", o)
	}
	wantErr(t, ctx.InitTrackers(o), ErrInvalidArgument, "log_dir")
	dir := filepath.Join(t.TempDir(), "run") // created by InitTrackers
	o.LogDir = dir
	o.Writers = LogJSONL | LogCSV | LogTensorBoard
	ok(t, ctx.InitTrackers(o))
	wantErr(t, ctx.InitTrackers(o), ErrInvalidState, "accel_init_trackers")

	logged := map[int64][]float64{}
	for step := int64(0); step < 3; step++ {
		v := []float64{2.5 / float64(step+1), 1e-3 * float64(step+1), 0.25 * float64(step)}
		ok(t, ctx.Log(step*10, names, v))
		logged[step*10] = v
	}
	ok(t, ctx.Log(30, []string{"loss", "grad_norm"}, []float64{math.NaN(), math.Inf(1)}))

	// misuse: nothing of it is written
	wantErr(t, ctx.Log(40, names, []float64{1, 2}), ErrInvalidArgument, "3 names and 2 values")
	wantErr(t, ctx.Log(40, []string{"a"}, nil), ErrInvalidArgument, "1 names and 0 values")
	wantErr(t, ctx.Log(40, nil, nil), ErrInvalidArgument, "accel_log")
	wantErr(t, ctx.Log(40, []string{"loss", "loss"}, []float64{1, 2}), ErrInvalidArgument, "'loss' appears twice")
	wantErr(t, ctx.Log(40, []string{""}, []float64{1}), ErrInvalidArgument, "accel_log")
	wantErr(t, ctx.Log(40, []string{"a\x00b"}, []float64{1}), ErrInvalidArgument, "NUL")
	wantErr(t, ctx.Log(-1, names, []float64{1, 2, 3}), ErrInvalidArgument, "accel_log")

	ok(t, ctx.EndTraining())
	wantErr(t, ctx.Log(50, names, []float64{1, 2, 3}), ErrInvalidState, "accel_log")
	ok(t, ctx.EndTraining())

	// JSON lines: one per Log, the names in the order given
	recs := readJSONL(t, filepath.Join(dir, "metrics.jsonl"))
	if len(recs) != 4 {
		t.Fatalf("%d lines: %+v", len(recs), recs)
	}
	for i, r := range recs[:3] {
		want := logged[int64(i*10)]
		if r.Step != int64(i*10) || r.WallTime <= 0 || strings.Join(r.order, ",") != "loss,lr,accuracy" {
			t.Fatalf("line %d: %+v", i, r)
		}
		for k, n := range names {
			if r.Values[n] == nil || *r.Values[n] != want[k] {
				t.Fatalf("line %d: %s = %v, want %v", i, n, r.Values[n], want[k])
			}
		}
	}
	if r := recs[3]; r.Step != 30 || len(r.Values) != 2 || r.Values["loss"] != nil || r.Values["grad_norm"] != nil ||
		strings.Join(r.order, ",") != "loss,grad_norm" {
		t.Fatalf("not-finite line: %+v", r)
	}
	if recs[0].WallTime > recs[3].WallTime {
		t.Fatalf("wall times go back: %v %v", recs[0].WallTime, recs[3].WallTime)
	}

	// CSV: a header, then a row per scalar
	rows := readCSV(t, filepath.Join(dir, "metrics.csv"))
	if len(rows) != 1+3*3+2 || strings.Join(rows[0], ",") != "wall_time,step,name,value" {
		t.Fatalf("%v", rows)
	}
	for i, row := range rows[1:10] {
		step, n := int64(i/3*10), names[i%3]
		if row[1] != strconv.FormatInt(step, 10) || row[2] != n {
			t.Fatalf("row %d: %v", i, row)
		}
		if wt := must(strconv.ParseFloat(row[0], 64)); wt <= 0 {
			t.Fatalf("row %d: %v", i, row)
		}
		if v := must(strconv.ParseFloat(row[3], 64)); v != logged[step][i%3] {
			t.Fatalf("row %d: %v, want %v", i, row, logged[step][i%3])
		}
	}
	if a, b := rows[10], rows[11]; a[1] != "30" || a[2] != "loss" || !math.IsNaN(must(strconv.ParseFloat(a[3], 64))) ||
		b[2] != "grad_norm" || !math.IsInf(must(strconv.ParseFloat(b[3], 64)), 1) {
		t.Fatalf("%v %v", a, b)
	}

	// TensorBoard: one event file, holding the names
	ev := eventFiles(t, dir)
	if len(ev) != 1 {
		t.Fatalf("event files %v", ev)
	}
	data, err := os.ReadFile(ev[0])
	ok(t, err)
	if !bytes.Contains(data, []byte("brain.Event:2")) || !bytes.Contains(data, []byte("accuracy")) {
		t.Fatalf("%s: %d bytes without the file version or the scalars", ev[0], len(data))
	}

	// again: appended to, a new event file
	ok(t, ctx.InitTrackers(o))
	ok(t, ctx.Log(60, []string{"loss"}, []float64{0.125}))
	ok(t, ctx.EndTraining())
	recs = readJSONL(t, filepath.Join(dir, "metrics.jsonl"))
	if len(recs) != 5 || recs[4].Step != 60 || *recs[4].Values["loss"] != 0.125 {
		t.Fatalf("%+v", recs)
	}
	if rows := readCSV(t, filepath.Join(dir, "metrics.csv")); len(rows) != 13 || rows[12][2] != "loss" {
		t.Fatalf("%v", rows)
	}
	if ev := eventFiles(t, dir); len(ev) != 2 {
		t.Fatalf("event files %v", ev)
	}

	// the context's Close closes open trackers; a closed context is ErrClosed
	ok(t, ctx.InitTrackers(o))
	ctx.Close()
	wantErr(t, ctx.Log(70, names, []float64{1, 2, 3}), ErrClosed, "accel_log")
	wantErr(t, ctx.InitTrackers(o), ErrClosed, "accel_init_trackers")
	wantErr(t, ctx.EndTraining(), ErrClosed, "accel_end_training")
}

func TestTrackersOptionsAndEnvironment(t *testing.T) {
	ctx := newCtx(t, nil)
	base := t.TempDir()
	// Writers 0: ACCEL_LOG_WITH, else JSON lines
	t.Setenv("ACCEL_LOG_WITH", "csv")
	ok(t, ctx.InitTrackers(TrackerOptions{LogDir: filepath.Join(base, "env")}))
	ok(t, ctx.Log(1, []string{"x"}, []float64{1}))
	ok(t, ctx.EndTraining())
	if _, err := os.Stat(filepath.Join(base, "env", "metrics.csv")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "env", "metrics.jsonl")); !os.IsNotExist(err) {
		t.Fatalf("metrics.jsonl written with ACCEL_LOG_WITH=csv: %v", err)
	}
	t.Setenv("ACCEL_LOG_WITH", "csv, bogus")
	wantErr(t, ctx.InitTrackers(TrackerOptions{LogDir: filepath.Join(base, "bogus")}), ErrInvalidArgument, "'bogus' is not a writer")
	os.Unsetenv("ACCEL_LOG_WITH")
	def := DefaultTrackerOptions()
	def.LogDir = filepath.Join(base, "default")
	ok(t, ctx.InitTrackers(def))
	ok(t, ctx.EndTraining())
	if _, err := os.Stat(filepath.Join(base, "default", "metrics.jsonl")); err != nil {
		t.Fatal(err)
	}
	if ev := eventFiles(t, filepath.Join(base, "default")); len(ev) != 0 {
		t.Fatalf("event files %v", ev)
	}

	// refused options leave the trackers closed
	wantErr(t, ctx.InitTrackers(TrackerOptions{LogDir: base, Writers: 8}), ErrInvalidArgument, "accel_init_trackers")
	file := filepath.Join(base, "notes.txt")
	ok(t, os.WriteFile(file, []byte("mine"), 0o644))
	wantErr(t, ctx.InitTrackers(TrackerOptions{LogDir: file, Writers: LogJSONL}), ErrInvalidArgument, "is a regular file, not a directory")
	wantErr(t, ctx.InitTrackers(TrackerOptions{LogDir: base + "\x00x", Writers: LogJSONL}), ErrInvalidArgument, "NUL")
	link := filepath.Join(base, "link")
	ok(t, os.Mkdir(link, 0o755))
	ok(t, os.Symlink(file, filepath.Join(link, "metrics.jsonl")))
	wantErr(t, ctx.InitTrackers(TrackerOptions{LogDir: link, Writers: LogJSONL}), ErrInvalidArgument, "is a symbolic link")
	if b, _ := os.ReadFile(file); string(b) != "mine" {
		t.Fatal("user file changed")
	}
	wantErr(t, ctx.Log(0, []string{"x"}, []float64{1}), ErrInvalidState, "accel_log")
}

func TestTrackersMainProcessUnlessAllProcesses(t *testing.T) {
	const n = 2
	for _, all := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "logs")
		rep, err := SimRun(simOpts(n), ctxOpts(), func(ctx *Context) error {
			chk(ctx.InitTrackers(TrackerOptions{LogDir: dir, Writers: LogJSONL, AllProcesses: all}))
			r := must(ctx.ProcessIndex())
			chk(ctx.Log(1, []string{"rank"}, []float64{float64(r)}))
			// every process checks its arguments, writing or not
			if err := ctx.Log(1, []string{"a", "a"}, []float64{1, 2}); err == nil {
				return fmt.Errorf("rank %d: a repeated name accepted", r)
			}
			return ctx.EndTraining()
		})
		ok(t, err)
		rep.Close()
		if !all {
			recs := readJSONL(t, filepath.Join(dir, "metrics.jsonl"))
			if len(recs) != 1 || *recs[0].Values["rank"] != 0 {
				t.Fatalf("%+v", recs)
			}
			if _, err := os.Stat(filepath.Join(dir, "process-1")); !os.IsNotExist(err) {
				t.Fatalf("process-1 written: %v", err)
			}
			continue
		}
		for r := 0; r < n; r++ {
			recs := readJSONL(t, filepath.Join(dir, fmt.Sprintf("process-%d", r), "metrics.jsonl"))
			if len(recs) != 1 || *recs[0].Values["rank"] != float64(r) {
				t.Fatalf("rank %d: %+v", r, recs)
			}
		}
	}
}
