//! `--extract`: which answer extraction `verify` and `eval` grade with.

/// The verifier's extraction policy on the command line (`deltarl_verify::Policy`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ExtractArg {
    /// Only the last complete \boxed{} counts (as training scores by default).
    Boxed,
    /// The last box, then "The answer is" / "Final Answer:" phrases, `####`, the final
    /// sentence's number or math.
    Lenient,
}

impl From<ExtractArg> for deltarl_verify::Policy {
    fn from(a: ExtractArg) -> Self {
        match a {
            ExtractArg::Boxed => deltarl_verify::Policy::Boxed,
            ExtractArg::Lenient => deltarl_verify::Policy::Lenient,
        }
    }
}
