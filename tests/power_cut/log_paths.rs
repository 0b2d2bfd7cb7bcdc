//! Workloads of the log's write paths: appends and rolls, retention, keyed compaction, and the
//! MANIFEST (log creation).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strata::log::{CompactionPolicy, RetentionPolicy};
use strata::segment::NewRecord;
use strata::{Log, LogOptions, Store, StoreError};

use strata::fs::{CrashMode, FaultPlan, OpKind, OpKinds};

use super::harness::{Disk, Outcome, Workload};

/// A multi-thread runtime for a workload or a check.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Opens the store on a crash image (no faults) for checking.
pub fn open_image(root: &Path) -> (Disk, Store) {
    let disk = Disk::from_image(root);
    let store = Store::open_with(&disk.root, disk.options())
        .unwrap_or_else(|e| panic!("the image does not open: {e}"));
    (disk, store)
}

/// Closes `store` and checks the directory with `strata verify`.
pub fn verify_clean(disk: &Disk, store: Store) {
    store.close_blocking().expect("a clean close");
    drop(store);
    let report = strata::tools::verify::verify_store(&disk.root).expect("verify runs");
    assert!(report.is_clean(), "verify found: {:?}", report.findings);
}

/// Every record of `partition` from its low-water mark on.
pub fn all_records(log: &Log, partition: u32) -> Vec<strata::Record> {
    let mut out = Vec::new();
    let low = log.low_water_mark(partition).unwrap();
    log.visit_shared::<StoreError>(partition, low, i64::MAX, &mut |r| {
        out.push(r);
        Ok(())
    })
    .unwrap();
    out
}

/// Opens what `open` opens on `disk`: tries twice (a single injected fault may hit the first
/// attempt), then frees space (`between`, for a disk too full to open) and tries once more.
/// Errors are counted in `tally`.
pub fn open_with_retries<T, E: std::fmt::Display>(
    disk: &Disk,
    tally: &mut Tally,
    between: &dyn Fn(),
    open: impl Fn() -> Result<T, E>,
) -> Option<T> {
    for attempt in 0..3 {
        if disk.dead() {
            return None;
        }
        if attempt == 2 {
            between();
            tally.halfway = true;
        }
        match open() {
            Ok(opened) => return Some(opened),
            Err(e) => tally.failed(e),
        }
    }
    None
}

/// Opens the store and `log` on `disk` (see [`open_with_retries`]).
pub fn open_log(
    disk: &Disk,
    (tally, between): (&mut Tally, &dyn Fn()),
    name: &str,
    partitions: u32,
    options: LogOptions,
) -> Option<(Store, Log)> {
    open_with_retries(disk, tally, between, || {
        Store::open_with(&disk.root, disk.options()).and_then(|s| {
            s.open_log(name, partitions, options.clone())
                .map(|l| (s, l))
        })
    })
}

/// Errors and the probe, shared by the workloads' acknowledgement records.
#[derive(Debug, Default)]
pub struct Tally {
    /// The errors met, for failure messages.
    pub messages: Vec<String>,
    pub halfway: bool,
    pub errors_before: usize,
    pub errors_after: usize,
    pub probe_ok: bool,
}

impl Tally {
    /// Counts an error and keeps its message.
    pub fn failed(&mut self, e: impl std::fmt::Display) {
        self.messages.push(e.to_string());
        self.error();
    }

    pub fn error(&mut self) {
        if self.halfway {
            self.errors_after += 1;
        } else {
            self.errors_before += 1;
        }
    }

    pub fn outcome(&self) -> Outcome {
        Outcome {
            errors_before: self.errors_before,
            errors_after: self.errors_after,
            probe_ok: self.probe_ok,
        }
    }
}

// ---------------------------------------------------------------- appends and rolls

const PARTITIONS: u32 = 2;

fn append_options() -> LogOptions {
    // Segments of a few pages, so one sync round's batches span pages a power cut can split.
    LogOptions::default()
        .with_segment_bytes(16 << 10)
        .with_index_interval_bytes(256)
        .with_journal_bytes(64 << 10)
}

/// A record's payload: which request, item and position it is, padded to `pad` bytes.
fn payload(request: u64, item: usize, k: usize, n: usize, pad: usize) -> Bytes {
    let head = format!("r{request}-i{item}-k{k}-n{n}-");
    let mut body = head.into_bytes();
    body.resize(body.len().max(pad), b'.');
    Bytes::from(body)
}

fn parse(payload: &[u8]) -> (u64, usize, usize, usize) {
    let text = std::str::from_utf8(payload).expect("a workload payload");
    let parts: Vec<&str> = text.trim_end_matches('.').split('-').collect();
    let num = |i: usize| parts[i][1..].parse::<u64>().expect("a field");
    (num(0), num(1) as usize, num(2) as usize, num(3) as usize)
}

/// Concurrent appends to two small-segment partitions: single records, multi-record items,
/// two-partition requests, and one request large enough to span batches.
pub struct Appends;

/// Acknowledged records: `(partition, offset) -> payload`.
#[derive(Debug, Default)]
pub struct AppendAcks {
    pub records: BTreeMap<(u32, i64), Bytes>,
    pub tally: Tally,
}

/// The items of request `id` (by writer and step).
fn request_items(id: u64, step: usize) -> Vec<(u32, Vec<NewRecord>)> {
    let record = |item, k, n, pad| NewRecord::value(7, payload(id, item, k, n, pad));
    let p = (id % u64::from(PARTITIONS)) as u32;
    match step % 5 {
        0 | 1 => vec![(p, vec![record(0, 0, 1, 40)])],
        2 => vec![(p, (0..4).map(|k| record(0, k, 4, 300)).collect())],
        3 => vec![
            (0, vec![record(0, 0, 1, 60)]),
            (1, (0..2).map(|k| record(1, k, 2, 60)).collect()),
        ],
        // Over 1 MiB: several batches of one append.
        _ if step == 4 => vec![(p, (0..3).map(|k| record(0, k, 3, 400 << 10)).collect())],
        _ => vec![(p, vec![record(0, 0, 1, 1200)])],
    }
}

impl Appends {
    async fn writer(
        log: Log,
        disk_dead: impl Fn() -> bool,
        writer: u64,
        acks: Arc<Mutex<AppendAcks>>,
    ) {
        for step in 0..8 {
            if disk_dead() {
                return;
            }
            let id = writer * 100 + step as u64;
            let items = request_items(id, step);
            let payloads: Vec<Vec<Bytes>> = items
                .iter()
                .map(|(_, rs)| rs.iter().map(|r| r.value.clone().unwrap()).collect())
                .collect();
            let partitions: Vec<u32> = items.iter().map(|(p, _)| *p).collect();
            let result = log.append_many(items).await;
            let mut acks = acks.lock().unwrap();
            match result {
                Ok(ranges) => {
                    for ((p, (first, _)), values) in partitions.iter().zip(ranges).zip(payloads) {
                        for (i, v) in values.into_iter().enumerate() {
                            acks.records.insert((*p, first + i as i64), v);
                        }
                    }
                }
                Err(_) => acks.tally.error(),
            }
        }
    }
}

/// One more append to each partition, retried once (under another id: a failed append's outcome
/// is unknown, so its record may be there too); true when every partition took one.
pub async fn probe(log: &Log, partitions: u32) -> bool {
    for p in 0..partitions {
        let record = |id: &'static [u8]| vec![NewRecord::value(1, Bytes::from_static(id))];
        if log.append(p, record(b"r999999-i0-k0-n1-")).await.is_err()
            && log.append(p, record(b"r999998-i0-k0-n1-")).await.is_err()
        {
            return false;
        }
    }
    true
}

impl Workload for Appends {
    type Acks = AppendAcks;

    fn name(&self) -> &'static str {
        "log appends and rolls"
    }

    fn run(&self, disk: &Disk, acks: &mut AppendAcks, between: &dyn Fn()) {
        run_appends(disk, acks, between, (0, runtime()));
    }

    fn check(&self, root: &Path, acks: &AppendAcks) {
        check_appends(root, acks);
    }

    fn outcome(&self, acks: &AppendAcks) -> Outcome {
        acks.tally.outcome()
    }
}

/// [`Appends`] with a thread (`strata-test-checkpointer`) running this many checkpoints beside
/// the writers: each syncs the partitions' active segments without their locks (detached) and
/// records their durable floors, racing the appends, rolls and journal switches.
pub struct CheckpointedAppends {
    pub checkpoints: u32,
}

impl Workload for CheckpointedAppends {
    type Acks = AppendAcks;

    fn name(&self) -> &'static str {
        "log appends beside checkpoints"
    }

    fn run(&self, disk: &Disk, acks: &mut AppendAcks, between: &dyn Fn()) {
        run_appends(disk, acks, between, (self.checkpoints, runtime()));
    }

    fn check(&self, root: &Path, acks: &AppendAcks) {
        check_appends(root, acks);
    }

    fn outcome(&self, acks: &AppendAcks) -> Outcome {
        acks.tally.outcome()
    }
}

/// [`Appends`] by tasks of a current-thread runtime (ursula's thread-per-core executors): no
/// task leads a round, each is handed to the process's commit workers (`strata-commit-`),
/// which sync and publish beside the appenders writing their frames.
pub struct CurrentThreadAppends;

impl Workload for CurrentThreadAppends {
    type Acks = AppendAcks;

    fn name(&self) -> &'static str {
        "log appends by tasks of a current-thread runtime"
    }

    fn run(&self, disk: &Disk, acks: &mut AppendAcks, between: &dyn Fn()) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        run_appends(disk, acks, between, (0, rt));
    }

    fn check(&self, root: &Path, acks: &AppendAcks) {
        check_appends(root, acks);
    }

    fn outcome(&self, acks: &AppendAcks) -> Outcome {
        acks.tally.outcome()
    }
}

/// Runs a checkpoint of `log` `count` times from a thread of its own, a little apart.
fn checkpointer(log: &Log, count: u32) -> Option<std::thread::JoinHandle<()>> {
    let log = log.clone();
    (count > 0).then(|| {
        std::thread::Builder::new()
            .name("strata-test-checkpointer".into())
            .spawn(move || {
                for _ in 0..count {
                    std::thread::sleep(std::time::Duration::from_millis(3));
                    let _ = log.checkpoint_blocking();
                }
            })
            .expect("the checkpointer starts")
    })
}

/// The run of [`Appends`] on `rt`, with `checkpoints` checkpoints beside it.
fn run_appends(
    disk: &Disk,
    acks: &mut AppendAcks,
    between: &dyn Fn(),
    (checkpoints, rt): (u32, tokio::runtime::Runtime),
) {
    let Some((store, log)) = open_log(
        disk,
        (&mut acks.tally, between),
        "events",
        PARTITIONS,
        append_options(),
    ) else {
        return;
    };
    let racing = checkpointer(&log, checkpoints);
    let shared = Arc::new(Mutex::new(std::mem::take(acks)));
    for half in 0..2u64 {
        rt.block_on(async {
            let tasks: Vec<_> = (0..3u64)
                .map(|w| {
                    let fs = disk.fs.clone();
                    tokio::spawn(Appends::writer(
                        log.clone(),
                        move || fs.crashed().is_some(),
                        w + 3 * half,
                        shared.clone(),
                    ))
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        if half == 0 {
            between();
            shared.lock().unwrap().tally.halfway = true;
        }
    }
    if let Some(racing) = racing {
        racing.join().expect("the checkpointer");
    }
    let probed = !disk.dead() && rt.block_on(probe(&log, PARTITIONS));
    *acks = std::mem::take(&mut *shared.lock().unwrap());
    acks.tally.probe_ok = probed;
    let _ = store.close_blocking();
}

/// The check of [`Appends`]: every acknowledged record at its offset, offsets dense, no
/// request half there, and a clean `verify`.
fn check_appends(root: &Path, acks: &AppendAcks) {
    let (disk, store) = open_image(root);
    let log = store
        .open_log("events", PARTITIONS, append_options())
        .expect("the log opens");
    for p in 0..PARTITIONS {
        let records = all_records(&log, p);
        let mut items: HashMap<(u64, usize), (usize, usize)> = HashMap::new();
        for (i, r) in records.iter().enumerate() {
            assert_eq!(
                r.offset, i as i64,
                "partition {p}: offsets are dense from 0"
            );
            let (request, item, _, n) = parse(r.value.as_deref().unwrap());
            let seen = items.entry((request, item)).or_insert((0, n));
            seen.0 += 1;
        }
        for ((request, item), (seen, n)) in items {
            assert_eq!(
                seen, n,
                "partition {p}: request {request} item {item} is half there"
            );
        }
        for ((ap, offset), value) in acks.records.range((p, 0)..(p + 1, 0)) {
            let found = records.get(*offset as usize).and_then(|r| r.value.as_ref());
            assert_eq!(
                found,
                Some(value),
                "partition {ap}: acknowledged offset {offset} lost"
            );
        }
    }
    verify_clean(&disk, store);
}

// ---------------------------------------------------------------- rounds of appends

/// Rounds of `per_round` appends of one `pad`-byte record each to partition 0, each round
/// followed by a pass (retention, a checkpoint), the halfway mark before round 3, then the
/// probe. With `large`, the sixth append of each round carries that many records instead of one.
struct AppendRounds {
    rounds: u64,
    per_round: u64,
    pad: usize,
    large: usize,
}

impl AppendRounds {
    /// Runs the rounds, recording acknowledged records; `pass` says whether its pass succeeded.
    fn run(
        &self,
        disk: &Disk,
        log: &Log,
        (records, tally): (&mut BTreeMap<i64, Bytes>, &mut Tally),
        between: &dyn Fn(),
        mut pass: impl FnMut() -> bool,
    ) {
        let rt = runtime();
        for round in 0..self.rounds {
            if round == 3 {
                between();
                tally.halfway = true;
            }
            for i in 0..self.per_round {
                if disk.dead() {
                    return;
                }
                let n = if i == 5 { self.large.max(1) } else { 1 };
                let values: Vec<Bytes> = (0..n)
                    .map(|k| payload(round * 100 + i, 0, k, n, self.pad))
                    .collect();
                let batch = values.iter().map(|v| NewRecord::value(3, v.clone()));
                match rt.block_on(log.append(0, batch.collect())) {
                    Ok((offset, _)) => {
                        records.extend((offset..).zip(values));
                    }
                    Err(_) => tally.error(),
                }
            }
            if !pass() {
                tally.error();
            }
        }
        tally.probe_ok = !disk.dead() && rt.block_on(probe(log, 1));
    }
}

/// Asserts that every acknowledged record of partition 0 is in `log`; returns its records.
fn assert_acknowledged<'a>(
    log: &Log,
    acknowledged: impl Iterator<Item = (&'a i64, &'a Bytes)>,
) -> BTreeMap<i64, Bytes> {
    let records: BTreeMap<i64, Bytes> = all_records(log, 0)
        .into_iter()
        .map(|r| (r.offset, r.value.unwrap()))
        .collect();
    for (offset, value) in acknowledged {
        assert_eq!(
            records.get(offset),
            Some(value),
            "acknowledged offset {offset} lost"
        );
    }
    records
}

// ---------------------------------------------------------------- retention

fn retention_options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_journal_bytes(64 << 10)
        .with_retention(
            RetentionPolicy::default()
                .with_max_bytes(Some(3 * 4096))
                .with_max_age(None),
        )
}

/// Appends and retention passes on one partition: a low-water mark a pass acknowledged never
/// goes back, and every acknowledged record at or above it stays.
pub struct Retention;

/// What retention and appends acknowledged.
#[derive(Debug, Default)]
pub struct RetentionAcks {
    pub records: BTreeMap<i64, Bytes>,
    /// Low-water mark after the last acknowledged retention pass.
    pub low_water_mark: i64,
    pub tally: Tally,
}

impl Workload for Retention {
    type Acks = RetentionAcks;

    fn name(&self) -> &'static str {
        "log retention"
    }

    fn run(&self, disk: &Disk, acks: &mut RetentionAcks, between: &dyn Fn()) {
        let Some((store, log)) = open_log(
            disk,
            (&mut acks.tally, between),
            "kept",
            1,
            retention_options(),
        ) else {
            return;
        };
        let low_water_mark = &mut acks.low_water_mark;
        let rounds = AppendRounds {
            rounds: 6,
            per_round: 12,
            pad: 500,
            large: 1,
        };
        rounds.run(
            disk,
            &log,
            (&mut acks.records, &mut acks.tally),
            between,
            || {
                let passed = log.apply_retention(strata::now_ms());
                if passed.is_ok() {
                    *low_water_mark = log.low_water_mark(0).unwrap();
                }
                passed.is_ok()
            },
        );
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &RetentionAcks) {
        let (disk, store) = open_image(root);
        let log = store.open_log("kept", 1, retention_options()).unwrap();
        let low = log.low_water_mark(0).unwrap();
        assert!(
            low >= acks.low_water_mark,
            "retention came undone: low-water mark {low}, acknowledged {}",
            acks.low_water_mark
        );
        assert_acknowledged(&log, acks.records.range(low..));
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &RetentionAcks) -> Outcome {
        acks.tally.outcome()
    }
}

// ---------------------------------------------------------------- keyed compaction

fn compaction_options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_journal_bytes(64 << 10)
        .with_compaction(
            CompactionPolicy::default()
                .with_enabled(true)
                .with_delete_retention(std::time::Duration::from_secs(3600))
                .with_min_cleanable_ratio(0.0)
                .with_max_key_map_bytes(64 << 20),
        )
}

/// Writes per compaction round (each pass rolls, so a round is about one segment).
const ROUND: usize = 8;

/// Rounds of keyed writes with a compaction pass after each. An even round puts `k` and
/// overwrites `j1..j7`; the odd round after it deletes `k` (a tombstone with an old timestamp,
/// so the pass may drop it at once) and overwrites `j1..j7` again. Its pass empties the even
/// round's segment and rewrites the odd one without the tombstone: the window in which a
/// deleted key could come back. After a power cut each key shows its last
/// acknowledged value, or that of a later write whose outcome is unknown.
///
/// `background`: the log's maintenance thread (every millisecond) runs the passes instead of
/// the writer, racing the appends (the writer pauses a few milliseconds after each round).
pub struct Compaction {
    pub background: bool,
}

/// Every write in order: key, value (`None`: delete), and whether it was acknowledged.
#[derive(Debug, Default)]
pub struct CompactionAcks {
    pub writes: Vec<(Bytes, Option<Bytes>, bool)>,
    pub tally: Tally,
}

impl CompactionAcks {
    /// What key `k` may show: its last acknowledged value (none: absent), or the value of any
    /// later write whose outcome is unknown (it failed, or the power went out during it).
    fn allowed(&self, k: &Bytes) -> Vec<Option<Bytes>> {
        let mine: Vec<&(Bytes, Option<Bytes>, bool)> =
            self.writes.iter().filter(|w| w.0 == k).collect();
        let last_acked = mine.iter().rposition(|w| w.2);
        let mut allowed = vec![last_acked.and_then(|i| mine[i].1.clone())];
        let after = last_acked.map_or(0, |i| i + 1);
        allowed.extend(mine[after..].iter().map(|w| w.1.clone()));
        allowed
    }
}

impl Compaction {
    /// The log's options: background maintenance every millisecond if `background`.
    fn options(&self) -> LogOptions {
        let period = self.background.then(|| std::time::Duration::from_millis(1));
        compaction_options().with_maintenance_interval(period)
    }

    /// One compaction pass after a round: the writer's own, or a pause for the thread's.
    fn pass(&self, log: &Log) -> bool {
        if self.background {
            std::thread::sleep(std::time::Duration::from_millis(3));
            return true;
        }
        log.compact_partition(0, strata::now_ms()).is_ok()
    }

    /// The key and value (`None`: delete) of write `i`.
    fn write(i: usize) -> (Bytes, Option<Bytes>) {
        let (round, j) = (i / ROUND, i % ROUND);
        let value = Some(Bytes::from(format!("v{i}-{}", "x".repeat(300))));
        match (j, round % 2) {
            (0, 0) => (Bytes::from("k"), value),
            (0, _) => (Bytes::from("k"), None),
            _ => (Bytes::from(format!("j{j}")), value),
        }
    }
}

impl Workload for Compaction {
    type Acks = CompactionAcks;

    fn name(&self) -> &'static str {
        if self.background {
            "keyed compaction by the maintenance thread"
        } else {
            "keyed compaction"
        }
    }

    fn run(&self, disk: &Disk, acks: &mut CompactionAcks, between: &dyn Fn()) {
        let Some((store, log)) =
            open_log(disk, (&mut acks.tally, between), "table", 1, self.options())
        else {
            return;
        };
        let rt = runtime();
        for i in 0..48 {
            if disk.dead() {
                return;
            }
            if i == 24 {
                between();
                acks.tally.halfway = true;
            }
            let (k, value) = Self::write(i);
            let timestamp = if value.is_some() { strata::now_ms() } else { 1 };
            let record = NewRecord::keyed(timestamp, k.clone(), value.clone());
            let acked = rt.block_on(log.append(0, vec![record])).is_ok();
            if !acked {
                acks.tally.error();
            }
            acks.writes.push((k, value, acked));
            if i % ROUND == ROUND - 1 && !self.pass(&log) {
                acks.tally.error();
            }
        }
        acks.tally.probe_ok = !disk.dead()
            && (log.compact_partition(0, strata::now_ms()).is_ok()
                || log.compact_partition(0, strata::now_ms()).is_ok());
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &CompactionAcks) {
        let (disk, store) = open_image(root);
        let log = store.open_log("table", 1, self.options()).unwrap();
        let mut visible: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
        let mut last = -1;
        for r in all_records(&log, 0) {
            assert!(r.offset > last, "offsets increase");
            last = r.offset;
            visible.insert(r.key.clone().unwrap(), r.value.clone());
        }
        let keys: std::collections::BTreeSet<Bytes> =
            acks.writes.iter().map(|w| w.0.clone()).collect();
        for k in &keys {
            let shown = visible.get(k).cloned().flatten();
            let allowed = acks.allowed(k);
            assert!(
                allowed.contains(&shown),
                "key {k:?} shows {shown:?}; allowed: {allowed:?}"
            );
        }
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &CompactionAcks) -> Outcome {
        acks.tally.outcome()
    }
}

// ---------------------------------------------------------------- MANIFEST

/// Options of the MANIFEST workload's logs: small files (crash images copy them whole).
fn small_log() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_journal_bytes(64 << 10)
}

/// Log creations one after another, then a log reopened with other options (each a MANIFEST
/// replacement): every log whose creation was acknowledged is there after a power cut, with
/// its partition count and options, and an acknowledged change of options is recorded.
pub struct Manifest;

/// Logs created (name, partitions), and whether log-0's change of options was acknowledged.
#[derive(Debug, Default)]
pub struct ManifestAcks {
    pub logs: Vec<(String, u32)>,
    pub options_changed: bool,
    pub tally: Tally,
}

/// The options log-0 is reopened with in the MANIFEST workload.
fn changed_log() -> LogOptions {
    small_log().with_compression(strata::Compression::Zstd { level: 1 })
}

impl Workload for Manifest {
    type Acks = ManifestAcks;

    fn name(&self) -> &'static str {
        "MANIFEST"
    }

    fn run(&self, disk: &Disk, acks: &mut ManifestAcks, between: &dyn Fn()) {
        let Some((store, log0)) =
            open_log(disk, (&mut acks.tally, between), "log-0", 1, small_log())
        else {
            return;
        };
        acks.logs.push(("log-0".into(), 1));
        for i in 1..6u32 {
            if disk.dead() {
                return;
            }
            if i == 3 {
                between();
                acks.tally.halfway = true;
            }
            let name = format!("log-{i}");
            match store.open_log(&name, 1 + i % 3, small_log()) {
                Ok(_) => acks.logs.push((name, 1 + i % 3)),
                Err(_) => acks.tally.error(),
            }
        }
        if !disk.dead() && log0.close_blocking().is_ok() {
            match store.open_log("log-0", 1, changed_log()) {
                Ok(_) => acks.options_changed = true,
                Err(_) => acks.tally.error(),
            }
        }
        let probe = |n| store.open_log(&format!("probe-{n}"), 1, small_log());
        acks.tally.probe_ok = !disk.dead() && (probe(0).is_ok() || probe(1).is_ok());
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &ManifestAcks) {
        let (disk, store) = open_image(root);
        let present: Vec<(String, u32)> = store
            .logs()
            .into_iter()
            .map(|l| (l.name, l.partitions))
            .collect();
        let compression = |name: &str| store.log_options(name).map(|o| o.compression);
        if acks.options_changed {
            assert_eq!(compression("log-0"), Some(changed_log().compression));
        }
        for log in &acks.logs {
            assert!(
                present.contains(log),
                "log {log:?} was created, then lost: {present:?}"
            );
            let options = compression(&log.0);
            let opened_with = [small_log().compression, changed_log().compression];
            assert!(
                options.is_some_and(|c| opened_with.contains(&c)),
                "log {log:?} records options it was never opened with: {options:?}"
            );
            store
                .open_log(&log.0, log.1, small_log())
                .expect("an acknowledged log opens");
        }
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &ManifestAcks) -> Outcome {
        acks.tally.outcome()
    }
}

// ---------------------------------------------------------------- recycled journal files

fn recycling_options() -> LogOptions {
    // Each round's appends overflow a 64 KiB journal file; a checkpoint then covers it, so the
    // next file the journal starts is that one, recycled.
    LogOptions::default()
        .with_segment_bytes(16 << 10)
        .with_journal_bytes(64 << 10)
}

/// Appends that fill journal files, with checkpoints between: every file after the second is a
/// recycled one (renamed, its header rewritten, its old frames left behind it). With `large`,
/// rounds are six appends, the sixth carrying that many records in one request: one that does
/// not fit the rest of the file starts the next file while the preparer may still be zeroing
/// space in the current one.
pub struct JournalRecycling {
    pub large: usize,
}

/// What the appends acknowledged.
#[derive(Debug, Default)]
pub struct RecyclingAcks {
    pub records: BTreeMap<i64, Bytes>,
    pub tally: Tally,
}

impl Workload for JournalRecycling {
    type Acks = RecyclingAcks;

    fn name(&self) -> &'static str {
        match self.large {
            0 | 1 => "journal recycling",
            _ => "journal recycling with large requests",
        }
    }

    fn run(&self, disk: &Disk, acks: &mut RecyclingAcks, between: &dyn Fn()) {
        if self.large > 1 {
            // Rounds slower than a wake-up, so the preparer (not the writer, inline) prepares
            // the space ahead even on a loaded machine: its operations are what is explored.
            disk.fs.set_sync_delay(std::time::Duration::from_millis(1));
        }
        let Some((store, log)) = open_log(
            disk,
            (&mut acks.tally, between),
            "recycled",
            1,
            recycling_options(),
        ) else {
            return;
        };
        // With large requests, six appends a round: five fill a little under half the file and
        // the large sixth does not fit the rest, so each round starts one new file, which the
        // round's checkpoint then covers while the preparer may still be zeroing its space.
        let rounds = AppendRounds {
            rounds: 5,
            per_round: if self.large > 1 { 6 } else { 12 },
            pad: 6 << 10,
            large: self.large,
        };
        rounds.run(
            disk,
            &log,
            (&mut acks.records, &mut acks.tally),
            between,
            || log.checkpoint_blocking().is_ok(),
        );
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &RecyclingAcks) {
        let (disk, store) = open_image(root);
        let log = store.open_log("recycled", 1, recycling_options()).unwrap();
        let records = assert_acknowledged(&log, acks.records.iter());
        for (i, offset) in records.keys().enumerate() {
            assert_eq!(*offset, i as i64, "offsets are dense from 0");
        }
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &RecyclingAcks) -> Outcome {
        acks.tally.outcome()
    }
}

// ---------------------------------------------------------------- an undone request

/// Waits until nothing writes through `disk` for a while (the journal preparer done).
fn settle(disk: &Disk) {
    let writes = || disk.fs.count(OpKinds::only(OpKind::Write));
    let mut seen = writes();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = writes();
        if now == seen {
            return;
        }
        seen = now;
    }
}

/// A fresh disk with a store and log `name` on it.
fn fresh_log(name: &str, partitions: u32, options: &LogOptions) -> (Disk, Store, Log) {
    let disk = Disk::new();
    let store = Store::open_with(&disk.root, disk.options()).expect("store");
    let log = store
        .open_log(name, partitions, options.clone())
        .expect("log");
    (disk, store, log)
}

/// Writes the crash image `mode` of `disk` (whose power is off) and opens log `name` on it.
fn reopen_image(
    disk: &Disk,
    mode: CrashMode,
    (name, partitions, options): (&str, u32, &LogOptions),
) -> (Disk, Store, Log) {
    let dir = super::harness::scratch();
    let image = dir.path().join("disk");
    disk.fs.write_crash_image(&image, mode).expect("image");
    let (disk, store) = open_image(&image);
    let log = store
        .open_log(name, partitions, options.clone())
        .unwrap_or_else(|e| panic!("image {mode:?}: the log does not open: {e}"));
    (disk, store, log)
}

/// A request whose second batch fails once its first was copied into partition 0's mapping is
/// undone there (zeroed in memory); the next append takes the same offset and is acknowledged;
/// then the power fails in each way the page may have reached the disk, the undone batch
/// included (written back before the undo, which itself never reached the disk). Reopened, the
/// offset holds the acknowledged record, never the failed request's.
pub fn an_undone_batch_never_takes_an_acknowledged_offset() {
    let options = LogOptions::default();
    let (disk, store, log) = fresh_log("undo", 2, &options);
    let rt = runtime();
    let first = Bytes::from_static(b"acknowledged, offset 0");
    let second = Bytes::from_static(b"acknowledged, offset 1");
    rt.block_on(log.append(0, vec![NewRecord::value(1, first.clone())]))
        .expect("first append");
    settle(&disk);
    // Write #0 from here is partition 0's batch, #1 partition 1's: that one fails.
    disk.fs.set_plan(FaultPlan::FailAt {
        n: 1,
        kinds: OpKinds::only(OpKind::Write),
    });
    let failed = rt.block_on(log.append_many(vec![
        (
            0,
            vec![NewRecord::value(2, Bytes::from_static(b"failed, p0"))],
        ),
        (
            1,
            vec![NewRecord::value(2, Bytes::from_static(b"failed, p1"))],
        ),
    ]));
    assert!(failed.is_err(), "the request fails: {failed:?}");
    disk.fs.set_plan(FaultPlan::None);
    let (offset, _) = rt
        .block_on(log.append(0, vec![NewRecord::value(3, second.clone())]))
        .expect("second append");
    assert_eq!(offset, 1, "the undone offset is taken again");
    disk.fs.cut_power();
    drop((log, store));
    for mode in [
        CrashMode::Overwritten,
        CrashMode::KeepAll,
        CrashMode::Strict,
    ] {
        let (disk, store, log) = reopen_image(&disk, mode, ("undo", 2, &options));
        let values: Vec<Bytes> = all_records(&log, 0)
            .into_iter()
            .filter_map(|r| r.value)
            .collect();
        assert_eq!(
            values,
            vec![first.clone(), second.clone()],
            "image {mode:?}"
        );
        assert!(all_records(&log, 1).is_empty(), "image {mode:?}");
        verify_clean(&disk, store);
    }
}

// ---------------------------------------------------------------- a failed roll

/// A roll whose new segment cannot be made (here the removal of a leftover file at its name
/// fails) leaves the old segment active; a small append still fits there and is acknowledged,
/// and the log closes cleanly (its checkpoint lets the journal go). After a power cut that keeps
/// only synced bytes the record must be there: the checkpoint synced the segment it lives in.
pub fn a_failed_roll_leaves_its_segment_checkpointed() {
    let options = LogOptions::default()
        .with_segment_bytes(16 << 10)
        .with_journal_bytes(64 << 10);
    let (disk, store, log) = fresh_log("rolled", 1, &options);
    let value = |n: usize, byte: u8| Bytes::from(vec![byte; n]);
    let mut acked = Vec::new();
    for byte in 1..=3u8 {
        let v = value(5000, byte);
        log.append_blocking(0, vec![NewRecord::value(1, v.clone())])
            .expect("fills the segment");
        acked.push(v);
    }
    settle(&disk);
    disk.fs.set_plan(FaultPlan::FailAt {
        n: 0,
        kinds: OpKinds::only(OpKind::Unlink),
    });
    let big = log.append_blocking(0, vec![NewRecord::value(1, value(6000, 9))]);
    assert!(big.is_err(), "the roll it needs fails: {big:?}");
    disk.fs.set_plan(FaultPlan::None);
    let small = value(100, 4);
    log.append_blocking(0, vec![NewRecord::value(1, small.clone())])
        .expect("a small append fits the old segment");
    acked.push(small);
    store.close_blocking().expect("a clean close");
    disk.fs.cut_power();
    drop((log, store));
    let (disk, store, log) = reopen_image(&disk, CrashMode::Strict, ("rolled", 1, &options));
    let summary =
        |values: &[Bytes]| -> Vec<(usize, u8)> { values.iter().map(|v| (v.len(), v[0])).collect() };
    let values: Vec<Bytes> = all_records(&log, 0)
        .into_iter()
        .filter_map(|r| r.value)
        .collect();
    assert_eq!(
        summary(&values),
        summary(&acked),
        "every acknowledged record (length, byte), in order"
    );
    assert_eq!(values, acked);
    verify_clean(&disk, store);
}

// ---------------------------------------------------------------- a late preparation

/// The journal preparer is held just before it writes the zeros of its first preparation in
/// journal file 0, while a request too large for the rest of file 0 starts file 1, a
/// checkpoint covers file 0, and appends fill file 1 and go on in file 2 (file 0 recycled, if
/// it was kept as the spare). Then the preparer runs: its zeros must not land on the frames
/// of acknowledged appends, whatever file they are in now.
pub fn a_late_preparation_never_zeroes_a_recycled_file() {
    let options = LogOptions::default()
        .with_segment_bytes(1 << 20)
        .with_journal_bytes(64 << 10);
    let (disk, store, log) = fresh_log("late", 1, &options);
    settle(&disk);
    disk.fs.hold_thread(Some(strata::fs::ThreadHold {
        thread: "strata-prep-".into(),
        before: 0,
        kinds: OpKinds::only(OpKind::Write),
        others: u64::MAX,
        cut_after: false,
    }));
    let mut acked = Vec::new();
    let mut append = |n: usize, byte: u8| {
        let value = Bytes::from(vec![byte; n]);
        let (offset, _) = log
            .append_blocking(0, vec![NewRecord::value(1, value.clone())])
            .expect("append");
        acked.push((offset, value));
    };
    append(6000, 1);
    let start = std::time::Instant::now();
    while !disk.fs.hold_report().reached {
        assert!(start.elapsed().as_secs() < 10, "the preparer never started");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    append(60_000, 2); // does not fit the rest of file 0: file 1 starts
    log.checkpoint_blocking().expect("file 0 is covered");
    for byte in 3..9 {
        append(6000, byte); // the first fills file 1; the rest go to file 2
    }
    // Let the preparer write and sync its zeros, and cut the power at once (before the log's
    // background checkpoint, 100 ms apart, makes the segment durable and the journal moot).
    let syncs = disk.fs.count(OpKinds::only(OpKind::Sync));
    disk.fs.hold_thread(None);
    while disk.fs.count(OpKinds::only(OpKind::Sync)) == syncs {
        assert!(start.elapsed().as_secs() < 20, "the preparer never went on");
        std::thread::yield_now();
    }
    disk.fs.cut_power();
    drop((log, store));
    for mode in [CrashMode::Strict, CrashMode::KeepAll] {
        let (disk, store, log) = reopen_image(&disk, mode, ("late", 1, &options));
        let records = all_records(&log, 0);
        for (offset, value) in &acked {
            let found = records.get(*offset as usize).and_then(|r| r.value.as_ref());
            assert!(
                found == Some(value),
                "image {mode:?}: acknowledged offset {offset} lost"
            );
        }
        verify_clean(&disk, store);
    }
}

// ---------------------------------------------------------------- undone requests

/// One writer alternating single appends to partition 0 with requests to partitions 0 and 1,
/// so that a failed operation often undoes a batch already copied into partition 0 and the next
/// append takes its offset again; the halfway mark after step 6.
pub struct UndoneAppends;

impl Workload for UndoneAppends {
    type Acks = AppendAcks;

    fn name(&self) -> &'static str {
        "undone appends"
    }

    fn run(&self, disk: &Disk, acks: &mut AppendAcks, between: &dyn Fn()) {
        let options = LogOptions::default().with_segment_bytes(64 << 10);
        let Some((store, log)) = open_log(disk, (&mut acks.tally, between), "undone", 2, options)
        else {
            return;
        };
        for step in 0..12u64 {
            if disk.dead() {
                return;
            }
            if step == 6 {
                between();
                acks.tally.halfway = true;
            }
            let record = |p: u32| {
                let value = payload(step, p as usize, 0, 1, 200);
                (p, vec![NewRecord::value(1, value)])
            };
            let items = match step % 2 {
                0 => vec![record(0)],
                _ => vec![record(0), record(1)],
            };
            let values: Vec<(u32, Bytes)> = items
                .iter()
                .map(|(p, r)| (*p, r[0].value.clone().unwrap_or_default()))
                .collect();
            match log.append_many_blocking(items) {
                Ok(ranges) => {
                    for ((p, value), (first, _)) in values.into_iter().zip(ranges) {
                        acks.records.insert((p, first), value);
                    }
                }
                Err(_) => acks.tally.error(),
            }
        }
        acks.tally.probe_ok = !disk.dead() && runtime().block_on(probe(&log, 2));
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &AppendAcks) {
        let (disk, store) = open_image(root);
        let options = LogOptions::default().with_segment_bytes(64 << 10);
        let log = store.open_log("undone", 2, options).expect("the log opens");
        for p in 0..2 {
            let records = all_records(&log, p);
            for ((_, offset), value) in acks.records.range((p, 0)..(p + 1, 0)) {
                let found = records.get(*offset as usize).and_then(|r| r.value.as_ref());
                assert!(
                    found == Some(value),
                    "partition {p}: acknowledged offset {offset} lost"
                );
            }
        }
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &AppendAcks) -> Outcome {
        acks.tally.outcome()
    }
}
