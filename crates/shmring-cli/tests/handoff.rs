//! The command over the secure hand-off: `record --listen`, `produce --connect`,
//! `stat --connect` (read-only observer), a refused uid, and bad input.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

mod common;
use common::{last_json, run, run_line, Proc, EXE};

/// A private directory for the socket and the recordings, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "shmring-cli-handoff-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        // Another uid (the refusal test) must reach the socket inside.
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        Dir(d)
    }
    fn sock(&self) -> String {
        self.0.join("ring.sock").display().to_string()
    }
    fn out(&self) -> String {
        self.0.join("out").display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn record_listen_produce_connect_stat_connect() {
    let d = Dir::new("e2e");
    let sock = d.sock();
    let out = d.out();
    let mut rec = Proc::spawn_line(&format!(
        "record --listen {} --out {} --seconds 20",
        sock, out
    ));
    let ready = rec.expect("ready");
    assert_eq!(ready["ring"], sock.as_str());
    let p = run_line(&format!(
        "produce --connect {} --video 320x240@50 --audio 48000x2 --seconds 1",
        sock
    ));
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let produced = &last_json(&p)["produced"];
    assert_eq!(produced["ring"], sock.as_str());
    assert_eq!(produced["video"][0]["sent"], 50);
    assert_eq!(produced["audio"]["sent"], 100);

    // stat --connect: a read-only observer.
    let s = run(&["stat", "--connect", &sock, "--json"]);
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    let st = last_json(&s);
    assert_eq!(st["ring"], sock.as_str());
    // 150 records, and each stream's end-of-stream record.
    assert_eq!(produced["video"][0]["ended"], true);
    assert_eq!(produced["audio"]["ended"], true);
    assert_eq!(st["records_committed"], 150 + 2);
    assert_eq!(st["consumer_attached"], true);

    // SIGTERM ends the recording; the summary counts the hand-offs.
    rec.signal(libc::SIGTERM);
    let recorded = rec.expect("recorded");
    let (code, err) = rec.wait();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(recorded["handoff"]["producers"], 1, "{recorded}");
    assert_eq!(recorded["handoff"]["observers"], 1, "{recorded}");
    assert_eq!(recorded["handoff"]["refused"], 0, "{recorded}");
    assert_eq!(recorded["ring"]["records_consumed"], 150 + 2);
    assert!(err.contains("hand-off on"), "{err}");
    assert!(
        !std::path::Path::new(&sock).exists(),
        "the recorder removes its socket"
    );
}

#[test]
fn a_uid_not_allowed_is_refused_with_the_rule_named() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: running a producer under another uid needs root (setpriv)");
        return;
    }
    let d = Dir::new("refuse");
    let sock = d.sock();
    let out = d.out();
    let mut rec = Proc::spawn_line(&format!(
        "record --listen {} --out {} --seconds 20 --allow-uid 4242",
        sock, out
    ));
    rec.expect("ready");
    let as_uid = |uid: &str| {
        Command::new("setpriv")
            .args(["--reuid", uid, "--regid", uid, "--clear-groups", EXE])
            .args([
                "produce",
                "--connect",
                &sock,
                "--video",
                "64x64@10",
                "--audio",
                "none",
            ])
            .args(["--seconds", "0.5"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let ok = as_uid("4242");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = as_uid("4243");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rule: peer-credentials") && err.contains("uid 4243"),
        "{err}"
    );
    rec.signal(libc::SIGTERM);
    let recorded = rec.expect("recorded");
    rec.wait();
    assert_eq!(recorded["handoff"]["producers"], 1, "{recorded}");
    assert_eq!(recorded["handoff"]["refused_credentials"], 1, "{recorded}");
}

#[test]
fn bad_hand_off_input_is_a_clear_error() {
    let d = Dir::new("bad");
    let sock = d.sock();
    // Nobody listens there.
    let p = run(&["produce", "--connect", &sock, "--seconds", "0.1"]);
    let err = String::from_utf8_lossy(&p.stderr);
    assert_eq!(p.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&sock) && err.contains("does not exist"),
        "{err}"
    );
    let s = run(&["stat", "--connect", &sock]);
    assert_eq!(s.status.code(), Some(1));
    // Both ways to name a ring at once, or neither (a ring that must never be made).
    let name = format!("shmring-cli-handoff-{}", std::process::id());
    let r = run_line(&format!(
        "record --listen {} --create {} --out {}",
        sock,
        name,
        d.out()
    ));
    assert_eq!(r.status.code(), Some(2));
    let r = run(&["record", "--out", &d.out()]);
    assert_eq!(r.status.code(), Some(2));
    let r = run(&["produce", "--ring", &name, "--connect", &sock]);
    assert_eq!(r.status.code(), Some(2));
    let r = run_line(&format!(
        "record --create {} --allow-uid 5 --out {} --seconds 1",
        name,
        d.out()
    ));
    assert_eq!(r.status.code(), Some(2), "--allow-uid needs --listen");
    // A regular file where the socket should go is left alone.
    std::fs::write(&sock, b"not a socket").unwrap();
    let r = run_line(&format!(
        "record --listen {} --out {} --seconds 1",
        sock,
        d.out()
    ));
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&sock).unwrap(), b"not a socket");
}
