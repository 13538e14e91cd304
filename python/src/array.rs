//! NumPy arrays in and out. In: a C-contiguous array of a supported dtype is read in place
//! (one copy into the 64-byte-aligned tensor the runtime takes); anything else goes through
//! `numpy.asarray` / `numpy.from_dlpack` first. Out: the array views the output tensor's own
//! memory, which a small Python object keeps alive, so nothing is copied.

use crate::error::DTypeError;
use numpy::npyffi::{self, npy_intp, PY_ARRAY_API};
use numpy::{Complex32, PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use rlx::{DType, Tensor};

/// Owns an output tensor for the NumPy array that views it (the array's `base`).
#[pyclass(frozen, module = "rlx._rlx")]
pub struct TensorHolder(Tensor);

/// The rlx dtypes NumPy has only through ml_dtypes (one code per byte in both), by the
/// ml_dtypes name. ml_dtypes' sub-byte integers keep the raw code in a byte where rlx keeps
/// the value, so they are not among them.
const ML_DTYPES: [(DType, &str); 7] = [
    (DType::BF16, "bfloat16"),
    (DType::F8E4M3FN, "float8_e4m3fn"),
    (DType::F8E4M3FNUZ, "float8_e4m3fnuz"),
    (DType::F8E5M2, "float8_e5m2"),
    (DType::F8E5M2FNUZ, "float8_e5m2fnuz"),
    (DType::F8E8M0, "float8_e8m0fnu"),
    (DType::F4E2M1, "float4_e2m1fn"),
];

/// The ml_dtypes NumPy dtype at `ML_DTYPES[i]`, when ml_dtypes is installed.
fn ml_dtype(py: Python<'_>, i: usize) -> Option<Bound<'_, PyArrayDescr>> {
    static FOUND: [PyOnceLock<Option<Py<PyArrayDescr>>>; 7] = [const { PyOnceLock::new() }; 7];
    let found = FOUND[i].get_or_init(py, || {
        let ty = py.import("ml_dtypes").and_then(|m| m.getattr(ML_DTYPES[i].1)).ok()?;
        PyArrayDescr::new(py, ty).ok().map(Bound::unbind)
    });
    found.as_ref().map(|d| d.bind(py).clone())
}

fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(NUMPY.get_or_try_init(py, || py.import("numpy").map(Bound::unbind))?.bind(py).clone())
}

/// The rlx dtype of a NumPy dtype.
pub fn dtype_of(descr: &Bound<'_, PyArrayDescr>) -> PyResult<DType> {
    let d = match (descr.kind(), descr.itemsize()) {
        (b'b', 1) => DType::Bool,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'u', 1) => DType::U8,
        (b'u', 2) => DType::U16,
        (b'u', 4) => DType::U32,
        (b'u', 8) => DType::U64,
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        (b'c', 8) => DType::C64,
        _ => match (0..ML_DTYPES.len()).find(|&i| ml_dtype(descr.py(), i).is_some_and(|d| descr.is_equiv_to(&d))) {
            Some(i) => ML_DTYPES[i].0,
            None => return Err(DTypeError::new_err(format!("NumPy dtype {descr} has no rlx dtype"))),
        },
    };
    if descr.byteorder() == b'>' {
        return Err(DTypeError::new_err(format!("NumPy dtype {descr} is big-endian; rlx takes little-endian data")));
    }
    Ok(d)
}

/// The NumPy dtype of an rlx dtype.
pub fn descr_of(py: Python<'_>, d: DType) -> PyResult<Bound<'_, PyArrayDescr>> {
    use numpy::dtype;
    Ok(match d {
        DType::Bool => dtype::<bool>(py),
        DType::I8 => dtype::<i8>(py),
        DType::I16 => dtype::<i16>(py),
        DType::I32 => dtype::<i32>(py),
        DType::I64 => dtype::<i64>(py),
        DType::U8 => dtype::<u8>(py),
        DType::U16 => dtype::<u16>(py),
        DType::U32 => dtype::<u32>(py),
        DType::U64 => dtype::<u64>(py),
        DType::F16 => dtype::<half::f16>(py),
        DType::F32 => dtype::<f32>(py),
        DType::F64 => dtype::<f64>(py),
        DType::C64 => dtype::<Complex32>(py),
        other => match ML_DTYPES.iter().position(|(m, _)| *m == other) {
            Some(i) => ml_dtype(py, i).ok_or_else(|| DTypeError::new_err(format!("a {other} value needs the ml_dtypes package for its NumPy dtype (pip install ml_dtypes)")))?,
            None => return Err(DTypeError::new_err(format!("rlx dtype {other} has no NumPy dtype"))),
        },
    })
}

/// The NumPy dtype name an rlx dtype is given as (`float32`, ..., `bfloat16`).
pub fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::C64 => "complex64",
        other => ML_DTYPES.iter().find(|(m, _)| *m == other).map_or(other.name(), |(_, n)| n),
    }
}

/// An rlx dtype from a NumPy dtype, a dtype name (`"float32"`, `"f32"`, `"bfloat16"`) or a type.
pub fn parse_dtype(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(name) = obj.extract::<String>() {
        if let Some(d) = DType::from_name(&name) {
            return Ok(d);
        }
        if let Some((d, _)) = ML_DTYPES.iter().find(|(_, n)| *n == name) {
            return Ok(*d);
        }
    }
    let descr = numpy(obj.py())?.call_method1("dtype", (obj,)).map_err(|_| DTypeError::new_err(format!("`{obj}` is not a dtype")))?;
    dtype_of(descr.cast::<PyArrayDescr>()?)
}

/// The object as a NumPy array: itself when it is one, else through `__dlpack__` or `asarray`
/// (with `dtype`, when given, for lists and scalars).
fn as_array<'py>(obj: &Bound<'py, PyAny>, dtype: Option<DType>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        return Ok(a.clone());
    }
    let np = numpy(obj.py())?;
    let array = if obj.hasattr("__dlpack__")? {
        np.call_method1("from_dlpack", (obj,))?
    } else {
        let kwargs = PyDict::new(obj.py());
        if let Some(d) = dtype {
            kwargs.set_item("dtype", descr_of(obj.py(), d)?)?;
        }
        np.call_method("asarray", (obj,), Some(&kwargs))?
    };
    Ok(array.cast_into::<PyUntypedArray>()?)
}

/// A host tensor with the array's data (`dtype`: the type expected, for non-arrays).
pub fn to_tensor(obj: &Bound<'_, PyAny>, dtype: Option<DType>) -> PyResult<Tensor> {
    let mut array = as_array(obj, dtype)?;
    if !array.is_c_contiguous() {
        array = numpy(obj.py())?.call_method1("ascontiguousarray", (&array,))?.cast_into::<PyUntypedArray>()?;
    }
    let d = dtype_of(&array.dtype())?;
    let shape = array.shape().to_vec();
    let bytes = shape.iter().product::<usize>() * d.size();
    // SAFETY: a C-contiguous array holds `bytes` bytes at `data`; we read them under the GIL.
    let data = unsafe {
        let ptr = (*npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_array_ptr())).data as *const u8;
        if bytes == 0 { &[][..] } else { std::slice::from_raw_parts(ptr, bytes) }
    };
    Tensor::from_bytes(d, &shape, data).map_err(crate::error::runtime)
}

/// A NumPy array over the tensor's memory, without a copy.
pub fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    let descr = descr_of(py, t.dtype())?;
    let mut dims: Vec<npy_intp> = t.shape().iter().map(|&d| d as npy_intp).collect();
    let holder = Bound::new(py, TensorHolder(t))?;
    let data = holder.get().0.bytes().as_ptr() as *mut std::ffi::c_void;
    // SAFETY: the array views the holder's tensor, which lives as long as the array (its
    // base) and is never touched from Rust again; the dims are C-contiguous over its bytes.
    unsafe {
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            descr.into_dtype_ptr(),
            dims.len() as std::ffi::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            data,
            npyffi::NPY_ARRAY_CARRAY,
            std::ptr::null_mut(),
        );
        let array = Bound::from_owned_ptr_or_err(py, array)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr() as *mut npyffi::PyArrayObject, holder.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}
