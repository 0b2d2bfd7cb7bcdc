//! Operator tools behind the `strata` CLI: inspect, verify, dump, read and tail, and the
//! side-by-side bench.

#[cfg(feature = "tools")]
pub mod bench;
#[cfg(feature = "tools")]
pub mod group_bench;
pub mod inspect;
pub mod live;
pub mod read;
pub mod verify;

pub use inspect::{dump_segment, inspect_store, summarize_store, StoreSummary};
pub use verify::{verify_store, Finding, VerifyReport};
