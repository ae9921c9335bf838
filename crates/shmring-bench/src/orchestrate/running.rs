//! Running one experiment's workers: [`launch`] wires a transport and starts its
//! consumer (or floor), [`Launched::start`] its producers, [`supervise`] waits for
//! every worker of one or more runs side by side (sampling CPU, memory and
//! descriptors), [`Launched::gather`] collects their reports; [`drive`] is the
//! four in a row for one run.

use super::*;

pub(super) type Reports = (WorkerReport, Option<WorkerReport>);
pub(super) type Failure = Box<(String, Option<WorkerReport>, Option<WorkerReport>)>;

/// The producers' reports as one: what they sent together, CPU added up.
pub(super) fn sum_reports(rs: &[WorkerReport]) -> Option<WorkerReport> {
    let mut it = rs.iter();
    let mut t = it.next()?.clone();
    for r in it {
        t.frames += r.frames;
        t.bytes += r.bytes;
        t.start_ns = t.start_ns.min(r.start_ns);
        t.end_ns = t.end_ns.max(r.end_ns);
        t.utime_s += r.utime_s;
        t.stime_s += r.stime_s;
        t.loop_cpu_s += r.loop_cpu_s;
        t.maxrss_kib = t.maxrss_kib.max(r.maxrss_kib);
        t.allocs = t.allocs.zip(r.allocs).map(|(a, b)| a + b);
    }
    Some(t)
}

/// Runs the workers of transport `t` (records of up to `size` bytes, `producers`
/// producer processes) to the end. Ok((producers, consumer)); floor has only the
/// first.
pub(super) fn drive(
    t: Transport,
    (size, producers): (usize, u32),
    common: &[String],
    plan: &Plan,
    progress: (&StatusLine, u64, u64),
    tl: &mut Timeline,
    ring_stats: &mut Option<shmring::Stats>,
) -> Result<Reports, Failure> {
    let fail = |e: String| -> Failure { Box::new((e, None, None)) };
    let mut run = [launch(t, (size, producers), common, plan)?];
    run[0].start().map_err(fail)?;
    supervise(&mut run, plan, progress, tl).map_err(fail)?;
    *ring_stats = run[0].ring.as_ref().map(|r| r.stats());
    let [mut run] = run;
    run.gather()
}

/// The workers of one transport's run: wired, its consumer (or floor) started and
/// ready, its producers started by [`Launched::start`].
pub(super) struct Launched {
    pub(super) t: Transport,
    /// (role, worker): producers first, the consumer last.
    pub(super) workers: Vec<(String, Worker)>,
    pub(super) ring: Option<std::sync::Arc<Segment>>,
    /// The producers' arguments and descriptors, until they start.
    pub(super) pending: Vec<(Vec<String>, Vec<Inheritable>)>,
    pub(super) consumer: Option<Worker>,
}

/// Wires transport `t` and starts its consumer (or its floor process), ready.
pub(super) fn launch(
    t: Transport,
    (size, producers): (usize, u32),
    common: &[String],
    plan: &Plan,
) -> Result<Launched, Failure> {
    let fail = |e: String| -> Failure { Box::new((e, None, None)) };
    let wiring = wire(t, size, producers, plan).map_err(fail)?;
    let args = |role: &str, extra: Vec<String>| {
        let mut v = common.to_vec();
        v.extend(["--role".into(), role.into()]);
        v.extend(extra);
        v
    };
    let mut run = Launched {
        t,
        workers: Vec::new(),
        ring: None,
        pending: Vec::new(),
        consumer: None,
    };
    if t.is_floor() {
        run.workers.push((
            "floor".into(),
            Worker::spawn(&args("floor", vec![])).map_err(fail)?,
        ));
        return Ok(run);
    }
    let mut cons_extra: Vec<String> = Vec::new();
    let mut prod_extra: Vec<String> = Vec::new();
    let mut prod_fds: Vec<Vec<Inheritable>> = Vec::new();
    let mut keep: Vec<Inheritable> = Vec::new();
    let dup = |fd: &dyn std::os::fd::AsRawFd| {
        Inheritable::new(&fd.as_raw_fd()).map_err(|e| fail(e.to_string()))
    };
    match wiring {
        Wiring::Fds(p, c) => {
            keep = c;
            prod_fds = p;
        }
        Wiring::Listener(l, port) => {
            keep.push(l);
            prod_extra = vec!["--port".into(), port.to_string()];
        }
        Wiring::Ring(seg) => {
            for f in seg.descriptors() {
                keep.push(dup(&f)?);
            }
            for _ in 0..producers {
                prod_fds.push(
                    seg.descriptors()
                        .iter()
                        .map(|f| dup(f))
                        .collect::<Result<_, _>>()?,
                );
            }
            run.ring = Some(seg);
        }
        Wiring::Page(fd) => {
            keep.push(dup(&fd)?);
            prod_fds.push(vec![dup(&fd)?]);
        }
        Wiring::Service(name) => {
            cons_extra = vec!["--service".into(), name];
            prod_extra.clone_from(&cons_extra);
        }
        Wiring::None => return Err(fail(format!("no wiring for transport {t:?}"))),
    }
    for f in &keep {
        cons_extra.extend(["--fd".into(), f.raw().to_string()]);
    }
    // A producer's descriptor must not leak into the consumer or another producer
    // (it would keep the stream open), so each is made inheritable only while its
    // own producer starts.
    for f in prod_fds.iter().flatten() {
        // SAFETY: mark our own descriptor close-on-exec until its producer starts.
        unsafe { libc::fcntl(f.raw(), libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    let mut cons = Worker::spawn(&args("consumer", cons_extra)).map_err(fail)?;
    drop(keep);
    cons.wait_ready(Duration::from_secs(20))
        .map_err(|e| fail(format!("consumer: {e}")))?;
    let mut fds = prod_fds.into_iter();
    for k in 0..producers {
        let mut extra = prod_extra.clone();
        extra.extend(["--part".into(), k.to_string()]);
        run.pending
            .push((args("producer", extra), fds.next().unwrap_or_default()));
    }
    run.consumer = Some(cons);
    Ok(run)
}

impl Launched {
    /// Starts the producers.
    pub(super) fn start(&mut self) -> Result<(), String> {
        for (k, (mut args, fd)) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            for f in &fd {
                // SAFETY: clear close-on-exec on our own descriptor for this producer.
                unsafe { libc::fcntl(f.raw(), libc::F_SETFD, 0) };
                args.extend(["--fd".into(), f.raw().to_string()]);
            }
            let prod = Worker::spawn(&args);
            drop(fd);
            let role = if k == 0 {
                "producer".to_string()
            } else {
                format!("producer {}", k + 1)
            };
            self.workers.push((role, prod?));
        }
        if let Some(c) = self.consumer.take() {
            self.workers.push(("consumer".into(), c));
        }
        Ok(())
    }

    /// The reports of a finished run, checked: every worker succeeded, and every
    /// record sent was received.
    pub(super) fn gather(&mut self) -> Result<Reports, Failure> {
        let t = self.t;
        let mut errors = Vec::new();
        for (role, w) in self.workers.iter_mut() {
            if !w.ok() {
                let why = w.failure();
                // Workers name their transport and role; say it if one died silently.
                if why.starts_with(t.name()) {
                    errors.push(why);
                } else {
                    errors.push(format!("{role}: {why}"));
                }
            } else if w.report.is_none() {
                errors.push(format!("{role}: no report"));
            }
        }
        let consumer = self
            .workers
            .last()
            .filter(|(role, _)| role == "consumer")
            .and_then(|(_, w)| w.report.clone());
        let sent: Vec<WorkerReport> = self
            .workers
            .iter()
            .filter(|(role, _)| role != "consumer")
            .filter_map(|(_, w)| w.report.clone())
            .collect();
        let p = sum_reports(&sent);
        if errors.is_empty() {
            // Every record sent must have been received and checked.
            if let (Some(p), Some(c)) = (&p, &consumer) {
                if p.frames != c.frames {
                    errors.push(format!("{} records sent, {} received", p.frames, c.frames));
                }
            }
        }
        if !errors.is_empty() {
            return Err(Box::new((errors.join("; "), p, consumer)));
        }
        match p {
            Some(p) => Ok((p, consumer)),
            None => Err(Box::new(("no report".into(), None, None))),
        }
    }

    /// The peak open descriptors of its producers and of its consumer, each the
    /// mean over those processes.
    pub(super) fn descriptors(&self) -> (Option<f64>, Option<f64>) {
        let mean = |consumer: bool| {
            let v: Vec<f64> = self
                .workers
                .iter()
                .filter(|(role, _)| (role == "consumer") == consumer)
                // Sampled while it ran, or said by the worker itself (a run too
                // short for a sample once the worker program ran).
                .filter_map(|(_, w)| {
                    let said = w.report.as_ref().and_then(|r| r.open_fds);
                    w.peak_fds.max(said).map(|n| n as f64)
                })
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        (mean(false), mean(true))
    }
}

/// Waits for every worker of `runs` to finish, sampling CPU and RSS every 100 ms
/// (the plot shows the first run's first producer and its consumer) and each
/// worker's open descriptors. A failed worker ends them all within 2 s.
pub(super) fn supervise(
    runs: &mut [Launched],
    plan: &Plan,
    (bar, base_ms, per_run_ms): (&StatusLine, u64, u64),
    tl: &mut Timeline,
) -> Result<(), String> {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(plan.seconds * 3.0 + 30.0);
    let mut meters: Vec<CpuMeter> = runs[0]
        .workers
        .iter()
        .map(|(_, w)| CpuMeter::new(w.pid()))
        .collect();
    let mut first_fail: Option<Instant> = None;
    let all = |runs: &mut [Launched], f: &mut dyn FnMut(&mut Worker)| {
        for r in runs.iter_mut() {
            for (_, w) in r.workers.iter_mut() {
                f(w);
            }
        }
    };
    loop {
        let mut all_done = true;
        all(runs, &mut |w| all_done &= w.poll());
        if all_done {
            return Ok(());
        }
        let now = start.elapsed();
        all(runs, &mut |w| {
            // Only once it runs the worker program: between fork and exec a
            // child has this process's descriptors.
            if w.status.is_none() && w.runs_worker_program() {
                if let Some(n) = open_descriptors(Some(w.pid())) {
                    w.peak_fds = Some(w.peak_fds.unwrap_or(0).max(n));
                }
            }
        });
        for (i, (role, w)) in runs[0].workers.iter().enumerate() {
            let series = match role.as_str() {
                "producer" | "floor" => &mut tl.producer,
                "consumer" => &mut tl.consumer,
                _ => continue,
            };
            if w.status.is_some() {
                continue;
            }
            // The first sample of each worker only starts its meter (0 %).
            if let Some(m) = proc_memory(Some(w.pid())) {
                let pct = meters[i].sample();
                series.push(Sample {
                    t_s: now.as_secs_f64(),
                    cpu_pct: pct.unwrap_or(0.0).max(0.0),
                    rss_kib: m.rss_kb,
                });
            }
        }
        bar.set_position(base_ms + (now.as_millis() as u64).min(per_run_ms));
        let mut failed = false;
        all(runs, &mut |w| failed |= w.status.is_some() && !w.ok());
        if failed {
            let since = *first_fail.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(2) {
                all(runs, &mut |w| w.kill());
            }
        }
        if now > limit {
            all(runs, &mut |w| w.kill());
            return Err(format!("timed out after {:.0} s", now.as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
