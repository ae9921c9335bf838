//! `shmring top`: every ring this user can see (named rings, and with `--sockets
//! DIR` the rings served on the sockets there), one row each, refreshed in place
//! (ratatui); `--once` prints one plain table, `--json` one JSON array.
//!
//! Rates are differences between two scans. A ring that cannot be read (not a ring,
//! removed mid-read, truncated) shows its error on its own row; the others go on.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row as TRow, Table, Wrap};
use serde_json::{json, Value};
use shmring::Stats;

use crate::cli::{SortKey, TopArgs};
use crate::rings::{rates, NamedRings, Reading, RingSource, SocketRings};
use crate::stat::{stats_json, tether_words, tethers_json};
use crate::{fail, stop_flag, CmdError};

/// One ring in one refresh: what was read, and rates since the previous refresh.
#[derive(Debug, Clone)]
pub struct TopRow {
    /// The ring and its counters (or error).
    pub reading: Reading,
    /// Records committed per second since the previous scan.
    pub records_per_s: f64,
    /// MB (10^6 bytes) committed per second since the previous scan.
    pub mb_per_s: f64,
}

/// Scans every source and keeps the previous snapshot of each ring for rates.
pub struct Sampler {
    sources: Vec<Box<dyn RingSource>>,
    prev: HashMap<(&'static str, String), (Stats, Instant)>,
}

impl Sampler {
    /// A sampler over `sources`.
    pub fn new(sources: Vec<Box<dyn RingSource>>) -> Sampler {
        Sampler {
            sources,
            prev: HashMap::new(),
        }
    }

    /// One scan of every source.
    pub fn sample(&mut self) -> Vec<TopRow> {
        let now = Instant::now();
        let mut rows = Vec::new();
        let mut seen = HashMap::new();
        for src in &mut self.sources {
            for reading in src.scan() {
                let key = (reading.source, reading.ring.clone());
                let (mut rps, mut mbps) = (0.0, 0.0);
                if let Ok(info) = &reading.result {
                    if let Some((p, t)) = self.prev.get(&key) {
                        (rps, mbps) = rates(p, &info.stats, (now - *t).as_secs_f64());
                    }
                    seen.insert(key, (info.stats, now));
                }
                rows.push(TopRow {
                    reading,
                    records_per_s: rps,
                    mb_per_s: mbps,
                });
            }
        }
        self.prev = seen;
        rows
    }

    /// Waits until every source has reached (or failed to reach) each of its rings.
    pub fn settle(&mut self) {
        for src in &mut self.sources {
            src.settle();
        }
    }
}

fn sort_rows(rows: &mut [TopRow], key: SortKey, reverse: bool) {
    let stat =
        |r: &TopRow, f: fn(&Stats) -> u64| r.reading.result.as_ref().map_or(0, |i| f(&i.stats));
    rows.sort_by(|a, b| {
        let o = match key {
            SortKey::Name => a.reading.ring.cmp(&b.reading.ring),
            SortKey::Rate => b.records_per_s.total_cmp(&a.records_per_s),
            SortKey::Mbps => b.mb_per_s.total_cmp(&a.mb_per_s),
            SortKey::Occupancy => stat(b, |s| s.occupancy).cmp(&stat(a, |s| s.occupancy)),
            SortKey::Drops => stat(b, |s| s.drops_full).cmp(&stat(a, |s| s.drops_full)),
            SortKey::Resets => stat(b, |s| s.resets).cmp(&stat(a, |s| s.resets)),
            SortKey::Claim => {
                stat(b, |s| s.oldest_pending_age_ns).cmp(&stat(a, |s| s.oldest_pending_age_ns))
            }
            SortKey::Stalled => stat(b, |s| s.stalled_claims).cmp(&stat(a, |s| s.stalled_claims)),
        };
        o.then_with(|| a.reading.ring.cmp(&b.reading.ring))
    });
    if reverse {
        rows.reverse();
    }
}

/// Column titles of the table.
pub const HEADERS: [&str; NCOLS] = [
    "RING",
    "REC/S",
    "MB/S",
    "OCCUPANCY MiB",
    "PEAK",
    "PRODUCERS",
    "TETHERED",
    "DROPS",
    "ABANDONED",
    "CORRUPT",
    "RESETS",
    "STALLED",
    "OLDEST CLAIM",
    "WAITS P/C",
    "CONSUMER",
];

/// Number of columns.
pub const NCOLS: usize = 15;

/// The oldest claim still pending: its age, slot and pid (`-`: none pending).
pub fn oldest_claim(s: &Stats) -> String {
    if s.oldest_pending_age_ns == 0 {
        return "-".into();
    }
    let age = s.oldest_pending_age_ns as f64 / 1e9;
    let mut out = format!("{age:.1}s slot {}", s.oldest_pending_slot);
    if s.oldest_pending_pid != 0 {
        out += &format!(" pid {}", s.oldest_pending_pid);
    }
    out
}

/// The tethered consumers in a cell: how many, and the largest lag in records.
fn tethered_cell(ts: &[shmring::TetherInfo]) -> String {
    match ts.iter().map(|t| t.lag_records).max() {
        None => "-".into(),
        Some(lag) => format!("{} lag {lag}", ts.len()),
    }
}

/// One line per tethered consumer of each ring, `RING: line 0 pid 12: lag ...`.
fn tether_lines(rows: &[TopRow]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| Some((&r.reading.ring, r.reading.result.as_ref().ok()?)))
        .flat_map(|(ring, i)| {
            i.tethers
                .iter()
                .map(move |t| format!("{ring}: tethered {}", tether_words(t)))
        })
        .collect()
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

/// The cells of one row; a ring that could not be read has its name and its error.
pub fn cells(r: &TopRow) -> Result<[String; NCOLS], (String, String)> {
    let (s, tethers) = match &r.reading.result {
        Ok(i) => (&i.stats, &i.tethers),
        Err(e) => return Err((r.reading.ring.clone(), e.clone())),
    };
    Ok([
        r.reading.ring.clone(),
        format!("{:.0}", r.records_per_s),
        format!("{:.1}", r.mb_per_s),
        format!("{}/{}", mib(s.occupancy), mib(s.capacity)),
        mib(s.peak_occupancy),
        s.producers.to_string(),
        tethered_cell(tethers),
        s.drops_full.to_string(),
        s.abandoned.to_string(),
        s.corruption.to_string(),
        s.resets.to_string(),
        s.stalled_claims.to_string(),
        oldest_claim(s),
        format!("{}/{}", s.producer_waits, s.consumer_waits),
        if s.consumer_attached {
            "alive".into()
        } else {
            "gone".into()
        },
    ])
}

/// The plain table of `--once`.
pub fn plain_table(rows: &[TopRow]) -> String {
    let mut widths = HEADERS.map(str::len);
    let cs: Vec<_> = rows.iter().map(cells).collect();
    for c in cs.iter().flatten() {
        for (w, x) in widths.iter_mut().zip(c) {
            *w = (*w).max(x.len());
        }
    }
    for (name, _) in cs.iter().filter_map(|c| c.as_ref().err()) {
        widths[0] = widths[0].max(name.len());
    }
    let line = |c: &[String]| {
        let mut s = String::new();
        for (i, (x, w)) in c.iter().zip(widths).enumerate() {
            if i == 0 {
                s += &format!("{x:<w$}");
            } else {
                s += &format!("  {x:>w$}");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADERS.map(String::from));
    for c in &cs {
        match c {
            Ok(c) => out += &line(c),
            Err((name, e)) => {
                out += &format!("{name:<w$}  error: {e}\n", w = widths[0]);
            }
        }
    }
    if rows.is_empty() {
        out += "(no rings)\n";
    }
    for l in tether_lines(rows) {
        out += &format!("{l}\n");
    }
    out
}

/// The JSON of `--json`: one object per ring.
pub fn json_rows(rows: &[TopRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| match &r.reading.result {
                Ok(i) => json!({
                    "ring": r.reading.ring, "source": r.reading.source, "error": null,
                    "records_per_s": r.records_per_s, "mb_per_s": r.mb_per_s,
                    "max_record": i.max_record, "max_producers": i.max_producers,
                    "stats": stats_json(&r.reading.ring, &i.stats),
                    "tethers": tethers_json(&i.tethers),
                }),
                Err(e) => json!({
                    "ring": r.reading.ring, "source": r.reading.source, "error": e,
                }),
            })
            .collect(),
    )
}

fn sources(a: &TopArgs) -> Vec<Box<dyn RingSource>> {
    let mut v: Vec<Box<dyn RingSource>> = vec![Box::new(NamedRings::from(&a.rings))];
    if !a.rings.sockets.is_empty() {
        v.push(Box::new(SocketRings::new(a.rings.sockets.clone())));
    }
    v
}

/// `shmring top`.
pub fn run(a: TopArgs) -> Result<(), CmdError> {
    if !(a.interval.is_finite() && (0.05..=3600.0).contains(&a.interval)) {
        return Err(fail(
            2,
            format!("--interval {}: expected 0.05 to 3600 seconds", a.interval),
        ));
    }
    let interval = Duration::from_secs_f64(a.interval);
    let mut sampler = Sampler::new(sources(&a));
    if a.once || a.json {
        // Two scans, `interval` apart, so the rates mean something; every socket
        // answered (or failed) before each.
        sampler.settle();
        sampler.sample();
        std::thread::sleep(interval);
        sampler.settle();
        let mut rows = sampler.sample();
        sort_rows(&mut rows, a.sort, a.reverse);
        let text = if a.json {
            format!("{}\n", json_rows(&rows))
        } else {
            plain_table(&rows)
        };
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
        // The report is whole; the exit status says whether every ring in it
        // could be read.
        let bad = rows.iter().filter(|r| r.reading.result.is_err()).count();
        if bad > 0 {
            return Err(fail(
                1,
                format!(
                    "{bad} of {} rings could not be read (the error is on its row)",
                    rows.len()
                ),
            ));
        }
        return Ok(());
    }
    if !std::io::stdout().is_terminal() {
        return Err(fail(
            2,
            "the live view needs a terminal; use --once (a plain table) or --json",
        ));
    }
    live(&mut sampler, &a, interval)
}

fn live(sampler: &mut Sampler, a: &TopArgs, interval: Duration) -> Result<(), CmdError> {
    let stop = stop_flag()?;
    let mut term =
        ratatui::try_init().map_err(|e| fail(1, format!("cannot set up the terminal: {e}")))?;
    let (mut sort, mut reverse) = (a.sort, a.reverse);
    let mut rows = sampler.sample();
    let mut next = Instant::now() + interval;
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        sort_rows(&mut rows, sort, reverse);
        if let Err(e) = term.draw(|f| draw(f, &rows, sort, reverse, interval)) {
            break Err(fail(1, format!("cannot draw: {e}")));
        }
        let wait = next.saturating_duration_since(Instant::now());
        match event::poll(wait.min(Duration::from_millis(250))) {
            Ok(true) => {
                if let Ok(Event::Key(k)) = event::read() {
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            break Ok(())
                        }
                        KeyCode::Char('s') => sort = sort.next(),
                        KeyCode::Char('r') => reverse = !reverse,
                        _ => {}
                    }
                }
            }
            Ok(false) => {}
            Err(e) => break Err(fail(1, format!("cannot read the terminal: {e}"))),
        }
        if Instant::now() >= next {
            rows = sampler.sample();
            next = Instant::now() + interval;
        }
    };
    ratatui::restore();
    result
}

/// Width of each column of the live view (the ring's own is [`RING_MIN`] or more).
const WIDTHS: [u16; NCOLS] = [0, 8, 8, 14, 6, 9, 10, 7, 9, 7, 6, 7, 22, 12, 8];

/// The narrowest the ring's name is shown: enough for the end of a socket's path.
const RING_MIN: u16 = 24;

/// The columns a narrow terminal keeps, most wanted first (the ring's name is
/// always shown).
const PRIORITY: [usize; NCOLS - 1] = [14, 1, 2, 3, 7, 5, 9, 10, 8, 4, 11, 6, 12, 13];

/// The columns that fit in `width` (in table order) and the width left for the
/// ring's name: whole columns are dropped, least wanted first, rather than every
/// column cut.
fn fit_columns(width: u16) -> (u16, Vec<usize>) {
    let mut used = RING_MIN;
    let mut shown = vec![0];
    for &i in &PRIORITY {
        // One space between columns.
        if used + 1 + WIDTHS[i] <= width {
            used += 1 + WIDTHS[i];
            shown.push(i);
        }
    }
    shown.sort_unstable();
    (RING_MIN + width.saturating_sub(used), shown)
}

/// `name` in `width` characters: a longer one keeps its end (a socket's file
/// name, a ring's distinguishing suffix) after an ellipsis.
fn tail(name: String, width: u16) -> String {
    let n = name.chars().count();
    let width = usize::from(width);
    if n <= width || width == 0 {
        return name;
    }
    let keep: String = name.chars().skip(n - (width - 1)).collect();
    format!("…{keep}")
}

fn draw(
    f: &mut ratatui::Frame<'_>,
    rows: &[TopRow],
    sort: SortKey,
    reverse: bool,
    interval: Duration,
) {
    // Inside the border: the columns that fit, the ring's name the rest.
    let (ring_w, shown) = fit_columns(f.area().width.saturating_sub(2));
    let pick = |c: [String; NCOLS]| -> Vec<Cell> {
        let mut c = c.map(Some);
        shown
            .iter()
            .map(|&i| match i {
                0 => Cell::from(tail(c[0].take().unwrap_or_default(), ring_w)),
                i => Cell::from(c[i].take().unwrap_or_default()),
            })
            .collect()
    };
    let header = TRow::new(pick(HEADERS.map(String::from)))
        .style(Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    let mut errors: Vec<Line> = Vec::new();
    let mut body: Vec<TRow> = Vec::new();
    for r in rows {
        match cells(r) {
            Ok(c) => {
                let bad = r.reading.result.as_ref().is_ok_and(|i| {
                    let s = &i.stats;
                    !s.consumer_attached
                        || s.drops_full > 0
                        || s.corruption > 0
                        || s.resets > 0
                        || s.stalled_claims > 0
                });
                let row = TRow::new(pick(c));
                body.push(if bad {
                    row.style(Style::default().fg(Color::Yellow))
                } else {
                    row
                });
            }
            // The error in full, below the table: a table cell would cut it.
            Err((name, e)) => {
                body.push(
                    TRow::new([Cell::from(tail(name.clone(), ring_w)), Cell::from("error")])
                        .style(Style::default().fg(Color::Red)),
                );
                errors.push(Line::from(format!("{name}: {e}")).style(Color::Red));
            }
        }
    }
    let widths: Vec<Constraint> = shown
        .iter()
        .map(|&i| Constraint::Length(if i == 0 { ring_w } else { WIDTHS[i] }))
        .collect();
    let hidden = NCOLS - shown.len();
    let title = format!(
        " shmring top: {} rings, every {:.1} s, sorted by {}{}{} ",
        rows.len(),
        interval.as_secs_f64(),
        sort.label(),
        if reverse { " (reversed)" } else { "" },
        match hidden {
            0 => String::new(),
            n => format!(", {n} columns hidden (a wider terminal shows them)"),
        }
    );
    let table = Table::new(body, widths).header(header).block(
        Block::bordered()
            .title(title)
            .title_bottom(Line::from(" q quit  s sort  r reverse ")),
    );
    let tethers: Vec<Line> = tether_lines(rows).into_iter().map(Line::from).collect();
    let panel = |n: usize| match n {
        0 => 0,
        n => n.min(10) as u16 + 2,
    };
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(panel(tethers.len())),
        Constraint::Length(panel(errors.len())),
    ])
    .areas(f.area());
    f.render_widget(table, top);
    if !tethers.is_empty() {
        let p = Paragraph::new(tethers).block(Block::bordered().title(" tethered consumers "));
        f.render_widget(p, middle);
    }
    if !errors.is_empty() {
        let p = Paragraph::new(errors)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" rings that cannot be read "));
        f.render_widget(p, bottom);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::rings::RingInfo;

    /// A source that serves two rings: one whose counters grow by 100 records and
    /// 1 MB per scan, one that cannot be read.
    struct Fake(Cell<u64>);

    impl RingSource for Fake {
        fn kind(&self) -> &'static str {
            "fake"
        }
        fn scan(&mut self) -> Vec<Reading> {
            let n = self.0.get() + 1;
            self.0.set(n);
            let stats = Stats {
                records_committed: 100 * n,
                bytes_committed: 1_000_000 * n,
                drops_full: n,
                consumer_attached: true,
                ..Default::default()
            };
            vec![
                Reading {
                    ring: "a-ok".into(),
                    source: "fake",
                    result: Ok(RingInfo {
                        stats,
                        max_record: 1,
                        max_producers: 1,
                        tethers: vec![shmring::TetherInfo {
                            line: 2,
                            requested: false,
                            pid: 77,
                            records_consumed: 5,
                            bytes_consumed: 5000,
                            lost: 0,
                            lag_records: 3,
                            lag_bytes: 3000,
                            records_filtered: 0,
                        }],
                    }),
                },
                Reading {
                    ring: "b-bad".into(),
                    source: "fake",
                    result: Err("not a shmring ring".into()),
                },
            ]
        }
    }

    /// The live view drawn on a terminal of `width` columns, as text.
    fn screen(rows: &[TopRow], width: u16) -> String {
        let mut term =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, 16)).unwrap();
        term.draw(|f| draw(f, rows, SortKey::Name, false, Duration::from_secs(1)))
            .unwrap();
        let buf = term.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    #[test]
    fn a_narrow_terminal_drops_whole_columns_and_keeps_names_readable() {
        let sock = "/run/user/1000/shmring-sockets/meeting-room-camera-0.sock";
        let mut rows = Sampler::new(vec![Box::new(Fake(Cell::new(0)))]).sample();
        rows[0].reading.ring = sock.into();
        let narrow = screen(&rows, 80);
        // Every column shown is whole: the consumer's state, the ring's name by
        // its end, and the error row's name too.
        let row = narrow.lines().find(|l| l.contains("…")).expect(&narrow);
        assert!(row.contains("meeting-room-camera-0.sock"), "{narrow}");
        assert!(row.contains(" alive "), "{narrow}");
        assert!(narrow.contains("b-bad"), "{narrow}");
        for h in [
            "RING",
            "REC/S",
            "MB/S",
            "OCCUPANCY MiB",
            "DROPS",
            "CONSUMER",
        ] {
            assert!(narrow.contains(h), "{h} missing at 80 columns:\n{narrow}");
        }
        assert!(narrow.contains("columns hidden"), "{narrow}");
        // Wide enough, every column and the whole name.
        let wide = screen(&rows, 240);
        for h in HEADERS {
            assert!(wide.contains(h), "{h} missing at 240 columns:\n{wide}");
        }
        assert!(wide.contains(sock) && !wide.contains("hidden"), "{wide}");
    }

    #[test]
    fn rates_come_from_two_scans_and_errors_stay_on_their_row() {
        let mut s = Sampler::new(vec![Box::new(Fake(Cell::new(0)))]);
        let first = s.sample();
        assert_eq!(first[0].records_per_s, 0.0, "no rate from one scan");
        std::thread::sleep(Duration::from_millis(20));
        let mut rows = s.sample();
        assert!(rows[0].records_per_s > 0.0 && rows[0].mb_per_s > 0.0);
        // The ratio of the two rates is the ratio of the increments (100 : 1 MB).
        let ratio = rows[0].records_per_s / rows[0].mb_per_s;
        assert!((ratio - 100.0).abs() < 1e-6, "{ratio}");
        sort_rows(&mut rows, SortKey::Drops, false);
        assert_eq!(rows[0].reading.ring, "a-ok");
        sort_rows(&mut rows, SortKey::Name, true);
        assert_eq!(rows[0].reading.ring, "b-bad");
        let table = plain_table(&rows);
        assert!(
            table.contains("b-bad  error: not a shmring ring"),
            "{table}"
        );
        assert!(table
            .lines()
            .any(|l| l.starts_with("a-ok") && l.ends_with("alive") && l.contains(" 1 lag 3 ")));
        assert!(
            table.contains("a-ok: tethered line 2 pid 77: lag 3 records"),
            "{table}"
        );
        let j = json_rows(&rows);
        assert_eq!(j[0]["error"], "not a shmring ring");
        assert_eq!(j[1]["stats"]["records_committed"], 200);
        assert_eq!(j[1]["tethers"][0]["lag_records"], 3);
        assert_eq!(j[1]["tethers"][0]["line"], 2);
    }
}
