//! The worded built-in tasks end to end, and the oracle estimators on their phrases and
//! on their first errors.

use crate::common::*;

/// The first iteration's rollouts joined with their coefficients, one row per response,
/// as the oracle checks below read them (`sys.argv[1]` is the run folder).
const JOINED: &str = r#"
import sys, polars as pl
it = sys.argv[1] + "/iter-0001/"
r = pl.read_parquet(it + "rollouts.parquet")
c = pl.read_parquet(it + "coeffs.parquet")
j = r.join(c, on=["prompt_id", "sample_idx"])
assert j.height == r.height > 0
"#;

/// The second built-in task end to end: its own vocabulary in the base's tokenizer and
/// config, its phrases in the rollouts, its held-out benchmark in eval.parquet.
#[test]
fn the_steps_task_runs_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "steps.toml",
        "[data]\nsource = \"tiny-steps\"\n[rollout]\nmax_new_tokens = 40\n[eval]\nevery = 1\n\
         [warmstart]\nsteps = 150\n[model.tiny]\nmax_position_embeddings = 96\n",
    );
    let runs = dir.path().join("runs");
    // The micro model's 64 positions cannot hold a worded solution: refused by key.
    let out = iterate(
        &runs,
        &cfg,
        "short",
        &["--set", "model.tiny.max_position_embeddings=64"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("model.tiny.max_position_embeddings` = 64"),
        "{err}"
    );
    ok(iterate(&runs, &cfg, "s", &[]));
    let run = runs.join("s");
    let vocab = deltarl_data::Task::Steps.vocab_size();
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("base/config.json")).unwrap()).unwrap();
    assert_eq!(config["vocab_size"].as_u64(), Some(vocab as u64));
    run_python(
        r#"
import sys, polars as pl
run = sys.argv[1]
e = pl.read_parquet(run + "/iter-0001/eval.parquet")
assert e["benchmark"].unique().to_list() == ["tiny-steps-test"], e
s = pl.read_parquet(run + "/iter-0001/scores.parquet")
assert s["data_source"].unique().to_list() == ["tiny-steps"], s
r = pl.read_parquet(run + "/iter-0001/rollouts.parquet")
# The warm start taught the phrases (the micro model only partly: half its responses open
# with the first one here, which an untrained model does with probability ~1e-10).
opens = r["response_text"].str.starts_with("first ").mean()
assert opens >= 0.25, (opens, r["response_text"].head(5).to_list())
"#,
        &[&run],
    );
    // The oracle on the same base, without dynamic sampling so that every response is
    // kept: 0 on each character of a phrase, 1 elsewhere.
    let base = format!("model.source={:?}", run.join("base").display().to_string());
    let oracle = |estimator| {
        [
            "--set",
            estimator,
            "--set",
            "score.dynamic_sampling=false",
            "--set",
            base.as_str(),
        ]
    };
    ok(iterate(
        &runs,
        &cfg,
        "oracle",
        &oracle("coeffs.estimator=\"oracle-tokens\""),
    ));
    run_python(
        &format!(
            "{JOINED}{}",
            r#"
opened = j.filter(pl.col("response_text").str.starts_with("first "))
assert opened.height > 0
for coeff in opened["coeff"]:
    assert coeff[:6].to_list() == [0.0] * 5 + [1.0], coeff
values = set(v for coeff in j["coeff"] for v in coeff)
assert values == {0.0, 1.0}, values
"#
        ),
        &[&runs.join("oracle")],
    );
    // The first-error oracle on the same base: on a negative-advantage response, 0 on the
    // characters before its first error (computed here from the problem, independently of
    // the Rust code), then 1; on every other response 1. The micro model makes errors
    // early and late, so both kinds of tokens occur.
    ok(iterate(
        &runs,
        &cfg,
        "prefix",
        &oracle("coeffs.estimator=\"oracle-prefix\""),
    ));
    run_python(
        &format!(
            "{JOINED}{}",
            r#"
negatives = zeros = 0
for row in j.iter_rows(named=True):
    a, b, cc = map(int, row["prompt_id"].split("-")[1:])
    p = b * cc
    right = f"first {b}*{cc}={p}. then {a}+{p}={a + p}. so the answer is \\boxed{{{a + p}}}"
    text, coeff = row["response_text"], row["coeff"]
    n = 0
    while n < min(len(text), len(right)) and text[n] == right[n]:
        n += 1
    if row["advantage"] < 0:
        negatives += 1
        zeros += n
        # One token a character (the task's tokenizer), then the end token.
        assert coeff[:n] == [0.0] * n and all(v == 1.0 for v in coeff[n:]), (text, n, coeff)
    else:
        assert all(v == 1.0 for v in coeff), (text, coeff)
assert negatives > 0 and zeros > 0, (negatives, zeros)
"#
        ),
        &[&runs.join("prefix")],
    );
    // The mechanism readout on the same runs: the first-error oracle puts every token of a
    // wrong answer's correct prefix (0) below the rest (1), an AUROC of exactly 1 where the
    // prefix carries gradient; the phrase oracle's run has coefficients 0 and 1 too, and
    // both runs are read together, so the interval over runs is printed.
    // With `--gradients`, each class's net gradient too (its arithmetic is checked token
    // by token in `mechanism::gradients`): here that the table is there, with a wrong
    // answer's two classes both carrying gradient and shares that add up.
    let out = ok(deltarl(
        &runs,
        &[
            "mechanism",
            "--run",
            "prefix",
            "--run",
            "oracle",
            "--gradients",
        ],
    ));
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix_rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("| prefix | 1 |"))
        .collect();
    // Each table's row of the prefix run's first iteration, then its row of means (one
    // iteration: it starts alike): the AUROC's, then the gradients'.
    assert_eq!(prefix_rows.len(), 4, "{text}");
    let cells: Vec<&str> = prefix_rows[0].split('|').map(str::trim).collect();
    // | run | iteration | wrong tokens | share | mean c | AUROC | right tokens | ...
    assert_eq!(cells[6], "1.0000", "{}", prefix_rows[0]);
    assert!(cells[5].starts_with("0.000 / 1.000"), "{}", prefix_rows[0]);
    assert!(text.contains("mean AUROC over 2 runs"), "{text}");
    // | run | iteration | wrong: norm shared / rest | cos | share shared | right: ...
    let cells: Vec<&str> = prefix_rows[2].split('|').map(str::trim).collect();
    let norms: Vec<f64> = cells[3]
        .split(" / ")
        .map(|x| x.parse().unwrap_or_else(|_| panic!("{}", prefix_rows[2])))
        .collect();
    assert!(
        norms.len() == 2 && norms.iter().all(|&x| x > 0.0),
        "{}",
        prefix_rows[2]
    );
    let (cos, share): (f64, f64) = (cells[4].parse().unwrap(), cells[5].parse().unwrap());
    assert!((-1.0..=1.0).contains(&cos), "{}", prefix_rows[2]);
    // The shared class's share from the printed norms and cosine, g_s.(g_s + g_r)/||g||^2,
    // over every rounding of the printed values (norms to 5 digits, cos and share to 3
    // decimals: half a unit of the last each way).
    let share_of = |a: f64, b: f64, c: f64| (a * a + c * a * b) / (a * a + b * b + 2.0 * c * a * b);
    let mut range = (f64::INFINITY, f64::NEG_INFINITY);
    for (da, db, dc) in [-1.0, 1.0]
        .iter()
        .flat_map(|&x| [(x, -1.0), (x, 1.0)])
        .flat_map(|(x, y)| [(x, y, -1.0), (x, y, 1.0)])
    {
        let v = share_of(
            norms[0] * (1.0 + da * 5e-5),
            norms[1] * (1.0 + db * 5e-5),
            cos + dc * 5e-4,
        );
        range = (range.0.min(v), range.1.max(v));
    }
    assert!(
        share >= range.0 - 5e-4 && share <= range.1 + 5e-4,
        "{share} outside {range:?}: {}",
        prefix_rows[2]
    );
    assert!(text.contains("shared tokens over 2 runs"), "{text}");
    assert!(
        text.contains("mean cos of the two sides over 2 runs"),
        "{text}"
    );
    // The two sides' shared classes against each other: a cosine.
    let cross: f64 = cells[9]
        .parse()
        .unwrap_or_else(|_| panic!("{}", prefix_rows[2]));
    assert!((-1.0..=1.0).contains(&cross), "{}", prefix_rows[2]);
    // A run that does not exist is refused.
    let err = deltarl(&runs, &["mechanism", "--run", "nope"]);
    assert!(!err.status.success());
}

/// The filler task end to end (the high dose of the dose-response test): the warm start
/// teaches its filler words, and `oracle-filler` gives 0 to exactly the characters after
/// the graded answer's closing brace (found here by a scan written independently of the
/// Rust code) and 1 elsewhere; `tiny-arith` has no filler to zero and
/// is refused by key.
#[test]
fn the_filler_oracle_zeroes_exactly_the_filler() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = variant(
        &micro_config(dir.path()),
        "filler.toml",
        // At T = 0.3 the micro model closes its box in most answers (at T = 1 it rarely
        // does), so there is filler after it to zero.
        "[data]\nsource = \"tiny-steps-filler\"\n[rollout]\nmax_new_tokens = 100\n\
         temperature = 0.3\n\
         [score]\ndynamic_sampling = false\n[eval]\nevery = 0\n\
         [warmstart]\nsteps = 300\n[model.tiny]\nmax_position_embeddings = 320\n\
         [update]\noptimizer_steps = 2\n",
    );
    let runs = dir.path().join("runs");
    ok(iterate(
        &runs,
        &cfg,
        "filler",
        &["--set", "coeffs.estimator=\"oracle-filler\""],
    ));
    run_python(
        &format!(
            "{JOINED}{}",
            r#"
import json
# Each token's text from the base's own vocabulary (the specials decode to nothing).
vocab = json.load(open(sys.argv[1] + "/base/tokenizer.json"))["model"]["vocab"]
piece = {i: ("" if t in ("<pad>", "<eos>", "<unk>") else t) for t, i in vocab.items()}

def answer_end(text):
    """Just past the last complete box's closing brace (braces balanced), else None."""
    at = len(text)
    while True:
        at = text.rfind("\\boxed{", 0, at)
        if at < 0:
            return None
        depth = 0
        for i in range(at + len("\\boxed"), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return i + 1

zeros = 0
for row in j.iter_rows(named=True):
    pieces = [piece[t] for t in row["response_token_ids"]]
    text, coeff = "".join(pieces), row["coeff"]
    end = answer_end(text)
    want, at = [], 0
    for p in pieces:
        want.append(0.0 if p and end is not None and at >= end else 1.0)
        at += len(p)
    assert list(coeff) == want, (text, coeff)
    zeros += want.count(0.0)
assert zeros >= 30, ("the warm start did not teach the filler", zeros, j["response_text"].head(5).to_list())
"#
        ),
        &[&runs.join("filler")],
    );
    // The filler's share of each side's net gradient (the dose's second condition) is
    // readable per iteration: a side with no responses (advantage of that sign) has no net
    // gradient and reads 0 / 0 rather than an invented share; a side with responses whose
    // filler the oracle zeroed has both norms positive (the shares themselves are checked
    // token by token in `pipeline/src/mechanism/gradients.rs`).
    let out = ok(deltarl(
        &runs,
        &["mechanism", "--run", "filler", "--classes", "filler"],
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("| run | iteration | wrong: norm filler / rest |"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("| filler | 1 |"))
        .unwrap_or_else(|| panic!("{text}"));
    // Per side (wrong, then right): responses, and those with filler tokens.
    let sides = python_stdout(&[
        "-c",
        &format!(
            "{JOINED}{}",
            "for side in (j.filter(pl.col('advantage') < 0), j.filter(pl.col('advantage') > 0)):\n\
             \x20   n = side.height\n\
             \x20   f = sum(1 for c in side['coeff'].to_list() if 0.0 in list(c))\n\
             \x20   print(n, f)\n"
        ),
        &runs.join("filler").display().to_string(),
    ]);
    let counts: Vec<(usize, usize)> = sides
        .lines()
        .map(|l| {
            let v: Vec<usize> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            (v[0], v[1])
        })
        .collect();
    assert_eq!(counts.len(), 2, "{sides}");
    // Not vacuous: some side's update has filler in it (at T = 0.3 the micro model answers
    // a few problems right, so both sides have responses).
    assert!(counts.iter().any(|&(n, f)| n > 0 && f > 0), "{sides}");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    for ((responses, with_filler), cell) in counts.iter().zip([cells[3], cells[6]]) {
        let norms: Vec<f64> = cell.split(" / ").map(|x| x.parse().unwrap()).collect();
        assert_eq!(norms.len(), 2, "{row}");
        if *responses == 0 {
            assert_eq!(norms, [0.0, 0.0], "{row}");
        } else {
            assert!(norms[1] > 0.0, "{row}");
            assert_eq!(norms[0] > 0.0, *with_filler > 0, "{row} {sides}");
        }
    }
    // Per optimizer step: one readout for each of the update's two mini-batches, and
    // since the iteration's net gradient of a class is the sum of its steps', each of its
    // norms is at most the steps' norms summed (round-off: f32 gradients over a few
    // thousand terms, far below the 1e-3 relative slack).
    let out = ok(deltarl(
        &runs,
        &[
            "mechanism",
            "--run",
            "filler",
            "--classes",
            "filler",
            "--per-step",
        ],
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let norms = |row: &str| -> Vec<f64> {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        [cells[3], cells[6]]
            .iter()
            .flat_map(|c| c.split(" / ").map(|x| x.parse::<f64>().unwrap()))
            .collect()
    };
    let steps: Vec<Vec<f64>> = (1..=2)
        .map(|k| {
            let label = format!("| filler | 1 (step {k}/2) |");
            let step = text.lines().find(|l| l.starts_with(&label));
            norms(step.unwrap_or_else(|| panic!("{label} in {text}")))
        })
        .collect();
    assert!(!text.contains("(step 3/"), "{text}");
    // Each step reads its own part of the responses, not the whole batch (a step whose
    // groups all have advantage 0 reads 0 / 0).
    assert!(steps.iter().any(|s| s != &norms(row)), "{text}");
    for (c, whole) in norms(row).iter().enumerate() {
        let sum = steps[0][c] + steps[1][c];
        assert!(
            *whole <= sum * (1.0 + 1e-3),
            "class {c}: {whole} > {sum}\n{row}\n{text}"
        );
    }
    let out = deltarl(&runs, &["mechanism", "--run", "filler", "--per-step"]);
    assert!(!out.status.success());
    // The first-error classes need a solution's first error, which this task does not label.
    // Refused before any table starts: nothing on stdout.
    let out = deltarl(&runs, &["mechanism", "--run", "filler"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("tiny-steps-filler") && out.stdout.is_empty(),
        "{err}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A run named twice would count as two seeds in the interval over runs.
    let out = deltarl(
        &runs,
        &[
            "mechanism",
            "--run",
            "filler",
            "--run",
            "filler",
            "--classes",
            "filler",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--run filler is given twice"),
        "{err}"
    );
    let out = iterate(
        &runs,
        &micro_config(dir.path()),
        "arith",
        &["--set", "coeffs.estimator=\"oracle-filler\""],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("coeffs.estimator") && err.contains("tiny-arith"),
        "{err}"
    );
}
