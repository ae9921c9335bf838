//! A consumer's or producer's arguments made into a ring: the core's rules
//! (`AddressArgs`), descriptors checked and handed over, `Exists` worded for
//! Python.

use super::*;

/// Takes ownership of a descriptor number given by Python.
pub fn own_fd(fd: &Int, what: &str) -> PyResult<OwnedFd> {
    let Fd(fd) = fd.get(what)?;
    // SAFETY: the caller hands this descriptor over (documented on the classes).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A descriptor number given by Python, checked (`what` names it in errors) and
/// not yet taken: the core takes it once the arguments go together.
pub fn fd_number(fd: Option<Int>, what: &str) -> PyResult<Option<RawFd>> {
    Ok(opt::<Fd>(fd, what)?.map(|f| f.0))
}

/// Where a ring is, as every class takes it: `address=`, a name, `fd=` (with
/// `eventfd_fd=`) or `fds=`; the rest (creating) is the consumer's.
pub fn where_args(
    address: Option<&str>,
    name: Option<&str>,
    fd: Option<Int>,
    eventfd_fd: Option<Int>,
    fds: Option<Vec<Int>>,
) -> PyResult<AddressArgs> {
    Ok(AddressArgs {
        address: address.map(Into::into),
        name: name.map(Into::into),
        fd: fd_number(fd, "fd")?,
        eventfd_fd: fd_number(eventfd_fd, "eventfd_fd")?,
        fds: fds.map(|l| fd_numbers(&l, "fds")).transpose()?,
        ..Default::default()
    })
}

/// [`fd_number`] for each of a list.
pub fn fd_numbers(list: &[Int], what: &str) -> PyResult<Vec<RawFd>> {
    Ok(each::<Fd>(list, what)?.into_iter().map(|f| f.0).collect())
}

/// The consumer of a ring: creates it or attaches to it, and hands out frames that
/// point into the ring (zero copy).
/// Opens `a` without the GIL. A ring it would create that exists already raises
/// `Exists`, saying whether its consumer is alive, or gone: the process that made
/// it ended without closing it (killed by SIGKILL, or by SIGTERM, whose default
/// action in Python runs no clean-up) and `replace_stale=False` was given. A ring
/// whose consumer is gone is otherwise removed and made again; a live ring, or a
/// file that is no ring, is never touched (the core's rule).
pub fn open(py: Python<'_>, a: Address) -> PyResult<Arc<Segment>> {
    let name = a.describe();
    let occupant = match py.detach(|| a.open()) {
        Err(shmring::Error::Exists { occupant, .. }) => occupant,
        r => return r.py_err(),
    };
    Err(crate::errors::Exists::new_err(match occupant {
        Occupant::Live => format!(
            "ring {name:?} already exists and its consumer is alive (another process \
             consumes it)"
        ),
        Occupant::Stale => format!(
            "ring {name:?} already exists but its consumer is gone: the process that made \
             it ended without closing it (killed by SIGKILL, or by SIGTERM, which runs no \
             clean-up unless the program handles it); it was kept because of \
             replace_stale=False (without it, it is replaced), or remove it with `shmring rm {name}`"
        ),
        Occupant::Foreign(e) => format!(
            "ring {name:?} already exists and is not a ring this library can use ({e}); it \
             is left alone"
        ),
        Occupant::Unknown => format!("ring {name:?} already exists"),
    }))
}

/// The ring address `text` (the core's text form: NAME, unix:PATH,
/// fd:SEG[,LOCK][,EVENTFD], create:NAME[,OPTION...], memfd:[LABEL][,OPTION...]),
/// parsed by the core. Descriptors an `fd:` address names are taken over, as
/// ``fd=`` and ``fds=`` do.
pub fn address_of(text: &str) -> PyResult<Address> {
    // SAFETY: the package documents that the descriptors an `fd:` address names are
    // handed over (as with fd= and fds=).
    unsafe { Address::parse_taking(text) }.py_err()
}
