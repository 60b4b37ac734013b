//! For tests of code that runs under a process group: a test binary relaunches one of its
//! own tests as the ranks of a `torchrun` (the venv's, next to `DELTARL_PYTHON`), and that
//! test, a worker, connects to the group. Workers are `#[ignore]`d tests: a plain `cargo
//! test` lists them as ignored, never as passed, and the launching test runs them with
//! `--ignored` under torchrun.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::group::Group;
use crate::launch::Launch;

/// The variable that names the worker a relaunch runs (a worker refuses to run without it).
const WORKER: &str = "DELTARL_DIST_WORKER";

/// torchrun from the environment deltarl builds against (`DELTARL_PYTHON`'s folder).
pub fn torchrun() -> Option<PathBuf> {
    let py = std::env::var_os("DELTARL_PYTHON")?;
    let t = std::path::Path::new(&py).parent()?.join("torchrun");
    t.exists().then_some(t)
}

/// Runs this test binary's test `worker` as `world` ranks under torchrun, with `env` set,
/// and returns their output. Panics where torchrun is missing: the test cannot run, so it
/// must not pass.
pub fn launch(worker: &str, world: usize, env: &[(&str, &str)]) -> Output {
    let Some(torchrun) = torchrun() else {
        panic!("torchrun not found next to DELTARL_PYTHON (make venv)");
    };
    let exe = std::env::current_exe().expect("the test binary");
    let mut c = Command::new(torchrun);
    c.args(["--standalone", "--nproc-per-node", &world.to_string()])
        .args(["--no-python", "--"])
        .arg(exe)
        .args([worker, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(WORKER, worker);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("torchrun runs")
}

/// The group of worker `name`, which only [`launch`] runs (under torchrun), with a 60 s
/// collective timeout.
pub fn worker(name: &str) -> (Launch, Group) {
    assert_eq!(
        std::env::var(WORKER).ok().as_deref(),
        Some(name),
        "a worker runs only under torchrun, launched by the test that names it"
    );
    let l = Launch::from_env()
        .expect("launch variables")
        .expect("torchrun sets WORLD_SIZE");
    let g = Group::connect(&l, Duration::from_secs(60), false)
        .expect("rendezvous")
        .with_timeout_origin("set by the test");
    (l, g)
}

/// A launch's stdout and stderr, for assertions and failure messages.
pub fn output_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}
