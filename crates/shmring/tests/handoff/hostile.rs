//! Stalled, garbage and flooding clients leave the consumer delivering and its
//! descriptor count flat; a peer holding connections open locks nobody out.

use super::*;

/// The body of the flood test, in a child process of its own so that its
/// descriptor count is not disturbed by other tests running in parallel.
pub(crate) fn flood() {
    let dir = SockDir::new("flood");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        max_pending: 8,
        hello_timeout: Duration::from_millis(300),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    // A producer writing all along, and the consumer reading in this thread.
    let stop = Arc::new(AtomicBool::new(false));
    let prod = {
        let (seg, stop) = (seg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut p = seg.producer().unwrap();
            p.set_policy(FullPolicy::Block(Duration::from_millis(100)));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = p.send(&i.to_le_bytes(), Meta::new(0, 0));
                i += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let received = Arc::new(AtomicU64::new(0));
    let cons = {
        let (stop, received) = (stop.clone(), received.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if consumer
                    .next_timeout(Some(Duration::from_millis(20)))
                    .unwrap()
                    .is_some()
                {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    wait_until("first records", GUARD, || {
        received.load(Ordering::Relaxed) > 100
    });
    let base = open_fds();

    // Stalled clients fill the pending set. A ninth silent connection makes room
    // by pushing out the one that has waited longest without a hello (all are
    // this uid's); the others time out, and a producer still gets through.
    let mut stalled: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(dir.sock()).unwrap())
        .collect();
    wait_until("stalled clients pending", GUARD, || l.stats().pending == 8);
    let r0 = received.load(Ordering::Relaxed);
    wait_until("the consumer to deliver while clients stall", GUARD, || {
        received.load(Ordering::Relaxed) > r0 + 100
    });
    stalled.push(UnixStream::connect(dir.sock()).unwrap());
    wait_until("the oldest stalled client pushed out", GUARD, || {
        l.stats().refused_busy == 1
    });
    wait_until("stalled clients timed out", GUARD, || {
        l.stats().timed_out == 8
    });
    for (i, mut s) in stalled.into_iter().enumerate() {
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        let (status, rule) = if i == 0 {
            (6u8, "too-many-pending")
        } else {
            (5, "hello-timeout")
        };
        assert_eq!(reply.get(6), Some(&status), "stalled client {i}: {rule}");
    }
    // The clients that receive descriptors run in another process: this one's
    // descriptor table is the consumer's alone.
    let mut client = spawn_child(
        "flood-client",
        &[("SOCK", dir.sock().display().to_string())],
    );
    client.expect("DONE", GUARD);
    client.wait_ok(GUARD);
    drop(client); // its stdin pipe
    wait_until("every connection answered", GUARD, || {
        let s = l.stats();
        s.pending == 0 && s.refused_malformed + s.observers >= 1000
    });
    let r1 = received.load(Ordering::Relaxed);
    wait_until("the consumer to deliver after the flood", GUARD, || {
        received.load(Ordering::Relaxed) > r1 + 100
    });
    let after = open_fds();
    stop.store(true, Ordering::Relaxed);
    prod.join().unwrap();
    cons.join().unwrap();
    let s = l.stats();
    say(&format!(
        "DONE fds {base} {after} observers {} malformed {} busy {} timed_out {} producers {}",
        s.observers, s.refused_malformed, s.refused_busy, s.timed_out, s.producers
    ));
}

#[test]
fn stalled_garbage_and_flood_leave_consumer_delivering_and_fds_flat() {
    let mut c = spawn_child("flood", &[]);
    let msg = c.expect("DONE", Duration::from_secs(300));
    c.wait_ok(GUARD);
    let w: Vec<&str> = msg.split_whitespace().collect();
    assert_eq!(w[1], w[2], "descriptor count before and after: {msg}");
    let n = |i: usize| w[i].parse::<u64>().unwrap();
    // observers, malformed, timed out (7 stalled and the ninth), producers (the
    // one that got through after them); busy: the first stalled, pushed out.
    assert_eq!((n(4), n(6), n(10), n(12)), (250, 750, 8, 1), "{msg}");
    assert!(n(8) >= 1, "{msg}");
}

/// A peer that holds every pending connection open, replacing each one the
/// consumer drops, does not lock out others: an honest producer's hello is
/// answered as it is accepted, and only connections that stay silent give way
/// (the client retries while the consumer is busy).
#[test]
fn a_peer_holding_connections_open_does_not_lock_others_out() {
    let dir = SockDir::new("hog");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let opts = ListenerOptions {
        hello_timeout: Duration::from_secs(30),
        ..ListenerOptions::default()
    };
    let l = Listener::bind(&seg, dir.sock(), opts)
        .unwrap()
        .spawn()
        .unwrap();
    let max = ListenerOptions::default().max_pending;
    let hog = spawn_child(
        "hog",
        &[
            ("SOCK", dir.sock().display().to_string()),
            ("N", (max + 4).to_string()),
        ],
    );
    hog.expect("HOGGING", GUARD);
    wait_until("the hog fills the pending set", GUARD, || {
        l.stats().pending as usize == max
    });
    for i in 0..20u64 {
        let remote = Address::socket(dir.sock())
            .open()
            .unwrap_or_else(|e| panic!("connect {i} while a peer hogs the socket: {e}"));
        remote
            .producer()
            .unwrap()
            .send(&i.to_le_bytes(), Meta::new(0, 0))
            .unwrap();
        let f = consumer.recv().unwrap();
        assert_eq!(f.payload(), i.to_le_bytes());
    }
    assert_eq!(l.stats().producers, 20);
    assert!(
        l.stats().refused_busy > 0,
        "the hog was refused: {:?}",
        l.stats()
    );
    drop(hog);
}

/// A hello asking for `role`, as a peer sends it.
fn hello(role: Role) -> [u8; handoff::HELLO_LEN] {
    let mut h = [0u8; handoff::HELLO_LEN];
    h[..4].copy_from_slice(b"SRH?");
    h[4..6].copy_from_slice(&handoff::PROTOCOL_VERSION.to_le_bytes());
    h[6] = match role {
        Role::Producer => 1,
        Role::Observer => 2,
    };
    h
}

/// The status byte of the reply on `s` (read(2) discards the descriptors).
fn reply_status(s: &mut UnixStream) -> u8 {
    let mut reply = [0u8; handoff::REPLY_LEN];
    s.read_exact(&mut reply).unwrap();
    reply[6]
}

/// Every pending entry taken by silent connections of this uid, and this test
/// polling the listener itself (so the order is known): a peer whose hello is
/// there when it is accepted is answered without an entry; a hello that arrives
/// while its connection waits saves it when room is made; a new silent connection
/// pushes out the one that has waited longest without a hello, not the newest.
#[test]
fn a_full_pending_table_answers_hellos_and_pushes_out_the_longest_silent() {
    let dir = SockDir::new("full");
    let seg = ring(false);
    let opts = ListenerOptions {
        max_pending: 2,
        hello_timeout: GUARD,
        ..ListenerOptions::default()
    };
    let mut l = Listener::bind(&seg, dir.sock(), opts).unwrap();
    let mut poll_until = |what: &str, cond: &dyn Fn(&handoff::ListenerStats) -> bool| {
        let t = std::time::Instant::now();
        while !cond(&l.stats()) {
            assert!(t.elapsed() < GUARD, "timed out waiting for {what}: {l:?}");
            l.poll(Some(Duration::from_millis(10))).unwrap();
        }
        l.stats()
    };
    let silent = || UnixStream::connect(dir.sock()).unwrap();
    let mut a = silent();
    poll_until("a pending", &|s| s.pending == 1);
    let mut b = silent();
    poll_until("b pending", &|s| s.pending == 2);

    let mut h = silent();
    h.write_all(&hello(Role::Observer)).unwrap();
    let s = poll_until("h answered", &|s| s.observers == 1);
    assert_eq!((s.pending, s.refused_busy), (2, 0), "{s:?}");
    assert_eq!(reply_status(&mut h), 0, "h: granted");

    // a (the longest silent) says hello now; c arrives before a is read.
    a.write_all(&hello(Role::Observer)).unwrap();
    let _c = silent();
    let s = poll_until("a answered", &|s| s.observers == 2 && s.pending == 2);
    assert_eq!(s.refused_busy, 0, "{s:?}");
    assert_eq!(reply_status(&mut a), 0, "a: granted");

    // b has now waited longest without a hello: d pushes it out.
    let _d = silent();
    let s = poll_until("b pushed out", &|s| s.refused_busy == 1);
    assert_eq!(s.pending, 2, "{s:?}");
    assert_eq!(reply_status(&mut b), 6, "b: too-many-pending");
}
