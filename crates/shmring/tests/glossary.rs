//! DESIGN.md's glossary retires some words; the code of the core, the tools and the
//! bindings uses none of them (the table after the glossary lists each retired
//! phrase and what to say instead).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The quoted phrases of the "Retired words" table's first column, lower case.
fn retired() -> Vec<String> {
    let design = std::fs::read_to_string(root().join("docs/DESIGN.md")).expect("DESIGN.md");
    let table = design
        .split_once("\nRetired words")
        .expect("DESIGN.md has its table of retired words")
        .1;
    table
        .lines()
        .skip_while(|l| !l.starts_with("| retired"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            let first = l.trim_start_matches('|').split('|').next().unwrap_or("");
            first
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every source file under `dir` (recursively) with one of `exts`.
fn sources(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !matches!(name, "target" | "node_modules" | ".venv" | "__pycache__") {
                sources(&p, exts, out);
            }
        } else if p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| exts.contains(&x))
        {
            out.push(p);
        }
    }
}

#[test]
fn the_code_uses_no_retired_word() {
    let words = retired();
    assert!(
        words.len() >= 5 && words.iter().any(|w| w == "finishing cas"),
        "the table was read: {words:?}"
    );
    let mut files = Vec::new();
    for dir in ["crates", "python", "node", "go", "include"] {
        sources(
            &root().join(dir),
            &["rs", "py", "pyi", "js", "ts", "go", "h", "hpp", "c"],
            &mut files,
        );
    }
    assert!(files.len() > 100, "{} source files", files.len());
    let me = Path::new(file!()).file_name().unwrap();
    let mut found = Vec::new();
    for f in &files {
        if f.file_name() == Some(me) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            for w in &words {
                if lower.contains(w.as_str()) {
                    found.push(format!("{}:{}: \"{w}\"", f.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "retired words in the code:\n{}",
        found.join("\n")
    );
}
