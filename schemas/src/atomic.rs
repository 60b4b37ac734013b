//! Crash-safe file commits: write to a temporary name beside the target, fsync, rename,
//! fsync the directory. A killed process leaves at most a temporary file, never a partial
//! file under the final name.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Error, Result};

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        file: path.display().to_string(),
        source,
    }
}

/// The temporary name used while `path` is being written.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// The folder `path` is in: `.` for a bare file name, whose `parent()` is the empty path
/// (which no directory call opens: a commit to `out.jsonl` renamed the file into place and
/// then failed to sync the folder "").
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes `path` through `fill`, atomically. On error the temporary file is removed and
/// any existing file at `path` is left untouched. `fill` may fail with its own error type
/// (a stage's), which is returned as is, its cause chain intact.
pub fn atomic_write<F, E>(path: &Path, fill: F) -> std::result::Result<(), E>
where
    F: FnOnce(&mut BufWriter<File>) -> std::result::Result<(), E>,
    E: From<Error>,
{
    let dir = parent_dir(path);
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = temp_path(path);
    let result = (|| -> std::result::Result<(), E> {
        let file = File::create(&tmp).map_err(io_err(&tmp))?;
        let mut w = BufWriter::new(file);
        fill(&mut w)?;
        w.flush().map_err(io_err(&tmp))?;
        let file = w.into_inner().map_err(|e| io_err(&tmp)(e.into_error()))?;
        file.sync_all().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))?;
        // The rename is durable only once the directory entry is on disk.
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes bytes to `path` atomically.
pub fn atomic_write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    atomic_write(path, |w| w.write_all(bytes).map_err(io_err(path)))
}

/// Lower-case hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lower-case hex SHA-256 of a file's contents, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::parent_dir;

    #[test]
    fn a_bare_file_name_is_in_the_current_folder() {
        assert_eq!(parent_dir(Path::new("out.jsonl")), Path::new("."));
        assert_eq!(parent_dir(Path::new("a/out.jsonl")), Path::new("a"));
        assert_eq!(parent_dir(Path::new("/out.jsonl")), Path::new("/"));
        assert_eq!(parent_dir(Path::new("./out.jsonl")), Path::new("."));
    }
}
