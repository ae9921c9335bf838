//! Python exceptions, one per thing that can go wrong, all under `shmring.Error`.
//! Messages are the core's `Display` strings: they say what failed and where.
//! `OSFailure` and `NotFound` are also `OSError`s (`FileNotFoundError` for the
//! latter) with the `errno`: they are made at import, with two bases.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyOSError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

create_exception!(
    shmring,
    Error,
    PyException,
    "Base class of every shmring error."
);
create_exception!(
    shmring,
    ConfigError,
    Error,
    "The ring configuration or an argument is invalid."
);
create_exception!(shmring, Exists, Error, "A named ring already exists.");
create_exception!(
    shmring,
    LayoutMismatch,
    Error,
    "The segment is not a shmring ring, or of another layout version or geometry."
);
create_exception!(
    shmring,
    Unsealed,
    Error,
    "A memfd ring is not sealed against resizing."
);
create_exception!(
    shmring,
    Full,
    Error,
    "The ring is full and the producer fails fast."
);
create_exception!(shmring, Timeout, Error, "A blocking wait ran out.");
create_exception!(
    shmring,
    TooLarge,
    Error,
    "A record exceeds the ring's max_record."
);
create_exception!(
    shmring,
    NoSlot,
    Error,
    "Every producer slot of the ring is taken."
);
create_exception!(
    shmring,
    ConsumerBusy,
    Error,
    "Another live consumer is attached."
);
create_exception!(shmring, NoConsumer, Error, "No live consumer is attached.");
create_exception!(
    shmring,
    WrongThread,
    Error,
    "No longer raised: every object may be used from any thread. Kept so that code \
     naming it still runs."
);
create_exception!(
    shmring,
    Corrupt,
    Error,
    "Something in shared memory cannot have been written by an honest peer."
);
create_exception!(
    shmring,
    Abandoned,
    Error,
    "A claim was taken from its producer."
);
create_exception!(
    shmring,
    TooManyHeld,
    Error,
    "The consumer holds as many frames as the claim log tracks; release some."
);
create_exception!(
    shmring,
    NotHeld,
    Error,
    "A frame that this consumer does not hold."
);
create_exception!(
    shmring,
    EventfdRequired,
    Error,
    "The ring uses eventfd wake-ups and the eventfd was not given (or is missing)."
);
create_exception!(
    shmring,
    Detached,
    Error,
    "This tethered consumer was detached by the ring's consumer (it stopped releasing frames for too long); attach again."
);
create_exception!(
    shmring,
    NoTetherLine,
    NoSlot,
    "Every tethered-consumer line of the ring is taken."
);
create_exception!(
    shmring,
    Released,
    Error,
    "The frame or reservation was already released."
);
create_exception!(
    shmring,
    Closed,
    Error,
    "The consumer or producer was closed."
);
create_exception!(
    shmring,
    BadMediaHeader,
    Error,
    "A record's media header is missing or malformed."
);

create_exception!(
    shmring,
    NoSpace,
    Error,
    "There is no room for the ring's memory (/dev/shm, or the creating process's memory for a memfd ring); the message says how much is needed and free."
);
create_exception!(
    shmring,
    Refused,
    Error,
    "A consumer serving its ring on a socket refused this peer; the message names the rule."
);
create_exception!(
    shmring,
    HandoffError,
    Error,
    "The hand-off over a socket broke (closed early, not a shmring socket...)."
);

/// `shmring.OSFailure(Error, OSError)` and `shmring.NotFound(Error,
/// FileNotFoundError)`, made once at import.
static OS_FAILURE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static NOT_FOUND: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// An exception class named `name` with two bases, `shmring.Error` and the
/// built-in `os_base`.
fn two_bases<'py>(
    py: Python<'py>,
    name: &str,
    os_base: Bound<'py, PyType>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "shmring")?;
    dict.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [py.get_type::<Error>(), os_base])?;
    let cls = py.get_type::<PyType>().call1((name, bases, dict))?;
    Ok(cls.cast_into::<PyType>()?.unbind())
}

/// An exception of one of the two-base classes: `cls(errno, message)`, as
/// `OSError` takes them (so `errno` and `strerror` are set).
fn os_error(cell: &PyOnceLock<Py<PyType>>, errno: i32, msg: String) -> PyErr {
    Python::attach(|py| match cell.get(py) {
        Some(cls) => PyErr::from_type(cls.bind(py).clone(), (errno, msg)),
        None => Error::new_err(msg),
    })
}

/// Converts a core error into the Python exception named after it.
pub fn to_py(e: shmring::Error) -> PyErr {
    use shmring::Error as E;
    let msg = e.to_string();
    match e {
        E::Os { source, .. } => os_error(&OS_FAILURE, source.raw_os_error().unwrap_or(0), msg),
        E::Config(_) => ConfigError::new_err(msg),
        E::Exists { .. } => Exists::new_err(msg),
        E::NotFound(_) => os_error(&NOT_FOUND, ENOENT, msg),
        E::LayoutMismatch { .. } => LayoutMismatch::new_err(msg),
        E::Unsealed(_) => Unsealed::new_err(msg),
        E::Full { .. } => Full::new_err(msg),
        E::Timeout { .. } => Timeout::new_err(msg),
        E::TooLarge { .. } => TooLarge::new_err(msg),
        E::NoSlot { .. } => NoSlot::new_err(msg),
        E::ConsumerBusy(_) => ConsumerBusy::new_err(msg),
        E::NoConsumer(_) => NoConsumer::new_err(msg),
        E::Corrupt { .. } | E::Truncated(_) => Corrupt::new_err(msg),
        E::Abandoned { .. } => Abandoned::new_err(msg),
        E::TooManyHeld { .. } => TooManyHeld::new_err(msg),
        E::NotHeld { .. } => NotHeld::new_err(msg),
        E::Closed(_) => Closed::new_err(msg),
        E::EventfdRequired(_) => EventfdRequired::new_err(msg),
        // Descriptors that are not the ring's: how the caller attached is wrong.
        E::Descriptors { .. } => ConfigError::new_err(msg),
        // The package's reservations pair every reserve with one commit or abort;
        // these come only from misuse of the raw producer API.
        E::ReservationOpen(_) | E::NoReservation(_) => Error::new_err(msg),
        E::Refused { .. } => Refused::new_err(msg),
        E::Handoff { .. } => HandoffError::new_err(msg),
        E::Detached { .. } => Detached::new_err(msg),
        E::NoTetherLine { .. } => NoTetherLine::new_err(msg),
        E::NoSpace { .. } => NoSpace::new_err(msg),
    }
}

/// `?`-friendly conversion.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for shmring::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// ENOENT (Linux), the errno of `NotFound`: the core's error carries none, as it
/// is the one reason a name or a socket is not found.
const ENOENT: i32 = 2;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let os_failure = two_bases(
        py,
        "OSFailure",
        py.get_type::<PyOSError>(),
        "A system call failed (mmap, shm_open, ...): an OSError with its errno.",
    )?;
    let not_found = two_bases(
        py,
        "NotFound",
        py.get_type::<PyFileNotFoundError>(),
        "A named ring (or a consumer's socket) does not exist: a FileNotFoundError \
         (errno ENOENT).",
    )?;
    m.add("OSFailure", os_failure.bind(py))?;
    m.add("NotFound", not_found.bind(py))?;
    // Set once per process: the module is initialised once.
    let _ = OS_FAILURE.set(py, os_failure);
    let _ = NOT_FOUND.set(py, not_found);
    macro_rules! add {
        ($($t:ident),*) => { $( m.add(stringify!($t), py.get_type::<$t>())?; )* };
    }
    add!(
        Error,
        ConfigError,
        Exists,
        LayoutMismatch,
        Unsealed,
        Full,
        Timeout,
        TooLarge,
        NoSlot,
        ConsumerBusy,
        NoConsumer,
        Corrupt,
        Abandoned,
        TooManyHeld,
        NotHeld,
        EventfdRequired,
        Detached,
        NoTetherLine,
        Released,
        Closed,
        BadMediaHeader,
        Refused,
        HandoffError,
        WrongThread,
        NoSpace
    );
    Ok(())
}
