//! A bench worker process (`shmring-bench-worker`): supervised by a [`ChildGuard`]
//! (killed and reaped on drop, also while a panic unwinds), its report and its
//! stderr gathered.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::report::WorkerReport;
use shmring_host::ChildGuard;

/// The worker program's name.
pub(crate) const WORKER: &str = "shmring-bench-worker";

/// The worker program: beside this executable (a build's `target/release`, or
/// `/usr/bin` after `cargo install`), else in `../libexec/shmring/` (the Debian
/// package's place for it).
fn worker_exe() -> Result<std::path::PathBuf, String> {
    program(WORKER, "shmring-bench")
}

/// The program `name` (built by package `package`) where the bench finds its
/// worker: beside this executable, else in `../libexec/shmring/`. Run as `shmring
/// bench`, this executable is `shmring` itself.
pub(super) fn program(name: &str, package: &str) -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    if exe.file_name().is_some_and(|n| n == name) {
        return Ok(exe);
    }
    let dir = exe.parent().unwrap_or(std::path::Path::new("/"));
    let places = [dir.join(name), dir.join("../libexec/shmring").join(name)];
    places.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "cannot find {name} at {} or {} (it is built with `cargo build --release -p \
             {package}`)",
            places[0].display(),
            places[1].display()
        )
    })
}

/// A worker process, killed (SIGKILL) and reaped if still running when dropped.
pub(super) struct Worker {
    child: ChildGuard,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    pub(super) status: Option<std::process::ExitStatus>,
    pub(super) report: Option<WorkerReport>,
    /// The most descriptors it was seen to have open.
    pub(super) peak_fds: Option<u64>,
}

impl Worker {
    /// Whether the process runs the worker program yet (its `comm`, the program
    /// name cut to 15 bytes by the kernel).
    pub(super) fn runs_worker_program(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/comm", self.pid()))
            .is_ok_and(|c| c.trim_end() == &WORKER[..WORKER.len().min(15)])
    }

    pub(super) fn spawn(args: &[String]) -> Result<Worker, String> {
        Worker::spawn_program(&worker_exe()?, args)
    }

    /// Another program (the bot workload's `shmring record`), supervised alike.
    pub(super) fn spawn_program(exe: &std::path::Path, args: &[String]) -> Result<Worker, String> {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let out = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Some(std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }));
        Ok(Worker {
            child: ChildGuard::new(child),
            lines,
            stderr,
            status: None,
            report: None,
            peak_fds: None,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Waits for the worker's "ready" line.
    pub(super) fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) if l == "ready" => Ok(()),
            Ok(l) => Err(format!("unexpected output from the consumer: {l}")),
            Err(RecvTimeoutError::Timeout) => Err("the consumer did not get ready".into()),
            Err(RecvTimeoutError::Disconnected) => Err(self.failure()),
        }
    }

    /// The next line of its stdout, within `t`.
    pub(super) fn line(&self, t: Duration) -> Result<String, RecvTimeoutError> {
        self.lines.recv_timeout(t)
    }

    /// SIGINT, as Ctrl-C sends it (unless it was reaped).
    pub(super) fn interrupt(&self) {
        self.child.interrupt();
    }

    /// Its exit status if it has exited, its stdout left to [`Worker::line`].
    pub(super) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.exited();
        }
        self.status
    }

    /// Has it exited? Collects its status and report when it has.
    pub(super) fn poll(&mut self) -> bool {
        if self.status.is_none() {
            if let Some(st) = self.child.exited() {
                self.status = Some(st);
                while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
                    if l.starts_with('{') {
                        self.report = serde_json::from_str(&l).ok();
                    }
                }
            }
        }
        self.status.is_some()
    }

    pub(super) fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    pub(super) fn kill(&mut self) {
        if self.status.is_none() {
            self.status = self.child.kill();
        }
    }

    /// Its error output, or its exit status.
    pub(super) fn failure(&mut self) -> String {
        self.kill();
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let err = err.trim();
        if !err.is_empty() {
            err.lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("; ")
        } else {
            match self.status {
                Some(s) => format!("worker exited with {s}"),
                None => "worker failed".into(),
            }
        }
    }
}
