//! Every binding takes every consumer option of the core's table
//! (`ConsumerSettings::OPTIONS`), spelled its own way, and the C struct and the
//! Node.js options name no option the core does not have: C `name` (`name_ns` for a
//! duration), Python `name=`, Node.js `camelName` (`camelNameMs`), Go `PascalName`.

use std::path::Path;

use shmring::{ConsumerSettings, SettingKind};

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The text from the line containing `start` to the first line that is `end`.
fn block<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("no {start:?}"));
    let rest = &text[from..];
    let to = rest
        .find(&format!("\n{end}\n"))
        .unwrap_or_else(|| panic!("no end {end:?} after {start:?}"));
    &rest[..to]
}

fn camel(name: &str, upper_first: bool) -> String {
    let mut out = String::new();
    for (i, w) in name.split('_').enumerate() {
        let mut c = w.chars();
        if let Some(f) = c.next() {
            if i > 0 || upper_first {
                out.extend(f.to_uppercase());
            } else {
                out.push(f);
            }
            out.push_str(c.as_str());
        }
    }
    out
}

#[test]
fn c_has_each_option_and_no_other() {
    let h = read("include/shmring.h");
    let st = block(
        &h,
        "typedef struct shmring_consumer_options {",
        "} shmring_consumer_options;",
    );
    let fields: Vec<&str> = st
        .lines()
        .filter_map(|l| l.trim().strip_suffix(';'))
        .filter(|l| l.starts_with("uint") || l.starts_with("int"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    let mut want: Vec<String> = ConsumerSettings::OPTIONS
        .iter()
        .map(|(n, k)| match k {
            SettingKind::Duration => format!("{n}_ns"),
            _ => n.to_string(),
        })
        .collect();
    // The filter's switch: which of `kind` and `stream` apply.
    want.push("filter".into());
    let mut have: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "shmring_consumer_options against the core's options"
    );
}

#[test]
fn python_takes_each_option() {
    let pyi = read("python/shmring/_shmring.pyi");
    let init = block(&pyi, "class Consumer(", "    ) -> None: ...");
    for (n, _) in ConsumerSettings::OPTIONS {
        assert!(
            init.contains(&format!("        {n}: ")),
            "Consumer(..., {n}=) is not in python/shmring/_shmring.pyi"
        );
    }
}

#[test]
fn node_takes_each_option_and_no_other() {
    let dts = read("node/index.d.ts");
    let init = block(&dts, "The core's consumer options", "}");
    let names: Vec<String> = init
        .lines()
        .filter_map(|l| l.trim().split_once("?:").map(|(n, _)| n.to_string()))
        .collect();
    let mut want: Vec<String> = ConsumerSettings::OPTIONS
        .iter()
        .map(|(n, k)| match k {
            SettingKind::Duration => format!("{}Ms", camel(n, false)),
            _ => camel(n, false),
        })
        .collect();
    let mut have = names;
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "node/index.d.ts's consumer options against the core's"
    );
}

#[test]
fn go_takes_each_option() {
    let go = read("go/consumer.go");
    let opts = block(&go, "type ConsumerOptions struct {", "}");
    let filter = block(&go, "type Filter struct {", "}");
    for (n, _) in ConsumerSettings::OPTIONS {
        let field = camel(n, true);
        let declared = |text: &str| {
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(field.as_str()))
        };
        assert!(
            declared(opts) || declared(filter),
            "go/consumer.go: no field {field} in ConsumerOptions or Filter"
        );
    }
}
