//! The C interface of `c10d.cpp`, and the only `unsafe` in deltarl: each call passes
//! pointers that live for the call (tch tensor handles, byte slices) and turns the
//! returned message into an owned `String`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use tch::Tensor;

extern "C" {
    fn deltarl_c10d_has_gloo() -> c_int;
    fn deltarl_c10d_has_nccl() -> c_int;
    fn deltarl_c10d_free_message(m: *mut c_char);
    fn deltarl_device_empty_cache(
        has_accelerator: *mut c_int,
        before: *mut i64,
        after: *mut i64,
    ) -> *mut c_char;
    fn deltarl_c10d_new(
        host: *const c_char,
        port: u16,
        is_server: c_int,
        prefix: *const c_char,
        rank: c_int,
        world: c_int,
        timeout_ms: i64,
        with_cuda: c_int,
        out: *mut *mut c_void,
    ) -> *mut c_char;
    fn deltarl_c10d_free(g: *mut c_void);
    fn deltarl_c10d_abort(g: *mut c_void) -> *mut c_char;
    fn deltarl_c10d_all_reduce_sum(g: *mut c_void, t: *mut c_void) -> *mut c_char;
    fn deltarl_c10d_broadcast(g: *mut c_void, t: *mut c_void, root: c_int) -> *mut c_char;
    fn deltarl_c10d_reduce_sum(g: *mut c_void, t: *mut c_void, dst: c_int) -> *mut c_char;
    fn deltarl_tensor_free_grad(t: *mut c_void) -> *mut c_char;
    fn deltarl_c10d_all_gather(
        g: *mut c_void,
        input: *mut c_void,
        outputs: *mut *mut c_void,
    ) -> *mut c_char;
    fn deltarl_c10d_barrier(g: *mut c_void) -> *mut c_char;
    fn deltarl_c10d_send(g: *mut c_void, t: *mut c_void, dst: c_int) -> *mut c_char;
    fn deltarl_c10d_recv(g: *mut c_void, t: *mut c_void, src: c_int) -> *mut c_char;
    fn deltarl_c10d_store_set(
        g: *mut c_void,
        key: *const c_char,
        data: *const u8,
        len: usize,
    ) -> *mut c_char;
    fn deltarl_c10d_store_try_get(
        g: *mut c_void,
        key: *const c_char,
        found: *mut c_int,
        data: *mut *mut u8,
        len: *mut usize,
    ) -> *mut c_char;
}

pub type Result<T> = std::result::Result<T, String>;

/// The shim's error message, freed.
fn check(m: *mut c_char) -> Result<()> {
    if m.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null return is a NUL-terminated string malloc'ed by the shim, ours to free.
    let s = unsafe { CStr::from_ptr(m) }.to_string_lossy().into_owned();
    // SAFETY: freed once, with the shim's allocator.
    unsafe { deltarl_c10d_free_message(m) };
    Err(s)
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"))
}

pub fn has_gloo() -> bool {
    // SAFETY: no arguments, no state.
    unsafe { deltarl_c10d_has_gloo() != 0 }
}

/// Empties the accelerator's caching allocator: (an accelerator exists, the current
/// device's reserved bytes before, after).
pub fn empty_device_cache() -> Result<(bool, i64, i64)> {
    let (mut has, mut before, mut after) = (0, 0, 0);
    // SAFETY: three out-pointers to locals that live for the call.
    check(unsafe { deltarl_device_empty_cache(&mut has, &mut before, &mut after) })?;
    Ok((has != 0, before, after))
}

pub fn has_nccl() -> bool {
    // SAFETY: no arguments, no state.
    unsafe { deltarl_c10d_has_nccl() != 0 }
}

/// An owned process group (store + backends), freed on drop.
pub struct Raw(*mut c_void);

// SAFETY: c10d's store and backends are thread-safe objects; the handle is only a pointer
// to them, used from one thread at a time through `&mut`-free calls that c10d serialises.
unsafe impl Send for Raw {}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the pointer came from deltarl_c10d_new and is freed once.
        unsafe { deltarl_c10d_free(self.0) }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn new(
    host: &str,
    port: u16,
    is_server: bool,
    prefix: &str,
    rank: usize,
    world: usize,
    timeout_ms: i64,
    with_cuda: bool,
) -> Result<Raw> {
    let (host, prefix) = (cstring(host)?, cstring(prefix)?);
    let mut out: *mut c_void = std::ptr::null_mut();
    // SAFETY: the strings outlive the call; `out` is written only on success.
    check(unsafe {
        deltarl_c10d_new(
            host.as_ptr(),
            port,
            c_int::from(is_server),
            prefix.as_ptr(),
            rank as c_int,
            world as c_int,
            timeout_ms,
            c_int::from(with_cuda),
            &mut out,
        )
    })?;
    if out.is_null() {
        return Err("the c10d shim returned no process group".into());
    }
    Ok(Raw(out))
}

fn handle(t: &mut Tensor) -> *mut c_void {
    t.as_mut_ptr().cast()
}

pub fn all_reduce_sum(g: &Raw, t: &mut Tensor) -> Result<()> {
    // SAFETY: `t` is a live tch tensor (an `at::Tensor*`) for the call.
    check(unsafe { deltarl_c10d_all_reduce_sum(g.0, handle(t)) })
}

pub fn broadcast(g: &Raw, t: &mut Tensor, root: usize) -> Result<()> {
    // SAFETY: as above.
    check(unsafe { deltarl_c10d_broadcast(g.0, handle(t), root as c_int) })
}

pub fn reduce_sum(g: &Raw, t: &mut Tensor, dst: usize) -> Result<()> {
    // SAFETY: as above.
    check(unsafe { deltarl_c10d_reduce_sum(g.0, handle(t), dst as c_int) })
}

/// Makes `t.grad()` undefined, releasing its buffer.
pub fn free_grad(t: &mut Tensor) -> Result<()> {
    // SAFETY: `t` is a live tch tensor; the shim only resets its gradient handle.
    check(unsafe { deltarl_tensor_free_grad(handle(t)) })
}

pub fn send(g: &Raw, t: &mut Tensor, dst: usize) -> Result<()> {
    // SAFETY: as above.
    check(unsafe { deltarl_c10d_send(g.0, handle(t), dst as c_int) })
}

/// `t` must have the shape and kind the sender sends.
pub fn recv(g: &Raw, t: &mut Tensor, src: usize) -> Result<()> {
    // SAFETY: as above.
    check(unsafe { deltarl_c10d_recv(g.0, handle(t), src as c_int) })
}

/// `outputs` must hold one tensor per rank, each shaped like `input`.
pub fn all_gather(g: &Raw, input: &mut Tensor, outputs: &mut [Tensor]) -> Result<()> {
    let mut ptrs: Vec<*mut c_void> = outputs.iter_mut().map(handle).collect();
    // SAFETY: all tensors live for the call; the shim reads `world` pointers, which the
    // caller guarantees `outputs` has.
    check(unsafe { deltarl_c10d_all_gather(g.0, handle(input), ptrs.as_mut_ptr()) })
}

pub fn abort(g: &Raw) -> Result<()> {
    // SAFETY: the group is live; the shim only drops its backends.
    check(unsafe { deltarl_c10d_abort(g.0) })
}

pub fn barrier(g: &Raw) -> Result<()> {
    // SAFETY: the group is live.
    check(unsafe { deltarl_c10d_barrier(g.0) })
}

pub fn store_set(g: &Raw, key: &str, value: &[u8]) -> Result<()> {
    let key = cstring(key)?;
    // SAFETY: key and value outlive the call.
    check(unsafe { deltarl_c10d_store_set(g.0, key.as_ptr(), value.as_ptr(), value.len()) })
}

pub fn store_try_get(g: &Raw, key: &str) -> Result<Option<Vec<u8>>> {
    let key = cstring(key)?;
    let (mut found, mut data, mut len): (c_int, *mut u8, usize) = (0, std::ptr::null_mut(), 0);
    // SAFETY: the out-pointers are valid locals; `data` is malloc'ed by the shim when found.
    check(unsafe {
        deltarl_c10d_store_try_get(g.0, key.as_ptr(), &mut found, &mut data, &mut len)
    })?;
    if found == 0 || data.is_null() {
        return Ok(None);
    }
    // SAFETY: the shim wrote `len` bytes at `data`; copied, then freed once.
    let v = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
    // SAFETY: malloc'ed by the shim.
    unsafe { deltarl_c10d_free_message(data.cast()) };
    Ok(Some(v))
}
