//! The consumer's options: [`ConsumerOptions`] (what each does, and its default),
//! and the same options as every binding takes them: one set of names, and one
//! rule for a duration that is not given or is never ([`ConsumerSettings`]).

use std::time::Duration;

use crate::error::Error;
use crate::filter::Filter;

/// Tuning for a consumer.
///
/// ```
/// use std::time::Duration;
/// use shmring::ConsumerOptions;
/// // A consumer that needs one order across producers, and trusts them all:
/// // records in claim order, and a live producer's claim waited for for ever.
/// let opts = ConsumerOptions {
///     overtake_after: None,
///     claim_timeout: None,
///     ..Default::default()
/// };
/// assert!(opts.auto_reset);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// How often to look after the ring's health: whether the producer of a
    /// pending claim is alive (one `fcntl`), whether that claim is really its own,
    /// and whether the shared state still agrees with the consumer's (an audit of
    /// the cursors, the claim log in flight and the identity line). A dead
    /// producer's claim is skipped, and corruption found, at the first look after;
    /// so this bounds the stall a crash causes and, with `auto_reset`, how long a
    /// peer's scribbling can stop the ring after the peer stops.
    pub liveness_interval: Duration,
    /// Most polls to spin before sleeping in a blocking wait (0: sleep at once).
    /// Spinning adapts below this: it halves each time a spin ends in a sleep
    /// anyway, and doubles (from one poll) each time a record ends a sleep within
    /// a few microseconds (so a fast stream is caught without sleeping, and a
    /// record every few tens of microseconds costs no spin).
    pub spin: u32,
    /// Deliver committed records behind a claim that has stayed pending this long
    /// (100 ms by default), so one stuck producer (a capture thread on a lock, a
    /// process stopped with Ctrl-Z or by a debugger) does not stop the others.
    /// The overtaken claim is *parked*: its record is pinned (producers place
    /// records around it, so the ring goes on), and it is delivered when its
    /// producer commits it, however late, and skipped when it aborts or dies. A
    /// parked claim stops nobody, so the claim timeout alone does not take it
    /// back (a `queue` of pool buffers before a GStreamer sink holds claims for
    /// half a second and more, honestly): parked claims past the claim timeout
    /// are taken back once the claim log is half full behind them, any parked
    /// claim once it is full. Each producer's records stay in its commit order;
    /// records of different producers may arrive out of claim order.
    ///
    /// `None`: strict claim order across producers. Then one live producer that
    /// holds a claim holds every record behind it until the claim timeout, and
    /// one that takes a new claim each time one is taken back holds them again,
    /// each time: trust every producer, or keep the claim timeout short.
    pub overtake_after: Option<Duration>,
    /// On corruption, carry on by itself (the default): a record whose header does
    /// not fit its claim is skipped; shared state that contradicts the consumer's
    /// (cursors, claim log) makes it reset the ring at once. Both are counted
    /// (`Stats::corruption`, `Stats::resets`, [`Consumer::health`](crate::Consumer::health)); frames held
    /// across a reset stay valid. `false`: report [`Error::Corrupt`] instead, and
    /// leave resetting to [`Consumer::reset`](crate::Consumer::reset).
    pub auto_reset: bool,
    /// The ring's consumer detaches a tethered consumer whose read cursor stays
    /// behind its own without moving for this long (it gets [`Error::Detached`]),
    /// so a stuck reader stops holding the ring after this bound. Its death is
    /// found within one `liveness_interval`, like a producer's.
    pub tether_stall_limit: Duration,
    /// Let a record wait up to this long before the consumer sees it (`None`, the
    /// default: a producer wakes a sleeping consumer at every commit). With a
    /// budget, a consumer whose last wake found records sleeps on its own timer
    /// for at most the budget, and producers do not wake it unless the ring is
    /// half full (bytes or claim log): one wake-up then serves every record that
    /// came meanwhile. After a wake that found nothing it sleeps as without a
    /// budget, so the first record of a burst wakes it at once.
    pub latency_budget: Option<Duration>,
    /// Take back a claim the consumer waits for in claim order (reserved and not
    /// committed, not parked: see `overtake_after`) this long after the consumer
    /// first saw it pending, whoever holds it (500 ms by default): its
    /// producer's commit then fails with [`Error::Abandoned`] and
    /// writes nothing. Its record stays pinned until that producer settles the
    /// claim (its next call on the ring) or dies, so a producer stopped for
    /// longer (a debugger, a cgroup quota) never writes into another's record. A
    /// producer fills a reservation in microseconds to milliseconds; a claim older
    /// than this is a stuck producer or one made up by a peer in a live
    /// producer's name, which nothing in shared memory can tell apart. Claims
    /// pending together are taken back together: one clock for the ring, not one
    /// per claim. `None`: wait for live producers for ever (trusted producers
    /// only).
    pub claim_timeout: Option<Duration>,
    /// Release unread, as the filter does, a record older than this when the
    /// consumer reaches it (its age: now on CLOCK_MONOTONIC less the record's
    /// timestamp, which every binding and element stamps on that clock), and
    /// count it in `filtered`: a live viewer that fell behind skips to fresh
    /// records instead of working through a backlog. `None` (the default): every
    /// record, however old. A timestamp ahead of now is age 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shmring::{Address, Config, Consumer, ConsumerOptions, Meta};
    /// let seg = Address::Memfd { label: "doc-max-age".into(), config: Config::with_capacity(1 << 16) }.open()?;
    /// let c = Consumer::with_options(seg.clone(), ConsumerOptions {
    ///     max_age: Some(Duration::from_millis(100)),
    ///     ..Default::default()
    /// })?;
    /// let mut p = seg.producer()?;
    /// let mut old = Meta::new(0, 0);
    /// old.timestamp_ns -= 1_000_000_000; // captured a second ago
    /// p.send(b"stale", old)?;
    /// p.send(b"fresh", Meta::new(0, 0))?;
    /// assert_eq!(c.try_next()?.unwrap().payload(), b"fresh");
    /// assert_eq!(seg.stats().records_filtered, 1);
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub max_age: Option<Duration>,
    /// Which records to hand out, by kind and stream (the default: all; the same
    /// rule as a tap's, [`crate::TapOptions::filter`]). A record the filter refuses
    /// is released at once, unread: its space returns to producers as if it had
    /// been handed out and released, so a filtered-out stream never fills the ring
    /// ([`crate::Stats::records_filtered`], [`crate::TetherInfo::records_filtered`]
    /// count them; they are not in `records_consumed`).
    ///
    /// ```
    /// use shmring::{media::kind, Address, Config, Consumer, ConsumerOptions, Filter, Meta};
    /// let seg = Address::memfd("doc-filter", Config::with_capacity(1 << 16)).open()?;
    /// let c = Consumer::with_options(seg.clone(), ConsumerOptions {
    ///     filter: Filter { stream: Some(2), ..Filter::ANY },
    ///     ..Default::default()
    /// })?;
    /// let mut p = seg.producer()?;
    /// p.send(b"one", Meta::new(1, kind::RAW))?;
    /// p.send(b"two", Meta::new(2, kind::RAW))?;
    /// assert_eq!(c.try_next()?.unwrap().payload(), b"two");
    /// assert_eq!(seg.stats().records_filtered, 1);
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub filter: Filter,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            liveness_interval: Duration::from_millis(50),
            spin: 64,
            overtake_after: Some(Duration::from_millis(100)),
            auto_reset: true,
            tether_stall_limit: Duration::from_millis(500),
            latency_budget: None,
            claim_timeout: Some(Duration::from_millis(500)),
            max_age: None,
            filter: Filter::ANY,
        }
    }
}

/// One of [`ConsumerOptions`]' durations as a binding gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Not given, or 0: the library's default.
    Default,
    /// Never: the option is off (`None` in the core).
    Never,
    /// This long.
    Exactly(Duration),
}

impl Setting {
    /// A duration in nanoseconds, as C and Go give it: 0 the default, `u64::MAX`
    /// (`SHMRING_NEVER`) never.
    pub fn from_nanos(ns: u64) -> Setting {
        match ns {
            0 => Setting::Default,
            u64::MAX => Setting::Never,
            ns => Setting::Exactly(Duration::from_nanos(ns)),
        }
    }

    /// A number of `unit`s as Python (seconds) and Node.js (milliseconds) give it:
    /// absent or 0 the default, infinity never. Err (naming the option `name` and
    /// the unit) for a negative number or NaN.
    pub fn from_f64(value: Option<f64>, unit: Duration, name: &str) -> Result<Setting, Error> {
        let unit_name = match unit.as_millis() {
            1000 => "seconds",
            1 => "milliseconds",
            _ => "units",
        };
        match value {
            None => Ok(Setting::Default),
            Some(v) if v == f64::INFINITY => Ok(Setting::Never),
            Some(0.0) => Ok(Setting::Default),
            Some(v) => Duration::try_from_secs_f64(v * unit.as_secs_f64())
                .map(Setting::Exactly)
                .map_err(|_| {
                    Error::Config(format!(
                        "{name} must be a non-negative number of {unit_name} (or infinite: never), got {v}"
                    ))
                }),
        }
    }

    /// The value of an option that may be off (`None`), whose default is `default`.
    pub fn optional(self, default: Option<Duration>) -> Option<Duration> {
        match self {
            Setting::Default => default,
            Setting::Never => None,
            Setting::Exactly(d) => Some(d),
        }
    }

    /// The value of an option that cannot be off, named `name`, whose default is
    /// `default`: Err if it is never.
    pub fn required(self, default: Duration, name: &str) -> Result<Duration, Error> {
        match self {
            Setting::Default => Ok(default),
            Setting::Never => Err(Error::Config(format!("{name} cannot be never"))),
            Setting::Exactly(d) => Ok(d),
        }
    }
}

/// [`ConsumerOptions`] as a binding gives them: one set of names, and one rule
/// for a duration that is not given or is never; [`ConsumerSettings::options`]
/// applies the rules.
///
/// | core (`ConsumerOptions`) | C (`shmring_consumer_options`) | Python (`Consumer(...)`) | Node.js (`new Consumer({...})`) | Go (`ConsumerOptions`) |
/// | --- | --- | --- | --- | --- |
/// | `liveness_interval` | `liveness_interval_ns` | `liveness_interval` (s) | `livenessIntervalMs` | `LivenessInterval` |
/// | `spin` | `spin` | `spin` | `spin` | `Spin` |
/// | `overtake_after` | `overtake_after_ns` | `overtake_after` (s) | `overtakeAfterMs` | `OvertakeAfter` |
/// | `auto_reset` (negated) | `manual_reset` | `manual_reset` | `manualReset` | `ManualReset` |
/// | `tether_stall_limit` | `tether_stall_limit_ns` | `tether_stall_limit` (s) | `tetherStallLimitMs` | `TetherStallLimit` |
/// | `latency_budget` | `latency_budget_ns` | `latency_budget` (s) | `latencyBudgetMs` | `LatencyBudget` |
/// | `claim_timeout` | `claim_timeout_ns` | `claim_timeout` (s) | `claimTimeoutMs` | `ClaimTimeout` |
/// | `max_age` | `max_age_ns` | `max_age` (s) | `maxAgeMs` | `MaxAge` |
/// | `filter.kind` | `kind` with `filter` bit `SHMRING_FILTER_KIND` | `kind` | `kind` | `Filter.Kind` with `Filter.ByKind` |
/// | `filter.stream` | `stream` with `filter` bit `SHMRING_FILTER_STREAM` | `stream` | `stream` | `Filter.Stream` with `Filter.ByStream` |
///
/// Each binding gives durations in its language's unit (C nanoseconds, Python
/// seconds, Node.js milliseconds, Go `time.Duration`). A duration that is absent,
/// or 0, is the library's default ([`ConsumerOptions::default`]); never (C
/// `SHMRING_NEVER`, Python `math.inf`, Node.js `Infinity`, Go `shmring.Never`)
/// turns off what is optional: overtaking, the latency budget, the claim timeout,
/// the age limit (off by default).
/// `manual_reset` is `auto_reset` negated, so that its absent value is `false` in
/// every binding; `spin` is a count, and 0 means "sleep at once". `kind` and
/// `stream` are the filter's, by the names a tap's filter has in the binding:
/// absent (in C and Go, where a zeroed struct must take every record: its bit or
/// flag clear) takes any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerSettings {
    pub liveness_interval: Setting,
    /// None: the default.
    pub spin: Option<u32>,
    pub overtake_after: Setting,
    pub manual_reset: bool,
    pub tether_stall_limit: Setting,
    pub latency_budget: Setting,
    pub claim_timeout: Setting,
    pub max_age: Setting,
    /// None: any kind.
    pub kind: Option<u32>,
    /// None: any stream.
    pub stream: Option<u32>,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            liveness_interval: Setting::Default,
            spin: None,
            overtake_after: Setting::Default,
            manual_reset: false,
            tether_stall_limit: Setting::Default,
            latency_budget: Setting::Default,
            claim_timeout: Setting::Default,
            max_age: Setting::Default,
            kind: None,
            stream: None,
        }
    }
}

/// What the value of one of [`ConsumerSettings`]' options is, in every binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKind {
    /// A duration: a [`Setting`], in the binding's unit (absent or 0 the default,
    /// never where the option may be off).
    Duration,
    /// A whole number from 0 to `u32::MAX` (`spin`, and the filter's `kind` and
    /// `stream`).
    Count,
    /// A flag (`manual_reset`).
    Flag,
}

/// A value for one of [`ConsumerSettings`]' options, as a binding read it
/// ([`ConsumerSettings::set`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingValue {
    Duration(Setting),
    Count(u32),
    Flag(bool),
}

impl ConsumerSettings {
    /// The options, in this order, with what each takes: the names the bindings
    /// take them by (in their own case, with their unit's suffix where the
    /// language has no duration type).
    pub const OPTIONS: [(&'static str, SettingKind); 10] = [
        ("liveness_interval", SettingKind::Duration),
        ("spin", SettingKind::Count),
        ("overtake_after", SettingKind::Duration),
        ("manual_reset", SettingKind::Flag),
        ("tether_stall_limit", SettingKind::Duration),
        ("latency_budget", SettingKind::Duration),
        ("claim_timeout", SettingKind::Duration),
        ("max_age", SettingKind::Duration),
        ("kind", SettingKind::Count),
        ("stream", SettingKind::Count),
    ];

    /// The names of [`ConsumerSettings::OPTIONS`], in that order.
    pub const NAMES: [&'static str; 10] = {
        let mut names = [""; 10];
        let mut i = 0;
        while i < names.len() {
            names[i] = Self::OPTIONS[i].0;
            i += 1;
        }
        names
    };

    /// Sets the option `name` (one of [`ConsumerSettings::NAMES`]) to `value`, for
    /// a binding that reads options by name. [`Error::Config`] for a name that is
    /// none of them, or a value of another [`SettingKind`] than the option's.
    ///
    /// ```
    /// use shmring::{ConsumerSettings, Setting, SettingValue};
    /// let mut s = ConsumerSettings::default();
    /// s.set("stream", SettingValue::Count(2))?;
    /// s.set("claim_timeout", SettingValue::Duration(Setting::Never))?;
    /// assert_eq!((s.stream, s.claim_timeout), (Some(2), Setting::Never));
    /// assert!(s.set("strem", SettingValue::Count(2)).is_err());
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn set(&mut self, name: &str, value: SettingValue) -> Result<(), Error> {
        use SettingValue::{Count, Duration, Flag};
        match (name, value) {
            ("liveness_interval", Duration(d)) => self.liveness_interval = d,
            ("spin", Count(n)) => self.spin = Some(n),
            ("overtake_after", Duration(d)) => self.overtake_after = d,
            ("manual_reset", Flag(f)) => self.manual_reset = f,
            ("tether_stall_limit", Duration(d)) => self.tether_stall_limit = d,
            ("latency_budget", Duration(d)) => self.latency_budget = d,
            ("claim_timeout", Duration(d)) => self.claim_timeout = d,
            ("max_age", Duration(d)) => self.max_age = d,
            ("kind", Count(n)) => self.kind = Some(n),
            ("stream", Count(n)) => self.stream = Some(n),
            (name, value) => {
                return Err(Error::Config(
                    match Self::OPTIONS.iter().find(|o| o.0 == name) {
                        Some((_, kind)) => {
                            format!("consumer option {name} takes a {kind:?}, not {value:?}")
                        }
                        None => format!(
                            "{name:?} is not a consumer option (they are {})",
                            Self::NAMES.join(", ")
                        ),
                    },
                ))
            }
        }
        Ok(())
    }

    /// The core's options: what is not given is the library's default.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shmring::{ConsumerOptions, Setting, ConsumerSettings};
    /// let o = ConsumerSettings {
    ///     claim_timeout: Setting::Never,
    ///     overtake_after: Setting::from_nanos(200_000_000),
    ///     ..ConsumerSettings::default()
    /// }
    /// .options()?;
    /// assert_eq!((o.claim_timeout, o.overtake_after), (None, Some(Duration::from_millis(200))));
    /// assert_eq!(o.liveness_interval, ConsumerOptions::default().liveness_interval);
    /// # Ok::<(), shmring::Error>(())
    /// ```
    pub fn options(&self) -> Result<ConsumerOptions, Error> {
        let d = ConsumerOptions::default();
        Ok(ConsumerOptions {
            liveness_interval: self
                .liveness_interval
                .required(d.liveness_interval, "liveness_interval")?,
            spin: self.spin.unwrap_or(d.spin),
            overtake_after: self.overtake_after.optional(d.overtake_after),
            auto_reset: !self.manual_reset,
            tether_stall_limit: self
                .tether_stall_limit
                .required(d.tether_stall_limit, "tether_stall_limit")?,
            latency_budget: self.latency_budget.optional(d.latency_budget),
            claim_timeout: self.claim_timeout.optional(d.claim_timeout),
            max_age: self.max_age.optional(d.max_age),
            filter: Filter {
                kind: self.kind,
                stream: self.stream,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_cores_options() {
        let dbg = format!("{:?}", ConsumerOptions::default());
        let mut inner = dbg[dbg.find('{').unwrap() + 1..dbg.rfind('}').unwrap()].to_string();
        // A nested struct's fields are the binding's names: `filter: Filter { .. }`
        // counts as `filter`.
        while let (Some(open), Some(close)) = (inner.find(" {"), inner.find('}')) {
            inner.replace_range(open..=close, "");
        }
        // The struct's field names: every top-level `name: ` (values hold no colon
        // at the top level but `Some(..)` and durations).
        let core: Vec<&str> = inner
            .split(", ")
            .filter_map(|kv| kv.split_once(": ").map(|(k, _)| k.trim()))
            .filter(|k| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .collect();
        let bindings: Vec<&str> = ConsumerSettings::NAMES
            .iter()
            .map(|n| match *n {
                "manual_reset" => "auto_reset",
                "kind" | "stream" => "filter",
                n => n,
            })
            .fold(Vec::new(), |mut v, n| {
                if v.last() != Some(&n) {
                    v.push(n);
                }
                v
            });
        assert_eq!(core, bindings);
    }

    #[test]
    fn every_option_is_set_by_its_name_and_kind() {
        let mut s = ConsumerSettings::default();
        for (name, kind) in ConsumerSettings::OPTIONS {
            let value = match kind {
                SettingKind::Duration => SettingValue::Duration(Setting::from_nanos(7)),
                SettingKind::Count => SettingValue::Count(7),
                SettingKind::Flag => SettingValue::Flag(true),
            };
            s.set(name, value).unwrap();
            let wrong = match kind {
                SettingKind::Flag => SettingValue::Count(1),
                _ => SettingValue::Flag(true),
            };
            assert!(s.set(name, wrong).is_err(), "{name}");
        }
        let seven = Setting::from_nanos(7);
        assert_eq!(
            s,
            ConsumerSettings {
                liveness_interval: seven,
                spin: Some(7),
                overtake_after: seven,
                manual_reset: true,
                tether_stall_limit: seven,
                latency_budget: seven,
                claim_timeout: seven,
                max_age: seven,
                kind: Some(7),
                stream: Some(7),
            }
        );
        let e = s.set("strem", SettingValue::Count(1)).unwrap_err();
        assert!(
            e.to_string().contains("\"strem\" is not a consumer option"),
            "{e}"
        );
    }

    #[test]
    fn absent_and_zero_are_the_default_and_never_turns_off() {
        let d = ConsumerOptions::default();
        let o = ConsumerSettings::default().options().unwrap();
        assert_eq!(format!("{o:?}"), format!("{d:?}"));
        assert_eq!(Setting::from_nanos(0), Setting::Default);
        assert_eq!(Setting::from_nanos(u64::MAX), Setting::Never);
        assert_eq!(
            Setting::from_nanos(5),
            Setting::Exactly(Duration::from_nanos(5))
        );
        let s = Duration::from_secs(1);
        assert_eq!(Setting::from_f64(None, s, "x").unwrap(), Setting::Default);
        assert_eq!(
            Setting::from_f64(Some(0.0), s, "x").unwrap(),
            Setting::Default
        );
        assert_eq!(
            Setting::from_f64(Some(f64::INFINITY), s, "x").unwrap(),
            Setting::Never
        );
        assert_eq!(
            Setting::from_f64(Some(2.5), Duration::from_millis(1), "x").unwrap(),
            Setting::Exactly(Duration::from_micros(2500))
        );
        for bad in [-1.0, f64::NAN, f64::NEG_INFINITY] {
            let e = Setting::from_f64(Some(bad), s, "claim_timeout").unwrap_err();
            assert!(e.to_string().contains("claim_timeout must be"), "{e}");
        }
        let never = ConsumerSettings {
            overtake_after: Setting::Never,
            latency_budget: Setting::Never,
            claim_timeout: Setting::Never,
            ..ConsumerSettings::default()
        };
        let o = never.options().unwrap();
        assert_eq!(
            (o.overtake_after, o.latency_budget, o.claim_timeout),
            (None, None, None)
        );
        for required in [
            ConsumerSettings {
                liveness_interval: Setting::Never,
                ..ConsumerSettings::default()
            },
            ConsumerSettings {
                tether_stall_limit: Setting::Never,
                ..ConsumerSettings::default()
            },
        ] {
            assert!(required.options().is_err());
        }
    }
}
