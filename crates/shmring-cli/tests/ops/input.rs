//! The messages and exit codes of bad input: numbers out of range, video sizes,
//! capacities, ring addresses, a ring of another user, one too big for /dev/shm.

use super::*;

#[test]
fn a_negative_or_fractional_number_names_the_option_and_its_range() {
    for (line, option, range) in [
        (
            "record --create x --out /nonexistent --fps -30",
            "--fps",
            "from 1 to 4294967295",
        ),
        (
            "record --create x --out /nonexistent --capacity-mib -1",
            "--capacity-mib",
            "from 1 to",
        ),
        (
            "record --create x --out /nonexistent --capacity-mib 1.5",
            "--capacity-mib",
            "from 1 to",
        ),
        ("tap x --every -1", "--every", "from 1 to 4294967295"),
        ("tap x --stream -2", "--stream", "from 0 to 4294967295"),
        ("produce --ring x --block-ms -5", "--block-ms", "from 0 to"),
        ("produce --ring x --streams -1", "--streams", "from 0 to"),
        ("stat x --count -1", "--count", "from 0 to"),
    ] {
        let o = run_line(line);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{line}: {err}");
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            err.contains(&format!("invalid value '{value}' for '{option}"))
                && err.contains(&format!("expected a whole number {range}")),
            "{line}: {err}"
        );
    }
    // A negative number of seconds is a value too (and refused by its own check).
    let o = run_line("top --once --interval -1");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--interval -1"));
}

#[test]
fn a_named_ring_of_another_user_says_how_to_share_a_ring() {
    let ring = new_ring("perm");
    let (_seg, _c, _p) = with_records(&ring, 1, b"x");
    // As root, another uid; otherwise a file this user may not open.
    // SAFETY: geteuid has no preconditions.
    let o = if unsafe { libc::geteuid() } == 0 {
        std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(common::EXE)
            .args(["stat", "--json", &ring.0])
            .output()
            .unwrap()
    } else {
        std::fs::set_permissions(
            ring.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o000),
        )
        .unwrap();
        run(&["stat", "--json", &ring.0])
    };
    assert_fails(
        &o,
        1,
        &[
            &ring.0,
            "Permission denied",
            "--listen",
            "--allow-uid",
            "--connect",
        ],
    );
}

#[test]
fn seconds_are_range_checked_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    let out_s = out.to_str().unwrap();
    let ring = new_ring("seconds");
    for bad in ["-1", "0", "nan"] {
        assert_fails(
            &run_line(&format!(
                "record --create {} --out {} --seconds {}",
                ring.0, out_s, bad
            )),
            2,
            &[
                &format!("--seconds {}", bad.replace("nan", "NaN")),
                "expected more than 0",
            ],
        );
        assert_fails(
            &run(&["produce", "--ring", &ring.0, "--seconds", bad]),
            2,
            &["--seconds", "expected more than 0"],
        );
        assert_fails(
            &run(&["demo", "--out", out_s, "--seconds", bad]),
            2,
            &["--seconds", "expected more than 0"],
        );
    }
    assert!(!out.exists());
    assert!(!ring.path().exists());
}

#[test]
fn video_sizes_say_which_part_is_wrong() {
    for (video, needle) in [
        (
            "100000x100000@30",
            "width \"100000\" is not a whole number from 1 to 16384",
        ),
        (
            "1920x0@30",
            "height \"0\" is not a whole number from 1 to 16384",
        ),
        (
            "1920x1080@0",
            "frame rate \"0\" is not a whole number from 1 to 1000",
        ),
        ("1920x1080@fast", "frame rate \"fast\""),
        ("1920x1080", "expected WIDTHxHEIGHT@FPS"),
        ("32x8@30", "too small to carry the frame number"),
    ] {
        assert_fails(
            &run(&["produce", "--ring", "x", "--video", video]),
            2,
            &[&format!("--video {video:?}"), needle],
        );
    }
}

#[test]
fn capacity_errors_speak_mib() {
    let ring = new_ring("mib");
    let dir = tempfile::tempdir().unwrap();
    let o = run_line(&format!(
        "record --capacity-mib 12 --create {} --out {}",
        ring.0,
        dir.path().display()
    ));
    assert_fails(
        &o,
        2,
        &["--capacity-mib 12", "a power of two from 8 to 2048 MiB"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("bytes"), "{err}");
}

#[test]
fn every_command_takes_a_ring_address() {
    let ring = new_ring("address");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = start_recorder(&ring.0, &dir.path().join("named"));
    let forms = [
        ring.0.clone(),
        format!("shm:{}", ring.0),
        format!("/dev/shm/{}", ring.0),
    ];
    for text in &forms {
        stat_and_produce(text);
    }
    rec.kill();

    // A ring served on a socket, by unix:PATH and by its path.
    let sock = dir.path().join("ring.sock");
    let s = sock.to_str().unwrap();
    let listen = Proc::spawn(&[
        "record",
        "--listen",
        s,
        "--out",
        dir.path().join("sock").to_str().unwrap(),
    ]);
    listen.expect("ready");
    for text in [format!("unix:{s}"), s.to_string()] {
        stat_and_produce(&text);
    }
    drop(listen);

    // Bad text: what is wrong, and which forms there are.
    assert_fails(
        &run(&["stat", "fd:3,x"]),
        1,
        &["\"x\" is not a descriptor number", "unix:PATH"],
    );
    assert_fails(
        &run(&["produce", "--ring", "cam:0", "--seconds", "0.1"]),
        2,
        &["unknown form \"cam\"", "shm:cam:0"],
    );
    assert_fails(&run(&["stat", "create:x"]), 1, &["reads an existing ring"]);
}

#[test]
fn a_ring_too_big_for_dev_shm_is_refused_at_once_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let mut cmd = match shmring_testkit::small_shm::command(20, 60, common::EXE) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED a_ring_too_big_for_dev_shm_is_refused_at_once_saying_why: {why}");
            return;
        }
    };
    // /dev/shm is 20 MiB: a 64 MiB ring does not fit.
    let o = cmd
        .args([
            "record",
            "--create",
            "big",
            "--capacity-mib",
            "64",
            "--out",
            &out,
        ])
        .args(["--seconds", "5"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_fails(
        &o,
        1,
        &[
            "cannot create ring \"big\"",
            "not enough room in /dev/shm",
            "needs 64.",
            "20.0 MiB free of 20.0 MiB",
            "--shm-size",
            "medium: Memory",
        ],
    );
}
