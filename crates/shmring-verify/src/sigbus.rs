//! `sigbus`: can a peer resize the segment under the consumer?
//!
//! * memfd segments: a producer's `ftruncate` (shrink or grow) must fail with
//!   EPERM (sealed).
//! * named segments: a peer that can open `/dev/shm/NAME` can truncate it. The core
//!   guards every mapping of a named segment (`shmring::sys::sigbus`): the consumer
//!   touching a page past the new end is not killed; its calls fail with
//!   `Error::Truncated`, and `Segment::truncated()` says so.
//! * the guard takes only faults inside segment mappings: a SIGBUS anywhere else
//!   in the same process still ends it, as it would without shmring.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use shmring::{Address, Config, Meta};

use crate::common::{shm_name, ChildGuard, Report};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Also print a one-line JSON summary at the end.
    #[arg(long)]
    pub json: bool,
}

fn file_size(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    // SAFETY: `stat` is a plain C struct; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a struct we own, on a descriptor borrowed for the call.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

// ---- child roles -------------------------------------------------------------------

/// A producer process tries to shrink and grow the memfd it was given.
pub fn child_resize(fd: &crate::child::RingFds) -> i32 {
    let seg = match crate::child::attach_fd(fd) {
        Ok(s) => s,
        Err(e) => {
            println!("ERR {e}");
            return 2;
        }
    };
    let _prod = seg.producer();
    let size = seg.mapping().1 as libc::off_t;
    let try_size = |n: libc::off_t| -> i32 {
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(seg.fd().as_raw_fd(), n) } == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        }
    };
    let (shrink, grow) = (try_size(size / 2), try_size(size * 2));
    println!("shrink={shrink} grow={grow}");
    if shrink == libc::EPERM && grow == libc::EPERM {
        0
    } else {
        1
    }
}

/// A consumer process of a named segment: READY, waits for a line on stdin, then
/// reads (the parent truncated the file meanwhile). With `foreign`, it then also
/// faults on a mapping that is not a segment, which must still end it with SIGBUS.
pub fn child_named_consumer(name: &str, foreign: bool) -> i32 {
    let seg = match Address::named(name).open() {
        Ok(s) => s,
        Err(e) => {
            println!("ERR {e}");
            return 2;
        }
    };
    let consumer = match seg.consumer() {
        Ok(c) => c,
        Err(e) => {
            println!("ERR {e}");
            return 2;
        }
    };
    if seg.truncated() {
        println!("ERR false alarm before truncation");
        return 3;
    }
    println!("READY");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let mut outcome = Vec::new();
    let mut corrupt = 0;
    for _ in 0..3 {
        match consumer.next_timeout(Some(Duration::from_millis(20))) {
            Ok(Some(f)) => outcome.push(format!("frame {}", f.len())),
            Ok(None) => outcome.push("none".into()),
            Err(e) => {
                corrupt += matches!(e, shmring::Error::Truncated(_)) as u32;
                outcome.push(format!("error {e}"));
            }
        }
    }
    let mut producer = match seg.producer() {
        Ok(mut p) => p.reserve(64).map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = &mut producer {
        outcome.push(format!("producer: {e}"));
    }
    if foreign {
        println!("FOREIGN");
        let _ = std::io::stdout().flush();
        foreign_fault();
        println!("SURVIVED a foreign SIGBUS");
        return 1;
    }
    if seg.truncated() && corrupt == 3 && producer.is_err() {
        println!("TRUNCATED reads={outcome:?}");
        0
    } else {
        println!("UNDETECTED truncated={} reads={outcome:?}", seg.truncated());
        1
    }
}

/// Maps a file of our own, truncates it, and touches the lost page: SIGBUS.
fn foreign_fault() {
    let path = std::env::temp_dir().join(format!("sigbus-foreign-{}", std::process::id()));
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
    else {
        return;
    };
    let _ = std::fs::remove_file(&path);
    if f.set_len(8192).is_err() {
        return;
    }
    // SAFETY: a fresh shared mapping of our own file, chosen by the kernel.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED || f.set_len(0).is_err() {
        return;
    }
    // SAFETY: inside our mapping; the page is gone from the file, so this faults.
    unsafe { std::ptr::read_volatile((p as *const u8).add(4096)) };
}

// ---- the checks ----------------------------------------------------------------------

pub fn run(a: Args) -> i32 {
    let mut rep = Report::new("sigbus");
    // 1. Sealed memfd.
    match Address::memfd("verify-seals", Config::with_capacity(1 << 20)).open() {
        Ok(seg) => {
            let fd = crate::child::RingFds::of(&seg);
            let mut cmd = Command::new(std::env::current_exe().expect("own path"));
            cmd.args(["child-resize", &format!("--fd={fd}")])
                .stdin(Stdio::null())
                .stdout(Stdio::piped());
            let out = ChildGuard::spawn_tied(&mut cmd, &fd.0).map(|mut k| {
                let mut s = String::new();
                if let Some(o) = k.take_stdout() {
                    let _ = BufReader::new(o).read_line(&mut s);
                }
                (k.wait_or_kill(Duration::from_secs(20)), s)
            });
            let size_after = file_size(seg.fd()).unwrap_or(0);
            let (st, line) = match out {
                Ok(x) => x,
                Err(e) => (None, format!("spawn: {e}")),
            };
            rep.fig("memfd_resize_by_producer", line.trim().to_string());
            rep.check(
                "a producer cannot resize a memfd segment (EPERM)",
                st.is_some_and(|s| s.success()) && size_after == seg.mapping().1 as u64,
                format!(
                    "child reported {:?} (EPERM = {}); size after {size_after}",
                    line.trim(),
                    libc::EPERM
                ),
            );
        }
        Err(e) => {
            rep.check(
                "a producer cannot resize a memfd segment (EPERM)",
                false,
                e.to_string(),
            );
        }
    }
    // 2. Named segment truncated under a consumer: reported, not a crash.
    let (status, line) = truncate_under_consumer(false);
    rep.fig("named_truncated", line.clone());
    rep.check(
        "a consumer of a truncated named segment survives and reports it",
        status.as_ref().is_some_and(|s| s.success()) && line.starts_with("TRUNCATED"),
        format!("child: {line:?}, exit {status:?}"),
    );
    // 3. The guard absorbs faults in segment mappings only.
    let (status, line) = truncate_under_consumer(true);
    let sigbus = status.as_ref().and_then(|s| s.signal()) == Some(libc::SIGBUS);
    rep.fig(
        "foreign_sigbus",
        if sigbus {
            "process killed by SIGBUS".to_string()
        } else {
            format!("{line} ({status:?})")
        },
    );
    rep.check(
        "a SIGBUS outside every segment still ends the process",
        sigbus && line == "FOREIGN",
        format!("child: {line:?}, exit {status:?}"),
    );
    rep.finish(a.json)
}

/// Creates a named segment with one committed record, starts a consumer process,
/// truncates the file to one page, and lets the consumer read. Returns the child's
/// exit status and its last line.
fn truncate_under_consumer(foreign: bool) -> (Option<std::process::ExitStatus>, String) {
    let name = shm_name(if foreign { "trunc-foreign" } else { "trunc" });
    let seg = match Address::create(&name.0, Config::with_capacity(64 << 10)).open() {
        Ok(s) => s,
        Err(e) => return (None, format!("create: {e}")),
    };
    let mut prod = match seg.producer() {
        Ok(p) => p,
        Err(e) => return (None, format!("producer: {e}")),
    };
    if let Err(e) = prod.send(&[7u8; 3000], Meta::new(0, 0)) {
        return (None, format!("send: {e}"));
    }
    // Detach now: after the truncation, this process must not touch the mapping
    // either (a detach writes the slot table, past the new end of the file).
    drop(prod);
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.args(["child-named-consumer", &format!("--name={}", name.0)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if foreign {
        cmd.arg("--foreign");
    }
    let mut kid = match ChildGuard::spawn_tied(&mut cmd, &[]) {
        Ok(k) => k,
        Err(e) => return (None, format!("spawn: {e}")),
    };
    let mut out = BufReader::new(kid.take_stdout().expect("piped"));
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    if line.trim() != "READY" {
        return (
            kid.wait_or_kill(Duration::from_secs(10)),
            line.trim().to_string(),
        );
    }
    // The peer's move: truncate to one page.
    let truncated = std::fs::OpenOptions::new()
        .write(true)
        .open(name.path())
        .and_then(|f| f.set_len(4096));
    if let Err(e) = truncated {
        return (None, format!("truncate: {e}"));
    }
    if let Some(mut i) = kid.take_stdin() {
        let _ = i.write_all(b"go\n");
    }
    line.clear();
    let _ = out.read_line(&mut line);
    (
        kid.wait_or_kill(Duration::from_secs(20)),
        line.trim().to_string(),
    )
}
