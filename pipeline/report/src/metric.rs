//! The report's metric columns, each named once: the table's aggregates and batch
//! statistics produce them by this type, the figure's panels draw them by it.

/// A metric column of the report (f64, one value a run and iteration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    RewardMean,
    Accuracy,
    ResponseLen,
    Truncated,
    Kept,
    Entropy,
    ClipFrac,
    Kl,
    GradNorm,
    CosBefore,
    CosAfter,
    CoeffMean,
    CoeffSpreadPos,
    CoeffSpreadNeg,
    CoeffGradPos,
    CoeffGradNeg,
    MismatchMaxAbs,
    MismatchK3,
    EvalAccuracy,
}

impl Metric {
    /// Every metric, in the report's column order.
    pub const ALL: [Metric; 19] = [
        Metric::RewardMean,
        Metric::Accuracy,
        Metric::ResponseLen,
        Metric::Truncated,
        Metric::Kept,
        Metric::Entropy,
        Metric::ClipFrac,
        Metric::Kl,
        Metric::GradNorm,
        Metric::CosBefore,
        Metric::CosAfter,
        Metric::CoeffMean,
        Metric::CoeffSpreadPos,
        Metric::CoeffSpreadNeg,
        Metric::CoeffGradPos,
        Metric::CoeffGradNeg,
        Metric::MismatchMaxAbs,
        Metric::MismatchK3,
        Metric::EvalAccuracy,
    ];

    /// The column's name in the table and the CSV.
    pub const fn name(self) -> &'static str {
        match self {
            Metric::RewardMean => "reward_mean",
            Metric::Accuracy => "accuracy",
            Metric::ResponseLen => "response_len",
            Metric::Truncated => "truncated",
            Metric::Kept => "kept",
            Metric::Entropy => "entropy",
            Metric::ClipFrac => "clip_frac",
            Metric::Kl => "kl",
            Metric::GradNorm => "grad_norm",
            Metric::CosBefore => "cos_before",
            Metric::CosAfter => "cos_after",
            Metric::CoeffMean => "coeff_mean",
            Metric::CoeffSpreadPos => "coeff_spread_pos",
            Metric::CoeffSpreadNeg => "coeff_spread_neg",
            Metric::CoeffGradPos => "coeff_grad_pos",
            Metric::CoeffGradNeg => "coeff_grad_neg",
            Metric::MismatchMaxAbs => "mismatch_max_abs",
            Metric::MismatchK3 => "mismatch_k3",
            Metric::EvalAccuracy => "eval_accuracy",
        }
    }

    /// Whether the metric is a share of responses or tokens, so it cannot leave [0, 1].
    pub const fn is_share(self) -> bool {
        match self {
            Metric::Accuracy
            | Metric::EvalAccuracy
            | Metric::ClipFrac
            | Metric::Truncated
            | Metric::Kept => true,
            Metric::RewardMean
            | Metric::ResponseLen
            | Metric::Entropy
            | Metric::Kl
            | Metric::GradNorm
            | Metric::CosBefore
            | Metric::CosAfter
            | Metric::CoeffMean
            | Metric::CoeffSpreadPos
            | Metric::CoeffSpreadNeg
            | Metric::CoeffGradPos
            | Metric::CoeffGradNeg
            | Metric::MismatchMaxAbs
            | Metric::MismatchK3 => false,
        }
    }
}

/// The columns of the report, in order: `run`, `iter`, then the metrics.
pub const COLUMNS: [&str; 2 + Metric::ALL.len()] = {
    let mut c = [""; 2 + Metric::ALL.len()];
    c[0] = "run";
    c[1] = "iter";
    let mut i = 0;
    while i < Metric::ALL.len() {
        c[2 + i] = Metric::ALL[i].name();
        i += 1;
    }
    c
};
