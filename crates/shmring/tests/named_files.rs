//! Named rings and the files behind them: a name in /dev/shm is opened as the
//! file it is, never through a symbolic link (nor as a FIFO, which would block),
//! and a ring removes its file at the end only while the name is still its own
//! file, not one that replaced it.

mod common;

use std::ffi::CString;
use std::os::unix::fs::symlink;

use shmring::{Address, Config, Error, Meta, Segment};

/// A file removed on drop.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn says_link(e: &Error) -> bool {
    e.to_string().contains("symbolic link")
}

#[test]
fn a_symbolic_link_in_dev_shm_is_not_followed() {
    let real = common::shm_name("link-target");
    let link = common::shm_name("link");
    let seg = Address::create(&real.0, Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let _consumer = seg.consumer().unwrap();
    // A link to a ring file elsewhere (on disk: a copy of a real ring's bytes),
    // and a link to a ring this process has open.
    let image = Removed(std::env::temp_dir().join(format!("{}-image", link.0)));
    let image = &image.0;
    std::fs::copy(real.path(), image).unwrap();
    for target in [image.as_path(), real.path().as_path()] {
        let _ = std::fs::remove_file(link.path());
        symlink(target, link.path()).unwrap();
        let e = Address::named(&link.0).open().unwrap_err();
        assert!(says_link(&e), "{e}");
        assert!(e.to_string().contains(&link.0), "names the ring: {e}");
        let e = Address::named(&link.0).open_read_only().unwrap_err();
        assert!(says_link(&e), "{e}");
        let e = link.0.parse::<Address>().unwrap().open().unwrap_err();
        assert!(says_link(&e), "{e}");
    }
    // Nothing was written through the link.
    assert_eq!(
        std::fs::read(image).unwrap(),
        std::fs::read(real.path()).unwrap()
    );
    // The ring itself, by its own name, opens as ever.
    let p = Address::named(&real.0).open().unwrap();
    p.producer().unwrap().send(b"x", Meta::new(0, 0)).unwrap();
}

#[test]
fn a_fifo_in_dev_shm_is_refused_at_once() {
    let fifo = common::shm_name("fifo");
    let c = CString::new(fifo.path().to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Opened read-only, a FIFO with no writer would block for ever.
    let e = Address::named(&fifo.0).open_read_only().unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = Address::named(&fifo.0).open().unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

/// A ring whose file was removed and whose name now holds another ring (a
/// recorder restarted beside one still running) leaves that other ring's file
/// alone when it ends.
#[test]
fn a_ring_removes_only_its_own_file() {
    let name = common::shm_name("replaced");
    let cfg = Config::with_capacity(1 << 20);
    let first = Address::create(&name.0, cfg.clone()).open().unwrap();
    let _first_consumer = first.consumer().unwrap();
    Segment::unlink_named(&name.0).unwrap();
    let second = Address::create(&name.0, cfg).open().unwrap();
    let second_consumer = second.consumer().unwrap();
    drop(_first_consumer);
    drop(first);
    assert!(name.exists(), "the second ring's file is still there");
    let p = Address::named(&name.0).open().unwrap();
    p.producer()
        .unwrap()
        .send(b"still here", Meta::new(0, 0))
        .unwrap();
    assert_eq!(second_consumer.recv().unwrap().payload(), b"still here");
    drop((p, second_consumer, second));
    assert!(!name.exists(), "and it removes its own");
}

/// A ring is given its name only once it is whole: a process opening the name
/// while the ring is being made (a sink started before its consumer) finds no
/// file or a ring, never a short or unwritten file ("not a shmring ring").
#[test]
fn a_ring_being_made_is_not_there_or_whole() {
    let name = common::shm_name("made-whole");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opener = {
        let (name, stop) = (name.0.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut missing, mut opened) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match Address::named(&name).open_read_only() {
                    Ok(_) => opened += 1,
                    Err(Error::NotFound(_)) => missing += 1,
                    Err(e) => panic!("opened while being made: {e}"),
                }
            }
            (missing, opened)
        })
    };
    for _ in 0..200 {
        let seg = Address::create(&name.0, Config::with_capacity(1 << 20))
            .open()
            .unwrap();
        drop(seg);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (missing, _opened) = opener.join().unwrap();
    assert!(missing > 0);
    // Nothing left under the name or a temporary one.
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| {
            f.contains(name.0.trim_start_matches('/'))
                || f.contains(&format!("creating-{}-", std::process::id()))
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
