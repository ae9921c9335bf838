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
    /// [`MAX_PENDING_LIMIT`]); one more is answered `too-many-pending` at once.
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

/// A peer, for fair shares: its uid and pid (0: not visible from here).
pub(super) type Peer = (u32, u32);

/// Where a new connection from `newcomer` goes when every pending entry is taken
/// (`held`: each taken entry's index, peer and acceptance time). Each peer gets a
/// fair share: the oldest pending connection of the peer holding the most is
/// dropped to make room (`Some(index)`), unless the newcomer holds as many itself
/// (then it is the one refused: `None`). So peers that hold connections open
/// without a hello cannot lock out others, however many they open.
pub(super) fn fair_share(held: &[(usize, Peer, Instant)], newcomer: Peer) -> Option<usize> {
    let count = |who: Peer| held.iter().filter(|(_, p, _)| *p == who).count();
    let (hog, most) = held
        .iter()
        .map(|&(_, p, _)| (p, count(p)))
        .max_by_key(|&(_, n)| n)?;
    if count(newcomer) >= most {
        return None;
    }
    held.iter()
        .filter(|(_, p, _)| *p == hog)
        .min_by_key(|(_, _, since)| *since)
        .map(|&(i, _, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hogs_oldest_makes_room_unless_the_newcomer_holds_as_many() {
        let t = Instant::now();
        let at = |ms| t + Duration::from_millis(ms);
        let held = [
            (0, (1, 10), at(5)),
            (1, (1, 10), at(1)),
            (2, (2, 20), at(0)),
        ];
        assert_eq!(fair_share(&held, (3, 30)), Some(1));
        assert_eq!(fair_share(&held, (2, 20)), Some(1));
        assert_eq!(fair_share(&held, (1, 10)), None);
        assert_eq!(fair_share(&[], (1, 10)), None);
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
