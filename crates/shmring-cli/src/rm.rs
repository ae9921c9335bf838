//! `shmring rm NAME`: removes a named ring left behind by a process that was
//! killed. A ring whose consumer is alive, and a file that is not a ring, are left
//! alone.

use shmring::{Address, Segment};

use crate::cli::RmArgs;
use crate::{fail, CmdError};

/// `shmring rm NAME`.
pub fn run(a: RmArgs) -> Result<(), CmdError> {
    let name = &a.name;
    let seg = Address::Named(name.clone()).open().map_err(|e| match e {
        shmring::Error::NotFound(_) => fail(
            1,
            format!(
                "ring {name:?} does not exist (no /dev/shm/{})",
                name.trim_start_matches('/')
            ),
        ),
        e => fail(
            1,
            format!("ring {name:?}: {e}; not removed (only shmring rings are removed)"),
        ),
    })?;
    if seg.consumer_alive() {
        return Err(fail(
            1,
            format!(
                "ring {name:?} is in use: its consumer is alive; not removed (stop the recorder: \
                 it removes its ring when it ends)"
            ),
        ));
    }
    let producers = seg.stats().producers;
    drop(seg);
    Segment::unlink_named(name).map_err(|e| fail(1, format!("ring {name:?}: {e}")))?;
    eprintln!(
        "shmring rm: removed ring {name:?} (no live consumer{})",
        if producers > 0 {
            format!("; {producers} producer slots were still taken")
        } else {
            String::new()
        }
    );
    Ok(())
}
