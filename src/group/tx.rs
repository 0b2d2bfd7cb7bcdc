//! A command's transaction ([`Tx`]): the group state it leaves, planned on a clone of the
//! engine's (see [`crate::group::state`]), and the rows that persist it ([`Writes`]). Commands
//! fill one in; [`crate::group::DiskGroupEngine`]'s commit persists its writes, applies them to
//! RocksDB and only then takes its state.

use ursula_shard::BucketStreamId;

use super::cold_tier::runtime_index::{collected_pages, pages_of, PageMarks};
use super::db::Writes;
use super::deferred_digests::{DeferredDigest, DeferredDigests, DigestJob, DigestSums};
use super::state::integrity::add_digest;
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
    /// Inline appends whose integrity digests are not yet in `state`'s rows: added while
    /// sealing, or once the commit record is synced ([`crate::group::deferred_digests`]).
    digests: DeferredDigests,
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
            digests: DeferredDigests::default(),
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

    /// Leaves the integrity digest of an inline append to the commit ([`Self::seal`]); the
    /// plan counted the append in its stream's row already
    /// ([`crate::group::state::integrity::count_append`]).
    pub fn defer_digest(&mut self, digest: DeferredDigest) {
        self.digests.push(digest);
    }

    /// Makes room for `appends` appends to `id` (their message rows, digest ops and deferred
    /// digests), so a batch's planning grows nothing by doubling.
    pub fn reserve_appends(&mut self, id: &BucketStreamId, appends: usize) {
        self.writes.reserve_messages(id, appends);
        self.digests.reserve(appends);
    }

    /// Adds digest sums to the planned rows of their streams.
    fn add_digests(&mut self, sums: &DigestSums) {
        for (id, sum) in sums {
            if let Some(mut row) = self.state.streams.get_mut(id) {
                add_digest(&mut row, *sum);
            }
        }
    }

    /// Adds the command's last writes: the row of every marked stream as the planned state
    /// holds it (its checkpoint payload too when that changed), the usage of every marked
    /// bucket, and the counters. The digests of small appends are added to the rows first;
    /// those of large ones are left out of the rows and named by digest ops instead
    /// ([`Self::start_digests`]).
    pub fn seal(&mut self) {
        if !self.digests.worth_deferring() {
            let sums = std::mem::take(&mut self.digests).compute();
            self.add_digests(&sums);
        }
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
        for op in self.digests.ops() {
            self.writes.push_op(op);
        }
    }

    /// Starts hashing the digests deferred so far on the helper thread, if they are worth
    /// deferring: called once the command has planned its appends, before it writes their
    /// payloads ([`DeferredDigests::start_early`]).
    pub fn start_digests_early(&mut self) {
        self.digests.start_early();
    }

    /// Starts hashing the deferred digests beside the commit's sync (after [`Self::seal`]).
    pub fn start_digests(&mut self) -> Option<DigestJob> {
        std::mem::take(&mut self.digests).start()
    }

    /// Adds the sums of `job` to the planned rows and writes those rows again, after the
    /// commit record (which lacks them) went to the log and before RocksDB applies it: a
    /// later put of a key wins within a batch.
    pub fn finish_digests(&mut self, job: DigestJob) {
        let sums = job.wait();
        self.add_digests(&sums);
        self.writes.reserve_rows(sums.len());
        for (id, _) in &sums {
            if let Some(row) = self.state.streams.get(&**id) {
                self.writes.put_stream(id, row);
            }
        }
    }
}
