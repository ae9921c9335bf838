//! A process whose `/dev/shm` is a small tmpfs of its own: a private mount
//! namespace (`unshare --mount`, or as an unprivileged user a user namespace as
//! well) with a tmpfs of the given size mounted on `/dev/shm`. Nothing is mounted
//! outside it, and the tmpfs goes when the process (and its children) end, however
//! they end.
//!
//! The new namespace's mounts are made private before the tmpfs is mounted, so it
//! cannot propagate back: the whole tree when `/` is a mount point, else (a chroot,
//! whose `/` is a plain directory) the mount `/dev/shm` is on.

use std::process::{Command, Stdio};

/// Makes the mounts private, then mounts a tmpfs of `$1` MiB on `/dev/shm`.
const MOUNT: &str = "{ mount --make-rprivate / 2>/dev/null || mount --make-rprivate /dev/shm 2>/dev/null || mount --make-rprivate /dev; } && mount -t tmpfs -o size=\"$1\"m,mode=1777 shm /dev/shm";

/// A command that runs `program` with a `/dev/shm` of `mib` MiB, bounded by
/// `timeout(1)` to `seconds`; add the program's arguments to it. Err: why it
/// cannot be done here (no `unshare`, or a kernel that refuses the namespaces).
pub fn command(mib: u32, seconds: u32, program: &str) -> Result<Command, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let unshare: &[&str] = if root {
        &["--mount", "--propagation", "unchanged"]
    } else {
        &[
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "unchanged",
        ]
    };
    let probe = Command::new("unshare")
        .args(unshare)
        .args(["sh", "-c", MOUNT, "sh", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match probe {
        Err(e) => return Err(format!("unshare cannot be run here: {e}")),
        Ok(out) if !out.status.success() => {
            let why = String::from_utf8_lossy(&out.stderr);
            let why = why.trim();
            return Err(if root {
                format!("a private tmpfs on /dev/shm cannot be mounted here: {why}")
            } else {
                format!(
                    "the kernel forbids unprivileged user namespaces (or their mounts) here and the runner is not root: {why}"
                )
            });
        }
        Ok(_) => {}
    }
    let mut cmd = Command::new("unshare");
    cmd.args(unshare).args([
        "sh",
        "-c",
        &format!("{MOUNT} && shift && exec timeout {seconds} \"$@\""),
        "sh",
        &mib.to_string(),
        program,
    ]);
    Ok(cmd)
}
