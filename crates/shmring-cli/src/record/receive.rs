//! The frame path: reads records from the ring into the recorder until the run
//! stops. Each frame is read in place (the recorder reads as the ring's consumer or
//! a tethered one); nothing here allocates per record.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shmring::{Reader, ReaderKind};

use super::progress::Watch;
use super::source::Source;
use super::Read;
use crate::record::recorder::{Recorder, WriteError};

/// Why the receive loop ended (nothing set: stopped, or its time was up).
#[derive(Default)]
pub(super) struct Ending {
    pub write_error: Option<WriteError>,
    pub ring_error: Option<String>,
    /// A tethered recorder's ring lost its consumer.
    pub owner_gone: bool,
}

/// Records until `stop`, the `deadline`, a failed write or read, or (tethered) the
/// end of the ring's consumer; shows progress every tick of `watch`.
pub(super) fn receive(
    src: &Source,
    reader: &mut Reader,
    rec: &mut Recorder,
    watch: &mut Watch,
    read: &mut Read,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> Ending {
    let wait = Some(Duration::from_millis(100));
    // What a copying reader would fill; a consumer's frames stay in the ring.
    let mut buf = Vec::new();
    loop {
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ending::default();
        }
        match reader.next_into(&mut buf, wait) {
            Ok(Some(f)) => {
                read.add(f.len());
                // The frame is read in place and released when it goes out of scope.
                if let Err(e) =
                    rec.process(f.meta(), src.seg.committed_by(f.seq()), f.payload(&buf))
                {
                    return Ending {
                        write_error: Some(e),
                        ..Ending::default()
                    };
                }
            }
            Ok(None) => rec.poll(),
            // Reported only when the consumer cannot reset by itself; it does once
            // the frames it waits for are released, which ours always are.
            Err(e @ shmring::Error::Corrupt { .. }) => eprintln!("shmring record: {e}"),
            Err(e) => {
                return Ending {
                    ring_error: Some(e.to_string()),
                    ..Ending::default()
                }
            }
        }
        if watch.due() {
            rec.poll();
            watch.sample(&src.seg, reader);
            // A tethered recorder ends with the ring's consumer: no producer can
            // write to a ring without one.
            if reader.kind() == ReaderKind::Tethered && !src.seg.consumer_alive() {
                return Ending {
                    owner_gone: true,
                    ..Ending::default()
                };
            }
            watch.show(src, reader, rec, *read);
        }
    }
}

/// Records what was committed before the stop (bounded: a producer still running
/// cannot keep us here). `line`: the tethered recorder's line, if tethered.
pub(super) fn drain(
    src: &Source,
    reader: &mut Reader,
    line: Option<shmring::TetherInfo>,
    rec: &mut Recorder,
    read: &mut Read,
) -> Result<(), WriteError> {
    let mut left = match line {
        Some(line) => line.lag_records,
        None => src.seg.stats().records_in_flight,
    } + 16;
    let mut buf = Vec::new();
    while left > 0 {
        left -= 1;
        match reader.next_into(&mut buf, Some(Duration::ZERO)) {
            Ok(Some(f)) => {
                read.add(f.len());
                rec.process(f.meta(), src.seg.committed_by(f.seq()), f.payload(&buf))?;
            }
            Ok(None) => break,
            Err(_) => break,
        }
    }
    Ok(())
}
