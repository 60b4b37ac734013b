//! Whether the benchmark files beside the repository (`../shared/data/benchmarks`, never
//! copied into it) are here: the test that verifies every benchmark gold against itself
//! runs where they are and is reported as ignored, with its reason, where they are not,
//! rather than passing without checking anything.

fn main() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/benchmarks");
    println!("cargo::rustc-check-cfg=cfg(shared_benchmarks)");
    println!("cargo::rerun-if-changed={}", dir.display());
    if dir.is_dir() {
        println!("cargo::rustc-cfg=shared_benchmarks");
    }
}
