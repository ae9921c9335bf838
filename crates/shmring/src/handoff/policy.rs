//! Who may connect in which role, and how a listener shares its bounded pending
//! connections among peers. Decisions only: no socket is touched here.

use std::time::{Duration, Instant};

use super::{Refusal, Role, DEFAULT_HELLO_TIMEOUT, DEFAULT_MAX_PENDING, MAX_PENDING_LIMIT};
use crate::error::{Error, Result};
use crate::sys::unix;

/// Who may connect in a role: a peer is allowed when its uid or its gid is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    /// Allowed user ids.
    pub uids: Vec<u32>,
    /// Allowed group ids (the peer's primary gid at connect time).
    pub gids: Vec<u32>,
}

impl Allow {
    /// Only this process's effective uid (the default).
    pub fn same_uid() -> Allow {
        Allow {
            uids: vec![unix::euid()],
            gids: Vec::new(),
        }
    }

    /// Nobody: the role is not offered.
    pub fn nobody() -> Allow {
        Allow {
            uids: Vec::new(),
            gids: Vec::new(),
        }
    }

    /// Also allows user `uid`.
    pub fn uid(mut self, uid: u32) -> Allow {
        if !self.uids.contains(&uid) {
            self.uids.push(uid);
        }
        self
    }

    /// Also allows group `gid`.
    pub fn gid(mut self, gid: u32) -> Allow {
        if !self.gids.contains(&gid) {
            self.gids.push(gid);
        }
        self
    }

    /// Does this list allow a peer with these credentials?
    pub fn permits(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }

    fn is_nobody(&self) -> bool {
        self.uids.is_empty() && self.gids.is_empty()
    }

    fn only_own_uid(&self) -> bool {
        self.gids.is_empty() && self.uids.iter().all(|&u| u == unix::euid())
    }
}

impl Default for Allow {
    fn default() -> Allow {
        Allow::same_uid()
    }
}

/// How a [`Listener`](super::Listener) decides and bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerOptions {
    /// Who may connect as a producer. Default: this process's uid.
    pub producers: Allow,
    /// Who may connect as an observer. Default: this process's uid.
    pub observers: Allow,
    /// Connections accepted and not yet answered, at most (1 to
    /// [`MAX_PENDING_LIMIT`]). A connection whose hello is there when it is
    /// accepted needs none; when all are taken, the uid holding the most gives up
    /// the one that has waited longest without a hello (answered
    /// `too-many-pending`), or the newcomer is refused if its uid holds none and
    /// every other uid one.
    pub max_pending: usize,
    /// Time a peer has to send its hello after the consumer accepted it.
    pub hello_timeout: Duration,
    /// Mode of the socket file; `None`: 0600 when only this uid is allowed, else
    /// 0666 (other uids must be able to connect; the allow-list decides).
    pub socket_mode: Option<u32>,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        ListenerOptions {
            producers: Allow::same_uid(),
            observers: Allow::same_uid(),
            max_pending: DEFAULT_MAX_PENDING,
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            socket_mode: None,
        }
    }
}

impl ListenerOptions {
    /// Default options that also allow user `uid` in both roles.
    pub fn allow_uid(mut self, uid: u32) -> Self {
        self.producers = self.producers.uid(uid);
        self.observers = self.observers.uid(uid);
        self
    }

    /// Default options that also allow group `gid` in both roles.
    pub fn allow_gid(mut self, gid: u32) -> Self {
        self.producers = self.producers.gid(gid);
        self.observers = self.observers.gid(gid);
        self
    }

    /// [`Error::Config`] for bounds a listener cannot keep (named by `socket`).
    pub(super) fn check(&self, socket: &str) -> Result<()> {
        if self.max_pending == 0 || self.max_pending > MAX_PENDING_LIMIT {
            return Err(Error::Config(format!(
                "listener {socket}: max_pending {} is not in 1..={MAX_PENDING_LIMIT}",
                self.max_pending
            )));
        }
        if self.hello_timeout.is_zero() {
            return Err(Error::Config(format!(
                "listener {socket}: hello_timeout must be more than zero"
            )));
        }
        Ok(())
    }

    /// The socket file's mode: as given, else 0600 when only this uid may connect,
    /// else 0666.
    pub(super) fn socket_mode(&self) -> u32 {
        self.socket_mode.unwrap_or(
            if self.producers.only_own_uid() && self.observers.only_own_uid() {
                0o600
            } else {
                0o666
            },
        )
    }

    /// May a peer with these credentials take `role`? If not, the rule and why.
    pub(super) fn decide(
        &self,
        role: Role,
        uid: u32,
        gid: u32,
    ) -> std::result::Result<(), (Refusal, String)> {
        let allow = match role {
            Role::Producer => &self.producers,
            Role::Observer => &self.observers,
        };
        if allow.is_nobody() {
            Err((
                Refusal::Role,
                format!("this consumer takes no {}s", role.name()),
            ))
        } else if !allow.permits(uid, gid) {
            Err((
                Refusal::Credentials,
                format!(
                    "peer uid {uid} gid {gid} is not on this consumer's {} allow-list",
                    role.name()
                ),
            ))
        } else {
            Ok(())
        }
    }
}

/// A pending connection as the fair share sees it: its entry, its peer's uid (as
/// `SO_PEERCRED` says) and when it was accepted.
pub(super) type Held = (usize, u32, Instant);

/// Which pending connection makes room for a newcomer from `uid` that has not sent
/// its whole hello yet, when every entry is taken (`held`, reordered here; nothing
/// allocated). Shares are per uid, because a process can fork more pids but not
/// more uids:
///
/// * the other uid holding the most entries (between equals, the one with the
///   oldest entry) gives up its oldest, if it holds at least two more than the
///   newcomer's uid: so the newcomer's uid never ends up holding more than the
///   uid it took from;
/// * else the newcomer's own uid gives up its oldest entry;
/// * else (its uid holds none, every other uid one) the newcomer is refused: `None`.
///
/// The oldest, not the newest, because an honest peer sends its hello at once
/// after connecting, and a complete hello is answered as soon as it is read: the
/// entry that has waited longest without one is the least likely to be an honest
/// peer's, and a flood can only push out connections that stay silent as long as
/// it takes `max_pending` newer ones to arrive.
pub(super) fn make_room(held: &mut [Held], uid: u32) -> Option<usize> {
    held.sort_unstable_by_key(|&(_, u, since)| (u, since));
    let mut own = None;
    // (entries, oldest entry's index, its acceptance time) of the uid to take from.
    let mut top: Option<(usize, usize, Instant)> = None;
    for run in held.chunk_by(|a, b| a.1 == b.1) {
        let (i, u, since) = run[0];
        if u == uid {
            own = Some((run.len(), i));
        } else if top.is_none_or(|(n, _, s)| run.len() > n || (run.len() == n && since < s)) {
            top = Some((run.len(), i, since));
        }
    }
    let own_count = own.map_or(0, |(n, _)| n);
    match top {
        Some((n, i, _)) if own_count + 1 < n => Some(i),
        _ => own.map(|(_, i)| i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_of_the_uid_holding_most_makes_room() {
        let t = Instant::now();
        let at = |ms| t + Duration::from_millis(ms);
        // uid 1: entries 0 (5 ms) and 1 (1 ms); uid 2: entry 2 (0 ms).
        let held = [(0, 1, at(5)), (1, 1, at(1)), (2, 2, at(0))];
        // A stranger holds none, uid 1 two: uid 1's oldest goes.
        assert_eq!(make_room(&mut held.clone(), 3), Some(1));
        // uid 2 holds one, uid 1 two: 1 + 1 is not fewer than 2, so uid 2 gives up
        // its own oldest rather than take uid 1 down to its level.
        assert_eq!(make_room(&mut held.clone(), 2), Some(2));
        // uid 1 holds the most: its own oldest.
        assert_eq!(make_room(&mut held.clone(), 1), Some(1));
        // Every uid holds one and the newcomer's none: the newcomer is refused.
        let one_each = [(0, 1, at(5)), (1, 2, at(1))];
        assert_eq!(make_room(&mut one_each.clone(), 3), None);
        assert_eq!(make_room(&mut [], 1), None);
    }

    #[test]
    fn a_flood_from_one_uid_never_takes_another_uids_entry() {
        // uid 7 floods: every newcomer of its own replaces its own oldest entry,
        // however many processes it forks; uid 8's one connection stays.
        let t = Instant::now();
        let mut held: Vec<Held> = (0..16)
            .map(|i| {
                (
                    i,
                    if i == 5 { 8 } else { 7 },
                    t + Duration::from_millis(i as u64),
                )
            })
            .collect();
        for k in 0..100u64 {
            let victim = make_room(&mut held, 7).expect("uid 7 holds entries");
            let e = held.iter_mut().find(|e| e.0 == victim).unwrap();
            assert_eq!(e.1, 7, "newcomer {k} pushed out uid 8");
            *e = (victim, 7, t + Duration::from_millis(100 + k));
        }
        // And uid 8's next newcomer takes uid 7's oldest, between equals of uid 7
        // the one accepted first.
        let oldest7 = held
            .iter()
            .filter(|e| e.1 == 7)
            .min_by_key(|e| e.2)
            .unwrap()
            .0;
        assert_eq!(make_room(&mut held, 8), Some(oldest7));
    }

    #[test]
    fn nobody_is_a_role_refusal_and_strangers_a_credentials_one() {
        let opts = ListenerOptions {
            observers: Allow::nobody(),
            ..ListenerOptions::default()
        };
        let me = unix::euid();
        assert!(opts.decide(Role::Producer, me, u32::MAX).is_ok());
        assert_eq!(
            opts.decide(Role::Observer, me, 0).unwrap_err().0,
            Refusal::Role
        );
        let stranger = me.wrapping_add(1);
        assert_eq!(
            opts.decide(Role::Producer, stranger, u32::MAX)
                .unwrap_err()
                .0,
            Refusal::Credentials
        );
        assert_eq!(opts.socket_mode(), 0o600);
        assert_eq!(opts.clone().allow_uid(stranger).socket_mode(), 0o666);
    }
}
