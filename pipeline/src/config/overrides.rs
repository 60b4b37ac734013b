//! `--set section.key=value`: one key of the configuration changed from the command line,
//! applied to the merged TOML before it is checked, so it is validated exactly like the
//! file (unknown keys, types, ranges) and recorded in the run's `run.toml`.

use anyhow::{bail, Context, Result};

/// The value of `--set KEY=VALUE`: a TOML value (`4`, `1e-6`, `true`, `"x"`, `["a"]`), or
/// else the text itself as a string (`data.source=prompts.jsonl`) — except a whole number
/// TOML cannot hold, which is an error rather than a string the key then refuses by type.
fn value(set: &str, text: &str) -> Result<toml::Value> {
    if let Some(v) = toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
    {
        return Ok(v);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        bail!(
            "--set {set:?}: {text} is outside TOML's integers (signed 64-bit: {} to {})",
            i64::MIN,
            i64::MAX
        );
    }
    Ok(toml::Value::String(text.to_string()))
}

/// Applies one `KEY=VALUE` to `table`, creating missing tables on the way.
pub fn apply(table: &mut toml::Table, set: &str) -> Result<()> {
    let Some((key, text)) = set.split_once('=') else {
        bail!("--set {set:?}: expected section.key=value");
    };
    let path: Vec<&str> = key.trim().split('.').collect();
    if path.iter().any(|p| p.is_empty()) {
        bail!("--set {set:?}: {key:?} is not a key (section.key)");
    }
    let (last, sections) = path.split_last().context("empty key")?;
    let mut at = table;
    for (i, s) in sections.iter().enumerate() {
        let entry = at
            .entry((*s).to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(t) = entry else {
            bail!(
                "--set {set:?}: `{}` is a value, not a section",
                path[..=i].join(".")
            );
        };
        at = t;
    }
    at.insert((*last).to_string(), value(set, text.trim())?);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn values_are_toml_or_else_text() {
        let mut t: toml::Table = toml::from_str("[rollout]\ntop_k = 0\n").unwrap();
        apply(&mut t, "rollout.top_k=5").unwrap();
        apply(&mut t, "update.lr = 1e-6").unwrap();
        apply(&mut t, "data.source=prompts.jsonl").unwrap();
        apply(&mut t, "rollout.stop=[\"a\", \"b\"]").unwrap();
        apply(&mut t, "seed=3").unwrap();
        assert_eq!(t["rollout"]["top_k"].as_integer(), Some(5));
        assert_eq!(t["update"]["lr"].as_float(), Some(1e-6));
        assert_eq!(t["data"]["source"].as_str(), Some("prompts.jsonl"));
        assert_eq!(t["rollout"]["stop"].as_array().unwrap().len(), 2);
        assert_eq!(t["seed"].as_integer(), Some(3));
        assert!(apply(&mut t, "seed.x=1")
            .unwrap_err()
            .to_string()
            .contains("not a section"));
        assert!(apply(&mut t, "novalue").is_err());
        // A whole number past i64 is refused as such, not read as text.
        let e = apply(&mut t, "seed=18446744073709551615")
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside TOML's integers"), "{e}");
        assert_eq!(t["seed"].as_integer(), Some(3));
        assert!(apply(&mut t, "a..b=1").is_err());
    }
}
