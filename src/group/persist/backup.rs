//! A group's part in `Store::backup`: a RocksDB checkpoint taken while the group's payload
//! segments and cold objects are held from deletion.
//!
//! The checkpoint is the state some applied commit record left, with its `meta/replay_from`.
//! The holds begin before it, so every payload segment and commit record that state needs, and
//! every cold object it names, still exists when the store copies the payload log and the
//! local cold directory afterwards; the restored group replays the commit records after
//! `replay_from` as any open does (format/GROUP_STATE.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::DB;

use crate::cold::ColdStore;
use crate::error::{StoreError, StoreResult};
use crate::fs::Fs;
use crate::log::Log;
use crate::store::backup::BackupSource;

/// What a backup needs of one open group engine.
pub(crate) struct GroupBackup {
    pub db: Arc<DB>,
    pub fs: Fs,
    pub dir: PathBuf,
    pub payloads: Log,
    pub cold: ColdStore,
}

impl BackupSource for GroupBackup {
    fn checkpoint(&self, dir: &Path) -> StoreResult<Box<dyn Send>> {
        let holds = (self.payloads.hold_deletions(), self.cold.hold_deletes());
        // The checkpoint flushes the memtables: a durability point of the group's RocksDB.
        self.fs
            .external_sync(&self.dir)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        let rocks = |e: rocksdb::Error| StoreError::io(dir, std::io::Error::other(e.into_string()));
        Checkpoint::new(&self.db)
            .map_err(rocks)?
            .create_checkpoint(dir)
            .map_err(rocks)?;
        Ok(Box::new(holds))
    }
}
