package accel

import "fmt"

// Status is an accel_status: 0 is success, every error is negative.
type Status int32

// The statuses accel 0.1 defines. Later versions may add codes: any non-zero value is an error.
const (
	StatusOK              Status = 0
	StatusInvalidArgument Status = -1
	StatusInvalidState    Status = -2
	StatusOutOfMemory     Status = -3
	StatusCommunication   Status = -4
	StatusTimeout         Status = -5
	StatusIO              Status = -6
	StatusFormat          Status = -7
	StatusUnsupported     Status = -8
	StatusInternal        Status = -9
	StatusNonFinite       Status = -10
)

// Error is an error reported by libaccel (or by the binding, with the status the library
// would give). Message is the library's message (it starts with the C function's name),
// Op the C function (or binding operation) that failed.
type Error struct {
	Status  Status
	Message string
	Op      string

	sentinel bool  // a package-level ErrXxx value: matches any *Error of its status
	closed   bool  // use of a closed object (ErrClosed)
	cause    error // a Go error this one stands for (a rank function's plain error)
}

// Unwrap returns the Go error an *Error stands for, if any (SimRun's RankError wraps a
// rank function's plain error in an *Error with StatusInternal, which unwraps to it).
func (e *Error) Unwrap() error { return e.cause }

func (e *Error) Error() string { return "accel: " + e.text() }

// text is the error without the "accel: " prefix: "message (STATUS)".
func (e *Error) text() string {
	msg := e.Message
	if msg == "" {
		msg = e.Op
	}
	if msg == "" {
		return e.Status.String()
	}
	return msg + " (" + e.Status.String() + ")"
}

// Is makes errors.Is(err, accel.ErrInvalidArgument) (or any other sentinel) true for
// every *Error of that status, and errors.Is(err, accel.ErrClosed) true for uses of a
// closed object (which also match ErrInvalidState).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || !t.sentinel {
		return false
	}
	if t.closed {
		return e.closed
	}
	return t.Status == e.Status
}

func sentinel(s Status) *Error { return &Error{Status: s, sentinel: true} }

// Sentinels, one per status, for errors.Is.
var (
	ErrInvalidArgument = sentinel(StatusInvalidArgument)
	ErrInvalidState    = sentinel(StatusInvalidState)
	ErrOutOfMemory     = sentinel(StatusOutOfMemory)
	ErrCommunication   = sentinel(StatusCommunication)
	ErrTimeout         = sentinel(StatusTimeout)
	ErrIO              = sentinel(StatusIO)
	ErrFormat          = sentinel(StatusFormat)
	ErrUnsupported     = sentinel(StatusUnsupported)
	ErrInternal        = sentinel(StatusInternal)
	ErrNonFinite       = sentinel(StatusNonFinite)
	// ErrClosed: an object used after its Close, or after its Context was closed (or, in a
	// simulator rank function, after the function returned). Matches ErrInvalidState too.
	ErrClosed = &Error{Status: StatusInvalidState, Message: "use of a closed object", sentinel: true, closed: true}
)

func errClosed(op, what string) error {
	return &Error{Status: StatusInvalidState, Op: op, closed: true,
		Message: op + ": the " + what + " is closed (or its Context is)"}
}

func errArg(op, format string, args ...interface{}) error {
	return &Error{Status: StatusInvalidArgument, Op: op, Message: op + ": " + fmt.Sprintf(format, args...)}
}

// RankError is what SimRun returns when a rank failed: the first failing rank and its
// error: the error its function returned (errors.Is/As see through it: errors.As(err, &e)
// with var e *accel.Error gives the status and the library's message), an *Error with
// StatusInternal for a panic, or the library's *Error for a failure it decided.
type RankError struct {
	Rank int
	Err  error
}

// Error reads "accel: rank R failed: MESSAGE (STATUS)" (the prefix once).
func (e *RankError) Error() string {
	inner := "<nil>"
	if ae, ok := e.Err.(*Error); ok {
		inner = ae.text()
	} else if e.Err != nil {
		inner = e.Err.Error()
	}
	return fmt.Sprintf("accel: rank %d failed: %s", e.Rank, inner)
}

// Unwrap returns the rank's error.
func (e *RankError) Unwrap() error { return e.Err }
