//! Operator tools behind the `strata` CLI: inspect, verify, dump, and the side-by-side bench.

pub mod bench;
#[cfg(feature = "ursula")]
pub mod group_bench;
pub mod inspect;
pub mod verify;

pub use inspect::{dump_segment, inspect_store};
pub use verify::{verify_store, Finding, VerifyReport};
