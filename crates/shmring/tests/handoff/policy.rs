//! Who may connect: refused peers get the rule they failed and are counted; a
//! producer in its own mount namespace (private, empty /dev/shm) under another uid
//! produces when the policy allows its uid and is refused when not.

use super::*;

#[test]
fn refused_peers_get_the_rule_they_failed_and_are_counted() {
    let dir = SockDir::new("refuse");
    let seg = ring(false);
    let _consumer = seg.consumer().unwrap();
    let me = rustix::process::geteuid().as_raw();
    let opts = ListenerOptions {
        producers: Allow::nobody().uid(me.wrapping_add(4242)),
        observers: Allow::nobody(),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();

    match Address::socket(dir.sock()).open() {
        Err(Error::Refused { rule, message, .. }) => {
            assert_eq!(rule, "peer-credentials");
            assert!(message.contains(&format!("uid {me}")), "{message}");
            assert!(message.contains("producer allow-list"), "{message}");
        }
        r => panic!("expected a refusal, got {r:?}"),
    }
    match Address::socket(dir.sock()).open_read_only() {
        Err(Error::Refused { rule, .. }) => assert_eq!(rule, "role"),
        r => panic!("expected a refusal, got {r:?}"),
    }
    // A hello of another protocol version.
    let mut s = UnixStream::connect(dir.sock()).unwrap();
    let mut hello = [0u8; handoff::HELLO_LEN];
    hello[..4].copy_from_slice(b"SRH?");
    hello[4..6].copy_from_slice(&9u16.to_le_bytes());
    hello[6] = 1;
    s.write_all(&hello).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    assert_eq!(reply.len(), handoff::REPLY_LEN);
    assert_eq!(reply[6], 2, "status: protocol-version");
    let text = String::from_utf8_lossy(&reply[52..]);
    assert!(text.contains("protocol version 9"), "{text}");
    // Garbage.
    let mut s = UnixStream::connect(dir.sock()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert_eq!(reply.get(6), Some(&4u8), "status: malformed-hello");

    wait_until("the listener to count", GUARD, || l.stats().refused() == 4);
    let st = l.stats();
    assert_eq!(
        (
            st.refused_credentials,
            st.refused_role,
            st.refused_version,
            st.refused_malformed,
            st.producers,
            st.observers
        ),
        (1, 1, 1, 1, 0, 0)
    );
    // The ring took no producer.
    assert_eq!(seg.stats().producers, 0);
}

/// How a producer gets its own mount namespace with an empty private /dev/shm
/// (`shmring_testkit::small_shm`): as root, then `setpriv` to the uid given (the
/// consumer sees that uid); unprivileged, in a user namespace (root inside, the
/// runner's uid as the consumer sees it). The command runs the program named next.
/// Err: why it cannot be done here.
enum Namespace {
    /// Root runner: the producer runs as this uid.
    AsUid(Command),
    /// Unprivileged runner in a user namespace: the consumer sees the runner's uid.
    UserNs(Command),
}

fn namespace_runner(uid: u32) -> Result<Namespace, String> {
    if rustix::process::geteuid().is_root() {
        let mut cmd = shmring_testkit::small_shm::command(1, 120, "setpriv")?;
        let uid = uid.to_string();
        cmd.args(["--reuid", &uid, "--regid", &uid, "--clear-groups"]);
        return Ok(Namespace::AsUid(cmd));
    }
    Ok(Namespace::UserNs(shmring_testkit::small_shm::command(
        1, 120, "env",
    )?))
}

fn run_in_namespace(mut cmd: Command, sock: &Path, n: u64) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = cmd
        .arg(exe)
        .args(["--exact", ENTRY, "--nocapture", "--test-threads=1", "-q"])
        .env(common::ROLE_ENV, "produce")
        .env("SOCK", sock)
        .env("N", n.to_string())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "namespaced child: {}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("@@").map(str::to_string))
        .expect("a message from the namespaced child")
}

#[test]
fn producer_in_its_own_mount_namespace_under_another_uid() {
    let me = rustix::process::geteuid().as_raw();
    let (allowed, other) = (4242u32, 4243u32);
    let ns = match namespace_runner(allowed) {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("SKIPPED producer_in_its_own_mount_namespace_under_another_uid: {why}");
            return;
        }
    };
    // Who the consumer sees, and the uid the producer has inside its namespace.
    let (prefix, seen, inside) = match ns {
        Namespace::AsUid(p) => (p, allowed, allowed),
        Namespace::UserNs(p) => (p, me, 0),
    };
    let dir = SockDir::new("ns");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        producers: Allow::nobody().uid(seen),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    let n = 500;
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        while got < n {
            let f = consumer
                .next_timeout(Some(GUARD))
                .unwrap()
                .expect("a record");
            assert_eq!(f.payload(), got.to_le_bytes());
            got += 1;
        }
        got
    });
    let msg = run_in_namespace(prefix, &dir.sock(), n);
    assert_eq!(msg, format!("DONE uid {inside} dev-shm-entries 0"));
    assert_eq!(reader.join().unwrap(), n);

    // Another uid: as root, a producer running as `other`; unprivileged, the same
    // producer against a consumer whose list names another uid than the runner's.
    let (prefix, refused_uid) = match namespace_runner(other).unwrap() {
        Namespace::AsUid(p) => (p, other),
        Namespace::UserNs(p) => {
            drop(l);
            let opts = ListenerOptions {
                producers: Allow::nobody().uid(me.wrapping_add(1)),
                ..ListenerOptions::default()
            };
            let l2 = Listener::bind(&seg, dir.sock(), opts)
                .unwrap()
                .spawn()
                .unwrap();
            let msg = run_in_namespace(p, &dir.sock(), n);
            assert!(
                msg.starts_with("ERR")
                    && msg.contains("peer-credentials")
                    && msg.contains(&format!("uid {me} ")),
                "{msg}"
            );
            assert_eq!(l2.stats().refused_credentials, 1);
            return;
        }
    };
    let msg = run_in_namespace(prefix, &dir.sock(), n);
    assert!(
        msg.starts_with("ERR")
            && msg.contains("peer-credentials")
            && msg.contains(&format!("uid {refused_uid} ")),
        "{msg}"
    );
    let s = l.stats();
    assert_eq!((s.producers, s.refused_credentials), (1, 1));
}
