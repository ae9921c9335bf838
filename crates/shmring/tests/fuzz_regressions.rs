//! Replays the fuzzing harness (fuzz/src/lib.rs) on stable Rust: every input kept in
//! fuzz/regressions/ (crashes once found, now fixed) and fuzz/seeds, plus
//! a few thousand pseudo-random programs from fixed seeds. The properties are the
//! fuzzer's: the consumer never panics, never hands out memory outside the segment,
//! every call returns, and records flow again once the program stops writing. Also
//! checks that `fuzz/boundary.dict` is the harness's dictionary.

#[allow(dead_code)]
#[path = "../../../fuzz/src/lib.rs"]
mod harness;

use std::path::Path;

/// Replays every input in `dir`; returns how many, and the ones that failed.
fn replay_dir(dir: &Path, with_producer: bool, failed: &mut Vec<String>) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_file() {
            let data = std::fs::read(&p).unwrap();
            // A failing input leaves nothing behind: the harness restores the ring
            // before every run, and unwinding drops its consumer and producer.
            if std::panic::catch_unwind(|| harness::run(&data, with_producer)).is_err() {
                failed.push(format!("{} (with_producer: {with_producer})", p.display()));
            }
            n += 1;
        }
    }
    n
}

#[test]
fn kept_inputs_replay_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failed = Vec::new();
    let mut n = replay_dir(&root.join("regressions"), true, &mut failed);
    n += replay_dir(&root.join("regressions"), false, &mut failed);
    n += replay_dir(&root.join("seeds/consumer_vs_segment"), false, &mut failed);
    n += replay_dir(
        &root.join("seeds/producers_and_scribbles"),
        true,
        &mut failed,
    );
    eprintln!("replayed {n} kept inputs");
    assert!(failed.is_empty(), "failed: {}", failed.join(", "));
}

#[test]
fn pseudo_random_programs() {
    // Fixed seeds, so a failure names a reproducible program.
    for seed in 1..=3000u64 {
        let len = 16 + (seed % 400) as usize;
        let data = shmring_testkit::Rng(seed).bytes(len);
        harness::run(&data, seed % 2 == 0);
    }
}

#[test]
fn the_dictionary_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/boundary.dict");
    let want = harness::dictionary();
    if std::env::var_os("SHMRING_WRITE_DICT").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "fuzz/boundary.dict is not the harness's dictionary: SHMRING_WRITE_DICT=1 cargo test \
         --release -p shmring --test fuzz_regressions the_dictionary_is_current"
    );
}
