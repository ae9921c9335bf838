//! The stop flag of long-running commands.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A flag set by SIGINT, SIGTERM or SIGHUP: a command polls it (Relaxed is enough:
/// the flag carries no data) and finishes cleanly. The handler only stores to the
/// atomic (async-signal-safe; `signal_hook::flag`). Err names the signal whose
/// handler could not be installed.
pub fn stop_flag() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| format!("cannot install a handler for signal {sig}: {e}"))?;
    }
    Ok(flag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_signal_sets_the_flag() {
        let flag = stop_flag().expect("handlers installed");
        assert!(!flag.load(Ordering::Relaxed));
        // SAFETY: raise has no memory preconditions; the handler only sets the flag.
        unsafe { libc::raise(libc::SIGHUP) };
        assert!(flag.load(Ordering::Relaxed));
    }
}
