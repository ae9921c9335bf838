//! The checked-in include/shmring.h must match what cbindgen generates from the
//! sources. Regenerate with `SHMRING_BLESS=1 cargo test -p shmring-ffi --test header`
//! (or `make -C crates/shmring-ffi header`).

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("crates/shmring-ffi/cbindgen.toml parses");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");
    let path = crate_dir.join("../../include/shmring.h");
    if std::env::var_os("SHMRING_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/shmring.h");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "include/shmring.h is stale: regenerate it with \
         `make -C crates/shmring-ffi header` and commit the result"
    );
}

/// The fields of `typedef struct NAME { ... }` in the header, padding (`reserved`)
/// left out.
fn c_struct_fields(header: &str, name: &str) -> Vec<String> {
    let start = header
        .find(&format!("typedef struct {name} {{"))
        .unwrap_or_else(|| panic!("include/shmring.h defines struct {name}"));
    let end = start + header[start..].find('}').expect("the struct ends");
    header[start..end]
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("//") && !l.starts_with("/*") && !l.starts_with('*')
        })
        .map(|l| {
            let decl = l.trim_end_matches(';');
            decl.rsplit(' ').next().expect("a field name").to_string()
        })
        .filter(|f| f != "reserved")
        .collect()
}

/// The C structs that mirror the core's snapshots name the core's fields
/// (`shmring::Snapshot::fields()`), in the same order: a field added to the core and
/// not to the C struct (or the other way round) fails here.
#[test]
fn c_snapshots_list_the_cores_fields() {
    use shmring::Snapshot;
    let header = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/shmring.h"),
    )
    .expect("read include/shmring.h");
    fn names(s: &impl Snapshot) -> Vec<&'static str> {
        s.fields().map(|f| f.name).collect()
    }
    for (c, core) in [
        ("shmring_stats", names(&shmring::Stats::default())),
        (
            "shmring_tether_info",
            names(&shmring::TetherInfo::default()),
        ),
        ("shmring_tap_counters", names(&shmring::TapStats::default())),
        (
            "shmring_handoff_stats",
            names(&shmring::handoff::ListenerStats::default()),
        ),
    ] {
        assert_eq!(
            c_struct_fields(&header, c),
            core,
            "struct {c} must list the core's fields in order"
        );
    }
}

/// The C consumer options take the core's names (`shmring::ConsumerSettings`), a
/// duration's with its unit: `_ns` (in the order that packs the struct).
#[test]
fn c_consumer_options_take_the_cores_names() {
    let header = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/shmring.h"),
    )
    .expect("read include/shmring.h");
    let mut core: Vec<String> = shmring::ConsumerSettings::NAMES
        .iter()
        .map(|n| match *n {
            "spin" | "manual_reset" | "kind" | "stream" => n.to_string(),
            duration => format!("{duration}_ns"),
        })
        .collect();
    let mut c = c_struct_fields(&header, "shmring_consumer_options");
    // C says which of the optional `kind` and `stream` are set in one more field,
    // `filter`, so that a zeroed struct filters nothing.
    let filter = c
        .iter()
        .position(|f| f == "filter")
        .expect("a filter field");
    c.remove(filter);
    c.sort_unstable();
    core.sort_unstable();
    assert_eq!(c, core);
}
