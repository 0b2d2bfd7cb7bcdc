//! The store's one RocksDB for the state of every group (format/GROUP_STATE.md, "Layout"):
//! `<root>/group_state/`, the column families of `db::COLUMN_FAMILIES`, every key of a
//! group under its prefix ([`group_prefix`]). Opened once per store, on the first group engine,
//! and shared through [`Store::shared`]: a group costs no database, files, descriptors or threads
//! of its own, and opening one reads its key range.
//!
//! Batches are applied without RocksDB's WAL and flushed atomically (every family cut at one
//! sequence number), so a flush leaves each group's rows and its `meta/replay_from` as one of
//! its applied batches left them, whatever the other groups were doing: replay from that
//! position restores the rest from the group's commit records, as with a database of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{ColumnFamilyDescriptor, FlushOptions, Options, WriteBatch, WriteOptions, DB};

use super::db::{CF_META, COLUMN_FAMILIES};
use crate::error::{StoreError, StoreResult};
use crate::fs::{create_dir_durable, Fs};
use crate::group::GroupError;
use crate::store::backup::BackupSource;
use crate::store::Store;

/// Directory of the state database under the store's root.
pub const STATE_DIR: &str = "group_state";

/// Version of the state database's layout (group prefixes); stored under the store-level key
/// [`STORE_FORMAT_KEY`] of the `meta` family.
pub const STATE_DB_VERSION: u64 = 1;

/// The store-level key of the layout version. It starts with a zero byte, which no group
/// prefix does (a prefix starts with its name's length, at least 1).
pub const STORE_FORMAT_KEY: &[u8] = b"\0state_db_version";

/// Longest group name: its length is the first byte of the group's key prefix.
pub const MAX_GROUP_NAME: usize = 200;

/// The key prefix of group `name`: `u8 len, name`. Lengths make one group's prefix never a
/// prefix of another's, so a group's rows are exactly the keys that start with it.
pub fn group_prefix(name: &str) -> Vec<u8> {
    assert!(
        (1..=MAX_GROUP_NAME).contains(&name.len()),
        "group names are validated at open"
    );
    let mut prefix = Vec::with_capacity(1 + name.len());
    prefix.push(name.len() as u8);
    prefix.extend_from_slice(name.as_bytes());
    prefix
}

/// An open RocksDB holding group state: the store's shared one, or (while it is moved into the
/// shared one) a group's database of the earlier per-group layout.
pub(crate) struct StateDb {
    db: DB,
    /// The file layer, told of every durability point of RocksDB (see [`crate::fs`]).
    fs: Fs,
    dir: PathBuf,
}

impl StateDb {
    /// The store's state database, opened (created when absent) by the first caller and kept
    /// by the store until it closes.
    pub fn of_store(store: &Store) -> Result<Arc<Self>, GroupError> {
        let db = store.shared(|| {
            let dir = store.root().join(STATE_DIR);
            let opened = Self::open(store.fs(), &dir).and_then(|db| {
                db.mark_layout()?;
                Ok(db)
            });
            opened.map_err(|e| match e {
                GroupError::Store(e) => e,
                other => StoreError::Invalid(format!("{}: {other}", dir.display())),
            })
        })?;
        let source: Arc<dyn BackupSource> = db.clone();
        store.register_backup_source(STATE_DIR, Arc::downgrade(&source));
        Ok(db)
    }

    /// Opens (creating when absent) the database in `dir`, which is created through `fs` and
    /// handed to RocksDB as a native directory.
    pub fn open(fs: &Fs, dir: &Path) -> Result<Self, GroupError> {
        create_dir_durable(&**fs, dir)?;
        fs.native_dir(dir).map_err(|e| StoreError::io(dir, e))?;
        // What a batch applied since the last flush relies on is its commit record: closing
        // flushes nothing more, so a drop behaves as a power cut does (the fault layer copies
        // this directory as the engine left it) and replay is what restores those batches.
        let mut options =
            Options::default().get_options_from_string("avoid_flush_during_shutdown=true")?;
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // Batches are applied without the WAL; a flush must cut every family at one point.
        options.set_atomic_flush(true);
        let families = COLUMN_FAMILIES
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
        let db = DB::open_cf_descriptors(&options, dir, families)?;
        Ok(Self {
            db,
            fs: fs.clone(),
            dir: dir.to_path_buf(),
        })
    }

    /// Checks the layout version of a shared database, writing it (durably) into a new one.
    fn mark_layout(&self) -> Result<(), GroupError> {
        let meta = self.cf(CF_META)?;
        match self.db.get_cf(meta, STORE_FORMAT_KEY)? {
            Some(v) if v.as_slice() == STATE_DB_VERSION.to_be_bytes() => Ok(()),
            Some(v) => Err(GroupError::Corrupt(format!(
                "state database layout version {v:02x?}, this build reads {STATE_DB_VERSION}"
            ))),
            None => {
                let mut batch = WriteBatch::default();
                batch.put_cf(meta, STORE_FORMAT_KEY, STATE_DB_VERSION.to_be_bytes());
                self.write(batch)?;
                self.flush()
            }
        }
    }

    /// The RocksDB handle.
    pub fn db(&self) -> &DB {
        &self.db
    }

    /// The handle of column family `name`.
    pub fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily, GroupError> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| GroupError::Corrupt(format!("missing column family {name}")))
    }

    /// Writes `batch` without RocksDB's WAL (durable at the next flush).
    pub fn write(&self, batch: WriteBatch) -> Result<(), GroupError> {
        let mut options = WriteOptions::default();
        options.disable_wal(true);
        Ok(self.db.write_opt(batch, &options)?)
    }

    /// Makes every applied batch of every group durable: one atomic flush of all column
    /// families (announced to the file layer first, a crash point of the power-cut tests).
    pub fn flush(&self) -> Result<(), GroupError> {
        self.fs
            .external_sync(&self.dir)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        let families = COLUMN_FAMILIES
            .iter()
            .map(|name| self.cf(name))
            .collect::<Result<Vec<_>, _>>()?;
        let mut options = FlushOptions::default();
        options.set_wait(true);
        Ok(self.db.flush_cfs_opt(&families, &options)?)
    }
}

impl BackupSource for StateDb {
    fn checkpoint(&self, dir: &Path) -> StoreResult<()> {
        // The checkpoint flushes the memtables: a durability point of the database.
        self.fs
            .external_sync(&self.dir)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        let rocks = |e: rocksdb::Error| StoreError::io(dir, std::io::Error::other(e.into_string()));
        Checkpoint::new(&self.db)
            .map_err(rocks)?
            .create_checkpoint(dir)
            .map_err(rocks)
    }
}
