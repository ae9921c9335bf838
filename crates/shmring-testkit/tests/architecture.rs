//! ARCHITECTURE.md's table is the rule for dependencies between our crates: each
//! workspace package has a row, and its normal dependencies on our crates are
//! exactly those its row allows (`cargo metadata` reads the manifests).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The table's rows: crate name -> the crates it may depend on.
fn allowed() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            let name = names(cells[0]).into_iter().next().expect("a crate name");
            (name, names(cells[cells.len() - 1]))
        })
        .collect()
}

/// Each workspace package and its normal dependencies on workspace packages.
fn actual() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null()) // normal, not dev or build
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|n| ours.contains(n))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_what_architecture_md_allows() {
    let (allowed, actual) = (allowed(), actual());
    assert!(actual.len() >= 10, "workspace packages: {actual:?}");
    let listed: BTreeSet<&String> = allowed.keys().collect();
    let members: BTreeSet<&String> = actual.keys().collect();
    assert_eq!(
        listed, members,
        "ARCHITECTURE.md's table lists exactly the workspace's packages"
    );
    for (name, deps) in &actual {
        assert_eq!(
            deps, &allowed[name],
            "{name}: its dependencies on our crates (left) are not what ARCHITECTURE.md allows (right)"
        );
    }
}

#[test]
fn the_table_is_read() {
    let allowed = allowed();
    assert!(allowed["shmring"].is_empty());
    assert_eq!(
        allowed["shmring-cli"],
        ["shmring", "shmring-bench", "shmring-host"]
            .map(String::from)
            .into()
    );
}
