//! Numbers in messages as people write them.

/// `x` in scientific notation when it is very large or very small (1e308, 2.5e-7), not as
/// the 309-digit decimal `Display` gives; plainly otherwise (0.28, 4096).
pub fn show(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 || !x.is_finite() || (1e-4..1e6).contains(&a) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn large_and_small_in_scientific_notation() {
        assert_eq!(super::show(1e308), "1e308");
        assert_eq!(super::show(-1e300), "-1e300");
        assert_eq!(super::show(2.5e-7), "2.5e-7");
        assert_eq!(super::show(1e-320), "1e-320");
        assert_eq!(super::show(0.28), "0.28");
        assert_eq!(super::show(4096.0), "4096");
        assert_eq!(super::show(0.0), "0");
        assert_eq!(super::show(f64::NAN), "NaN");
    }
}
