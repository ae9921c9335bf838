//! Arguments as JavaScript gives them, checked before anything is done with them:
//! every integer against its range (a JS number is a double: NaN, fractions,
//! negative numbers and numbers beyond 2**53 - 1 are refused, never wrapped or
//! rounded), every value against its type, and every key of an options object
//! against the keys the call reads ([`Options::finish`]). Each error is
//! `SHMRING_INVALID_ARG` and names the argument.

use napi::{sys, Env, JsBigInt, JsBoolean, JsNumber, JsObject, JsString, JsUnknown, NapiRaw};
use napi::{NapiValue, ValueType};

use crate::errors::{error, INVALID_ARG};

/// The largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// An integer type arguments convert to, with its range.
pub trait Int: Sized {
    const MIN: i64;
    /// At most [`MAX_SAFE`].
    const MAX: u64;
    /// `v` lies in `MIN..=MAX`.
    fn from_f64(v: f64) -> Self;
}

impl Int for u32 {
    const MIN: i64 = 0;
    const MAX: u64 = u32::MAX as u64;
    fn from_f64(v: f64) -> u32 {
        v as u32
    }
}

impl Int for u64 {
    const MIN: i64 = 0;
    const MAX: u64 = MAX_SAFE;
    fn from_f64(v: f64) -> u64 {
        v as u64
    }
}

/// A descriptor number.
pub struct Fd(pub i32);

impl Int for Fd {
    const MIN: i64 = 0;
    const MAX: u64 = i32::MAX as u64;
    fn from_f64(v: f64) -> Fd {
        Fd(v as i32)
    }
}

fn invalid(env: Env, msg: String) -> napi::Error {
    error(env, INVALID_ARG, &msg)
}

/// What a value is, for messages: `a string`, `NaN`, `-1`, `1.5`.
fn shown(v: &JsUnknown) -> String {
    match v.get_type() {
        Ok(ValueType::Number) => {
            // SAFETY: checked to be a number.
            let n = unsafe { v.cast::<JsNumber>() }
                .get_double()
                .unwrap_or(f64::NAN);
            number_text(n)
        }
        Ok(ValueType::String) => "a string".into(),
        Ok(ValueType::Boolean) => "a boolean".into(),
        Ok(ValueType::BigInt) => "a bigint".into(),
        Ok(ValueType::Null) => "null".into(),
        Ok(ValueType::Undefined) => "undefined".into(),
        Ok(ValueType::Function) => "a function".into(),
        Ok(ValueType::Object) => "an object".into(),
        _ => "a value of another type".into(),
    }
}

/// A number as JavaScript would print it, integers exactly (`2**60` is
/// 1152921504606846976, not 1152921504606847000).
fn number_text(n: f64) -> String {
    if n.is_finite() && n.fract() == 0.0 && n.abs() < 1e21 {
        format!("{n:.0}")
    } else if n.is_nan() {
        "NaN".into()
    } else if n.is_infinite() {
        if n > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        n.to_string()
    }
}

/// `v` (a number) as a `T`: `SHMRING_INVALID_ARG` naming `what` unless it is a
/// whole number in `T`'s range.
pub fn int_of<T: Int>(env: Env, v: f64, what: &str) -> napi::Result<T> {
    if v.is_finite() && v.fract() == 0.0 && v >= T::MIN as f64 && v <= T::MAX as f64 {
        return Ok(T::from_f64(v));
    }
    let beyond = if T::MAX == MAX_SAFE && v.fract() == 0.0 && v > MAX_SAFE as f64 {
        " (Number.MAX_SAFE_INTEGER: larger numbers are not exact)"
    } else {
        ""
    };
    Err(invalid(
        env,
        format!(
            "{what} must be an integer from {} to {}{beyond}, got {}",
            T::MIN,
            T::MAX,
            number_text(v)
        ),
    ))
}

/// A number argument (any number: durations are checked by the core).
pub fn number(env: Env, v: &JsUnknown, what: &str) -> napi::Result<f64> {
    if v.get_type()? != ValueType::Number {
        return Err(invalid(
            env,
            format!("{what} must be a number, got {}", shown(v)),
        ));
    }
    // SAFETY: checked to be a number.
    unsafe { v.cast::<JsNumber>() }.get_double()
}

/// An integer argument.
pub fn int<T: Int>(env: Env, v: &JsUnknown, what: &str) -> napi::Result<T> {
    if v.get_type()? != ValueType::Number {
        return Err(invalid(
            env,
            format!(
                "{what} must be an integer from {} to {}, got {}",
                T::MIN,
                T::MAX,
                shown(v)
            ),
        ));
    }
    int_of(env, number(env, v, what)?, what)
}

/// Is `v` absent (undefined or null)?
pub fn absent(v: &JsUnknown) -> napi::Result<bool> {
    Ok(matches!(
        v.get_type()?,
        ValueType::Undefined | ValueType::Null
    ))
}

/// An optional argument: `None` when undefined or null.
pub fn opt<R>(
    v: Option<JsUnknown>,
    f: impl FnOnce(&JsUnknown) -> napi::Result<R>,
) -> napi::Result<Option<R>> {
    match v {
        Some(v) if !absent(&v)? => f(&v).map(Some),
        _ => Ok(None),
    }
}

/// A string argument.
pub fn string(env: Env, v: &JsUnknown, what: &str) -> napi::Result<String> {
    if v.get_type()? != ValueType::String {
        return Err(invalid(
            env,
            format!("{what} must be a string, got {}", shown(v)),
        ));
    }
    // SAFETY: checked to be a string.
    unsafe { v.cast::<JsString>() }.into_utf8()?.into_owned()
}

/// A boolean argument.
pub fn boolean(env: Env, v: &JsUnknown, what: &str) -> napi::Result<bool> {
    if v.get_type()? != ValueType::Boolean {
        return Err(invalid(
            env,
            format!("{what} must be a boolean, got {}", shown(v)),
        ));
    }
    // SAFETY: checked to be a boolean.
    unsafe { v.cast::<JsBoolean>() }.get_value()
}

/// A bigint argument from 0 to 2**64 - 1.
pub fn big_u64(env: Env, v: &JsUnknown, what: &str) -> napi::Result<u64> {
    if v.get_type()? != ValueType::BigInt {
        return Err(invalid(
            env,
            format!(
                "{what} must be a bigint from 0n to 2n**64n - 1n, got {}",
                shown(v)
            ),
        ));
    }
    // SAFETY: checked to be a bigint.
    let (n, lossless) = unsafe { v.cast::<JsBigInt>() }.get_u64()?;
    if !lossless {
        return Err(invalid(
            env,
            format!("{what} must be a bigint from 0n to 2n**64n - 1n"),
        ));
    }
    Ok(n)
}

/// An array argument, each element read by `f` (named `what[i]`).
pub fn array<R>(
    env: Env,
    v: &JsUnknown,
    what: &str,
    mut f: impl FnMut(&JsUnknown, &str) -> napi::Result<R>,
) -> napi::Result<Vec<R>> {
    if v.get_type()? != ValueType::Object || !v.is_array()? {
        return Err(invalid(
            env,
            format!("{what} must be an array, got {}", shown(v)),
        ));
    }
    // SAFETY: checked to be an array (an object).
    let a = unsafe { v.cast::<JsObject>() };
    (0..a.get_array_length()?)
        .map(|i| f(&a.get_element::<JsUnknown>(i)?, &format!("{what}[{i}]")))
        .collect()
}

/// An object argument.
pub fn object(env: Env, v: &JsUnknown, what: &str) -> napi::Result<JsObject> {
    if v.get_type()? != ValueType::Object {
        return Err(invalid(
            env,
            format!("{what} must be an object, got {}", shown(v)),
        ));
    }
    // SAFETY: checked to be an object.
    Ok(unsafe { v.cast::<JsObject>() })
}

/// An options object, read key by key: each read records its key, and
/// [`Options::finish`] refuses any other key the object has (a misspelt option
/// is an error, not a default).
pub struct Options {
    env: Env,
    obj: Option<JsObject>,
    /// The call, for messages ("new Consumer()").
    call: &'static str,
    read: Vec<String>,
}

impl Options {
    /// The options `v` of `call` (absent: none).
    pub fn new(env: Env, v: Option<JsUnknown>, call: &'static str) -> napi::Result<Options> {
        let obj = match v {
            Some(v) if !absent(&v)? => Some(object(env, &v, &format!("{call}'s options"))?),
            _ => None,
        };
        Ok(Options {
            env,
            obj,
            call,
            read: Vec::new(),
        })
    }

    /// The value of `key`, recorded as known; `None` when absent, undefined or null.
    pub fn get(&mut self, key: &str) -> napi::Result<Option<JsUnknown>> {
        self.read.push(key.to_string());
        let Some(obj) = &self.obj else {
            return Ok(None);
        };
        let v = obj.get_named_property::<JsUnknown>(key)?;
        Ok(if absent(&v)? { None } else { Some(v) })
    }

    pub fn number(&mut self, key: &str) -> napi::Result<Option<f64>> {
        let env = self.env;
        opt(self.get(key)?, |v| number(env, v, key))
    }

    pub fn int<T: Int>(&mut self, key: &str) -> napi::Result<Option<T>> {
        let env = self.env;
        opt(self.get(key)?, |v| int(env, v, key))
    }

    pub fn boolean(&mut self, key: &str) -> napi::Result<Option<bool>> {
        let env = self.env;
        opt(self.get(key)?, |v| boolean(env, v, key))
    }

    pub fn string(&mut self, key: &str) -> napi::Result<Option<String>> {
        let env = self.env;
        opt(self.get(key)?, |v| string(env, v, key))
    }

    pub fn big_u64(&mut self, key: &str) -> napi::Result<Option<u64>> {
        let env = self.env;
        opt(self.get(key)?, |v| big_u64(env, v, key))
    }

    /// An array of `T`s.
    pub fn ints<T: Int>(&mut self, key: &str) -> napi::Result<Option<Vec<T>>> {
        let env = self.env;
        opt(self.get(key)?, |v| {
            array(env, v, key, |e, w| int(env, e, w))
        })
    }

    /// Refuses every key of the object that was not read.
    pub fn finish(self) -> napi::Result<()> {
        let Some(obj) = &self.obj else {
            return Ok(());
        };
        let mut names = std::ptr::null_mut();
        // SAFETY: a live object of this environment; the out-pointer is local.
        let status = unsafe {
            sys::napi_get_all_property_names(
                self.env.raw(),
                obj.raw(),
                sys::KeyCollectionMode::own_only,
                sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
                sys::KeyConversion::numbers_to_strings,
                &mut names,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::from_status(napi::Status::from(status)));
        }
        // SAFETY: an array napi just made in this environment.
        let names = unsafe { JsObject::from_raw_unchecked(self.env.raw(), names) };
        let mut unknown = Vec::new();
        for i in 0..names.get_array_length()? {
            let key = names
                .get_element::<JsString>(i)?
                .into_utf8()?
                .into_owned()?;
            if !self.read.contains(&key) {
                unknown.push(format!("{key:?}"));
            }
        }
        if unknown.is_empty() {
            return Ok(());
        }
        Err(invalid(
            self.env,
            format!(
                "{}: unknown option{} {}; the options are {}",
                self.call,
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                self.read.join(", ")
            ),
        ))
    }
}

/// The JavaScript name of the core's option `name` (a `ConsumerSettings` name):
/// camelCase, with `Ms` after a duration's.
pub fn js_name(name: &str, duration: bool) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    if duration {
        out.push_str("Ms");
    }
    out
}
