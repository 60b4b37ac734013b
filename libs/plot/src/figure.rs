//! What a figure shows: a grid of panels, each a chart of named series.

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// A line through the points; the band, if any, is shaded around it.
    Line,
    /// A dashed line; for a second quantity of the same run (e.g. "after").
    Dashed,
    /// Dots; the band, if any, is drawn as vertical error bars.
    Points,
}

/// One named sequence of points. Non-finite values are gaps.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// `(x, low, high)`: a confidence band (lines) or error bars (points).
    pub band: Vec<(f64, f64, f64)>,
    pub mark: Mark,
    /// Index into the palette, so one run keeps its colour across panels.
    pub color: usize,
}

impl Series {
    pub fn line(label: impl Into<String>, color: usize, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points,
            band: Vec::new(),
            mark: Mark::Line,
            color,
        }
    }
}

/// One chart of the grid.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub series: Vec<Series>,
    /// Names for the integer x positions 0, 1, ... (a categorical axis), if any.
    pub categories: Vec<String>,
    /// Whether this panel draws the legend (a grid usually needs only one).
    pub legend: bool,
    /// The values the quantity can take (e.g. 0 to 1 for an accuracy): the y axis never
    /// pads past them.
    pub y_bounds: Option<(f64, f64)>,
}

/// A grid of panels with a title.
#[derive(Clone, Debug)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<Panel>,
    pub columns: usize,
    /// Size of one panel in pixels.
    pub panel_size: (u32, u32),
}
