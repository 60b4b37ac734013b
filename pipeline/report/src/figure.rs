//! The learning-curve figure of a report: one panel per metric, one colour per run.

use deltarl_plot::{Figure, Mark, Panel, Series};
use polars::prelude::DataFrame;

use crate::metric::Metric;
use crate::table::value;

/// A second metric drawn dashed in the same colour, and its label suffix.
type Dashed = Option<(Metric, &'static str)>;

/// `(title, solid metric, dashed metric)` per panel.
const PANELS: [(&str, Metric, Dashed); 10] = [
    ("reward mean (train)", Metric::RewardMean, None),
    ("accuracy (train samples)", Metric::Accuracy, None),
    ("held-out accuracy (eval)", Metric::EvalAccuracy, None),
    ("response length (tokens)", Metric::ResponseLen, None),
    ("entropy (token mean)", Metric::Entropy, None),
    ("clip fraction", Metric::ClipFrac, None),
    (
        "KL (k3): to base, sampler/trainer (dashed)",
        Metric::Kl,
        Some((Metric::MismatchK3, "sampler")),
    ),
    (
        "cos(mu+, mu-): before, after (dashed)",
        Metric::CosBefore,
        Some((Metric::CosAfter, "after")),
    ),
    (
        "coeff p90-p10: A>0, A<0 (dashed)",
        Metric::CoeffSpreadPos,
        Some((Metric::CoeffSpreadNeg, "A<0")),
    ),
    (
        "coeff where the gradient is: A>0, A<0 (dashed)",
        Metric::CoeffGradPos,
        Some((Metric::CoeffGradNeg, "A<0")),
    ),
];

fn points(df: &DataFrame, run: &str, metric: Metric) -> Vec<(f64, f64)> {
    let runs = df.column("run").ok().and_then(|c| c.str().ok().cloned());
    (0..df.height())
        .filter(|&r| runs.as_ref().and_then(|c| c.get(r)) == Some(run))
        .filter_map(|r| {
            Some((
                value(df, "iter", r)?,
                value(df, metric.name(), r).unwrap_or(f64::NAN),
            ))
        })
        .collect()
}

/// The run names, or their count when the names would not fit across the figure.
fn title(runs: &[String]) -> String {
    let names = runs.join(", ");
    if names.chars().count() <= 90 {
        format!("deltarl report: {names}")
    } else {
        format!(
            "deltarl report: {} runs (names in the first panel)",
            runs.len()
        )
    }
}

/// The figure of a report table; `runs` fixes the colours (in the order given).
pub fn figure(df: &DataFrame, runs: &[String]) -> Figure {
    let panels = PANELS
        .iter()
        .enumerate()
        .map(|(k, (title, solid, dashed))| {
            let mut series = Vec::new();
            for (i, run) in runs.iter().enumerate() {
                series.push(Series::line(run.as_str(), i, points(df, run, *solid)));
                if let Some((metric, suffix)) = dashed {
                    series.push(Series {
                        mark: Mark::Dashed,
                        ..Series::line(format!("{run} {suffix}"), i, points(df, run, *metric))
                    });
                }
            }
            // Panels whose metric is absent everywhere (e.g. eval not configured) say so.
            if series
                .iter()
                .all(|s| s.points.iter().all(|p| !p.1.is_finite()))
            {
                series.clear();
            }
            Panel {
                title: title.to_string(),
                x_label: "iteration".into(),
                series,
                categories: Vec::new(),
                // One legend for the grid: the runs keep their colours in every panel.
                legend: k == 0,
                // Shares of responses and of tokens cannot leave [0, 1].
                y_bounds: solid.is_share().then_some((0.0, 1.0)),
            }
        })
        .collect();
    Figure {
        title: title(runs),
        panels,
        columns: 3,
        panel_size: (420, 300),
    }
}
