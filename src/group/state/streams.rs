//! The group's stream rows in memory, with the sum of their hot bytes kept as rows change, so
//! the group hot bytes every append response reports cost nothing per stream. A persistent map:
//! cloning it shares every row (see [`crate::group::state`]).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use ursula_shard::BucketStreamId;

use crate::group::rows::StreamRow;
use crate::group::state::{ByStream, GroupState};

/// Stream rows by id; read through `Deref`, changed only through the methods below. Each row
/// sits behind its own `Arc`: changing one row of a cloned state copies that row and the map's
/// path to it, not the rows beside it (a map node holds up to 32 rows, ~17 KB copied per
/// command when they were stored inline).
#[derive(Debug, Default, Clone)]
pub(crate) struct Streams {
    rows: ByStream<Arc<StreamRow>>,
    /// Sum of [`GroupState::stream_hot_bytes`] over `rows`.
    hot: u64,
}

impl Deref for Streams {
    type Target = ByStream<Arc<StreamRow>>;

    fn deref(&self) -> &Self::Target {
        &self.rows
    }
}

impl Streams {
    /// Rows loaded from disk.
    pub fn from_rows(rows: ByStream<StreamRow>) -> Self {
        let rows: ByStream<Arc<StreamRow>> = rows
            .into_iter()
            .map(|(id, row)| (id, Arc::new(row)))
            .collect();
        let hot = rows.values().map(|r| GroupState::stream_hot_bytes(r)).sum();
        Self { rows, hot }
    }

    /// Adds or replaces a row; returns the row it replaced (shared, not copied).
    pub fn insert(&mut self, id: BucketStreamId, row: StreamRow) -> Option<Arc<StreamRow>> {
        self.hot += GroupState::stream_hot_bytes(&row);
        let old = self.rows.insert(id, Arc::new(row));
        if let Some(old) = &old {
            self.hot -= GroupState::stream_hot_bytes(old);
        }
        old
    }

    /// Removes a row; returns it (shared, not copied).
    pub fn remove(&mut self, id: &BucketStreamId) -> Option<Arc<StreamRow>> {
        let old = self.rows.remove(id)?;
        self.hot -= GroupState::stream_hot_bytes(&old);
        Some(old)
    }

    /// A row to change in place; the hot-byte sum follows when the guard drops.
    pub fn get_mut(&mut self, id: &BucketStreamId) -> Option<StreamMut<'_>> {
        let hot = &mut self.hot;
        self.rows.get_mut(id).map(|row| {
            let row = Arc::make_mut(row);
            StreamMut {
                before: GroupState::stream_hot_bytes(row),
                row,
                hot,
            }
        })
    }

    /// Hot bytes of every stream.
    pub fn hot_bytes(&self) -> u64 {
        debug_assert_eq!(
            self.hot,
            self.rows
                .values()
                .map(|r| GroupState::stream_hot_bytes(r))
                .sum::<u64>()
        );
        self.hot
    }
}

/// A row being changed (see [`Streams::get_mut`]).
pub(crate) struct StreamMut<'a> {
    row: &'a mut StreamRow,
    before: u64,
    hot: &'a mut u64,
}

impl Deref for StreamMut<'_> {
    type Target = StreamRow;

    fn deref(&self) -> &StreamRow {
        self.row
    }
}

impl DerefMut for StreamMut<'_> {
    fn deref_mut(&mut self) -> &mut StreamRow {
        self.row
    }
}

impl Drop for StreamMut<'_> {
    fn drop(&mut self) {
        *self.hot = *self.hot - self.before + GroupState::stream_hot_bytes(self.row);
    }
}
