//! A live socket is never taken over, a stale one is replaced, and producers find
//! a restarted consumer again.

use super::*;

#[test]
fn a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced() {
    let dir = SockDir::new("stale");
    let seg = ring(false);
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default()).unwrap();
    let seg2 = ring(false);
    match Listener::bind(&seg2, dir.sock(), ListenerOptions::default()) {
        Err(Error::Handoff { what, .. }) => assert!(what.contains("live consumer"), "{what}"),
        r => panic!("expected an error, got {r:?}"),
    }
    // A stale socket file: its listener closed without removing it (as after a crash).
    drop(l);
    let stale = std::os::unix::net::UnixListener::bind(dir.sock()).unwrap();
    drop(stale); // the file stays, nobody accepts
    assert!(dir.sock().exists());
    // Every descriptor is copied into a child between its fork and its exec, so a
    // child another test spawns at this moment holds the socket for that instant:
    // wait for the one answer a socket nobody holds gives.
    wait_until("the stale socket to answer `no consumer`", GUARD, || {
        let r = Address::socket(dir.sock()).open();
        let stale = matches!(r, Err(Error::NoConsumer(_)));
        if !stale {
            eprintln!("a stale socket answered {r:?}");
        }
        stale
    });
    let mut replaced = None;
    wait_until("the stale socket to be replaced", GUARD, || {
        replaced = Listener::bind(&seg2, dir.sock(), ListenerOptions::default()).ok();
        replaced.is_some()
    });
    // Not a socket: left alone.
    let file = dir.0.join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(Listener::bind(&seg2, &file, ListenerOptions::default()).is_err());
    assert!(file.exists());
    // A named segment is not served.
    let name = common::shm_name("handoff-named");
    let named = Address::create(&name.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    match Listener::bind(&named, dir.0.join("n.sock"), ListenerOptions::default()) {
        Err(Error::Config(m)) => assert!(m.contains("not a sealed memfd"), "{m}"),
        r => panic!("expected a config error, got {r:?}"),
    }
}

#[test]
fn consumer_restart_producers_get_no_consumer_and_reconnect() {
    let dir = SockDir::new("restart");
    let sock = dir.sock().display().to_string();
    let mut first = spawn_child("serve", &[("SOCK", sock.clone()), ("N", "1000000".into())]);
    first.expect("READY", GUARD);
    let seg = Address::socket(&sock).open().unwrap();
    let mut p = seg.producer().unwrap();
    p.set_policy(FullPolicy::Block(Duration::from_millis(100)));
    p.send(b"before", Meta::new(0, 0)).unwrap();
    first.kill();
    // Nobody reads now: the ring fills, and the wait for space ends in NoConsumer.
    let err = loop {
        match p.send(&[0u8; 4096], Meta::new(0, 0)) {
            Ok(()) => continue,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::NoConsumer(_)), "{err}");
    assert!(matches!(
        Address::socket(&sock).open(),
        Err(Error::NoConsumer(_))
    ));
    drop(p);
    drop(seg);

    let mut second = spawn_child("serve", &[("SOCK", sock.clone()), ("N", "10".into())]);
    second.expect("READY", GUARD);
    let seg = Address::socket(&sock).open().unwrap();
    let mut p = seg.producer().unwrap();
    for _ in 0..10 {
        p.send(b"after", Meta::new(0, 0)).unwrap();
    }
    assert_eq!(second.expect("GOT", GUARD), "10");
    second.wait_ok(GUARD);
}
