//! `deltarl data prepare --recipe dapo-math` on a file in the hub's layout, written by
//! polars as the hub's is: every problem repeated, wrapped in DAPO's instruction, one
//! problem whose copies disagree on the gold. The output must be what `data.source`
//! reads, each kept problem once and bare, and a rerun must write the same bytes.

use std::path::Path;

use crate::common::*;

const HUB: &str = r#"
import sys, polars as pl
P = "Solve the following math problem step by step. The last line of your response should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
S = "\n\nRemember to put your answer on its own line after \"Answer:\"."
problems = [("What is $1+1$?", "2"), ("Find $x$ if $2x=6$.", "3"), ("Compute $2^{10}$.", "1024"),
            ("How many primes are below 10?", "4"), ("What is $1+1$?", "2")]
rows = []
for copy in range(100):
    for i, (q, a) in enumerate(problems):
        # The third problem's last copy carries another gold: it must be dropped.
        gold = "1000" if (i == 2 and copy == 99) else a
        rows.append((q, gold))
df = pl.DataFrame({
    "data_source": ["math_dapo"] * len(rows),
    "prompt": [[{"content": P + q + S, "role": "user"}] for q, _ in rows],
    "ability": ["MATH"] * len(rows),
    "reward_model": [{"ground_truth": a, "style": "rule-lighteval/MATH_v2"} for _, a in rows],
    "extra_info": [{"index": f"{n:032x}"} for n in range(len(rows))],
})
df.write_parquet(sys.argv[1])
"#;

/// `deltarl data prepare --recipe dapo-math --input INPUT --out OUT`.
fn prepare(runs: &Path, input: &Path, out: &Path) -> std::process::Output {
    let (input, out) = (input.to_str().unwrap(), out.to_str().unwrap());
    deltarl(runs, &prepare_args(input, out))
}

/// The command line of [`prepare`].
fn prepare_args<'a>(input: &'a str, out: &'a str) -> [&'a str; 8] {
    [
        "data",
        "prepare",
        "--recipe",
        "dapo-math",
        "--input",
        input,
        "--out",
        out,
    ]
}

#[test]
fn the_hub_layout_becomes_bare_distinct_problems() {
    let dir = tempfile::tempdir().unwrap();
    let hub = dir.path().join("dapo-math-17k.parquet");
    run_python(HUB, &[&hub]);
    let out = dir.path().join("data/dapo.jsonl");
    let runs = dir.path().join("runs");
    let printed = String::from_utf8(ok(prepare(&runs, &hub, &out)).stdout).unwrap();
    for line in [
        "recipe dapo-math: 500 rows read",
        "instruction: 500 with prefix and suffix (stripped), 0 prefix only, 0 suffix only, 0 without; 0 still mention it",
        "4 distinct problems (496 repeated rows dropped)",
        "1 problems dropped: their copies carry different golds",
        "first at row 3: golds 1024 | 1000",
        "wrote 3 problems to",
    ] {
        assert!(printed.contains(line), "missing {line:?} in:\n{printed}");
    }
    let first = std::fs::read(&out).unwrap();
    // What `data.source` reads: bare problems in first-seen order, golds, fresh ids.
    let rows =
        deltarl::data::read_prompt_file(&out, &deltarl::rewards::Routing::default()).unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.id.as_str(), r.problem.as_str(), r.answer.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("dapo-math-0", "What is $1+1$?", "2"),
            ("dapo-math-1", "Find $x$ if $2x=6$.", "3"),
            ("dapo-math-2", "How many primes are below 10?", "4"),
        ]
    );
    assert!(rows
        .iter()
        .all(|r| r.data_source.as_deref() == Some("math_dapo") && r.system.is_none()));
    // The record beside it names the input's hash and the counts; polars opens the output.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("data/dapo.recipe.json")).unwrap())
            .unwrap();
    assert_eq!(
        record["input_sha256"],
        deltarl_schemas::sha256_file(&hub).unwrap()
    );
    assert_eq!(record["output_sha256"], deltarl_schemas::sha256_hex(&first));
    assert_eq!(
        (record["rows_read"].as_u64(), record["written"].as_u64()),
        (Some(500), Some(3))
    );
    run_python(
        "import sys, polars as pl\nd = pl.read_ndjson(sys.argv[1])\nassert d.shape == (3, 4), d.shape",
        &[&out],
    );
    // A rerun writes the same bytes.
    ok(prepare(&runs, &hub, &out));
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn bad_input_is_named_and_destroys_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    std::fs::write(&out, "keep me\n").unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"problem\": \"1+1?\", \"answer\": \"2\"}\n{\"problem\": \"2+2?\"}\n",
    )
    .unwrap();
    let runs = dir.path().join("runs");
    let o = prepare(&runs, &input, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("in.jsonl:2: missing field `answer`"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me\n");
    assert!(!dir.path().join("out.recipe.json").exists());
    // The output must be JSONL, named so.
    let o = prepare(&runs, &input, &dir.path().join("out.parquet"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("name it *.jsonl"),
        "{err}"
    );
    // The input named as the output (by another spelling of its path) is refused, and
    // left as it was.
    let good = dir.path().join("good.jsonl");
    let text = "{\"problem\": \"1+1?\", \"answer\": \"2\"}\n";
    std::fs::write(&good, text).unwrap();
    let o = prepare(&runs, &good, &dir.path().join("./good.jsonl"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("that is the input"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&good).unwrap(), text);
}

/// An output named by a bare file name is written in the current folder, and the command
/// succeeds: the commit once synced the folder "" after renaming the file into place.
#[test]
fn a_bare_output_name_is_written_in_the_current_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("in.jsonl"),
        "{\"problem\": \"1+1?\", \"answer\": \"2\"}\n",
    )
    .unwrap();
    let o = std::process::Command::new(bin())
        .args(prepare_args("in.jsonl", "out.jsonl"))
        .current_dir(dir.path())
        .env("DELTARL_RUNS", dir.path().join("runs"))
        .env("DELTARL_NO_PROGRESS", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(dir.path().join("out.recipe.json").is_file());
}
