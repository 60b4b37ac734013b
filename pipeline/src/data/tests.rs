//! Reading prompt and benchmark files, and the output check, on files written by hand.

use super::*;

#[test]
fn reads_simple_and_verl_parquet_written_by_polars() {
    let dir = tempfile::tempdir().unwrap();
    let (simple, verl, bad) = (
        dir.path().join("s.parquet"),
        dir.path().join("v.parquet"),
        dir.path().join("b.parquet"),
    );
    let script = r#"
import sys, polars as pl
s, v, b = sys.argv[1:4]
pl.DataFrame({"id": ["a", "b"], "problem": ["1+1", "2+2"], "answer": ["2", "4"]}).write_parquet(s)
pl.DataFrame({
    "data_source": ["gsm8k", "gsm8k"],
    "prompt": [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}],
               [{"role": "user", "content": "2+3?"}]],
    "reward_model": [{"style": "rule", "ground_truth": "2"}, {"style": "rule", "ground_truth": "5"}],
    "extra_info": [{"index": 0, "split": "test"}, {"index": 1, "split": "test"}],
}).write_parquet(v)
pl.DataFrame({"prompt": [[{"role": "user", "content": "x"}]]}).write_parquet(b)
pl.DataFrame(schema={"id": pl.String, "problem": pl.String, "answer": pl.String}).write_parquet(b + ".empty.parquet")
pl.DataFrame({"id": ["a", "b", "a"], "problem": ["x", "y", "z"], "answer": ["1", "2", "3"]}).write_parquet(b + ".dup.parquet")
pl.DataFrame({"prompt": ["2+2?"], "solution": ["so \\boxed{4}"]}).write_parquet(b + ".trl.parquet")
"#;
    let py = std::env::var("DELTARL_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&simple)
        .arg(&verl)
        .arg(&bad)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = read_prompt_file(&simple, &Routing::default()).unwrap();
    assert_eq!((s[1].id.as_str(), s[1].answer.as_str()), ("b", "4"));
    let v = read_prompt_file(&verl, &Routing::default()).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(
        (
            v[0].id.as_str(),
            v[0].problem.as_str(),
            v[0].answer.as_str()
        ),
        ("gsm8k-0", "1+1?", "2")
    );
    // The system turn is kept for the chat template; a prompt without one has none.
    assert_eq!(v[0].system.as_deref(), Some("be brief"));
    assert_eq!(v[1].system, None);
    assert_eq!(s[0].system, None);
    assert_eq!(v[1].answer, "5");
    let err = format!(
        "{:#}",
        read_prompt_file(&bad, &Routing::default()).unwrap_err()
    );
    assert!(
        err.contains("b.parquet") && err.contains("reward_model"),
        "{err}"
    );
    // An empty dataset is refused as an empty JSONL is; so are repeated ids.
    let empty = dir.path().join("b.parquet.empty.parquet");
    let err = format!(
        "{:#}",
        read_prompt_file(&empty, &Routing::default()).unwrap_err()
    );
    assert!(err.contains("no prompts"), "{err}");
    // TRL's layout in Parquet: a string prompt, the answer boxed in a worked solution.
    let trl = read_prompt_file(
        &dir.path().join("b.parquet.trl.parquet"),
        &Routing::default(),
    )
    .unwrap();
    assert_eq!(
        (trl[0].problem.as_str(), trl[0].answer.as_str()),
        ("2+2?", "4")
    );
    let dup = dir.path().join("b.parquet.dup.parquet");
    let err = format!(
        "{:#}",
        read_prompt_file(&dup, &Routing::default()).unwrap_err()
    );
    assert!(
        err.contains("\"a\" appears twice (row 1 and row 3)"),
        "{err}"
    );
}

/// TRL's layouts (a string or a message list as `prompt`, the answer in `answer` or a
/// worked `solution`), verl's in JSONL, and ids made from the content when absent.
#[test]
fn trl_and_verl_records_and_ids_without_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("trl.jsonl");
    let lines = [
        r#"{"prompt": "What is 2+3?", "answer": "5"}"#,
        r#"{"prompt": [{"role": "system", "content": "Think."}, {"role": "user", "content": "6*7?"}], "solution": "6*7 = \\boxed{42}."}"#,
        r#"{"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": 2}, "data_source": "gsm8k", "extra_info": {"index": 9}}"#,
        r#"{"problem": "x?", "ground_truth": "7", "data_source": "mine"}"#,
    ];
    std::fs::write(&p, lines.join("\n")).unwrap();
    let rows = read_prompt_file(&p, &Routing::default()).unwrap();
    assert_eq!(rows[0].problem, "What is 2+3?");
    assert_eq!(rows[0].answer, "5");
    assert_eq!(
        (rows[1].problem.as_str(), rows[1].answer.as_str()),
        ("6*7?", "42")
    );
    assert_eq!(rows[1].system.as_deref(), Some("Think."));
    assert_eq!(rows[2].id, "gsm8k-9");
    assert_eq!(rows[2].answer, "2");
    assert_eq!(rows[3].answer, "7");
    // Content ids: the same problem keeps its id in another order; different ones differ.
    assert!(
        rows[0].id.starts_with('h') && rows[0].id.len() == 17,
        "{}",
        rows[0].id
    );
    std::fs::write(&p, [lines[3], lines[1], lines[0]].join("\n")).unwrap();
    let again = read_prompt_file(&p, &Routing::default()).unwrap();
    assert_eq!(again[2].id, rows[0].id);
    assert_eq!(again[1].id, rows[1].id);
    assert_ne!(rows[0].id, rows[1].id);
    // A record with a prompt but no answer names every place the answer may be.
    std::fs::write(&p, r#"{"prompt": "q"}"#).unwrap();
    let err = format!(
        "{:#}",
        read_prompt_file(&p, &Routing::default()).unwrap_err()
    );
    assert!(
        err.contains("trl.jsonl:1: missing field `answer`") && err.contains("solution"),
        "{err}"
    );
}

#[test]
fn jsonl_errors_name_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.jsonl");
    let refusal = || {
        format!(
            "{:#}",
            read_prompt_file(&p, &Routing::default()).unwrap_err()
        )
    };
    std::fs::write(
        &p,
        "{\"id\": 1, \"problem\": \"a\", \"answer\": \"2\"}\n{\"id\": 2, \"problem\": \"b\"}\n",
    )
    .unwrap();
    let err = refusal();
    assert!(err.contains("x.jsonl:2: missing field `answer`"), "{err}");
    std::fs::write(
            &p,
            "{\"id\": 7, \"problem\": \"a\", \"answer\": \"2\"}\n\n{\"id\": \"7\", \"problem\": \"b\", \"answer\": \"3\"}\n",
        )
        .unwrap();
    let err = refusal();
    assert!(
        err.contains("\"7\" appears twice (line 1 and line 3)"),
        "{err}"
    );
    std::fs::write(&p, "\n").unwrap();
    let err = refusal();
    assert!(err.contains("no prompts"), "{err}");
    // A byte-order mark at the start (Windows tools write one) is read past; one
    // elsewhere is a character JSON does not allow there, refused by line.
    let bom = "\u{feff}";
    std::fs::write(
        &p,
        format!("{bom}{{\"problem\": \"a\", \"answer\": \"2\"}}\n"),
    )
    .unwrap();
    let rows = read_prompt_file(&p, &Routing::default()).unwrap();
    assert_eq!((rows.len(), rows[0].answer.as_str()), (1, "2"));
    std::fs::write(
        &p,
        format!("{{\"problem\": \"a\", \"answer\": \"2\"}}\n{bom}{{}}\n"),
    )
    .unwrap();
    let err = refusal();
    assert!(err.contains("x.jsonl:2: not JSON"), "{err}");
    // A CSV file is told what a data file is; a folder or a missing path says which.
    std::fs::write(&p, "problem,answer\n1+1,2\n").unwrap();
    let err = refusal();
    assert!(
        err.contains("x.jsonl:1: not JSON (a data file is JSONL, one JSON object a line"),
        "{err}"
    );
    assert_eq!(not_a_file(dir.path()), "a folder, not a file");
    assert_eq!(not_a_file(&dir.path().join("absent")), "no such file");
}

/// An output that is a folder, or an input it would replace, is refused first.
#[test]
fn an_output_is_not_a_folder_or_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{}\n").unwrap();
    let inputs = [input.as_path()];
    let unfit = |out: &Path| unfit_output(out, &inputs);
    assert_eq!(unfit(dir.path()).unwrap(), "a folder; name a file in it");
    assert_eq!(unfit(&dir.path().join("new/out.parquet")), None);
    // The input under another spelling of its path is still the input.
    let again = dir.path().join(".").join("in.jsonl");
    assert!(unfit(&again).unwrap().contains("that is the input"));
    assert_eq!(unfit(&dir.path().join("out.parquet")), None);
    // An existing file that is not an input is replaced, as an output is.
    std::fs::write(dir.path().join("old.parquet"), "x").unwrap();
    assert_eq!(unfit(&dir.path().join("old.parquet")), None);
}

/// Code records in their layouts become prompts whose answer is the canonical test set.
#[test]
fn code_records_and_their_routing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("code.jsonl");
    let lines = [
        r#"{"task_id": "HumanEval/0", "prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 2\n", "entry_point": "f"}"#,
        r#"{"question": "Add two numbers.", "input_output": "{\"inputs\": [\"1 2\\n\"], \"outputs\": [\"3\\n\"]}", "data_source": "apps"}"#,
        r#"{"problem": "1+1?", "answer": "2"}"#,
    ];
    std::fs::write(&p, lines.join("\n")).unwrap();
    let rows = read_prompt_file(&p, &Routing::default()).unwrap();
    let kinds: Vec<_> = rows.iter().map(|r| r.reward_kind).collect();
    use deltarl_schemas::RewardKind::{Code, Math};
    assert_eq!(kinds, [Code, Code, Math]);
    assert_eq!(rows[0].id, "HumanEval/0");
    assert!(rows[0].problem.contains("```python\ndef f(x):\n```"));
    assert_eq!(rows[1].problem, "Add two numbers.");
    assert_eq!(
        rows[1].answer,
        r#"{"stdio":{"cases":[{"input":"1 2\n","output":"3\n"}]}}"#
    );
    // A benchmark is read the same way (eval grades its code in the sandbox).
    assert_eq!(read_benchmark(&p).unwrap(), rows);
    // A source routed to code without tests is refused at its line.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        r#"{"problem": "x", "answer": "1", "data_source": "apps"}"#,
    )
    .unwrap();
    let mut routing = Routing::default();
    routing.by_source.insert("apps".into(), Code);
    let err = format!("{:#}", read_prompt_file(&bad, &routing).unwrap_err());
    assert!(
        err.contains("bad.jsonl:1") && err.contains("not a code test set"),
        "{err}"
    );
}

/// GSM8K's layout (`question`, an `answer` ending `#### N`) reads with N as the gold.
/// (`final_answer` by hand: record.rs.)
#[test]
fn gsm8k_answers_are_what_follows_the_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("gsm8k.jsonl");
    let line = r#"{"question": "Tom has 3 apples and buys 4. How many?", "answer": "He has 3 + 4 = <<3+4=7>>7.\n#### 7"}"#;
    std::fs::write(&p, line).unwrap();
    let rows = read_prompt_file(&p, &Routing::default()).unwrap();
    assert_eq!(
        (rows[0].problem.as_str(), rows[0].answer.as_str()),
        ("Tom has 3 apples and buys 4. How many?", "7")
    );
}
