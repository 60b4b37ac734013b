//! Runs on disks that refuse writes, each made in a mount namespace of the test's own
//! (`unshare --mount`, as root, so the host's mounts are untouched):
//! - full: a stage whose output no longer fits fails naming the file it was writing (a
//!   full disk surfaces inside the Parquet writer, which knows only the table), and
//!   nothing half-written is left under the output's name;
//! - read-only: what only reads a finished run (a no-op `iterate --until`, `status`)
//!   works; the next iteration fails naming what it could not write.

use std::path::Path;
use std::process::Command;

use crate::common::{bin, iterate, micro_config, ok};

/// Bytes `dir` takes on a tmpfs: each file's size rounded up to whole 4 KiB pages.
fn pages(dir: &Path, skip: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p == skip {
            continue;
        }
        if p.is_dir() {
            total += pages(&p, skip);
        } else {
            total += std::fs::metadata(&p).unwrap().len().div_ceil(4096) * 4096;
        }
    }
    total
}

#[test]
fn a_full_disk_names_the_file_being_written() {
    assert!(
        is_root(),
        "this test mounts a tmpfs in a mount namespace of its own: run it as root (CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let config = micro_config(dir.path());
    ok(iterate(&runs, &config, "m", &[]));
    let features = runs.join("m/iter-0001/features.parquet");
    let size = std::fs::metadata(&features).unwrap().len();
    assert!(
        size > 16 * 4096,
        "the features file is too small to cut: {size}"
    );
    // Everything but the features file, and half of the room the features file needs.
    let room = pages(&runs, &features) + size / 2;
    let mnt = dir.path().join("full");
    std::fs::create_dir(&mnt).unwrap();
    let script = format!(
        "set -e\nmount -t tmpfs -o size={room} tmpfs {mnt}\n\
         tar -C {runs} --exclude=features.parquet -cf - m | tar -C {mnt} -xf -\n\
         {bin} --runs-dir {mnt} stage features --run m --iter 1 --force && exit 3\n\
         ls {mnt}/m/iter-0001 > {listing}\n",
        mnt = mnt.display(),
        runs = runs.display(),
        bin = bin().display(),
        listing = dir.path().join("listing").display(),
    );
    let out = in_mount_namespace(&script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the stage did not fail as expected: {stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot write {}",
            mnt.join("m/iter-0001/features.parquet").display()
        )),
        "{stderr}"
    );
    // Neither the file nor its temporary is left.
    let listing = std::fs::read_to_string(dir.path().join("listing")).unwrap();
    assert!(!listing.contains("features"), "{listing}");
    assert!(listing.contains("rollouts.parquet"), "{listing}");
}

/// `script` run by bash in a mount namespace of its own.
fn in_mount_namespace(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c", script])
        .env("DELTARL_NO_PROGRESS", "1")
        .output()
        .unwrap()
}

#[test]
fn a_read_only_run_serves_what_only_reads_it() {
    assert!(
        is_root(),
        "this test remounts a folder read-only: run it as root (CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let config = micro_config(dir.path());
    ok(iterate(&runs, &config, "m", &[]));
    let deltarl = |args: &str| format!("{} --runs-dir {} {args}", bin().display(), runs.display());
    let script = format!(
        "set -u\nmount --bind {runs} {runs} && mount -o remount,ro,bind {runs} || exit 9\n\
         {noop} || exit 3\n{status} || exit 4\n{next} && exit 5\nexit 0\n",
        runs = runs.display(),
        noop = deltarl(&format!(
            "iterate --config {} --run m --until 1",
            config.display()
        )),
        status = deltarl("status --run m"),
        next = deltarl(&format!(
            "iterate --config {} --run m --iters 1",
            config.display()
        )),
    );
    let out = in_mount_namespace(&script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    // The next iteration's error names a path of the run.
    assert!(
        stderr.contains(&runs.join("m").display().to_string()),
        "{stderr}"
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
