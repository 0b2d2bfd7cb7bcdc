//! Moving a group's state from the per-group layout (`<root>/groups/<name>/`, a RocksDB of its
//! own) into the store's state database, at the group's first open (format/GROUP_STATE.md,
//! "Upgrade from the per-group layout").
//!
//! Steps, each safe to cut by a power failure:
//! 1. the old database is opened and brought to the current format version (its own upgrade,
//!    flushed in it);
//! 2. the group's key range in the shared database is cleared (what an interrupted earlier
//!    attempt copied) and every row of every family is copied under the group's prefix;
//! 3. the shared database is flushed: the copy is durable;
//! 4. the old directory is renamed `<name>.moved` and `groups/` synced: the copy is the
//!    group's state from now on;
//! 5. `<name>.moved` is removed.
//!
//! A cut before 4 leaves the old directory, so the next open copies again (2 makes that
//! idempotent); a cut after it leaves at most `<name>.moved`, which the next open removes.
//! Group names hold no `.`, so `<name>.moved` never names a group.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{IteratorMode, WriteBatch};

use super::db::{GroupDb, COLUMN_FAMILIES};
use super::keys::prefix_end;
use super::state_db::StateDb;
use crate::error::IoContext;
use crate::fs::{sync_dir, EntryKind, Fs};
use crate::group::GroupError;
use crate::store::Store;

/// Directory of the per-group layout under the store's root.
pub const LEGACY_GROUPS_DIR: &str = "groups";

/// Rows copied per batch (the copy is durable only at the flush after the last one).
const COPY_BATCH_ROWS: usize = 4096;

/// Moves group `name`'s state from the per-group layout into `state` under `prefix`, if the
/// store still holds it that way, and removes what an earlier move left behind. `log_end` is
/// the payload log's next commit-record offset (for the old database's own upgrade).
pub(crate) fn adopt_legacy_state(
    store: &Store,
    state: &Arc<StateDb>,
    (name, prefix): (&str, &[u8]),
    log_end: u64,
) -> Result<(), GroupError> {
    let fs = store.fs();
    let groups = store.root().join(LEGACY_GROUPS_DIR);
    let old = groups.join(name);
    let moved = groups.join(format!("{name}.moved"));
    if fs.kind(&old).at(&old)? == Some(EntryKind::Dir) {
        copy_rows(fs, &old, state, prefix, log_end)?;
        state.flush()?;
        fs.rename(&old, &moved).at(&old)?;
        sync_dir(&**fs, &groups)?;
        tracing::info!(group = name, from = %old.display(), "group state moved into the store's state database");
    }
    if fs.kind(&moved).at(&moved)?.is_some() {
        fs.remove_native_dir(&moved).at(&moved)?;
        sync_dir(&**fs, &groups)?;
    }
    Ok(())
}

/// Steps 1 and 2: the old database at `dir`, upgraded, copied under `prefix` (not flushed).
fn copy_rows(
    fs: &Fs,
    dir: &Path,
    state: &StateDb,
    prefix: &[u8],
    log_end: u64,
) -> Result<(), GroupError> {
    let old = Arc::new(StateDb::open(fs, dir)?);
    GroupDb::open(old.clone(), Vec::new(), log_end)?;
    let end = prefix_end(prefix);
    let mut cleared = WriteBatch::default();
    for cf in COLUMN_FAMILIES {
        cleared.delete_range_cf(state.cf(cf)?, prefix, &end);
    }
    state.write(cleared)?;
    let mut key = prefix.to_vec();
    for cf in COLUMN_FAMILIES {
        let (from, to) = (old.cf(cf)?, state.cf(cf)?);
        let mut batch = WriteBatch::default();
        for item in old.db().iterator_cf(from, IteratorMode::Start) {
            let (k, v) = item?;
            key.truncate(prefix.len());
            key.extend_from_slice(&k);
            batch.put_cf(to, &key, v);
            if batch.len() >= COPY_BATCH_ROWS {
                state.write(std::mem::take(&mut batch))?;
            }
        }
        state.write(batch)?;
    }
    Ok(())
}
