//! Subscriptions: a live assignment of partitions with cursors, and the stream that replays each
//! assigned partition from its cursor, then tails new commits.
//!
//! The stream never drops a record: it reads pages from the segments at its own pace, so a slow
//! subscriber costs one page of memory, not lost records. Each partition's records are delivered
//! once each, in offset order. The stream ends when the log is closed or a read fails.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::stream;
use tokio::sync::watch;

use super::seam::{AssignmentHandle, MetadataEventRecord, MetadataEventStream, PartitionStart};
use super::to_event;
use crate::log::Log;

/// Bytes of batches one refill of the stream reads from one partition.
const PAGE_BYTES: usize = 256 << 10;

#[derive(Debug, Clone, Copy)]
struct Cursor {
    next: i64,
    generation: u64,
}

#[derive(Debug, Default)]
struct Assignment {
    cursors: BTreeMap<i32, Cursor>,
    next_generation: u64,
}

/// The assignment shared by a subscription's stream and its handle.
pub(crate) struct Subscription {
    log: Log,
    state: Mutex<Assignment>,
    changed: watch::Sender<u64>,
}

impl Subscription {
    fn lock(&self) -> std::sync::MutexGuard<'_, Assignment> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AssignmentHandle for Subscription {
    fn add(&self, start: PartitionStart) {
        let Ok(partition) = u32::try_from(start.partition) else {
            return;
        };
        let (Ok(low), Ok(high)) = (
            self.log.low_water_mark(partition),
            self.log.high_water_mark(partition),
        ) else {
            return;
        };
        let mut state = self.lock();
        if state.cursors.contains_key(&start.partition) {
            return;
        }
        state.next_generation += 1;
        let generation = state.next_generation;
        // Negative starts replay from the beginning; a start past the end waits for new records.
        let next = start.start_offset.clamp(low, high.max(low));
        state
            .cursors
            .insert(start.partition, Cursor { next, generation });
        drop(state);
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn remove(&self, partition: i32) {
        if self.lock().cursors.remove(&partition).is_some() {
            self.changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    fn assigned(&self) -> Vec<i32> {
        self.lock().cursors.keys().copied().collect()
    }
}

struct StreamState {
    sub: Arc<Subscription>,
    commits: watch::Receiver<u64>,
    assignment: watch::Receiver<u64>,
    buffer: VecDeque<(u64, MetadataEventRecord)>,
    last_partition: i32,
    /// This subscription's number in the process (the `subscription` label of its lag gauge).
    id: u64,
}

/// Numbers subscriptions for their metrics.
static SUBSCRIPTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Creates a subscription over `log` starting at `assignment`.
pub(crate) fn subscribe(
    log: &Log,
    assignment: Vec<PartitionStart>,
) -> (MetadataEventStream, Arc<dyn AssignmentHandle>) {
    let (changed, assignment_rx) = watch::channel(0u64);
    let commits = log.commits();
    let sub = Arc::new(Subscription {
        log: log.clone(),
        state: Mutex::new(Assignment::default()),
        changed,
    });
    for start in assignment {
        sub.add(start);
    }
    let state = StreamState {
        sub: sub.clone(),
        commits,
        assignment: assignment_rx,
        buffer: VecDeque::new(),
        last_partition: -1,
        id: SUBSCRIPTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    };
    let stream = stream::unfold(state, |mut st| async move {
        let record = next_record(&mut st).await?;
        Some((record, st))
    });
    (Box::pin(stream), sub)
}

/// Takes the next buffered record that is still wanted by the assignment.
fn take_buffered(st: &mut StreamState) -> Option<MetadataEventRecord> {
    let mut state = st.sub.lock();
    while let Some((generation, record)) = st.buffer.pop_front() {
        if let Some(cursor) = state.cursors.get_mut(&record.partition) {
            if cursor.generation == generation && record.offset >= cursor.next {
                cursor.next = record.offset + 1;
                return Some(record);
            }
        }
    }
    None
}

/// Reads the next page of some assigned partition that has records past its cursor (round robin).
/// Returns false when nothing is readable now, `None` when the stream must end.
async fn refill(st: &mut StreamState) -> Option<bool> {
    let cursors: Vec<(i32, Cursor)> = {
        let state = st.sub.lock();
        let after = state.cursors.range(st.last_partition + 1..);
        let before = state.cursors.range(..=st.last_partition);
        after.chain(before).map(|(p, c)| (*p, *c)).collect()
    };
    for (partition, cursor) in cursors {
        let high = st.sub.log.high_water_mark(partition as u32).ok()?;
        crate::metrics::subscriber_lag(st.sub.log.name(), partition, st.id, high - cursor.next);
        if cursor.next >= high {
            continue;
        }
        let log = st.sub.log.clone();
        let page = tokio::task::spawn_blocking(move || {
            log.read(partition as u32, cursor.next, PAGE_BYTES)
        })
        .await
        .ok()?
        .ok()?;
        st.last_partition = partition;
        if page.records.is_empty() {
            // A compacted gap or retention moved past the cursor: step over it.
            let mut state = st.sub.lock();
            if let Some(c) = state.cursors.get_mut(&partition) {
                if c.generation == cursor.generation {
                    c.next = c.next.max(page.next_offset);
                }
            }
            return Some(true);
        }
        st.buffer.extend(
            page.records
                .into_iter()
                .map(|r| (cursor.generation, to_event(partition, r))),
        );
        return Some(true);
    }
    Some(false)
}

async fn next_record(st: &mut StreamState) -> Option<MetadataEventRecord> {
    loop {
        if st.sub.log.is_closed() {
            return None;
        }
        if let Some(record) = take_buffered(st) {
            return Some(record);
        }
        st.commits.borrow_and_update();
        st.assignment.borrow_and_update();
        if refill(st).await? {
            continue;
        }
        tokio::select! {
            changed = st.commits.changed() => changed.ok()?,
            changed = st.assignment.changed() => changed.ok()?,
        }
    }
}
