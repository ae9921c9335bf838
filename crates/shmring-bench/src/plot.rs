//! `--plot FILE.svg`: CPU per GiB and latency per transport, and CPU/RSS over time
//! of the shmring run (sampled every 100 ms from /proc), as a hand-built SVG.

use std::fmt::Write;

use crate::orchestrate::Timeline;
use crate::report::Row;

const COLORS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Panel {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Panel {
    /// The panel's border.
    fn frame(&self, out: &mut String) {
        let _ = writeln!(
            out,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>"##,
            self.x, self.y, self.w, self.h
        );
    }

    /// The panel's title, above it.
    fn title(&self, out: &mut String, title: &str) {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
            self.x,
            self.y - 8.0,
            esc(title)
        );
    }

    /// A note inside the panel (instead of a chart).
    fn note(&self, out: &mut String, note: &str) {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-size="12">{note}</text>"#,
            self.x + 10.0,
            self.y + 20.0
        );
    }

    /// The vertical axis's label, `unit`, written upwards on the left.
    fn axis_label(&self, out: &mut String, unit: &str) {
        let (x, y) = (self.x - 42.0, self.y + self.h / 2.0);
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{y}" font-size="11" transform="rotate(-90 {x} {y})" text-anchor="middle">{}</text>"#,
            esc(unit)
        );
    }

    /// A horizontal grid line at `y`, labelled `v` on the left.
    fn grid_line(&self, out: &mut String, y: f64, v: f64, colour: &str) {
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}"/><text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>"##,
            self.x,
            self.x + self.w,
            self.x - 4.0,
            y + 3.0,
            fmt_num(v)
        );
    }
}

/// Bars per category, one bar per series, on a log10 axis.
fn bars(
    out: &mut String,
    p: &Panel,
    title: &str,
    unit: &str,
    cats: &[String],
    series: &[(String, Vec<Option<f64>>)],
) {
    let vals: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().flatten().copied())
        .filter(|v| *v > 0.0)
        .collect();
    p.title(out, title);
    if vals.is_empty() || cats.is_empty() {
        p.note(out, "no data");
        return;
    }
    let lo = vals
        .iter()
        .cloned()
        .fold(f64::MAX, f64::min)
        .log10()
        .floor();
    let hi = vals
        .iter()
        .cloned()
        .fold(0.0, f64::max)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let ypos = |v: f64| p.y + p.h - (v.log10() - lo) / (hi - lo) * p.h;
    p.frame(out);
    let mut d = lo;
    while d <= hi {
        let v = 10f64.powf(d);
        let yy = ypos(v);
        p.grid_line(out, yy, v, "#ddd");
        d += 1.0;
    }
    p.axis_label(out, unit);
    let slot = p.w / cats.len() as f64;
    let bw = slot * 0.8 / series.len() as f64;
    for (ci, c) in cats.iter().enumerate() {
        let x0 = p.x + ci as f64 * slot + slot * 0.1;
        for (si, (_, vs)) in series.iter().enumerate() {
            if let Some(v) = vs.get(ci).copied().flatten().filter(|v| *v > 0.0) {
                let yy = ypos(v);
                let _ = writeln!(
                    out,
                    r#"<rect x="{:.1}" y="{yy:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {}</title></rect>"#,
                    x0 + si as f64 * bw,
                    bw * 0.95,
                    p.y + p.h - yy,
                    COLORS[si % COLORS.len()],
                    esc(c),
                    esc(&series[si].0),
                    fmt_num(v)
                );
            }
        }
        // Slanted, so long transport names do not run into each other.
        let (lx, ly) = (x0 + slot * 0.45, p.y + p.h + 10.0);
        let _ = writeln!(
            out,
            r#"<text x="{lx:.1}" y="{ly}" font-size="10" text-anchor="end" transform="rotate(-35 {lx:.1} {ly})">{}</text>"#,
            esc(c)
        );
    }
    legend(out, p, series.iter().map(|s| s.0.as_str()));
}

fn legend<'a>(out: &mut String, p: &Panel, names: impl Iterator<Item = &'a str>) {
    for (i, n) in names.enumerate() {
        let lx = p.x + p.w - 150.0;
        let ly = p.y + 12.0 + i as f64 * 14.0;
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>"#,
            ly - 9.0,
            COLORS[i % COLORS.len()],
            lx + 14.0,
            ly,
            esc(n)
        );
    }
}

/// A named series of points (x, y).
type Points = (String, Vec<(f64, f64)>);

/// Lines over time on a linear axis.
fn lines(out: &mut String, p: &Panel, title: &str, unit: &str, series: &[Points]) {
    p.title(out, title);
    let pts: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    if pts.is_empty() {
        p.note(out, "no samples");
        return;
    }
    let (tticks, tdec) = ticks(pts.iter().map(|q| q.0).fold(0.0, f64::max).max(0.1), 4);
    let (yticks, _) = ticks(pts.iter().map(|q| q.1).fold(0.0, f64::max).max(1.0), 4);
    let tmax = *tticks.last().expect("at least two ticks");
    let ymax = *yticks.last().expect("at least two ticks");
    p.frame(out);
    for &v in &yticks {
        let yy = p.y + p.h - v / ymax * p.h;
        p.grid_line(out, yy, v, "#eee");
    }
    for &t in &tticks {
        let xx = p.x + t / tmax * p.w;
        let _ = writeln!(
            out,
            r#"<text x="{xx}" y="{}" font-size="10" text-anchor="middle">{t:.tdec$} s</text>"#,
            p.y + p.h + 14.0
        );
    }
    p.axis_label(out, unit);
    for (i, (_, s)) in series.iter().enumerate() {
        let path: Vec<String> = s
            .iter()
            .map(|(t, v)| {
                format!(
                    "{:.1},{:.1}",
                    p.x + t / tmax * p.w,
                    p.y + p.h - v / ymax * p.h
                )
            })
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            COLORS[i % COLORS.len()],
            path.join(" ")
        );
    }
    legend(out, p, series.iter().map(|s| s.0.as_str()));
}

/// Round ticks from 0 to at least `max` (about `n` steps of 1, 2, 2.5 or 5 times a
/// power of ten), and the decimals that show each exactly.
fn ticks(max: f64, n: u32) -> (Vec<f64>, usize) {
    let raw = max / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag);
    let decimals = (0..9)
        .find(|&d| {
            let x = step * 10f64.powi(d as i32);
            (x - x.round()).abs() < 1e-6 * x.max(1.0)
        })
        .unwrap_or(9);
    let count = (max / step - 1e-9).ceil().max(1.0) as u32;
    ((0..=count).map(|k| k as f64 * step).collect(), decimals)
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// An SVG of `w` x `h` on white, open for its panels.
fn start(w: f64, h: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    out
}

/// The whole figure.
pub fn svg(rows: &[Row], timelines: &[Timeline]) -> String {
    let (w, h) = (1100.0, 860.0);
    let mut out = start(w, h);
    // Workload shown in the bar charts: video if present, else the first one run.
    let wl = if rows.iter().any(|r| r.workload == "video") {
        "video"
    } else {
        rows.first().map_or("audio", |r| r.workload.as_str())
    };
    let mut cats: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.workload == wl) {
        if !cats.contains(&r.transport) {
            cats.push(r.transport.clone());
        }
    }
    let mut modes: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.workload == wl) {
        if !modes.contains(&r.mode) {
            modes.push(r.mode.clone());
        }
    }
    let find = |t: &str, m: &str| {
        rows.iter()
            .find(|r| r.workload == wl && r.transport == t && r.mode == m)
    };
    let cpu: Vec<(String, Vec<Option<f64>>)> = modes
        .iter()
        .map(|m| {
            (
                m.clone(),
                cats.iter()
                    .map(|t| find(t, m).map(|r| r.cpu_s_per_gib))
                    .collect(),
            )
        })
        .collect();
    bars(
        &mut out,
        &Panel {
            x: 70.0,
            y: 40.0,
            w: 460.0,
            h: 300.0,
        },
        &format!("CPU seconds per GiB, {wl} (log)"),
        "CPU s / GiB",
        &cats,
        &cpu,
    );
    let lm = if modes.iter().any(|m| m == "rated") {
        "rated"
    } else {
        modes.first().map_or("rated", |m| m.as_str())
    };
    let lat: Vec<(String, Vec<Option<f64>>)> = [("p50", 0), ("p99", 1), ("p99.9", 2)]
        .iter()
        .map(|(n, k)| {
            let v = cats
                .iter()
                .map(|t| {
                    find(t, lm).and_then(|r| match k {
                        0 => r.lat_p50_us,
                        1 => r.lat_p99_us,
                        _ => r.lat_p999_us,
                    })
                })
                .collect();
            (n.to_string(), v)
        })
        .collect();
    bars(
        &mut out,
        &Panel {
            x: 620.0,
            y: 40.0,
            w: 460.0,
            h: 300.0,
        },
        &format!("Latency commit/send to consumer, {wl} {lm} (log)"),
        "microseconds",
        &cats,
        &lat,
    );
    let tl = timelines
        .iter()
        .find(|t| t.label.contains(wl))
        .or(timelines.first());
    let label = tl.map_or("shmring (not run)".to_string(), |t| t.label.clone());
    let get = |f: &dyn Fn(&crate::orchestrate::Sample) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        match tl {
            Some(t) => vec![
                (
                    "producer".into(),
                    t.producer.iter().map(|s| (s.t_s, f(s))).collect(),
                ),
                (
                    "consumer".into(),
                    t.consumer.iter().map(|s| (s.t_s, f(s))).collect(),
                ),
            ],
            None => vec![],
        }
    };
    lines(
        &mut out,
        &Panel {
            x: 70.0,
            y: 420.0,
            w: 460.0,
            h: 380.0,
        },
        &format!("CPU over time: {label}"),
        "% of one core",
        &get(&|s| s.cpu_pct),
    );
    lines(
        &mut out,
        &Panel {
            x: 620.0,
            y: 420.0,
            w: 460.0,
            h: 380.0,
        },
        &format!("RSS over time: {label}"),
        "MiB",
        &get(&|s| s.rss_kib as f64 / 1024.0),
    );
    out.push_str("</svg>\n");
    out
}

/// Lines through points (x, y) on log axes: x in powers of two (the counts), y in
/// powers of ten; a series per name.
fn log_lines(out: &mut String, p: &Panel, title: &str, unit: &str, series: &[Points]) {
    p.title(out, title);
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|q| q.0 > 0.0 && q.1 > 0.0)
        .collect();
    if pts.is_empty() {
        p.note(out, "no data");
        return;
    }
    let xhi = pts
        .iter()
        .map(|q| q.0)
        .fold(1.0, f64::max)
        .log2()
        .ceil()
        .max(1.0);
    let ylo = pts
        .iter()
        .map(|q| q.1)
        .fold(f64::MAX, f64::min)
        .log10()
        .floor();
    let yhi = pts
        .iter()
        .map(|q| q.1)
        .fold(0.0, f64::max)
        .log10()
        .ceil()
        .max(ylo + 1.0);
    // A margin at either end, so the first and last points clear the border.
    let xpos = |x: f64| p.x + (x.log2() + 0.3) / (xhi + 0.6) * p.w;
    let ypos = |y: f64| p.y + p.h - (y.log10() - ylo) / (yhi - ylo) * p.h;
    p.frame(out);
    let mut d = ylo;
    while d <= yhi {
        let v = 10f64.powf(d);
        p.grid_line(out, ypos(v), v, "#ddd");
        d += 1.0;
    }
    for k in 0..=xhi as u32 {
        let xx = xpos(f64::from(1u32 << k));
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{}" x2="{xx:.1}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" font-size="10" text-anchor="middle">{}</text>"##,
            p.y,
            p.y + p.h,
            p.y + p.h + 14.0,
            1u32 << k
        );
    }
    p.axis_label(out, unit);
    for (i, (name, s)) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .iter()
            .copied()
            .filter(|q| q.0 > 0.0 && q.1 > 0.0)
            .collect();
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", xpos(x), ypos(y)))
            .collect();
        let colour = COLORS[i % COLORS.len()];
        // Past the colours, the same ones dashed.
        let dash = if i >= COLORS.len() {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in &pts {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{} at {x}: {}</title></circle>"#,
                xpos(x),
                ypos(y),
                esc(name),
                fmt_num(y)
            );
        }
    }
    legend(out, p, series.iter().map(|s| s.0.as_str()));
}

/// The figure of `--scale`: CPU per GiB and p99 latency against the count (producer
/// threads on one ring, or rings side by side), a line per transport, record size
/// and mode.
pub fn scale_svg(rows: &[Row]) -> String {
    let (w, h) = (1100.0, 440.0);
    let mut out = start(w, h);
    let rings = rows.iter().any(|r| r.workload == "rings");
    let mut names: Vec<(String, u64, String)> = Vec::new();
    for r in rows {
        let k = (r.transport.clone(), r.frame_bytes, r.mode.clone());
        if !names.contains(&k) {
            names.push(k);
        }
    }
    let series = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        names
            .iter()
            .map(|(t, size, m)| {
                let label = if rings {
                    t.clone()
                } else {
                    format!("{t} {size} B {m}")
                };
                let pts = rows
                    .iter()
                    .filter(|r| &r.transport == t && r.frame_bytes == *size && &r.mode == m)
                    .filter_map(|r| Some((f64::from(r.count?), f(r)?)))
                    .collect();
                (label, pts)
            })
            .collect()
    };
    let what = if rings {
        "rings side by side"
    } else {
        "producer threads on one ring"
    };
    log_lines(
        &mut out,
        &Panel {
            x: 70.0,
            y: 40.0,
            w: 460.0,
            h: 340.0,
        },
        &format!("CPU seconds per GiB against {what} (log)"),
        "CPU s / GiB",
        &series(&|r| (r.cpu_s_per_gib > 0.0).then_some(r.cpu_s_per_gib)),
    );
    log_lines(
        &mut out,
        &Panel {
            x: 620.0,
            y: 40.0,
            w: 460.0,
            h: 340.0,
        },
        &format!("p99 latency against {what} (log)"),
        "microseconds",
        &series(&|r| r.lat_p99_us),
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::ticks;

    #[test]
    fn ticks_are_round_and_shown_exactly() {
        let show = |max: f64| {
            let (t, d) = ticks(max, 4);
            t.iter().map(|v| format!("{v:.d$}")).collect::<Vec<_>>()
        };
        assert_eq!(show(1.0), ["0.00", "0.25", "0.50", "0.75", "1.00"]);
        assert_eq!(show(0.93), ["0.00", "0.25", "0.50", "0.75", "1.00"]);
        assert_eq!(show(8.0), ["0", "2", "4", "6", "8"]);
        assert_eq!(show(7.3), ["0", "2", "4", "6", "8"]);
        assert_eq!(show(30.0), ["0", "10", "20", "30"]);
        assert_eq!(show(0.1), ["0.000", "0.025", "0.050", "0.075", "0.100"]);
    }
}
