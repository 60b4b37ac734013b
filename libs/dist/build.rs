//! Compiles `src/c10d.cpp` against the headers of the libtorch torch-sys links (the torch
//! wheel's `include/`), the way torch-sys compiles its own wrapper. gloo's headers are not
//! in the wheel: they come from the system (Debian's `libgloo-dev`) or `DELTARL_GLOO_INCLUDE`;
//! without them the shim is built without gloo and a run with several ranks says why.
//!
//! Debian's gloo (a 2022 snapshot) is older than the one compiled into the wheel. That is
//! safe here because the shim instantiates no gloo code: it only holds gloo's device
//! through `std::shared_ptr` (whose layout does not depend on the class) and calls
//! functions libtorch exports; the class layouts it builds (`ProcessGroupGloo::Options`)
//! come from the wheel's own headers.

use std::path::{Path, PathBuf};

#[path = "src/cuda_include.rs"]
mod cuda_include;

/// The defines under which `c10d.cpp` builds its NCCL backend.
fn nccl_defines(b: &mut cc::Build) {
    b.define("DELTARL_NCCL", None)
        .define("USE_C10D_NCCL", None)
        .define("USE_CUDA", None);
}

fn main() {
    println!("cargo:rerun-if-changed=src/c10d.cpp");
    println!("cargo:rerun-if-env-changed=DELTARL_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    // torch-sys (`links = "tch"`) publishes its library folder to dependents.
    let lib = PathBuf::from(
        std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys publishes DEP_TCH_LIBTORCH_LIB"),
    );
    let root = lib.parent().unwrap_or(Path::new("/")).to_path_buf();
    let include = root.join("include");
    let gloo_dir = std::env::var("DELTARL_GLOO_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/usr/include"));
    // Rebuilt when the headers appear (cargo reruns a script whose watched file is missing
    // on every build) or change.
    println!(
        "cargo:rerun-if-changed={}",
        gloo_dir.join("gloo/algorithm.h").display()
    );
    let gloo = Some(gloo_dir).filter(|d| d.join("gloo/algorithm.h").exists());
    let mut b = cc::Build::new();
    b.cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!(
            "-D_GLIBCXX_USE_CXX11_ABI={}",
            std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into())
        ))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .file("src/c10d.cpp");
    match &gloo {
        Some(dir) => {
            b.include(dir)
                .define("DELTARL_GLOO", None)
                .define("USE_C10D_GLOO", None);
        }
        None => println!(
            "cargo:warning=gloo headers not found (apt-get install libgloo-dev, or set \
             DELTARL_GLOO_INCLUDE): deltarl is built without multi-process support"
        ),
    }
    // The NCCL check (`tests/nccl_shim.rs`) compiles this same file with these same flags
    // plus the NCCL defines and CUDA's headers, without linking it: it learns the compiler
    // and its arguments from this file.
    let mut check = b.clone();
    nccl_defines(&mut check);
    let tool = check.get_compiler();
    let mut lines = vec![tool.path().display().to_string()];
    lines.extend(tool.args().iter().map(|a| a.to_string_lossy().into_owned()));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let args = out.join("nccl-check-command.txt");
    std::fs::write(&args, lines.join("\n") + "\n").expect("OUT_DIR is writable");
    println!("cargo:rustc-env=DELTARL_C10D_NCCL_CHECK={}", args.display());
    println!("cargo:rustc-env=DELTARL_C10D_TORCH_ROOT={}", root.display());
    if std::env::var_os("CARGO_FEATURE_NCCL").is_some() {
        println!("cargo:rerun-if-env-changed=DELTARL_CUDA_INCLUDE");
        for inc in cuda_include::dirs(&root) {
            b.include(inc);
        }
        nccl_defines(&mut b);
        println!("cargo:rustc-link-lib=torch_cuda");
    }
    b.compile("deltarl_c10d");
    println!("cargo:rustc-link-search=native={}", lib.display());
    deltarl_torch_build::rpath();
    println!("cargo:rustc-link-lib=torch_cpu");
    println!("cargo:rustc-link-lib=c10");
    println!("cargo:rustc-link-lib=stdc++");
}
