//! The tests of the run directory: the hash cache, the lock, links.
#![allow(clippy::unwrap_used)]
use super::*;
use deltarl_schemas::sha256_file;
use std::time::SystemTime;

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn hash_cache_serves_old_files_and_notices_changes() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path(), "r").unwrap();
    std::fs::create_dir_all(&run.root).unwrap();
    let f = run.root.join("a.parquet");
    std::fs::write(&f, b"first").unwrap();
    let old = SystemTime::now() - std::time::Duration::from_secs(60);
    set_mtime(&f, old);
    assert_eq!(run.hash(&f).unwrap(), sha256_file(&f).unwrap());
    run.save_hashes();

    // A fresh RunDir reads the cache file: a non-racy entry is trusted as is (shown by
    // planting a marker hash in it).
    let mut cache: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.cache_path()).unwrap()).unwrap();
    cache["a.parquet"]["sha256"] = "planted".into();
    std::fs::write(run.cache_path(), serde_json::to_vec(&cache).unwrap()).unwrap();
    let again = RunDir::new(dir.path(), "r").unwrap();
    assert_eq!(again.hash(&f).unwrap(), "planted");

    // New content (new size and time) is hashed again.
    std::fs::write(&f, b"second!").unwrap();
    assert_eq!(again.hash(&f).unwrap(), sha256_file(&f).unwrap());

    // Racy: rewritten in place with the same size and the same mtime right after being
    // hashed. The entry was taken within the clock tick of the write, so it is not
    // trusted and the change is seen.
    let t = SystemTime::now();
    std::fs::write(&f, b"third!!").unwrap();
    set_mtime(&f, t);
    let before = again.hash(&f).unwrap();
    std::fs::write(&f, b"fourth!").unwrap();
    set_mtime(&f, t);
    let after = again.hash(&f).unwrap();
    assert_ne!(before, after);
    assert_eq!(after, sha256_file(&f).unwrap());

    // A corrupt cache file costs only a re-hash.
    std::fs::write(run.cache_path(), b"{not json").unwrap();
    let fresh = RunDir::new(dir.path(), "r").unwrap();
    assert_eq!(fresh.hash(&f).unwrap(), sha256_file(&f).unwrap());
}

#[test]
fn a_dangling_run_link_is_named_not_reported_as_existing() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path(), "r").unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone"), &run.root).unwrap();
    let e = format!("{:#}", RunLock::acquire(&run).unwrap_err());
    assert!(
        e.contains("is a symbolic link to") && e.contains("gone"),
        "{e}"
    );
    assert!(!e.contains("File exists"), "{e}");
    // Its target restored, the run opens.
    std::fs::create_dir(dir.path().join("gone")).unwrap();
    RunLock::acquire(&run).unwrap();
}

/// A command refused before it recorded anything leaves no run behind; a run with anything
/// in it, or one that was there before, stays.
#[test]
fn a_lock_on_a_run_it_made_and_left_empty_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path(), "r").unwrap();
    drop(RunLock::acquire(&run).unwrap());
    assert!(!run.root.exists());
    let lock = RunLock::acquire(&run).unwrap();
    std::fs::write(run.root.join("run.hash"), b"x").unwrap();
    drop(lock);
    assert!(run.root.join("run.hash").is_file() && run.root.join(".lock").is_file());
    // A run folder that existed empty before is not this lock's to remove.
    let other = RunDir::new(dir.path(), "kept").unwrap();
    std::fs::create_dir_all(&other.root).unwrap();
    drop(RunLock::acquire(&other).unwrap());
    assert!(other.root.join(".lock").is_file());
}
