//! A live status line for long work (`shmring bench`, `shmring record`), shown the
//! way `shmring demo` shows its own: redrawn in place where stderr is a terminal
//! (indicatif), and as a plain line now and then where it is not (a log file, a
//! pipe), so that output read later still says how the work went.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where the status goes: a bar redrawn in place, or lines on stderr.
pub struct StatusLine {
    bar: Option<ProgressBar>,
    /// What each plain line starts with (`shmring record`).
    prefix: String,
    /// Plain lines: at most one per `every`.
    every: Duration,
    last_line: Option<Instant>,
}

/// What a terminal shows: a spinner and the message, or a bar of `len` steps
/// drawn with an indicatif `template`.
pub enum Look {
    Spinner,
    Bar { len: u64, template: &'static str },
}

impl StatusLine {
    /// A status line for `prefix`: on a terminal, `look`; elsewhere a plain line at
    /// most every `every`.
    pub fn new(prefix: &str, every: Duration, look: Look) -> StatusLine {
        let terminal = std::io::stderr().is_terminal();
        StatusLine::with_terminal(prefix, every, look, terminal)
    }

    fn with_terminal(prefix: &str, every: Duration, look: Look, terminal: bool) -> StatusLine {
        let bar = terminal.then(|| {
            let (b, template) = match look {
                Look::Bar { len, template } => (ProgressBar::new(len), template),
                Look::Spinner => (ProgressBar::new_spinner(), "{spinner} {prefix}: {msg}"),
            };
            b.set_draw_target(ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_prefix(prefix.to_string());
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        StatusLine {
            bar,
            prefix: prefix.to_string(),
            every,
            last_line: None,
        }
    }

    /// Is the status redrawn in place (a terminal)?
    pub fn is_terminal(&self) -> bool {
        self.bar.is_some()
    }

    /// The work's state now. A plain line is printed when `every` has passed since
    /// the last one (the first at once), unless `force`.
    pub fn set(&mut self, msg: String, force: bool) {
        match &self.bar {
            Some(b) => b.set_message(msg),
            None => {
                let due = self.last_line.is_none_or(|t| t.elapsed() >= self.every);
                if due || force {
                    self.last_line = Some(Instant::now());
                    eprintln!("{}: {msg}", self.prefix);
                }
            }
        }
    }

    /// Moves a progress bar to `pos` (nothing for plain lines).
    pub fn set_position(&self, pos: u64) {
        if let Some(b) = &self.bar {
            b.set_position(pos);
        }
    }

    /// Runs `f` with the bar hidden, so what it prints is not drawn over.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Removes the line from the terminal (the summary follows).
    pub fn finish(self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_come_at_most_once_per_interval_unless_forced() {
        let mut s = StatusLine::with_terminal("t", Duration::from_secs(3600), Look::Spinner, false);
        assert!(!s.is_terminal());
        assert!(s.last_line.is_none());
        s.set("first".into(), false);
        let first = s.last_line.expect("the first line is printed at once");
        s.set("second".into(), false);
        assert_eq!(s.last_line, Some(first), "not again within the interval");
        s.set("forced".into(), true);
        assert!(s.last_line.unwrap() > first);
    }
}
