//! The child supervisor.

use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A supervised child process: SIGKILLed and reaped on drop (also when the test
/// that owns it panics), and killed by the kernel if the thread that spawned it
/// goes away.
pub struct Kid {
    pub child: std::process::Child,
    pub pid: i32,
    reaped: bool,
}

/// Spawns this executable with `args`, keeping `inherit` open across exec.
pub fn spawn_self(args: &[String], inherit: &[RawFd], piped_stdout: bool) -> std::io::Result<Kid> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(args).stdin(Stdio::null());
    if piped_stdout {
        cmd.stdout(Stdio::piped());
    }
    spawn_cmd(cmd, inherit)
}

pub fn spawn_cmd(mut cmd: Command, inherit: &[RawFd]) -> std::io::Result<Kid> {
    let fds = inherit.to_vec();
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: runs in the forked child before exec and makes only async-signal-safe
    // system calls (prctl, getppid, fcntl) on the child's own state.
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
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other("parent exited during spawn"));
            }
            for &fd in &fds {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id() as i32;
    Ok(Kid {
        child,
        pid,
        reaped: false,
    })
}

impl Kid {
    pub fn signal(&self, sig: i32) {
        if !self.reaped {
            // SAFETY: our own, not yet reaped child.
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
            self.reaped = true;
        }
    }

    /// Stops the child (SIGSTOP) and waits until it is stopped. False if it exited.
    pub fn stop(&mut self) -> bool {
        if self.reaped {
            return false;
        }
        self.signal(libc::SIGSTOP);
        loop {
            let mut st = 0;
            // SAFETY: waits for our own child; WUNTRACED reports the stop without
            // reaping.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WUNTRACED) };
            if r == self.pid {
                if libc::WIFSTOPPED(st) {
                    return true;
                }
                // It exited (and is reaped now).
                self.reaped = true;
                return false;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }

    pub fn cont(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Waits up to `guard` for the child to exit; returns its status, or None (then
    /// it is killed).
    pub fn wait_exit(&mut self, guard: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    self.reaped = true;
                    return Some(st);
                }
                Ok(None) => {}
                Err(_) => {
                    self.reaped = true;
                    return None;
                }
            }
            if t.elapsed() > guard {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Has it exited (reaping it if so)?
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        if self.reaped {
            return None;
        }
        match self.child.try_wait() {
            Ok(Some(st)) => {
                self.reaped = true;
                Some(st)
            }
            _ => None,
        }
    }

    pub fn is_reaped(&self) -> bool {
        self.reaped
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Is a process with this pid gone (not even a zombie of ours)?
pub fn pid_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_child_is_killed_and_reaped() {
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        let kid = spawn_cmd(cmd, &[]).expect("spawn sleep");
        let pid = kid.pid;
        assert!(!pid_gone(pid));
        drop(kid);
        assert!(pid_gone(pid), "child {pid} still exists after drop");
    }

    #[test]
    fn a_child_is_reaped_when_its_owner_panics() {
        let pid = std::sync::Mutex::new(0);
        let r = std::panic::catch_unwind(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("600");
            let kid = spawn_cmd(cmd, &[]).expect("spawn sleep");
            *pid.lock().unwrap() = kid.pid;
            panic!("test failure");
        });
        assert!(r.is_err());
        let pid = *pid.lock().unwrap();
        assert!(pid > 0 && pid_gone(pid), "child {pid} survived the panic");
    }

    #[test]
    fn wait_exit_reports_the_status() {
        let mut kid = spawn_cmd(Command::new("true"), &[]).expect("spawn true");
        let st = kid.wait_exit(Duration::from_secs(30)).expect("exited");
        assert!(st.success() && kid.is_reaped());
    }
}
