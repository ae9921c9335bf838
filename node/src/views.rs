//! Views into ring memory: external `ArrayBuffer`s wrapped in `Uint8Array`s, or,
//! where V8's memory cage forbids external buffers, copies.

use std::ffi::c_void;
use std::sync::OnceLock;

use napi::{sys, Env, JsUnknown, NapiValue};

/// Whether this process makes views into the ring (decided once, at load).
static ZERO_COPY: OnceLock<bool> = OnceLock::new();

/// The environment variable that forces the copy path (for tests, and to compare).
pub const FORCE_COPY_ENV: &str = "SHMRING_NODE_FORCE_COPY";

/// Decides, once per process, whether external array buffers can be made: tries to
/// make one (V8 built with its sandbox, as in Electron >= 21, refuses). The
/// environment variable [`FORCE_COPY_ENV`] set to a non-empty value other than "0"
/// forces the copy path.
pub fn detect(env: Env) -> bool {
    *ZERO_COPY.get_or_init(|| {
        if std::env::var(FORCE_COPY_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
            return false;
        }
        static PROBE: [u8; 64] = [0; 64];
        let mut out = std::ptr::null_mut();
        // SAFETY: PROBE is static (outlives any buffer); no finalizer is needed.
        let st = unsafe {
            sys::napi_create_external_arraybuffer(
                env.raw(),
                PROBE.as_ptr() as *mut c_void,
                PROBE.len(),
                None,
                std::ptr::null_mut(),
                &mut out,
            )
        };
        st == sys::Status::napi_ok
    })
}

pub fn zero_copy() -> bool {
    ZERO_COPY.get().copied().unwrap_or(false)
}

fn check(env: Env, st: sys::napi_status, what: &str) -> napi::Result<()> {
    if st == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(crate::errors::error(
            env,
            "SHMRING_OS",
            &format!("{what} failed (Node-API status {st})"),
        ))
    }
}

/// Something kept alive by a view until V8 collects it.
pub type Keep = Box<dyn std::any::Any>;

unsafe extern "C" fn finalize(env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` is the `Box<(Keep, i64)>` leaked by `external_view`, finalized
    // exactly once by V8.
    let b = unsafe { Box::from_raw(hint as *mut (Keep, i64)) };
    let mut adjusted = 0;
    // SAFETY: env is the live environment running this finalizer.
    unsafe { sys::napi_adjust_external_memory(env, -b.1, &mut adjusted) };
    drop(b);
}

/// A `Uint8Array` over `len` bytes at `ptr`, in place (no copy). `keep` lives until
/// V8 collects the buffer (or it is detached). The bytes are reported to V8 as
/// external memory, so that views of large frames are collected in good time.
///
/// # Safety
/// `ptr..ptr+len` must stay valid memory for as long as `keep` lives.
pub unsafe fn external_view(env: Env, ptr: *mut u8, len: usize, keep: Keep) -> napi::Result<View> {
    let hint = Box::into_raw(Box::new((keep, len as i64)));
    let mut ab = std::ptr::null_mut();
    // Node-API wants a null pointer for empty external buffers.
    let data = if len == 0 {
        std::ptr::null_mut()
    } else {
        ptr as *mut c_void
    };
    // SAFETY: per the caller, `data` stays valid while `hint` lives, which V8 drops
    // through `finalize` only once the buffer is gone (or detached).
    let st = unsafe {
        sys::napi_create_external_arraybuffer(
            env.raw(),
            data,
            len,
            Some(finalize),
            hint.cast(),
            &mut ab,
        )
    };
    if st != sys::Status::napi_ok {
        // SAFETY: V8 did not take the hint.
        drop(unsafe { Box::from_raw(hint) });
        return Err(crate::errors::error(
            env,
            "SHMRING_OS",
            &format!("napi_create_external_arraybuffer failed (Node-API status {st})"),
        ));
    }
    let mut adjusted = 0;
    // SAFETY: live env; reporting memory V8 does not own is always allowed.
    unsafe { sys::napi_adjust_external_memory(env.raw(), len as i64, &mut adjusted) };
    uint8_array(env, ab, len)
}

/// A `Uint8Array` over all `len` bytes of the array buffer `ab`.
fn uint8_array(env: Env, ab: sys::napi_value, len: usize) -> napi::Result<View> {
    let mut arr = std::ptr::null_mut();
    check(
        env,
        // SAFETY: live env; `ab` is an array buffer of `len` bytes; local out-pointer.
        unsafe {
            sys::napi_create_typedarray(
                env.raw(),
                sys::TypedarrayType::uint8_array,
                len,
                ab,
                0,
                &mut arr,
            )
        },
        "napi_create_typedarray",
    )?;
    Ok(View {
        array: arr,
        buffer: ab,
    })
}

/// A `Uint8Array` holding a copy of `len` bytes at `ptr` (inside the V8 heap).
///
/// # Safety
/// `ptr..ptr+len` must be readable now.
pub unsafe fn copied_view(env: Env, ptr: *const u8, len: usize) -> napi::Result<View> {
    let (v, data) = new_view(env, len)?;
    if len > 0 {
        // SAFETY: `data` is a fresh buffer of `len` bytes; the source is readable.
        unsafe { std::ptr::copy_nonoverlapping(ptr, data, len) };
    }
    Ok(v)
}

/// A fresh `Uint8Array` of `len` bytes in the V8 heap, and its data pointer.
pub fn new_view(env: Env, len: usize) -> napi::Result<(View, *mut u8)> {
    let mut ab = std::ptr::null_mut();
    let mut data = std::ptr::null_mut();
    check(
        env,
        // SAFETY: live env, local out-pointers.
        unsafe { sys::napi_create_arraybuffer(env.raw(), len, &mut data, &mut ab) },
        "napi_create_arraybuffer",
    )?;
    Ok((uint8_array(env, ab, len)?, data as *mut u8))
}

/// A view just made: the `Uint8Array` and its `ArrayBuffer`.
pub struct View {
    pub array: sys::napi_value,
    pub buffer: sys::napi_value,
}

impl View {
    pub fn into_unknown(self, env: Env) -> JsUnknown {
        // SAFETY: a value of this environment, made in this call.
        unsafe { JsUnknown::from_raw_unchecked(env.raw(), self.array) }
    }
}

/// A weak reference to a view (the `Uint8Array` and its `ArrayBuffer`): returns the
/// same view while JavaScript holds it, and can detach it.
pub struct WeakView {
    env: sys::napi_env,
    array: sys::napi_ref,
    buffer: sys::napi_ref,
}

impl WeakView {
    pub fn new(env: Env, v: &View) -> napi::Result<WeakView> {
        let mut a = std::ptr::null_mut();
        let mut b = std::ptr::null_mut();
        check(
            env,
            // SAFETY: live env and values; refcount 0 makes weak references.
            unsafe { sys::napi_create_reference(env.raw(), v.array, 0, &mut a) },
            "napi_create_reference",
        )?;
        check(
            env,
            // SAFETY: as for the reference above: live env and values.
            unsafe { sys::napi_create_reference(env.raw(), v.buffer, 0, &mut b) },
            "napi_create_reference",
        )?;
        Ok(WeakView {
            env: env.raw(),
            array: a,
            buffer: b,
        })
    }

    /// The view, if JavaScript still holds it.
    pub fn get(&self, env: Env) -> Option<JsUnknown> {
        let mut v = std::ptr::null_mut();
        // SAFETY: our reference, in its environment.
        let st = unsafe { sys::napi_get_reference_value(env.raw(), self.array, &mut v) };
        (st == sys::Status::napi_ok && !v.is_null())
            // SAFETY: a live value of this environment.
            .then(|| unsafe { JsUnknown::from_raw_unchecked(env.raw(), v) })
    }

    /// Detaches the view's buffer if it is still alive: every typed array over it
    /// becomes empty, so no later JavaScript access reaches ring memory.
    pub fn detach(&self, env: Env) {
        let mut v = std::ptr::null_mut();
        // SAFETY: our reference, in its environment.
        let st = unsafe { sys::napi_get_reference_value(env.raw(), self.buffer, &mut v) };
        if st == sys::Status::napi_ok && !v.is_null() {
            // SAFETY: `v` is an ArrayBuffer we created (external, so detachable).
            unsafe { sys::napi_detach_arraybuffer(env.raw(), v) };
        }
    }
}

impl Drop for WeakView {
    fn drop(&mut self) {
        // SAFETY: the references were made in `env`, which outlives the objects of
        // this add-on (they are finalized on its thread, before it is torn down).
        unsafe {
            sys::napi_delete_reference(self.env, self.array);
            sys::napi_delete_reference(self.env, self.buffer);
        }
    }
}
