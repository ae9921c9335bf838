//! `shmring rm NAME`: removes a named ring left behind by a process that was
//! killed, by the core's stale-ring rule ([`shmring::remove_stale`], the one
//! creating uses). A ring whose consumer is alive, and a file that is not a ring,
//! are left alone.

use shmring::{Error, Occupant};

use crate::cli::RmArgs;
use crate::{fail, CmdError};

/// `shmring rm NAME`.
pub fn run(a: RmArgs) -> Result<(), CmdError> {
    let name = &a.name;
    let removed = shmring::remove_stale(name).map_err(|e| match e {
        Error::NotFound(_) => fail(
            1,
            format!(
                "ring {name:?} does not exist (no /dev/shm/{})",
                name.trim_start_matches('/')
            ),
        ),
        Error::Exists {
            occupant: Occupant::Live,
            ..
        } => fail(
            1,
            format!(
                "ring {name:?} is in use: its consumer is alive; not removed (stop the recorder: \
                 it removes its ring when it ends)"
            ),
        ),
        Error::Exists {
            occupant: Occupant::Foreign(why),
            ..
        } => fail(
            1,
            format!("ring {name:?}: {why}; not removed (only shmring rings are removed)"),
        ),
        e => fail(1, format!("ring {name:?}: {e}")),
    })?;
    eprintln!(
        "shmring rm: removed ring {name:?} (no live consumer{})",
        if removed.producers > 0 {
            format!("; {} producer slots were still taken", removed.producers)
        } else {
            String::new()
        }
    );
    Ok(())
}
