//! Server-side charts: a time series drawn as inline SVG, so the dashboard
//! needs no JavaScript to show its history. Pure string building.

use std::fmt::Write;

/// One line on a chart: (Unix seconds, value) points, oldest first.
pub struct Series<'a> {
    pub label: &'a str,
    /// CSS class of the line (colour lives in the stylesheet).
    pub class: &'a str,
    pub points: &'a [(u64, f64)],
}

const PAD_LEFT: f64 = 44.0;
const PAD_RIGHT: f64 = 8.0;
const PAD_TOP: f64 = 8.0;
const PAD_BOTTOM: f64 = 20.0;
/// A gap longer than this between two points breaks the line.
const GAP_SECS: u64 = 150;

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A "nice" axis maximum ≥ `v`: 1, 2 or 5 × 10^n.
pub fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

fn fmt_value(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn hour_label(t: u64) -> String {
    let h = (t / 3600) % 24;
    let m = (t / 60) % 60;
    format!("{h:02}:{m:02}")
}

/// Draw `series` over the window [from, to] (Unix seconds) as an SVG string.
pub fn line_chart(title: &str, from: u64, to: u64, series: &[Series<'_>], width: u32, height: u32) -> String {
    let (w, h) = (f64::from(width), f64::from(height));
    let span = to.saturating_sub(from).max(1) as f64;
    let max = nice_max(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let x = |t: u64| PAD_LEFT + (t.saturating_sub(from) as f64 / span).min(1.0) * (w - PAD_LEFT - PAD_RIGHT);
    let y = |v: f64| PAD_TOP + (1.0 - (v / max).clamp(0.0, 1.0)) * (h - PAD_TOP - PAD_BOTTOM);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{t}"><title>{t}</title>"#,
        t = escape(title)
    );
    for i in 0..=2 {
        let v = max * f64::from(i) / 2.0;
        let yy = y(v);
        let _ = write!(
            svg,
            r#"<line class="grid" x1="{PAD_LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            w - PAD_RIGHT,
            PAD_LEFT - 4.0,
            yy + 4.0,
            fmt_value(v)
        );
    }
    for i in 0..=4u64 {
        let t = from + (to.saturating_sub(from)) * i / 4;
        let anchor = match i {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            svg,
            r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="{anchor}">{} UTC</text>"#,
            x(t),
            h - 4.0,
            hour_label(t)
        );
    }
    for s in series {
        let mut path = String::new();
        let mut prev: Option<u64> = None;
        for &(t, v) in s.points.iter().filter(|p| p.0 >= from && p.0 <= to) {
            let cmd = if prev.is_none_or(|p| t.saturating_sub(p) > GAP_SECS) {
                'M'
            } else {
                'L'
            };
            let _ = write!(path, "{cmd}{:.1},{:.1} ", x(t), y(v));
            prev = Some(t);
        }
        let _ = write!(
            svg,
            r#"<path class="line {}" d="{}"><title>{}</title></path>"#,
            escape(s.class),
            path.trim_end(),
            escape(s.label)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(0.7), 1.0);
        assert_eq!(nice_max(3.0), 5.0);
        assert_eq!(nice_max(51.0), 100.0);
        assert_eq!(nice_max(120.0), 200.0);
        assert_eq!(nice_max(f64::NAN), 1.0);
    }

    #[test]
    fn draws_lines_with_gaps_and_escapes_text() {
        let pts = [(0u64, 0.0), (60, 10.0), (120, 5.0), (600, 10.0), (660, 0.0)];
        let svg = line_chart(
            "Polls <per> minute",
            0,
            660,
            &[Series {
                label: "a&b",
                class: "polls",
                points: &pts,
            }],
            600,
            120,
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("Polls &lt;per&gt; minute"));
        assert!(svg.contains("a&amp;b"));
        // two segments: the 480 s gap breaks the line
        let d = svg.split("d=\"").nth(1).and_then(|s| s.split('"').next()).unwrap_or("");
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(d.matches('L').count(), 3, "{d}");
        // the maximum is drawn at the top padding, zero at the bottom
        assert!(d.contains(",8.0"), "{d}");
        assert!(d.contains(",100.0"), "{d}");
        assert!(svg.contains(">10<"), "axis label for the max");
    }

    #[test]
    fn points_outside_the_window_are_ignored() {
        let pts = [(10u64, 1.0), (5000, 1.0)];
        let svg = line_chart(
            "t",
            100,
            200,
            &[Series {
                label: "x",
                class: "x",
                points: &pts,
            }],
            100,
            50,
        );
        assert!(svg.contains(r#"d="""#), "{svg}");
    }
}
