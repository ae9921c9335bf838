//! `perms`: a named segment is created mode 0600, and a process of another user
//! (`nobody`) cannot open it (EACCES). Skipped, with a message, when this process
//! cannot switch users.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use shmring::{Address, Config, Error};

use crate::common::{shm_name, ChildGuard, Report};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

/// Runs as another user: tries to open the segment.
pub fn child_open_named(name: &str) -> i32 {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    match Address::named(name).open() {
        Err(Error::Os { source, .. }) if source.raw_os_error() == Some(libc::EACCES) => {
            println!("uid={uid} EACCES");
            0
        }
        Err(e) => {
            println!("uid={uid} ERR {e}");
            1
        }
        Ok(_) => {
            println!("uid={uid} OPENED");
            1
        }
    }
}

fn nobody() -> Option<(u32, u32)> {
    // SAFETY: getpwnam returns a pointer to static storage or null; we copy the ids
    // out at once (single-threaded use here).
    let pw = unsafe { libc::getpwnam(c"nobody".as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null result of getpwnam.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("perms");
    let name = shm_name("perms");
    let seg = match Address::create(&name.0, Config::with_capacity(64 << 10)).open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("perms: create named segment: {e}");
            return 2;
        }
    };
    match std::fs::metadata(name.path()) {
        Ok(m) => {
            let mode = m.mode() & 0o7777;
            rep.fig("mode", format!("{mode:04o}"));
            // SAFETY: getuid has no preconditions.
            let me = unsafe { libc::getuid() };
            rep.check(
                "named segment is mode 0600, owned by its creator",
                mode == 0o600 && m.uid() == me,
                format!("mode {mode:04o}, owner uid {} (we are {me})", m.uid()),
            );
        }
        Err(e) => {
            rep.check(
                "named segment is mode 0600, owned by its creator",
                false,
                e.to_string(),
            );
        }
    }
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let skip = |rep: &mut Report, why: String| {
        println!("perms: SKIP other-user check: {why}");
        rep.fig("other_user_check", format!("skipped: {why}"));
    };
    match (root, nobody()) {
        (false, _) => skip(&mut rep, "not running as root, cannot switch users".into()),
        (true, None) => skip(&mut rep, "no user 'nobody'".into()),
        (true, Some((uid, gid))) => {
            let mut cmd = Command::new(std::env::current_exe().expect("own path"));
            cmd.args(["child-open-named", &format!("--name={}", name.0)])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .uid(uid)
                .gid(gid);
            match ChildGuard::spawn_tied(&mut cmd, &[]) {
                Err(e) => skip(
                    &mut rep,
                    format!("cannot start a process as uid {uid}: {e}"),
                ),
                Ok(mut kid) => {
                    let mut out = String::new();
                    if let Some(mut o) = kid.take_stdout() {
                        let _ = o.read_to_string(&mut out);
                    }
                    let st = kid.wait_or_kill(Duration::from_secs(20));
                    let out = out.trim().to_string();
                    rep.fig("other_user_check", out.clone());
                    rep.check(
                        "another user cannot open it (Error::Os with EACCES)",
                        st.is_some_and(|s| s.success()) && out == format!("uid={uid} EACCES"),
                        format!("child as uid {uid}: {out:?}, exit {st:?}"),
                    );
                }
            }
        }
    }
    drop(seg);
    rep.check(
        "segment unlinked when its creator drops it",
        !name.path().exists(),
        name.path().display().to_string(),
    );
    rep.finish(a.json)
}
