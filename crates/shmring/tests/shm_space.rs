//! A ring that does not fit in `/dev/shm` fails when it is created, saying so
//! (the size needed, the room free, how to make more), and leaves no file; a page
//! the kernel cannot provide later is reported as a full `/dev/shm`, not as a peer's
//! truncation. Each test runs its body in a child process whose `/dev/shm` is a
//! 20 MiB tmpfs of its own (`shmring_testkit::small_shm`).

use std::os::fd::AsFd;
use std::process::Stdio;

use shmring::{Address, Config, Error, Meta, Room};

const ENTRY: &str = "shm_space_child_entry";
const ROLE: &str = "SHMRING_SHM_SPACE_ROLE";
const MIB: u64 = 1 << 20;

/// Runs `role` in a child with a 20 MiB `/dev/shm`; false when that cannot be done
/// here (the reason is printed).
fn in_small_shm(role: &str) -> bool {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match shmring_testkit::small_shm::command(20, 120, exe.to_str().unwrap()) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED {role}: {why}");
            return false;
        }
    };
    let out = cmd
        .args(["--exact", ENTRY, "--nocapture", "--test-threads=1", "-q"])
        .env(ROLE, role)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{role} failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&format!("@@{role} ok")), "{text}");
    true
}

fn shm_files() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// Fills `/dev/shm` with a file of `bytes` (all of what is free when `None`).
fn fill(bytes: Option<u64>) {
    let f = std::fs::File::create("/dev/shm/filler").unwrap();
    let len = bytes.unwrap_or_else(|| {
        let s = rustix::fs::statvfs("/dev/shm").unwrap();
        s.f_bavail * s.f_frsize
    });
    rustix::fs::fallocate(f.as_fd(), rustix::fs::FallocateFlags::empty(), 0, len).unwrap();
}

fn too_big_at_creation() {
    // 64 MiB asked on a 20 MiB /dev/shm.
    let e = Address::create("space-big", Config::with_capacity(64 * MIB))
        .open()
        .unwrap_err();
    let Error::NoSpace {
        needed,
        room: Room::ShmDir { free, size },
        later: false,
        ..
    } = &e
    else {
        panic!("not NoSpace at creation: {e}");
    };
    assert!(*needed > 64 * MIB, "{e}");
    assert_eq!((*free, *size), (20 * MIB, 20 * MIB), "{e}");
    let words = e.to_string();
    for w in [
        "/space-big",
        "/dev/shm",
        "64.",
        "20.0 MiB free",
        "--shm-size",
        "medium: Memory",
    ] {
        assert!(words.contains(w), "{w:?} not in: {words}");
    }
    assert!(shm_files().is_empty(), "left behind: {:?}", shm_files());

    // An 8 MiB ring with 2 MiB free.
    fill(Some(18 * MIB));
    let e = Address::create("space-8", Config::with_capacity(8 * MIB))
        .open()
        .unwrap_err();
    assert!(
        matches!(&e, Error::NoSpace { room: Room::ShmDir { free, .. }, .. } if *free == 2 * MIB),
        "{e}"
    );
    assert_eq!(shm_files(), ["filler"]);
    // One that fits is made, and its pages are taken from /dev/shm at once.
    std::fs::remove_file("/dev/shm/filler").unwrap();
    let seg = Address::create("space-ok", Config::with_capacity(8 * MIB))
        .open()
        .unwrap();
    let s = rustix::fs::statvfs("/dev/shm").unwrap();
    let used = (s.f_blocks - s.f_bfree) * s.f_frsize;
    assert!(used >= seg.geometry().total_size, "only {used} bytes taken");
}

fn page_missing_later() {
    let seg = Address::create("space-later", Config::with_capacity(4 * MIB))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let mut producer = seg.producer().unwrap();
    // A peer gives the data ring's pages back (the file keeps its size), then the
    // rest of /dev/shm fills up: the next page written cannot be provided.
    let g = seg.geometry();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/shm/space-later")
        .unwrap();
    rustix::fs::fallocate(
        file.as_fd(),
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        g.data_offset,
        g.total_size - g.data_offset,
    )
    .unwrap();
    fill(None);
    let e = (0..10_000)
        .find_map(|_| match producer.send(&[7u8; 60_000], Meta::new(0, 0)) {
            Ok(()) => consumer.try_next().err(),
            Err(e) => Some(e),
        })
        .expect("a write to a page /dev/shm cannot provide fails");
    assert!(
        matches!(
            &e,
            Error::NoSpace {
                later: true,
                room: Room::ShmDir { free: 0, .. },
                ..
            }
        ),
        "not a full /dev/shm: {e}"
    );
    assert!(e.to_string().contains("/dev/shm is full"), "{e}");
    assert!(seg.truncated());
}

#[test]
fn shm_space_child_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "too_big_at_creation" => too_big_at_creation(),
        "page_missing_later" => page_missing_later(),
        r => panic!("unknown role {r}"),
    }
    println!("@@{role} ok");
}

#[test]
fn a_ring_that_does_not_fit_in_dev_shm_fails_at_creation_and_says_why() {
    in_small_shm("too_big_at_creation");
}

#[test]
fn a_page_dev_shm_cannot_provide_later_is_reported_as_a_full_dev_shm() {
    in_small_shm("page_missing_later");
}
