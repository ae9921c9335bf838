//! How the recorder reaches its ring: creates a named ring, serves a memfd ring on a
//! socket, or reads an existing named ring beside its own consumer; then says it is
//! ready.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use shmring::handoff::{ListenerThread, DEFAULT_CONNECT_TIMEOUT};
use shmring::{
    Address, Config, Consumer, ConsumerOptions, Listener, Occupant, Reader, ReaderKind, Segment,
};

use super::emit;
use crate::cli::RecordArgs;
use crate::ringref::{self, listener_options};
use crate::{fail, CmdError};

/// The ring a run records, what it is called in output, and the listener serving it
/// (`--listen`).
pub(super) struct Source {
    pub seg: Arc<Segment>,
    pub label: String,
    pub listener: Option<ListenerThread>,
}

impl Source {
    /// Stops serving the ring (the listener first), then lets the ring go.
    pub fn close(self) {
        drop(self.listener);
        drop(self.seg);
    }
}

/// The ring `a` names. A named ring, or a sealed memfd served on a socket by one
/// listener thread (never on the frame path), or an existing ring (its address)
/// read beside its own consumer.
pub(super) fn open(a: &RecordArgs, cfg: &Config) -> Result<Source, CmdError> {
    match (&a.create, &a.listen, &a.tethered) {
        (_, _, Some(ring)) => {
            let address = ringref::address(Some(ring), None).map_err(|m| fail(2, m))?;
            let seg = ringref::open(address).map_err(|m| fail(1, m))?;
            Ok(Source {
                seg,
                label: ring.clone(),
                listener: None,
            })
        }
        (_, Some(path), None) => {
            let memfd = Address::Memfd {
                label: "shmring-record".into(),
                config: cfg.clone(),
            };
            let seg = memfd
                .open()
                .map_err(|e| fail(1, format!("cannot create a memfd ring: {e}")))?;
            let l = Listener::bind(&seg, path, listener_options(&a.allow_uid, &a.allow_gid))
                .and_then(|l| l.spawn())
                .map_err(|e| fail(1, format!("cannot listen on {}: {e}", path.display())))?;
            Ok(Source {
                seg,
                label: path.display().to_string(),
                listener: Some(l),
            })
        }
        (Some(name), None, None) => Ok(Source {
            seg: create_named(name, cfg, !a.refuse_stale)?,
            label: name.clone(),
            listener: None,
        }),
        (None, None, None) => Err(fail(
            2,
            "give --create NAME, --listen PATH or --tethered NAME",
        )),
    }
}

/// Creates the named ring `name` (the core decides what a ring of that name left
/// behind is); one left by a process that is gone is replaced unless
/// `--refuse-stale` (`replace_stale` false).
fn create_named(name: &str, cfg: &Config, replace_stale: bool) -> Result<Arc<Segment>, CmdError> {
    let create = Address::Create {
        name: name.into(),
        config: cfg.clone(),
        replace_stale,
    };
    match create.open_detailed(DEFAULT_CONNECT_TIMEOUT) {
        Ok(o) => {
            if o.replaced_stale {
                eprintln!(
                    "shmring record: ring {name:?} was left by a process that is gone; replaced it"
                );
            }
            Ok(o.segment)
        }
        Err(shmring::Error::Exists { occupant, .. }) => {
            let why = match occupant {
                Occupant::Live => format!(
                    "ring {name:?} already exists and its consumer is alive (another recorder \
                     uses it)"
                ),
                Occupant::Stale => format!(
                    "ring {name:?} already exists but its consumer is gone (the process that \
                     created it was killed, or has not attached yet) and --refuse-stale keeps \
                     it: remove it with `shmring rm {name}`, or leave --refuse-stale out"
                ),
                Occupant::Foreign(e) => format!(
                    "ring {name:?} already exists ({}/{}): {e}; it was not made by shmring, so \
                     it is left alone",
                    crate::rings::SHM_DIR,
                    name.trim_start_matches('/')
                ),
                Occupant::Unknown => format!("ring {name:?} already exists"),
            };
            Err(fail(1, format!("cannot create ring: {why}")))
        }
        Err(e) => Err(fail(1, format!("cannot create ring {name:?}: {e}"))),
    }
}

/// The ring's consumer, or with `--tethered` a consumer beside it.
pub(super) fn reader(
    a: &RecordArgs,
    seg: &Arc<Segment>,
    stop: &AtomicBool,
) -> Result<Reader, CmdError> {
    let opts = ConsumerOptions {
        overtake_after: (a.overtake_after_ms > 0)
            .then(|| Duration::from_millis(a.overtake_after_ms)),
        tether_stall_limit: Duration::from_millis(a.tether_stall_ms),
        ..Default::default()
    };
    match &a.tethered {
        Some(name) => tethered(seg, name, opts, stop).map(Reader::from),
        None => Reader::consume(seg.clone(), ReaderKind::Consumer, opts)
            .map_err(|e| fail(1, format!("ring {}: {e}", seg.name()))),
    }
}

/// A tethered consumer of `seg`, once the ring's consumer has taken it on (it reads
/// every record from then on). Waits for that as long as the ring's consumer lives.
fn tethered(
    seg: &Arc<Segment>,
    name: &str,
    opts: ConsumerOptions,
    stop: &AtomicBool,
) -> Result<Consumer, CmdError> {
    let c = Consumer::tethered(seg.clone(), opts).map_err(|e| match e {
        shmring::Error::NoConsumer(_) => fail(
            1,
            format!(
                "ring {name:?} has no live consumer: a tethered recorder reads beside the \
                 ring's own consumer (e.g. `shmring record --create {name}`), which must be running"
            ),
        ),
        e => fail(1, format!("cannot attach to ring {name:?}: {e}")),
    })?;
    let start = Instant::now();
    let mut said = false;
    while !c
        .adopted()
        .map_err(|e| fail(1, format!("ring {name:?}: {e}")))?
    {
        if stop.load(Ordering::Relaxed) {
            return Err(fail(
                1,
                format!("ring {name:?}: stopped before the ring's consumer took this reader on"),
            ));
        }
        if !seg.consumer_alive() {
            return Err(fail(
                1,
                format!("ring {name:?}: its consumer went away before it took this reader on"),
            ));
        }
        if !said && start.elapsed() >= Duration::from_secs(2) {
            said = true;
            eprintln!(
                "shmring record: ring {name:?}: waiting for the ring's consumer to take this reader on"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(c)
}

/// Says the ring is ready: the `{"ready":..}` line, and the ring's label in
/// `ready_file` (written whole: to a temporary name, then renamed).
pub(super) fn announce(
    src: &Source,
    reader: &Reader,
    ready_file: Option<&Path>,
) -> Result<(), CmdError> {
    let geo = *src.seg.geometry();
    emit(
        json!({"ready": {"ring": src.label, "capacity": geo.capacity,
        "max_record": geo.max_record, "pid": std::process::id(),
        "tethered": reader.kind() == ReaderKind::Tethered}}),
    );
    if let Some(p) = ready_file {
        let mut tmp = p.as_os_str().to_owned();
        tmp.push(".tmp");
        let r =
            std::fs::write(&tmp, format!("{}\n", src.label)).and_then(|_| std::fs::rename(&tmp, p));
        if let Err(e) = r {
            return Err(fail(
                1,
                format!("cannot write ready file {}: {e}", p.display()),
            ));
        }
    }
    Ok(())
}
