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
