//! The child supervisor: a child process stopped and reaped when dropped, at the
//! end of a run, on an early return, and while a panic unwinds.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A supervised child process. When dropped it is stopped and reaped: SIGTERM and
/// the drop grace to exit, then SIGKILL (no grace, the default: SIGKILL at once).
///
/// ```
/// use std::process::Command;
/// let mut sleeper = shmring_host::ChildGuard::spawn(Command::new("sleep").arg("600"))?;
/// assert_eq!(sleeper.exited(), None);
/// let pid = sleeper.pid();
/// drop(sleeper); // killed and reaped
/// assert!(shmring_host::pid_gone(pid));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ChildGuard {
    child: Child,
    /// Some once the child has been reaped.
    status: Option<ExitStatus>,
    drop_grace: Duration,
}

impl ChildGuard {
    /// Supervises `child` (SIGKILL when dropped; see [`ChildGuard::with_drop_grace`]).
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard {
            child,
            status: None,
            drop_grace: Duration::ZERO,
        }
    }

    /// Spawns `cmd` and supervises it.
    pub fn spawn(cmd: &mut Command) -> io::Result<ChildGuard> {
        cmd.spawn().map(ChildGuard::new)
    }

    /// Spawns `cmd` tied to the calling thread: the kernel kills the child when
    /// that thread ends (`PR_SET_PDEATHSIG`), so not even a parent killed by SIGKILL
    /// leaves it behind. The descriptors in `inherit` stay open across exec (their
    /// close-on-exec flag is cleared in the child only).
    pub fn spawn_tied(cmd: &mut Command, inherit: &[RawFd]) -> io::Result<ChildGuard> {
        let fds = inherit.to_vec();
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: runs in the forked child before exec and makes only
        // async-signal-safe system calls (prctl, getppid, fcntl) on the child's own
        // state.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(io::Error::other("parent exited during spawn"));
                }
                for &fd in &fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        ChildGuard::spawn(cmd)
    }

    /// This executable again with `args`, tied (see [`ChildGuard::spawn_tied`]),
    /// stdin closed and stdout piped if asked.
    pub fn spawn_self(args: &[String], inherit: &[RawFd], piped_stdout: bool) -> io::Result<Self> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(args).stdin(Stdio::null());
        if piped_stdout {
            cmd.stdout(Stdio::piped());
        }
        ChildGuard::spawn_tied(&mut cmd, inherit)
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

    /// The child's stdin, if piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The child's stdout, if piped and not taken yet.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The child's stderr, if piped and not taken yet.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// The exit status if the child has exited (it is then reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(s)) => self.status = Some(s),
                Ok(None) => {}
                // Not our child any more (reaped elsewhere): nothing to wait for.
                Err(_) => self.status = Some(ExitStatus::default()),
            }
        }
        self.status
    }

    /// The exit status collected so far, without looking again.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Has the child been reaped?
    pub fn is_reaped(&self) -> bool {
        self.status.is_some()
    }

    /// Sends `sig` unless the child has been reaped (an exited child not yet
    /// reaped keeps its pid, so the signal cannot reach another process).
    pub fn signal(&self, sig: i32) {
        if self.status.is_none() {
            // SAFETY: kill has no memory preconditions; the pid is our unreaped
            // child, so it cannot have been reused.
            unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        }
    }

    /// SIGINT, as Ctrl-C in a terminal sends it (unless reaped).
    pub fn interrupt(&self) {
        self.signal(libc::SIGINT);
    }

    /// Waits up to `t` for the child to exit; its status, or None if it still runs.
    pub fn wait_for(&mut self, t: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + t;
        while self.exited().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.status
    }

    /// Waits up to `t` for the child to exit; its status, or None after killing
    /// it (it did not exit in time).
    pub fn wait_or_kill(&mut self, t: Duration) -> Option<ExitStatus> {
        if let Some(st) = self.wait_for(t) {
            return Some(st);
        }
        self.kill();
        None
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL (at once if `grace` is zero);
    /// returns the exit status.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
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
        self.terminate(Duration::ZERO)
    }

    /// Stops the child (SIGSTOP) and waits until it is stopped. False if it has
    /// exited instead (it is reaped then).
    pub fn pause(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        self.signal(libc::SIGSTOP);
        let pid = self.pid() as libc::pid_t;
        loop {
            let mut st = 0;
            // SAFETY: waits for our own child; WUNTRACED reports the stop without
            // reaping.
            let r = unsafe { libc::waitpid(pid, &mut st, libc::WUNTRACED) };
            if r == pid {
                if libc::WIFSTOPPED(st) {
                    return true;
                }
                // It exited, and waitpid reaped it.
                use std::os::unix::process::ExitStatusExt;
                self.status = Some(ExitStatus::from_raw(st));
                return false;
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }

    /// Lets a paused child run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Waits for the child to exit and collects what it wrote to piped stdout and
    /// stderr (as [`Child::wait_with_output`]).
    pub fn wait_with_output(mut self) -> io::Result<std::process::Output> {
        let (stdout, stderr) = (self.child.stdout.take(), self.child.stderr.take());
        let read = |r: Option<Box<dyn io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(mut r) = r {
                    r.read_to_end(&mut v)?;
                }
                Ok::<_, io::Error>(v)
            })
        };
        let out = read(stdout.map(|s| Box::new(s) as _));
        let err = read(stderr.map(|s| Box::new(s) as _));
        let status = self.child.wait()?;
        self.status = Some(status);
        let join = |h: std::thread::JoinHandle<io::Result<Vec<u8>>>| {
            h.join()
                .unwrap_or_else(|_| Err(io::Error::other("reader panicked")))
        };
        Ok(std::process::Output {
            status,
            stdout: join(out)?,
            stderr: join(err)?,
        })
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.terminate(self.drop_grace);
    }
}

/// Is a process with this pid gone (not even a zombie of ours)?
pub fn pid_gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Makes `fds[i]` descriptor number `first + i` in the child `cmd` will start
/// (inherited across exec), whatever numbers they have here: each is first copied
/// above every target (close-on-exec), then placed, so a source that is another's
/// target is never overwritten before it is copied.
pub fn place_fds(cmd: &mut Command, fds: &[RawFd], first: RawFd) {
    let sources = fds.to_vec();
    // Made before the fork: the child only writes into it.
    let mut copies = vec![0 as RawFd; sources.len()];
    let above = first + sources.len() as RawFd;
    // SAFETY: runs in the forked child before exec and makes only
    // async-signal-safe calls (fcntl, dup2) on the child's own descriptors; it
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for (copy, &fd) in copies.iter_mut().zip(&sources) {
                *copy = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above);
                if *copy < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (i, &copy) in copies.iter().enumerate() {
                if libc::dup2(copy, first + i as RawFd) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn sleeper() -> Command {
        let mut cmd = Command::new("sleep");
        cmd.arg("600").stdin(Stdio::null());
        cmd
    }

    #[test]
    fn a_dropped_child_is_killed_and_reaped() {
        let kid = ChildGuard::spawn_tied(&mut sleeper(), &[]).expect("spawn sleep");
        let pid = kid.pid();
        assert!(!pid_gone(pid));
        drop(kid);
        assert!(pid_gone(pid), "child {pid} still exists after drop");
    }

    #[test]
    fn a_panic_kills_and_reaps_the_child() {
        let mut pid = 0;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let g = ChildGuard::spawn(&mut sleeper()).expect("spawn sleep");
            pid = g.pid();
            panic!("a failure while the child runs");
        }));
        assert!(r.is_err());
        assert!(pid > 0 && pid_gone(pid), "child {pid} left behind");
    }

    #[test]
    fn terminate_sends_sigterm_first_and_reports_the_signal() {
        let mut g = ChildGuard::spawn(&mut sleeper()).expect("spawn sleep");
        assert_eq!(g.exited(), None);
        let st = g.terminate(Duration::from_secs(5)).expect("an exit status");
        assert_eq!(st.signal(), Some(libc::SIGTERM), "{st}");
        let pid = g.pid();
        drop(g);
        assert!(pid_gone(pid));
        let mut g = ChildGuard::spawn(&mut sleeper()).expect("spawn sleep");
        let st = g.kill().expect("an exit status");
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{st}");
    }

    #[test]
    fn a_drop_grace_lets_the_child_exit_on_sigterm() {
        // The shell traps SIGTERM and exits 7: only a SIGTERM before SIGKILL gives 7.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "trap 'exit 7' TERM; echo up; while :; do sleep 0.01; done",
        ])
        .stdout(Stdio::piped());
        let mut g = ChildGuard::spawn(&mut cmd)
            .expect("spawn sh")
            .with_drop_grace(Duration::from_secs(10));
        let mut up = [0u8; 3];
        io::Read::read_exact(&mut g.take_stdout().expect("piped"), &mut up).expect("up");
        let st = g.terminate(g.drop_grace).expect("an exit status");
        assert_eq!(st.code(), Some(7), "{st}");
    }

    #[test]
    fn wait_or_kill_reports_the_status_or_kills() {
        let mut g = ChildGuard::spawn(&mut Command::new("true")).expect("spawn true");
        let st = g.wait_or_kill(Duration::from_secs(30)).expect("exited");
        assert!(st.success() && g.is_reaped());
        let mut g = ChildGuard::spawn(&mut sleeper()).expect("spawn sleep");
        assert_eq!(g.wait_or_kill(Duration::from_millis(10)), None);
        assert!(g.is_reaped() && pid_gone(g.pid()));
    }

    #[test]
    fn pause_and_resume() {
        let mut g = ChildGuard::spawn(&mut sleeper()).expect("spawn sleep");
        assert!(g.pause(), "stopped");
        g.resume();
        assert_eq!(g.exited(), None);
        g.kill();
        assert!(!g.pause(), "a reaped child cannot be paused");
    }

    #[test]
    fn wait_with_output_collects_both_streams() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let o = ChildGuard::spawn(&mut cmd)
            .expect("spawn sh")
            .wait_with_output()
            .expect("output");
        assert_eq!(
            (o.status.code(), &o.stdout[..], &o.stderr[..]),
            (Some(3), &b"out\n"[..], &b"err\n"[..])
        );
    }

    #[test]
    fn descriptors_are_placed_at_the_numbers_asked() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("shmring-host-place-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files: Vec<std::fs::File> = ["first", "second"]
            .iter()
            .map(|t| {
                let p = dir.join(t);
                std::fs::write(&p, t).unwrap();
                std::fs::File::open(&p).unwrap()
            })
            .collect();
        // Given in the other order than they were opened: 3 gets "second".
        let fds = [files[1].as_raw_fd(), files[0].as_raw_fd()];
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat <&3; echo; cat <&4"])
            .stdout(Stdio::piped());
        place_fds(&mut cmd, &fds, 3);
        let mut child = cmd.spawn().unwrap();
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(child.wait().unwrap().success());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(out, "second\nfirst");
    }
}
