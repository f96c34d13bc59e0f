//! Tensors, errors, versions and the Send/Sync map.
use accel::{DType, Error, Status, Tensor};

#[test]
fn round_trips_every_element_type() {
    let f = Tensor::from_slice(&[1.5f32, -2.0, 3.25, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    assert_eq!(f.dtype().unwrap(), DType::F32);
    assert_eq!(f.shape().unwrap(), vec![2, 3]);
    assert_eq!(f.ndim().unwrap(), 2);
    assert_eq!(f.numel().unwrap(), 6);
    assert_eq!(f.nbytes().unwrap(), 24);
    assert_eq!(f.to_vec::<f32>().unwrap(), vec![1.5, -2.0, 3.25, 4.0, 5.0, 6.0]);
    // straight into the caller's buffer
    let mut buf = [0f32; 6];
    f.copy_to(&mut buf).unwrap();
    assert_eq!(buf[2], 3.25);
    // converted
    assert_eq!(f.to_vec_as::<f64>().unwrap()[0], 1.5);
    assert_eq!(f.to_vec_as::<i64>().unwrap()[1], -2);

    assert_eq!(Tensor::from_slice(&[1.0f64, 2.0], &[2]).unwrap().to_vec::<f64>().unwrap(), vec![1.0, 2.0]);
    assert_eq!(Tensor::from_slice(&[i64::MAX, -1], &[2]).unwrap().to_vec::<i64>().unwrap(), vec![i64::MAX, -1]);
    assert_eq!(Tensor::from_slice(&[7i32, 8], &[1, 2]).unwrap().to_vec::<i32>().unwrap(), vec![7, 8]);
    assert_eq!(Tensor::from_slice(&[255u8, 0], &[2]).unwrap().to_vec::<u8>().unwrap(), vec![255, 0]);
    assert_eq!(Tensor::from_slice(&[-128i8, 127], &[2]).unwrap().to_vec::<i8>().unwrap(), vec![-128, 127]);
    let d = Tensor::from_vec1(&[1i32, 2, 3]).unwrap();
    assert_eq!((d.dtype().unwrap(), d.shape().unwrap()), (DType::I32, vec![3]));
}

#[test]
fn scalars_items_and_empty_tensors() {
    let s = Tensor::scalar(2.5f64).unwrap();
    assert_eq!(s.ndim().unwrap(), 0);
    assert_eq!(s.shape().unwrap(), Vec::<i64>::new());
    assert_eq!(s.item().unwrap(), 2.5);
    assert_eq!(Tensor::from_slice(&[42i64], &[1, 1]).unwrap().item().unwrap(), 42.0);
    let e = Tensor::from_slice::<f32>(&[], &[0, 4]).unwrap();
    assert_eq!((e.numel().unwrap(), e.nbytes().unwrap()), (0, 0));
    assert!(e.to_vec::<f32>().unwrap().is_empty());
    // item() of a tensor with several elements: the library's INVALID_ARGUMENT
    let err = Tensor::from_slice(&[1f32, 2.0], &[2]).unwrap().item().unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.starts_with("accel_tensor_item"), "{}", err.message);
}

#[test]
fn half_precision_as_raw_bytes() {
    // float16 1.0 = 0x3C00, -2.0 = 0xC000; bfloat16 1.0 = 0x3F80
    let h: Vec<u8> = [0x3C00u16, 0xC000].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let t = Tensor::from_bytes(DType::F16, &h, &[2]).unwrap();
    assert_eq!(t.dtype().unwrap(), DType::F16);
    assert_eq!(t.to_vec_as::<f32>().unwrap(), vec![1.0, -2.0]);
    let mut back = [0u8; 4];
    t.copy_to_bytes(&mut back).unwrap();
    assert_eq!(&back[..], &h[..]);
    let b = Tensor::from_bytes(DType::BF16, &0x3F80u16.to_ne_bytes(), &[]).unwrap();
    assert_eq!(b.item().unwrap(), 1.0);
    assert_eq!(DType::F16.size(), 2);
    assert_eq!(DType::I64.size(), 8);
    // wrong byte count
    let err = Tensor::from_bytes(DType::BF16, &[0u8; 3], &[2]).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
}

#[test]
fn wrong_dtypes_and_shapes_are_errors() {
    // slice length vs shape (checked in Rust)
    let err = Tensor::from_slice(&[1f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("4 elements"), "{}", err.message);
    // negative dimension: the library says so
    let err = Tensor::from_slice::<f32>(&[], &[-1]).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.starts_with("accel_tensor_create"), "{}", err.message);
    // too many dimensions
    let err = Tensor::from_slice(&[1f32], &[1; 17]).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    // reading with the wrong element type
    let t = Tensor::from_slice(&[1f32, 2.0], &[2]).unwrap();
    let err = t.to_vec::<i64>().unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("float32"), "{}", err.message);
    let mut wrong = [0i32; 2];
    assert_eq!(t.copy_to(&mut wrong).unwrap_err().status, Status::InvalidArgument);
    // a buffer of the wrong size: the library refuses it and the tensor still works
    let mut small = [0f32; 1];
    let err = t.copy_to(&mut small).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.starts_with("accel_tensor_copy_to_host"), "{}", err.message);
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn status_names_and_display() {
    assert_eq!(Status::Io.name(), "ACCEL_ERR_IO");
    assert_eq!(Status::from_code(-10), Status::NonFinite);
    assert_eq!(Status::from_code(-77), Status::Unknown(-77));
    assert_eq!(Status::Unknown(-77).name(), "ACCEL_ERR_UNKNOWN");
    assert_eq!(accel::status_name(0), "ACCEL_OK");
    for code in -10..=-1 {
        assert_eq!(Status::from_code(code).code(), code);
    }
    let e = Error::new(Status::InvalidState, "accel_step: not prepared");
    assert_eq!(e.to_string(), "ACCEL_ERR_INVALID_STATE: accel_step: not prepared");
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains("not prepared"));
}

#[test]
fn version_check() {
    let (n, s) = accel::version();
    assert_eq!(n, 100);
    assert_eq!(s, "0.1.0");
    accel::check_version_number(n).unwrap();
    accel::check_version_number(199).unwrap();
    let err = accel::check_version_number(10200).unwrap_err();
    assert_eq!(err.status, Status::Unsupported);
    assert!(err.message.starts_with("libaccel 1.2.0 is loaded, this binding was written for 0.x"), "{}", err.message);
    accel::ensure_version().unwrap();
}

fn is_send<T: Send>() {}
fn is_sync<T: Sync>() {}

/// Which types are Send/Sync (the negative cases are compile_fail doctests in lib.rs):
/// Tensor: Send + Sync; Context: Send only; SimReport, SimError, Error: Send + Sync.
#[test]
fn send_and_sync() {
    is_send::<Tensor>();
    is_sync::<Tensor>();
    is_send::<accel::Context>();
    is_send::<accel::SimReport>();
    is_sync::<accel::SimReport>();
    is_send::<accel::SimError>();
    is_sync::<accel::SimError>();
    is_send::<Error>();
    is_sync::<Error>();
    is_send::<accel::Options>();
    is_sync::<accel::Options>();
    // a tensor is read from several threads at once
    let t = Tensor::from_slice(&[1f32, 2.0, 3.0], &[3]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]));
        }
    });
    // and moved to another
    let v = std::thread::spawn(move || t.item().unwrap_err().status).join().unwrap();
    assert_eq!(v, Status::InvalidArgument);
}
