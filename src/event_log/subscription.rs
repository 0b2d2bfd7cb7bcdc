//! Subscriptions: a live assignment of partitions with cursors, and the stream that replays each
//! assigned partition from its cursor, then tails new commits.
//!
//! The stream never drops a record: it reads pages from the segments at its own pace, so a slow
//! subscriber costs one page of memory, not lost records. Each partition's records are delivered
//! once each, in offset order. The stream ends when the log is closed; a read that fails (a
//! corrupt segment, an I/O error) ends it too, after the error as its last item
//! ([`CheckedEventStream`]; the seam's stream, whose items cannot carry an error, logs it and
//! ends).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::watch;

use super::page::{read_page, PageEvents};
use super::seam::{
    AssignmentHandle, MetadataEventRecord, MetadataEventStream, MetadataLogError, PartitionStart,
};
use crate::log::Log;

/// A subscription's records, and, if a read fails, the error as the last item.
pub type CheckedEventStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<MetadataEventRecord, MetadataLogError>> + Send>>;

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
    /// Counts changes of the assignment (bumped under the `state` lock), so the stream hands out
    /// buffered records without taking the lock while nothing changed.
    version: AtomicU64,
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
        self.version.fetch_add(1, Ordering::Release);
        drop(state);
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn remove(&self, partition: i32) {
        let mut state = self.lock();
        if state.cursors.remove(&partition).is_some() {
            self.version.fetch_add(1, Ordering::Release);
            drop(state);
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
    buffer: Option<Buffered>,
    /// The error a read met after the buffered records (partition, cursor generation): the
    /// stream's last item once they are delivered, if the partition is still assigned.
    failure: Option<(i32, u64, MetadataLogError)>,
    last_partition: i32,
    /// This subscription's number in the process (the `subscription` label of its lag gauge).
    id: u64,
}

/// Numbers subscriptions for their metrics.
static SUBSCRIPTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Creates a subscription over `log` starting at `assignment` (the seam's form: a read error is
/// logged and ends the stream).
pub(crate) fn subscribe(
    log: &Log,
    assignment: Vec<PartitionStart>,
) -> (MetadataEventStream, Arc<dyn AssignmentHandle>) {
    let (records, handle) = open(log, assignment);
    let records = Records {
        logged: Some(log.name().to_string()),
        ..records
    };
    (Box::pin(Logged(records)), handle)
}

/// The seam's form of [`Records`] whose errors are logged: its records.
struct Logged(Records);

impl Stream for Logged {
    type Item = MetadataEventRecord;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // `Records` with `logged` set ends instead of yielding an error.
        Pin::new(&mut self.0)
            .poll_next(cx)
            .map(|item| item.and_then(Result::ok))
    }
}

/// Creates a subscription over `log` starting at `assignment` whose stream ends with the error
/// of a failed read as its last item.
pub(crate) fn subscribe_checked(
    log: &Log,
    assignment: Vec<PartitionStart>,
) -> (CheckedEventStream, Arc<dyn AssignmentHandle>) {
    let (records, handle) = open(log, assignment);
    (Box::pin(records), handle)
}

/// A subscription's stream and its handle.
fn open(log: &Log, assignment: Vec<PartitionStart>) -> (Records, Arc<dyn AssignmentHandle>) {
    let (changed, assignment_rx) = watch::channel(0u64);
    let commits = log.commits();
    let sub = Arc::new(Subscription {
        log: log.clone(),
        state: Mutex::new(Assignment::default()),
        version: AtomicU64::new(0),
        changed,
    });
    for start in assignment {
        sub.add(start);
    }
    let state = StreamState {
        sub: sub.clone(),
        commits,
        assignment: assignment_rx,
        buffer: None,
        failure: None,
        last_partition: -1,
        id: SUBSCRIPTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    };
    let records = Records {
        state: Some(state),
        waiting: None,
        logged: None,
    };
    (records, sub)
}

/// What a wait for the next record gives back: the state, and the record, the error that ends
/// the stream, or `None` once the log is closed.
type Waited = (
    StreamState,
    Option<Result<MetadataEventRecord, MetadataLogError>>,
);

/// The stream of a subscription: a buffered record is handed out at once; otherwise the state
/// moves into a future that refills the buffer or waits for new commits, and comes back with
/// the next record. Ends after the error of a failed read (delivered, or, with `logged`, logged
/// under that log's name instead).
struct Records {
    /// `None` while `waiting` holds it, and once the stream has ended.
    state: Option<StreamState>,
    waiting: Option<Pin<Box<dyn Future<Output = Waited> + Send>>>,
    logged: Option<String>,
}

impl Stream for Records {
    type Item = Result<MetadataEventRecord, MetadataLogError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(st) = this.state.as_mut() {
            if !st.sub.log.is_closed() {
                if let Some(record) = take_buffered(st) {
                    return Poll::Ready(Some(Ok(record)));
                }
            }
        }
        let waiting = match &mut this.waiting {
            Some(waiting) => waiting,
            None => {
                let Some(mut st) = this.state.take() else {
                    return Poll::Ready(None);
                };
                this.waiting.insert(Box::pin(async move {
                    let next = next_record(&mut st).await;
                    (st, next)
                }))
            }
        };
        let (st, next) = std::task::ready!(waiting.as_mut().poll(cx));
        this.waiting = None;
        match next {
            Some(Ok(record)) => {
                this.state = Some(st);
                Poll::Ready(Some(Ok(record)))
            }
            Some(Err(e)) => match &this.logged {
                Some(log) => {
                    tracing::error!(log = %log, error = %e, "a subscription ended on a read error");
                    Poll::Ready(None)
                }
                None => Poll::Ready(Some(Err(e))),
            },
            None => Poll::Ready(None),
        }
    }
}

/// The records of one page of one partition, handed out while that partition stays assigned
/// under the cursor generation they were read for.
struct Buffered {
    partition: i32,
    generation: u64,
    events: PageEvents,
    /// The assignment version at which the cursor was last seen to match.
    seen: u64,
    /// One past the last offset handed out (the cursor's next value).
    delivered: i64,
}

impl Buffered {
    /// True while the partition is assigned under the same generation; checked under the lock
    /// only when the assignment changed since the last check. Moves the cursor past what was
    /// handed out when it checks.
    fn still_assigned(&mut self, sub: &Subscription) -> bool {
        if sub.version.load(Ordering::Acquire) == self.seen {
            return true;
        }
        let mut state = sub.lock();
        self.seen = sub.version.load(Ordering::Acquire);
        self.settle(&mut state)
    }

    /// Moves the cursor past the records handed out; false when the partition is no longer
    /// assigned under this generation.
    fn settle(&self, state: &mut Assignment) -> bool {
        match state.cursors.get_mut(&self.partition) {
            Some(cursor) if cursor.generation == self.generation => {
                cursor.next = cursor.next.max(self.delivered);
                true
            }
            _ => false,
        }
    }
}

/// Takes the next buffered record that is still wanted by the assignment; once the buffer runs
/// out, its partition's cursor moves past it.
fn take_buffered(st: &mut StreamState) -> Option<MetadataEventRecord> {
    let buffered = st.buffer.as_mut()?;
    if buffered.still_assigned(&st.sub) {
        if let Some(record) = buffered.events.next() {
            buffered.delivered = record.offset + 1;
            return Some(record);
        }
        buffered.settle(&mut st.sub.lock());
    }
    st.buffer = None;
    None
}

/// Reads the next page of some assigned partition that has records past its cursor (round robin).
/// Returns false when nothing is readable now.
async fn refill(st: &mut StreamState) -> Result<bool, MetadataLogError> {
    let (cursors, version): (Vec<(i32, Cursor)>, u64) = {
        let state = st.sub.lock();
        let after = state.cursors.range(st.last_partition + 1..);
        let before = state.cursors.range(..=st.last_partition);
        let cursors = after.chain(before).map(|(p, c)| (*p, *c)).collect();
        (cursors, st.sub.version.load(Ordering::Acquire))
    };
    for (partition, cursor) in cursors {
        let high = st.sub.log.high_water_mark(partition as u32)?;
        crate::metrics::subscriber_lag(st.sub.log.name(), partition, st.id, high - cursor.next);
        if cursor.next >= high {
            continue;
        }
        let mut page = read_page(
            &st.sub.log,
            partition as u32,
            (cursor.next, high),
            PAGE_BYTES,
        )
        .await;
        st.last_partition = partition;
        if let Some(e) = page.failure.take() {
            st.failure = Some((partition, cursor.generation, e));
        }
        if page.is_empty() {
            // A compacted gap or retention moved past the cursor: step over it.
            let mut state = st.sub.lock();
            if let Some(c) = state.cursors.get_mut(&partition) {
                if c.generation == cursor.generation {
                    c.next = c.next.max(page.next);
                }
            }
            return Ok(true);
        }
        st.buffer = Some(Buffered {
            partition,
            generation: cursor.generation,
            events: page.into_events(),
            seen: version,
            delivered: cursor.next,
        });
        return Ok(true);
    }
    Ok(false)
}

/// The next record, the error that ends the stream, or `None` once the log is closed.
async fn next_record(
    st: &mut StreamState,
) -> Option<Result<MetadataEventRecord, MetadataLogError>> {
    loop {
        if st.sub.log.is_closed() {
            return None;
        }
        if let Some(record) = take_buffered(st) {
            return Some(Ok(record));
        }
        if let Some((partition, generation, e)) = st.failure.take() {
            let assigned = st.sub.lock().cursors.get(&partition).map(|c| c.generation);
            match e {
                MetadataLogError::Closed => return None,
                e if assigned == Some(generation) => return Some(Err(e)),
                _ => {}
            }
        }
        st.commits.borrow_and_update();
        st.assignment.borrow_and_update();
        match refill(st).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(MetadataLogError::Closed) => return None,
            Err(e) => return Some(Err(e)),
        }
        tokio::select! {
            changed = st.commits.changed() => changed.ok()?,
            changed = st.assignment.changed() => changed.ok()?,
        }
    }
}
