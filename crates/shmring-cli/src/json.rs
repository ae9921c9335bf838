//! The core's snapshots as JSON objects: one key per field of the snapshot's list
//! (`shmring::Snapshot::fields`), flags as booleans, numbers as numbers.

use serde_json::{json, Map, Value};
use shmring::{FieldKind, Snapshot};

/// Every field of `s`, in the list's order.
pub fn fields(s: &impl Snapshot) -> Map<String, Value> {
    s.fields()
        .map(|f| {
            let v = match f.kind {
                FieldKind::Flag => json!(f.value != 0),
                FieldKind::Counter | FieldKind::Gauge => json!(f.value),
            };
            (f.name.to_string(), v)
        })
        .collect()
}

/// [`fields`] as a JSON value.
pub fn object(s: &impl Snapshot) -> Value {
    Value::Object(fields(s))
}
