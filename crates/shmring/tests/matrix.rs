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
    let m = Matrix::for_state(state);
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

#[test]
fn placed() {
    check(State::Placed);
}

/// One case by id, which must pass. The cases below are the smallest of each
/// class of failure the full matrix found in the core as it was when the matrix
/// was written; they stay here so the core's fix lands with them.
fn case(id: &str) {
    let m = Matrix::new();
    let c = m.case(id).unwrap_or_else(|| panic!("no case {id}"));
    let r = run(&[c]);
    assert!(r.failures.is_empty(), "{}", r.text());
}

/// A reset with nothing held publishes the old read position while the new
/// generation starts a ring ahead of it: the ring reads full, forever.
#[test]
fn a_write_cursor_a_ring_ahead_does_not_fill_the_ring_for_good() {
    case("empty/write/pos+cap");
}

/// The same reset path: any reset of a full ring keeps the lost records' space.
#[test]
fn a_reset_of_a_full_ring_gives_the_lost_records_space_back() {
    case("full/log[0]/=0");
}

/// A producer that attaches between the write and the consumer's repair of the
/// identity line must not keep the forged geometry (max_record 0: every record
/// too large).
#[test]
fn a_producer_attaching_before_the_repair_gets_the_real_max_record() {
    case("empty/identity.max_record/=0");
}

/// ... nor a forged producer count that moves the claim log (its claims land
/// where the consumer does not look).
#[test]
fn a_producer_attaching_before_the_repair_gets_the_real_claim_log() {
    case("empty/identity.log_entries|max_producers/max_producers+1");
}

/// A live producer's pending claim forged to Committed is handed out before its
/// producer commits; the producer is told Abandoned, sends again, and the record
/// arrives twice.
#[test]
fn a_forged_commit_of_a_pending_claim_delivers_nothing_twice() {
    case("claim-pending/log[1]/state=Committed");
}

/// A claim of the next generation forged ahead of the write cursor passes the
/// audit; producers reach it after records flowed again, the owner resets, and
/// the tethered consumer rebases on the write cursor at its next audit, losing
/// every record committed in between.
#[test]
fn a_tethered_consumer_loses_nothing_after_a_late_reset() {
    case("tethered/log[0]/stamp+N");
}
