//! What a new user meets first: `--version` (with the layout version), shell
//! completions and man pages generated from the command's definition, and the
//! messages of a ring or socket that is not there.

use std::os::unix::net::UnixListener;
use std::process::Command;

mod common;
use common::{assert_fails_with, ring_name, run, run_line};

#[test]
fn version_names_the_package_and_the_layout_version() {
    let o = run(&["--version"]);
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        out.trim(),
        format!(
            "shmring {} (layout version {})",
            env!("CARGO_PKG_VERSION"),
            shmring::layout::LAYOUT_VERSION
        )
    );
}

#[test]
fn bash_completion_script_loads_and_completes_subcommands_and_options() {
    let o = run(&["completions", "bash"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("shmring.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    // Loads the script into bash and asks it what `shmring re<TAB>` and `shmring
    // record --li<TAB>` and `shmring bench --work<TAB>` complete to.
    let complete = |words: &str| -> String {
        let prog = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; _shmring shmring; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        );
        let o = Command::new("bash").args(["-c", &prog]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let subs = complete("shmring re");
    assert!(subs.lines().any(|l| l == "record"), "{subs}");
    let opts = complete("shmring record --li");
    assert!(opts.lines().any(|l| l == "--listen"), "{opts}");
    // `bench` parses its own arguments; its completions are its own.
    let bench = complete("shmring bench --work");
    assert!(bench.lines().any(|l| l == "--workload"), "{bench}");

    for shell in ["zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert!(o.status.success() && !o.stdout.is_empty(), "{shell}");
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn man_pages_cover_every_visible_subcommand_and_render() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let o = run(&["manpages", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for sub in [
        "bench", "demo", "exporter", "produce", "record", "rm", "stat", "tap", "top",
    ] {
        assert!(pages.contains(&format!("shmring-{sub}.1")), "{pages:?}");
    }
    assert!(pages.contains(&"shmring.1".to_string()), "{pages:?}");
    assert!(
        !pages
            .iter()
            .any(|p| p.contains("worker") || p.contains("manpages")),
        "hidden subcommands have no page: {pages:?}"
    );
    // Each page is valid roff that man renders (man -l reads a file), with the
    // options of this build.
    let render = |page: &str| -> String {
        let o = Command::new("man")
            .args(["-l", out.join(page).to_str().unwrap()])
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let record = render("shmring-record.1");
    assert!(record.contains("--listen"), "{record}");
    assert!(record.contains("--refuse-stale"), "{record}");
    let bench = render("shmring-bench.1");
    assert!(bench.contains("--workload"), "{bench}");
    let top = render("shmring.1");
    assert!(top.contains("shmring-record(1)"), "{top}");
}

#[test]
fn a_missing_ring_names_both_ways_to_give_one() {
    // No ring given at all: clap names every way to give one.
    for (args, both) in [
        (&["produce"][..], "<--ring <NAME>|--connect <PATH>>"),
        (&["stat"][..], "<NAME|--connect <PATH>>"),
        (&["tap"][..], "<NAME|--connect <PATH>>"),
        (
            &["record", "--out", "x"][..],
            "<--create <NAME>|--listen <PATH>|--tethered <NAME>|--websocket <HOST:PORT>>",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(both), "{args:?}: {err}");
    }
    let o = run(&["produce", "--ring", "a", "--connect", "/tmp/b"]);
    assert_eq!(o.status.code(), Some(2));

    // A named ring that does not exist: how to make one, and --connect.
    let ring = ring_name("nosuchring");
    for args in [
        &["produce", "--ring", &ring.0, "--seconds", "0.1"][..],
        &["stat", &ring.0][..],
    ] {
        assert_fails_with(
            &run(args),
            1,
            &[
                &format!("ring {:?} does not exist", ring.0),
                &format!("shmring record --create {}", ring.0),
                "--connect PATH",
            ],
        );
    }
}

#[test]
fn a_socket_that_is_not_there_is_called_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cam0.sock");
    let s = sock.to_str().unwrap();
    let listen = format!("shmring record --listen {s}");
    // Nothing there.
    for args in [
        &["produce", "--connect", s, "--seconds", "0.1"][..],
        &["stat", "--connect", s][..],
        &["tap", "--connect", s][..],
    ] {
        let o = run(args);
        assert_fails_with(&o, 1, &[&format!("socket {s} does not exist"), &listen]);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("segment"));
    }
    // A socket file nobody accepts on: a consumer that exited left it.
    drop(UnixListener::bind(&sock).unwrap());
    let o = run(&["produce", "--connect", s, "--seconds", "0.1"]);
    assert_fails_with(&o, 1, &[s, "no consumer accepts connections", &listen]);
    // A file that is no socket.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let f = file.to_str().unwrap();
    let o = run(&["produce", "--connect", f, "--seconds", "0.1"]);
    assert_fails_with(&o, 1, &[&format!("{f} is not a socket"), "--listen"]);
}

#[test]
fn long_work_says_how_it_goes_on_stderr_when_it_is_not_a_terminal() {
    // record: a status line (the first at once, then every 10 s) before its summary.
    let ring = ring_name("status");
    let dir = tempfile::tempdir().unwrap();
    let o = run_line(&format!(
        "record --create {} --out {} --seconds 1.2",
        ring.0,
        dir.path().display()
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let status = format!("shmring record: {}: ", ring.0);
    let line = err
        .lines()
        .find(|l| l.starts_with(&status))
        .unwrap_or_else(|| panic!("no status line in {err}"));
    for needle in ["video 0", "audio 0", "ring 0.0/", "drops 0"] {
        assert!(line.contains(needle), "{line}");
    }
    // With --progress (JSON lines for programs), no status line.
    let o = run_line(&format!(
        "record --create {} --out {} --seconds 0.8 --progress",
        ring.0,
        dir.path().display()
    ));
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains(&status));
    // bench: its line per run is checked by shmring-bench's tests/transports.rs.
}
