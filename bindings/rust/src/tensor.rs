//! Tensors: independent of contexts, `Send + Sync` (the header: "a tensor may be read from
//! several threads at once but not destroyed while another thread uses it" — Rust's
//! borrow rules make the destroy-while-used case impossible).
use std::fmt;
use std::os::raw::c_void;
use std::ptr::NonNull;

use crate::error::{check, Error, Result};
use crate::sys;
use crate::util::path_cstring;

/// `accel_dtype`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// `ACCEL_FLOAT32`
    F32,
    /// `ACCEL_FLOAT16`
    F16,
    /// `ACCEL_BFLOAT16`
    BF16,
    /// `ACCEL_INT64`
    I64,
    /// `ACCEL_INT32`
    I32,
    /// `ACCEL_UINT8`
    U8,
    /// `ACCEL_FLOAT64`
    F64,
    /// `ACCEL_INT8`
    I8,
}

impl DType {
    /// The raw C value.
    pub fn to_raw(self) -> sys::accel_dtype {
        match self {
            DType::F32 => sys::ACCEL_FLOAT32,
            DType::F16 => sys::ACCEL_FLOAT16,
            DType::BF16 => sys::ACCEL_BFLOAT16,
            DType::I64 => sys::ACCEL_INT64,
            DType::I32 => sys::ACCEL_INT32,
            DType::U8 => sys::ACCEL_UINT8,
            DType::F64 => sys::ACCEL_FLOAT64,
            DType::I8 => sys::ACCEL_INT8,
        }
    }

    /// The dtype of a raw C value (None for one this binding does not know).
    pub fn from_raw(v: sys::accel_dtype) -> Option<DType> {
        Some(match v {
            sys::ACCEL_FLOAT32 => DType::F32,
            sys::ACCEL_FLOAT16 => DType::F16,
            sys::ACCEL_BFLOAT16 => DType::BF16,
            sys::ACCEL_INT64 => DType::I64,
            sys::ACCEL_INT32 => DType::I32,
            sys::ACCEL_UINT8 => DType::U8,
            sys::ACCEL_FLOAT64 => DType::F64,
            sys::ACCEL_INT8 => DType::I8,
            _ => return None,
        })
    }

    /// The size of one element in bytes (`accel_dtype_size`).
    pub fn size(self) -> usize {
        // SAFETY: never fails.
        unsafe { sys::accel_dtype_size(self.to_raw()) }
    }

    /// The dtype's name, as torch spells it ("float32").
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::U8 => "uint8",
            DType::F64 => "float64",
            DType::I8 => "int8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type with an accel dtype: f32, f64, i64, i32, u8, i8 (sealed). float16 and
/// bfloat16 have no Rust type in std: use [`Tensor::from_bytes`] / [`Tensor::copy_to_bytes`]
/// or read them converted with [`Tensor::to_vec_as`].
pub trait Element: Copy + Default + sealed::Sealed + 'static {
    /// The accel dtype of this Rust type.
    const DTYPE: DType;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
        }
    };
}
element!(f32, DType::F32);
element!(f64, DType::F64);
element!(i64, DType::I64);
element!(i32, DType::I32);
element!(u8, DType::U8);
element!(i8, DType::I8);

/// An owned `accel_tensor` (destroyed on drop).
pub struct Tensor {
    raw: NonNull<sys::accel_tensor>,
}

// SAFETY: the header makes tensors independent objects that may be read from several
// threads at once; every method takes &self for reads only, and drop needs ownership.
unsafe impl Send for Tensor {}
unsafe impl Sync for Tensor {}

fn numel_of(shape: &[i64]) -> Option<usize> {
    let mut n: usize = 1;
    for &d in shape {
        if d < 0 {
            return None;
        }
        n = n.checked_mul(d as usize)?;
    }
    Some(n)
}

impl Tensor {
    /// Takes ownership of a raw tensor (non-NULL, owned by the caller).
    ///
    /// # Safety
    /// `raw` must be a live tensor that nothing else destroys.
    pub unsafe fn from_raw(raw: *mut sys::accel_tensor) -> Option<Tensor> {
        NonNull::new(raw).map(|raw| Tensor { raw })
    }

    /// The raw handle (still owned by this Tensor).
    pub fn as_raw(&self) -> *mut sys::accel_tensor {
        self.raw.as_ptr()
    }

    /// Gives up ownership of the raw handle (the caller destroys it).
    pub fn into_raw(self) -> *mut sys::accel_tensor {
        let p = self.raw.as_ptr();
        std::mem::forget(self);
        p
    }

    unsafe fn create(dtype: DType, shape: &[i64], data: *const c_void) -> Result<Tensor> {
        crate::ensure_version()?;
        let mut out = std::ptr::null_mut();
        check(
            sys::accel_tensor_create(dtype.to_raw(), shape.as_ptr(), shape.len(), data, &mut out),
            std::ptr::null(),
        )?;
        Ok(Tensor { raw: NonNull::new(out).expect("accel_tensor_create returned OK and NULL") })
    }

    /// A host tensor of `T`'s dtype and `shape` (row-major), copying `data`, whose length
    /// must be the product of `shape` (`&[]` for a scalar, one element).
    pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
        match numel_of(shape) {
            Some(n) if n != data.len() => {
                return Err(Error::invalid(format!(
                    "Tensor::from_slice: shape {:?} holds {} elements, the slice {}",
                    shape,
                    n,
                    data.len()
                )))
            }
            _ => {} // negative or overflowing shapes: the library says what is wrong
        }
        // SAFETY: `data` holds exactly prod(shape) elements of the dtype (checked above; the library refuses a bad shape) and is only read during the call.
        unsafe { Tensor::create(T::DTYPE, shape, data.as_ptr() as *const c_void) }
    }

    /// A one-dimensional tensor of the slice.
    pub fn from_vec1<T: Element>(data: &[T]) -> Result<Tensor> {
        Tensor::from_slice(data, &[data.len() as i64])
    }

    /// A scalar (0-dimensional) tensor.
    pub fn scalar<T: Element>(value: T) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[])
    }

    /// A host tensor of any dtype from raw bytes (native byte order), e.g. float16 or
    /// bfloat16 data; `bytes.len()` must be prod(shape) * dtype.size().
    pub fn from_bytes(dtype: DType, bytes: &[u8], shape: &[i64]) -> Result<Tensor> {
        if let Some(n) = numel_of(shape) {
            if n.checked_mul(dtype.size()) != Some(bytes.len()) {
                return Err(Error::invalid(format!(
                    "Tensor::from_bytes: shape {:?} of {} needs {} bytes, got {}",
                    shape,
                    dtype,
                    n.saturating_mul(dtype.size()),
                    bytes.len()
                )));
            }
        }
        // SAFETY: `bytes` holds exactly prod(shape) * dtype.size() bytes (checked above; the library refuses a bad shape) and is only read during the call.
        unsafe { Tensor::create(dtype, shape, bytes.as_ptr() as *const c_void) }
    }

    /// The dtype (`accel_tensor_dtype`).
    pub fn dtype(&self) -> Result<DType> {
        let mut d = 0;
        // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
        check(unsafe { sys::accel_tensor_dtype(self.raw.as_ptr(), &mut d) }, std::ptr::null())?;
        DType::from_raw(d).ok_or_else(|| Error::new(crate::Status::Unsupported, format!("unknown dtype {}", d)))
    }

    /// The number of dimensions (`accel_tensor_ndim`).
    pub fn ndim(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
        check(unsafe { sys::accel_tensor_ndim(self.raw.as_ptr(), &mut n) }, std::ptr::null())?;
        Ok(n)
    }

    /// The shape (`accel_tensor_ndim` + `accel_tensor_shape`).
    pub fn shape(&self) -> Result<Vec<i64>> {
        let n = self.ndim()?;
        let mut v = vec![0i64; n];
        // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
        check(unsafe { sys::accel_tensor_shape(self.raw.as_ptr(), v.as_mut_ptr(), n) }, std::ptr::null())?;
        Ok(v)
    }

    /// The number of elements (`accel_tensor_numel`).
    pub fn numel(&self) -> Result<usize> {
        let mut n = 0i64;
        // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
        check(unsafe { sys::accel_tensor_numel(self.raw.as_ptr(), &mut n) }, std::ptr::null())?;
        Ok(n as usize)
    }

    /// The number of bytes of the elements (`accel_tensor_nbytes`).
    pub fn nbytes(&self) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
        check(unsafe { sys::accel_tensor_nbytes(self.raw.as_ptr(), &mut n) }, std::ptr::null())?;
        Ok(n)
    }

    /// Reads a packed token file (`accel_token_file_read`) into an int64 tensor \[count\].
    pub fn read_token_file(path: impl AsRef<std::path::Path>) -> Result<Tensor> {
        let p = path_cstring(path.as_ref(), "path")?;
        let mut out = std::ptr::null_mut();
        // SAFETY: the C string outlives the call; `out` is a local out-parameter.
        check(unsafe { sys::accel_token_file_read(p.as_ptr(), &mut out) }, std::ptr::null())?;
        // SAFETY: on ACCEL_OK `out` is a new tensor that belongs to the caller.
        Ok(unsafe { Tensor::from_raw(out) }.expect("accel returned OK and a NULL tensor"))
    }

    /// Writes this int64/int32 1-D tensor as a packed token file of 2- or 4-byte tokens
    /// (`accel_token_file_write`); replaces only nothing or an earlier token file.
    pub fn write_token_file(&self, path: impl AsRef<std::path::Path>, token_bytes: i32) -> Result<()> {
        let p = path_cstring(path.as_ref(), "path")?;
        // SAFETY: a live tensor (`self`) and a C string that outlive the call.
        check(unsafe { sys::accel_token_file_write(p.as_ptr(), self.as_raw(), token_bytes) }, std::ptr::null())
    }

    /// The single element as f64 (`accel_tensor_item`; InvalidArgument unless numel == 1).
    pub fn item(&self) -> Result<f64> {
        let mut v = 0.0;
        // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
        check(unsafe { sys::accel_tensor_item(self.raw.as_ptr(), &mut v) }, std::ptr::null())?;
        Ok(v)
    }

    fn expect_dtype<T: Element>(&self, what: &str) -> Result<()> {
        let d = self.dtype()?;
        if d != T::DTYPE {
            return Err(Error::invalid(format!(
                "Tensor::{}: the tensor holds {}, not {} (to_vec_as converts)",
                what,
                d,
                T::DTYPE
            )));
        }
        Ok(())
    }

    /// Copies the elements (row-major) into `dst`, whose length must be numel and whose
    /// element type must be the tensor's dtype (`accel_tensor_copy_to_host`, straight into
    /// the caller's buffer).
    pub fn copy_to<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        self.expect_dtype::<T>("copy_to")?;
        check(
            // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
            unsafe {
                sys::accel_tensor_copy_to_host(
                    self.raw.as_ptr(),
                    dst.as_mut_ptr() as *mut c_void,
                    std::mem::size_of_val(dst),
                )
            },
            std::ptr::null(),
        )
    }

    /// Copies the elements converted to `T`'s dtype into `dst`
    /// (`accel_tensor_copy_to_host_as`), e.g. bfloat16 logits read as f32.
    pub fn copy_to_as<T: Element>(&self, dst: &mut [T]) -> Result<()> {
        check(
            // SAFETY: the tensor is live (owned by `self`); out-parameters are locals (`v` holds `n` elements).
            unsafe {
                sys::accel_tensor_copy_to_host_as(
                    self.raw.as_ptr(),
                    T::DTYPE.to_raw(),
                    dst.as_mut_ptr() as *mut c_void,
                    std::mem::size_of_val(dst),
                )
            },
            std::ptr::null(),
        )
    }

    /// Copies the raw bytes (any dtype, float16 and bfloat16 included); `dst.len()` must
    /// be `nbytes()`.
    pub fn copy_to_bytes(&self, dst: &mut [u8]) -> Result<()> {
        check(
            // SAFETY: `dst` is writable for the byte count passed with it; the library checks that count against the tensor.
            unsafe { sys::accel_tensor_copy_to_host(self.raw.as_ptr(), dst.as_mut_ptr() as *mut c_void, dst.len()) },
            std::ptr::null(),
        )
    }

    /// The elements as a Vec (the dtype must be `T`'s).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.expect_dtype::<T>("to_vec")?;
        let mut v = vec![T::default(); self.numel()?];
        self.copy_to(&mut v)?;
        Ok(v)
    }

    /// The elements converted to `T`.
    pub fn to_vec_as<T: Element>(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.numel()?];
        self.copy_to_as(&mut v)?;
        Ok(v)
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: owned, live, and not used by anyone else (we have &mut).
        unsafe { sys::accel_tensor_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.dtype().ok())
            .field("shape", &self.shape().ok())
            .finish()
    }
}
