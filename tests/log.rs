//! The partition log under the seam: store lock and manifest, segment rolling, group commit,
//! durability modes, compression, retention, keyed compaction and reopen.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata::log::{CompactionPolicy, RetentionPolicy};
use strata::{Compression, Durability, Log, LogOptions, NewRecord, Record, Store, StoreError};

fn value(s: &str) -> NewRecord {
    NewRecord::value(1_000, Bytes::copy_from_slice(s.as_bytes()))
}

fn keyed(ts: i64, k: &str, v: Option<&str>) -> NewRecord {
    NewRecord::keyed(
        ts,
        Bytes::copy_from_slice(k.as_bytes()),
        v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
    )
}

fn read_all(log: &Log, partition: u32) -> Vec<Record> {
    let high = log.high_water_mark(partition).unwrap();
    let mut next = 0;
    let mut out = Vec::new();
    while next < high {
        let page = log.read(partition, next, 4096).unwrap();
        assert!(page.next_offset > next, "reads make progress");
        out.extend(page.records);
        next = page.next_offset;
    }
    out
}

fn small_segments() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_index_interval_bytes(512)
}

#[test]
fn a_second_opener_is_refused_until_the_first_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, LogOptions::default()).unwrap();
    match Store::open(dir.path()) {
        Err(StoreError::Locked { path }) => assert_eq!(path, dir.path().join("LOCK")),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(store);
    assert!(
        matches!(Store::open(dir.path()), Err(StoreError::Locked { .. })),
        "the open log holds the lock"
    );
    drop(log);
    Store::open(dir.path()).unwrap();
}

#[test]
fn logs_are_recorded_in_the_manifest_with_fixed_partition_counts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        store.open_log("a", 3, LogOptions::default()).unwrap();
        store.open_log("b", 1, LogOptions::default()).unwrap();
        assert!(matches!(
            store.open_log("a", 4, LogOptions::default()),
            Err(StoreError::PartitionCountMismatch {
                existing: 3,
                requested: 4,
                ..
            })
        ));
        assert!(matches!(
            store.open_log("../x", 1, LogOptions::default()),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            store.open_log("z", 0, LogOptions::default()),
            Err(StoreError::Invalid(_))
        ));
    }
    let store = Store::open(dir.path()).unwrap();
    let names: Vec<(String, u32)> = store
        .logs()
        .into_iter()
        .map(|l| (l.name, l.partitions))
        .collect();
    assert_eq!(names, vec![("a".to_string(), 3), ("b".to_string(), 1)]);
    assert!(matches!(
        store.open_log("b", 2, LogOptions::default()),
        Err(StoreError::PartitionCountMismatch {
            existing: 1,
            requested: 2,
            ..
        })
    ));
}

/// What the MANIFEST records of a log's options, as a comparable tuple.
fn recorded(options: &LogOptions) -> (Compression, Duration, u64, bool) {
    let c = &options.compaction;
    (
        options.compression,
        c.delete_retention,
        options.segment_bytes,
        c.enabled,
    )
}

/// A checkpoint writes nothing for a partition whose index already records all of its data:
/// closing a log whose 64 partitions are untouched since a clean reopen costs a few file
/// operations, not a few per partition; a partition written since gets its index again.
#[test]
fn closing_writes_nothing_for_partitions_untouched_since_a_clean_open() {
    use strata::fs::{FaultFs, OpKind, OpKinds};
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new(dir.path()).unwrap();
    let open = || {
        let options = strata::StoreOptions::default().with_fs(fs.shared());
        let store = Store::open_with(dir.path(), options).unwrap();
        let log = store.open_log("wide", 64, LogOptions::default()).unwrap();
        (store, log)
    };
    {
        let (store, log) = open();
        for p in 0..64 {
            log.append_blocking(p, vec![value("x")]).unwrap();
        }
        store.close_blocking().unwrap();
    }
    let file_ops =
        || fs.count(OpKinds::only(OpKind::Sync)) + fs.count(OpKinds::only(OpKind::Rename));
    let (store, log) = open();
    let before = file_ops();
    store.close_blocking().unwrap();
    drop((store, log));
    let idle = file_ops() - before;
    assert!(
        idle < 8,
        "closing 64 untouched partitions took {idle} syncs and renames"
    );
    let (store, log) = open();
    log.append_blocking(5, vec![value("y")]).unwrap();
    let before = file_ops();
    store.close_blocking().unwrap();
    drop((store, log));
    let one = file_ops() - before;
    assert!(
        one > idle,
        "the written partition's index is written: {one} against {idle}"
    );
    let (_store, log) = open();
    assert_eq!(read_all(&log, 5).len(), 2);
    assert_eq!(read_all(&log, 6).len(), 1);
}

#[test]
fn a_logs_options_are_recorded_and_a_change_is_recorded_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let first = small_segments()
        .with_compression(Compression::Zstd { level: 3 })
        .with_compaction(
            CompactionPolicy::default().with_delete_retention(Duration::from_secs(48 * 3600)),
        );
    {
        let store = Store::open(dir.path()).unwrap();
        store.open_log("a", 2, first.clone()).unwrap();
    }
    let second = first
        .clone()
        .with_compression(Compression::None)
        .with_commit_yield(Duration::ZERO);
    {
        let store = Store::open(dir.path()).unwrap();
        let stored = store.log_options("a").expect("recorded");
        assert_eq!(recorded(&stored), recorded(&first));
        // A tool opens the log as recorded, and records nothing.
        let log = store.open_recorded_log("a").unwrap();
        assert_eq!(recorded(log.options()), recorded(&first));
        assert_eq!(log.partition_count(), 2);
        log.close_blocking().unwrap();
        let (opened, events) = common::traced(|| store.open_log("a", 2, second.clone()));
        assert_eq!(recorded(opened.unwrap().options()), recorded(&second));
        assert!(
            events.contains("recording the log's new options") && events.contains("compression"),
            "{events}"
        );
        assert!(
            !events.contains("commit_yield"),
            "not a recorded option: {events}"
        );
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        recorded(&store.log_options("a").unwrap()),
        recorded(&second)
    );
    assert!(store.log_options("b").is_none());
    assert!(matches!(
        store.open_recorded_log("b"),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn a_store_of_an_earlier_version_records_a_logs_options_at_its_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let v2 =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("format/vectors/manifest_v2.bin");
    std::fs::copy(v2, dir.path().join("MANIFEST")).unwrap();
    let version = |dir: &std::path::Path| {
        let bytes = std::fs::read(dir.join("MANIFEST")).unwrap();
        u32::from_le_bytes(bytes[8..12].try_into().unwrap())
    };
    {
        let store = Store::open(dir.path()).unwrap();
        assert!(store.log_options("events").is_none());
        let log = store.open_recorded_log("events").unwrap();
        assert_eq!(log.options(), &LogOptions::default());
        log.close_blocking().unwrap();
        assert!(
            store.log_options("events").is_none(),
            "a tool records nothing"
        );
        assert_eq!(version(dir.path()), 2, "nor rewrites the MANIFEST");
        let options = LogOptions::default().with_compression(Compression::Zstd { level: 5 });
        store.open_log("events", 8, options).unwrap();
    }
    assert_eq!(version(dir.path()), 3);
    let store = Store::open(dir.path()).unwrap();
    let stored = store.log_options("events").unwrap();
    assert_eq!(stored.compression, Compression::Zstd { level: 5 });
    assert!(store.log_options("__group_g").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_roll_and_reads_cross_them_before_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let expected: Vec<String> = (0..400)
        .map(|i| format!("record-{i:04}-{}", "x".repeat(i % 50)))
        .collect();
    {
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("l", 1, small_segments()).unwrap();
        for chunk in expected.chunks(7) {
            log.append(0, chunk.iter().map(|s| value(s)).collect())
                .await
                .unwrap();
        }
        assert!(log.stats()[0].segments > 5, "{:?}", log.stats());
        let got: Vec<String> = read_all(&log, 0)
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(got, expected);
        // Reads starting in the middle of a batch and of a segment.
        let page = log.read(0, 123, 1).unwrap();
        assert_eq!(page.records[0].offset, 123);
        log.close().await.unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, small_segments()).unwrap();
    assert_eq!(log.high_water_mark(0).unwrap(), 400);
    assert_eq!(log.recovery_report()[0].truncated_bytes, 0);
    assert_eq!(
        log.recovery_report()[0].indexes_rebuilt,
        0,
        "clean shutdown leaves valid indexes"
    );
    let got: Vec<i64> = read_all(&log, 0).iter().map(|r| r.offset).collect();
    assert_eq!(got, (0..400).collect::<Vec<_>>());
    assert_eq!(
        log.append(0, vec![value("more")]).await.unwrap(),
        (400, 400)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_pages_read_a_large_active_segment_across_chunk_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let buffered =
        LogOptions::default().with_durability(Durability::Interval(Duration::from_secs(60)));
    let log = store.open_log("l", 1, buffered).unwrap();
    // 3000 one-record batches of 120-250 bytes in the active segment: reads go through chunks
    // whose edges fall inside batch headers and bodies.
    for i in 0..3000usize {
        log.append(
            0,
            vec![value(&format!("{i}-{}", "q".repeat(60 + i * 37 % 131)))],
        )
        .await
        .unwrap();
    }
    assert_eq!(log.stats()[0].segments, 1);
    for budget in [1, 700, 65_536, 100_000, 1 << 20] {
        let mut next = 0;
        let mut count = 0;
        while next < 3000 {
            let page = log.read(0, next, budget).unwrap();
            assert!(page.next_offset > next);
            // A page holds at most its budget plus the one batch that crossed it.
            let held: usize = page.records.iter().map(|r| r.encoded_len() + 48).sum();
            assert!(
                held <= budget + 400,
                "a page of budget {budget} held {held} bytes"
            );
            for (i, r) in page.records.iter().enumerate() {
                assert_eq!(r.offset, next + i as i64);
            }
            count += page.records.len();
            next = page.next_offset;
        }
        assert_eq!(count, 3000, "budget {budget}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_or_damaged_indexes_are_rebuilt_from_the_segments() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("logs/l/0");
    {
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("l", 1, small_segments()).unwrap();
        for i in 0..200 {
            log.append(0, vec![value(&format!("{i:0>100}"))])
                .await
                .unwrap();
        }
        log.close().await.unwrap();
    }
    let mut indexes: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect();
    indexes.sort();
    assert!(indexes.len() > 3);
    std::fs::remove_file(&indexes[0]).unwrap();
    std::fs::write(&indexes[1], [0u8; 64]).unwrap();
    let mut bytes = std::fs::read(&indexes[2]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&indexes[2], bytes).unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, small_segments()).unwrap();
    assert_eq!(log.recovery_report()[0].indexes_rebuilt, 3);
    assert_eq!(read_all(&log, 0).len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sync_appends_share_fdatasyncs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 2, LogOptions::default()).unwrap();
    let before = log.sync_rounds();
    let mut tasks = Vec::new();
    for w in 0..32u32 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                log.append(w % 2, vec![value(&format!("{w}-{i}"))])
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rounds = log.sync_rounds() - before;
    assert!(
        rounds < 320,
        "320 appends took {rounds} sync rounds: group commit must share them"
    );
    assert_eq!(
        log.high_water_mark(0).unwrap() + log.high_water_mark(1).unwrap(),
        320
    );
}

/// Blocking threads and async tasks wait in the same group commit (a round's leader may lead
/// several rounds back to back, and wakes threads through a relay; once enough wait, threads
/// yield before they queue): every acknowledged append must be readable at the offset it was
/// given, and rounds must be shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_and_tasks_sharing_rounds_each_find_their_record_at_its_offset() {
    share_rounds(LogOptions::default(), 12).await;
}

/// The same with threads that park at once (no yielding: every wait goes through the queue
/// and the relay), and with enough threads that waiters yield (8 per CPU must wait), for as
/// long as the option allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_that_park_at_once_or_yield_long_share_rounds_too() {
    share_rounds(LogOptions::default().with_commit_yield(Duration::ZERO), 12).await;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let yielding = LogOptions::default().with_commit_yield(Duration::from_millis(10));
    share_rounds(yielding, 8 * cpus + 8).await;
}

/// `threads` blocking threads and 12 tasks append 40 records each to a log of 3 partitions.
async fn share_rounds(options: LogOptions, threads: u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 3, options).unwrap();
    let before = log.sync_rounds();
    let appends = (threads as usize + 12) * 40;
    let threads: Vec<_> = (0..threads)
        .map(|w| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..40)
                    .map(|i| {
                        let text = format!("thread {w}-{i}");
                        let (first, _) = log.append_blocking(w % 3, vec![value(&text)]).unwrap();
                        (w % 3, first, text)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let tasks: Vec<_> = (0..12u32)
        .map(|w| {
            let log = log.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0..40 {
                    let text = format!("task {w}-{i}");
                    let (first, _) = log.append(w % 3, vec![value(&text)]).await.unwrap();
                    acked.push((w % 3, first, text));
                }
                acked
            })
        })
        .collect();
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    for t in threads {
        acked.extend(t.join().unwrap());
    }
    let rounds = log.sync_rounds() - before;
    assert!(
        (rounds as usize) < appends,
        "{appends} appends took {rounds} rounds"
    );
    let records: Vec<Vec<Record>> = (0..3).map(|p| read_all(&log, p)).collect();
    assert_eq!(records.iter().map(Vec::len).sum::<usize>(), appends);
    for (partition, offset, text) in acked {
        let record = &records[partition as usize][offset as usize];
        assert_eq!(record.offset, offset);
        assert_eq!(record.value.as_deref(), Some(text.as_bytes()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_durability_acknowledges_before_sync_and_syncs_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        LogOptions::default().with_durability(Durability::Interval(Duration::from_secs(3600)));
    {
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("l", 1, options.clone()).unwrap();
        let rounds = log.sync_rounds();
        for i in 0..50 {
            log.append(0, vec![value(&i.to_string())]).await.unwrap();
        }
        assert_eq!(log.sync_rounds(), rounds, "no sync before the interval");
        assert_eq!(
            log.high_water_mark(0).unwrap(),
            50,
            "records are readable once acknowledged"
        );
        log.sync().await.unwrap();
        assert_eq!(log.sync_rounds(), rounds + 1);
    }
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, options).unwrap();
    assert_eq!(log.high_water_mark(0).unwrap(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_batches_round_trip_and_shrink_repetitive_data() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let plain = store.open_log("plain", 1, LogOptions::default()).unwrap();
    let zstd = store
        .open_log(
            "zstd",
            1,
            LogOptions::default().with_compression(Compression::Zstd { level: 3 }),
        )
        .unwrap();
    let records: Vec<NewRecord> = (0..200)
        .map(|i| value(&format!("{{\"id\":{i},\"pad\":\"{}\"}}", "a".repeat(200))))
        .collect();
    plain.append(0, records.clone()).await.unwrap();
    zstd.append(0, records.clone()).await.unwrap();
    assert_eq!(read_all(&plain, 0), read_all(&zstd, 0));
    assert!(
        zstd.stats()[0].bytes * 5 < plain.stats()[0].bytes,
        "{:?} vs {:?}",
        zstd.stats(),
        plain.stats()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_appends_are_refused_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, LogOptions::default()).unwrap();
    assert!(matches!(
        log.append(0, vec![]).await,
        Err(StoreError::Encode(_))
    ));
    let unkeyed_tombstone = NewRecord {
        timestamp: 0,
        key: None,
        value: None,
    };
    assert!(matches!(
        log.append(0, vec![unkeyed_tombstone]).await,
        Err(StoreError::Encode(_))
    ));
    assert!(matches!(
        log.append(3, vec![value("x")]).await,
        Err(StoreError::PartitionOutOfRange {
            partition: 3,
            count: 1
        })
    ));
    let huge = NewRecord::value(0, Bytes::from(vec![0u8; strata::segment::MAX_BATCH_LEN]));
    assert!(matches!(
        log.append(0, vec![huge]).await,
        Err(StoreError::Encode(_))
    ));
    assert_eq!(log.high_water_mark(0).unwrap(), 0);
    assert_eq!(log.append(0, vec![value("ok")]).await.unwrap(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_and_age_deletes_whole_segments_and_advances_the_low_water_mark() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = small_segments().with_retention(
        RetentionPolicy::default()
            .with_max_bytes(None)
            .with_max_age(Some(Duration::from_secs(60))),
    );
    let log = store.open_log("l", 1, options).unwrap();
    let now = 10_000_000;
    for i in 0..100 {
        // The first 50 records are two minutes old, the rest are fresh.
        let ts = if i < 50 { now - 120_000 } else { now };
        log.append(
            0,
            vec![NewRecord::value(ts, Bytes::from(format!("{i:0>150}")))],
        )
        .await
        .unwrap();
    }
    let report = log.apply_retention(now).unwrap();
    assert!(report.segments_deleted >= 1);
    let low = log.low_water_mark(0).unwrap();
    assert!(
        low > 0 && low <= 50,
        "only old segments go: low water mark {low}"
    );
    let records = read_all(&log, 0);
    assert_eq!(records.first().unwrap().offset, low);
    assert_eq!(records.len() as i64, 100 - low);
    let files = std::fs::read_dir(dir.path().join("logs/l/0"))
        .unwrap()
        .count();
    assert_eq!(
        files,
        2 * log.stats()[0].segments - 1,
        "deleted segments leave no files (the active has no index yet)"
    );
    drop(log);
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, small_segments()).unwrap();
    assert_eq!(
        log.low_water_mark(0).unwrap(),
        low,
        "the low-water mark survives reopen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_keeps_the_partition_under_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = small_segments().with_retention(
        RetentionPolicy::default()
            .with_max_bytes(Some(10_000))
            .with_max_age(None),
    );
    let log = store.open_log("l", 1, options).unwrap();
    for i in 0..200 {
        log.append(0, vec![value(&format!("{i:0>150}"))])
            .await
            .unwrap();
    }
    log.apply_retention(strata::now_ms()).unwrap();
    let bytes = log.stats()[0].bytes;
    assert!(bytes <= 10_000, "{bytes}");
    assert_eq!(log.high_water_mark(0).unwrap(), 200);
    assert!(log.low_water_mark(0).unwrap() > 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_the_latest_value_per_key_with_offsets_and_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let options = small_segments().with_compaction(
        CompactionPolicy::default().with_delete_retention(Duration::from_secs(60)),
    );
    let now = 50_000_000;
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, options.clone()).unwrap();
    for round in 0..20 {
        for k in 0..10 {
            log.append(
                0,
                vec![keyed(
                    now - 1_000_000,
                    &format!("k{k}"),
                    Some(&format!("v{round}")),
                )],
            )
            .await
            .unwrap();
        }
    }
    log.append(0, vec![value("unkeyed")]).await.unwrap(); // offset 200
    log.append(0, vec![keyed(now - 1_000_000, "k0", None)])
        .await
        .unwrap(); // 201: old tombstone
    log.append(0, vec![keyed(now, "k1", None)]).await.unwrap(); // 202: fresh tombstone
    let report = log.compact_partition(0, now).unwrap();
    let survivors: Vec<(i64, Option<Bytes>, Option<Bytes>)> = read_all(&log, 0)
        .into_iter()
        .map(|r| (r.offset, r.key, r.value))
        .collect();
    let b = |s: &str| Some(Bytes::copy_from_slice(s.as_bytes()));
    let mut expected: Vec<(i64, Option<Bytes>, Option<Bytes>)> = (2..10)
        .map(|k| (190 + k, b(&format!("k{k}")), b("v19")))
        .collect();
    expected.push((200, None, b("unkeyed")));
    expected.push((202, b("k1"), None));
    assert_eq!(survivors, expected);
    assert_eq!(report.records_removed, 203 - 10);
    assert!(report.bytes_after < report.bytes_before);
    assert_eq!(log.high_water_mark(0).unwrap(), 203);
    assert_eq!(
        log.append(0, vec![value("next")]).await.unwrap(),
        (203, 203),
        "offsets are never reused"
    );

    // A second pass after the tombstone aged out removes it; reopen keeps the result.
    log.compact_partition(0, now + 120_000).unwrap();
    let keys: Vec<i64> = read_all(&log, 0).iter().map(|r| r.offset).collect();
    assert_eq!(keys, vec![192, 193, 194, 195, 196, 197, 198, 199, 200, 203]);
    log.close().await.unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, options).unwrap();
    let reopened: Vec<i64> = read_all(&log, 0).iter().map(|r| r.offset).collect();
    assert_eq!(reopened, keys);
    assert_eq!(log.high_water_mark(0).unwrap(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_key_map_compacts_a_prefix_per_pass_and_converges() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        small_segments().with_compaction(CompactionPolicy::default().with_max_key_map_bytes(1));
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, options).unwrap();
    for round in 0..10 {
        for k in 0..30 {
            log.append(
                0,
                vec![keyed(
                    0,
                    &format!("key-{k}"),
                    Some(&format!("{round:0>60}")),
                )],
            )
            .await
            .unwrap();
        }
    }
    let segments = log.stats()[0].segments;
    let first = log.compact_partition(0, 0).unwrap();
    assert!(
        first.bytes_before <= 4096,
        "the first pass covers only the first segment: {first:?}"
    );
    for _ in 0..segments {
        log.compact_partition(0, 0).unwrap();
    }
    // Once every segment was covered, only the latest record of each key is left.
    let records = read_all(&log, 0);
    assert_eq!(
        records.len(),
        30,
        "passes over successive dirty segments converge"
    );
    let mut latest = std::collections::HashMap::new();
    for r in &records {
        latest.insert(r.key.clone().unwrap(), r.value.clone().unwrap());
    }
    assert_eq!(latest.len(), 30);
    assert!(latest.values().all(|v| v.ends_with(b"9")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_maintenance_applies_retention() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = small_segments()
        .with_retention(
            RetentionPolicy::default()
                .with_max_bytes(Some(5_000))
                .with_max_age(None),
        )
        .with_maintenance_interval(Some(Duration::from_millis(20)));
    let log = store.open_log("l", 1, options).unwrap();
    for i in 0..100 {
        log.append(0, vec![value(&format!("{i:0>150}"))])
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while log.low_water_mark(0).unwrap() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "maintenance never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_wholly_below_an_offset_are_deleted_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("l", 1, small_segments()).unwrap();
    for i in 0..300 {
        log.append(0, vec![value(&format!("record-{i:04}-{}", "y".repeat(40)))])
            .await
            .unwrap();
    }
    let before = log.stats()[0].segments;
    assert!(before > 4, "{:?}", log.stats());
    // Nothing below offset 0: nothing to delete.
    assert_eq!(
        log.delete_segments_before(0, 0).unwrap().segments_deleted,
        0
    );
    let report = log.delete_segments_before(0, 150).unwrap();
    assert!(report.segments_deleted > 0 && report.bytes_deleted > 0);
    let low = log.low_water_mark(0).unwrap();
    assert!(
        low <= 150,
        "offset 150 is still referenced, low-water mark {low}"
    );
    assert!(low > 0);
    let offsets: Vec<i64> = read_all(&log, 0).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (low..300).collect::<Vec<_>>());
    // Everything: only the active segment stays.
    log.delete_segments_before(0, i64::MAX).unwrap();
    assert_eq!(log.stats()[0].segments, 1);
    assert_eq!(log.high_water_mark(0).unwrap(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_with_one_bad_record_writes_none_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("atomic", 2, LogOptions::default()).unwrap();
    let small = |s: &'static str| NewRecord::value(1, Bytes::from_static(s.as_bytes()));
    let too_large = NewRecord::value(
        1,
        Bytes::from(vec![0u8; strata::segment::MAX_RECORDS_LEN + 1]),
    );
    let err = log
        .append_many(vec![
            (0, vec![small("a"), small("b")]),
            (1, vec![small("c"), too_large]),
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Encode(_)), "{err:?}");
    assert_eq!(log.high_water_mark(0).unwrap(), 0);
    assert_eq!(log.high_water_mark(1).unwrap(), 0);
    assert_eq!(log.stats()[0].bytes, 32, "nothing reached the file");
    assert_eq!(log.append(0, vec![small("d")]).await.unwrap(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_during_a_roll_recovers_by_itself_once_space_returns() {
    use strata::fs::FaultPlan;
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let options = LogOptions::default().with_segment_bytes(4096);
    let log = store.open_log("full", 1, options).unwrap();
    let record = || vec![NewRecord::value(1, Bytes::from(vec![7u8; 1000]))];
    for _ in 0..3 {
        log.append(0, record()).await.unwrap();
    }
    // The next append needs a new segment; the disk has room for its batch but not its file.
    fs.set_plan(FaultPlan::DiskFull { bytes: 16 });
    for _ in 0..3 {
        match log.append(0, record()).await {
            Err(StoreError::NoSpace { .. }) => {}
            other => panic!("expected a typed full-disk error, got {other:?}"),
        }
    }
    fs.set_plan(FaultPlan::None);
    assert_eq!(log.append(0, record()).await.unwrap(), (3, 3));
    assert_eq!(
        log.stats()[0].segments,
        2,
        "the roll happened once space returned"
    );
    drop(log);
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("full", 1, LogOptions::default()).unwrap();
    assert_eq!(log.high_water_mark(0).unwrap(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_partition_does_not_stop_maintenance_of_the_others_and_is_reported() {
    use strata::fs::{FaultPlan, OpKind, OpKinds};
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let options = small_segments_keeping_4_kib();
    let log = store.open_log("kept", 2, options).unwrap();
    for p in 0..2 {
        for _ in 0..12 {
            log.append(p, vec![NewRecord::value(1, Bytes::from(vec![1u8; 900]))])
                .await
                .unwrap();
        }
    }
    // The first unlink (partition 0's oldest segment) fails.
    fs.set_plan(FaultPlan::FailAt {
        n: 0,
        kinds: OpKinds::only(OpKind::Unlink),
    });
    let report = log.run_maintenance(strata::now_ms()).unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert_eq!(report.failures[0].0, 0, "partition 0 failed");
    assert!(
        log.low_water_mark(1).unwrap() > 0,
        "partition 1 was still maintained"
    );
    assert_eq!(
        log.low_water_mark(0).unwrap(),
        0,
        "nothing ran ahead of the disk"
    );
    let status = log.maintenance_status();
    assert_eq!((status.passes, status.failures), (1, 1));
    // The next pass retries partition 0.
    let report = log.run_maintenance(strata::now_ms()).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(log.low_water_mark(0).unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_held_after_retention_pin_their_segment_and_say_how_much() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = small_segments_keeping_4_kib();
    let log = store.open_log("pins", 1, options).unwrap();
    for _ in 0..12 {
        log.append(0, vec![NewRecord::value(1, Bytes::from(vec![3u8; 900]))])
            .await
            .unwrap();
    }
    let held = log.read(0, 0, 1 << 20).unwrap().records;
    assert!(!held.is_empty());
    let deleted = log.apply_retention(strata::now_ms()).unwrap();
    assert!(deleted.bytes_deleted > 0);
    let pinned = log.stats()[0].pinned_bytes;
    assert!(pinned > 0 && pinned <= deleted.bytes_deleted, "{pinned}");
    assert_eq!(log.pinned_bytes(), pinned);
    assert_eq!(
        held[0].value.as_deref(),
        Some(&[3u8; 900][..]),
        "still readable"
    );
    drop(held);
    assert_eq!(
        log.stats()[0].pinned_bytes,
        0,
        "dropping the records frees the space"
    );
}

/// A small tmpfs mounted for this test (as root), unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a `size` tmpfs, or says why it cannot (not root, no mount permission). With
    /// `STRATA_REQUIRE_TMPFS=1` (set by `.ci/run`) not being able to is a failure.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                std::env::var("STRATA_REQUIRE_TMPFS").is_err(),
                "could not mount a tmpfs (run as root)"
            );
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        Some(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_full_disk_answers_no_space_and_the_log_recovers_once_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount("3m") else {
        return;
    };
    let root = tmpfs.dir.path().join("store");
    let filler = tmpfs.dir.path().join("filler");
    std::fs::write(&filler, vec![0u8; 1 << 20]).unwrap();
    let options = LogOptions::default()
        .with_segment_bytes(256 << 10)
        .with_journal_bytes(256 << 10);
    let mut acked = Vec::new();
    {
        let store = Store::open(&root).unwrap();
        let log = store.open_log("full", 1, options.clone()).unwrap();
        let record = |i: usize| vec![NewRecord::value(1, Bytes::from(vec![i as u8; 8000]))];
        let mut refused = 0;
        for i in 0..1000 {
            match log.append(0, record(i)).await {
                Ok((offset, _)) => acked.push((offset, i as u8)),
                Err(StoreError::NoSpace { .. }) => {
                    refused += 1;
                    if refused == 3 {
                        break;
                    }
                }
                Err(other) => panic!("a full disk must be a typed error, got {other}"),
            }
        }
        assert_eq!(refused, 3, "the disk filled up");
        std::fs::remove_file(&filler).unwrap();
        for i in 0..20 {
            let (offset, _) = log.append(0, record(200 + i)).await.expect("space is back");
            acked.push((offset, (200 + i) as u8));
        }
        store.close_blocking().unwrap();
    }
    let store = Store::open(&root).unwrap();
    let log = store.open_log("full", 1, options).unwrap();
    for (offset, byte) in &acked {
        let page = log.read(0, *offset, 1).unwrap();
        assert_eq!(page.records[0].offset, *offset);
        assert_eq!(
            page.records[0].value.as_ref().unwrap()[0],
            *byte,
            "offset {offset}"
        );
    }
    assert_eq!(
        log.high_water_mark(0).unwrap(),
        acked.len() as i64,
        "dense, nothing half there"
    );
    store.close_blocking().unwrap();
    drop(store);
    assert!(strata::tools::verify_store(&root).unwrap().is_clean());
}

#[test]
fn many_async_appenders_wait_once_unsynced_journal_bytes_reach_the_bound() {
    // Two thousand tasks append at once to a Sync log on a slow disk. Each waits for its own
    // durability anyway, but without a bound every one of them would first add its frame to
    // the journal's buffer; with `max_unsynced_bytes` they wait for a round before writing.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let bound = 64 << 10;
    let options = LogOptions::default().with_max_unsynced_bytes(bound);
    let log = store.open_log("bounded", 2, options).unwrap();
    fs.set_sync_delay(Duration::from_millis(20));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(log.unsynced_bytes());
                std::thread::sleep(Duration::from_micros(200));
            }
            peak
        })
    };
    let value = Bytes::from(vec![7u8; 1024]);
    rt.block_on(async {
        let tasks: Vec<_> = (0..2000u32)
            .map(|i| {
                let (log, value) = (log.clone(), value.clone());
                tokio::spawn(
                    async move { log.append(i % 2, vec![NewRecord::value(0, value)]).await },
                )
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    // The bound, plus what the two worker threads may have written after their last check.
    let request = 1024 + 256;
    assert!(peak > 0, "the sampler saw appends in flight");
    assert!(
        peak <= bound + 2 * request,
        "{peak} unsynced bytes against a bound of {bound}"
    );
    assert_eq!(
        log.high_water_mark(0).unwrap() + log.high_water_mark(1).unwrap(),
        2000
    );
    log.close_blocking().unwrap();
}

/// Offset lookup by timestamp: the earliest offset whose record is at or after the time, across
/// sealed and active segments, with out-of-order timestamps and past the low-water mark.
#[test]
fn offsets_are_found_by_timestamp_in_sealed_and_active_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("t", 1, small_segments()).unwrap();
    // Offsets 0..300 with timestamps 1000 + 10 * offset, except offset 150 stamped early.
    for offset in 0..300i64 {
        let ts = if offset == 150 { 5 } else { 1000 + 10 * offset };
        let record = NewRecord::value(ts, Bytes::from(vec![b'v'; 100]));
        log.append_blocking(0, vec![record]).unwrap();
    }
    assert!(
        log.stats()[0].segments > 2,
        "the records span sealed segments"
    );
    let at = |ts| log.offset_for_timestamp(0, ts).unwrap();
    assert_eq!(at(i64::MIN), Some(0));
    assert_eq!(at(1000), Some(0));
    assert_eq!(at(1001), Some(1));
    assert_eq!(at(2000), Some(100));
    assert_eq!(
        at(1000 + 10 * 299),
        Some(299),
        "the last record, in the active segment"
    );
    assert_eq!(at(1000 + 10 * 299 + 1), None, "nothing that late");
    // The early-stamped record does not hide the later ones, and is found for an early time.
    assert_eq!(at(1000 + 10 * 150), Some(151));
    assert_eq!(at(6), Some(0));
    // Below the low-water mark nothing is reported.
    log.delete_segments_before(0, 120).unwrap();
    let low = log.low_water_mark(0).unwrap();
    assert!(low > 0);
    assert_eq!(at(1000), Some(low));
    assert!(matches!(
        log.offset_for_timestamp(9, 0),
        Err(StoreError::PartitionOutOfRange { .. })
    ));
}

/// A temporary store works like any store while it lives (a log, a reopen of the log), skips
/// every sync, and removes its directory when dropped.
#[test]
fn a_temporary_store_serves_a_test_and_leaves_nothing_behind() {
    let parent = tempfile::tempdir().unwrap();
    let (dir, second) = {
        let store = strata::TemporaryStore::new_in(parent.path()).unwrap();
        let other = strata::TemporaryStore::new_in(parent.path()).unwrap();
        assert_ne!(store.path(), other.path(), "each gets its own directory");
        let log = store.open_log("t", 2, LogOptions::default()).unwrap();
        log.append_blocking(1, vec![value("kept")]).unwrap();
        log.close_blocking().unwrap();
        let log = store.open_log("t", 2, LogOptions::default()).unwrap();
        assert_eq!(read_all(&log, 1).len(), 1);
        (store.path().to_path_buf(), other.path().to_path_buf())
    };
    assert!(
        !dir.exists() && !second.exists(),
        "dropped stores are removed"
    );
    // The file system under it reaches the disk for everything but syncs.
    let counted = tempfile::tempdir().unwrap();
    let fault = strata::fs::FaultFs::new(counted.path()).unwrap();
    let fs = strata::fs::NoSyncFs::shared(fault.shared());
    let store =
        Store::open_with(counted.path(), strata::StoreOptions::default().with_fs(fs)).unwrap();
    let log = store.open_log("t", 2, LogOptions::default()).unwrap();
    log.append_blocking(0, vec![value("v")]).unwrap();
    store.close_blocking().unwrap();
    use strata::fs::{OpKind, OpKinds};
    assert!(fault.count(OpKinds::only(OpKind::Write)) > 0);
    assert_eq!(fault.count(OpKinds::only(OpKind::Sync)), 0);
    assert_eq!(fault.count(OpKinds::only(OpKind::DirSync)), 0);
}

#[test]
fn every_out_of_range_option_is_refused_at_open_naming_the_option() {
    use strata::log::options::{CompactionPolicy, LogOptions as O};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let d = O::default;
    let cases: Vec<(O, &str)> = vec![
        (d().with_segment_bytes(100), "segment_bytes"),
        (d().with_segment_bytes(1 << 33), "segment_bytes"),
        (d().with_index_interval_bytes(0), "index_interval_bytes"),
        (
            d().with_compression(strata::Compression::Zstd { level: 40 }),
            "compression",
        ),
        (
            d().with_compaction(CompactionPolicy::default().with_min_cleanable_ratio(1.5)),
            "compaction.min_cleanable_ratio",
        ),
        (
            d().with_compaction(CompactionPolicy::default().with_max_key_map_bytes(0)),
            "compaction.max_key_map_bytes",
        ),
        (
            d().with_maintenance_interval(Some(Duration::ZERO)),
            "maintenance_interval",
        ),
        (d().with_max_group_commit(0), "max_group_commit"),
        (d().with_journal_bytes(1), "journal_bytes"),
        (d().with_max_unsynced_bytes(1 << 40), "max_unsynced_bytes"),
        (
            d().with_commit_yield(Duration::from_millis(11)),
            "commit_yield",
        ),
        (
            d().with_durability(strata::Durability::Interval(Duration::ZERO)),
            "durability",
        ),
    ];
    for (i, (options, name)) in cases.into_iter().enumerate() {
        match store.open_log(&format!("log{i}"), 1, options) {
            Err(StoreError::Invalid(message)) => assert!(message.contains(name), "{message}"),
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn rolls_retention_and_compaction_report_spans_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::default()
        .with_segment_bytes(4096)
        .with_retention(RetentionPolicy::default().with_max_bytes(Some(8192)));
    let ((), events) = common::traced(|| {
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("traced", 1, options).unwrap();
        for _ in 0..40 {
            let record = NewRecord::value(1, Bytes::from(vec![7u8; 500]));
            log.append_blocking(0, vec![record]).unwrap();
        }
        log.apply_retention(strata::now_ms()).unwrap();
    });
    for needle in [
        "strata.log.open",
        "segment rolled",
        "strata.retention",
        "segments deleted",
        "retention pass done",
    ] {
        assert!(
            events.contains(needle),
            "{needle:?} missing from:\n{events}"
        );
    }
}

/// 4 KiB segments; retention keeps 4 KiB per partition, whatever their age.
fn small_segments_keeping_4_kib() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_retention(
            RetentionPolicy::default()
                .with_max_bytes(Some(4096))
                .with_max_age(None),
        )
}

/// A segment is created at its full capacity (sparse); one an earlier writer grew chunk by
/// chunk is shorter. Reopened, its writer extends it and appends past the old end, and every
/// record reads back, before and after another reopen.
#[test]
fn a_segment_shorter_than_its_capacity_is_extended_and_appended_past_its_old_end() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions::default()
        .with_durability(Durability::Interval(Duration::from_secs(60)))
        .with_segment_bytes(1 << 20);
    let value = |i: u8| Bytes::from(vec![i; 1000]);
    let path = dir.path().join("logs/grown/0/00000000000000000000.seg");
    let file_len = || std::fs::metadata(&path).unwrap().len();
    // Opens the log, appends the records numbered `range`, checks it holds `total`, closes it.
    let append = |range: std::ops::Range<u8>, total: usize| {
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("grown", 1, options.clone()).unwrap();
        for i in range {
            log.append_blocking(0, vec![NewRecord::value(1, value(i))])
                .unwrap();
        }
        assert_eq!(read_all(&log, 0).len(), total);
        drop(log);
        store.close_blocking().unwrap();
    };
    append(0..10, 10);
    assert_eq!(file_len(), 1 << 20, "created at its capacity");
    // As an earlier writer left it: the data and a zero tail to the next 4 KiB.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(16 << 10)
        .unwrap();
    append(10..100, 100);
    assert_eq!(file_len(), 1 << 20, "extended to its capacity");
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("grown", 1, options).unwrap();
    let records = read_all(&log, 0);
    assert_eq!(records.len(), 100);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.value.as_deref(), Some(&value(i as u8)[..]), "record {i}");
    }
}

/// A dropped `append` future (cancellation) on a `Durability::Sync` log: dropped before its
/// first poll, nothing is appended; dropped while it waits for its round, its batch keeps the
/// offsets it was written at, is never readable before it is durable, and becomes durable and
/// readable with the next round (another append's, `sync`, or `close`), unacknowledged; the
/// appends around it are unaffected.
/// On a current-thread runtime (ursula's thread-per-core executors) a task's append never syncs
/// on the executor's thread: the round goes to the log's commit worker, so another task of the
/// runtime keeps running while the disk takes its time. With every sync taking 40 ms, the other
/// task is never held up for half that; leading the round inline held it up 40 ms per append.
#[test]
fn an_async_append_on_a_current_thread_runtime_never_holds_up_its_other_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let log = store.open_log("t", 1, LogOptions::default()).unwrap();
    fs.set_sync_delay(Duration::from_millis(40));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (longest, appended) = common::longest_stall(&rt, async {
        let mut appended = Vec::new();
        for i in 0..5u8 {
            // The ticker runs at least here, so a gap shows whatever an append held.
            tokio::task::yield_now().await;
            let record = vec![NewRecord::value(1, Bytes::from(vec![i; 100]))];
            appended.push(log.append(0, record).await.unwrap().0);
        }
        appended
    });
    fs.set_sync_delay(Duration::ZERO);
    assert_eq!(
        appended,
        vec![0, 1, 2, 3, 4],
        "each append acknowledged in order"
    );
    assert!(
        longest < Duration::from_millis(20),
        "another task of the runtime waited {longest:?} for an append"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_append_future_is_unacknowledged_and_never_read_before_it_is_durable() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let log = store.open_log("c", 1, LogOptions::default()).unwrap();
    let record = |s: &str| vec![NewRecord::value(1, Bytes::copy_from_slice(s.as_bytes()))];
    log.append(0, record("a")).await.unwrap();

    // Dropped before its first poll: nothing appended.
    drop(log.append(0, record("never")));
    assert_eq!(log.high_water_mark(0).unwrap(), 1);

    // A slow round led by a thread; meanwhile a task writes its batch and queues, then drops.
    fs.set_sync_delay(Duration::from_millis(300));
    let leader = {
        let log = log.clone();
        std::thread::spawn(move || {
            log.append_blocking(0, vec![NewRecord::value(1, Bytes::from("b"))])
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let mut dropped = Box::pin(log.append(0, record("dropped")));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        matches!(dropped.as_mut().poll(&mut cx), Poll::Pending),
        "the task queued behind the running round"
    );
    drop(dropped);
    fs.set_sync_delay(Duration::ZERO);
    assert_eq!(leader.join().unwrap().unwrap().0, 1);
    // The leader may have chained a round for the queued batch. Whatever is readable now is
    // durable: a power cut now (nothing unsynced survives) keeps every readable record.
    let high = log.high_water_mark(0).unwrap();
    assert!((2..=3).contains(&high), "{high}");
    let image = tempfile::tempdir().unwrap();
    fs.write_crash_image(image.path(), strata::fs::CrashMode::Strict)
        .unwrap();
    {
        let crashed = Store::open(image.path()).unwrap();
        let after = crashed.open_log("c", 1, LogOptions::default()).unwrap();
        assert!(
            after.high_water_mark(0).unwrap() >= high,
            "readable before durable"
        );
    }

    // The next append's round covers it in any case: offsets go on after it, it reads back.
    let next = log.append(0, record("c")).await.unwrap();
    assert_eq!(next.0, 3, "the dropped batch kept offset 2");
    let values: Vec<Bytes> = log
        .read(0, 0, 1 << 20)
        .unwrap()
        .records
        .into_iter()
        .filter_map(|r| r.value)
        .collect();
    assert_eq!(values, ["a", "b", "dropped", "c"].map(Bytes::from));
    log.close().await.unwrap();
    store.close_blocking().unwrap();
}

/// Opening a store, a log, the coordination transport and the consumer positions through their
/// async forms on a current-thread runtime, while every sync takes 40 ms: another task of the
/// runtime never waits for them longer than the bound (20 ms; each open syncs several times),
/// and what they open works.
#[test]
fn async_opens_and_closes_never_hold_up_a_current_thread_runtime() {
    use strata::coordination::DiskCoordinationTransport;
    use strata::event_log::ConsumerPositions;
    let dir = tempfile::tempdir().unwrap();
    let fs = strata::fs::FaultFs::new(dir.path()).unwrap();
    fs.set_sync_delay(Duration::from_millis(40));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (longest, ()) = common::longest_stall(&rt, async {
        let options = strata::StoreOptions::default().with_fs(fs.shared());
        let store = Store::open_async(dir.path(), options).await.unwrap();
        let log = store
            .open_log_async("events", 4, LogOptions::default())
            .await
            .unwrap();
        DiskCoordinationTransport::open_async(&store).await.unwrap();
        ConsumerPositions::open_async(&store).await.unwrap();
        let record = NewRecord::value(1, Bytes::from_static(b"x"));
        assert_eq!(log.append(0, vec![record]).await.unwrap(), (0, 0));
        // Closing syncs and checkpoints every log; after it the last handles drop cheaply.
        store.close().await.unwrap();
        drop((store, log));
    });
    fs.set_sync_delay(Duration::ZERO);
    assert!(
        longest < Duration::from_millis(20),
        "another task of the runtime waited {longest:?} for an open or the close"
    );
    let store = Store::open_with(
        dir.path(),
        strata::StoreOptions::default().with_fs(fs.shared()),
    );
    let log = store
        .unwrap()
        .open_log("events", 4, LogOptions::default())
        .unwrap();
    assert_eq!(log.high_water_mark(0).unwrap(), 1);
}

/// Async appends that fill segment after segment on a current-thread runtime, while every sync
/// takes 40 ms: each roll (the full segment synced and indexed, the next one created and its
/// directory synced) runs on the blocking pool, so another task of the runtime never waits for
/// one longer than the bound (20 ms), for buffered and for Sync logs alike.
#[test]
fn async_appends_roll_segments_without_holding_up_a_current_thread_runtime() {
    for durability in [
        Durability::Interval(Duration::from_secs(3600)),
        Durability::Sync,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fs = strata::fs::FaultFs::new(dir.path()).unwrap();
        let options = strata::StoreOptions::default().with_fs(fs.shared());
        let store = Store::open_with(dir.path(), options).unwrap();
        let log_options = LogOptions::default()
            .with_durability(durability)
            .with_segment_bytes(64 << 10);
        let log = store.open_log("rolls", 2, log_options).unwrap();
        fs.set_sync_delay(Duration::from_millis(40));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (longest, ()) = common::longest_stall(&rt, async {
            let value = Bytes::from(vec![7u8; 8 << 10]);
            // 48 records of 8 KiB per partition: about six rolls each.
            for i in 0..96u32 {
                let record = NewRecord::value(i64::from(i), value.clone());
                log.append(i % 2, vec![record]).await.unwrap();
            }
        });
        fs.set_sync_delay(Duration::ZERO);
        let sealed = std::fs::read_dir(dir.path().join("logs/rolls/0"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("idx".as_ref()))
            .count();
        assert!(sealed >= 4, "the appends rolled: {sealed} sealed segments");
        assert!(
            longest < Duration::from_millis(20),
            "{durability:?}: another task of the runtime waited {longest:?} for an append"
        );
        assert_eq!(log.high_water_mark(0).unwrap(), 48);
        assert_eq!(log.high_water_mark(1).unwrap(), 48);
    }
}

/// A checkpoint of an empty active segment, held before each of its first operations, while an
/// append too large for the segment makes it again (bigger, at the same base), writes into it
/// and a second checkpoint records it. The replaced file's checkpoint ends before the new file
/// is used, so the two never write the segment's index (one name) at once and no late index of
/// the replaced file lands over the new one's (which, with the close skipping a partition whose
/// index counts as current, would lose the acknowledged record). Before, the two checkpoints
/// ran side by side on the same temporary index file and the held one failed.
#[test]
fn a_late_checkpoint_of_a_segment_made_again_bigger_keeps_the_newer_index() {
    use strata::fs::{OpKinds, ThreadHold};
    for before in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let (fs, store) = common::fault_store(dir.path());
        let options = LogOptions::default().with_segment_bytes(16 << 10);
        let log = store.open_log("grow", 1, options.clone()).unwrap();
        log.append_blocking(0, vec![NewRecord::value(1, Bytes::from(vec![1u8; 100]))])
            .unwrap();
        log.roll_blocking(0).unwrap();
        fs.hold_thread(Some(ThreadHold {
            thread: "strata-test-late".into(),
            before,
            kinds: OpKinds::ALL,
            others: 10_000,
            cut_after: false,
        }));
        let late = {
            let log = log.clone();
            std::thread::Builder::new()
                .name("strata-test-late".into())
                .spawn(move || log.checkpoint_blocking())
                .unwrap()
        };
        let started = std::time::Instant::now();
        while !fs.hold_report().reached && started.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let big = Bytes::from(vec![2u8; 40 << 10]);
        let (offset, _) = log
            .append_blocking(0, vec![NewRecord::value(2, big.clone())])
            .unwrap();
        log.checkpoint_blocking().unwrap();
        let late = late.join().unwrap();
        fs.hold_thread(None);
        store.close_blocking().unwrap();
        drop((log, store));
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("grow", 1, options).unwrap();
        let page = log.read(0, offset, 1 << 20).unwrap();
        assert_eq!(
            page.records.first().and_then(|r| r.value.clone()),
            Some(big),
            "held before its operation #{before}: the acknowledged record at {offset}"
        );
        late.unwrap_or_else(|e| panic!("held before its operation #{before}: {e}"));
    }
}
