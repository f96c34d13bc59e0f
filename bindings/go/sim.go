package accel

/*
#include "shim.h"

// Defined in Go (export.go, //export accelGoRank).
extern accel_status accelGoRank(accel_context *ctx, uintptr_t user);

static accel_status ag_rank_trampoline(accel_context *ctx, void *user) { return accelGoRank(ctx, (uintptr_t)user); }

// The handle travels as an integer (a runtime/cgo.Handle), never as a Go pointer.
static ag_res ag_sim_run(const accel_sim_options *sim, const accel_options *opts, uintptr_t handle, accel_sim_report **out) {
    return ag_fail(accel_sim_run(sim, opts, ag_rank_trampoline, (void *)handle, out));
}
static ag_res ag_sim_report_world_size(const accel_sim_report *r, int32_t *out) { return ag_fail(accel_sim_report_world_size(r, out)); }
static ag_res ag_sim_report_rank(const accel_sim_report *r, int32_t rank, accel_status *st, const char **err, uint64_t *peak) {
    return ag_fail(accel_sim_report_rank(r, rank, st, err, peak));
}
static ag_res ag_sim_report_predicted_seconds(const accel_sim_report *r, double *out) { return ag_fail(accel_sim_report_predicted_seconds(r, out)); }
static ag_res ag_sim_report_rank_host(const accel_sim_report *r, int32_t rank, uint64_t *peak, uint64_t *moved, double *seconds) {
    return ag_fail(accel_sim_report_rank_host(r, rank, peak, moved, seconds));
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
)

// simRun is what the trampoline finds behind the cgo.Handle.
type simRun struct {
	fn   func(ctx *Context) error
	mu   sync.Mutex
	msgs map[int]rankFailure // failures decided in Go (an error returned, a panic)
	seq  int
}

// rankFailure is a rank's failure decided in Go: msg is what the report shows (the
// library's message for an *Error returned as is), err what the RankError wraps.
type rankFailure struct {
	status Status
	msg    string
	err    error
	seq    int
}

func (r *simRun) fail(rank int, st Status, msg string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	r.msgs[rank] = rankFailure{st, msg, err, r.seq}
}

// runRank runs the user's function on one rank's borrowed context. C calls it on the
// rank's own thread, and the goroutine stays on that thread until it returns (cgo locks a
// callback's goroutine to its thread): the context remembers the thread and refuses calls
// from any other (another goroutine), which the simulator cannot schedule.
func (r *simRun) runRank(h *C.accel_context) (status C.accel_status) {
	var rank C.int32_t
	C.accel_process_index(h, &rank)
	st := &ctxState{h: h, borrowed: true, tid: osThreadID(), rank: int(rank)}
	ctx := &Context{st: st}
	// Runs last: the context is valid only during fn; a kept *Context now gives ErrClosed.
	defer st.invalidate(false)
	returned := false
	defer func() {
		if p := recover(); p != nil {
			msg := fmt.Sprintf("panic: %v", p)
			r.fail(int(rank), StatusInternal, msg, &Error{Status: StatusInternal, Op: "accel_sim_run",
				Message: fmt.Sprintf("the function of rank %d panicked: %v", int(rank), p)})
			status = C.ACCEL_ERR_INTERNAL
		} else if !returned {
			// fn called runtime.Goexit (t.Fatal, t.FailNow, t.SkipNow). A goroutine that C
			// called cannot end: Go 1.19 then aborts with "internal lockOSThread error",
			// and Goexit cannot be stopped. Abort with a message that says why instead.
			panic(fmt.Sprintf("accel.SimRun: the function of rank %d called runtime.Goexit "+
				"(t.Fatal, t.FailNow, t.Skip...): a goroutine called from C cannot exit, so the "+
				"process stops; return an error (or panic) from a rank function instead", int(rank)))
		}
	}()
	err := r.fn(ctx)
	returned = true
	if err == nil {
		return C.ACCEL_OK
	}
	s := StatusInternal
	msg := err.Error()
	var ae *Error
	if errors.As(err, &ae) && ae.Status < 0 && ae.Status.String() != "ACCEL_ERR_UNKNOWN" {
		s = ae.Status // a status the library knows (it refuses others as fn's bug)
		if err == error(ae) && ae.Message != "" {
			msg = ae.Message // the library's own message, without the "accel: ... (STATUS)" dressing
		}
	} else {
		// a plain Go error (or an unknown status): StatusInternal, the error kept inside
		err = &Error{Status: s, Op: "accel_sim_run", Message: msg, cause: err}
	}
	r.fail(int(rank), s, msg, err)
	return C.accel_status(s)
}

// SimReport is the outcome of SimRun (accel_sim_report). Safe for concurrent use (Close
// included); copies of the value share it.
type SimReport struct {
	s *reportState
}

type reportState struct {
	ref  refState
	h    *C.accel_sim_report
	msgs map[int]rankFailure // written before the report is returned, then only read
}

func (s *reportState) finalize() {
	if s.ref.close() {
		C.accel_sim_report_destroy(s.h)
	}
}

// RankResult is one rank's outcome in a SimReport.
type RankResult struct {
	Status    Status
	Error     string // "" when OK; a Go error's or panic's text for failures decided in Go
	PeakBytes uint64 // peak simulated device memory
	// The rank's host side (accel_sim_report_rank_host): its peak host memory (what offload
	// kept there; 0 without offload), the bytes that crossed between its device and the host
	// (both directions), and their time over the topology's host link (in PredictedSeconds).
	HostPeakBytes       uint64
	HostTransferBytes   uint64
	HostTransferSeconds float64
}

// SimRun runs fn once per rank of a simulated world (accel_sim_run), each rank with its
// own Context built from ctxOpts (nil: defaults; the device is the CPU). sim nil means
// DefaultSimOptions(). The rank's Context is borrowed: Go never destroys it, and it is
// invalid once fn returns (a kept pointer gives ErrClosed). An error returned by fn fails
// that rank with fn's message (its status when it wraps an *Error, else
// StatusInternal); a panic is recovered and fails the rank the same way ("panic: ...",
// StatusInternal), never unwinding through C. fn must not call runtime.Goexit (t.Fatal,
// t.FailNow, t.Skip... in a test): a goroutine that C called cannot exit, so that stops
// the process, with a message naming the rank. Report failures by returning an error.
//
// On success the report and nil are returned. When a rank failed, the report (once the
// world ran) and a *RankError naming the first failing rank and wrapping its *Error.
// Invalid options return (nil, *Error) before any rank runs. Close the report when done.
func SimRun(sim *SimOptions, ctxOpts *Options, fn func(ctx *Context) error) (*SimReport, error) {
	const op = "accel_sim_run"
	if err := libCheck(); err != nil {
		return nil, err
	}
	if sim == nil {
		d := DefaultSimOptions()
		sim = &d
	}
	var s cstrs
	defer s.free()
	cs := sim.toC(&s)
	if s.err != nil {
		return nil, s.err
	}
	var co *C.accel_options
	if ctxOpts != nil {
		c := ctxOpts.toC()
		co = &c
	}
	var rptr *C.accel_sim_report
	var res C.ag_res
	run := &simRun{fn: fn, msgs: map[int]rankFailure{}}
	if fn == nil {
		return nil, errArg(op, "fn is nil")
	}
	h := cgo.NewHandle(run)
	res = C.ag_sim_run(&cs, co, C.uintptr_t(h), &rptr)
	h.Delete()
	err := resErr(op, res)
	if rptr == nil {
		return nil, err
	}
	rs := &reportState{h: rptr, msgs: run.msgs}
	runtime.SetFinalizer(rs, (*reportState).finalize)
	rep := &SimReport{s: rs}
	if err == nil {
		return rep, nil
	}
	// The first failing rank: the library's "rank R: ..." message, else the first Go failure.
	rank := -1
	var ae *Error
	if errors.As(err, &ae) {
		var r int
		if n, _ := fmt.Sscanf(ae.Message, "rank %d:", &r); n == 1 {
			rank = r
		}
	}
	if rank < 0 {
		best := 0
		for r, f := range run.msgs {
			if best == 0 || f.seq < best {
				best, rank = f.seq, r
			}
		}
	}
	if rank < 0 {
		return rep, err
	}
	if f, ok := run.msgs[rank]; ok {
		return rep, &RankError{Rank: rank, Err: f.err} // the rank function's own error
	}
	rr, rerr := rep.Rank(rank)
	if rerr != nil {
		return rep, &RankError{Rank: rank, Err: err}
	}
	return rep, &RankError{Rank: rank, Err: &Error{Status: rr.Status, Op: op, Message: rr.Error}}
}

// Close releases the report (at once, or as a use in progress on another goroutine ends).
// Idempotent.
func (r *SimReport) Close() error {
	if r == nil || r.s == nil {
		return nil
	}
	if r.s.ref.close() {
		runtime.SetFinalizer(r.s, nil)
		C.accel_sim_report_destroy(r.s.h)
	}
	return nil
}

// acquire starts a use of the report (the caller calls s.release()).
func (r *SimReport) acquire(op string) (*reportState, error) {
	if r == nil || r.s == nil || !r.s.ref.acquire() {
		return nil, errClosed(op, "report")
	}
	return r.s, nil
}

func (s *reportState) release() {
	if s.ref.release() {
		C.accel_sim_report_destroy(s.h)
	}
}

// WorldSize returns the number of ranks.
func (r *SimReport) WorldSize() (int, error) {
	const op = "accel_sim_report_world_size"
	s, err := r.acquire(op)
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.int32_t
	err = resErr(op, C.ag_sim_report_world_size(s.h, &out))
	return int(out), err
}

// Rank returns one rank's outcome (accel_sim_report_rank, accel_sim_report_rank_host). For
// a rank whose Go function failed, Error is the Go error's (or panic's) text rather than the
// library's.
func (r *SimReport) Rank(rank int) (RankResult, error) {
	const op = "accel_sim_report_rank"
	s, err := r.acquire(op)
	if err != nil {
		return RankResult{}, err
	}
	defer s.release()
	if int(C.int32_t(rank)) != rank {
		return RankResult{}, errArg(op, "rank %d is not in this report (not an int32)", rank)
	}
	var st C.accel_status
	var msg *C.char
	var peak C.uint64_t
	err = resErr(op, C.ag_sim_report_rank(s.h, C.int32_t(rank), &st, &msg, &peak))
	res := RankResult{Status: Status(st), Error: goStr(msg), PeakBytes: uint64(peak)}
	if err != nil {
		return res, err
	}
	if f, ok := s.msgs[rank]; ok {
		res.Error = f.msg
	}
	res.HostPeakBytes, res.HostTransferBytes, res.HostTransferSeconds, err = s.rankHost(rank)
	return res, err
}

// rankHost is rank's host side (accel_sim_report_rank_host); the caller holds a use of s.
func (s *reportState) rankHost(rank int) (peakBytes, transferBytes uint64, transferSeconds float64, err error) {
	const op = "accel_sim_report_rank_host"
	if int(C.int32_t(rank)) != rank {
		return 0, 0, 0, errArg(op, "rank %d is not in this report (not an int32)", rank)
	}
	var peak, moved C.uint64_t
	var seconds C.double
	err = resErr(op, C.ag_sim_report_rank_host(s.h, C.int32_t(rank), &peak, &moved, &seconds))
	return uint64(peak), uint64(moved), float64(seconds), err
}

// PredictedSeconds is the cost model's predicted wall time of the run.
func (r *SimReport) PredictedSeconds() (float64, error) {
	const op = "accel_sim_report_predicted_seconds"
	s, err := r.acquire(op)
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.double
	err = resErr(op, C.ag_sim_report_predicted_seconds(s.h, &out))
	return float64(out), err
}
