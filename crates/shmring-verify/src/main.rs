//! `shmring-verify`: the reliability suite. Each subcommand runs one experiment
//! against real processes, prints a report (`--json`: plus one JSON summary line)
//! and exits non-zero if any property fails.
//!
//! * `chaos`: honest producers killed, stopped and stalled at random while three
//!   readers log what they get; a checker proves the invariants over the logs.
//! * `hold`: a meeting's traffic while other producers hold claims (and take new
//!   ones when theirs are taken back): the rate kept, the longest gap.
//! * `killstorm`: SIGKILL random producer processes at random moments.
//! * `scribble`: a live process writes random bytes over the ring.
//! * `forgeries`: one forgery per class of shared state; records must flow again.
//! * `consumer-crash`: SIGKILL the consumer process while producers run.
//! * `soak`: media-rate traffic for a long time; memory must stay flat.
//! * `sigbus`: seals of memfd segments; truncation of named segments.
//! * `perms`: named segments are private to their user.

mod chaos;
mod child;
mod common;
mod crash;
mod forgery;
mod hold;
mod killstorm;
mod perms;
mod scribble;
mod sigbus;
mod soak;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "shmring-verify", about = "Reliability suite for shmring rings")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Honest producers killed, stopped and stalled at random; a checker over the
    /// logs of the consumer, a tethered consumer and a tap proves the invariants.
    Chaos(chaos::Args),
    /// A meeting's traffic while other producers hold claims: the rate kept.
    Hold(hold::Args),
    /// SIGKILL random producer processes at random moments (many mid-reservation).
    Killstorm(killstorm::Args),
    /// A process scribbles random bytes over a live ring; the consumer must survive.
    Scribble(scribble::Args),
    /// One forgery per class of shared state; honest records must flow again.
    Forgeries(forgery::Args),
    /// SIGKILL the consumer process while producers run; a new one takes over.
    ConsumerCrash(crash::Args),
    /// Media-rate traffic for a long time: memory flat, every record accounted for.
    Soak(soak::Args),
    /// Memfd seals against resizing; truncation of a named segment (SIGBUS).
    Sigbus(sigbus::Args),
    /// A named segment is mode 0600 and closed to other users.
    Perms(perms::Args),
    #[command(hide = true)]
    ChildProducer(child::ProducerArgs),
    #[command(hide = true)]
    ChildChaosProducer(chaos::ProducerArgs),
    #[command(hide = true)]
    ChildChaosReader(chaos::ReaderArgs),
    #[command(hide = true)]
    ChildConsumer {
        #[arg(long)]
        fd: child::RingFds,
        #[arg(long, default_value_t = 8)]
        hold: usize,
    },
    #[command(hide = true)]
    ChildScribbler {
        #[arg(long)]
        fd: child::RingFds,
        #[arg(long, default_value_t = 2000)]
        writes_per_sec: u64,
        #[arg(long, default_value = "all")]
        region: String,
    },
    #[command(hide = true)]
    ChildResize {
        #[arg(long)]
        fd: child::RingFds,
    },
    #[command(hide = true)]
    ChildNamedConsumer {
        #[arg(long)]
        name: String,
        #[arg(long)]
        foreign: bool,
    },
    #[command(hide = true)]
    ChildOpenNamed {
        #[arg(long)]
        name: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Chaos(a) => chaos::run(a),
        Cmd::ChildChaosProducer(a) => chaos::producer(a),
        Cmd::ChildChaosReader(a) => chaos::reader(a),
        Cmd::Hold(a) => hold::run(a),
        Cmd::Killstorm(a) => killstorm::run(a),
        Cmd::Scribble(a) => scribble::run(a),
        Cmd::Forgeries(a) => forgery::run(a),
        Cmd::ConsumerCrash(a) => crash::run(a),
        Cmd::Soak(a) => soak::run(a),
        Cmd::Sigbus(a) => sigbus::run(a),
        Cmd::Perms(a) => perms::run(a),
        Cmd::ChildProducer(a) => child::producer(a),
        Cmd::ChildConsumer { fd, hold } => child::consumer(&fd, hold),
        Cmd::ChildScribbler {
            fd,
            writes_per_sec,
            region,
        } => child::scribbler(&fd, writes_per_sec, &region),
        Cmd::ChildResize { fd } => sigbus::child_resize(&fd),
        Cmd::ChildNamedConsumer { name, foreign } => sigbus::child_named_consumer(&name, foreign),
        Cmd::ChildOpenNamed { name } => perms::child_open_named(&name),
    };
    std::process::exit(code);
}
