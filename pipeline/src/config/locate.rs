//! Where a configuration path given on the command line is read from.
//!
//! A relative path is the working directory's first. When it is not there and
//! `DELTARL_HOME` names a folder (the installed wheel's package sets it to the folder that
//! holds the configurations it ships), the same relative path is tried under that folder,
//! so `--config configs/tiny-arith.toml` works outside a source checkout as it does inside.

use std::path::{Path, PathBuf};

/// The file to read for `path`: `path` itself unless it is relative, missing, and present
/// under `home`.
pub fn locate(path: &Path, home: Option<&Path>) -> PathBuf {
    match home {
        Some(home) if path.is_relative() && !path.exists() && home.join(path).is_file() => {
            home.join(path)
        }
        _ => path.to_path_buf(),
    }
}

/// `DELTARL_HOME`, when set and not empty.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("DELTARL_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_working_directory_first_then_home() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join("configs")).unwrap();
        std::fs::write(home.path().join("configs/a.toml"), "").unwrap();
        let rel = Path::new("configs/a.toml");
        // Missing in the working directory (the crate's folder has no configs/), present
        // under home: home's.
        assert!(!rel.exists());
        assert_eq!(locate(rel, Some(home.path())), home.path().join(rel));
        // An absolute path is never redirected, even when it is missing.
        let absent = home.path().join("elsewhere").join(rel);
        assert_eq!(locate(&absent, Some(home.path())), absent);
        // Without a home, or when home lacks it too, the path as given (its error names it).
        assert_eq!(locate(rel, None), rel);
        assert_eq!(
            locate(Path::new("configs/b.toml"), Some(home.path())),
            Path::new("configs/b.toml")
        );
    }
}
