//! The one-write liveness matrix (DESIGN §7: no write can kill the ring for good).
//!
//! For every 8-byte word of the control block, the slot table and the claim log
//! ([`words`], named by the layout's fields), every value of a small data-driven
//! set ([`values`]: absolute boundaries, and per field values relative to what it
//! holds), and every ring state ([`State`]): a fresh small ring in that state gets
//! the one write, the writer is gone, and honest producers' records must reach the
//! consumer again within [`BUDGET`] and arrive exactly once from then on
//! ([`Case::run`]). Case ids read `state/word/value` (`empty/write/pos+cap`).
//!
//! ```
//! use shmring_testkit::matrix::{Matrix, State};
//! let m = Matrix::new();
//! let case = m.case("empty/cursors.peek/=0").expect("a case id");
//! assert_eq!(case.state, State::Empty);
//! assert!(m.size(&State::ALL[..7], |_| true) > 10_000);
//! // The placed state's ring is larger (placement starts at 1 MiB): its matrix.
//! let placed = Matrix::for_state(State::Placed);
//! assert!(placed.case("placed/write/pos+cap").is_some());
//! ```

mod case;
mod ring;
mod run;
mod values;
mod words;

pub use case::{Case, Outcome, Symptom, AFTER, BUDGET};
pub use ring::{
    config, options, typical_units, writer_child, Ring, State, Writer, CAPACITY, LIVENESS,
    LOG_ENTRIES, MAX_PRODUCERS, PLACED_CAPACITY, WRITER_ENTRY,
};
pub use run::{representative, run, Matrix, Report};
pub use values::{apply, values, Bits, Ctx, FieldOp, Op, Peek, Value, ABSOLUTE};
pub use words::{region, words, Field, Region, Role, Word};
