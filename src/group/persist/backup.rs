//! A group's part in `Store::backup`: its payload segments and cold objects held from deletion
//! while the store checkpoints the state database and copies the logs.
//!
//! The checkpoint holds the state some applied commit record of each group left, with its
//! `meta/replay_from`. The holds begin before it, so every payload segment and commit record
//! that state needs, and every cold object it names, still exists when the store copies the
//! payload log and the local cold directory afterwards; the restored group replays the commit
//! records after `replay_from` as any open does (format/GROUP_STATE.md).

use crate::cold::ColdStore;
use crate::log::Log;
use crate::store::backup::BackupHold;

/// What a backup needs of one open group engine.
pub(crate) struct GroupBackup {
    pub payloads: Log,
    pub cold: ColdStore,
}

impl BackupHold for GroupBackup {
    fn hold(&self) -> Box<dyn Send> {
        Box::new((self.payloads.hold_deletions(), self.cold.hold_deletes()))
    }
}
