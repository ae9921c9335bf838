//! The segment diagram in docs/DESIGN.md §1 is the one in `layout.rs`, line for line.

fn diagram(text: &str, prefix: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("offset 0") && l.contains("little-endian"))
        .expect("the diagram's first line");
    lines[start..]
        .iter()
        .map(|l| l.strip_prefix(prefix).unwrap_or(l).trim_end())
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_string)
        .collect()
}

#[test]
fn design_md_shows_the_layout_diagram_of_layout_rs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let code = std::fs::read_to_string(root.join("src/layout.rs")).expect("read layout.rs");
    let doc = std::fs::read_to_string(root.join("../../docs/DESIGN.md")).expect("read DESIGN.md");
    let (a, b) = (diagram(&code, "//! "), diagram(&doc, ""));
    assert!(a.len() > 20, "found the diagram in layout.rs");
    assert_eq!(
        a, b,
        "docs/DESIGN.md §1 differs from the diagram in layout.rs"
    );
}
