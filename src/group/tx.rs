//! A command's transaction ([`Tx`]): the group state it leaves, planned on a clone of the
//! engine's (see [`crate::group::state`]), and the rows that persist it ([`Writes`]). Commands
//! fill one in; [`crate::group::DiskGroupEngine`]'s commit persists its writes, applies them to
//! RocksDB and only then takes its state.

use ursula_shard::BucketStreamId;

use super::cold_tier::runtime_index::{collected_pages, pages_of, PageMarks};
use super::db::Writes;
use super::state::GroupState;

/// One command's change: the group state it leaves and the [`Writes`] that persist it.
/// Derefs to its writes, so a plan writes a row with `tx.put_…` beside changing `tx.state`.
pub(crate) struct Tx {
    /// The group state as the command leaves it: planned on a clone of the engine's state
    /// (sharing every row it does not change), which the engine takes as its own only once the
    /// commit record is durable and applied to RocksDB.
    pub state: GroupState,
    writes: Writes,
    /// Runtime cold-index pages (first, last) per stream that the change makes stale
    /// ([`crate::group::cold_tier::runtime_index`]), marked once the commit is applied.
    cold_pages: PageMarks,
}

impl std::ops::Deref for Tx {
    type Target = Writes;

    fn deref(&self) -> &Writes {
        &self.writes
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut Writes {
        &mut self.writes
    }
}

impl Tx {
    /// A transaction that starts from `state` (a clone: a few reference counts).
    pub fn new(state: &GroupState) -> Self {
        Self {
            state: state.clone(),
            writes: Writes::default(),
            cold_pages: Vec::new(),
        }
    }

    /// Notes that the runtime cold-index pages `chunks` of `id` appear on change with this
    /// transaction.
    pub fn touch_cold_pages<'a>(
        &mut self,
        id: &BucketStreamId,
        chunks: impl IntoIterator<Item = &'a ursula_stream::ColdChunkRef>,
    ) {
        if let Some(pages) = pages_of(chunks) {
            self.cold_pages.push((id.clone(), pages));
        }
    }

    /// Notes that the runtime cold-index pages of streams whose pages the acknowledged GC
    /// `paths` deleted must be written again.
    pub fn touch_collected_pages(&mut self, paths: &[String]) {
        let pages = collected_pages(&self.state, paths);
        self.cold_pages.extend(pages);
    }

    /// The state and the cold-index pages the transaction leaves, once it is committed.
    pub fn into_applied(self) -> (GroupState, PageMarks) {
        (self.state, self.cold_pages)
    }

    /// Adds the command's last writes: the row of every marked stream as the planned state
    /// holds it (its checkpoint payload too when that changed), the usage of every marked
    /// bucket, and the counters.
    pub fn seal(&mut self) {
        for bucket in self.writes.take_dirty_usage() {
            if let Some(usage) = self.state.usage.get(&bucket).copied() {
                self.writes.put_usage(&bucket, &usage);
            }
        }
        for id in self.writes.take_dirty_streams() {
            let Some(row) = self.state.streams.get(&id) else {
                continue;
            };
            self.writes.put_stream(&id, row);
            if row.snapshot_changed {
                if let Some(mut row) = self.state.streams.get_mut(&id) {
                    row.snapshot_changed = false;
                }
            }
        }
        self.writes.put_counters(&self.state);
    }
}
