//! A process whose `/dev/shm` is a small tmpfs of its own: a private mount
//! namespace (`unshare --mount`, or as an unprivileged user a user namespace as
//! well) with a tmpfs of the given size mounted on `/dev/shm`. Nothing is mounted
//! outside it, and the tmpfs goes when the process (and its children) end, however
//! they end.

use std::process::{Command, Stdio};

/// A command that runs `program` with a `/dev/shm` of `mib` MiB, bounded by
/// `timeout(1)` to `seconds`; add the program's arguments to it. Err: why it
/// cannot be done here (no `unshare`, or a kernel that refuses the namespaces).
pub fn command(mib: u32, seconds: u32, program: &str) -> Result<Command, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let unshare: &[&str] = if root {
        &["--mount", "--propagation", "private"]
    } else {
        &[
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
        ]
    };
    let works = Command::new("unshare")
        .args(unshare)
        .arg("true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        return Err(if root {
            "unshare --mount is not permitted here".into()
        } else {
            "the kernel forbids unprivileged user namespaces here and the runner is not root".into()
        });
    }
    let mut cmd = Command::new("unshare");
    cmd.args(unshare).args([
        "sh",
        "-c",
        &format!(
            "mount -t tmpfs -o size={mib}m,mode=1777 shm /dev/shm && exec timeout {seconds} \"$@\""
        ),
        "sh",
        program,
    ]);
    Ok(cmd)
}
