//! numpy views into ring memory, and the guard object that counts them.

use ndarray::{ArrayViewD, IxDyn, ShapeBuilder};
use numpy::{Element, PyArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::consumer::PyFrame;
use crate::errors::BadMediaHeader;

/// The `base` of numpy arrays made by `Frame.planes()`, `Frame.samples()` and
/// `Frame.array()`: while one exists, its frame's record is not handed back to the
/// ring (see `Frame.release`). Dropped on any thread.
#[pyclass(frozen, module = "shmring._shmring", name = "_ViewGuard")]
pub struct ViewGuard {
    frame: Py<PyFrame>,
}

impl ViewGuard {
    /// A guard counted as a view of `frame`, and the payload's address.
    pub fn new<'py>(frame: &Bound<'py, PyFrame>) -> PyResult<(Bound<'py, ViewGuard>, *mut u8)> {
        let base = frame.get().view_added()?;
        let guard = ViewGuard {
            frame: frame.clone().unbind(),
        };
        // On error the guard is dropped, and the view uncounted.
        Ok((Bound::new(frame.py(), guard)?, base))
    }
}

impl Drop for ViewGuard {
    fn drop(&mut self) {
        self.frame.get().view_dropped();
    }
}

/// One plane (or packed sample array) to expose: byte offset from `base_ptr`,
/// shape in elements, strides in bytes.
pub struct Plane<'a> {
    pub offset: usize,
    pub shape: &'a [usize],
    pub byte_strides: &'a [usize],
}

/// A numpy array of `T` over ring memory at `base_ptr + plane.offset`, whose numpy
/// `base` is `owner` (kept alive by the array).
///
/// # Safety
/// The memory described by `plane` must lie inside a mapping that `owner` keeps
/// alive, and every element address it describes must be in bounds.
pub unsafe fn array_of<'py, T: Element>(
    owner: Bound<'py, PyAny>,
    base_ptr: *mut u8,
    plane: &Plane<'_>,
    writable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let size = std::mem::size_of::<T>();
    // SAFETY: the caller guarantees the offset is inside the mapping.
    let ptr = unsafe { base_ptr.add(plane.offset) };
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(BadMediaHeader::new_err(format!(
            "plane at payload offset {} is not aligned for {}-byte samples",
            plane.offset, size
        )));
    }
    let mut strides = [0usize; 4];
    for (i, &s) in plane.byte_strides.iter().enumerate() {
        if !s.is_multiple_of(size) {
            return Err(BadMediaHeader::new_err(format!(
                "stride of {s} bytes is not a multiple of the {size}-byte sample"
            )));
        }
        strides[i] = s / size;
    }
    let shape = IxDyn(plane.shape).strides(IxDyn(&strides[..plane.shape.len()]));
    // SAFETY: in bounds per the caller; the view only lives for this call.
    let view: ArrayViewD<'_, T> = unsafe { ArrayViewD::from_shape_ptr(shape, ptr as *const T) };
    // SAFETY: the array's data stays valid while `owner` lives, and the array holds it.
    let arr = unsafe { PyArray::borrow_from_array(&view, owner) };
    if !writable {
        // SAFETY: a fresh array nobody else has seen; clearing WRITEABLE is always allowed.
        unsafe {
            (*numpy::npyffi::objects::_PyArray_GET_ITEM_DATA(arr.as_array_ptr())).flags &=
                !numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
        }
    }
    Ok(arr.into_any())
}

/// Marks a numpy array read-only (arrays handed out by a reservation, once it is
/// committed or aborted).
pub fn make_readonly(arr: &Bound<'_, PyAny>) {
    if let Ok(a) = arr.cast::<numpy::PyUntypedArray>() {
        // SAFETY: `a` is a live numpy array; clearing WRITEABLE is always allowed.
        unsafe {
            (*numpy::npyffi::objects::_PyArray_GET_ITEM_DATA(a.as_array_ptr())).flags &=
                !numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
        }
    }
}

/// Fills `view` as a one-dimensional buffer of `*len` unsigned bytes at `buf`,
/// exported by `obj` (a new strong reference the buffer keeps).
///
/// # Safety
/// `view` must point to a `Py_buffer` to fill; `buf` must stay valid for `*len`
/// bytes, and `len` (a field of the exporting object) must stay at its address,
/// until the buffer is released — both hold while `obj` is referenced and refuses
/// to release its memory while exports exist.
pub(crate) unsafe fn fill_byte_view(
    view: *mut pyo3::ffi::Py_buffer,
    obj: *mut pyo3::ffi::PyObject,
    buf: *mut std::ffi::c_void,
    len: &isize,
    readonly: bool,
    flags: std::ffi::c_int,
) {
    use pyo3::ffi;
    static ONE: isize = 1;
    let want = |f: std::ffi::c_int| (flags & f) == f;
    // SAFETY: the caller guarantees `view` is valid to write.
    unsafe {
        (*view).obj = obj;
        (*view).buf = buf;
        (*view).len = *len;
        (*view).readonly = readonly as std::ffi::c_int;
        (*view).itemsize = 1;
        (*view).format = if want(ffi::PyBUF_FORMAT) {
            c"B".as_ptr() as *mut _
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if want(ffi::PyBUF_ND) {
            len as *const isize as *mut isize
        } else {
            std::ptr::null_mut()
        };
        (*view).strides = if want(ffi::PyBUF_STRIDES) {
            &ONE as *const isize as *mut isize
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = std::ptr::null_mut();
    }
}
