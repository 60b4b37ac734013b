//! serde `skip_serializing_if` tests, shared by the configuration and every stage's
//! settings: keys added after runs were recorded are left out of serialised configurations
//! and settings at their defaults, so those runs' hashes stay the same.

pub fn is_one(x: &f64) -> bool {
    *x == 1.0
}

pub fn is_zero(x: &usize) -> bool {
    *x == 0
}

pub fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

pub fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

pub fn is_true(b: &bool) -> bool {
    *b
}
