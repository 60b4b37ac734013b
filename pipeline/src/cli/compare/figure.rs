//! The figure of a comparison: the held-out curve per variant and the final accuracies.

use deltarl_plot::{Figure, Mark, Panel, Series};

use super::outcome::Outcome;
use crate::paired::mean_ci;

/// Left: mean held-out accuracy over seeds per iteration with its 95 % band (iteration 0
/// is the shared base). Right: final accuracy per variant, mean with 95 % CI and each seed.
pub fn figure(variants: &[String], results: &[Outcome], base: Option<f64>) -> Figure {
    let mut curves = Vec::new();
    let mut finals = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let runs: Vec<&Outcome> = results.iter().filter(|r| &r.variant == v).collect();
        let iters = runs.iter().map(|r| r.curve.len()).max().unwrap_or(0);
        let mut points: Vec<(f64, f64)> = base.map(|b| (0.0, b)).into_iter().collect();
        let mut band = Vec::new();
        for it in 0..iters {
            let xs: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.curve.get(it).copied().flatten())
                .collect();
            if xs.is_empty() {
                continue;
            }
            let (m, ci) = mean_ci(&xs);
            let x = (it + 1) as f64;
            points.push((x, m));
            band.push((x, m - ci, m + ci));
        }
        curves.push(Series {
            band,
            ..Series::line(v.as_str(), i, points)
        });
        let last: Vec<f64> = runs.iter().map(|r| r.last).collect();
        let (m, ci) = mean_ci(&last);
        finals.push(Series {
            band: vec![(i as f64, m - ci, m + ci)],
            mark: Mark::Points,
            ..Series::line(v.as_str(), i, vec![(i as f64, m)])
        });
        // Seeds as small offsets to the right of the mean, unlabelled.
        finals.push(Series {
            mark: Mark::Points,
            ..Series::line(
                "",
                i,
                last.iter()
                    .enumerate()
                    .map(|(k, &y)| (i as f64 + 0.12 + 0.04 * k as f64, y))
                    .collect(),
            )
        });
    }
    Figure {
        title: "held-out accuracy by variant".into(),
        panels: vec![
            Panel {
                title: "mean over seeds (band: 95% CI); iteration 0 = base".into(),
                x_label: "iteration".into(),
                series: curves,
                categories: Vec::new(),
                legend: true,
                y_bounds: Some((0.0, 1.0)),
            },
            Panel {
                title: "final iteration: mean ± 95% CI, and each seed".into(),
                x_label: "variant".into(),
                series: finals,
                categories: variants.to_vec(),
                // The axis names the variants.
                legend: false,
                y_bounds: Some((0.0, 1.0)),
            },
        ],
        columns: 2,
        panel_size: (560, 380),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cli::compare::outcome::outcome;

    #[test]
    fn figure_has_base_means_bands_and_seeds() {
        let results: Vec<Outcome> = vec![
            outcome("dapo", 1, vec![Some(0.5), Some(0.6)], 0.6),
            outcome("dapo", 2, vec![Some(0.7), None], 0.8),
            outcome("delta", 1, vec![Some(0.4), Some(0.5)], 0.5),
        ];
        let variants = vec!["dapo".to_string(), "delta".to_string()];
        let fig = figure(&variants, &results, Some(0.45));
        let curves = &fig.panels[0].series;
        assert_eq!(curves.len(), 2);
        // Iteration 0 is the base; iteration 2 of dapo has one seed (no CI: NaN band).
        assert_eq!(curves[0].points, vec![(0.0, 0.45), (1.0, 0.6), (2.0, 0.6)]);
        let (m, ci) = mean_ci(&[0.5, 0.7]);
        assert_eq!(curves[0].band[0], (1.0, m - ci, m + ci));
        assert!(curves[0].band[1].1.is_nan());
        let finals = &fig.panels[1].series;
        assert_eq!(fig.panels[1].categories, variants);
        // Mean with its error bar at x = 0, then the two seeds just right of it.
        assert_eq!(finals[0].points, vec![(0.0, 0.7)]);
        assert_eq!(finals[1].points.len(), 2);
        assert!(finals[1].points.iter().all(|p| p.0 > 0.0 && p.0 < 0.5));
        let png = deltarl_plot::render_png(&fig).unwrap();
        assert!(png.starts_with(b"\x89PNG"));
    }
}
