//! The NCCL backend of the c10d shim compiles: `src/c10d.cpp` with the build script's own
//! compiler and flags, the NCCL defines and CUDA's headers (`make test` unpacks them from
//! the nvidia-* wheels into `DELTARL_CUDA_INCLUDE`), syntax-checked and never linked, since
//! a CPU torch wheel has no libtorch_cuda. A build with the `nccl` feature is what runs on a
//! GPU machine; this catches a shim that no longer compiles against the wheel's headers
//! without building the workspace a second time under another feature set.

#[path = "../src/cuda_include.rs"]
mod cuda_include;

use std::path::Path;
use std::process::Command;

#[test]
fn the_nccl_backend_compiles_against_the_wheels_headers() {
    let command = std::fs::read_to_string(env!("DELTARL_C10D_NCCL_CHECK"))
        .expect("the build script wrote the compiler's command line");
    let mut words = command.lines();
    let compiler = words.next().expect("a compiler");
    let includes = cuda_include::dirs(Path::new(env!("DELTARL_C10D_TORCH_ROOT")));
    assert!(
        includes.iter().any(|d| d.join("nccl.h").exists()),
        "no nccl.h among {includes:?}: set DELTARL_CUDA_INCLUDE to the headers `make \
         cuda-headers` unpacks (make test does)"
    );
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/c10d.cpp");
    let out = Command::new(compiler)
        .args(words)
        .args(includes.iter().map(|d| format!("-I{}", d.display())))
        .arg("-fsyntax-only")
        .arg(&shim)
        .output()
        .expect("the C++ compiler runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
