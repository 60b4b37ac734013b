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
}

impl Args {
    pub fn run(self) -> Result<()> {
        if let (Some(g), Some(p)) = (&self.gold, &self.pred) {
            println!("{}", deltarl_verify::verify(p, g));
            return Ok(());
        }
        let Some(path) = self.jsonl else {
            bail!("give --gold and --pred, or --jsonl FILE");
        };
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)
                .with_context(|| format!("{}:{}: not a JSON object", path.display(), i + 1))?;
            let field = |k: &str| -> Result<String> {
                match v.get(k) {
                    Some(serde_json::Value::String(s)) => Ok(s.clone()),
                    Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
                    _ => bail!("{}:{}: missing string field `{k}`", path.display(), i + 1),
                }
            };
            let ok = deltarl_verify::verify(&field("pred")?, &field("gold")?);
            v.insert("correct".into(), serde_json::Value::Bool(ok));
            writeln!(out, "{}", serde_json::Value::Object(v))?;
        }
        Ok(())
    }
}
