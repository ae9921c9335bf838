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

/// The C `shmring_stats` struct names the core's counters (`shmring::Stats::fields()`),
/// in the same order: a counter added to the core and not to the C struct (or the
/// other way round) fails here.
#[test]
fn stats_struct_lists_the_cores_fields() {
    let header = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/shmring.h"),
    )
    .expect("read include/shmring.h");
    let start = header
        .find("typedef struct shmring_stats {")
        .expect("include/shmring.h defines struct shmring_stats");
    let end = start + header[start..].find('}').expect("the struct ends");
    let c_fields: Vec<&str> = header[start..end]
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("//") && !l.starts_with("/*") && !l.starts_with('*')
        })
        .map(|l| {
            let decl = l.trim_end_matches(';');
            decl.rsplit(' ').next().expect("a field name")
        })
        .collect();
    let core: Vec<&str> = shmring::Stats::default().fields().map(|f| f.name).collect();
    assert_eq!(
        c_fields, core,
        "struct shmring_stats must list shmring::Stats::fields() in order"
    );
}
