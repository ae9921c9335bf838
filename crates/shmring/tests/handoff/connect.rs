//! Producers in other processes connect and write (with the ring's eventfd when
//! it has one); observers get a read-only descriptor the kernel refuses to map
//! writable; abstract socket names.

use super::*;

pub(crate) fn observe_raw() {
    if std::env::var_os("AS_NOBODY").is_some() {
        // SAFETY: plain system calls on our own credentials.
        unsafe {
            assert_eq!(libc::setgid(65534), 0);
            assert_eq!(libc::setuid(65534), 0);
            // Changing credentials made us non-dumpable, which alone would bar
            // /proc/self/fd: restore it, so that the file's mode is what is tested.
            assert_eq!(libc::prctl(libc::PR_SET_DUMPABLE, 1), 0);
        }
    }
    let got = handoff::request(env("SOCK"), Role::Observer, GUARD).unwrap();
    assert_eq!(
        got.fds.len(),
        1,
        "observers get the read-only segment alone"
    );
    let fd = got.fds.into_iter().next().unwrap();
    let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
    let rdonly = flags & rustix::fs::OFlags::RWMODE == rustix::fs::OFlags::RDONLY;
    let len = got.announced.total_size as usize;
    let map = writable_map_errno(fd.as_fd(), len);
    // A read-only mapping cannot be made writable later either.
    // SAFETY: a fresh read-only mapping, unmapped below.
    let p_ro = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            &fd,
            0,
        )
    }
    .unwrap();
    // SAFETY: the range is the mapping made above.
    let up = unsafe {
        rustix::mm::mprotect(
            p_ro,
            len,
            rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE,
        )
    }
    .err()
    .map(|e| e.raw_os_error());
    // SAFETY: our mapping.
    unsafe { rustix::mm::munmap(p_ro, len).unwrap() };
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    let reopen = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .err()
        .and_then(|e| e.raw_os_error());
    let chmod = rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o666))
        .err()
        .map(|e| e.raw_os_error());
    say(&format!(
        "DONE rdonly {rdonly} map {map:?} mprotect {up:?} reopen {reopen:?} fchmod {chmod:?}"
    ));
}

/// Returns the errno of a writable shared mapping of `fd` (None if it worked).
fn writable_map_errno(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> Option<i32> {
    // SAFETY: a fresh mapping chosen by the kernel; unmapped at once if it worked.
    let r = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            fd,
            0,
        )
    };
    match r {
        Ok(p) => {
            // SAFETY: the mapping we just made.
            unsafe {
                let _ = rustix::mm::munmap(p, len);
            }
            None
        }
        Err(e) => Some(e.raw_os_error()),
    }
}

#[test]
fn producer_in_another_process_connects_and_writes() {
    let dir = SockDir::new("produce");
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();
    let n = 5000u64;
    let mut child = spawn_child(
        "produce",
        &[
            ("SOCK", dir.sock().display().to_string()),
            ("N", n.to_string()),
        ],
    );
    for i in 0..n {
        let f = consumer
            .next_timeout(Some(GUARD))
            .unwrap()
            .expect("a record");
        assert_eq!(f.payload(), i.to_le_bytes(), "record {i}");
        assert_eq!(f.stream(), 7);
    }
    child.expect("DONE", GUARD);
    child.wait_ok(GUARD);
    wait_until("the hand-off counted", GUARD, || l.stats().producers == 1);
    let s = l.stats();
    assert_eq!((s.producers, s.observers, s.refused()), (1, 0, 0));
    drop(l);
    assert!(
        !dir.sock().exists(),
        "the socket file is removed with the listener"
    );
}

#[test]
fn eventfd_ring_hands_over_the_eventfd() {
    let dir = SockDir::new("eventfd");
    let seg = ring(true);
    let consumer = seg.consumer().unwrap();
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default()).unwrap();
    let l = l.spawn().unwrap();
    let remote = Address::socket(dir.sock()).open().unwrap();
    // The eventfd received is the ring's: a write on it wakes the consumer's.
    let efd = remote.eventfd().expect("an eventfd ring sends its eventfd");
    assert!(!consumer.arm(), "nothing in the ring yet");
    rustix::io::write(efd, &1u64.to_ne_bytes()).unwrap();
    let ring_efd = seg.eventfd().unwrap();
    let mut fds = [rustix::event::PollFd::new(
        &ring_efd,
        rustix::event::PollFlags::IN,
    )];
    let guard = rustix::time::Timespec {
        tv_sec: GUARD.as_secs() as _,
        tv_nsec: 0,
    };
    assert_eq!(rustix::event::poll(&mut fds, Some(&guard)).unwrap(), 1);
    consumer.disarm();
    // The producer's records arrive.
    remote
        .producer()
        .unwrap()
        .send(b"ev", Meta::new(1, 0))
        .unwrap();
    assert_eq!(consumer.recv().unwrap().payload(), b"ev");
    // Counted by the listener (before its reply went out).
    wait_until("the hand-off counted", GUARD, || l.stats().producers == 1);
}

#[test]
fn observer_gets_a_read_only_descriptor_the_kernel_will_not_map_writable() {
    let dir = SockDir::new("observe");
    let seg = ring(true);
    let consumer = seg.consumer().unwrap();
    let mut p = seg.producer().unwrap();
    for i in 0..3u8 {
        p.send(&[i; 100], Meta::new(0, 0)).unwrap();
    }
    let l = Listener::bind(&seg, dir.sock(), ListenerOptions::default())
        .unwrap()
        .spawn()
        .unwrap();

    // In another process: the descriptor received must stay out of this one, where
    // closing it would drop the consumer's record lock on the file.
    let sock = dir.sock().display().to_string();
    let mut c = spawn_child("observe-raw", &[("SOCK", sock.clone())]);
    let msg = c.expect("DONE", GUARD);
    c.wait_ok(GUARD);
    let eacces = libc::EACCES;
    assert!(
        msg.starts_with(&format!(
            "rdonly true map Some({eacces}) mprotect Some({eacces})"
        )),
        "{msg}"
    );

    // A read-only open of the socket: counters through the read-only mapping.
    let obs = Address::socket(dir.sock()).open_read_only().unwrap();
    let s = obs.stats();
    assert_eq!(s.records_committed, 3);
    assert!(s.consumer_attached);
    assert_eq!(obs.geometry(), seg.geometry());
    drop(consumer.recv().unwrap());
    assert_eq!(obs.stats().records_consumed, 1);
    wait_until("the hand-offs counted", GUARD, || l.stats().observers == 2);

    // Another uid, allowed as an observer: cannot map writable, cannot re-open the
    // memfd writable through /proc (its mode is 0400), cannot chmod it.
    if rustix::process::geteuid().is_root() {
        drop(l);
        let opts = ListenerOptions {
            observers: Allow::same_uid().uid(65534),
            ..ListenerOptions::default()
        };
        let _l = Listener::bind(&seg, dir.sock(), opts)
            .unwrap()
            .spawn()
            .unwrap();
        let mut c = spawn_child("observe-raw", &[("SOCK", sock), ("AS_NOBODY", "1".into())]);
        let msg = c.expect("DONE", GUARD);
        c.wait_ok(GUARD);
        let eperm = libc::EPERM;
        assert_eq!(
            msg,
            format!(
                "rdonly true map Some({eacces}) mprotect Some({eacces}) reopen Some({eacces}) \
                 fchmod Some({eperm})"
            )
        );
    } else {
        eprintln!("observer test: not root, the other-uid part is skipped");
    }
}

#[test]
fn abstract_socket_names_work() {
    let seg = ring(false);
    let consumer = seg.consumer().unwrap();
    let name = format!("@shmring-test-{}", std::process::id());
    let mut l = Listener::bind(&seg, &name, ListenerOptions::default()).unwrap();
    // Driven by poll from this thread (no listener thread): the client in another.
    let n2 = name.clone();
    let t =
        std::thread::spawn(move || Address::socket(n2).open().map(|s| s.producer().map(|_| ())));
    let done = AtomicBool::new(false);
    while !done.load(Ordering::Relaxed) {
        l.poll(Some(Duration::from_millis(20))).unwrap();
        if l.stats().producers == 1 {
            done.store(true, Ordering::Relaxed);
        }
    }
    t.join().unwrap().unwrap().unwrap();
    let remote = Address::socket(&name).open_timeout(Duration::from_millis(200));
    // Nobody polls now: the connect is accepted by the kernel's backlog and the
    // reply never comes, so the client's own timeout ends it.
    assert!(matches!(remote, Err(Error::Timeout { .. })), "{remote:?}");
    drop(consumer);
}
