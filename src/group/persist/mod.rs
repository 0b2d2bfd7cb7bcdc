//! Persistence of a group: the payload log (payload and commit records), the commit record's
//! codec, and RocksDB (the store's state database, a group's rows in it, keys, rows, the binary
//! stream row, and the move from the per-group layout).

pub(crate) mod applier;
pub mod backup;
pub mod commit_record;
pub mod db;
pub mod keys;
pub(crate) mod legacy_layout;
pub(crate) mod mirror;
pub mod payload;
pub mod payload_host;
pub(crate) mod replay;
pub mod rows;
pub mod state_db;
pub mod stream_row;
