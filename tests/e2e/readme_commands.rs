//! Every shell command the README shows, run as typed.
//!
//! Each ```sh block of the README (and each inline `bin/deltarl ...` command of its prose)
//! is listed below by its first line, with how it is run: as a bash script in a scratch
//! folder laid out like the clone (`bin/deltarl`, `configs/`), with only the replacements
//! the entry states — counts of iterations and seeds, a benchmark's size, a placeholder
//! path — or, for the few that cannot run here, where else they are run. A block missing
//! from the list, or an entry the README no longer has, fails the test, so the README and
//! this test change together.
//!
//! Sizes shrink in the scratch `configs/`: each built-in task's configuration there is the
//! repository's own (renamed `NAME-full.toml`) extended by a micro model and batch, so the
//! commands name the configurations exactly as a reader types them.

use std::path::Path;
use std::process::Command;

use crate::common::{bin, micro_tables, repo};

/// How one README block is run.
enum How {
    /// As a bash script, after these (text, replacement) edits; each text must occur.
    Run(&'static [(&'static str, &'static str)]),
    /// Not run by this test: why, and where it is run instead.
    Elsewhere(&'static str),
}

/// README blocks by their first line.
const BLOCKS: &[(&str, How)] = &[
    (
        "make iterate   # set up",
        How::Elsewhere(
            "the set-up commands: CI runs `make test` (.ci/run); `make iterate` is \
             `bin/deltarl iterate` on the CPU default, which this test runs first",
        ),
    ),
    (
        "bin/deltarl status --run tiny-arith",
        How::Run(&[
            // The run whose configuration `status --config` compares with: any other file.
            (
                "status --run tiny-arith --config my.toml",
                "status --run tiny-arith --config configs/dapo.toml",
            ),
            (
                "--config configs/dapo.toml --run dapo --iters 20",
                "--config configs/dapo.toml --run dapo --iters 2",
            ),
            // `make report` builds the tool, then runs this (`make test` built it).
            (
                "make report RUNS=tiny-arith",
                "bin/deltarl report --run tiny-arith",
            ),
            ("--seeds 3 --iters 20", "--seeds 1 --iters 1"),
            ("--iters 10 --seeds 3", "--iters 1 --seeds 1"),
            ("--seeds 2 --iters 5 --name methods", "--seeds 1 --iters 1 --name methods"),
            ("bench coeffs  ", "bench coeffs --tokens 20000 --reps 1  "),
            // The micro model's vectors have 32 dimensions.
            ("--dims 16,32,64", "--dims 4,8,16 --reps 1"),
            (
                "--dim 1024 --response-tokens 20000",
                "--dim 64 --response-tokens 2000 --tokens 8000 --reps 1",
            ),
            ("bench verify  ", "bench verify --reps 1  "),
            (
                "bench rollout --model runs/tiny-arith/base",
                "bench rollout --model runs/tiny-arith/base --reps 1 --batch 4 --new-tokens 8",
            ),
            (
                "--config my.toml --model Qwen",
                "--config configs/dapo.toml --model Qwen",
            ),
        ]),
    ),
    (
        "bin/deltarl random-model --out /tmp/qwen2-tiny",
        How::Run(&[
            // The reader's training file: a verl-layout Parquet file this test writes.
            ("/path/to/train.parquet", "train.parquet"),
            // A server that runs until stopped (the event files are checked by
            // tests/e2e/runs.rs).
            ("tensorboard --logdir runs/mine/tb", "test -d runs/mine/tb"),
        ]),
    ),
    (
        "bin/deltarl random-model --family llama --vocab 49152",
        How::Run(&[
            (
                "--vocab 49152 --hidden 576 --intermediate 1536 \\\n    --layers 30 --heads 9 --kv-heads 3",
                "--vocab 2048 --hidden 64 --intermediate 128 \\\n    --layers 2 --heads 2 --kv-heads 1",
            ),
            (
                "--prompts 64 --batch 8 \\\n    --prompt-len 160 --min-prompt-len 32 --new-tokens 128 --reps 3",
                "--prompts 4 --batch 2 \\\n    --prompt-len 16 --min-prompt-len 4 --new-tokens 4 --reps 1",
            ),
            // The real model (`make test` ran `make smollm2` and `make vllm`) at micro size.
            (
                "--prompts 8 --batch 8 \\\n    --prompt-len 48 --min-prompt-len 16 --new-tokens 64 --reps 3",
                "--prompts 2 --batch 2 \\\n    --prompt-len 12 --min-prompt-len 4 --new-tokens 4 --reps 1",
            ),
            // Packed against unpacked on the real model at the engine issue's shape, micro.
            (
                "--prompts 64 --batch 8 \\\n    --prompt-len 48 --min-prompt-len 16 --new-tokens 128 --reps 3",
                "--prompts 2 --batch 2 \\\n    --prompt-len 12 --min-prompt-len 4 --new-tokens 4 --reps 1",
            ),
        ]),
    ),
    (
        "make smollm2   # SmolLM2-135M-Instruct",
        How::Run(&[
            // `make test` ran `make smollm2` before the tests: its folder is there.
            (
                "make smollm2   #",
                "test -f ~/.cache/deltarl/models/SmolLM2-135M-Instruct/import.json   #",
            ),
            ("--limit 200 \\\n    --k 4", "--limit 4 \\\n    --k 1"),
            // What `make iterate` runs once the folder is there (the micro sizes of this
            // scratch folder's configs/smollm2-math.toml).
            (
                "make iterate CONFIG=configs/smollm2-math.toml RUN=smollm2",
                "bin/deltarl iterate --config configs/smollm2-math.toml --run smollm2",
            ),
        ]),
    ),
    (
        "bin/deltarl bench trl --config configs/smollm2-math.toml",
        How::Run(&[(
            "--reps 3",
            "--reps 1 --set rollout.prompts_per_iter=2 --set rollout.samples_per_prompt=2 \\\n    \
             --set rollout.max_new_tokens=8",
        )]),
    ),
    (
        "~/.cache/deltarl/venv/bin/torchrun --standalone",
        How::Run(&[]),
    ),
    (
        "python3 -m venv ~/deltarl",
        How::Elsewhere(
            "installs the wheel `make wheel` builds: tests/e2e/wheel.rs builds it, installs it \
             into a new venv and runs these commands there",
        ),
    ),
    (
        "bin/deltarl iterate --config configs/tiny-code.toml --run tiny-code --iters 2",
        How::Run(&[]),
    ),
    (
        "bin/deltarl bench code",
        How::Run(&[("bench code", "bench code --reps 1 --workers 1")]),
    ),
];

/// The README's shell blocks (first line, text) and inline `bin/deltarl` commands.
fn blocks(readme: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = readme;
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + 6..];
        let end = body.find("```").expect("an unclosed ```sh block");
        let text = &body[..end];
        out.push((
            text.lines().next().unwrap_or("").to_string(),
            text.to_string(),
        ));
        rest = &body[end + 3..];
    }
    // Inline commands of the prose: `bin/deltarl ...` code spans outside the blocks.
    for span in code_spans(&prose(readme)) {
        if span.starts_with("bin/deltarl ") {
            out.push((span.clone(), span));
        }
    }
    out
}

/// The README without its fenced blocks.
fn prose(readme: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Markdown code spans: a run of n backticks up to the next run of exactly n.
fn code_spans(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let run_at = |i: usize| b[i..].iter().take_while(|&&c| c == b'`').count();
    let (mut spans, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let start = i + n;
        let mut j = start;
        let end = loop {
            match b[j.min(b.len())..].iter().position(|&c| c == b'`') {
                None => break None,
                Some(k) => {
                    let at = j + k;
                    let m = run_at(at);
                    if m == n {
                        break Some(at);
                    }
                    j = at + m;
                }
            }
        };
        let Some(end) = end else { break };
        spans.push(text[start..end].trim().to_string());
        i = end + n;
    }
    spans
}

/// A scratch folder laid out like the clone, with micro configurations.
fn scratch(dir: &Path) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::os::unix::fs::symlink(bin(), dir.join("bin/deltarl")).unwrap();
    let report = bin().with_file_name("deltarl-report");
    if report.is_file() {
        std::os::unix::fs::symlink(&report, dir.join("bin/deltarl-report")).unwrap();
    }
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let configs = dir.join("configs");
    std::fs::create_dir(&configs).unwrap();
    for e in std::fs::read_dir(repo().join("configs")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&p).unwrap();
        if name.starts_with("tiny-") || !name.starts_with("qwen") {
            let stem = name.trim_end_matches(".toml");
            std::fs::write(configs.join(format!("{stem}-full.toml")), text).unwrap();
            std::fs::write(
                configs.join(&name),
                // A context of 128: the worded-steps prompts are longer than 64 tokens.
                format!("extends = \"{stem}-full.toml\"\n{}", micro_tables(128)),
            )
            .unwrap();
        } else {
            std::fs::write(configs.join(&name), text).unwrap();
        }
    }
    // A verl-layout training file for the "Coming from verl" walkthrough.
    let script = r#"
import sys, polars as pl
rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
         "reward_model": {"ground_truth": str(2 * i)}, "data_source": "toy",
         "extra_info": {"index": i}} for i in range(8)]
pl.DataFrame(rows).write_parquet(sys.argv[1])
"#;
    crate::common::run_python(script, &[&dir.join("train.parquet")]);
}

#[test]
fn every_readme_command_runs_as_typed() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let found = blocks(&readme);
    for (first, _) in &found {
        assert!(
            BLOCKS.iter().any(|(k, _)| first.starts_with(k)),
            "the README's block starting {first:?} is not in this test: run it here, or say \
             where it runs"
        );
    }
    for (k, _) in BLOCKS {
        assert!(
            found.iter().any(|(first, _)| first.starts_with(k)),
            "this test lists a block {k:?} the README no longer has"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    scratch(root);
    let tmp = format!("{}/tmp/", root.display());
    let bash = |script: &str, what: &str| {
        let t0 = std::time::Instant::now();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{script}"))
            .current_dir(root)
            .env_remove("DELTARL_RUNS")
            .env("DELTARL_NO_PROGRESS", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{what} failed:\n--- script\n{script}\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Shown with --nocapture: what each block printed, and how long it took.
        eprintln!(
            "ran {what} in {:.1} s:\n{}",
            t0.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout)
        );
    };
    // What `make iterate` runs: the blocks below read the run it makes.
    bash("bin/deltarl iterate", "make iterate's command");
    for (first, text) in &found {
        let (_, how) = BLOCKS
            .iter()
            .find(|(k, _)| first.starts_with(k))
            .expect("listed");
        let edits = match how {
            How::Run(edits) => edits,
            How::Elsewhere(why) => {
                eprintln!("not run here: {first}: {why}");
                continue;
            }
        };
        let mut script = text.clone();
        for (from, to) in *edits {
            assert!(script.contains(from), "{first:?}: no {from:?} to replace");
            script = script.replace(from, to);
        }
        // Each block's files stay in the scratch folder.
        script = script.replace("/tmp/", &tmp);
        bash(&script, first);
    }
}
