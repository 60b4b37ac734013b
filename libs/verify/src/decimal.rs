//! Decimals against other spellings of a number: a decimal comma, and a decimal written
//! with enough places to stand for an exact value.

/// `1,22` as `1.22`: digits, one comma, digits (a sign allowed).
pub(crate) fn comma_decimal(s: &str) -> Option<String> {
    let (int, frac) = s.split_once(',')?;
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    (digits(int.strip_prefix('-').unwrap_or(int)) && digits(frac)).then(|| format!("{int}.{frac}"))
}

/// A decimal written with at least [`MIN_PLACES`] places stands for an exact value it
/// rounds or truncates to: `|decimal - value| <= 10^-places` (plus f64 round-off), so
/// `0.333333` is 1/3 but `0.33` is not, and `1.41421356` is `\sqrt{2}` but `3.14` is not
/// `\pi`. Only between a decimal and a non-decimal (two decimals compare exactly).
pub(crate) fn approximates(p: &str, g: &str, pv: [f64; 3], gv: [f64; 3]) -> bool {
    let places = |s: &str| -> Option<i32> {
        let t = s.strip_prefix('-').unwrap_or(s);
        let (int, frac) = t.split_once('.')?;
        let digits = |x: &str| x.chars().all(|c| c.is_ascii_digit());
        (digits(int) && !frac.is_empty() && digits(frac)).then_some(frac.len() as i32)
    };
    let (dec, exact) = match (places(p), places(g)) {
        (Some(n), None) => (n, gv),
        (None, Some(n)) => (n, pv),
        _ => return false,
    };
    let value = if places(p).is_some() { pv[0] } else { gv[0] };
    // The exact side must be a constant (the same at every evaluation point).
    let constant = exact
        .iter()
        .all(|x| (x - exact[0]).abs() <= 1e-12 * x.abs().max(1.0));
    dec >= MIN_PLACES
        && constant
        && (value - exact[0]).abs() <= 10f64.powi(-dec) + 1e-12 * exact[0].abs()
}

/// Fewest decimal places that stand for an exact value.
const MIN_PLACES: i32 = 4;
