//! Prompt datasets: the built-in tiny-arith generator, JSONL / Parquet in the simple layout
//! (`id`, `problem`, `answer`, optional `data_source`), and the seeded per-iteration draw.

use std::path::Path;

use anyhow::{bail, Context, Result};
use deltarl_data::{problems, prompt_rows, Split};
use deltarl_schemas::seed::{seed_for, Rng};
use deltarl_schemas::PromptRow;

/// Fixed seed of the generated tiny-arith dataset, so every run sees the same problems.
const TINY_DATA_SEED: u64 = 20_260_101;
/// Fixed seed of the held-out problems.
const TINY_TEST_SEED: u64 = 7;

/// Loads the training prompts named by `data.source`.
pub fn load_prompts(source: &str, train_size: usize) -> Result<Vec<PromptRow>> {
    if source == "tiny-arith" {
        return Ok(prompt_rows(&problems(Split::Train, train_size, TINY_DATA_SEED)));
    }
    read_prompt_file(Path::new(source))
}

/// Held-out tiny-arith problems.
pub fn tiny_test_prompts(n: usize) -> Vec<PromptRow> {
    prompt_rows(&problems(Split::Test, n, TINY_TEST_SEED))
}

fn json_str(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads JSONL (one object per line) or Parquet prompts; errors name the file, the line
/// and the missing field.
pub fn read_prompt_file(path: &Path) -> Result<Vec<PromptRow>> {
    let name = path.display().to_string();
    if path.extension().is_some_and(|e| e == "parquet") {
        return deltarl_schemas::read_foreign_path::<PromptRow>(path).map_err(Into::into);
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read prompts {name}"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{name}:{}: not JSON", i + 1))?;
        let field = |k: &str| -> Result<String> {
            v.get(k)
                .and_then(json_str)
                .with_context(|| format!("{name}:{}: missing field `{k}`", i + 1))
        };
        out.push(PromptRow {
            id: field("id")?,
            problem: field("problem")?,
            answer: field("answer")?,
            data_source: v.get("data_source").and_then(json_str),
        });
    }
    if out.is_empty() {
        bail!("{name}: no prompts");
    }
    Ok(out)
}

/// The prompts of iteration `iter` (1-based): consecutive slices of seeded per-epoch
/// permutations, so the draw depends only on (seed, iteration), never on sharding.
pub fn draw(prompts: &[PromptRow], per_iter: usize, seed: u64, iter: u32) -> Vec<PromptRow> {
    let n = prompts.len();
    if n == 0 {
        return Vec::new();
    }
    let start = (iter.saturating_sub(1) as usize) * per_iter;
    let mut perm_epoch = usize::MAX;
    let mut perm: Vec<usize> = Vec::new();
    let mut out = Vec::with_capacity(per_iter);
    for k in start..start + per_iter.min(n) {
        let epoch = k / n;
        if epoch != perm_epoch {
            perm = (0..n).collect();
            let mut rng = Rng::new(seed_for(seed, epoch as u32, "prompts", "", 0));
            for i in (1..n).rev() {
                perm.swap(i, rng.below(i as u64 + 1) as usize);
            }
            perm_epoch = epoch;
        }
        out.push(prompts[perm[k % n]].clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_cover_an_epoch_without_repeats() {
        let prompts = load_prompts("tiny-arith", 100).unwrap();
        let mut seen = std::collections::HashSet::new();
        for it in 1..=5 {
            for p in draw(&prompts, 20, 3, it) {
                assert!(seen.insert(p.id));
            }
        }
        assert_eq!(seen.len(), 100);
        assert_eq!(draw(&prompts, 20, 3, 2), draw(&prompts, 20, 3, 2));
        assert_ne!(draw(&prompts, 20, 3, 2), draw(&prompts, 20, 4, 2));
    }

    #[test]
    fn jsonl_errors_name_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        std::fs::write(&p, "{\"id\": 1, \"problem\": \"a\", \"answer\": \"2\"}\n{\"id\": 2, \"problem\": \"b\"}\n").unwrap();
        let err = format!("{:#}", read_prompt_file(&p).unwrap_err());
        assert!(err.contains("x.jsonl:2: missing field `answer`"), "{err}");
    }
}
