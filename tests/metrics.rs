//! The metrics Strata reports through the `metrics` facade reach an installed recorder: sync
//! rounds and bytes of a log, maintenance results, group commits, cold-tier tasks and the cold
//! object cache. (Its own test binary: a recorder is installed once per process.)
#![cfg(feature = "ursula")]

use bytes::Bytes;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use strata::group::DiskGroupEngine;
use strata::{LogOptions, NewRecord, Store};
use ursula_runtime::{
    AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine, ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

/// Counter totals (each snapshot of the debugging recorder reports what changed since the
/// last one, so they are added up here) and the last value of each gauge.
#[derive(Default)]
struct Totals {
    counters: std::collections::HashMap<String, u64>,
    gauges: std::collections::HashMap<String, f64>,
    histograms: std::collections::HashMap<String, Vec<f64>>,
}

impl Totals {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_string();
            match value {
                DebugValue::Counter(n) => *self.counters.entry(name).or_default() += n,
                DebugValue::Gauge(g) => {
                    let labels: Vec<String> = key
                        .key()
                        .labels()
                        .map(|l| format!("{}={}", l.key(), l.value()))
                        .collect();
                    self.gauges
                        .insert(format!("{name}{{{}}}", labels.join(",")), g.0);
                }
                DebugValue::Histogram(values) => self
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(values.iter().map(|v| v.0)),
            }
        }
    }

    /// The total of every counter named `name` (over all label sets) after a fresh snapshot.
    fn of(&mut self, snapshotter: &Snapshotter, name: &str) -> u64 {
        self.take(snapshotter);
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// Every value recorded in the histograms named `name`, after a fresh snapshot.
    fn histogram(&mut self, snapshotter: &Snapshotter, name: &str) -> Vec<f64> {
        self.take(snapshotter);
        self.histograms.get(name).cloned().unwrap_or_default()
    }

    /// The last value of the gauge `name{labels}` after a fresh snapshot.
    fn gauge(&mut self, snapshotter: &Snapshotter, name: &str) -> Option<f64> {
        self.take(snapshotter);
        self.gauges.get(name).copied()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_groups_report_their_work_to_the_installed_recorder() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let mut totals = Totals::default();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("m", 1, LogOptions::default()).unwrap();
    for _ in 0..5 {
        let record = NewRecord::value(1, Bytes::from_static(b"0123456789"));
        log.append(0, vec![record]).await.unwrap();
    }
    assert!(totals.of(&snapshotter, "strata_sync_rounds_total") >= 5);
    assert!(totals.of(&snapshotter, "strata_synced_bytes_total") >= 50);
    assert_eq!(totals.of(&snapshotter, "strata_appended_records_total"), 5);
    assert!(totals.of(&snapshotter, "strata_appended_bytes_total") >= 50);
    let latencies = totals.histogram(&snapshotter, "strata_append_seconds");
    assert_eq!(latencies.len(), 5, "one latency per durable append");
    assert!(latencies.iter().all(|s| *s > 0.0));
    let rounds = totals.histogram(&snapshotter, "strata_sync_round_records");
    assert_eq!(
        rounds.iter().sum::<f64>(),
        5.0,
        "every record in one round: {rounds:?}"
    );
    log.run_maintenance(strata::now_ms()).unwrap();
    assert_eq!(
        totals.of(&snapshotter, "strata_maintenance_failures_total"),
        0
    );
    subscriber_and_consumer_lag(&store, &log, &snapshotter, &mut totals).await;

    let mut engine = DiskGroupEngine::open_local(&store, "g").unwrap();
    let p = ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    };
    let none = ColdWriteAdmission::default();
    let id = BucketStreamId::new("tenant", "s");
    engine
        .create_stream(CreateStreamRequest::new(id.clone(), "text/plain"), p, none)
        .await
        .unwrap();
    let mut append = AppendRequest::from_bytes(id.clone(), Bytes::from_static(b"hello\n"));
    append.content_type = "text/plain".into();
    engine.append(append, p, none).await.unwrap();
    assert_eq!(totals.of(&snapshotter, "strata_group_commits_total"), 2);
    engine.flush_stream_cold(&id, 1 << 20, p).await.unwrap();
    assert_eq!(totals.of(&snapshotter, "strata_cold_tasks_total"), 1);
    let read = ReadStreamRequest {
        stream_id: id,
        offset: 0,
        max_len: 100,
        now_ms: 0,
        record: None,
        max_records: None,
    };
    engine.read_stream(read.clone(), p).await.unwrap();
    engine.read_stream(read, p).await.unwrap();
    assert_eq!(totals.of(&snapshotter, "strata_cold_cache_reads_total"), 2);
}

/// A live subscriber's lag as of its last read of a partition, and a named consumer's lag
/// behind its committed position.
async fn subscriber_and_consumer_lag(
    store: &Store,
    log: &strata::Log,
    snapshotter: &Snapshotter,
    totals: &mut Totals,
) {
    use futures::StreamExt;
    use strata::event_log::{ConsumerPositions, DiskEventLog, MetadataEventLog, PartitionStart};
    let events = DiskEventLog::new(log.clone());
    let (mut stream, _handle) = events.subscribe(vec![PartitionStart {
        partition: 0,
        start_offset: 0,
    }]);
    let lag = |totals: &mut Totals| {
        totals.gauge(
            snapshotter,
            "strata_subscriber_lag_records{log=m,partition=0,subscription=0}",
        )
    };
    stream.next().await.unwrap();
    assert_eq!(
        lag(totals),
        Some(5.0),
        "5 records past the cursor when it read them"
    );
    for _ in 0..4 {
        stream.next().await.unwrap();
    }
    for _ in 0..3 {
        let record = NewRecord::value(1, Bytes::from_static(b"more"));
        log.append(0, vec![record]).await.unwrap();
    }
    stream.next().await.unwrap();
    assert_eq!(lag(totals), Some(3.0), "3 new records past the cursor");
    let positions = ConsumerPositions::open(store).unwrap();
    positions.commit("m", "billing", 0, 6).await.unwrap();
    assert_eq!(positions.lag(log, "billing", 0).unwrap(), 2);
    let name = "strata_consumer_lag_records{log=m,consumer=billing,partition=0}";
    assert_eq!(totals.gauge(snapshotter, name), Some(2.0));
}
