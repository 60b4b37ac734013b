//! A small bounded expression evaluator for symbolic answers (radicals, pi, powers,
//! products, variables). Expressions are compared by evaluation at several points.

/// Values assigned to free variables, one per evaluation point.
const POINTS: [f64; 3] = [0.313_527, 0.571_876, 1.138_034];
const MAX_DEPTH: usize = 64;
const MAX_STEPS: usize = 20_000;

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
    steps: usize,
    x: f64,
    vars: usize,
}

type R = Option<f64>;
type Unary = fn(f64) -> f64;

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn tick(&mut self) -> Option<()> {
        self.steps += 1;
        (self.steps <= MAX_STEPS).then_some(())
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn starts(&self, w: &str) -> bool {
        self.s[self.i..].starts_with(w.as_bytes())
    }

    fn expr(&mut self) -> R {
        self.tick()?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let mut v = self.term()?;
        loop {
            if self.eat(b'+') {
                v += self.term()?;
            } else if self.peek() == Some(b'-') {
                self.i += 1;
                v -= self.term()?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Some(v)
    }

    fn term(&mut self) -> R {
        let mut v = self.unary()?;
        loop {
            self.tick()?;
            if self.eat(b'*') {
                v *= self.unary()?;
            } else if self.eat(b'/') {
                v /= self.unary()?;
            } else if self.implicit_follows() {
                v *= self.power()?;
            } else {
                break;
            }
        }
        Some(v)
    }

    /// Juxtaposition (`2\pi`, `3(4)`, `2\sqrt{3}`) is multiplication.
    fn implicit_follows(&self) -> bool {
        match self.peek() {
            Some(c) if c.is_ascii_alphanumeric() || c == b'(' || c == b'{' || c == b'.' => true,
            Some(b'\\') => !self.starts("\\right"),
            _ => false,
        }
    }

    fn unary(&mut self) -> R {
        if self.eat(b'-') {
            return Some(-self.unary()?);
        }
        if self.eat(b'+') {
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> R {
        let base = self.atom()?;
        if self.eat(b'^') {
            let e = self.unary_atom()?;
            if e.abs() > 1e4 {
                return None;
            }
            let v = base.powf(e);
            return v.is_finite().then_some(v);
        }
        Some(base)
    }

    /// An exponent: a braced group, a signed atom.
    fn unary_atom(&mut self) -> R {
        if self.eat(b'-') {
            return Some(-self.unary_atom()?);
        }
        self.atom()
    }

    fn group(&mut self, open: u8, close: u8) -> R {
        if !self.eat(open) {
            return None;
        }
        let v = self.expr()?;
        self.eat(close).then_some(v)
    }

    fn atom(&mut self) -> R {
        self.tick()?;
        match self.peek()? {
            b'(' => self.group(b'(', b')'),
            b'{' => self.group(b'{', b'}'),
            b'[' => self.group(b'[', b']'),
            c if c.is_ascii_digit() || c == b'.' => {
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == b'.') {
                    self.i += 1;
                }
                if self.i - start > 40 {
                    return None;
                }
                std::str::from_utf8(&self.s[start..self.i])
                    .ok()?
                    .parse()
                    .ok()
            }
            b'\\' => self.command(),
            c if c.is_ascii_alphabetic() => {
                self.i += 1;
                if c == b'e' {
                    return Some(std::f64::consts::E);
                }
                // Each distinct letter gets its own value (upper and lower case differ).
                self.vars += 1;
                Some(self.x * (0.5 + f64::from((u32::from(c) * 37) % 17) * 0.03))
            }
            _ => None,
        }
    }

    fn command(&mut self) -> R {
        let fns: [(&str, Unary); 12] = [
            ("\\arcsin", f64::asin),
            ("\\arccos", f64::acos),
            ("\\sin", f64::sin),
            ("\\cos", f64::cos),
            ("\\tan", f64::tan),
            ("\\sec", |x| 1.0 / x.cos()),
            ("\\csc", |x| 1.0 / x.sin()),
            ("\\cot", |x| 1.0 / x.tan()),
            ("\\ln", f64::ln),
            ("\\log", f64::log10),
            ("\\exp", f64::exp),
            ("\\arctan", f64::atan),
        ];
        if self.starts("\\frac") {
            self.i += 5;
            let a = self.group(b'{', b'}')?;
            let b = self.group(b'{', b'}')?;
            return Some(a / b);
        }
        if self.starts("\\sqrt") {
            self.i += 5;
            let n = if self.peek() == Some(b'[') {
                self.group(b'[', b']')?
            } else {
                2.0
            };
            let v = self.group(b'{', b'}')?;
            return Some(v.powf(1.0 / n));
        }
        if self.starts("\\pi") {
            self.i += 3;
            return Some(std::f64::consts::PI);
        }
        for (name, f) in fns {
            if self.starts(name) {
                self.i += name.len();
                // `\tan^2 y` is (tan y)^2.
                let exponent = if self.eat(b'^') {
                    Some(self.unary_atom()?)
                } else {
                    None
                };
                let v = f(self.power()?);
                return match exponent {
                    Some(e) if e.abs() <= 1e4 => Some(v.powf(e)),
                    Some(_) => None,
                    None => Some(v),
                };
            }
        }
        None
    }
}

/// Values of the expression at the evaluation points; `None` if it does not parse or is
/// not finite.
pub fn evaluate(s: &str) -> Option<[f64; 3]> {
    let mut out = [0.0; 3];
    for (k, &x) in POINTS.iter().enumerate() {
        let mut p = Parser {
            s: s.as_bytes(),
            i: 0,
            depth: 0,
            steps: 0,
            x,
            vars: 0,
        };
        let v = p.expr()?;
        if p.i != s.len() || !v.is_finite() {
            return None;
        }
        out[k] = v;
    }
    Some(out)
}

pub fn close(a: [f64; 3], b: [f64; 3]) -> bool {
    a.iter()
        .zip(&b)
        .all(|(x, y)| (x - y).abs() <= 1e-8 * x.abs().max(y.abs()).max(1.0))
}
