//! Conformance of `DiskEventLog` to every `MetadataEventLog` guarantee in shared/SEAMS.md.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use strata::event_log::{
    DiskEventLog, KeyedEvent, MetadataEventLog, MetadataEventRecord, MetadataEventStream,
    MetadataLogError, PartitionStart,
};
use strata::log::{CompactionPolicy, RetentionPolicy};
use strata::{LogOptions, Store};

fn open(dir: &std::path::Path, partitions: u32, options: LogOptions) -> (Store, DiskEventLog) {
    let store = Store::open(dir).unwrap();
    let log = store.open_log("meta", partitions, options).unwrap();
    (store, DiskEventLog::new(log))
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn start(partition: i32, start_offset: i64) -> PartitionStart {
    PartitionStart {
        partition,
        start_offset,
    }
}

async fn take(stream: &mut MetadataEventStream, n: usize) -> Vec<MetadataEventRecord> {
    let mut out = Vec::new();
    while out.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the stream delivered in time")
            .expect("the stream is open");
        out.push(next);
    }
    out
}

async fn assert_silent(stream: &mut MetadataEventStream) {
    assert!(
        tokio::time::timeout(Duration::from_millis(150), stream.next())
            .await
            .is_err()
    );
}

fn payloads(records: &[MetadataEventRecord]) -> Vec<(i32, i64, Bytes)> {
    records
        .iter()
        .map(|r| (r.partition, r.offset, r.payload.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_assigns_monotonic_offsets_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 3, LogOptions::default());
    assert_eq!(log.partition_count(), 3);
    assert_eq!(log.high_water_marks().await.unwrap(), vec![0, 0, 0]);
    for i in 0..5 {
        assert_eq!(log.publish(1, b(&format!("a{i}"))).await.unwrap(), i);
    }
    assert_eq!(log.publish(0, b("x")).await.unwrap(), 0);
    assert_eq!(log.high_water_marks().await.unwrap(), vec![1, 5, 0]);
    assert_eq!(log.low_water_marks().await.unwrap(), vec![0, 0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_replays_history_then_forwards_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    for i in 0..3 {
        log.publish(0, b(&format!("h{i}"))).await.unwrap();
    }
    let (mut stream, _handle) = log.subscribe(vec![start(0, 1)]);
    let history = take(&mut stream, 2).await;
    assert_eq!(payloads(&history), vec![(0, 1, b("h1")), (0, 2, b("h2"))]);
    let offset = log.publish(0, b("live")).await.unwrap();
    let live = take(&mut stream, 1).await;
    assert_eq!(payloads(&live), vec![(0, offset, b("live"))]);
    assert_eq!(live[0].key, None);
    assert!(!live[0].tombstone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_sees_only_assigned_partitions_from_their_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 3, LogOptions::default());
    for p in 0..3 {
        for i in 0..3 {
            log.publish(p, b(&format!("{p}-{i}"))).await.unwrap();
        }
    }
    let (mut stream, handle) = log.subscribe(vec![start(0, 2), start(2, 0), start(7, 0)]);
    let mut got = take(&mut stream, 4).await;
    got.sort_by_key(|r| (r.partition, r.offset));
    assert_eq!(
        payloads(&got),
        vec![
            (0, 2, b("0-2")),
            (2, 0, b("2-0")),
            (2, 1, b("2-1")),
            (2, 2, b("2-2"))
        ]
    );
    // Partitions out of range are skipped silently, as in the in-process reference.
    assert_eq!(handle.assigned(), vec![0, 2]);
    log.publish(1, b("unassigned")).await.unwrap();
    assert_silent(&mut stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscribers_see_the_same_history_and_live_records() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    log.publish(0, b("one")).await.unwrap();
    let (mut a, _ha) = log.subscribe(vec![start(0, 0)]);
    let (mut b2, _hb) = log.subscribe(vec![start(0, 0)]);
    log.publish(0, b("two")).await.unwrap();
    let ra = take(&mut a, 2).await;
    let rb = take(&mut b2, 2).await;
    assert_eq!(ra, rb);
    assert_eq!(payloads(&ra), vec![(0, 0, b("one")), (0, 1, b("two"))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_mid_stream_delivers_backlog_then_live_and_remove_stops_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    for i in 0..3 {
        log.publish(1, b(&format!("b{i}"))).await.unwrap();
    }
    let (mut stream, handle) = log.subscribe(vec![start(0, 0)]);
    log.publish(0, b("zero")).await.unwrap();
    assert_eq!(
        payloads(&take(&mut stream, 1).await),
        vec![(0, 0, b("zero"))]
    );

    handle.add(start(1, 1));
    handle.add(start(1, 0)); // already assigned: no-op, no replay from 0
    let backlog = take(&mut stream, 2).await;
    assert_eq!(payloads(&backlog), vec![(1, 1, b("b1")), (1, 2, b("b2"))]);
    log.publish(1, b("b3")).await.unwrap();
    assert_eq!(payloads(&take(&mut stream, 1).await), vec![(1, 3, b("b3"))]);

    handle.remove(1);
    handle.remove(1);
    assert_eq!(handle.assigned(), vec![0]);
    log.publish(1, b("b4")).await.unwrap();
    assert_silent(&mut stream).await;
    log.publish(0, b("still")).await.unwrap();
    assert_eq!(
        payloads(&take(&mut stream, 1).await),
        vec![(0, 1, b("still"))]
    );
}

/// Records already read into the stream's buffer follow the assignment: once `remove` returns,
/// none of the removed partition is delivered, and adding it again starts from the new start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_records_follow_a_remove_and_an_add_of_their_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    // 100 records of 20 kB: two pages, so the stream holds one and reads the next ahead.
    for i in 0..100 {
        let payload = format!("b{i}-{}", "x".repeat(20_000));
        log.publish(1, Bytes::from(payload)).await.unwrap();
    }
    let (mut stream, handle) = log.subscribe(vec![start(1, 0)]);
    let first = take(&mut stream, 3).await;
    assert_eq!(first.last().map(|r| r.offset), Some(2));
    // The stream holds the rest of the page and reads the next; the partition goes away.
    handle.remove(1);
    log.publish(0, b("zero")).await.unwrap();
    handle.add(start(0, 0));
    assert_eq!(
        payloads(&take(&mut stream, 1).await),
        vec![(0, 0, b("zero"))],
        "nothing of the removed partition"
    );
    handle.add(start(1, 50));
    let again = take(&mut stream, 50).await;
    let offsets: Vec<i64> = again.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (50..100).collect::<Vec<_>>(), "from the new start");
    assert!(again.iter().all(|r| r.partition == 1));
    assert_silent(&mut stream).await;

    // Removed and added again at once: neither the buffered page nor the one read ahead counts.
    let (mut stream, handle) = log.subscribe(vec![start(1, 0)]);
    take(&mut stream, 3).await;
    handle.remove(1);
    handle.add(start(1, 40));
    let offsets: Vec<i64> = take(&mut stream, 60)
        .await
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(offsets, (40..100).collect::<Vec<_>>());
    assert_silent(&mut stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_keeps_the_stream_working() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    let (mut stream, handle) = log.subscribe(vec![start(0, 0)]);
    drop(handle);
    log.publish(0, b("after")).await.unwrap();
    assert_eq!(
        payloads(&take(&mut stream, 1).await),
        vec![(0, 0, b("after"))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_offsets_are_clamped_to_the_retained_range() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    log.publish(0, b("a")).await.unwrap();
    let (mut from_negative, _h1) = log.subscribe(vec![start(0, -5)]);
    assert_eq!(
        payloads(&take(&mut from_negative, 1).await),
        vec![(0, 0, b("a"))]
    );
    let (mut past_end, _h2) = log.subscribe(vec![start(0, 99)]);
    assert_silent(&mut past_end).await;
    log.publish(0, b("new")).await.unwrap();
    assert_eq!(
        payloads(&take(&mut past_end, 1).await),
        vec![(0, 1, b("new"))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishers_keep_per_partition_order_and_offsets_match() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    let log = Arc::new(log);
    let (mut stream, _h) = log.subscribe(vec![start(0, 0), start(1, 0)]);
    let mut tasks = Vec::new();
    for w in 0..8 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            for i in 0..25 {
                let partition = w % 2;
                let payload = b(&format!("w{w}-{i}"));
                let offset = log.publish(partition, payload.clone()).await.unwrap();
                acks.push((partition, offset, payload));
            }
            acks
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let seen = take(&mut stream, 200).await;
    for p in 0..2 {
        let offsets: Vec<i64> = seen
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        assert_eq!(
            offsets,
            (0..100).collect::<Vec<_>>(),
            "partition {p} delivered in order"
        );
    }
    let mut seen = payloads(&seen);
    seen.sort();
    acked.sort();
    assert_eq!(
        seen, acked,
        "each subscriber sees the offset publish returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_partitions_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    let expected = |partition| MetadataLogError::PartitionOutOfRange {
        partition,
        count: 2,
    };
    assert_eq!(log.publish(2, b("x")).await, Err(expected(2)));
    assert_eq!(log.publish(-1, b("x")).await, Err(expected(-1)));
    assert_eq!(log.publish_keyed(5, b("k"), None).await, Err(expected(5)));
    let mut visit = |_r| Ok(());
    assert_eq!(log.visit_range(9, 0, 0, &mut visit).await, Err(expected(9)));
    assert_eq!(log.high_water_marks().await.unwrap(), vec![0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_tombstones_keep_the_key_and_an_empty_payload() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    assert_eq!(log.publish_keyed(0, b("k"), Some(b("v"))).await.unwrap(), 0);
    assert_eq!(log.publish_keyed(0, b("k"), None).await.unwrap(), 1);
    let (mut stream, _h) = log.subscribe(vec![start(0, 0)]);
    let got = take(&mut stream, 2).await;
    assert_eq!(got[0].key, Some(b("k")));
    assert_eq!(got[0].payload, b("v"));
    assert!(!got[0].tombstone);
    assert_eq!(got[1].key, Some(b("k")));
    assert_eq!(got[1].payload, Bytes::new());
    assert!(got[1].tombstone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_group_is_one_durability_round_trip_in_the_order_given() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 3, LogOptions::default());
    log.publish(1, b("first")).await.unwrap();
    let events: Vec<KeyedEvent> = (0..30)
        .map(|i| KeyedEvent {
            partition: i % 3,
            key: b(&format!("k{i}")),
            event: if i % 5 == 0 {
                None
            } else {
                Some(b(&format!("v{i}")))
            },
        })
        .collect();
    let syncs_before = log.log().sync_rounds();
    let offsets = log.publish_keyed_group(events.clone()).await.unwrap();
    assert_eq!(
        log.log().sync_rounds() - syncs_before,
        1,
        "the whole group shared one sync round"
    );
    let expected: Vec<i64> = (0..30).map(|i| i / 3 + i64::from(i % 3 == 1)).collect();
    assert_eq!(offsets, expected);
    let mut seen = Vec::new();
    let mut visit = |r: MetadataEventRecord| {
        seen.push((r.key.clone().unwrap(), r.tombstone, r.payload.clone()));
        Ok(())
    };
    log.visit_range(1, 1, 11, &mut visit).await.unwrap();
    let want: Vec<_> = events
        .iter()
        .filter(|e| e.partition == 1)
        .map(|e| {
            (
                e.key.clone(),
                e.event.is_none(),
                e.event.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(seen, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_a_bad_partition_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    let events = vec![
        KeyedEvent {
            partition: 0,
            key: b("a"),
            event: Some(b("1")),
        },
        KeyedEvent {
            partition: 4,
            key: b("b"),
            event: Some(b("2")),
        },
    ];
    assert_eq!(
        log.publish_keyed_group(events).await,
        Err(MetadataLogError::PartitionOutOfRange {
            partition: 4,
            count: 2
        })
    );
    assert_eq!(log.high_water_marks().await.unwrap(), vec![0, 0]);
    assert_eq!(log.publish_keyed_group(Vec::new()).await, Ok(Vec::new()));
}

/// Runs `test` on a multi-thread runtime, then on a current-thread one: range reads and
/// subscriptions read on the calling worker on the first and on the blocking pool on the second.
fn on_both_runtimes<F: std::future::Future<Output = ()>>(test: impl Fn() -> F) {
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    multi.block_on(test());
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    current.block_on(test());
}

#[test]
fn visit_range_reads_exactly_the_range_and_stops_on_visitor_error() {
    on_both_runtimes(visit_range_reads_exactly_the_range_and_stops_on_visitor_error_on_a_runtime);
}

async fn visit_range_reads_exactly_the_range_and_stops_on_visitor_error_on_a_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    for i in 0..20 {
        log.publish(0, b(&format!("r{i}"))).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut visit = |r: MetadataEventRecord| {
        seen.push(r.offset);
        Ok(())
    };
    log.visit_range(0, 5, 9, &mut visit).await.unwrap();
    assert_eq!(seen, vec![5, 6, 7, 8]);

    let mut calls = 0;
    let mut empty = |_r| {
        calls += 1;
        Ok(())
    };
    log.visit_range(0, 7, 7, &mut empty).await.unwrap();
    log.visit_range(0, 9, 3, &mut empty).await.unwrap();
    assert_eq!(calls, 0);

    let mut count = 0;
    let mut failing = |r: MetadataEventRecord| {
        count += 1;
        if r.offset == 3 {
            Err(MetadataLogError::Other("stop here".into()))
        } else {
            Ok(())
        }
    };
    assert_eq!(
        log.visit_range(0, 0, 20, &mut failing).await,
        Err(MetadataLogError::Other("stop here".into()))
    );
    assert_eq!(count, 4, "no record is visited after the visitor's error");

    let mut noop = |_r| Ok(());
    let past = log.visit_range(0, 0, 21, &mut noop).await;
    assert!(matches!(past, Err(MetadataLogError::Other(m)) if m.contains("ends at 20")));
}

#[test]
fn visit_range_pages_through_large_ranges_and_steps_over_compacted_offsets() {
    on_both_runtimes(
        visit_range_pages_through_large_ranges_and_steps_over_compacted_offsets_on_a_runtime,
    );
}

async fn visit_range_pages_through_large_ranges_and_steps_over_compacted_offsets_on_a_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::default()
        .with_segment_bytes(64 << 10)
        .with_compaction(CompactionPolicy::default().with_delete_retention(Duration::ZERO));
    let (_s, log) = open(dir.path(), 1, options);
    let big = Bytes::from(vec![7u8; 20_000]);
    // 300 records of 20 kB: about 6 MB, several pages of 1 MiB and ~90 segments.
    let events: Vec<KeyedEvent> = (0..300)
        .map(|i| KeyedEvent {
            partition: 0,
            key: b(&format!("k{}", i % 10)),
            event: Some(big.clone()),
        })
        .collect();
    log.publish_keyed_group(events).await.unwrap();
    let mut all = 0;
    let mut visit = |_r| {
        all += 1;
        Ok(())
    };
    log.visit_range(0, 0, 300, &mut visit).await.unwrap();
    assert_eq!(all, 300);

    // Tombstone the last key: compaction then leaves only the latest record of keys k0..k8.
    let tombstone = log.publish_keyed(0, b("k9"), None).await.unwrap();
    assert_eq!(tombstone, 300);
    let report = log.log().compact(strata::now_ms() + 1).await.unwrap();
    assert_eq!(report.records_removed, 292);
    let mut offsets = Vec::new();
    let mut visit = |r: MetadataEventRecord| {
        offsets.push(r.offset);
        Ok(())
    };
    log.visit_range(0, 0, 301, &mut visit).await.unwrap();
    assert_eq!(offsets, (290..299).collect::<Vec<_>>());
    assert_eq!(log.high_water_marks().await.unwrap(), vec![301]);
}

#[test]
fn low_water_marks_follow_retention() {
    on_both_runtimes(low_water_marks_follow_retention_on_a_runtime);
}

async fn low_water_marks_follow_retention_on_a_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::default()
        .with_segment_bytes(4096)
        .with_retention(
            RetentionPolicy::default()
                .with_max_bytes(Some(8192))
                .with_max_age(None),
        );
    let (_s, log) = open(dir.path(), 1, options);
    for i in 0..100 {
        log.publish(0, Bytes::from(format!("{i:0>200}")))
            .await
            .unwrap();
    }
    let report = log.log().apply_retention(strata::now_ms()).unwrap();
    assert!(report.segments_deleted > 0);
    let low = log.low_water_marks().await.unwrap()[0];
    assert!(low > 0 && low < 100, "low water mark {low}");
    // A subscriber from 0 starts at the low-water mark without waiting for deleted offsets.
    let (mut stream, _h) = log.subscribe(vec![start(0, 0)]);
    let first = take(&mut stream, 1).await;
    assert_eq!(first[0].offset, low);
    let mut visited = Vec::new();
    let mut visit = |r: MetadataEventRecord| {
        visited.push(r.offset);
        Ok(())
    };
    log.visit_range(0, 0, 100, &mut visit).await.unwrap();
    assert_eq!(visited, (low..100).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_log_refuses_everything_and_ends_streams() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    log.publish(0, b("a")).await.unwrap();
    let (mut stream, _h) = log.subscribe(vec![start(0, 0)]);
    take(&mut stream, 1).await;
    log.close().await.unwrap();
    assert_eq!(log.publish(0, b("b")).await, Err(MetadataLogError::Closed));
    assert_eq!(
        log.publish_keyed(0, b("k"), None).await,
        Err(MetadataLogError::Closed)
    );
    assert_eq!(log.high_water_marks().await, Err(MetadataLogError::Closed));
    assert_eq!(log.low_water_marks().await, Err(MetadataLogError::Closed));
    let mut visit = |_r| Ok(());
    assert_eq!(
        log.visit_range(0, 0, 1, &mut visit).await,
        Err(MetadataLogError::Closed)
    );
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap();
    assert_eq!(end, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut before = Vec::new();
    {
        let (_s, log) = open(dir.path(), 2, LogOptions::default());
        log.publish(0, b("plain")).await.unwrap();
        log.publish_keyed(0, b("k"), Some(b("v"))).await.unwrap();
        log.publish_keyed(1, b("k"), None).await.unwrap();
        let (mut stream, _h) = log.subscribe(vec![start(0, 0), start(1, 0)]);
        before.extend(take(&mut stream, 3).await);
        log.close().await.unwrap();
    }
    let (_s, log) = open(dir.path(), 2, LogOptions::default());
    assert_eq!(log.high_water_marks().await.unwrap(), vec![2, 1]);
    let (mut stream, _h) = log.subscribe(vec![start(0, 0), start(1, 0)]);
    let mut after = take(&mut stream, 3).await;
    after.sort_by_key(|r| (r.partition, r.offset));
    before.sort_by_key(|r| (r.partition, r.offset));
    assert_eq!(after, before);
    assert_eq!(log.publish(0, b("next")).await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_before_reading_high_water_marks_covers_every_named_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (_s, log) = open(dir.path(), 1, LogOptions::default());
    let log = Arc::new(log);
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                log.publish(0, b(&format!("{i}"))).await.unwrap();
            }
        })
    };
    let (mut stream, _h) = log.subscribe(vec![start(0, 0)]);
    let high = log.high_water_marks().await.unwrap()[0];
    let got = take(&mut stream, high as usize).await;
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (0..high).collect::<Vec<_>>()
    );
    writer.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_one_bad_event_publishes_nothing_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, log) = open(dir.path(), 2, LogOptions::default());
    let (mut stream, _handle) = log.subscribe(vec![start(0, 0), start(1, 0)]);
    let too_large = Bytes::from(vec![0u8; strata::segment::MAX_RECORDS_LEN + 1]);
    let group = vec![
        KeyedEvent {
            partition: 0,
            key: b("a"),
            event: Some(b("1")),
        },
        KeyedEvent {
            partition: 1,
            key: b("b"),
            event: Some(b("2")),
        },
        KeyedEvent {
            partition: 1,
            key: b("c"),
            event: Some(too_large),
        },
    ];
    let err = log.publish_keyed_group(group).await.unwrap_err();
    assert!(matches!(err, MetadataLogError::Publish(_)), "{err:?}");
    assert_silent(&mut stream).await;
    assert_eq!(log.high_water_marks().await.unwrap(), vec![0, 0]);
    // The log keeps working: the next group goes through whole.
    let ok = vec![KeyedEvent {
        partition: 1,
        key: b("d"),
        event: Some(b("4")),
    }];
    assert_eq!(log.publish_keyed_group(ok).await.unwrap(), vec![0]);
    assert_eq!(payloads(&take(&mut stream, 1).await), vec![(1, 0, b("4"))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_is_not_reported_as_nothing_appended_and_heals() {
    use strata::fs::{FaultPlan, OpKind, OpKinds};
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let log = DiskEventLog::new(store.open_log("meta", 1, LogOptions::default()).unwrap());
    fs.set_plan(FaultPlan::FailAt {
        n: 0,
        kinds: OpKinds::only(OpKind::Sync),
    });
    match log.publish(0, b("maybe")).await {
        Err(MetadataLogError::Other(message)) => {
            assert!(message.contains("may or may not be durable"), "{message}")
        }
        other => panic!("a failed sync must not claim nothing was appended: {other:?}"),
    }
    // The next publish writes the unsynced bytes again, syncs, and goes through.
    assert_eq!(log.publish(0, b("sure")).await.unwrap(), 1);
    let mut seen = Vec::new();
    let mut visit = |r: MetadataEventRecord| {
        seen.push(r.payload);
        Ok(())
    };
    log.visit_range(0, 0, 2, &mut visit).await.unwrap();
    assert_eq!(seen, vec![b("maybe"), b("sure")]);
}

/// A subscriber commits how far it got under its name and resumes there after a restart; its
/// lag per partition is readable; concurrent commits keep the one the log ordered last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_resumes_from_its_committed_position_after_a_restart() {
    use strata::event_log::ConsumerPositions;
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, log) = open(dir.path(), 2, LogOptions::default());
        let positions = ConsumerPositions::open(&store).unwrap();
        for i in 0..5 {
            log.publish(0, b(&format!("e{i}"))).await.unwrap();
        }
        let (mut stream, _handle) = log.subscribe(vec![start(0, 0)]);
        let seen = take(&mut stream, 3).await;
        let next = seen.last().unwrap().offset + 1;
        positions.commit("meta", "indexer", 0, next).await.unwrap();
        assert_eq!(positions.committed("meta", "indexer", 0), Some(3));
        assert_eq!(positions.lag(log.log(), "indexer", 0).unwrap(), 2);
        assert_eq!(positions.lag(log.log(), "indexer", 1).unwrap(), 0);
        assert_eq!(positions.lag(log.log(), "nobody", 0).unwrap(), 5);
        assert!(positions.commit("meta", "", 0, 1).await.is_err());
        assert!(positions.commit("meta", "indexer", 0, -1).await.is_err());
        store.close_blocking().unwrap();
    }
    let (store, log) = open(dir.path(), 2, LogOptions::default());
    let positions = Arc::new(ConsumerPositions::open(&store).unwrap());
    let resume = positions
        .committed("meta", "indexer", 0)
        .expect("committed before");
    let (mut stream, _handle) = log.subscribe(vec![start(0, resume)]);
    let rest = take(&mut stream, 2).await;
    assert_eq!(payloads(&rest), vec![(0, 3, b("e3")), (0, 4, b("e4"))]);
    // Commits racing on one key: memory ends where a reopen (the log's order) ends.
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let positions = positions.clone();
            tokio::spawn(async move { positions.commit("meta", "racer", 1, i).await })
        })
        .collect();
    for racer in racers {
        racer.await.unwrap().unwrap();
    }
    let in_memory = positions.committed("meta", "racer", 1);
    drop(positions);
    store.close_blocking().unwrap();
    drop((log, store));
    let store = Store::open(dir.path()).unwrap();
    let reopened = ConsumerPositions::open(&store).unwrap();
    assert_eq!(reopened.committed("meta", "racer", 1), in_memory);
    assert_eq!(reopened.committed("meta", "indexer", 0), Some(3));
}

/// Positions are listed in order and deleted durably, one partition or all of a consumer's at
/// once; a deletion stays through compaction and a restart, and commits and deletions racing
/// on one key end where the log's order ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumers_positions_are_listed_and_deleted_durably() {
    use strata::event_log::{CommittedPosition, ConsumerPositions};
    let dir = tempfile::tempdir().unwrap();
    let position = |consumer: &str, partition, offset| CommittedPosition {
        log: "meta".into(),
        consumer: consumer.into(),
        partition,
        offset,
    };
    {
        let store = Store::open(dir.path()).unwrap();
        let positions = ConsumerPositions::open(&store).unwrap();
        for (consumer, partition, offset) in [("b", 1, 7), ("a", 0, 3), ("b", 0, 5), ("b", 2, 9)] {
            positions
                .commit("meta", consumer, partition, offset)
                .await
                .unwrap();
        }
        let listed = positions.positions();
        assert_eq!(
            listed,
            vec![
                position("a", 0, 3),
                position("b", 0, 5),
                position("b", 1, 7),
                position("b", 2, 9)
            ]
        );
        assert_eq!(positions.delete("meta", "b", Some(1)).await.unwrap(), 1);
        assert_eq!(positions.committed("meta", "b", 1), None);
        let high = positions.log().high_water_mark(0).unwrap();
        assert_eq!(positions.delete("meta", "nobody", None).await.unwrap(), 0);
        assert_eq!(positions.delete("other", "b", None).await.unwrap(), 0);
        assert_eq!(
            positions.log().high_water_mark(0).unwrap(),
            high,
            "nothing written"
        );
        assert!(positions.delete("meta", "", None).await.is_err());
        positions.log().roll_blocking(0).unwrap();
        positions.log().compact_blocking(strata::now_ms()).unwrap();
        store.close_blocking().unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let positions = Arc::new(ConsumerPositions::open(&store).unwrap());
    assert_eq!(
        positions.positions(),
        vec![
            position("a", 0, 3),
            position("b", 0, 5),
            position("b", 2, 9)
        ],
        "the deletion outlived compaction and the restart"
    );
    assert_eq!(positions.delete("meta", "b", None).await.unwrap(), 2);
    assert_eq!(positions.positions(), vec![position("a", 0, 3)]);
    positions.commit("meta", "b", 0, 11).await.unwrap();
    // A commit and a deletion racing on one key: memory ends where a reopen ends.
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let positions = positions.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    positions.commit("meta", "racer", 0, i).await.map(drop)
                } else {
                    positions.delete("meta", "racer", Some(0)).await.map(drop)
                }
            })
        })
        .collect();
    for racer in racers {
        racer.await.unwrap().unwrap();
    }
    let in_memory = positions.positions();
    drop(positions);
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let reopened = ConsumerPositions::open(&store).unwrap();
    assert_eq!(reopened.positions(), in_memory);
    assert_eq!(reopened.committed("meta", "b", 0), Some(11));
}

/// A read error reaches the consumer: the checked stream delivers every record before the
/// damage, then the error naming the segment file as its last item, then ends; the seam's
/// stream delivers the same records and ends instead of waiting.
#[test]
fn a_subscription_ends_with_the_read_error_of_a_corrupt_segment() {
    on_both_runtimes(a_subscription_ends_with_the_read_error_of_a_corrupt_segment_on_a_runtime);
}

async fn a_subscription_ends_with_the_read_error_of_a_corrupt_segment_on_a_runtime() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (_store, log) = open(
        dir.path(),
        1,
        LogOptions::default().with_segment_bytes(4096),
    );
    for i in 0..80 {
        log.publish(0, Bytes::from(format!("{i:03}-{}", "x".repeat(90))))
            .await
            .unwrap();
    }
    let segments = dir.path().join("logs/meta/0");
    let mut names: Vec<std::path::PathBuf> = std::fs::read_dir(&segments)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    // Flip one byte inside the second segment's first batch (in place: the file is mapped).
    let damaged = &names[1];
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(damaged)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, 100).unwrap();
    file.write_all_at(&[byte[0] ^ 0x01], 100).unwrap();
    let before: i64 = damaged
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(before > 0);

    let (mut checked, _handle) = log.subscribe_checked(vec![start(0, 0)]);
    let mut offsets = Vec::new();
    let error = loop {
        let next = tokio::time::timeout(Duration::from_secs(10), checked.next())
            .await
            .expect("the stream answers");
        match next.expect("an error comes before the end") {
            Ok(record) => offsets.push(record.offset),
            Err(e) => break e,
        }
    };
    assert_eq!(
        offsets,
        (0..before).collect::<Vec<_>>(),
        "every record before the damage"
    );
    let message = error.to_string();
    assert!(
        message.contains(&damaged.display().to_string()),
        "the error names the file: {message}"
    );
    let after = tokio::time::timeout(Duration::from_secs(10), checked.next()).await;
    assert!(matches!(after, Ok(None)), "the error is the last item");

    let (mut seam, _handle) = log.subscribe(vec![start(0, 0)]);
    let delivered = take(&mut seam, before as usize).await;
    assert_eq!(delivered.last().map(|r| r.offset), Some(before - 1));
    let end = tokio::time::timeout(Duration::from_secs(10), seam.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the seam's stream ends on the error"
    );

    // A range read visits the records before the damage, then returns the error.
    let mut visited = Vec::new();
    let ranged = log
        .visit_range(0, 0, 80, &mut |r: MetadataEventRecord| {
            visited.push(r.offset);
            Ok(())
        })
        .await;
    assert_eq!(visited, (0..before).collect::<Vec<_>>());
    let message = ranged.expect_err("the damage is an error").to_string();
    assert!(
        message.contains(&damaged.display().to_string()),
        "{message}"
    );
}
