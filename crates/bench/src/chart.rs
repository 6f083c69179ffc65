//! Small SVG charts for the benchmarks' `--plot`: grouped bars (a figure per category, one bar
//! per series, an optional target mark per category) and lines against a logarithmic x axis.
//! Hand-written SVG, as the other plots here: no rendering library for a few rectangles.

use std::fmt::Write;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 110.0;
const Y_TICKS: usize = 5;
const COLOURS: [&str; 4] = ["#2166ac", "#b2182b", "#1b7837", "#762a83"];
const TARGET_COLOUR: &str = "#555555";

/// One named series: a value per category (bars) or (x, y) points (lines).
pub struct Series<T> {
    pub name: String,
    pub values: Vec<T>,
}

fn header(out: &mut String, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#, WIDTH / 2.0, escape(title));
}

/// A y axis from 0 to a round ceiling over `highest`, with its grid and label; the mapping from
/// a value to its y coordinate.
fn y_axis(out: &mut String, y_label: &str, highest: f64) -> impl Fn(f64) -> f64 {
    let ceiling = crate::many_collections::plot::nice_ceiling(highest.max(1e-9));
    let plot_height = HEIGHT - TOP - BOTTOM;
    for tick in 0..=Y_TICKS {
        let value = ceiling * tick as f64 / Y_TICKS as f64;
        let y = TOP + plot_height - value / ceiling * plot_height;
        let _ = writeln!(out, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e0e0e0"/>"##, WIDTH - RIGHT);
        let _ = writeln!(out, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, crate::compact_number(value));
    }
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + plot_height / 2.0,
        TOP + plot_height / 2.0,
        escape(y_label)
    );
    move |value: f64| TOP + plot_height - value.max(0.0) / ceiling * plot_height
}

fn legend(out: &mut String, names: impl Iterator<Item = String>, with_target: bool) {
    let mut x = LEFT;
    let y = HEIGHT - 14.0;
    for (index, name) in names.enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let _ = writeln!(out, r#"<rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="{colour}"/><text x="{:.1}" y="{y:.1}">{}</text>"#, y - 9.0, x + 18.0, escape(&name));
        x += 30.0 + 7.0 * name.len() as f64;
    }
    if with_target {
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{TARGET_COLOUR}" stroke-width="2" stroke-dasharray="4 3"/><text x="{:.1}" y="{y:.1}">target</text>"#,
            y - 4.0,
            x + 18.0,
            y - 4.0,
            x + 22.0
        );
    }
}

/// Grouped bars: for each category, one bar per series (a missing value draws none), and the
/// category's target as a dashed mark when it has one.
pub fn bars(title: &str, y_label: &str, categories: &[String], series: &[Series<Option<f64>>], targets: &[Option<f64>]) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let highest = series.iter().flat_map(|series| series.values.iter().flatten()).chain(targets.iter().flatten()).fold(0.0_f64, |high, value| high.max(*value));
    let y_of = y_axis(&mut out, y_label, highest);
    let group_width = (WIDTH - LEFT - RIGHT) / categories.len().max(1) as f64;
    let bar_width = group_width * 0.7 / series.len().max(1) as f64;
    for (position, category) in categories.iter().enumerate() {
        let group_left = LEFT + group_width * position as f64 + group_width * 0.15;
        for (index, one) in series.iter().enumerate() {
            let Some(Some(value)) = one.values.get(position) else { continue };
            let (x, y) = (group_left + bar_width * index as f64, y_of(*value));
            let colour = COLOURS[index % COLOURS.len()];
            let _ = writeln!(out, r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{}: {value:.3}</title></rect>"#, bar_width * 0.92, y_of(0.0) - y, escape(&one.name));
        }
        if let Some(Some(target)) = targets.get(position) {
            let y = y_of(*target);
            let _ = writeln!(
                out,
                r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{TARGET_COLOUR}" stroke-width="2" stroke-dasharray="4 3"/>"#,
                group_left - 4.0,
                group_left + group_width * 0.7 + 4.0
            );
        }
        let label_x = LEFT + group_width * (position as f64 + 0.5);
        let label_y = HEIGHT - BOTTOM + 16.0;
        let _ = writeln!(out, r#"<text x="{label_x:.1}" y="{label_y:.1}" text-anchor="end" transform="rotate(-25 {label_x:.1} {label_y:.1})">{}</text>"#, escape(category));
    }
    legend(&mut out, series.iter().map(|one| one.name.clone()), targets.iter().any(Option::is_some));
    out.push_str("</svg>\n");
    out
}

/// Lines of (x, y) points against a logarithmic x axis (x > 0), y from 0; a dashed horizontal
/// target when given.
pub fn lines(title: &str, x_label: &str, y_label: &str, series: &[Series<(f64, f64)>], target: Option<f64>) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let highest = series.iter().flat_map(|one| one.values.iter().map(|(_, y)| *y)).chain(target).fold(0.0_f64, f64::max);
    let y_of = y_axis(&mut out, y_label, highest);
    let xs = series.iter().flat_map(|one| one.values.iter().map(|(x, _)| x.max(1.0).log10()));
    let (low, high) = xs.fold((f64::MAX, f64::MIN), |(low, high), x| (low.min(x), high.max(x)));
    let (low, high) = if low > high { (0.0, 1.0) } else { (low.floor(), high.ceil().max(low.floor() + 1.0)) };
    let plot_width = WIDTH - LEFT - RIGHT;
    let x_of = |x: f64| LEFT + (x.max(1.0).log10() - low) / (high - low) * plot_width;
    let mut decade = low;
    while decade <= high {
        let x = LEFT + (decade - low) / (high - low) * plot_width;
        let _ = writeln!(out, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, HEIGHT - BOTTOM + 16.0, crate::compact_number(10f64.powf(decade)));
        decade += 1.0;
    }
    let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, LEFT + plot_width / 2.0, HEIGHT - BOTTOM + 36.0, escape(x_label));
    for (index, one) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<String> = one.values.iter().map(|(x, y)| format!("{:.1},{:.1}", x_of(*x), y_of(*y))).collect();
        let _ = writeln!(out, r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#, points.join(" "));
        for (x, y) in &one.values {
            let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{}: {y:.1}</title></circle>"#, x_of(*x), y_of(*y), escape(&one.name));
        }
    }
    if let Some(target) = target {
        let y = y_of(target);
        let _ = writeln!(out, r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{TARGET_COLOUR}" stroke-width="2" stroke-dasharray="4 3"/>"#, WIDTH - RIGHT);
    }
    legend(&mut out, series.iter().map(|one| one.name.clone()), target.is_some());
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Writes `svg` to `path`.
pub fn write(path: &std::path::Path, svg: &str) -> crate::error::BenchResult<()> {
    std::fs::write(path, svg).map_err(|error| crate::error::BenchError::InvalidArgument(format!("cannot write {}: {error}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_hold_every_bar_and_point_and_escape_their_text() {
        let categories = vec!["find <id>".to_string(), "insert".to_string()];
        let series = vec![Series { name: "1 connection".into(), values: vec![Some(0.8), None] }, Series { name: "16".into(), values: vec![Some(0.5), Some(0.6)] }];
        let svg = bars("Ratio & more", "ratio", &categories, &series, &[Some(0.6), None]);
        assert_eq!(svg.matches("<rect x=").count(), 3 + 2, "three bars and two legend swatches");
        assert!(svg.contains("find &lt;id&gt;") && svg.contains("Ratio &amp; more") && svg.contains("stroke-dasharray"));
        assert!(svg.ends_with("</svg>\n"));
        let line = vec![Series { name: "p50".into(), values: vec![(2_000.0, 300.0), (4_000_000.0, 900.0)] }];
        let svg = lines("Refresh", "chunks", "µs", &line, Some(1_000.0));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("1k") || svg.contains("1,000") || svg.contains("1000"), "{svg}");
    }
}
