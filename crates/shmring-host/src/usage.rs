//! CPU time and memory of a process: `getrusage`, `/proc/PID/status`,
//! `/proc/PID/task/*/schedstat`.

use std::time::Instant;

/// CPU time and peak memory from `getrusage`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Rusage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub system_s: f64,
    /// Peak resident set, KiB, as the kernel keeps it: across `execve`, so a
    /// child starts at its parent's resident set at the fork. A program's own
    /// peak is [`own_peak_rss_kb`].
    pub max_rss_kb: u64,
}

impl Rusage {
    /// User + system CPU seconds.
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// `getrusage` of this process (`children`: false) or of its reaped children
/// (true). All zero if the call fails.
pub fn rusage(children: bool) -> Rusage {
    let who = if children {
        libc::RUSAGE_CHILDREN
    } else {
        libc::RUSAGE_SELF
    };
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return Rusage::default();
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Rusage {
        user_s: tv(ru.ru_utime),
        system_s: tv(ru.ru_stime),
        max_rss_kb: ru.ru_maxrss as u64,
    }
}

/// The most memory this program has had resident at once since it started
/// (`execve`), in KiB: `VmHWM`. Linux keeps `getrusage`'s `ru_maxrss` across
/// `execve`, so a child started by a large parent would report at least the
/// parent's resident set at the fork. Falls back to `ru_maxrss` where `/proc`
/// cannot be read. Reads a file: not for a path that counts its allocations.
pub fn own_peak_rss_kb() -> u64 {
    proc_memory(None)
        .map(|m| m.peak_rss_kb)
        .filter(|&k| k > 0)
        .unwrap_or_else(|| rusage(false).max_rss_kb)
}

/// Memory of a process, in KiB, from `/proc/PID/status`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProcMemory {
    /// VmRSS: everything resident.
    pub rss_kb: u64,
    /// VmHWM: the most resident at once since the program started (`execve`).
    pub peak_rss_kb: u64,
    /// RssAnon: heap, stacks.
    pub anon_kb: u64,
    /// RssFile: the program and its libraries.
    pub file_kb: u64,
    /// RssShmem: shared memory mapped (the ring).
    pub shmem_kb: u64,
}

impl ProcMemory {
    /// Resident memory but shared memory mappings (the ring): heap and stacks,
    /// and the pages of the program and its libraries, most of which other
    /// processes map too. Not the process's private memory: see
    /// [`private_memory`].
    pub fn rss_without_shmem_kb(&self) -> u64 {
        self.anon_kb + self.file_kb
    }
}

/// The pages only this process maps, of its private mappings (shared memory, the
/// ring, excluded), in KiB: the sum of `Private_Clean` and `Private_Dirty` over
/// the mappings of `/proc/PID/smaps` that are not shared (`MAP_PRIVATE`). None
/// if it cannot be read.
pub fn private_memory(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/smaps"),
        None => "/proc/self/smaps".to_string(),
    };
    parse_smaps(&std::fs::read_to_string(path).ok()?)
}

fn parse_smaps(s: &str) -> Option<u64> {
    let (mut total, mut shared, mut seen) = (0u64, false, false);
    for line in s.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        if let Some(key) = first.strip_suffix(':') {
            if !shared && (key == "Private_Clean" || key == "Private_Dirty") {
                total += words.next()?.parse::<u64>().ok()?;
            }
        } else if first.contains('-') {
            // A mapping's first line: range, permissions (`rw-s`: shared), ...
            shared = words.next()?.ends_with('s');
            seen = true;
        }
    }
    seen.then_some(total)
}

/// The memory of process `pid` (None: this process), from `/proc/PID/status`;
/// None if it cannot be read or has no VmRSS line.
pub fn proc_memory(pid: Option<u32>) -> Option<ProcMemory> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    parse_status(&std::fs::read_to_string(path).ok()?)
}

fn parse_status(s: &str) -> Option<ProcMemory> {
    let mut m = ProcMemory::default();
    let mut seen = false;
    for line in s.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let Ok(v) = v.trim().trim_end_matches("kB").trim().parse::<u64>() else {
            continue;
        };
        match k {
            "VmRSS" => {
                m.rss_kb = v;
                seen = true
            }
            "VmHWM" => m.peak_rss_kb = v,
            "RssAnon" => m.anon_kb = v,
            "RssFile" => m.file_kb = v,
            "RssShmem" => m.shmem_kb = v,
            _ => {}
        }
    }
    seen.then_some(m)
}

/// The descriptors process `pid` (None: this process) has open: the entries of
/// `/proc/PID/fd`. None if it cannot be read (gone, or another user's).
pub fn open_descriptors(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/fd"),
        None => "/proc/self/fd".to_string(),
    };
    let listed = std::fs::read_dir(path).ok()?.count() as u64;
    // Listing our own descriptors opens one more: the listing's.
    Some(if pid.is_none() {
        listed.saturating_sub(1)
    } else {
        listed
    })
}

/// CPU time of a process so far, in nanoseconds: the sum of its threads'
/// `schedstat` run times (exact), falling back to the utime + stime of `stat`,
/// which counts whole clock ticks (10 ms): too coarse for 100 ms samples of a
/// process using a few percent of a core.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    if let Some(ns) = schedstat_ns(pid) {
        return Some(ns);
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the ")" closing the command name: state is field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(((utime + stime) as f64 * 1e9 / clock_ticks_per_s()) as u64)
}

/// Sum over `/proc/PID/task/*/schedstat` of the first field (ns on a CPU).
fn schedstat_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let s = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only queries.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU % of one core a process used between samples.
pub struct CpuMeter {
    pid: u32,
    last: Option<(Instant, f64)>,
    first: Option<(Instant, f64)>,
}

impl CpuMeter {
    pub fn new(pid: u32) -> CpuMeter {
        CpuMeter {
            pid,
            last: None,
            first: None,
        }
    }

    /// CPU % (of one core) since the previous call; None on the first call or
    /// when the process cannot be read (it has exited).
    pub fn sample(&mut self) -> Option<f64> {
        let cpu = cpu_ns(self.pid)? as f64 / 1e9;
        self.add(Instant::now(), cpu)
    }

    fn add(&mut self, now: Instant, cpu: f64) -> Option<f64> {
        // The per-thread run times shrink when a thread exits (its time leaves
        // /proc/PID/task): never let the total go back, so no interval is negative.
        let cpu = cpu.max(self.last.map_or(0.0, |(_, c)| c));
        self.first.get_or_insert((now, cpu));
        let pct = self.last.map(|(t, c)| {
            let dt = now.duration_since(t).as_secs_f64();
            if dt > 0.0 {
                100.0 * (cpu - c) / dt
            } else {
                0.0
            }
        });
        self.last = Some((now, cpu));
        pct
    }

    /// Average CPU % over everything sampled.
    pub fn average(&self) -> Option<f64> {
        let ((t0, c0), (t1, c1)) = (self.first?, self.last?);
        let dt = t1.duration_since(t0).as_secs_f64();
        (dt > 0.0).then(|| 100.0 * (c1 - c0) / dt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn open_descriptors_counts_what_a_process_has_open() {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        // A child with its three standard descriptors and, if `extra`, number 200;
        // every other one closed before exec (tests running beside this one may
        // have descriptors open that a child would inherit).
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let open = |extra: bool| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if extra {
                crate::place_fds(&mut cmd, &[std::os::fd::AsRawFd::as_raw_fd(&f)], 200);
            }
            // SAFETY: runs in the forked child before exec (after place_fds's
            // step) and only closes descriptors.
            unsafe {
                cmd.pre_exec(move || {
                    for fd in (3..4096).filter(|&fd| !(extra && fd == 200)) {
                        libc::close(fd);
                    }
                    Ok(())
                });
            }
            let mut child = crate::ChildGuard::spawn(&mut cmd).expect("sleep");
            // Closing Rust's own exec-error pipe above lets spawn return before
            // exec: count once the child runs `sleep`.
            let comm = format!("/proc/{}/comm", child.pid());
            for _ in 0..500 {
                if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let n = open_descriptors(Some(child.pid()));
            child.kill();
            n
        };
        assert_eq!(open(false), Some(3));
        assert_eq!(open(true), Some(4));
        assert_eq!(open_descriptors(Some(u32::MAX)), None);
        assert!(open_descriptors(None).is_some_and(|n| n >= 3));
    }

    #[test]
    fn own_descriptors_leave_out_the_listing_itself() {
        // Listed by PID, the listing's own descriptor is among them (it is another
        // process's view); our own count leaves it out. Other tests' threads open
        // and close descriptors meanwhile: a few tries.
        let me = Some(std::process::id());
        let agreed = (0..20).any(|_| {
            let own = open_descriptors(None).expect("own descriptors");
            open_descriptors(me) == Some(own + 1)
        });
        assert!(
            agreed,
            "own count and count by PID never differed by the listing"
        );
    }

    #[test]
    fn status_parser_reads_the_memory_lines() {
        let s = "Name:\tx\nVmRSS:\t  1000 kB\nRssAnon:\t 300 kB\nRssFile:\t 200 kB\nRssShmem:\t 500 kB\n";
        let m = parse_status(s).expect("parsed");
        assert_eq!(
            (m.rss_kb, m.rss_without_shmem_kb(), m.shmem_kb),
            (1000, 500, 500)
        );
        assert_eq!(parse_status("Name:\tx\n"), None);
        let short = parse_status("VmRSS:\t  1234 kB\nRssAnon:\t 10 kB\n").expect("parsed");
        assert_eq!(short.rss_kb, 1234);
        let peak = parse_status("VmHWM:\t  2000 kB\nVmRSS:\t  1234 kB\n").expect("parsed");
        assert_eq!((peak.peak_rss_kb, peak.rss_kb), (2000, 1234));
    }

    /// Runs this test binary's `peak_of_this_process` with `env` set; its output.
    fn run_peak_test(env: &str) -> String {
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "usage::tests::peak_of_this_process",
                "--nocapture",
            ])
            .env(env, "1")
            .output()
            .expect("test binary runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run by `a_child_reports_its_own_peak_not_its_parents`, in processes of their
    /// own (a large resident set here would disturb the other tests): as the
    /// parent, makes 256 MiB resident and starts the child; as the child, prints
    /// its peak resident set.
    #[test]
    fn peak_of_this_process() {
        if std::env::var_os("SHMRING_HOST_PEAK_CHILD").is_some() {
            println!("peak={}", own_peak_rss_kb());
        } else if std::env::var_os("SHMRING_HOST_PEAK_PARENT").is_some() {
            let mut big = vec![0u8; PEAK_PARENT_BYTES];
            for i in (0..big.len()).step_by(4096) {
                big[i] = 1;
            }
            std::hint::black_box(&big);
            print!("{}", run_peak_test("SHMRING_HOST_PEAK_CHILD"));
        }
    }

    const PEAK_PARENT_BYTES: usize = 256 << 20;

    #[test]
    fn a_child_reports_its_own_peak_not_its_parents() {
        // The kernel's `ru_maxrss` of a child starts at its parent's resident set
        // at the fork.
        let text = run_peak_test("SHMRING_HOST_PEAK_PARENT");
        let peak: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("peak="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("the child said no peak: {text}"));
        assert!(peak > 0);
        assert!(
            peak < (PEAK_PARENT_BYTES as u64 >> 10) / 2,
            "the child's peak ({peak} KiB) counts its parent's memory"
        );
    }

    #[test]
    fn smaps_parser_counts_private_pages_of_private_mappings() {
        let s = "\
5600-5602 r--p 00000000 fe:00 247278    /usr/bin/x
Rss:                   8 kB
Shared_Clean:          4 kB
Private_Clean:         4 kB
Private_Dirty:         0 kB
7f00-7f40 rw-s 00000000 00:01 1234      /memfd:ring (deleted)
Private_Clean:         0 kB
Private_Dirty:       256 kB
7f40-7f48 rw-p 00000000 00:00 0
Private_Dirty:        32 kB
Anonymous:            32 kB
";
        assert_eq!(parse_smaps(s), Some(36));
        assert_eq!(parse_smaps(""), None);
    }

    #[test]
    fn reads_own_process() {
        let own = proc_memory(None).expect("own /proc status");
        assert!(own.rss_kb > 0 && own.rss_without_shmem_kb() > 0);
        let private = private_memory(None).expect("own /proc smaps");
        assert!(private > 0 && private <= own.rss_kb);
        let by_pid = proc_memory(Some(std::process::id())).expect("own /proc/PID/status");
        assert!(by_pid.rss_kb > 0);
        assert!(cpu_ns(std::process::id()).is_some());
        assert!(rusage(false).max_rss_kb > 0);
    }

    #[test]
    fn cpu_percent_is_never_negative() {
        let mut m = CpuMeter::new(std::process::id());
        let t0 = Instant::now();
        assert_eq!(m.add(t0, 5.0), None);
        // As if a thread had exited, taking a second of CPU time out of the total.
        let pct = m
            .add(t0 + Duration::from_secs(1), 4.0)
            .expect("a second sample");
        assert!(pct >= 0.0, "{pct}");
        let pct = m
            .add(t0 + Duration::from_secs(2), 5.5)
            .expect("a third sample");
        assert!((pct - 50.0).abs() < 1e-9, "{pct}");
        assert!(m.average().expect("an average") >= 0.0);
        assert!(CpuMeter::new(std::process::id()).sample().is_none());
    }
}
