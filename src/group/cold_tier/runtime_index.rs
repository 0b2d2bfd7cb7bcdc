//! ursula's cold-index pages, kept for the shard runtime's background cold compaction.
//!
//! ursula 0.4.1's `ShardRuntime::compact_cold_once` finds work by listing the cold-index pages
//! (`{stream}/cold-index/{generation}/{page}.idx`, one per 64 MiB of a stream) in the runtime's
//! cold store; ursula's in-memory engine writes them as it commits chunks. Strata's manifest of
//! cold chunks lives in RocksDB, so a group engine given the runtime's cold store
//! ([`crate::group::DiskGroupEngine::with_runtime_cold_index`]) projects the chunks the runtime
//! can merge (its own uploads: exclusive objects that are not Strata cold objects) onto those
//! pages, in ursula's page codec.
//!
//! Pages are hints: the runtime proposes a merge from them and `compact_cold` checks it against
//! the manifest. What must never happen is a page naming an object that is gone (the runtime
//! would read it and fail its whole pass). Hence:
//! - a page is only ever written from the manifest as memory holds it after a commit, and the
//!   write finishes within the command that made the change;
//! - a commit that takes such chunks out of the manifest (retention, compaction, stream removal)
//!   queues the pages that may name them in the same GC entry, before the chunks' objects, so GC
//!   deletes the pages first;
//! - pages that a restart or a GC entry may have taken are written again: every stream is
//!   published when the index is attached, and a stream whose pages a GC entry deleted is
//!   published after that entry is acknowledged.

use std::collections::HashMap;

use ursula_runtime::{
    cold_index_prefix, ColdIndexPage, ColdIndexPageKey, ColdIndexPageStore,
    ColdStoreColdIndexPageStore, ColdStoreHandle,
};
use ursula_shard::BucketStreamId;
use ursula_stream::{ColdChunkRef, COLD_INDEX_PAGE_SPAN_BYTES};

use crate::cold::COLD_OBJECT_SUFFIX;
use crate::group::state::GroupState;

/// The runtime's cold-index pages of one group and the page ranges still to write.
pub(crate) struct RuntimeColdIndex {
    store: ColdStoreHandle,
    pages: ColdStoreColdIndexPageStore,
    /// Page ids (first, last) per stream to write again from the manifest.
    touched: HashMap<BucketStreamId, (u64, u64)>,
}

/// True for a chunk the runtime can merge: an exclusive object holding the raw bytes.
pub(crate) fn indexed(chunk: &ColdChunkRef) -> bool {
    !chunk.shared_object
        && !chunk.s3_path.ends_with(COLD_OBJECT_SUFFIX)
        && chunk.end_offset > chunk.start_offset
}

/// Page ranges (first, last) of streams whose pages must be written again.
pub(crate) type PageMarks = Vec<(BucketStreamId, (u64, u64))>;

/// The page ids (first, last) the indexed ones of `chunks` appear on, if any is indexed.
pub(crate) fn pages_of<'a>(
    chunks: impl IntoIterator<Item = &'a ColdChunkRef>,
) -> Option<(u64, u64)> {
    chunks
        .into_iter()
        .filter(|c| indexed(c))
        .map(page_span)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// The pages to write again of the streams of `state` whose pages the acknowledged GC `paths`
/// deleted.
pub(crate) fn collected_pages(state: &GroupState, paths: &[String]) -> PageMarks {
    let pages: Vec<&String> = paths
        .iter()
        .filter(|p| p.contains("/cold-index/"))
        .collect();
    if pages.is_empty() {
        return Vec::new();
    }
    state
        .streams
        .iter()
        .filter(|(id, _)| {
            let prefix = cold_index_prefix(id);
            pages.iter().any(|p| p.starts_with(&prefix))
        })
        .filter_map(|(id, row)| Some((id.clone(), pages_of(row.cold_chunks.iter())?)))
        .collect()
}

/// The page ids a chunk appears on.
fn page_span(chunk: &ColdChunkRef) -> (u64, u64) {
    (
        chunk.start_offset / COLD_INDEX_PAGE_SPAN_BYTES,
        (chunk.end_offset - 1) / COLD_INDEX_PAGE_SPAN_BYTES,
    )
}

fn page_key(id: &BucketStreamId, page_id: u64) -> ColdIndexPageKey {
    ColdIndexPageKey {
        stream_id: id.clone(),
        generation: 0,
        page_id,
    }
}

/// The object paths of the pages that may name any of `chunks` (in page order, no repeats).
pub(crate) fn page_paths<'a>(
    id: &BucketStreamId,
    chunks: impl IntoIterator<Item = &'a ColdChunkRef>,
) -> Vec<String> {
    let mut ids: Vec<u64> = chunks
        .into_iter()
        .filter(|c| indexed(c))
        .flat_map(|c| {
            let (first, last) = page_span(c);
            first..=last
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter().map(|p| page_key(id, p).path()).collect()
}

impl RuntimeColdIndex {
    /// The index in `store` (the runtime's cold store), with every stream of `state` to publish.
    pub fn new(store: ColdStoreHandle, state: &GroupState) -> Self {
        let mut index = Self {
            pages: ColdStoreColdIndexPageStore::new(store.clone()),
            store,
            touched: HashMap::new(),
        };
        index.touch_all(state);
        index
    }

    /// Marks the pages `chunks` of `id` appear on for writing again.
    pub fn touch<'a>(
        &mut self,
        id: &BucketStreamId,
        chunks: impl IntoIterator<Item = &'a ColdChunkRef>,
    ) {
        if let Some(pages) = pages_of(chunks) {
            self.mark(id, pages);
        }
    }

    /// Marks pages `(first, last)` of `id` to be written again.
    pub fn mark(&mut self, id: &BucketStreamId, (first, last): (u64, u64)) {
        let range = self.touched.entry(id.clone()).or_insert((first, last));
        *range = (range.0.min(first), range.1.max(last));
    }

    /// Marks every page of every stream of `state`.
    pub fn touch_all(&mut self, state: &GroupState) {
        for (id, row) in state.streams.iter() {
            self.touch(id, row.cold_chunks.iter());
        }
    }

    /// Pages still to write.
    pub fn pending(&self) -> usize {
        self.touched.len()
    }

    /// Writes every marked page from the manifest in `state` (a page with no chunk left is
    /// deleted). A stream leaves the marked set only once all its pages are written; the first
    /// failure stops the pass and is returned.
    pub async fn publish(&mut self, state: &GroupState) -> std::io::Result<usize> {
        let mut written = 0;
        while let Some(id) = self.touched.keys().next().cloned() {
            let Some((first, last)) = self.touched.remove(&id) else {
                break;
            };
            let chunks: Vec<ColdChunkRef> = state
                .streams
                .get(&id)
                .map(|row| {
                    row.cold_chunks
                        .iter()
                        .filter(|c| indexed(c))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if let Err(e) = self.write_pages(&id, first, last, &chunks).await {
                self.touched.insert(id, (first, last));
                return Err(e);
            }
            written += usize::try_from(last - first + 1).unwrap_or(usize::MAX);
        }
        Ok(written)
    }

    async fn write_pages(
        &self,
        id: &BucketStreamId,
        first: u64,
        last: u64,
        chunks: &[ColdChunkRef],
    ) -> std::io::Result<()> {
        for page_id in first..=last {
            let key = page_key(id, page_id);
            let start = page_id.saturating_mul(COLD_INDEX_PAGE_SPAN_BYTES);
            let end = start.saturating_add(COLD_INDEX_PAGE_SPAN_BYTES);
            let on_page: Vec<ColdChunkRef> = chunks
                .iter()
                .filter(|c| c.start_offset < end && c.end_offset > start)
                .cloned()
                .collect();
            if on_page.is_empty() {
                self.store.delete_chunk(&key.path()).await?;
                continue;
            }
            let page = ColdIndexPage {
                start_offset: start,
                end_offset: end,
                cold_chunks: on_page,
                external_segments: Vec::new(),
            };
            self.pages.put_page(&key, &page).await?;
        }
        Ok(())
    }
}

impl crate::group::DiskGroupEngine {
    /// Writes the cold-index pages the last commands changed (see the module doc); a no-op
    /// without a runtime cold index. The commands it follows have committed, so a failure is
    /// not theirs: it is reported (a warning and the `cold index` task metric) and the pages
    /// stay marked for the next command.
    pub(crate) async fn publish_cold_index(&mut self) {
        let Some(index) = self.cold_index.as_mut() else {
            return;
        };
        if index.pending() == 0 {
            return;
        }
        let result = index.publish(&self.state).await;
        crate::metrics::cold_task(&self.name, "cold index", result.is_ok());
        match result {
            Ok(pages) => tracing::debug!(group = %self.name, pages, "cold index pages written"),
            Err(e) => {
                tracing::warn!(group = %self.name, error = %e, "cold index pages not written; retried by the next command")
            }
        }
    }

    /// The GC paths for raw chunks leaving `id`'s manifest: the pages that may name them
    /// first (when indexing), then the objects.
    pub(crate) fn gc_paths_with_pages(
        &self,
        id: &BucketStreamId,
        removed: &[ColdChunkRef],
        objects: Vec<String>,
    ) -> Vec<String> {
        let mut paths = match self.cold_index {
            Some(_) => page_paths(id, removed),
            None => Vec::new(),
        };
        paths.extend(objects);
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(start: u64, end: u64, path: &str) -> ColdChunkRef {
        ColdChunkRef {
            start_offset: start,
            end_offset: end,
            s3_path: path.into(),
            object_offset: 0,
            object_size: end - start,
            shared_object: false,
            payload_digest: String::new(),
        }
    }

    #[test]
    fn pages_cover_raw_exclusive_chunks_only() {
        let id = BucketStreamId::new("b", "s");
        let span = COLD_INDEX_PAGE_SPAN_BYTES;
        let mut shared = chunk(0, 10, "b/s/chunks/shared");
        shared.shared_object = true;
        let strata = chunk(0, 10, &format!("ns/x{COLD_OBJECT_SUFFIX}"));
        assert!(page_paths(&id, [&shared, &strata]).is_empty());
        let across = chunk(span - 1, 2 * span + 1, "b/s/chunks/a");
        let paths = page_paths(&id, [&across, &chunk(0, 5, "b/s/chunks/z")]);
        let expected: Vec<String> = (0..=2).map(|p| page_key(&id, p).path()).collect();
        assert_eq!(paths, expected);
        assert!(paths[0].starts_with(&cold_index_prefix(&id)));
    }
}
