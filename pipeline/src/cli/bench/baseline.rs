//! The Python side of the benchmarks: the interpreter, and the baseline scripts and case
//! files, which are compiled into the binary and written to a temporary folder when a
//! benchmark runs (an installed `deltarl` has no source tree to read them from).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A file the benchmarks hand to Python: its name and contents.
pub struct Asset {
    pub name: &'static str,
    pub text: &'static str,
}

/// The numpy DelTA estimator the coefficient math is pinned against.
pub const COEFFS_REFERENCE: Asset = Asset {
    name: "reference.py",
    text: include_str!("../../../../stages/coeffs/tests/reference.py"),
};
/// HF math-verify's verdicts and speed on a case file.
pub const MATH_VERIFY: Asset = Asset {
    name: "bench_math_verify.py",
    text: include_str!("../../../../libs/verify/tests/bench_math_verify.py"),
};
/// The agreement table labelled by math-verify (`expected`).
pub const VERIFY_CASES: Asset = Asset {
    name: "cases.jsonl",
    text: include_str!("../../../../libs/verify/tests/cases.jsonl"),
};
/// Hand-written cases labelled with the intended verdicts (`intended`).
pub const VERIFY_WRITTEN: Asset = Asset {
    name: "written.jsonl",
    text: include_str!("../../../../libs/verify/tests/written.jsonl"),
};
/// HumanEval's records, and its programs run as plain subprocesses (`bench code`).
pub const CODE_SUBPROCESS: Asset = Asset {
    name: "bench_subprocess.py",
    text: include_str!("../../../../libs/code/tests/bench_subprocess.py"),
};
/// transformers' `generate` on a model folder.
pub const HF_GENERATE: Asset = Asset {
    name: "hf_generate.py",
    text: include_str!("hf_generate.py"),
};

/// The interpreter of the baselines: `DELTARL_PYTHON`, else the venv `make` creates
/// (`~/.cache/deltarl/venv`, with numpy, torch, transformers and math-verify), else
/// `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("DELTARL_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = std::env::var_os("HOME")
        .map(|h| Path::new(&h).join(".cache/deltarl/venv/bin/python"))
        .filter(|p| p.exists());
    venv.unwrap_or_else(|| PathBuf::from("python3"))
}

/// A temporary folder holding the assets a benchmark needs; removed when dropped.
pub struct Assets {
    dir: tempfile::TempDir,
}

impl Assets {
    pub fn write(assets: &[&Asset]) -> Result<Assets> {
        let dir = tempfile::Builder::new()
            .prefix("deltarl-bench-")
            .tempdir()
            .context("cannot make a temporary folder for the benchmark's baseline")?;
        for a in assets {
            let p = dir.path().join(a.name);
            std::fs::write(&p, a.text).with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(Assets { dir })
    }

    /// The written path of `a`, as an argument.
    pub fn path(&self, a: &Asset) -> String {
        self.dir.path().join(a.name).display().to_string()
    }
}

/// Runs a Python baseline and returns its standard output.
pub fn run_text(args: &[String]) -> Result<String> {
    run_text_with(&python(), args)
}

/// [`run_text`] under the interpreter `py` (vLLM's virtual environment, say).
pub fn run_text_with(py: &Path, args: &[String]) -> Result<String> {
    let out = Command::new(py).args(args).output().with_context(|| {
        format!(
            "cannot run the Python baseline with {} (set DELTARL_PYTHON, or run `make venv`)",
            py.display()
        )
    })?;
    if !out.status.success() {
        bail!(
            "baseline failed under {} (DELTARL_PYTHON picks the interpreter; `make venv` \
             installs what the baselines import): {}",
            py.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a Python baseline whose last line of output is one number (seconds, or a rate).
pub fn run_number(args: &[String]) -> Result<f64> {
    let text = run_text(args)?;
    text.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .with_context(|| format!("baseline printed {text:?}"))
}
