//! The axes of a panel: the data ranges (padded, within the quantity's bounds), whether x
//! counts whole numbers, and the rings that keep coinciding curves visible.

use crate::figure::Panel;

/// The data range of a panel, padded so flat or single-point series still show, and kept
/// within the panel's `y_bounds` (an accuracy axis never shows negative values).
pub(crate) fn ranges(panel: &Panel) -> Option<((f64, f64), (f64, f64))> {
    let finite = |v: f64| v.is_finite();
    let xs = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter(|p| finite(p.1)).map(|p| p.0));
    let ys = panel.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
    });
    let span = |it: &mut dyn Iterator<Item = f64>| {
        it.filter(|v| v.is_finite())
            .fold(None, |acc: Option<(f64, f64)>, v| {
                Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
            })
    };
    let (x0, x1) = span(&mut { xs })?;
    let (y0, y1) = span(&mut { ys })?;
    let pad = |lo: f64, hi: f64, frac: f64| {
        if hi > lo {
            let d = (hi - lo) * frac;
            (lo - d, hi + d)
        } else {
            let d = (lo.abs() * 0.05).max(1e-3);
            (lo - d, hi + d)
        }
    };
    let (x0, x1) = if panel.categories.is_empty() {
        pad(x0, x1, 0.02)
    } else {
        (-0.5, panel.categories.len() as f64 - 0.5)
    };
    let y = match panel.y_bounds {
        // A flat series within bounds is padded by a twentieth of the bounds, then clamped.
        Some((lo, hi)) => {
            let (a, b) = if y1 > y0 {
                pad(y0, y1, 0.08)
            } else {
                (y0 - (hi - lo) / 20.0, y1 + (hi - lo) / 20.0)
            };
            let (a, b) = (a.max(lo), b.min(hi));
            if b > a {
                (a, b)
            } else {
                (lo, hi)
            }
        }
        None => pad(y0, y1, 0.08),
    };
    Some(((x0, x1), y))
}

/// Whether the panel's x values are all whole numbers (iterations), so its ticks should be.
pub(crate) fn whole_x(panel: &Panel) -> bool {
    panel.categories.is_empty()
        && panel.series.iter().all(|s| {
            s.points
                .iter()
                .filter(|p| p.0.is_finite())
                .all(|p| p.0.fract() == 0.0)
        })
}

/// The ring radius of line series `index` of `lines`: the first widest, 2 px the last.
pub(crate) fn ring_radius(index: usize, lines: usize) -> i32 {
    (2 + 2 * lines.saturating_sub(index + 1)).min(10) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Series;

    #[test]
    fn bounded_flat_and_whole_axes() {
        // Accuracy flat at 0: the axis runs from 0, never below.
        let flat = Panel {
            series: vec![Series::line("a", 0, vec![(0.0, 0.0), (1.0, 0.0)])],
            y_bounds: Some((0.0, 1.0)),
            ..Panel::default()
        };
        let (_, (y0, y1)) = ranges(&flat).unwrap();
        assert_eq!((y0, y1), (0.0, 0.05));
        assert!(whole_x(&flat));
        // Unbounded, the same series pads both ways.
        let free = Panel {
            y_bounds: None,
            ..flat.clone()
        };
        assert!(ranges(&free).unwrap().1 .0 < 0.0);
        let half = Panel {
            series: vec![Series::line("a", 0, vec![(0.5, 0.3)])],
            ..Panel::default()
        };
        assert!(!whole_x(&half));
        assert_eq!((ring_radius(0, 3), ring_radius(2, 3)), (6, 2));
    }
}
