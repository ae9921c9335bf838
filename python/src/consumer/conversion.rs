//! Python values of the core's: seconds, dicts of snapshots, tether lines and
//! layouts.

use super::*;

pub fn secs(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| ConfigError::new_err(format!("{what} must be >= 0 seconds, got {s}")))
}

pub fn tether_dicts<'py>(
    py: Python<'py>,
    tethers: &[shmring::TetherInfo],
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    tethers.iter().map(|t| fields_dict(py, t)).collect()
}

/// A ring's layout as a dict (`Consumer.geometry()`, `Observer.geometry()`).
pub fn geometry_dict<'py>(
    py: Python<'py>,
    g: &shmring::layout::Geometry,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("capacity", g.capacity)?;
    d.set_item("max_record", g.max_record)?;
    d.set_item("log_entries", g.log_entries)?;
    d.set_item("max_producers", g.max_producers)?;
    d.set_item("eventfd", g.flags & shmring::layout::FLAG_EVENTFD != 0)?;
    d.set_item("segment_size", g.total_size)?;
    Ok(d)
}

/// A snapshot as a dict: the names are the core's (`Snapshot::fields`); flags
/// become booleans.
pub fn fields_dict<'py>(py: Python<'py>, s: &impl Snapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for f in s.fields() {
        match f.kind {
            shmring::FieldKind::Flag => d.set_item(f.name, f.value != 0)?,
            shmring::FieldKind::Counter | shmring::FieldKind::Gauge => {
                d.set_item(f.name, f.value)?
            }
        }
    }
    Ok(d)
}
