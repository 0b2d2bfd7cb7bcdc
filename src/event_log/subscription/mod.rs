//! Subscriptions: a live assignment of partitions with cursors, and the stream that replays each
//! assigned partition from its cursor, then tails new commits.
//!
//! The stream never drops a record: it reads pages from the segments at its own pace, so a slow
//! subscriber costs at most two pages of memory (the one it hands out and the next, read ahead
//! on the blocking pool meanwhile), not lost records. Records are zero-copy slices of the
//! mappings, so a page's memory is its record headers. Each partition's records are delivered
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

mod pages;

use super::seam::{
    AssignmentHandle, MetadataEventRecord, MetadataEventStream, MetadataLogError, PartitionStart,
};
use crate::log::Log;
use pages::{refill, take_buffered, Ahead, Buffered};

/// A subscription's records, and, if a read fails, the error as the last item.
pub type CheckedEventStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<MetadataEventRecord, MetadataLogError>> + Send>>;

/// Bytes of records (keys and payloads, plus 32 per record) one refill of the stream reads from
/// one partition. Larger pages amortize the hand-off of each page between threads over more
/// records; a page's memory is about 90 bytes per record it holds (the payloads are slices of
/// the mappings): about 0.7 MiB for a page of 100-byte records.
const PAGE_BYTES: usize = 1 << 20;

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
    /// The page the next refill will most likely take, read while `buffer` is handed out.
    ahead: Option<Ahead>,
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
        ahead: None,
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

impl Records {
    /// The next buffered record, if the stream holds one and the log is open.
    fn buffered(&mut self) -> Option<MetadataEventRecord> {
        let st = self.state.as_mut()?;
        match st.sub.log.is_closed() {
            true => None,
            false => take_buffered(st),
        }
    }
}

impl Stream for Records {
    type Item = Result<MetadataEventRecord, MetadataLogError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(record) = this.buffered() {
            return Poll::Ready(Some(Ok(record)));
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
