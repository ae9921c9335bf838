//! Man pages and shell completions, generated from the command-line definition
//! ([`crate::cli::Cli`], with `bench`'s own arguments from the shmring-bench crate),
//! so they always describe the options this build takes. Each page has the
//! command's description, its options, examples and related pages
//! (`shmring manpages DIR`; `make man` writes them into target/man).

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::{fail, CmdError};

/// The whole command: [`Cli`], with the `bench` subcommand's arguments (parsed by
/// shmring-bench itself) in place of its pass-through.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommand("bench", |old| {
        // The one-line summary is the top-level list's; bench's own description
        // becomes the page's.
        let mut bench = shmring_bench::command().name("bench");
        if let Some(long) = bench.get_about().cloned() {
            bench = bench.long_about(long);
        }
        match old.get_about() {
            Some(short) => bench.about(short.clone()),
            None => bench,
        }
    })
}

/// `shmring completions SHELL`: the completion script on `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> Result<(), CmdError> {
    let mut cmd = command();
    clap_complete::generate(shell, &mut cmd, "shmring", out);
    out.flush()
        .map_err(|e| fail(1, format!("cannot write the completion script: {e}")))
}

/// What a page says beyond the options: its description (paragraphs, after the
/// command's one-line summary) and examples (a command, and what it does).
struct Page {
    name: &'static str,
    description: &'static [&'static str],
    examples: &'static [(&'static str, &'static str)],
}

const PAGES: &[Page] = &[
    Page {
        name: "shmring",
        description: &[
            "shmring moves raw video and audio between processes on one Linux host through \
             a lock-free ring in shared memory: producers write each frame once, in place; \
             the consumer reads it in place.",
            "A ring is either named (a file in /dev/shm, opened by name by processes of the \
             same user) or a sealed memfd that its consumer serves on a Unix socket \
             (shmring record --listen PATH), which producers of other users and containers \
             connect to, checked by uid. A ring reserves its memory when it is made: one \
             that does not fit in /dev/shm (or, for a memfd, in the consumer's memory limit) \
             is refused at once, saying how much it needs and how much is free.",
            "Each subcommand has its own page: shmring-record(1), shmring-produce(1), \
             shmring-stat(1), shmring-top(1) and so on.",
            "Exit status: 0 on success, 1 when the command failed (the message on standard \
             error names the ring and the cause), 2 for a usage error.",
        ],
        examples: &[
            ("shmring demo", "a producer and a recorder process on a fresh ring, 10 s"),
            (
                "shmring record --create cam0 --out rec/ &",
                "create the named ring /dev/shm/cam0 and record what arrives",
            ),
            (
                "shmring produce --ring cam0 --seconds 10",
                "10 s of test-pattern video and a tone into it",
            ),
            ("shmring top", "every ring on this host, live"),
        ],
    },
    Page {
        name: "demo",
        description: &[
            "Runs the main job of shmring in two processes: a recorder that owns a fresh ring \
             (a memfd served on a socket, or the named ring given with --create) and a \
             producer writing test-pattern video and a tone into it, with a live status line \
             and a summary of what was produced, recorded, dropped and how much CPU each side \
             took. The recording goes to --out and the ring is removed at the end, also when \
             the demo is interrupted.",
        ],
        examples: &[
            ("shmring demo --seconds 5 --out /tmp/demo", "a 5 s demo, recorded into /tmp/demo"),
            (
                "shmring demo --video 1280x720@30 --streams 2",
                "two 720p streams instead of one 1080p stream",
            ),
        ],
    },
    Page {
        name: "record",
        description: &[
            "The consumer: creates a ring and writes every record that arrives into files, \
             one per stream id and kind: raw video as Y4M (video-STREAM.y4m), audio as WAV \
             (audio-STREAM.wav), or with --encode one MP4 per stream id with H.264 video and \
             AAC (or Opus) audio. A file is written as NAME.part and renamed when it is \
             complete.",
            "The ring is the named ring --create NAME (/dev/shm/NAME, this user's only, \
             removed at the end), or a sealed memfd served on the Unix socket --listen PATH, \
             which other users' producers may connect to when --allow-uid or --allow-gid \
             names them. --tethered NAME records an existing ring beside its own consumer \
             instead. The ring's memory is reserved when it is made: a --capacity-mib that \
             does not fit in /dev/shm (a container's is 64 MB unless it is given more) is \
             refused at once.",
            "The recorder stops after --seconds, at SIGINT or SIGTERM, finishing its files, \
             and prints a JSON summary on standard output.",
        ],
        examples: &[
            (
                "shmring record --create cam0 --out rec/ --seconds 60",
                "record the named ring cam0 for a minute",
            ),
            (
                "shmring record --listen /run/shmring/cam0.sock --allow-uid 1001 --encode --out rec/",
                "serve a memfd ring on a socket that uid 1001 may connect to; encode to MP4",
            ),
            (
                "shmring record --tethered cam0 --out copy/",
                "a second recorder of cam0, beside its owner",
            ),
        ],
    },
    Page {
        name: "produce",
        description: &[
            "A synthetic capture: writes test-pattern video (one thread per stream) and a \
             tone into a ring, each record with a media header, a capture timestamp and its \
             sequence number, and ends each stream with an end-of-stream record. The ring is \
             opened by name (--ring) or received from a consumer's socket (--connect). With \
             --participants N it makes a meeting: N stream ids, each with its own video and \
             audio. A summary of what was sent and dropped is printed as JSON.",
        ],
        examples: &[
            (
                "shmring produce --ring cam0 --seconds 10",
                "10 s of 1080p30 video and 48 kHz stereo audio into cam0",
            ),
            (
                "shmring produce --connect /run/shmring/cam0.sock --video 1280x720@30 --audio none",
                "video only, into the ring served on a socket",
            ),
        ],
    },
    Page {
        name: "stat",
        description: &[
            "Shows one ring's counters: records and bytes committed and consumed, occupancy, \
             drops, abandoned claims, corruption and resets, the oldest open claim, waits, \
             and each tethered consumer, updated every --interval seconds. The ring is \
             opened by name (or any ring address), or observed read-only through its \
             consumer's socket (--connect). --json prints one JSON object (its schema, \
             versioned by its schema_version key, is in docs/OPERATIONS.md); --prometheus \
             one Prometheus scrape.",
        ],
        examples: &[
            ("shmring stat cam0", "live counters of the named ring cam0"),
            (
                "shmring stat --json --connect /run/shmring/cam0.sock",
                "one JSON object, from the ring served on a socket",
            ),
        ],
    },
    Page {
        name: "tap",
        description: &[
            "Watches a ring read-only: takes every n-th record that matches --kind and \
             --stream as it goes by, and with --out writes a PNG thumbnail of every video \
             frame taken. A tap holds no space in the ring, so it cannot slow producers or \
             the consumer; a record overwritten while it was read is counted lost, never \
             shown.",
        ],
        examples: &[(
            "shmring tap cam0 --every 30 --kind video --out thumbs/ --count 10",
            "ten thumbnails, one of every 30th video frame",
        )],
    },
    Page {
        name: "top",
        description: &[
            "Every ring of this user in /dev/shm (and with --sockets DIR every ring served on \
             a socket there), one row each: rates, occupancy, producers, drops, corruption, \
             the oldest open claim and whether the consumer is alive. Full screen and \
             refreshed in a terminal (q quits, s changes the sort column, r reverses; a \
             narrow terminal shows the most useful columns whole and names the number of \
             columns hidden). --once prints one plain table and --json one JSON array; \
             either exits with status 1 when a ring could not be read (its error is on its \
             row).",
        ],
        examples: &[
            ("shmring top", "the live view"),
            (
                "shmring top --once --sockets /run/shmring",
                "one table, with the rings served on sockets in /run/shmring",
            ),
        ],
    },
    Page {
        name: "exporter",
        description: &[
            "Serves every ring's counters at http://ADDR/metrics in Prometheus' text format: \
             one family per counter of the ring (records_committed as \
             shmring_records_committed_total, occupancy as shmring_occupancy_bytes, ...), \
             each sample labelled with its ring. Rings are read afresh on every scrape.",
        ],
        examples: &[(
            "shmring exporter --listen 127.0.0.1:9464 --sockets /run/shmring",
            "serve the named rings and those on sockets in /run/shmring",
        )],
    },
    Page {
        name: "rm",
        description: &[
            "Removes a named ring whose consumer is gone (its recorder was killed, say). A \
             ring whose consumer is alive, or a file that is not a shmring ring, is left \
             alone.",
        ],
        examples: &[("shmring rm cam0", "remove /dev/shm/cam0 if nobody consumes it")],
    },
    Page {
        name: "bench",
        description: &[],
        examples: &[
            ("shmring bench --quick", "shmring against sockets, pipes and a WebSocket, briefly"),
            (
                "shmring bench --workload meeting --repeat 3",
                "nine participants' video and audio; medians of three runs",
            ),
        ],
    },
    Page {
        name: "completions",
        description: &[
            "Prints the completion script of a shell (bash, zsh, fish, elvish or \
             powershell) for this build's options on standard output. The Debian \
             package installs those of bash, zsh and fish where the shells find them.",
        ],
        examples: &[(
            "shmring completions bash > ~/.local/share/bash-completion/completions/shmring",
            "install bash's completion for this user",
        )],
    },
    Page {
        name: "manpages",
        description: &[
            "Writes shmring.1 and one page per subcommand (shmring-record.1, ...) into DIR, \
             generated from this build's options.",
        ],
        examples: &[(
            "shmring manpages /tmp/man && man -l /tmp/man/shmring-record.1",
            "write the pages and read one",
        )],
    },
];

/// One page: clap's sections (name, synopsis, description, options, subcommands),
/// then the page's own description, examples, related pages and version.
fn render(cmd: &clap::Command, page_name: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    let key = page_name.strip_prefix("shmring-").unwrap_or(page_name);
    let page = PAGES.iter().find(|p| p.name == key);
    for para in page.map_or(&[][..], |p| p.description) {
        writeln!(out, ".PP\n{}", roff_text(para))?;
    }
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(out)?;
    }
    if let Some(p) = page.filter(|p| !p.examples.is_empty()) {
        writeln!(out, ".SH EXAMPLES")?;
        for (line, what) in p.examples {
            let mut what = what.chars();
            let what: String = what.next().map_or_else(String::new, |c| {
                c.to_uppercase().chain(what).collect::<String>() + ":"
            });
            writeln!(
                out,
                ".PP\n{}\n.RS 4\n.nf\n{}\n.fi\n.RE",
                roff_text(&what),
                roff_text(line)
            )?;
        }
    }
    writeln!(out, ".SH \"SEE ALSO\"")?;
    let related: Vec<String> = std::iter::once("shmring".to_string())
        .chain(PAGES.iter().skip(1).map(|p| format!("shmring-{}", p.name)))
        .filter(|n| n != page_name)
        .map(|n| format!("\\fB{}\\fR(1)", n.replace('-', "\\-")))
        .collect();
    writeln!(out, "{}", related.join(", "))?;
    // Every page says the version it describes (subcommands have none of their own).
    writeln!(
        out,
        ".SH VERSION\nshmring {}",
        roff_text(crate::cli::version())
    )
}

/// Text for roff: backslashes and hyphens escaped, no line starting with a dot.
fn roff_text(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// `shmring manpages DIR`: `shmring.1` and one page per visible subcommand
/// (`shmring-record.1`, ...) in `dir`.
pub fn manpages(dir: &Path) -> Result<(), CmdError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(1, format!("cannot create {}: {e}", dir.display())))?;
    let write = |name: &str, cmd: &clap::Command| -> Result<(), CmdError> {
        let mut text = Vec::new();
        let path = dir.join(format!("{name}.1"));
        render(cmd, name, &mut text)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| fail(1, format!("cannot write {}: {e}", path.display())))
    };
    // Built, each subcommand has its page's name (`shmring-record`) and its
    // synopsis's (`shmring record`).
    let mut top = command().disable_help_subcommand(true);
    top.build();
    let subs: Vec<clap::Command> = top
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    for cmd in std::iter::once(&top).chain(&subs) {
        write(cmd.get_display_name().unwrap_or(cmd.get_name()), cmd)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_subcommand_has_a_page_with_a_description_and_examples() {
        let mut top = command().disable_help_subcommand(true);
        top.build();
        for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
            let page = PAGES
                .iter()
                .find(|p| p.name == sub.get_name())
                .unwrap_or_else(|| panic!("no page text for {}", sub.get_name()));
            assert!(!page.examples.is_empty(), "{} has no example", page.name);
            // A subcommand without a description of its own has clap's long help.
            assert!(
                !page.description.is_empty() || sub.get_long_about().is_some(),
                "{} has no description",
                page.name
            );
            for (line, _) in page.examples {
                let words: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(words[0], "shmring", "{line}");
                if page.name != "shmring" {
                    assert_eq!(words[1], page.name, "{line}");
                }
            }
        }
    }

    #[test]
    fn a_page_has_its_description_examples_and_related_pages() {
        let dir = tempfile::tempdir().unwrap();
        manpages(dir.path()).unwrap();
        let record = std::fs::read_to_string(dir.path().join("shmring-record.1")).unwrap();
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH DESCRIPTION",
            ".SH OPTIONS",
            ".SH EXAMPLES",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(record.contains(section), "{section} missing:\n{record}");
        }
        assert!(record.contains("\\-\\-allow\\-uid 1001"), "{record}");
        assert!(record.contains("Y4M"), "{record}");
        assert!(record.contains("\\fBshmring\\-top\\fR(1)"), "{record}");
        assert!(!record.contains("\\fBshmring\\-record\\fR(1)"), "{record}");
        let main = std::fs::read_to_string(dir.path().join("shmring.1")).unwrap();
        assert!(main.contains("Exit status"), "{main}");
    }
}
