//! Helpers shared by the end-to-end tests: the binary, configs, snapshots, Python checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use deltarl_schemas::{
    Acquired, CoeffsSummary, Engine, EvalSummary, RolloutSummary, ScoreSummary, UpdateSummary,
};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The binary of this package, which cargo builds before these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_deltarl"))
}

pub fn python() -> String {
    std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs a Python snippet (with polars) on the given paths; its assertions fail the test.
pub fn run_python(script: &str, args: &[&Path]) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["-c".as_ref(), script.as_ref()];
    all.extend(args.iter().map(|p| p.as_os_str()));
    python_stdout(&all);
}

/// Runs the Python interpreter with `args` and returns what it printed; a failure fails
/// the test with its standard error.
pub fn python_stdout<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = Command::new(python()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The most the sampler's and the trainer's f32 log-probs of iteration `iter` of the run at
/// `root` may differ by: both evaluate the policy that sampled it (the base for the first
/// iteration), summing in other orders (decoding with a cache vs one teacher-forced pass,
/// or vLLM's kernels vs ours), so the worst-case round-off bound of
/// `deltarl_model::roundoff` for that policy over its whole context.
/// The summary `S`'s stage recorded in iteration `iter` of the run in `root`, read as its
/// type (a renamed field breaks this build).
pub fn summary_of<S: deltarl_schemas::StageSummary>(root: &Path, iter: u32) -> S {
    let path = deltarl_schemas::layout::manifest_path(root, iter, S::STAGE);
    let m = deltarl_schemas::Manifest::read(&path).unwrap();
    m.unwrap_or_else(|| panic!("no manifest {}", path.display()))
        .summary_of()
        .unwrap()
}

pub fn logprob_tolerance(root: &Path, iter: u32) -> f64 {
    let (runs, name) = (root.parent().unwrap(), root.file_name().unwrap());
    let run = deltarl::rundir::RunDir::new(runs, &name.to_string_lossy()).unwrap();
    let dir = deltarl::stage::policy_before(&run, &run.base(), iter);
    let p = deltarl::stage::load_policy(&dir, tch::Device::Cpu, deltarl_model::Dtype::F32)
        .unwrap_or_else(|e| panic!("{e:#}"));
    p.model
        .f32_logprob_tolerance(p.model.config.max_position_embeddings)
}

/// The tables that shrink a built-in task's configuration to a micro run: a tiny model
/// with a context of `positions`, a short warm start, 8 prompts x 4 samples.
pub fn micro_tables(positions: usize) -> String {
    format!(
        "[model.tiny]\nhidden_size = 32\nintermediate_size = 64\nnum_hidden_layers = 2\n\
         num_attention_heads = 2\nnum_key_value_heads = 1\n\
         max_position_embeddings = {positions}\n\
         [warmstart]\nsteps = 30\nbatch_size = 32\n\
         [rollout]\nprompts_per_iter = 8\nsamples_per_prompt = 4\nmax_new_tokens = 24\n\
         [score]\noverlong_buffer = 4\n[eval]\nevery = 2\nproblems = 16\n"
    )
}

/// A micro configuration: a tiny model, a short warm start, 8 prompts x 4 samples.
pub fn micro_config(dir: &Path) -> PathBuf {
    let base = repo()
        .join("configs/tiny-arith.toml")
        .canonicalize()
        .unwrap();
    let text = format!("extends = \"{}\"\n{}", base.display(), micro_tables(64));
    let path = dir.join("micro.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Writes `name` as a config that extends `base` with `body`, and returns its path.
pub fn variant(base: &Path, name: &str, body: &str) -> PathBuf {
    let path = base.with_file_name(name);
    let text = format!("extends = {:?}\n{body}", base.display().to_string());
    std::fs::write(&path, text).unwrap();
    path
}

pub fn deltarl(runs: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("DELTARL_RUNS", runs)
        .env("DELTARL_NO_PROGRESS", "1")
        .output()
        .expect("run the deltarl binary")
}

/// `deltarl random-model --out OUT` of a small shape (hidden 64, 2 layers, 2 heads, one
/// key/value head, head size 32 as vLLM's CPU attention takes) and `extra` arguments
/// (vocabulary, family, context, seed).
pub fn small_random_model(out: &Path, extra: &[&str]) {
    let mut args = vec![
        "--hidden",
        "64",
        "--intermediate",
        "128",
        "--layers",
        "2",
        "--heads",
        "2",
        "--kv-heads",
        "1",
    ];
    args.extend_from_slice(extra);
    random_model(out, &args);
}

/// `deltarl random-model --out OUT ARGS...` (the shape and anything else).
pub fn random_model(out: &Path, args: &[&str]) {
    let mut all = vec!["random-model", "--out", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let runs = out.parent().unwrap_or(out).join("runs");
    ok(deltarl(&runs, &all));
}

/// `deltarl iterate --config CONFIG --run RUN EXTRA...`, for tests of what it refuses.
pub fn iterate(runs: &Path, config: &Path, run: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "iterate",
        "--config",
        config.to_str().unwrap(),
        "--run",
        run,
    ];
    args.extend_from_slice(extra);
    deltarl(runs, &args)
}

pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "deltarl failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The files that differ between two snapshots (names only, for readable failures).
pub fn differing(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Every Parquet file under a run, relative path -> bytes.
pub fn parquet_files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        // A run killed early may not have its folder yet.
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .is_some_and(|x| x == "parquet" || x == "safetensors")
            {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A configuration for a model folder `model` on a prompt file of `problems` (answer
/// `2 * i` each): `model_keys` go into its `[model]` table and `rest` (tables) after the
/// data source and template. Returns the config's path.
pub fn file_config(
    dir: &Path,
    name: &str,
    model: &Path,
    problems: &[String],
    model_keys: &str,
    rest: &str,
) -> PathBuf {
    let prompts = dir.join(format!("{name}-prompts.jsonl"));
    let lines: Vec<String> = problems
        .iter()
        .enumerate()
        .map(|(i, q)| {
            serde_json::json!({"id": format!("q{i}"), "problem": q, "answer": (2 * i).to_string()})
                .to_string()
        })
        .collect();
    std::fs::write(&prompts, lines.join("\n")).unwrap();
    let base = repo()
        .join("configs/tiny-arith.toml")
        .canonicalize()
        .unwrap();
    let cfg = dir.join(format!("{name}.toml"));
    let text = format!(
        "extends = {:?}\n[model]\nsource = {:?}\n{model_keys}\n[data]\nsource = {:?}\n\
         template = \"User:\\n{{question}}\\nAssistant:\\n\"\n{rest}",
        base.display().to_string(),
        model.display().to_string(),
        prompts.display().to_string()
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// Iteration 1 of the run in `root` opens in polars and its files join on (prompt_id,
/// sample_idx): `rows` responses, each with as many coefficients, old log-probs and
/// feature vectors (bytes / (k x width)) as tokens.
pub fn check_iteration_joins(root: &Path, rows: usize) {
    run_python(
        r#"
import sys, polars as pl
d = sys.argv[1] + "/iter-0001/"
rows = int(sys.argv[2])
key = ["prompt_id", "sample_idx"]
r = pl.read_parquet(d + "rollouts.parquet")
df = r.join(pl.read_parquet(d + "scores.parquet"), on=key).join(
    pl.read_parquet(d + "features.parquet"), on=key).join(pl.read_parquet(d + "coeffs.parquet"), on=key)
assert df.height == r.height == rows, df.height
n = df["response_token_ids"].list.len().to_list()
for col in ["coeff", "old_logprobs"]:
    assert df[col].list.len().to_list() == n, col
# Each response's vectors are one byte string of tokens x k values, 4 or 2 bytes each.
k = int(pl.read_parquet_metadata(d + "features.parquet")["deltarl.k"])
sizes = [len(b) for b in df["features"]]
assert any(sizes == [t * k * w for t in n] for w in (2, 4)), (k, n[:4], sizes[:4])
assert set(df["finish_reason"].unique()) <= {"stop", "length"}
"#,
        &[root, Path::new(&rows.to_string())],
    );
}

/// The last line of a run's `metrics.jsonl` for `stage` (the run's folder `run`).
pub fn last_metrics(run: &Path, stage: &str) -> serde_json::Value {
    let log = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    log.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["stage"] == stage)
        .unwrap_or_else(|| panic!("no {stage} line in {}", run.display()))
}
