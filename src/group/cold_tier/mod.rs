//! The group's cold tier: object names, the state transitions of flush, compaction and GC
//! (`cold_ops`), the object-store work (`cold_worker`), GC entries set aside after failed
//! deletes (`gc_failures`), and the cold-index pages ursula's runtime compacts from
//! (`runtime_index`).

pub mod cold_ops;
pub mod cold_paths;
pub mod cold_worker;
pub mod gc_failures;
pub mod runtime_index;
