//! One test per forgery class (see `shmring-verify forgeries --list`): the forger
//! stops, then honest producers' records flow again and every record sent from
//! then on is delivered exactly once, with no process restarted and no reset by
//! the application. Each case runs in its own `shmring-verify` process.

use std::process::Command;

fn run(case: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_shmring-verify"))
        .args([
            "forgeries",
            "--runs",
            "1",
            "--records",
            "100",
            "--only",
            case,
        ])
        .output()
        .expect("run shmring-verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("[PASS] {case} recovered")),
        "{case}: exit {:?}\n{text}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { run(stringify!($name)); })*
        const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

cases!(
    identity_magic,
    identity_version,
    identity_control_size,
    identity_capacity,
    identity_max_record,
    identity_log_entries,
    identity_max_producers,
    identity_flags,
    identity_data_offset,
    identity_total_size,
    write_cursor_max,
    write_cursor_beyond_capacity,
    write_cursor_seq_plus_2n,
    write_cursor_seq_minus_2n,
    write_cursor_seq_plus_5,
    write_cursor_position_shifted,
    read_cursor_random,
    read_cursor_ahead,
    log_entry_future,
    log_entry_stale,
    log_entry_every_one_random,
    claim_naming_a_free_slot,
    claim_naming_a_missing_slot,
    claim_naming_a_live_producer,
    claim_and_open_word_of_a_live_producer,
    claim_units_zero,
    claim_units_beyond_capacity,
    slots_all_active,
    slots_random,
    slots_open_claim_copies,
    futex_words_and_waiting_counts,
    consumer_role,
    counters,
    control_block_random,
);

/// Every case the suite knows has a test here.
#[test]
fn every_case_is_tested() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmring-verify"))
        .args(["forgeries", "--list"])
        .output()
        .expect("run shmring-verify");
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect();
    assert!(!listed.is_empty());
    for name in &listed {
        assert!(NAMES.contains(&name.as_str()), "case {name} has no test");
    }
    assert_eq!(listed.len(), NAMES.len());
}
