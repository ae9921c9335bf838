//! Waiting on the ring's eventfd inside Node's event loop: a libuv poll handle on
//! the loop Node-API gives us (`napi_get_uv_event_loop`), calling back into
//! JavaScript with `napi_make_callback` (so promises resolved there run at once).
//! No thread waits: the fd sits in the loop's epoll set next to sockets and timers.
//!
//! libuv's functions are exported by the Node (and Electron) binary and resolved
//! when the add-on is loaded, like Node-API's own.

use std::ffi::{c_int, c_void};

use napi::{sys, Env, JsFunction, NapiRaw};

/// `uv_handle_type` value of a poll handle (`UV_POLL` in uv.h, stable since libuv 1.0).
const UV_POLL: c_int = 8;
/// `UV_READABLE` in uv.h.
const UV_READABLE: c_int = 1;

type PollCb = unsafe extern "C" fn(handle: *mut c_void, status: c_int, events: c_int);
type CloseCb = unsafe extern "C" fn(handle: *mut c_void);

extern "C" {
    fn uv_handle_size(t: c_int) -> usize;
    fn uv_poll_init(lp: *mut c_void, handle: *mut c_void, fd: c_int) -> c_int;
    fn uv_poll_start(handle: *mut c_void, events: c_int, cb: PollCb) -> c_int;
    fn uv_poll_stop(handle: *mut c_void) -> c_int;
    fn uv_close(handle: *mut c_void, cb: CloseCb);
    fn uv_strerror(err: c_int) -> *const std::ffi::c_char;
}

/// What the poll callback needs; pointed to by the handle's `data` field (the first
/// field of every `uv_handle_t`).
struct Ctx {
    env: sys::napi_env,
    func: sys::napi_ref,
    async_ctx: sys::napi_async_context,
}

/// A libuv poll handle on one descriptor that calls a JavaScript function (with
/// libuv's status, 0 or a negative errno) each time the descriptor is readable,
/// while started.
pub struct Watcher {
    handle: *mut c_void,
    started: bool,
}

fn uv_err(env: Env, what: &str, rc: c_int) -> napi::Error {
    // SAFETY: uv_strerror returns a static string for any code.
    let msg = unsafe { std::ffi::CStr::from_ptr(uv_strerror(rc)) }.to_string_lossy();
    crate::errors::error(env, "SHMRING_OS", &format!("{what} failed: {msg}"))
}

impl Watcher {
    pub fn new(env: Env, fd: c_int, callback: JsFunction) -> napi::Result<Watcher> {
        let lp = env.get_uv_event_loop()?;
        // SAFETY: uv_handle_size is a pure function of the handle type.
        let size = unsafe { uv_handle_size(UV_POLL) };
        // SAFETY: plain allocation, freed in `on_close` (or below on failure).
        let handle = unsafe { libc::calloc(1, size) };
        if handle.is_null() {
            return Err(crate::errors::error(
                env,
                "SHMRING_OS",
                "out of memory for a poll handle",
            ));
        }
        // SAFETY: `handle` is zeroed memory of the size libuv asks for a poll handle;
        // the loop is Node's, and this runs on its thread.
        let rc = unsafe { uv_poll_init(lp.cast(), handle, fd) };
        if rc != 0 {
            // SAFETY: never initialised, so libuv holds no pointer to it.
            unsafe { libc::free(handle) };
            return Err(uv_err(env, "uv_poll_init", rc));
        }
        let mut ctx = Ctx {
            env: env.raw(),
            func: std::ptr::null_mut(),
            async_ctx: std::ptr::null_mut(),
        };
        let mut resource = std::ptr::null_mut();
        let name = env.create_string("shmring.Consumer")?;
        // SAFETY: live env and values, local out-pointers. The function reference is
        // strong (count 1): the callback lives as long as the watcher.
        unsafe {
            sys::napi_create_reference(env.raw(), callback.raw(), 1, &mut ctx.func);
            sys::napi_create_object(env.raw(), &mut resource);
            sys::napi_async_init(env.raw(), resource, name.raw(), &mut ctx.async_ctx);
            *(handle as *mut *mut Ctx) = Box::into_raw(Box::new(ctx));
        }
        Ok(Watcher {
            handle,
            started: false,
        })
    }

    /// Starts watching for readability (idempotent).
    pub fn start(&mut self, env: Env) -> napi::Result<()> {
        if !self.started {
            // SAFETY: an initialised poll handle of this loop, not closed.
            let rc = unsafe { uv_poll_start(self.handle, UV_READABLE, on_poll) };
            if rc != 0 {
                return Err(uv_err(env, "uv_poll_start", rc));
            }
            self.started = true;
        }
        Ok(())
    }

    /// Stops watching (idempotent): a stopped handle does not keep the loop alive.
    pub fn stop(&mut self) {
        if self.started {
            // SAFETY: an initialised poll handle, not closed.
            unsafe { uv_poll_stop(self.handle) };
            self.started = false;
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // SAFETY: closing an initialised handle once; libuv frees nothing itself and
        // calls `on_close` later on the loop thread, which frees the memory.
        unsafe { uv_close(self.handle, on_close) };
    }
}

unsafe extern "C" fn on_close(handle: *mut c_void) {
    // SAFETY: `data` holds the Ctx box set in `new`; the handle is closed, so this is
    // its last use, on the loop thread.
    unsafe {
        let ctx = Box::from_raw(*(handle as *mut *mut Ctx));
        sys::napi_async_destroy(ctx.env, ctx.async_ctx);
        sys::napi_delete_reference(ctx.env, ctx.func);
        libc::free(handle);
    }
}

unsafe extern "C" fn on_poll(handle: *mut c_void, status: c_int, _events: c_int) {
    // SAFETY: called by libuv on the loop thread for a handle we started; `data`
    // holds our Ctx until `on_close`. The env is the add-on's, alive while the loop
    // runs its callbacks. A handle scope covers the values made here.
    unsafe {
        let ctx = &**(handle as *mut *mut Ctx);
        let env = ctx.env;
        let mut scope = std::ptr::null_mut();
        if sys::napi_open_handle_scope(env, &mut scope) != sys::Status::napi_ok {
            return;
        }
        let mut func = std::ptr::null_mut();
        let mut recv = std::ptr::null_mut();
        let mut arg = std::ptr::null_mut();
        sys::napi_get_reference_value(env, ctx.func, &mut func);
        sys::napi_get_global(env, &mut recv);
        sys::napi_create_int32(env, status, &mut arg);
        if !func.is_null() {
            let mut out = std::ptr::null_mut();
            let st = sys::napi_make_callback(env, ctx.async_ctx, recv, func, 1, &arg, &mut out);
            if st == sys::Status::napi_pending_exception {
                // An exception escaped the callback: report it as uncaught.
                let mut err = std::ptr::null_mut();
                sys::napi_get_and_clear_last_exception(env, &mut err);
                sys::napi_fatal_exception(env, err);
            }
        }
        sys::napi_close_handle_scope(env, scope);
    }
}
