//! Integer arguments: taken as Python gives them ([`Int`]) and checked against the
//! Rust type they become by [`Int::get`], whose error names the argument, its
//! range and the value given (a Python int never wraps, and a negative or too
//! large one is not a bare `OverflowError`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::errors::ConfigError;

/// An integer argument, unchecked: any object, judged by [`Int::get`].
#[derive(Debug, Clone)]
pub struct Int(Given);

#[derive(Debug, Clone)]
enum Given {
    Int(i128),
    /// An int beyond the 128-bit range: its repr.
    Huge(String),
    /// Not an int (nor an object with `__index__`): its type's name and repr.
    Other(String, String),
}

impl Int {
    /// The value `v` (for defaults in signatures).
    pub const fn of(v: i128) -> Int {
        Int(Given::Int(v))
    }

    /// The value as a `T`: `ConfigError` naming `what` for a value outside `T`'s
    /// range, `TypeError` naming it for an object that is no integer.
    pub fn get<T: Bounded>(&self, what: &str) -> PyResult<T> {
        let range = || format!("an integer from {} to {}", T::MIN, T::MAX);
        match &self.0 {
            Given::Int(v) if (T::MIN..=T::MAX).contains(v) => Ok(T::from_i128(*v)),
            Given::Int(v) => Err(ConfigError::new_err(format!(
                "{what} must be {}, got {v}",
                range()
            ))),
            Given::Huge(r) => Err(ConfigError::new_err(format!(
                "{what} must be {}, got {r}",
                range()
            ))),
            Given::Other(ty, r) => Err(PyTypeError::new_err(format!(
                "{what} must be {}, got {r} ({ty})",
                range()
            ))),
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Int> {
        // A float is not an integer even when whole (Python's own rule for indices).
        // Most values fit 64 bits (one C call); the 128-bit path takes the rest.
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(Int(Given::Int(v.into())));
        }
        if let Ok(v) = obj.extract::<i128>() {
            return Ok(Int(Given::Int(v)));
        }
        let repr = obj
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "?".into());
        // An int (or an object with __index__) too large for i128.
        Ok(Int(if obj.hasattr("__index__")? {
            Given::Huge(repr)
        } else {
            Given::Other(obj.get_type().name()?.to_string(), repr)
        }))
    }
}

/// A Rust integer type an [`Int`] converts to, with its range.
pub trait Bounded: Sized {
    const MIN: i128;
    const MAX: i128;
    /// `v` is inside `MIN..=MAX`.
    fn from_i128(v: i128) -> Self;
}

macro_rules! bounded {
    ($($t:ty),*) => {$(
        impl Bounded for $t {
            const MIN: i128 = <$t>::MIN as i128;
            const MAX: i128 = <$t>::MAX as i128;
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
    )*};
}
bounded!(u32, u64, usize);

/// A descriptor number: 0 to `i32::MAX`.
pub struct Fd(pub i32);

impl Bounded for Fd {
    const MIN: i128 = 0;
    const MAX: i128 = i32::MAX as i128;
    fn from_i128(v: i128) -> Self {
        Fd(v as i32)
    }
}

/// Each of `list`'s integers as a `T`, naming `what[i]` in an error.
pub fn each<T: Bounded>(list: &[Int], what: &str) -> PyResult<Vec<T>> {
    list.iter()
        .enumerate()
        .map(|(i, v)| v.get(&format!("{what}[{i}]")))
        .collect()
}

/// An optional integer argument as a `T`.
pub fn opt<T: Bounded>(v: Option<Int>, what: &str) -> PyResult<Option<T>> {
    v.map(|v| v.get(what)).transpose()
}
