package accel

/*
#include <stdlib.h>
*/
import "C"

import (
	"strings"
	"sync/atomic"
	"unsafe"
)

// refState makes Close safe against concurrent use and against itself, without a lock on
// the hot path: each use of a C handle is bracketed by acquire and release, Close marks
// the handle closed, and whichever of Close or the last release in flight comes second
// destroys it, exactly once. A use that starts after Close gets ErrClosed.
type refState struct{ v atomic.Int64 } // uses in flight, plus closedBit once closed

const closedBit = int64(1) << 62

// acquire starts a use; false when the handle is closed.
func (r *refState) acquire() bool {
	for {
		v := r.v.Load()
		if v&closedBit != 0 {
			return false
		}
		if r.v.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// release ends a use; true when the caller must destroy the handle (the last use of a
// handle closed meanwhile).
func (r *refState) release() bool { return r.v.Add(-1) == closedBit }

// close marks the handle closed; true when the caller must destroy it now (no use in
// flight). False when it was closed already, or when a use in flight will destroy it.
func (r *refState) close() bool {
	for {
		v := r.v.Load()
		if v&closedBit != 0 {
			return false
		}
		if r.v.CompareAndSwap(v, v|closedBit) {
			return v == 0
		}
	}
}

func (r *refState) isClosed() bool { return r.v.Load()&closedBit != 0 }

// checkNUL refuses a Go string with a NUL byte: C would see it cut short there (a save
// would write to the truncated path and report success).
func checkNUL(op, what, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return errArg(op, "%s contains a NUL byte (at byte %d): %q", what, i, s)
	}
	return nil
}

// cString is C.CString after checkNUL; the caller frees the result.
func cString(op, what, s string) (*C.char, error) {
	if err := checkNUL(op, what, s); err != nil {
		return nil, err
	}
	return C.CString(s), nil
}

// cstrs holds C copies of Go strings until free; err is the first string refused.
type cstrs struct {
	ps  []unsafe.Pointer
	err error
}

// str copies v to C memory ("" gives NULL); a string with a NUL byte records an error
// (the caller checks s.err before the call) and gives NULL.
func (s *cstrs) str(op, what, v string) *C.char {
	if v == "" {
		return nil
	}
	if err := checkNUL(op, what, v); err != nil {
		if s.err == nil {
			s.err = err
		}
		return nil
	}
	p := C.CString(v)
	s.ps = append(s.ps, unsafe.Pointer(p))
	return p
}

func (s *cstrs) free() {
	for _, p := range s.ps {
		C.free(p)
	}
	s.ps = nil
}
