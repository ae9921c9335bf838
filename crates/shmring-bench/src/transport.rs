//! Every transport of `shmring bench`: the one list. Its names (on the command
//! line, in the tables and the JSON), which are built into this binary, which run
//! by default, and what sets a row apart are all read from here; a new row is a
//! variant, its line in [`Transport::ALL`], and its arm in the worker's dispatch.

use std::time::Duration;

use shmring::ConsumerOptions;

/// One row of the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// The ring, zero copy: records reserved, written and read in place.
    Shmring,
    /// The ring through `Producer::send`: one copy into the ring.
    ShmringCopy,
    /// The ring, its consumer with a latency budget ([`BUDGET_ROW`]).
    ShmringBudget,
    /// The ring with a tethered consumer beside its own, reading every record.
    ShmringTethered,
    /// The ring with a tap beside its consumer.
    ShmringTap,
    Iceoryx2,
    /// A Unix stream socket.
    Uds,
    /// A Unix stream socket per reader, two readers: the producer writes twice.
    UdsTwoReaders,
    Tcp,
    Pipe,
    /// A WebSocket as a browser sends it: masked, in 131,000-byte fragments.
    WebSocket,
    /// The same writing and reading in one process, with no transport.
    Floor,
    /// The same writing and reading by two threads of one process pinned to two
    /// cores, each record handed over by pointer with a futex wake: the limit of
    /// any zero-copy transport between processes.
    Floor2Core,
    /// A futex ping-pong between the two processes, no ring and no payload.
    Wakeup,
    /// A Python receiver of a WebSocket (`python/bench/py_transport_bench.py`).
    PyWebsocket,
    /// A Python receiver of a ring.
    PyShmring,
}

/// Which runs a transport is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// The default set (when built in).
    Default,
    /// A second reader of every record: only when named; video and 4 KiB workloads.
    SecondReader,
    /// A Python receiver: only when named; the video workload; its figures are the
    /// receiving Python process's only.
    Python,
}

/// A transport's line in the list.
pub struct Spec {
    pub transport: Transport,
    /// Its name on the command line, in the tables and the JSON.
    pub name: &'static str,
    pub set: Set,
    /// The cargo feature of `shmring-cli` that builds it in, if it needs one.
    pub feature: Option<&'static str>,
}

const fn spec(transport: Transport, name: &'static str, set: Set) -> Spec {
    Spec {
        transport,
        name,
        set,
        feature: None,
    }
}

/// The latency budget of the `shmring-budget` row: its consumer lets a record wait
/// up to this long, so one wake-up serves many records.
pub const BUDGET_ROW: Duration = Duration::from_millis(1);

impl Transport {
    /// Every transport, in table order (indexed by the variant: see the test).
    pub const ALL: &'static [Spec] = &[
        spec(Transport::Shmring, "shmring", Set::Default),
        spec(Transport::ShmringCopy, "shmring-copy", Set::Default),
        spec(Transport::ShmringBudget, "shmring-budget", Set::Default),
        spec(
            Transport::ShmringTethered,
            "shmring-tethered",
            Set::SecondReader,
        ),
        spec(Transport::ShmringTap, "shmring-tap", Set::SecondReader),
        Spec {
            feature: Some("iceoryx2"),
            ..spec(Transport::Iceoryx2, "iceoryx2", Set::Default)
        },
        spec(Transport::Uds, "uds", Set::Default),
        spec(Transport::UdsTwoReaders, "uds-2readers", Set::SecondReader),
        spec(Transport::Tcp, "tcp", Set::Default),
        spec(Transport::Pipe, "pipe", Set::Default),
        spec(Transport::WebSocket, "websocket", Set::Default),
        spec(Transport::Floor, "floor", Set::Default),
        spec(Transport::Floor2Core, "floor-2core", Set::Default),
        spec(Transport::Wakeup, "wakeup", Set::Default),
        spec(Transport::PyWebsocket, "py-websocket", Set::Python),
        spec(Transport::PyShmring, "py-shmring", Set::Python),
    ];

    pub fn spec(self) -> &'static Spec {
        &Transport::ALL[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The transport of this name.
    pub fn named(name: &str) -> Option<Transport> {
        Transport::ALL
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.transport)
    }

    pub fn set(self) -> Set {
        self.spec().set
    }

    /// Is it compiled into this binary?
    pub fn built(self) -> bool {
        match self.spec().feature {
            Some("iceoryx2") => cfg!(feature = "iceoryx2"),
            Some(_) => false,
            None => true,
        }
    }

    /// The transports run when none are named.
    pub fn default_set() -> impl Iterator<Item = Transport> {
        Transport::ALL
            .iter()
            .filter(|s| s.set == Set::Default && s.transport.built())
            .map(|s| s.transport)
    }

    /// Does it run in one process, with no transport (a floor)?
    pub fn is_floor(self) -> bool {
        matches!(self, Transport::Floor | Transport::Floor2Core)
    }

    /// Is it one of the rows of one ring, written by the same producer?
    pub fn is_ring(self) -> bool {
        matches!(
            self,
            Transport::Shmring
                | Transport::ShmringCopy
                | Transport::ShmringBudget
                | Transport::ShmringTethered
                | Transport::ShmringTap
        )
    }

    /// The consumer options of a ring row: the library's defaults, plus the latency
    /// budget of `shmring-budget`.
    pub fn consumer_options(self) -> ConsumerOptions {
        ConsumerOptions {
            latency_budget: (self == Transport::ShmringBudget).then_some(BUDGET_ROW),
            ..ConsumerOptions::default()
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        Transport::named(s).ok_or_else(|| {
            let known: Vec<&str> = Transport::ALL.iter().map(|s| s.name).collect();
            format!("unknown transport {s:?} (known: {})", known.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_its_line_and_every_name_one_transport() {
        for (i, s) in Transport::ALL.iter().enumerate() {
            assert_eq!(s.transport as usize, i, "{} is out of place", s.name);
            assert_eq!(Transport::named(s.name), Some(s.transport));
            assert_eq!(s.name.parse::<Transport>(), Ok(s.transport));
        }
        assert!("carrier-pigeon".parse::<Transport>().is_err());
        let d: Vec<&str> = Transport::default_set().map(Transport::name).collect();
        assert!(d.contains(&"shmring") && d.contains(&"floor") && !d.contains(&"shmring-tap"));
    }
}
