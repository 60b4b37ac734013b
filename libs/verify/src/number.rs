//! Exact rational numbers parsed from normalised answers.

use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, Signed, Zero};

use crate::MAX_DIGITS;

/// An exact rational in lowest terms with a positive denominator; shown as `n` or `n/d`,
/// which [`Rational::parse`] reads back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rational {
    num: BigInt,
    den: BigInt,
}

impl Rational {
    fn new(num: BigInt, den: BigInt) -> Option<Self> {
        if den.is_zero() {
            return None;
        }
        let g = num.gcd(&den);
        let (mut n, mut d) = (num / &g, den / &g);
        if d.is_negative() {
            n = -n;
            d = -d;
        }
        Some(Rational { num: n, den: d })
    }

    fn int(digits: &str) -> Option<BigInt> {
        if digits.is_empty() || digits.len() > MAX_DIGITS {
            return None;
        }
        digits.parse().ok()
    }

    fn pow10(e: u32) -> BigInt {
        num_traits::pow(BigInt::from(10), e as usize)
    }

    /// A plain decimal: `-12`, `3.25`, `.5`, `1.5e3`.
    fn decimal(s: &str) -> Option<Self> {
        let (mant, exp) = match s.find(['e', 'E']) {
            Some(p) => (&s[..p], s[p + 1..].parse::<i32>().ok()?),
            None => (s, 0),
        };
        let (neg, m) = match mant.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, mant.strip_prefix('+').unwrap_or(mant)),
        };
        let (ip, fp) = m.split_once('.').unwrap_or((m, ""));
        if ip.is_empty() && fp.is_empty() {
            return None;
        }
        if !ip.chars().chain(fp.chars()).all(|c| c.is_ascii_digit()) {
            return None;
        }
        let digits = format!("{ip}{fp}");
        let exp = exp - fp.len() as i32;
        if exp.unsigned_abs() as usize > MAX_DIGITS {
            return None;
        }
        let mut num = Self::int(&digits)?;
        if neg {
            num = -num;
        }
        if exp >= 0 {
            Self::new(num * Self::pow10(exp as u32), BigInt::one())
        } else {
            Self::new(num, Self::pow10(exp.unsigned_abs()))
        }
    }

    pub(crate) fn zero() -> Self {
        Rational {
            num: BigInt::zero(),
            den: BigInt::one(),
        }
    }

    pub(crate) fn mul(self, o: Self) -> Option<Self> {
        Self::new(self.num * o.num, self.den * o.den)
    }

    fn div(self, o: Self) -> Option<Self> {
        Self::new(self.num * o.den, self.den * o.num)
    }

    pub(crate) fn add(self, o: Self) -> Option<Self> {
        Self::new(self.num * &o.den + o.num * &self.den, self.den * o.den)
    }

    pub(crate) fn neg(self) -> Self {
        Rational {
            num: -self.num,
            den: self.den,
        }
    }

    /// Whether numerator and denominator each fit in [`MAX_DIGITS`] decimal digits (what
    /// [`Rational::parse`] accepts), so that arithmetic on such values stays cheap.
    pub(crate) fn fits(&self) -> bool {
        // 10^MAX_DIGITS > 2^(3.32 MAX_DIGITS): bits <= 3.32 MAX_DIGITS is at most that.
        let limit = (MAX_DIGITS as u64 * 332) / 100;
        self.num.bits() <= limit && self.den.bits() <= limit
    }

    /// Parses a normalised answer that is exactly a rational number: integers, decimals,
    /// `a/b`, `\frac{a}{b}`, mixed numbers `3\frac{1}{2}`, scientific notation
    /// (`1.5e3`, `1.5*10^{3}`).
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() > MAX_DIGITS * 2 + 16 {
            return None;
        }
        let (neg, body) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let v = Self::parse_unsigned(body)?;
        Some(if neg {
            Rational::new(-v.num, v.den)?
        } else {
            v
        })
    }

    fn parse_unsigned(s: &str) -> Option<Self> {
        if let Some(v) = Self::decimal(s) {
            return Some(v);
        }
        // \frac{a}{b}, possibly after a whole part (mixed number).
        if let Some(pos) = s.find("\\frac{") {
            let whole = &s[..pos];
            let rest = &s[pos + 6..];
            let (a, rest) = rest.split_once("}{")?;
            let b = rest.strip_suffix('}')?;
            let (an, bn) = (Self::parse(a)?, Self::parse(b)?);
            let frac = an.div(bn)?;
            if whole.is_empty() {
                return Some(frac);
            }
            let w = Self::decimal(whole)?;
            if !w.den.is_one() || w.num.is_negative() {
                return None;
            }
            return w.add(frac);
        }
        if let Some((a, b)) = s.split_once('/') {
            return Self::decimal(a)?.div(Self::decimal(b)?);
        }
        // m*10^{e} / m*10^e
        if let Some((m, e)) = s.split_once("*10^") {
            let e = e.trim_start_matches('{').trim_end_matches('}');
            let e: i32 = e.parse().ok()?;
            if e.unsigned_abs() as usize > MAX_DIGITS {
                return None;
            }
            let p = Self::pow10(e.unsigned_abs());
            let scale = if e >= 0 {
                Self::new(p, BigInt::one())?
            } else {
                Self::new(BigInt::one(), p)?
            };
            return Self::decimal(m)?.mul(scale);
        }
        None
    }
}

impl std::fmt::Display for Rational {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.den.is_one() {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}
