//! A subscription's pages: the one the stream hands out (without the assignment's lock while
//! the assignment is unchanged) and the next, read ahead on the blocking pool; refills take
//! the assigned partitions round robin.

use std::sync::atomic::Ordering;

use super::{Assignment, Cursor, StreamState, Subscription, PAGE_BYTES};
use crate::event_log::page::{read_page, spawn_page, EventPage, PageEvents, PageRead};
use crate::event_log::seam::{MetadataEventRecord, MetadataLogError};

/// The records of one page of one partition, handed out while that partition stays assigned
/// under the cursor generation they were read for.
pub(super) struct Buffered {
    partition: i32,
    generation: u64,
    events: PageEvents,
    /// The assignment version at which the cursor was last seen to match.
    seen: u64,
    /// One past the last offset handed out (the cursor's next value).
    delivered: i64,
    /// Where the page ends (the cursor's next value once every record is handed out).
    end: i64,
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
pub(super) fn take_buffered(st: &mut StreamState) -> Option<MetadataEventRecord> {
    let buffered = st.buffer.as_mut()?;
    if buffered.still_assigned(&st.sub) {
        if let Some(record) = buffered.events.next() {
            buffered.delivered = record.offset + 1;
            return Some(record);
        }
        buffered.delivered = buffered.delivered.max(buffered.end);
        buffered.settle(&mut st.sub.lock());
    }
    st.buffer = None;
    None
}

/// A page read on the blocking pool while the stream hands out the buffered one: the page the
/// next refill would read if the buffer is handed out whole and the assignment stays as it was.
/// Used only if the partition's cursor then stands where the page starts, under the same
/// generation.
pub(super) struct Ahead {
    partition: i32,
    generation: u64,
    from: i64,
    read: PageRead,
}

/// The assigned partitions with their cursors, starting after the one read last (round robin),
/// and the assignment version they were seen at.
fn rotation(st: &StreamState) -> (Vec<(i32, Cursor)>, u64) {
    let state = st.sub.lock();
    let after = state.cursors.range(st.last_partition + 1..);
    let before = state.cursors.range(..=st.last_partition);
    let cursors = after.chain(before).map(|(p, c)| (*p, *c)).collect();
    (cursors, st.sub.version.load(Ordering::Acquire))
}

/// Reads the next page of some assigned partition that has records past its cursor (round robin),
/// taking the page read ahead when it is still the one wanted. Returns false when nothing is
/// readable now.
pub(super) async fn refill(st: &mut StreamState) -> Result<bool, MetadataLogError> {
    if let Some(ahead) = st.ahead.take() {
        let wanted = {
            let state = st.sub.lock();
            let cursor = state.cursors.get(&ahead.partition).copied();
            let version = st.sub.version.load(Ordering::Acquire);
            cursor
                .filter(|c| c.generation == ahead.generation && c.next == ahead.from)
                .map(|c| (c, version))
        };
        if let Some((cursor, version)) = wanted {
            let page = ahead.read.page().await;
            return install(st, ahead.partition, (cursor, version), page);
        }
    }
    let (cursors, version) = rotation(st);
    for (partition, cursor) in cursors {
        let high = st.sub.log.high_water_mark(partition as u32)?;
        if cursor.next >= high {
            let lag = high - cursor.next;
            crate::metrics::subscriber_lag(st.sub.log.name(), partition, st.id, lag);
            continue;
        }
        let range = (cursor.next, high);
        let page = read_page(&st.sub.log, partition as u32, range, PAGE_BYTES).await;
        return install(st, partition, (cursor, version), page);
    }
    Ok(false)
}

/// Makes `page`, read from `partition` at `cursor` (seen at assignment `version`), the stream's
/// buffer, and starts reading the page after it.
fn install(
    st: &mut StreamState,
    partition: i32,
    (cursor, version): (Cursor, u64),
    mut page: EventPage,
) -> Result<bool, MetadataLogError> {
    let high = st.sub.log.high_water_mark(partition as u32)?;
    crate::metrics::subscriber_lag(st.sub.log.name(), partition, st.id, high - cursor.next);
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
    let end = page.next;
    st.buffer = Some(Buffered {
        partition,
        generation: cursor.generation,
        events: page.into_events(),
        seen: version,
        delivered: cursor.next,
        end,
    });
    if st.failure.is_none() {
        read_ahead(st, partition, end)?;
    }
    Ok(true)
}

/// Starts reading the page the next refill would read once the buffer of `buffered` (ending at
/// `end`) is handed out.
fn read_ahead(st: &mut StreamState, buffered: i32, end: i64) -> Result<(), MetadataLogError> {
    let (cursors, _) = rotation(st);
    for (partition, cursor) in cursors {
        let from = match partition == buffered {
            true => end.max(cursor.next),
            false => cursor.next,
        };
        let high = st.sub.log.high_water_mark(partition as u32)?;
        if partition != buffered {
            crate::metrics::subscriber_lag(st.sub.log.name(), partition, st.id, high - from);
        }
        if from < high {
            let read = spawn_page(&st.sub.log, partition as u32, (from, high), PAGE_BYTES);
            st.ahead = Some(Ahead {
                partition,
                generation: cursor.generation,
                from,
                read,
            });
            return Ok(());
        }
    }
    Ok(())
}
