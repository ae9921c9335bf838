//! The ring's rows: the same producer (zero copy, or `send` for `shmring-copy`) and
//! consumer, with a latency budget (`shmring-budget`) or a second reader beside the
//! consumer (`shmring-tethered`, `shmring-tap`).

use std::time::Duration;

use shmring::{Consumer, ConsumerOptions, FullPolicy, Meta, Segment};

use crate::args::WorkerArgs;
use crate::kit::{self, media_kind, pattern, produce, ready, Checker, Res, STALL};
use crate::report::WorkerReport;
use crate::transport::Transport;
use crate::wire::END;
use crate::work::{checksum, expected_checksum};

pub fn producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let seg = kit::ring(a)?;
    let mut p = seg.producer().map_err(|e| e.to_string())?;
    p.set_policy(FullPolicy::Block(STALL));
    let k = media_kind(a.size);
    let rep = if a.transport != Transport::ShmringCopy {
        produce(a, |pacer, seq| {
            let mut r = p.reserve(a.size).map_err(|e| e.to_string())?;
            pacer.make(r.payload(), seq);
            let meta = Meta {
                stream: seq as u32,
                kind: k,
                timestamp_ns: shmring::now_ns(),
                flags: 0,
            };
            r.commit(meta).map_err(|e| e.to_string())
        })?
    } else {
        let mut own = vec![0u8; a.size];
        produce(a, |pacer, seq| {
            pacer.make(&mut own, seq);
            let meta = Meta {
                stream: seq as u32,
                kind: k,
                timestamp_ns: shmring::now_ns(),
                flags: 0,
            };
            p.send(&own, meta).map_err(|e| e.to_string())
        })?
    };
    let r = p.reserve(8).map_err(|e| format!("end of stream: {e}"))?;
    r.commit(Meta::new(0, k).with_flags(END))
        .map_err(|e| format!("end of stream: {e}"))?;
    Ok(rep)
}

/// The second reader of the `shmring-tethered` and `shmring-tap` rows, in a thread
/// of the consumer process: it reads (and checksums) every byte it gets.
struct SecondReader {
    thread: std::thread::JoinHandle<Res<(u64, u64)>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SecondReader {
    /// Starts the row's second reader; `owner` adopts a tethered one at once.
    fn start(a: &WorkerArgs, seg: &std::sync::Arc<Segment>, owner: &Consumer) -> Res<Option<Self>> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let size = a.size;
        let ok = move |stream: u32, payload: &[u8]| {
            payload.len() == size
                && checksum(payload) == expected_checksum(pattern(0, stream as u64), size)
        };
        let thread = match a.transport {
            Transport::ShmringTethered => {
                let t = Consumer::tethered(seg.clone(), ConsumerOptions::default())
                    .map_err(|e| e.to_string())?;
                // The owner adopts it at its next look, before any record is sent.
                let _ = owner.try_next().map_err(|e| e.to_string())?;
                std::thread::spawn(move || {
                    let (mut frames, mut bad) = (0, 0);
                    loop {
                        let f = t
                            .next_timeout(Some(STALL))
                            .map_err(|e| e.to_string())?
                            .ok_or("the tethered reader got no frame")?;
                        if f.meta().flags & END != 0 {
                            return Ok((frames, bad));
                        }
                        frames += 1;
                        bad += u64::from(!ok(f.stream(), f.payload()));
                    }
                })
            }
            Transport::ShmringTap => {
                let fd = seg
                    .read_only_fd()
                    .and_then(|fd| {
                        fd.try_clone_to_owned().map_err(|e| shmring::Error::Os {
                            op: "dup",
                            segment: seg.label(),
                            source: e,
                        })
                    })
                    .map_err(|e| e.to_string())?;
                let ro = shmring::Address::Descriptors(vec![fd])
                    .open_read_only()
                    .map_err(|e| e.to_string())?;
                let mut tap = shmring::Tap::new(ro, shmring::TapOptions::default());
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let (mut frames, mut bad) = (0, 0);
                    while !stop.load(Ordering::Acquire) {
                        let got = tap
                            .next_with(Some(Duration::from_millis(10)), |p, m| {
                                (m.flags & END != 0, ok(m.stream, p))
                            })
                            .map_err(|e| e.to_string())?;
                        match got {
                            Some((_, (true, _))) => break,
                            Some((_, (false, good))) => {
                                frames += 1;
                                bad += u64::from(!good);
                            }
                            None => {}
                        }
                    }
                    let st = tap.stats();
                    eprintln!(
                        "shmring-tap: the tap took {} records, lost {} ({} torn, never delivered)",
                        st.delivered, st.lost, st.torn
                    );
                    Ok((frames, bad))
                })
            }
            _ => return Ok(None),
        };
        Ok(Some(SecondReader { thread, stop }))
    }

    /// Waits for it and checks what it read: intact frames only, and every frame
    /// the owner got for a tethered reader.
    fn finish(self, owner_frames: u64, tethered: bool) -> Res<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let (frames, bad) = self
            .thread
            .join()
            .map_err(|_| "the second reader panicked".to_string())??;
        if bad > 0 {
            return Err(format!(
                "the second reader got {bad} frames that failed their checksum"
            ));
        }
        if tethered && frames != owner_frames {
            return Err(format!(
                "the tethered reader got {frames} frames, the consumer {owner_frames}"
            ));
        }
        Ok(())
    }
}

pub fn consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    let seg = kit::ring(a)?;
    let c = Consumer::with_options(seg.clone(), a.transport.consumer_options())
        .map_err(|e| e.to_string())?;
    let second = SecondReader::start(a, &seg, &c)?;
    let mut ck = Checker::new(a.size);
    ready();
    ck.begin();
    loop {
        let f = c
            .next_timeout(Some(STALL))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "no frame for {} s after {} frames",
                    STALL.as_secs(),
                    ck.frames()
                )
            })?;
        let now = shmring::now_ns();
        if f.meta().flags & END != 0 {
            break;
        }
        ck.frame(
            f.stream() as u64,
            u32::MAX as u64,
            f.timestamp_ns(),
            now,
            f.payload(),
        );
    }
    let owner_frames = ck.frames();
    let rep = ck.finish();
    if let Some(s) = second {
        let checked = s.finish(owner_frames, a.transport == Transport::ShmringTethered);
        // Damage the consumer found itself is reported as on every row.
        if rep.bad_checksums + rep.bad_sequence == 0 {
            checked?;
        }
    }
    Ok(rep)
}
