//! What every build script of a crate that links libtorch prints: an rpath to the torch
//! wheel's library folder, so that its tests and binaries run without `LD_LIBRARY_PATH`.
//!
//! cargo applies a `rustc-link-arg` only to the targets of the package whose build script
//! printed it, so each such package has a one-line `build.rs` calling [`rpath`]. torch-sys
//! (`links = "tch"`) publishes its library folder as `DEP_TCH_LIBTORCH_LIB` to the build
//! scripts of the packages that depend on it directly: each of them lists `torch-sys`.

/// Prints the rpath; a package that does not depend on torch-sys directly gets none, and
/// the build says so.
pub fn rpath() {
    match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(dir) => println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}"),
        Err(_) => println!(
            "cargo:warning=DEP_TCH_LIBTORCH_LIB is not set: list torch-sys among this \
             package's dependencies, or its binaries need LD_LIBRARY_PATH"
        ),
    }
}
