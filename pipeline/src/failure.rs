//! How the binary shows an error: the whole chain on stderr, what failed, then why. Among
//! several ranks a failing rank shows its error before it tells the others, and returns it
//! under [`Shown`], so it is not shown twice.

/// Context on an error that was already printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown;

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(shown above)")
    }
}

/// Prints `e` and its causes to stderr, unless it was [`Shown`] already.
pub fn show(e: &anyhow::Error) {
    if e.is::<Shown>() {
        return;
    }
    eprintln!("error: {e}");
    for cause in e.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_error_keeps_its_chain_and_is_known_as_shown() {
        let e = anyhow::anyhow!("disk full").context("stage update");
        assert!(!e.is::<Shown>());
        let e = e.context(Shown);
        assert!(e.is::<Shown>());
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        assert_eq!(chain, ["(shown above)", "stage update", "disk full"]);
    }
}
