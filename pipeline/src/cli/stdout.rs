//! Standard output of the commands that print a table or a report.

use anyhow::Result;

/// Prints to standard output; a reader that went away (`deltarl status | head -1`) ends the
/// output quietly instead of failing.
pub fn print_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
