//! Learning-curve figures for `deltarl report` and `deltarl compare`: a grid of panels, one
//! line (optionally with a shaded band or error bars) per series, rendered to PNG bytes.
//!
//! Rendering goes to an in-memory RGB buffer and is encoded with `png`, so callers write the
//! bytes atomically (temporary name, rename) like every other output, and the same figure
//! gives the same bytes. Text uses an embedded subset of DejaVu Sans (see
//! `assets/make_font.sh`): no fontconfig or system fonts are needed.

mod axes;
mod figure;

pub use figure::{Figure, Mark, Panel, Series};

use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");

/// Ten distinguishable colours (matplotlib's tab10), assigned by series index.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("the embedded font could not be loaded")]
    Font,
    #[error("drawing failed: {0}")]
    Draw(String),
    #[error("PNG encoding failed: {0}")]
    Encode(String),
    #[error("a figure needs at least one panel and one column")]
    Empty,
}

type Result<T> = std::result::Result<T, PlotError>;

fn draw_err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

fn register_font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// Renders the figure and returns PNG bytes.
pub fn render_png(fig: &Figure) -> Result<Vec<u8>> {
    if fig.panels.is_empty() || fig.columns == 0 {
        return Err(PlotError::Empty);
    }
    register_font()?;
    let cols = fig.columns.min(fig.panels.len());
    let rows = fig.panels.len().div_ceil(cols);
    let title_h = 40;
    let (pw, ph) = fig.panel_size;
    let (w, h) = (pw * cols as u32, ph * rows as u32 + title_h);
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (top, body) = root.split_vertically(title_h);
        top.titled(&fig.title, ("sans-serif", 22))
            .map_err(draw_err)?;
        let areas = body.split_evenly((rows, cols));
        for (panel, area) in fig.panels.iter().zip(&areas) {
            draw_panel(panel, area)?;
        }
        root.present().map_err(draw_err)?;
    }
    encode(&rgb, w, h)
}

fn encode(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    // Plots are mostly flat colour: the best compression makes them ~10x smaller.
    enc.set_compression(png::Compression::Best);
    enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc
        .write_header()
        .map_err(|e| PlotError::Encode(e.to_string()))?;
    writer
        .write_image_data(rgb)
        .map_err(|e| PlotError::Encode(e.to_string()))?;
    writer
        .finish()
        .map_err(|e| PlotError::Encode(e.to_string()))?;
    Ok(out)
}

/// Splits a polyline at non-finite values.
fn segments(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out = vec![Vec::new()];
    for &(x, y) in points {
        if x.is_finite() && y.is_finite() {
            if let Some(last) = out.last_mut() {
                last.push((x, y));
            }
        } else if out.last().is_some_and(|s| !s.is_empty()) {
            out.push(Vec::new());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Splits a band at entries with a non-finite end.
fn band_segments(band: &[(f64, f64, f64)]) -> Vec<&[(f64, f64, f64)]> {
    band.split(|b| !(b.0.is_finite() && b.1.is_finite() && b.2.is_finite()))
        .filter(|s| !s.is_empty())
        .collect()
}

fn draw_panel(panel: &Panel, area: &DrawingArea<BitMapBackend<'_>, Shift>) -> Result<()> {
    let Some(((x0, x1), (y0, y1))) = axes::ranges(panel) else {
        let (w, h) = area.dim_in_pixel();
        let style = ("sans-serif", 16).into_font().color(&BLACK);
        area.draw_text(&panel.title, &style, (10, 10))
            .map_err(draw_err)?;
        area.draw_text("no data", &style, (w as i32 / 2 - 30, h as i32 / 2))
            .map_err(draw_err)?;
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(56)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(draw_err)?;
    let cats = &panel.categories;
    // Iterations and other whole-number axes get no fractional ticks.
    let whole = axes::whole_x(panel);
    let x_fmt = |x: &f64| {
        if cats.is_empty() {
            let r = x.round();
            if (x - r).abs() < 1e-9 {
                format!("{r:.0}")
            } else if whole {
                String::new()
            } else {
                format!("{x:.1}")
            }
        } else {
            let i = x.round();
            if (x - i).abs() < 1e-9 && i >= 0.0 {
                cats.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
    };
    // Enough decimals to tell ticks about a tenth of the range apart.
    let decimals = (-((y1 - y0) / 10.0).log10()).ceil().clamp(0.0, 8.0) as usize;
    let y_fmt = |y: &f64| format!("{y:.decimals$}");
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(panel.x_label.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(("sans-serif", 12))
        .light_line_style(RGBColor(235, 235, 235));
    if !cats.is_empty() {
        mesh.x_labels(cats.len() * 2 + 1);
    } else if whole {
        mesh.x_labels(((x1 - x0).round() as usize + 1).clamp(2, 12));
    }
    mesh.draw().map_err(draw_err)?;

    let lines = panel
        .series
        .iter()
        .filter(|s| s.mark != Mark::Points)
        .count();
    let mut line_index = 0;
    for s in &panel.series {
        let color = PALETTE[s.color % PALETTE.len()];
        let style = color.stroke_width(2);
        // Bands first so lines sit on top of them.
        match s.mark {
            Mark::Line | Mark::Dashed => {
                for seg in band_segments(&s.band) {
                    let poly: Vec<(f64, f64)> = seg
                        .iter()
                        .map(|b| (b.0, b.2))
                        .chain(seg.iter().rev().map(|b| (b.0, b.1)))
                        .collect();
                    chart
                        .draw_series(std::iter::once(Polygon::new(poly, color.mix(0.18))))
                        .map_err(draw_err)?;
                }
            }
            Mark::Points => {
                let bars = s
                    .band
                    .iter()
                    .filter(|b| b.1.is_finite() && b.2.is_finite())
                    .map(|&(x, lo, hi)| PathElement::new(vec![(x, lo), (x, hi)], style));
                chart.draw_series(bars).map_err(draw_err)?;
            }
        }
        let mut first = true;
        match s.mark {
            Mark::Line | Mark::Dashed => {
                for seg in segments(&s.points) {
                    let ann = if s.mark == Mark::Line {
                        chart
                            .draw_series(LineSeries::new(seg, style))
                            .map_err(draw_err)?
                    } else {
                        chart
                            .draw_series(DashedLineSeries::new(seg, 6, 4, style))
                            .map_err(draw_err)?
                    };
                    if std::mem::take(&mut first) && !s.label.is_empty() {
                        ann.label(s.label.as_str()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                        });
                    }
                }
                // Rings at the points, the earlier series' wider: curves that coincide
                // (equal runs) still show every colour.
                let radius = axes::ring_radius(line_index, lines);
                line_index += 1;
                let rings = segments(&s.points)
                    .into_iter()
                    .flatten()
                    .map(|p| Circle::new(p, radius, color.stroke_width(2)));
                chart.draw_series(rings).map_err(draw_err)?;
            }
            Mark::Points => {
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|p| p.0.is_finite() && p.1.is_finite())
                    .collect();
                let ann = chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))
                    .map_err(draw_err)?;
                if !s.label.is_empty() {
                    ann.label(s.label.as_str())
                        .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
                }
            }
        }
    }
    if panel.legend && panel.series.iter().any(|s| !s.label.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 11))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn figure(panels: Vec<Panel>) -> Figure {
        Figure {
            title: "t".into(),
            panels,
            columns: 2,
            panel_size: (300, 200),
        }
    }

    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = dec.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn renders_a_grid_deterministically() {
        let p = Panel {
            title: "reward".into(),
            x_label: "iteration".into(),
            series: vec![
                Series::line(
                    "a",
                    0,
                    vec![(1.0, 0.1), (2.0, 0.3), (3.0, f64::NAN), (4.0, 0.5)],
                ),
                Series {
                    band: vec![(1.0, 0.0, 0.4), (2.0, 0.1, 0.5)],
                    mark: Mark::Dashed,
                    ..Series::line("b", 1, vec![(1.0, 0.2), (2.0, 0.3)])
                },
            ],
            categories: vec![],
            legend: true,
            y_bounds: None,
        };
        let cats = Panel {
            title: "final".into(),
            categories: vec!["grpo".into(), "delta".into()],
            series: vec![Series {
                band: vec![(0.0, 0.4, 0.6), (1.0, 0.5, 0.7)],
                mark: Mark::Points,
                ..Series::line("mean", 2, vec![(0.0, 0.5), (1.0, 0.6)])
            }],
            ..Panel::default()
        };
        let fig = figure(vec![p, cats, Panel::default()]);
        let a = render_png(&fig).unwrap();
        let b = render_png(&fig).unwrap();
        assert_eq!(a, b, "same figure, same bytes");
        let (w, h, px) = decode(&a);
        assert_eq!((w, h), (600, 440));
        // Series colours appear: the plot is not blank.
        let has = |c: RGBColor| px.chunks(3).any(|p| p == [c.0, c.1, c.2]);
        assert!(has(PALETTE[0]) && has(PALETTE[1]) && has(PALETTE[2]));
        // Text was rendered (anti-aliased grey pixels from the font exist in the title strip).
        let title_strip = &px[..(w * 40 * 3) as usize];
        assert!(title_strip.chunks(3).any(|p| p[0] < 128 && p[0] == p[1]));
    }

    #[test]
    fn empty_and_flat_inputs() {
        assert!(matches!(
            render_png(&Figure {
                title: String::new(),
                panels: vec![],
                columns: 1,
                panel_size: (10, 10)
            }),
            Err(PlotError::Empty)
        ));
        let flat = Panel {
            series: vec![Series::line("c", 0, vec![(1.0, 2.0)])],
            ..Panel::default()
        };
        let r = axes::ranges(&flat).unwrap();
        assert!(r.0 .0 < 1.0 && r.0 .1 > 1.0 && r.1 .0 < 2.0 && r.1 .1 > 2.0);
        assert!(axes::ranges(&Panel::default()).is_none());
        assert_eq!(
            segments(&[(1.0, 1.0), (2.0, f64::NAN), (3.0, 3.0), (4.0, 4.0)]),
            vec![vec![(1.0, 1.0)], vec![(3.0, 3.0), (4.0, 4.0)]]
        );
    }
}
