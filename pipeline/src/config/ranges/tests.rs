//! The table's own rules: what each bound admits and how it reads, and the command line's
//! sampling flags. (The sweep over configurations is `config/ranges_sweep.rs`.)
#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn bounds_admit_what_they_say() {
    let t = TEMPERATURE;
    for (x, ok) in [
        (0.0, true),
        (1e-3, true),
        (100.0, true),
        (1e-4, false),
        (1e-320, false),
        (100.5, false),
        (-0.5, false),
        (f64::NAN, false),
        (f64::INFINITY, false),
    ] {
        assert_eq!(t.admits(Number::Float(x)), ok, "{x}");
    }
    let dual = range("update.dual_clip").unwrap().bound;
    assert!(!dual.admits(Number::Float(1.0)) && dual.admits(Number::Float(1.0 + 1e-9)));
    assert!(dual.admits(Number::Int(0)) && dual.admits(Number::Int(3)));
    let eps = range("update.eps_low").unwrap().bound;
    assert!(eps.admits(Number::Float(0.0)) && !eps.admits(Number::Float(1.0)));
    let sizes = range("rollout.max_new_tokens").unwrap().bound;
    assert!(!sizes.admits(Number::Int(0)) && sizes.admits(Number::Int(1 << 20)));
    assert!(!sizes.admits(Number::Int((1 << 20) + 1)) && !sizes.admits(Number::Float(4.0)));
    assert_eq!(show(1e308), "1e308");
    assert_eq!(show(2.5e-7), "2.5e-7");
    assert_eq!(show(0.28), "0.28");
    assert_eq!(t.describe(), "0 or [0.001, 100]");
    assert_eq!(dual.describe(), "0 or (1, 1000]");
}

/// The same ranges on the command line's sampling flags.
#[test]
fn command_line_sampling_flags_share_the_ranges() {
    assert_eq!(temperature_arg("0"), Ok(0.0));
    assert_eq!(temperature_arg("0.7"), Ok(0.7));
    for bad in ["1e-320", "1e308", "-1", "nan", "inf"] {
        let e = temperature_arg(bad).unwrap_err();
        assert!(
            e.contains("must be 0 or [0.001, 100]") || e.contains("invalid"),
            "{bad}: {e}"
        );
    }
    assert!(temperature_arg("x").is_err());
    assert_eq!(top_p_arg("1"), Ok(1.0));
    assert!(top_p_arg("0").is_err() && top_p_arg("1.5").is_err());
}

/// The command line's counts take their configuration keys' ranges: `eval --k 0` once
/// printed a table of NaN and `--limit 0` blamed the context length.
#[test]
fn command_line_counts_share_the_ranges() {
    assert_eq!(samples_arg("1"), Ok(1));
    assert_eq!(samples_arg("4096"), Ok(4096));
    for bad in ["0", "4097", "-1", "1.5", "x", ""] {
        assert!(samples_arg(bad).is_err(), "{bad}");
    }
    assert_eq!(samples_arg("0").unwrap_err(), "0: must be 1 to 4096");
    assert_eq!(top_k_arg("0"), Ok(0));
    assert!(top_k_arg("16777217").is_err());
    assert_eq!(new_tokens_arg("1"), Ok(1));
    assert!(new_tokens_arg("0").is_err() && new_tokens_arg("1048577").is_err());
    assert!(batch_rows_arg("0").is_err() && batch_rows_arg("256") == Ok(256));
    assert!(limit_arg("0").is_err() && limit_arg("1") == Ok(1));
    assert_eq!(
        range("eval.samples").unwrap().bound,
        range("rollout.samples_per_prompt").unwrap().bound
    );
}
