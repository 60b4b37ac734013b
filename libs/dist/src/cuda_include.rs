//! Where CUDA's and NCCL's headers are, for the NCCL backend of the shim: the nvidia-*
//! wheels a CUDA torch wheel installs beside it (`site-packages/nvidia/*/include`), those
//! unpacked under `DELTARL_CUDA_INCLUDE` (`make cuda-headers` on a machine without CUDA),
//! and the toolkit's. Shared by the build script and the NCCL check (`tests/nccl_shim.rs`),
//! which include this file by path.

use std::path::{Path, PathBuf};

/// The include folders, given the torch wheel's root (the folder holding `include/` and
/// `lib/`).
pub fn dirs(torch_root: &Path) -> Vec<PathBuf> {
    let mut roots = vec![torch_root.join("..")];
    if let Ok(d) = std::env::var("DELTARL_CUDA_INCLUDE") {
        roots.push(PathBuf::from(d));
    }
    let mut dirs = Vec::new();
    for r in roots {
        let mut found: Vec<PathBuf> = std::fs::read_dir(r.join("nvidia"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("include"))
            .filter(|inc| inc.is_dir())
            .collect();
        // Directory order is the file system's: sorted, the command line is the same on
        // every machine.
        found.sort();
        dirs.extend(found);
    }
    let toolkit = Path::new("/usr/local/cuda/include");
    if toolkit.is_dir() {
        dirs.push(toolkit.to_path_buf());
    }
    dirs
}
