//! The group's cold tier: object names, the state transitions of flush, compaction and GC
//! (`cold_ops`), and the object-store work (`cold_worker`).

pub mod cold_ops;
pub mod cold_paths;
pub mod cold_worker;
