//! The diagrams in docs/DESIGN.md are the ones in the code, line for line: the
//! segment's (§1, `layout.rs`) and the hand-off's hello and reply (§9,
//! `handoff/wire.rs`).

use std::path::Path;

/// The lines of the diagram whose first line contains every one of `first`, up to
/// its code fence, with `prefix` (a doc comment's) taken off.
fn block(text: &str, first: &[&str], prefix: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| first.iter().all(|f| l.contains(f)))
        .unwrap_or_else(|| panic!("a diagram starting with {first:?}"));
    lines[start..]
        .iter()
        .map(|l| l.strip_prefix(prefix).unwrap_or(l).trim_end())
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_string)
        .collect()
}

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[test]
fn design_md_shows_the_layout_diagram_of_layout_rs() {
    let first = ["offset 0", "little-endian"];
    let code = read("src/layout.rs");
    let doc = read("../../docs/DESIGN.md");
    let (a, b) = (block(&code, &first, "//! "), block(&doc, &first, ""));
    assert!(a.len() > 20, "found the diagram in layout.rs");
    assert_eq!(
        a, b,
        "docs/DESIGN.md §1 differs from the diagram in layout.rs"
    );
}

#[test]
fn design_md_shows_the_hand_off_messages_of_wire_rs() {
    let code = read("src/handoff/wire.rs");
    let doc = read("../../docs/DESIGN.md");
    for first in [["0 magic", "SRH?"], ["0 magic", "SRH!"]] {
        let (a, b) = (block(&code, &first, "//! "), block(&doc, &first, ""));
        assert!(
            (1..=4).contains(&a.len()),
            "found {first:?} in wire.rs: {a:?}"
        );
        assert_eq!(
            a, b,
            "docs/DESIGN.md §9 differs from handoff/wire.rs ({first:?})"
        );
    }
}
