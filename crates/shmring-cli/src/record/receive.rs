//! The frame path: reads records from the ring into the recorder until the run
//! stops. Each frame is read in place; nothing here allocates per record.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shmring::Consumer;

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
    consumer: &Consumer,
    rec: &mut Recorder,
    watch: &mut Watch,
    read: &mut Read,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> Ending {
    let wait = Some(Duration::from_millis(100));
    loop {
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ending::default();
        }
        match consumer.next_timeout(wait) {
            Ok(Some(f)) => {
                read.add(f.len());
                // The frame is read in place and released when it goes out of scope.
                if let Err(e) = rec.process(f.meta(), src.seg.committed_by(f.seq()), f.payload()) {
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
            watch.sample(&src.seg, consumer);
            // A tethered recorder ends with the ring's consumer: no producer can
            // write to a ring without one.
            if consumer.is_tethered() && !src.seg.consumer_alive() {
                return Ending {
                    owner_gone: true,
                    ..Ending::default()
                };
            }
            watch.show(src, consumer, rec, *read);
        }
    }
}

/// Records what was committed before the stop (bounded: a producer still running
/// cannot keep us here). `line`: the tethered recorder's line, if tethered.
pub(super) fn drain(
    src: &Source,
    consumer: &Consumer,
    line: Option<shmring::TetherInfo>,
    rec: &mut Recorder,
    read: &mut Read,
) -> Result<(), WriteError> {
    let mut left = match line {
        Some(line) => line.lag_records,
        None => src.seg.stats().records_in_flight,
    } + 16;
    while left > 0 {
        left -= 1;
        match consumer.try_next() {
            Ok(Some(f)) => {
                read.add(f.len());
                rec.process(f.meta(), src.seg.committed_by(f.seq()), f.payload())?;
            }
            Ok(None) => break,
            Err(_) => break,
        }
    }
    Ok(())
}
