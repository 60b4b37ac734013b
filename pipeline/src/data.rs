//! Prompt datasets: the built-in tasks and JSONL / Parquet files in the layouts users bring
//! (ours, verl's RL data, TRL's prompt datasets). Which of them an iteration draws is
//! `epochs`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use deltarl_data::Source;
use deltarl_schemas::PromptRow;

use crate::rewards::Routing;

/// Loads the training prompts named by `data.source`: a built-in task or a file, each
/// record's reward decided by `routing`.
pub fn load_prompts(
    source: &Source,
    train_size: usize,
    routing: &Routing,
) -> Result<Vec<PromptRow>> {
    match source {
        Source::Builtin(builtin) => Ok(builtin.train_prompts(train_size)),
        Source::File(path) => read_prompt_file(path, routing),
    }
}

/// A benchmark file's prompts. A benchmark is routed by its records alone (their own
/// `reward_kind`, verl's `ability`, a code layout), not by `data.rewards`, which names
/// training sources.
pub fn read_benchmark(path: &Path) -> Result<Vec<PromptRow>> {
    read_prompt_file(path, &Routing::default())
}

/// The benchmark a file holds: its name without the extension (`aime24.jsonl` -> `aime24`).
pub fn benchmark_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads JSONL (one object per line) or Parquet prompts in any of the layouts
/// [`crate::record::prompt_row`] knows; errors name the file, the line (or row) and the missing field.
pub fn read_prompt_file(path: &Path, routing: &Routing) -> Result<Vec<PromptRow>> {
    let (mut out, mut places) = (Vec::new(), Vec::new());
    each_prompt(path, routing, |row, place| {
        out.push(row);
        places.push(place.to_string());
        Ok(())
    })?;
    check_prompts(&path.display().to_string(), &out, &places)?;
    Ok(out)
}

/// Calls `f` on each record of a JSONL or Parquet prompt file, read as a prompt row, with
/// where it is (`line 3`, `row 12`), one Parquet batch in memory at a time. Errors name the
/// file and the place (`file:3` for a JSONL line, `file: row 12` for a Parquet row).
pub(crate) fn each_prompt(
    path: &Path,
    routing: &Routing,
    mut f: impl FnMut(PromptRow, &str) -> Result<()>,
) -> Result<()> {
    let name = path.display().to_string();
    let mut one = |v: &serde_json::Value, place: &str| -> Result<()> {
        let at = place
            .strip_prefix("line ")
            .map_or_else(|| format!("{name}: {place}"), |l| format!("{name}:{l}"));
        let row =
            crate::record::prompt_row(v, routing).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        f(row, place).with_context(|| at.clone())
    };
    if path.extension().is_some_and(|e| e == "parquet") {
        let mut n = 0;
        each_parquet_batch(path, |records| {
            for v in &records {
                n += 1;
                one(v, &format!("row {n}"))?;
            }
            Ok(())
        })
    } else {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read prompts {name}"))?;
        for (i, line) in without_bom(&text).lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).with_context(|| {
                format!(
                    "{name}:{}: not JSON (a data file is JSONL, one JSON object a line, \
                         or Parquet)",
                    i + 1
                )
            })?;
            one(&v, &format!("line {}", i + 1))?;
        }
        Ok(())
    }
}

/// Why `path`, which is not a file, cannot be read: a folder, or nothing at all.
pub(crate) fn not_a_file(path: &Path) -> &'static str {
    if path.is_dir() {
        "a folder, not a file"
    } else {
        "no such file"
    }
}

/// Why `out` cannot take a command's output file, checked before any work: it is a
/// folder, or one of the `inputs` (which the output, written whole under its name, would
/// replace). A folder that does not exist yet is made when the file is written.
pub(crate) fn unfit_output(out: &Path, inputs: &[&Path]) -> Option<String> {
    if out.is_dir() {
        return Some("a folder; name a file in it".into());
    }
    let out = out.canonicalize().ok()?;
    let same = |input: &&Path| input.canonicalize().is_ok_and(|i| i == out);
    inputs.iter().copied().find(same).map(|input| {
        format!(
            "that is the input {}, which the output would replace; name another file",
            input.display()
        )
    })
}

/// Text without the byte-order mark some Windows tools write at the start of a UTF-8 file:
/// JSON has no place for it, and it carries no information in UTF-8, so a JSONL file that
/// starts with one is read as the same file without it.
pub(crate) fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// The rows of a Parquet file as JSON objects, one record batch at a time (arrow's JSON
/// writer: nested lists and structs become arrays and objects, nulls are left out).
fn each_parquet_batch(
    path: &Path,
    mut f: impl FnMut(Vec<serde_json::Value>) -> Result<()>,
) -> Result<()> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let name = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("cannot open prompts {name}"))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{name}: not a readable Parquet file"))?
        .build()
        .with_context(|| format!("{name}: not a readable Parquet file"))?;
    for batch in reader {
        let batch = batch.with_context(|| format!("{name}: cannot decode"))?;
        let mut w = arrow::json::ArrayWriter::new(Vec::new());
        w.write(&batch)
            .and_then(|()| w.finish())
            .with_context(|| format!("{name}: cannot convert rows to JSON"))?;
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&w.into_inner())
            .with_context(|| format!("{name}: cannot convert rows to JSON"))?;
        f(rows)?;
    }
    Ok(())
}

/// A dataset must have prompts, and ids that tell them apart (every later table is keyed
/// by the id). `places[i]` says where prompt `i` is in the file.
fn check_prompts(name: &str, rows: &[PromptRow], places: &[String]) -> Result<()> {
    if rows.is_empty() {
        bail!("{name}: no prompts");
    }
    let mut seen = std::collections::HashMap::new();
    for (i, p) in rows.iter().enumerate() {
        if let Some(first) = seen.insert(p.id.as_str(), i) {
            bail!(
                "{name}: id {:?} appears twice ({} and {}); ids must be unique",
                p.id,
                places[first],
                places[i]
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
