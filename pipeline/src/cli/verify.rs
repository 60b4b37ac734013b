use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Gold answer.
    #[arg(long, requires = "pred")]
    gold: Option<String>,
    /// Prediction: a whole response or a bare answer.
    #[arg(long, requires = "gold")]
    pred: Option<String>,
    /// JSONL file of objects with `pred` and `gold`; each is written back with `correct`.
    #[arg(long, conflicts_with_all = ["gold", "pred"])]
    jsonl: Option<PathBuf>,
    /// Answer extraction from a whole response.
    #[arg(long, value_enum, default_value = "lenient")]
    extract: crate::cli::extract::ExtractArg,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if let (Some(g), Some(p)) = (&self.gold, &self.pred) {
            anyhow::ensure!(
                !g.trim().is_empty(),
                "--gold is empty: no prediction could match it"
            );
            println!("{}", deltarl_verify::verify_with(p, g, self.extract.into()));
            return Ok(());
        }
        let Some(path) = self.jsonl else {
            bail!("give --gold and --pred, or --jsonl FILE");
        };
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        // A bad line is reported with its place and skipped; the others are still graded.
        let mut bad = 0;
        for (i, line) in std::io::BufReader::new(file).split(b'\n').enumerate() {
            let at = format!("{}:{}", path.display(), i + 1);
            let line = line.with_context(|| format!("cannot read {at}"))?;
            match grade_line(&line, i == 0, self.extract.into()) {
                Ok(None) => {}
                Ok(Some(v)) => match writeln!(out, "{v}") {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                    r => r?,
                },
                Err(e) => {
                    eprintln!("{at}: {e:#}");
                    bad += 1;
                }
            }
        }
        match out.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            r => r?,
        }
        if bad > 0 {
            bail!(
                "{}: {bad} lines could not be graded (listed above)",
                path.display()
            );
        }
        Ok(())
    }
}

/// One JSONL line with `pred` and `gold`, returned with `correct` added (`None` for a
/// blank line); the file's `first` line may start with a byte-order mark.
fn grade_line(
    line: &[u8],
    first: bool,
    policy: deltarl_verify::Policy,
) -> Result<Option<serde_json::Value>> {
    let line = std::str::from_utf8(line).context("not valid UTF-8")?;
    let line = if first {
        crate::data::without_bom(line)
    } else {
        line
    };
    if line.trim().is_empty() {
        return Ok(None);
    }
    let mut v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).context("not a JSON object")?;
    let field = |k: &str| -> Result<String> {
        match v.get(k) {
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
            _ => bail!("missing string field `{k}`"),
        }
    };
    let gold = field("gold")?;
    anyhow::ensure!(
        !gold.trim().is_empty(),
        "field `gold` is empty: no prediction could match it"
    );
    let ok = deltarl_verify::verify_with(&field("pred")?, &gold, policy);
    v.insert("correct".into(), serde_json::Value::Bool(ok));
    Ok(Some(serde_json::Value::Object(v)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn grade(line: &str, first: bool) -> Result<Option<serde_json::Value>> {
        grade_line(line.as_bytes(), first, deltarl_verify::Policy::Lenient)
    }

    #[test]
    fn a_first_line_with_a_byte_order_mark_is_graded_and_bad_lines_say_why() {
        let line = "\u{feff}{\"pred\": \"2\", \"gold\": \"2\"}";
        let v = grade(line, true).unwrap().unwrap();
        assert_eq!(v["correct"], serde_json::Value::Bool(true));
        // Only the file's start may carry the mark; elsewhere it is a bad line, and the
        // parser's cause (its column) is in the message.
        let e = format!("{:#}", grade(line, false).unwrap_err());
        assert!(
            e.contains("not a JSON object") && e.contains("column 1"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            grade(r#"{"pred": "2", "gold": " "}"#, false).unwrap_err()
        );
        assert!(e.contains("field `gold` is empty"), "{e}");
        assert!(grade("  ", false).unwrap().is_none());
    }
}
