//! The throughput chart, drawn on the server as SVG from the run's own
//! progress: records answered per second over the run, with the
//! feasibility projection's 95 % band behind it. No script, no fetch: the
//! figure is in the page.
//!
//! Colours are from the Okabe–Ito palette (blue line, orange band), told
//! apart by more than hue: the band is a filled area with a dashed centre
//! line, the measured rate a solid line, and the legend says which is which.
use maud::{html, Markup};
use todod_proto::readable::duration;

use super::series::bucketed_rates;
use todod_store::ProgressPoint;

/// The projection a run is held to, in records per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 28.0;
/// Spans the run is cut into: enough to see a change, few enough to be
/// smooth with once-a-second progress.
const BUCKETS: usize = 48;

const BLUE: &str = "#0072B2";
const ORANGE: &str = "#E69F00";

/// A figure of records per second, short.
fn rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The chart, or a line saying why there is none yet.
pub fn throughput(points: &[ProgressPoint], band: Option<Band>) -> Markup {
    let rates = bucketed_rates(points, BUCKETS);
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return html! { p class="chart-empty" { "The chart starts with the run's first progress reports." } };
    };
    // A line needs two spans.
    if rates.len() < 2 {
        return html! { p class="chart-empty" { "The chart starts with the run's first progress reports." } };
    }
    let top_rate = rates.iter().map(|r| r.1).fold(0.0, f64::max);
    let y_max = (top_rate.max(band.map_or(0.0, |b| b.high)) * 1.15).max(1e-6);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let t0 = first.at_ms;
    let span_ms = (last.at_ms - t0).max(1) as f64;
    let x = |t: i64| LEFT + (t - t0) as f64 / span_ms * plot_w;
    let y = |v: f64| TOP + plot_h * (1.0 - (v / y_max).clamp(0.0, 1.0));
    // Each span's rate drawn at its middle.
    let width_ms = span_ms / rates.len() as f64;
    let line: Vec<String> = rates
        .iter()
        .map(|(end, v)| format!("{:.1},{:.1}", x(*end - (width_ms / 2.0) as i64), y(*v)))
        .collect();
    let label = match band {
        Some(b) => format!(
            "Throughput over the run: {} records/s now against {} projected ({} to {})",
            rate(rates.last().map_or(0.0, |r| r.1)),
            rate(b.value),
            rate(b.low),
            rate(b.high)
        ),
        None => format!(
            "Throughput over the run: {} records/s now; no projection to hold it to",
            rate(rates.last().map_or(0.0, |r| r.1))
        ),
    };
    let ticks = [0.0, y_max / 2.0, y_max / 1.15];
    html! {
        figure class="chart" {
            svg class="throughput" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img"
                aria-label=(label) preserveAspectRatio="xMidYMid meet" {
                title { (label) }
                @if let Some(b) = band {
                    rect class="band" x=(LEFT) y=(format!("{:.1}", y(b.high))) width=(plot_w)
                        height=(format!("{:.1}", (y(b.low) - y(b.high)).max(1.0)))
                        fill=(ORANGE) fill-opacity="0.3" {}
                    line class="band-value" x1=(LEFT) x2=(LEFT + plot_w)
                        y1=(format!("{:.1}", y(b.value))) y2=(format!("{:.1}", y(b.value)))
                        stroke=(ORANGE) stroke-width="2" stroke-dasharray="6 4" {}
                }
                line x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(TOP + plot_h) stroke="#555" {}
                line x1=(LEFT) x2=(LEFT + plot_w) y1=(TOP + plot_h) y2=(TOP + plot_h) stroke="#555" {}
                @for tick in ticks {
                    text x=(LEFT - 6.0) y=(format!("{:.1}", y(tick) + 4.0)) text-anchor="end"
                        font-size="11" fill="#333" { (rate(tick)) }
                }
                text x=(LEFT) y=(HEIGHT - 8.0) font-size="11" fill="#333" { "start" }
                text x=(LEFT + plot_w) y=(HEIGHT - 8.0) text-anchor="end" font-size="11" fill="#333" {
                    "+" (duration((span_ms / 1000.0) as i64))
                }
                polyline class="rate" points=(line.join(" ")) fill="none" stroke=(BLUE)
                    stroke-width="2.5" stroke-linejoin="round" {}
                // The legend: a solid line, and a filled band with a dashed line.
                line x1=(LEFT + 4.0) x2=(LEFT + 28.0) y1="12" y2="12" stroke=(BLUE) stroke-width="2.5" {}
                text x=(LEFT + 32.0) y="16" font-size="12" fill="#222" { "records/s, measured" }
                @if band.is_some() {
                    rect x=(LEFT + 200.0) y="6" width="24" height="12" fill=(ORANGE) fill-opacity="0.3" {}
                    line x1=(LEFT + 200.0) x2=(LEFT + 224.0) y1="12" y2="12" stroke=(ORANGE)
                        stroke-width="2" stroke-dasharray="6 4" {}
                    text x=(LEFT + 228.0) y="16" font-size="12" fill="#222" { "projected, 95% band" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points() -> Vec<ProgressPoint> {
        (0..=120)
            .map(|s| ProgressPoint {
                seq: s + 1,
                at_ms: s * 1000,
                answered: (s * 3) as u64,
                tokens: 0,
            })
            .collect()
    }

    #[test]
    fn the_band_is_drawn_behind_the_measured_rate() {
        let band = Band {
            value: 3.0,
            low: 2.5,
            high: 3.5,
        };
        let svg = throughput(&points(), Some(band)).into_string();
        assert!(svg.contains("class=\"band\""), "{svg}");
        assert!(svg.contains("class=\"rate\""), "{svg}");
        assert!(svg.find("class=\"band\"") < svg.find("class=\"rate\""));
        assert!(svg.contains("3.00 records/s now against 3.00 projected (2.50 to 3.50)"));
        // Every point of the line is inside the plot.
        let line = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        for xy in line.split(' ') {
            let (x, y) = xy.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!((LEFT..=WIDTH - RIGHT).contains(&x) && (TOP..=HEIGHT - BOTTOM).contains(&y));
        }
    }

    #[test]
    fn without_a_projection_or_points_it_says_so() {
        let svg = throughput(&points(), None).into_string();
        assert!(!svg.contains("class=\"band\""));
        assert!(svg.contains("no projection"));
        let empty = throughput(&points()[..1], None).into_string();
        assert!(empty.contains("chart-empty"));
    }
}
