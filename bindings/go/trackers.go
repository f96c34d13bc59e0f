package accel

/*
#include "shim.h"

static void ag_tracker_options_init(accel_tracker_options *o) {
    if (accel_tracker_options_init(o, ACCEL_TRACKER_OPTIONS_VERSION) != ACCEL_OK) { accel_tracker_options d = ACCEL_TRACKER_OPTIONS_INIT; *o = d; }
}
*/
import "C"

import (
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// ---- trackers (Accelerate's init_trackers, log and end_training) ----

// LogWriter is accel_log_writer: the files the trackers write, an OR of the flags.
type LogWriter uint32

const (
	LogJSONL       LogWriter = C.ACCEL_LOG_JSONL       // LogDir/metrics.jsonl, appended to
	LogCSV         LogWriter = C.ACCEL_LOG_CSV         // LogDir/metrics.csv, appended to
	LogTensorBoard LogWriter = C.ACCEL_LOG_TENSORBOARD // LogDir/events.out.tfevents.TIME.HOST.PID, new for each InitTrackers
)

// TrackerOptions is accel_tracker_options.
type TrackerOptions struct {
	LogDir string // required; created where missing
	// Writers is an OR of LogJSONL, LogCSV, LogTensorBoard; 0 (default): the environment's
	// ACCEL_LOG_WITH ("jsonl", "csv", "tensorboard", "all", comma-separated), else LogJSONL.
	Writers LogWriter
	// AllProcesses: every process writes, into LogDir/process-RANK; false (default): the
	// main process alone writes, into LogDir, and the others only check their arguments.
	AllProcesses bool
}

// DefaultTrackerOptions returns the library's defaults (no LogDir: set one).
func DefaultTrackerOptions() TrackerOptions {
	var c C.accel_tracker_options
	C.ag_tracker_options_init(&c)
	return TrackerOptions{Writers: LogWriter(c.writers), AllProcesses: c.all_processes != 0}
}

func (o *TrackerOptions) toC(s *cstrs) C.accel_tracker_options {
	var c C.accel_tracker_options
	C.ag_tracker_options_init(&c)
	c.log_dir = s.str("accel_init_trackers", "LogDir", o.LogDir)
	c.writers = C.uint32_t(o.Writers)
	c.all_processes = C.int32_t(cbool(o.AllProcesses))
	return c
}

// InitTrackers opens the context's trackers (accel_init_trackers); every process calls it.
// Errors match ErrInvalidArgument for an empty LogDir, a LogDir that is not a directory,
// Writers outside the three flags, a bad ACCEL_LOG_WITH, or a log file that is not a regular
// file; ErrIO for a directory or file that cannot be created; ErrInvalidState when the
// trackers are already open.
func (c *Context) InitTrackers(opts TrackerOptions) error {
	const op = "accel_init_trackers"
	var s cstrs
	defer s.free()
	co := opts.toC(&s)
	if s.err != nil {
		return s.err
	}
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	return c.err(op, C.accel_init_trackers(h, &co))
}

// Log logs the scalars names[i] = values[i] at step (accel_log), in this order, written and
// flushed before it returns. The names are non-empty and distinct; a value may be any
// float64 (NaN and infinities too). Errors match ErrInvalidState before InitTrackers or after
// EndTraining; ErrInvalidArgument for step < 0, no names, names and values of different
// lengths, an empty or repeated name; ErrIO when a write fails.
func (c *Context) Log(step int64, names []string, values []float64) error {
	const op = "accel_log"
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	if len(names) != len(values) {
		return errArg(op, "%d names and %d values", len(names), len(values))
	}
	if len(names) > math.MaxInt32 {
		return errArg(op, "%d scalars (at most %d)", len(names), math.MaxInt32)
	}
	for _, n := range names {
		if strings.IndexByte(n, 0) >= 0 {
			return errArg(op, "name contains a NUL byte: %q", n)
		}
	}
	var (
		np *(*C.char)
		vp *C.double
	)
	if len(names) > 0 {
		cn := make([]*C.char, len(names)) // C pointers only: fine to pass
		for i, n := range names {
			cn[i] = C.CString(n)
		}
		defer func() {
			for _, p := range cn {
				C.free(unsafe.Pointer(p))
			}
		}()
		np = &cn[0]
		vp = (*C.double)(unsafe.Pointer(&values[0]))
	}
	err = c.err(op, C.accel_log(h, C.int64_t(step), np, vp, C.int32_t(len(names))))
	runtime.KeepAlive(values)
	return err
}

// EndTraining flushes and closes the trackers (accel_end_training; Close does too);
// InitTrackers may open them again. nil when none are open. Errors match ErrIO when a file
// cannot be closed (its last writes may be lost).
func (c *Context) EndTraining() error {
	const op = "accel_end_training"
	h, err := c.lock(op)
	if err != nil {
		return err
	}
	defer c.st.unlock()
	err = c.err(op, C.accel_end_training(h))
	return err
}
