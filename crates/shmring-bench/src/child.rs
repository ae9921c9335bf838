//! A supervised child process, stopped and reaped when dropped: at the end of a
//! run, on an early return, and while a panic unwinds. The bench's workers and the
//! demo's recorder and producer are all held by one of these.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A child process that is stopped and reaped when dropped: SIGTERM, then SIGKILL
/// after a grace period (none: SIGKILL at once).
pub struct ChildGuard {
    /// What the child is, for messages ("recorder", "consumer").
    pub name: &'static str,
    child: Child,
    status: Option<ExitStatus>,
    drop_grace: Duration,
}

impl ChildGuard {
    /// Supervises `child`; when dropped it gets SIGTERM and 3 s to exit before SIGKILL.
    pub fn new(name: &'static str, child: Child) -> ChildGuard {
        ChildGuard {
            name,
            child,
            status: None,
            drop_grace: Duration::from_secs(3),
        }
    }

    /// How long the child may take to exit after SIGTERM when the guard is dropped
    /// (`Duration::ZERO`: SIGKILL at once).
    pub fn with_drop_grace(mut self, grace: Duration) -> ChildGuard {
        self.drop_grace = grace;
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the child has exited (it is then reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
            }
        }
        self.status
    }

    /// The exit status collected so far, without looking again.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Sends `sig` if the child has not exited.
    pub fn signal(&mut self, sig: i32) {
        if self.exited().is_none() {
            // SAFETY: kill has no memory preconditions; the pid is our unreaped child,
            // so it cannot have been reused.
            unsafe {
                libc::kill(self.pid() as libc::pid_t, sig);
            }
        }
    }

    /// Waits up to `t` for the child to exit.
    pub fn wait_for(&mut self, t: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + t;
        while self.exited().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.status
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL (at once if `grace` is zero);
    /// returns the exit status.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if !grace.is_zero() {
            self.signal(libc::SIGTERM);
            self.wait_for(grace);
        }
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        self.status
    }

    /// SIGKILL now (if still running) and reap.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.stop(Duration::ZERO)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop(self.drop_grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn sleeper() -> Child {
        Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .expect("start sleep")
    }

    /// Reaped: the pid is no longer ours (waitpid finds no such child).
    fn reaped(pid: u32) -> bool {
        let mut st = 0;
        // SAFETY: waitpid with WNOHANG on a pid; no memory is shared.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut st, libc::WNOHANG) };
        r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
    }

    #[test]
    fn a_panic_kills_and_reaps_the_child() {
        let mut pid = 0;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let g = ChildGuard::new("sleeper", sleeper()).with_drop_grace(Duration::ZERO);
            pid = g.pid();
            panic!("a failure while the child runs");
        }));
        assert!(r.is_err());
        assert!(pid > 0 && reaped(pid), "child {pid} left behind");
    }

    #[test]
    fn drop_sends_sigterm_first_and_stop_reports_the_signal() {
        use std::os::unix::process::ExitStatusExt;
        let mut g = ChildGuard::new("sleeper", sleeper());
        assert_eq!(g.exited(), None);
        let st = g.stop(Duration::from_secs(5)).expect("an exit status");
        assert_eq!(st.signal(), Some(libc::SIGTERM), "{st}");
        let pid = g.pid();
        drop(g);
        assert!(reaped(pid));
        let mut g = ChildGuard::new("sleeper", sleeper());
        let st = g.kill().expect("an exit status");
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{st}");
    }
}
