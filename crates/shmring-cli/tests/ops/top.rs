//! `top --once/--json` over rings in several states: named, served on sockets,
//! bad ones (each with its error), and one that never existed.

use super::*;

#[test]
fn top_shows_every_ring_and_the_error_of_each_bad_one_and_no_other_file() {
    // Healthy: a consumer in this process, a producer thread writing throughout.
    let healthy = new_ring("healthy");
    let (seg, consumer, producer) = with_records(&healthy, 10, &[7u8; 1000]);
    for _ in 0..4 {
        drop(consumer.try_next().unwrap().unwrap());
    }
    let busy = Arc::new(AtomicBool::new(true));
    let extra = Address::named(&healthy.0).open().unwrap();
    let writer = {
        let busy = busy.clone();
        std::thread::spawn(move || {
            let mut p = extra.producer().unwrap();
            let mut n = 0u64;
            while busy.load(Ordering::Relaxed) {
                // The consumer above does not read: keep room for the 6 unread.
                if p.try_reserve(64)
                    .is_ok_and(|r| r.commit(Meta::new(1, 0)).is_ok())
                {
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };
    // Garbage: random-looking bytes.
    let garbage = new_ring("garbage");
    let bytes: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(garbage.path(), bytes).unwrap();
    // Another program's small file.
    let small = new_ring("small");
    std::fs::write(small.path(), b"some other program's state").unwrap();
    // Dead consumer: its recorder was killed.
    let dead = stale_ring("dead");
    // Truncated by another program after it was made.
    let cut = new_ring("cut");
    let c = Address::create(&cut.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    c.persist();
    drop(c);
    std::fs::OpenOptions::new()
        .write(true)
        .open(cut.path())
        .unwrap()
        .set_len(4096)
        .unwrap();

    // The truncated ring's row has an error: the report is whole, the exit status 1.
    let o = run(&["top", "--json", "--interval", "0.3", "--prefix", &prefix()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("1 of 3 rings could not be read"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let h = by_ring(&rows, &healthy);
    assert_eq!(h["error"], Value::Null);
    assert_eq!(h["stats"]["consumer_attached"], true);
    assert_eq!(h["stats"]["records_consumed"], 4);
    assert!(h["stats"]["records_committed"].as_u64().unwrap() >= 10);
    assert_eq!(h["stats"]["producers"], 2);
    assert_eq!(h["stats"]["capacity"], 1 << 20);
    assert!(h["records_per_s"].as_f64().unwrap() > 0.0, "{h}");
    assert!(h["mb_per_s"].as_f64().unwrap() > 0.0, "{h}");
    // Files that are not shmring rings are not listed.
    for other in [&garbage, &small] {
        assert!(
            rows.iter().all(|r| r["ring"] != other.0.as_str()),
            "{} listed: {rows:?}",
            other.0
        );
    }
    let d = by_ring(&rows, &dead);
    assert_eq!(d["error"], Value::Null);
    assert_eq!(d["stats"]["consumer_attached"], false);
    let t = by_ring(&rows, &cut);
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains("the file is 4096 bytes but its header describes a ring of"),
        "{t}"
    );

    // The plain table: one row per ring, errors on their own row.
    let o = run(&["top", "--once", "--interval", "0.1", "--prefix", &prefix()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let table = String::from_utf8(o.stdout).unwrap();
    let line = |r: &Ring| {
        table
            .lines()
            .find(|l| l.starts_with(&r.0))
            .unwrap_or_else(|| panic!("no line for {} in\n{table}", r.0))
            .to_string()
    };
    assert!(table.starts_with("RING"), "{table}");
    assert!(line(&healthy).ends_with("alive"), "{table}");
    assert!(line(&dead).ends_with("gone"), "{table}");
    assert!(line(&cut).contains("error: "), "{table}");
    assert!(
        !table.contains(&garbage.0) && !table.contains(&small.0),
        "{table}"
    );

    // Named, a file that is not a ring says so.
    let o = run(&["top", "--json", "--interval", "0.1", "--ring", &garbage.0]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let g = by_ring(&rows, &garbage);
    assert!(
        g["error"]
            .as_str()
            .unwrap()
            .contains("not a shmring ring (bad magic"),
        "{g}"
    );

    busy.store(false, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    drop((consumer, producer, seg));
}

/// A Unix socket that is not a shmring consumer: it answers every connection with
/// an HTTP error and hangs up. Stopped on drop.
struct PlainSocket {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PlainSocket {
    fn bind(path: &Path) -> PlainSocket {
        use std::io::Write;
        let l = std::os::unix::net::UnixListener::bind(path).unwrap();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let mut reply = b"HTTP/1.0 400 Bad Request\r\n\r\n".to_vec();
                        reply.resize(256, b' ');
                        let _ = c.write_all(&reply);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        PlainSocket {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for PlainSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The row of the ring served on `sock`.
fn by_socket<'a>(rows: &'a [Value], sock: &Path) -> &'a Value {
    let name = sock.display().to_string();
    rows.iter()
        .find(|r| r["ring"] == name.as_str())
        .unwrap_or_else(|| panic!("no row for {name}: {rows:?}"))
}

#[test]
fn top_observes_rings_on_sockets_beside_named_rings() {
    let dir = tempfile::tempdir().unwrap();
    // A named ring with a consumer, beside the sockets.
    let named = new_ring("beside");
    let nseg = Address::create(&named.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let _nconsumer = nseg.consumer().unwrap();

    // Served on a socket by this process: a producer holds a reservation open while
    // another sends 10 records, which the consumer delivers past it (overtaking).
    let live = dir.path().join("live.sock");
    let seg = Address::memfd("ops-live", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = Consumer::with_options(
        seg.clone(),
        ConsumerOptions {
            overtake_after: Some(Duration::from_millis(20)),
            liveness_interval: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .unwrap();
    let listener = Listener::bind(&seg, &live, ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let mut video = seg.producer().unwrap();
    let mut audio = seg.producer().unwrap();
    let video_slot = video.slot();
    let held = video.reserve(10_000).unwrap();
    for i in 0..10u8 {
        audio.send(&[i; 1000], Meta::new(2, 0)).unwrap();
    }
    for _ in 0..10 {
        let f = consumer.next_timeout(Some(PATIENCE)).unwrap();
        assert_eq!(f.expect("delivered past the held claim").stream(), 2);
    }

    // A socket whose consumer was killed: the file stays, nothing accepts.
    let dead = dir.path().join("dead.sock");
    let out = tempfile::tempdir().unwrap();
    let mut rec = Proc::spawn_line(&format!(
        "record --listen {} --out {} --progress",
        dead.display(),
        out.path().display()
    ));
    rec.expect("ready");
    rec.kill();
    assert!(dead.exists(), "a killed recorder leaves its socket");

    // A socket that is not a shmring consumer at all.
    let plain = dir.path().join("plain.sock");
    let _plain = PlainSocket::bind(&plain);

    let sockets = dir.path().to_str().unwrap();
    let o = run_line(&format!(
        "top --json --interval 0.1 --ring {} --sockets {}",
        named.0, sockets
    ));
    // Two rows have errors: the report is whole, the exit status 1.
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let n = by_ring(&rows, &named);
    assert_eq!(
        (n["source"].as_str(), &n["error"]),
        (Some("shm"), &Value::Null)
    );
    let l = by_socket(&rows, &live);
    assert_eq!(l["source"], "socket");
    assert_eq!(l["error"], Value::Null, "{l}");
    let st = &l["stats"];
    assert_eq!(st["records_committed"], 10);
    assert_eq!(st["records_consumed"], 10);
    assert_eq!(st["consumer_attached"], true);
    assert_eq!(st["stalled_claims"], 1, "{st}");
    assert!(st["oldest_pending_age_ns"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["oldest_pending_slot"], video_slot);
    assert_eq!(st["oldest_pending_pid"], std::process::id());
    let d = by_socket(&rows, &dead)["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(d.starts_with("consumer gone"), "{d}");
    let p = by_socket(&rows, &plain)["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(p.contains("not a shmring hand-off reply"), "{p}");

    // The plain table, sorted by the oldest claim: the held one comes first, with
    // its slot and pid; the errors are on their own rows.
    let o = run_line(&format!(
        "top --once --interval 0.1 --sort claim --ring {} --sockets {}",
        named.0, sockets
    ));
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let table = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("RESETS") && lines[0].contains("OLDEST CLAIM"),
        "{table}"
    );
    assert!(lines[1].starts_with(&live.display().to_string()), "{table}");
    let claim = format!("s slot {video_slot} pid {}", std::process::id());
    assert!(lines[1].contains(&claim), "{claim:?} not in\n{table}");
    assert!(lines[1].ends_with("alive"), "{table}");
    let row = |p: &Path| {
        let name = p.display().to_string();
        lines
            .iter()
            .find(|l| l.starts_with(&name))
            .unwrap_or_else(|| panic!("no line for {name} in\n{table}"))
            .to_string()
    };
    assert!(row(&dead).contains("error: consumer gone"), "{table}");
    assert!(row(&plain).contains("error: hand-off over"), "{table}");

    held.commit(Meta::new(1, 0)).unwrap();
    drop(listener);
    assert!(!live.exists(), "the listener removes its socket");
}

#[test]
fn top_says_a_ring_that_never_existed_is_not_found_and_exits_1() {
    let never = new_ring("never");
    let o = run(&["top", "--json", "--interval", "0.05", "--ring", &never.0]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let e = by_ring(&rows, &never)["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        format!("not found (no /dev/shm/{})", never.0),
        "{rows:?}"
    );
    let o = run(&["top", "--once", "--interval", "0.05", "--ring", &never.0]);
    assert_eq!(o.status.code(), Some(1));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("error: not found"), "{table}");
    // Every ring readable: status 0.
    let (_seg, _c, _p) = with_records(&never, 1, b"x");
    let o = run(&["top", "--once", "--interval", "0.05", "--ring", &never.0]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn top_without_a_terminal_says_to_use_once() {
    assert_fails(&run(&["top"]), 2, &["needs a terminal", "--once"]);
    assert_fails(
        &run(&["top", "--once", "--interval", "0"]),
        2,
        &["--interval 0"],
    );
}
