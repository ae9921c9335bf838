//! A worker process (`shmring-bench-worker`): one side of one transport. This file
//! only dispatches; the rows live in the files beside it and in `meeting`, `wakeup`
//! and `ice`.

mod floor;
mod ring;
mod stream;

use std::fs::File;

use shmring_host::rusage;

use crate::args::{parse, Role, WorkerArgs};
use crate::kit::{allocs_now, fd_arg, fd_args, ready};
use crate::transport::Transport;
use crate::wire::{tcp_accept, tcp_connect};

pub fn worker_main(args: &[String]) -> i32 {
    let a: WorkerArgs = match parse("shmring-bench-worker", args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    let role = match a.role {
        Role::Producer => "producer",
        Role::Consumer => "consumer",
        Role::Floor => "floor",
    };
    let _ = allocs_now();
    crate::kit::keep_histogram(a.histogram);
    // The meeting, and --scale producers: a thread per stream.
    let streams = a.meeting.is_some() || a.threads.is_some();
    use Transport as T;
    let res = match (a.transport, a.role) {
        (_, Role::Producer) if a.bot.is_some() => crate::bot::producer(&a),
        (T::Wakeup, Role::Producer) => crate::wakeup::producer(&a),
        (T::Wakeup, Role::Consumer) => crate::wakeup::consumer(&a),
        #[cfg(feature = "iceoryx2")]
        (T::Iceoryx2, role) if streams => crate::ice::meeting(&a, role),
        (_, role) if streams => crate::meeting::worker(&a, role),
        (T::Floor, _) => floor::run(&a),
        (T::Floor2Core, _) => crate::twocore::run(&a),
        (t, Role::Producer) if t.is_ring() => ring::producer(&a),
        (t, Role::Consumer) if t.is_ring() => ring::consumer(&a),
        (T::UdsTwoReaders, Role::Producer) => fd_args(&a).and_then(|mut fds| {
            let (b, a2) = (fds.pop(), fds.pop());
            match (a2, b) {
                (Some(x), Some(y)) => {
                    stream::producer(&a, stream::Both(File::from(x), File::from(y)))
                }
                _ => Err("two --fd are required".into()),
            }
        }),
        (T::UdsTwoReaders, Role::Consumer) => stream::two_consumers(&a),
        (T::Uds | T::Pipe, Role::Producer) => {
            fd_arg(&a).and_then(|fd| stream::producer(&a, File::from(fd)))
        }
        (T::Uds | T::Pipe, Role::Consumer) => fd_arg(&a).and_then(|fd| {
            ready();
            stream::consumer(&a, File::from(fd))
        }),
        (T::Tcp, Role::Producer) => tcp_connect(&a).and_then(|s| stream::producer(&a, s)),
        (T::Tcp, Role::Consumer) => tcp_accept(&a).and_then(|s| stream::consumer(&a, s)),
        (T::WebSocket, Role::Producer) => stream::ws_producer(&a),
        (T::WebSocket, Role::Consumer) => stream::ws_consumer(&a),
        #[cfg(feature = "iceoryx2")]
        (T::Iceoryx2, Role::Producer) => crate::ice::producer(&a),
        #[cfg(feature = "iceoryx2")]
        (T::Iceoryx2, Role::Consumer) => crate::ice::consumer(&a),
        (t, _) => Err(format!("transport {t} has no {role} worker")),
    };
    match res {
        Ok(mut rep) => {
            let r = rusage(false);
            (rep.utime_s, rep.stime_s) = (r.user_s, r.system_s);
            rep.maxrss_kib = shmring_host::own_peak_rss_kb();
            println!("{}", serde_json::to_string(&rep).unwrap_or_default());
            if rep.bad_checksums + rep.bad_sequence > 0 {
                eprintln!(
                    "{} {role}: {} of {} frames failed their checksum, {} arrived out of sequence",
                    a.transport, rep.bad_checksums, rep.frames, rep.bad_sequence
                );
                return 3;
            }
            0
        }
        Err(e) => {
            eprintln!("{} {role}: {e}", a.transport);
            1
        }
    }
}
