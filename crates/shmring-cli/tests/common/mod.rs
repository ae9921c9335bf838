//! Helpers shared by the `shmring` command's end-to-end tests: the command run as a
//! supervised child (killed and reaped on drop) whose JSON lines arrive on a
//! channel, and unique ring names removed on drop.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;
use shmring_testkit::ChildGuard;

pub use shmring_testkit::ShmName as Ring;

pub const EXE: &str = env!("CARGO_BIN_EXE_shmring");
/// Upper bound on any wait, so a broken build fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A unique ring name, removed from /dev/shm on drop.
pub fn ring_name(tag: &str) -> Ring {
    Ring::new("clitest", tag)
}

/// The command as a child, killed and reaped on drop; its stdout JSON lines arrive
/// on `lines`.
pub struct Proc {
    pub kid: ChildGuard,
    pub lines: Receiver<Value>,
}

impl Proc {
    pub fn spawn(args: &[&str]) -> Proc {
        let mut cmd = Command::new(EXE);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Proc::command(cmd)
    }

    /// [`Proc::spawn`] with the words of `line` (split at spaces: ring names and
    /// scratch paths have none).
    pub fn spawn_line(line: &str) -> Proc {
        Proc::spawn(&line.split_whitespace().collect::<Vec<_>>())
    }

    /// Runs `cmd` (which pipes stdout) supervised; its JSON lines go to `lines`.
    pub fn command(mut cmd: Command) -> Proc {
        let mut kid = ChildGuard::spawn_tied(&mut cmd, &[]).unwrap();
        let out = kid.take_stdout().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&l) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        Proc { kid, lines }
    }

    /// The next JSON line that has `key`, within PATIENCE.
    pub fn expect(&self, key: &str) -> Value {
        let until = Instant::now() + PATIENCE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {key:?} line from the child"));
            if let Some(x) = v.get(key) {
                return x.clone();
            }
        }
    }

    /// The `key` line, then a clean exit (within PATIENCE); returns the line and
    /// stderr.
    pub fn finish(&mut self, key: &str) -> (Value, String) {
        let v = self.expect(key);
        let (code, err) = self.wait();
        assert_eq!(code, Some(0), "{err}");
        (v, err)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.kid.kill();
    }

    pub fn signal(&self, sig: i32) {
        self.kid.signal(sig);
    }

    /// Waits for exit (within PATIENCE); returns (exit code, stderr).
    pub fn wait(&mut self) -> (Option<i32>, String) {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(s) = self.kid.exited() {
                let mut err = String::new();
                self.kid
                    .take_stderr()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return (s.code(), err);
            }
            assert!(Instant::now() < until, "child did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

pub fn run(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Waits until `done` says so, looking every 20 ms; fails after PATIENCE, naming
/// `what` it waited for.
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < until, "waited {PATIENCE:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`run`] with the words of `line` (split at spaces).
pub fn run_line(line: &str) -> Output {
    run(&line.split_whitespace().collect::<Vec<_>>())
}

/// The last line of a command's stdout, as JSON.
pub fn last_json(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(s.lines().last().expect("a JSON line")).unwrap()
}

/// The command failed, with one line on stderr holding every needle.
pub fn assert_fails(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "succeeded: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err:?}");
    }
}

/// As [`assert_fails`], with exit code `code`.
pub fn assert_fails_with(o: &Output, code: i32, needles: &[&str]) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_fails(o, needles);
}
