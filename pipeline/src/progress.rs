//! Progress of long work: a bar on a terminal, a plain line every few seconds elsewhere (CI,
//! Slurm logs, `tee`), nothing with `DELTARL_NO_PROGRESS` set.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often the plain form prints a line.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Progress of one piece of work. Safe to advance from several threads.
pub struct Progress {
    /// The bar; hidden (but still counting) in the plain and silent forms.
    bar: ProgressBar,
    /// The plain form's label and the time of its last line.
    plain: Option<(String, Mutex<Instant>)>,
}

impl Progress {
    /// Progress over `len` units (0 when unknown) of work called `what`.
    pub fn new(what: &str, len: u64) -> Self {
        if std::env::var_os("DELTARL_NO_PROGRESS").is_some() {
            return Progress {
                bar: ProgressBar::hidden(),
                plain: None,
            };
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{spinner}} {what:>9} [{{bar:30}}] {{pos}}/{{len}} {{msg}}"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            return Progress { bar, plain: None };
        }
        let bar = ProgressBar::hidden();
        bar.set_length(len);
        Progress {
            bar,
            plain: Some((what.to_string(), Mutex::new(Instant::now()))),
        }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.tick();
    }

    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
        self.tick();
    }

    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    /// Clears the bar (the caller prints its own summary line).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn tick(&self) {
        let Some((what, last)) = &self.plain else {
            return;
        };
        let Ok(mut last) = last.lock() else {
            return;
        };
        if last.elapsed() < PLAIN_EVERY {
            return;
        }
        *last = Instant::now();
        let (pos, len) = (self.bar.position(), self.bar.length().unwrap_or(0));
        let pct = if len > 0 {
            format!(" ({:.0} %)", 100.0 * pos as f64 / len as f64)
        } else {
            String::new()
        };
        let secs = self.bar.elapsed().as_secs_f64();
        eprintln!(
            "    {what} {pos}/{len}{pct} {} [{secs:.0} s]",
            self.bar.message()
        );
    }
}
