//! The sweep of `ranges.rs`: every numeric key `config show` prints has a row in the table, every row is
//! a key some shipped configuration shows, and each key given each extreme through
//! `--set` is either refused naming the key or accepted as a value its row admits.
#![allow(clippy::unwrap_used)]
use std::collections::BTreeSet;

use super::ranges::{self, Number};
use super::*;

/// Dotted keys of the numeric leaves of `v`.
fn numeric_keys(v: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
    let Some(t) = v.as_table() else { return };
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Integer(_) | toml::Value::Float(_) => {
                out.insert(key);
            }
            toml::Value::Table(_) => numeric_keys(v, &key, out),
            _ => {}
        }
    }
}

#[test]
fn every_numeric_key_shown_has_a_range_and_every_range_a_key() {
    let mut shown = BTreeSet::new();
    let mut files = 0;
    for entry in std::fs::read_dir(shipped_configs()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let r = Resolved::load(&path).unwrap();
        numeric_keys(&r.shown().unwrap(), "", &mut shown);
        files += 1;
    }
    assert!(files >= 10, "read {files} configs");
    let table: BTreeSet<String> = ranges::all().map(|r| r.key.to_string()).collect();
    assert_eq!(table.len(), ranges::all().count(), "a key has two rows");
    let unranged: Vec<_> = shown.difference(&table).collect();
    assert!(
        unranged.is_empty(),
        "numeric keys without a range: {unranged:?}"
    );
    let stale: Vec<_> = table.difference(&shown).collect();
    assert!(stale.is_empty(), "rows no configuration shows: {stale:?}");
}

/// The sweep's values as `--set` text, and the number each is when TOML holds it (`None`:
/// not a number TOML holds, or not finite, so never admitted).
const EXTREMES: [(&str, Option<Number>); 8] = [
    ("nan", None),
    ("inf", None),
    ("-inf", None),
    ("-1", None),
    ("0", Some(Number::Int(0))),
    ("1e-320", Some(Number::Float(1e-320))),
    ("1e308", Some(Number::Float(1e308))),
    ("9223372036854775808", None),
];

#[test]
fn every_key_at_every_extreme_is_refused_by_name_or_admitted_by_its_row() {
    let config = shipped_configs().join("tiny-arith.toml");
    let mut accepted = 0;
    for r in ranges::all() {
        for (text, number) in EXTREMES {
            let set = format!("{}={text}", r.key);
            let admitted = number.is_some_and(|n| r.bound.admits(n));
            match Resolved::load_with(&config, std::slice::from_ref(&set)) {
                Ok(resolved) => {
                    assert!(
                        admitted,
                        "--set {set} was accepted outside {}",
                        r.bound.describe()
                    );
                    // The value is the one given, not clamped or dropped.
                    let mut keys = BTreeSet::new();
                    numeric_keys(&resolved.shown().unwrap(), "", &mut keys);
                    assert!(keys.contains(r.key), "{set}: {} not shown", r.key);
                    accepted += 1;
                }
                Err(e) => {
                    let e = format!("{e:#}");
                    assert!(
                        e.contains(r.key),
                        "--set {set}: the error names another key: {e}"
                    );
                    // An admitted value may only be refused by a rule between keys, which
                    // names this one among them.
                    if admitted {
                        assert!(!e.contains("must be 0 or"), "--set {set}: {e}");
                    }
                }
            }
        }
    }
    // 0 is in range for about half the keys: the sweep is not all refusals.
    assert!(accepted > ranges::all().count() / 3, "{accepted} accepted");
}

/// The adversarial run's findings, each refused by name with the value shown readably.
#[test]
fn the_findings_of_round_four_are_refused_by_key() {
    let config = shipped_configs().join("tiny-code.toml");
    for (set, key) in [
        ("coeffs.lam_max=1e308", "coeffs.lam_max"),
        ("coeffs.lam_min=1e-320", "coeffs.lam_min"),
        ("score.overlong_factor=1e308", "score.overlong_factor"),
        (
            "score.code.memory_mb=9223372036854775807",
            "score.code.memory_mb",
        ),
        ("rollout.temperature=1e-320", "rollout.temperature"),
        ("rollout.temperature=1e308", "rollout.temperature"),
        (
            "score.code.case_timeout_s=1e-320",
            "score.code.case_timeout_s",
        ),
        (
            "score.code.run_timeout_s=1e-320",
            "score.code.run_timeout_s",
        ),
        ("update.kl_coef=1e308", "update.kl_coef"),
        ("update.entropy_coef=1e308", "update.entropy_coef"),
        ("update.dual_clip=1e308", "update.dual_clip"),
        ("update.grad_clip=1e308", "update.grad_clip"),
        ("update.tis_cap=1e308", "update.tis_cap"),
        ("update.eps_high=1e308", "update.eps_high"),
    ] {
        let e = format!(
            "{:#}",
            Resolved::load_with(&config, &[set.to_string()]).unwrap_err()
        );
        assert!(
            e.contains(&format!("--set {set}: config key `{key}`")),
            "{set}: {e}"
        );
        assert!(!e.contains("0000000000"), "a long decimal: {e}");
    }
    // The sandbox's memory limit is checked against this machine too.
    let e = format!(
        "{:#}",
        Resolved::load_with(&config, &["score.code.memory_mb=1048576".to_string()]).unwrap_err()
    );
    assert!(e.contains("this machine's memory"), "{e}");
}
