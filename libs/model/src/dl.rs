//! Functions found in the process's libraries at run time: what the libtorch wheel
//! exports beyond its C++ API (MKL's packed product, libgomp's parallel regions), looked up
//! when first wanted so that a libtorch without them still runs.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr};

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// The address of the exported symbol `name` in any library the process has loaded, or
/// None where none exports it.
pub(crate) fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT (a null handle on glibc) only reads the name; a null
    // result means absent.
    let p = unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) };
    (!p.is_null()).then_some(p)
}
