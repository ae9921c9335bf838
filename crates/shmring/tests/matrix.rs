//! The one-write liveness matrix (`shmring_testkit::matrix`): for each 8-byte word
//! of the control block, the slot table and the claim log, each boundary value and
//! each ring state, one write and the writer gone must leave a ring whose honest
//! producers' records reach the consumer again within a second and arrive exactly
//! once from then on.
//!
//! `make test` runs the representative part (the cursors, the claim log entries
//! the states stand on, slot, tether, futex, role and identity words, every value
//! of each); `make test-hostile` runs every word (`SHMRING_MATRIX=full`).
//! `SHMRING_MATRIX_ONLY=text` keeps the cases whose id contains `text`;
//! `SHMRING_MATRIX_OUT=file` appends every outcome to `file`.

use shmring_testkit::matrix::{representative, run, writer_child, Matrix, State};

/// Not a test: the writer process of the `writer-died` state (this binary, run
/// again for this test; returns at once in the test run).
#[test]
fn child_process_entry() {
    writer_child();
}

fn check(state: State) {
    let m = Matrix::new();
    let full = std::env::var("SHMRING_MATRIX").is_ok_and(|v| v == "full");
    let mut cases = m.cases(&[state], |w| full || representative(w));
    if let Ok(only) = std::env::var("SHMRING_MATRIX_ONLY") {
        cases.retain(|c| c.id().contains(only.as_str()));
    }
    let r = run(&cases);
    eprintln!("{}: {}", state.name(), r.text());
    assert!(r.failures.is_empty(), "{} cases failed", r.failures.len());
}

#[test]
fn empty() {
    check(State::Empty);
}

#[test]
fn partly_full() {
    check(State::PartlyFull);
}

#[test]
fn full() {
    check(State::Full);
}

#[test]
fn claim_pending() {
    check(State::ClaimPending);
}

#[test]
fn frames_held() {
    check(State::FramesHeld);
}

#[test]
fn tethered() {
    check(State::Tethered);
}

#[test]
fn writer_died() {
    check(State::WriterDied);
}
