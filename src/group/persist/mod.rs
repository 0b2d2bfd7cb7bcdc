//! Persistence of a group: the payload log (payload and commit records), the commit record's
//! codec, and RocksDB (column families, keys, rows, the binary stream row).

pub(crate) mod applier;
pub mod backup;
pub mod commit_record;
pub mod db;
pub mod keys;
pub(crate) mod mirror;
pub mod payload;
pub(crate) mod replay;
pub mod rows;
pub mod stream_row;
