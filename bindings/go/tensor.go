package accel

/*
#include "shim.h"

static ag_res ag_tensor_create(accel_dtype dt, const int64_t *shape, size_t ndim, const void *data, accel_tensor **out) {
    return ag_fail(accel_tensor_create(dt, shape, ndim, data, out));
}
static ag_res ag_tensor_copy_to_host(const accel_tensor *t, void *dst, size_t n) { return ag_fail(accel_tensor_copy_to_host(t, dst, n)); }
static ag_res ag_tensor_copy_to_host_as(const accel_tensor *t, accel_dtype dt, void *dst, size_t n) {
    return ag_fail(accel_tensor_copy_to_host_as(t, dt, dst, n));
}
static ag_res ag_tensor_item(const accel_tensor *t, double *out) { return ag_fail(accel_tensor_item(t, out)); }
static ag_res ag_tensor_dtype(const accel_tensor *t, accel_dtype *out) { return ag_fail(accel_tensor_dtype(t, out)); }
static ag_res ag_tensor_ndim(const accel_tensor *t, size_t *out) { return ag_fail(accel_tensor_ndim(t, out)); }
static ag_res ag_tensor_shape(const accel_tensor *t, int64_t *out, size_t cap) { return ag_fail(accel_tensor_shape(t, out, cap)); }
static ag_res ag_tensor_numel(const accel_tensor *t, int64_t *out) { return ag_fail(accel_tensor_numel(t, out)); }
static ag_res ag_tensor_nbytes(const accel_tensor *t, size_t *out) { return ag_fail(accel_tensor_nbytes(t, out)); }
*/
import "C"

import (
	"math"
	"runtime"
	"unsafe"
)

// Tensor is a typed n-dimensional array (accel_tensor), independent of any Context.
// A *Tensor is safe for concurrent use: several goroutines may read it at once, and Close
// may run concurrently with a use (or another Close): the C tensor is destroyed when the
// last use in flight ends, and uses that start after Close return ErrClosed. The state
// lives behind a pointer, so a copy of a Tensor value shares it (Close on either closes
// both; nothing is freed twice).
type Tensor struct {
	s *tensorState
}

type tensorState struct {
	ref refState
	h   *C.accel_tensor
}

func wrapTensor(h *C.accel_tensor) *Tensor {
	if h == nil {
		return nil
	}
	// one allocation for both: the state first, so that the finalizer may be set on it
	b := &tensorBox{s: tensorState{h: h}}
	b.t.s = &b.s
	runtime.SetFinalizer(&b.s, (*tensorState).finalize)
	return &b.t
}

// tensorBox allocates a Tensor and its state together. The *Tensor returned points into
// the box, so it (or a copy of the Tensor, which points at the state) keeps the whole box,
// and the state's finalizer, alive.
type tensorBox struct {
	s tensorState // first: &b.s is the allocation's start, where a finalizer may be set
	t Tensor
}

func (s *tensorState) finalize() {
	if s.ref.close() {
		C.accel_tensor_destroy(s.h)
	}
}

// Close releases the tensor (accel_tensor_destroy), at once or, when another goroutine
// is using it, as that use ends. Idempotent, and safe to call concurrently.
func (t *Tensor) Close() error {
	if t == nil || t.s == nil {
		return nil
	}
	if t.s.ref.close() {
		runtime.SetFinalizer(t.s, nil)
		C.accel_tensor_destroy(t.s.h)
	}
	return nil
}

// acquire starts a use of the C handle (ended by release), or returns ErrClosed. A nil
// *Tensor gives a NULL handle (the library refuses it with its own message where a tensor
// is required) and a nil state, whose release does nothing.
func (t *Tensor) acquire(op string) (*tensorState, *C.accel_tensor, error) {
	if t == nil {
		return nil, nil, nil
	}
	s := t.s
	if s == nil {
		return nil, nil, &Error{Status: StatusInvalidState, Op: op, closed: true,
			Message: op + ": a zero Tensor value (tensors come from NewTensor and the library's calls, as *Tensor)"}
	}
	if !s.ref.acquire() {
		return nil, nil, errClosed(op, "tensor")
	}
	return s, s.h, nil
}

// release ends a use started by acquire (nil: nothing to do).
func (s *tensorState) release() {
	if s != nil && s.ref.release() {
		C.accel_tensor_destroy(s.h)
	}
}

// Element is a Go type with an accel dtype.
type Element interface {
	float32 | float64 | int64 | int32 | uint8 | int8
}

// DTypeOf returns the dtype of a Go element type.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int64:
		return Int64
	case int32:
		return Int32
	case uint8:
		return Uint8
	default:
		return Int8
	}
}

// numelOf returns the element count of a shape, ok=false when the shape is one the
// library refuses anyway (negative dimension, too many dimensions, overflow).
func numelOf(shape []int64) (int64, bool) {
	if len(shape) > 16 {
		return 0, false
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

func createTensor(dt DType, data unsafe.Pointer, elems int64, shape []int64) (*Tensor, error) {
	const op = "accel_tensor_create"
	if err := libCheck(); err != nil {
		return nil, err
	}
	var sp *C.int64_t
	if len(shape) > 0 {
		sp = (*C.int64_t)(unsafe.Pointer(&shape[0]))
	}
	if n, ok := numelOf(shape); ok {
		// The library reads numel*size bytes from data: they must all be in the slice.
		if n != elems {
			return nil, errArg(op, "data holds %d elements, shape %v needs %d", elems, shape, n)
		}
	} else {
		data = nil // refused by the library before it reads data
	}
	if elems == 0 {
		data = nil
	}
	var out *C.accel_tensor
	r := C.ag_tensor_create(C.accel_dtype(dt), sp, C.size_t(len(shape)), data, &out)
	if err := resErr(op, r); err != nil {
		return nil, err
	}
	return wrapTensor(out), nil
}

// NewTensor creates a host tensor of T's dtype and the given shape (row-major) by copying
// data; len(data) must equal the product of shape (no shape: a scalar, one element).
func NewTensor[T Element](data []T, shape ...int64) (*Tensor, error) {
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	return createTensor(DTypeOf[T](), p, int64(len(data)), shape)
}

// NewTensorBytes creates a host tensor of any dtype (float16 and bfloat16 included) from
// its raw little-endian bytes; len(data) must equal numel * dtype.Size().
func NewTensorBytes(dtype DType, data []byte, shape ...int64) (*Tensor, error) {
	size := int64(dtype.Size())
	if size == 0 {
		var out *C.accel_tensor
		return nil, resErr("accel_tensor_create", C.ag_tensor_create(C.accel_dtype(dtype), nil, 0, nil, &out))
	}
	if int64(len(data))%size != 0 {
		return nil, errArg("accel_tensor_create", "%d bytes is no whole number of %s elements", len(data), dtype)
	}
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	return createTensor(dtype, p, int64(len(data))/size, shape)
}

// DType returns the tensor's element type.
func (t *Tensor) DType() (DType, error) {
	s, h, err := t.acquire("accel_tensor_dtype")
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.accel_dtype
	err = resErr("accel_tensor_dtype", C.ag_tensor_dtype(h, &out))
	return DType(out), err
}

// NDim returns the number of dimensions.
func (t *Tensor) NDim() (int, error) {
	s, h, err := t.acquire("accel_tensor_ndim")
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.size_t
	err = resErr("accel_tensor_ndim", C.ag_tensor_ndim(h, &out))
	return int(out), err
}

// Shape returns the dimensions.
func (t *Tensor) Shape() ([]int64, error) {
	s, h, err := t.acquire("accel_tensor_shape")
	if err != nil {
		return nil, err
	}
	defer s.release()
	var buf [16]int64
	if err = resErr("accel_tensor_shape", C.ag_tensor_shape(h, (*C.int64_t)(unsafe.Pointer(&buf[0])), 16)); err != nil {
		return nil, err
	}
	var n C.size_t
	if err = resErr("accel_tensor_ndim", C.ag_tensor_ndim(h, &n)); err != nil {
		return nil, err
	}
	return append([]int64{}, buf[:n]...), nil
}

// Numel returns the number of elements.
func (t *Tensor) Numel() (int64, error) {
	s, h, err := t.acquire("accel_tensor_numel")
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.int64_t
	err = resErr("accel_tensor_numel", C.ag_tensor_numel(h, &out))
	return int64(out), err
}

// NBytes returns numel * dtype size, the byte count Bytes returns.
func (t *Tensor) NBytes() (int, error) {
	s, h, err := t.acquire("accel_tensor_nbytes")
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.size_t
	err = resErr("accel_tensor_nbytes", C.ag_tensor_nbytes(h, &out))
	return int(out), err
}

// Item returns the single element as float64 (the tensor must have exactly one element).
func (t *Tensor) Item() (float64, error) {
	s, h, err := t.acquire("accel_tensor_item")
	if err != nil {
		return 0, err
	}
	defer s.release()
	var out C.double
	err = resErr("accel_tensor_item", C.ag_tensor_item(h, &out))
	return float64(out), err
}

// CopyBytes copies the elements (row-major, the tensor's dtype) into dst, whose length
// must equal NBytes. The library writes straight into dst during the call.
func (t *Tensor) CopyBytes(dst []byte) error {
	s, h, err := t.acquire("accel_tensor_copy_to_host")
	if err != nil {
		return err
	}
	defer s.release()
	var p unsafe.Pointer
	if len(dst) > 0 {
		p = unsafe.Pointer(&dst[0])
	}
	return resErr("accel_tensor_copy_to_host", C.ag_tensor_copy_to_host(h, p, C.size_t(len(dst))))
}

// CopyBytesAs converts the elements to dtype and copies them into dst (len = numel *
// dtype.Size()).
func (t *Tensor) CopyBytesAs(dtype DType, dst []byte) error {
	s, h, err := t.acquire("accel_tensor_copy_to_host_as")
	if err != nil {
		return err
	}
	defer s.release()
	var p unsafe.Pointer
	if len(dst) > 0 {
		p = unsafe.Pointer(&dst[0])
	}
	return resErr("accel_tensor_copy_to_host_as", C.ag_tensor_copy_to_host_as(h, C.accel_dtype(dtype), p, C.size_t(len(dst))))
}

// Bytes returns a copy of the raw elements in the tensor's dtype.
func (t *Tensor) Bytes() ([]byte, error) {
	n, err := t.NBytes()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	return b, t.CopyBytes(b)
}

// CopyTo copies the elements into dst, converted to T's dtype (for example bfloat16 logits
// read as float32); len(dst) must equal the tensor's element count. The library writes
// straight into dst during the call.
func CopyTo[T Element](t *Tensor, dst []T) error {
	s, h, err := t.acquire("accel_tensor_copy_to_host_as")
	if err != nil {
		return err
	}
	defer s.release()
	var p unsafe.Pointer
	if len(dst) > 0 {
		p = unsafe.Pointer(&dst[0])
	}
	var z T
	nbytes := C.size_t(uintptr(len(dst)) * unsafe.Sizeof(z))
	return resErr("accel_tensor_copy_to_host_as", C.ag_tensor_copy_to_host_as(h, C.accel_dtype(DTypeOf[T]()), p, nbytes))
}

// ToSlice returns the elements converted to T (row-major).
func ToSlice[T Element](t *Tensor) ([]T, error) {
	n, err := t.Numel()
	if err != nil {
		return nil, err
	}
	s := make([]T, n)
	return s, CopyTo(t, s)
}
