//! Backup and restore under power cuts: a store with a `Sync` event log and a group engine
//! (with cold objects) is backed up while it holds acknowledged data, written to more, and the
//! backup restored. After any cut the source keeps every acknowledged record, and a backup or
//! restored directory, wherever one exists under its final name, is a whole store holding
//! everything acknowledged before the backup began (an acknowledged backup or restore must
//! exist). A failed backup or restore is retried into a new directory, as a user would.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use strata::store::backup::restore_with;
use strata::{Durability, LogOptions, NewRecord, Store};
use ursula_runtime::{
    AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine, ReadStreamRequest,
};
use ursula_shard::BucketStreamId;

use super::group_paths::{open_engine, placement};
use super::harness::{Disk, Outcome, Workload};
use super::log_paths::{all_records, open_with_retries, runtime, Tally};

/// The workload.
pub struct Backup;

const PARTITIONS: u32 = 2;
const LOG: &str = "events";
const STEPS: usize = 10;

/// What was acknowledged.
#[derive(Debug, Default)]
pub struct BackupAcks {
    /// Values acknowledged, per partition, in order.
    pub acked: Vec<Vec<String>>,
    /// The group stream's acknowledged bytes (appends stop after a failed one).
    pub stream: Stream,
    /// A failed group append whose bytes may or may not be there.
    pub stream_maybe: Option<Stream>,
    /// Per backup attempt: its directory name, and the acknowledged counts when it began
    /// (values per partition, stream bytes); `done` once it returned success.
    pub backups: Vec<Attempt>,
    /// Per restore attempt (of the first acknowledged backup).
    pub restores: Vec<Attempt>,
    pub tally: Tally,
}

/// Stream bytes (printed as their length).
#[derive(Default, Clone)]
pub struct Stream(pub Vec<u8>);

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

/// One backup or restore attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub dir: String,
    pub records: Vec<usize>,
    pub stream: usize,
    pub done: bool,
}

fn log_options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(4096)
        .with_journal_bytes(64 << 10)
        .with_durability(Durability::Sync)
}

fn stream_id() -> BucketStreamId {
    BucketStreamId::new("tenant", "orders")
}

fn value(partition: u32, step: usize) -> String {
    format!("p{partition}-s{step}-{}", "v".repeat(300))
}

fn payload(step: usize) -> Vec<u8> {
    (0..700).map(|j| (step * 13 + j) as u8).collect()
}

fn open(
    disk: &Disk,
    dir: &Path,
) -> Result<(Store, strata::Log, strata::group::DiskGroupEngine), String> {
    let store = Store::open_with(dir, disk.options()).map_err(|e| e.to_string())?;
    let log = store
        .open_log(LOG, PARTITIONS, log_options())
        .map_err(|e| e.to_string())?;
    let engine = open_engine(&store).map_err(|e| e.to_string())?;
    Ok((store, log, engine))
}

impl BackupAcks {
    fn attempt(&self, dir: &str) -> Attempt {
        Attempt {
            dir: dir.to_string(),
            records: self.acked.iter().map(Vec::len).collect(),
            stream: self.stream.0.len(),
            done: false,
        }
    }
}

impl Workload for Backup {
    type Acks = BackupAcks;

    fn name(&self) -> &'static str {
        "backup and restore"
    }

    fn run(&self, disk: &Disk, acks: &mut BackupAcks, between: &dyn Fn()) {
        acks.acked = vec![Vec::new(); PARTITIONS as usize];
        let root = disk.root.join("store");
        let Some((store, log, mut engine)) =
            open_with_retries(disk, &mut acks.tally, between, || open(disk, &root))
        else {
            return;
        };
        let rt = runtime();
        let mut create = CreateStreamRequest::new(stream_id(), "application/octet-stream");
        create.now_ms = 1;
        let created =
            rt.block_on(engine.create_stream(create, placement(), ColdWriteAdmission::default()));
        if let Err(e) = created {
            acks.tally.failed(e);
            acks.stream_maybe = Some(Stream::default());
        }
        for step in 0..STEPS {
            if disk.dead() {
                return;
            }
            if step == STEPS / 2 {
                between();
                acks.tally.halfway = true;
            }
            for partition in 0..PARTITIONS {
                let v = value(partition, step);
                let record = NewRecord::value(2, Bytes::from(v.clone()));
                match log.append_blocking(partition, vec![record]) {
                    Ok(_) => acks.acked[partition as usize].push(v),
                    Err(e) => acks.tally.failed(e),
                }
            }
            rt.block_on(group_step(&mut engine, step, acks));
            match step {
                3 => self.back_up(disk, &store, acks),
                7 => self.restore(disk, acks),
                _ => {}
            }
        }
        let probe = log.append_blocking(0, vec![NewRecord::value(3, Bytes::from_static(b"probe"))]);
        let probe = probe.is_ok()
            || log
                .append_blocking(0, vec![NewRecord::value(3, Bytes::from_static(b"probe"))])
                .is_ok();
        acks.tally.probe_ok = probe && !disk.dead();
        drop(engine);
        if let Err(e) = store.close_blocking() {
            acks.tally.failed(e);
        }
    }

    fn check(&self, root: &Path, acks: &BackupAcks) {
        let disk = Disk::from_image(root);
        let everything = Attempt {
            dir: "store".into(),
            records: acks.acked.iter().map(Vec::len).collect(),
            stream: acks.stream.0.len(),
            done: true,
        };
        check_store(&disk, &everything, acks);
        for attempt in acks.backups.iter().chain(&acks.restores) {
            let dir = disk.root.join(&attempt.dir);
            assert!(
                dir.exists() || !attempt.done,
                "acknowledged {} is missing",
                attempt.dir
            );
            if dir.exists() {
                check_store(&disk, attempt, acks);
            }
        }
    }

    fn outcome(&self, acks: &BackupAcks) -> Outcome {
        acks.tally.outcome()
    }

    fn messages(&self, acks: &BackupAcks) -> Vec<String> {
        acks.tally.messages.clone()
    }
}

/// One group append (and a cold flush at step 2), unless an earlier one failed.
async fn group_step(
    engine: &mut strata::group::DiskGroupEngine,
    step: usize,
    acks: &mut BackupAcks,
) {
    if acks.stream_maybe.is_some() {
        return;
    }
    let bytes = payload(step);
    let mut r = AppendRequest::from_bytes(stream_id(), Bytes::from(bytes.clone()));
    r.content_type = "application/octet-stream".into();
    r.now_ms = 2;
    match engine
        .append(r, placement(), ColdWriteAdmission::default())
        .await
    {
        Ok(_) => acks.stream.0.extend_from_slice(&bytes),
        Err(e) => {
            acks.tally.failed(e);
            acks.stream_maybe = Some(Stream(bytes));
            return;
        }
    }
    if step == 2 {
        if let Err(e) = engine
            .flush_stream_cold(&stream_id(), 1000, placement())
            .await
        {
            acks.tally.failed(e);
        }
    }
}

impl Backup {
    /// Backs the store up into `backup`, and once more into `backup-2` if that failed.
    fn back_up(&self, disk: &Disk, store: &Store, acks: &mut BackupAcks) {
        for name in ["backup", "backup-2"] {
            if disk.dead() {
                return;
            }
            let mut attempt = acks.attempt(name);
            let result = store.backup(disk.root.join(name));
            attempt.done = result.is_ok();
            acks.backups.push(attempt);
            match result {
                Ok(_) => return,
                Err(e) => acks.tally.failed(e),
            }
        }
    }

    /// Restores the acknowledged backup into `restored` (`restored-2` after a failure).
    fn restore(&self, disk: &Disk, acks: &mut BackupAcks) {
        let Some(from) = acks.backups.iter().find(|a| a.done).cloned() else {
            return;
        };
        for name in ["restored", "restored-2"] {
            if disk.dead() {
                return;
            }
            let result = restore_with(
                &*disk.fs.shared(),
                &disk.root.join(&from.dir),
                &disk.root.join(name),
            );
            acks.restores.push(Attempt {
                dir: name.into(),
                done: result.is_ok(),
                ..from.clone()
            });
            match result {
                Ok(_) => return,
                Err(e) => acks.tally.failed(e),
            }
        }
    }
}

/// Checks the store in `disk.root/attempt.dir` holds at least what `attempt` counts, in order,
/// with nothing but acknowledged (or in-flight) data, and verifies clean.
fn check_store(disk: &Disk, attempt: &Attempt, acks: &BackupAcks) {
    let dir: PathBuf = disk.root.join(&attempt.dir);
    let (store, log, mut engine) =
        open(disk, &dir).unwrap_or_else(|e| panic!("{} does not open: {e}", attempt.dir));
    for partition in 0..PARTITIONS {
        let found: Vec<String> = all_records(&log, partition)
            .into_iter()
            .filter_map(|r| r.value.map(|v| String::from_utf8_lossy(&v).into_owned()))
            .filter(|v| v != "probe")
            .collect();
        let acked = &acks.acked[partition as usize];
        let need = attempt.records[partition as usize];
        let mut rest = acked.iter();
        let at = |v: &String| v.split('-').nth(1).map(String::from);
        // Every acknowledged value up to `need` is there, in order; any other value is one
        // whose append failed (the same step's value).
        for v in &found {
            if acked.contains(v) {
                assert!(
                    rest.any(|a| a == v),
                    "{}: {:?} out of order",
                    attempt.dir,
                    at(v)
                );
            }
        }
        for v in &acked[..need] {
            assert!(
                found.contains(v),
                "{}: acknowledged {:?} lost",
                attempt.dir,
                at(v)
            );
        }
    }
    let rt = runtime();
    let read = rt.block_on(engine.read_stream(
        ReadStreamRequest {
            stream_id: stream_id(),
            offset: 0,
            max_len: 1 << 24,
            now_ms: 3,
            record: None,
            max_records: None,
        },
        placement(),
    ));
    let bytes = read.map(|r| r.payload.to_vec()).unwrap_or_default();
    let mut possible = acks.stream.0.clone();
    possible.extend(acks.stream_maybe.clone().unwrap_or_default().0);
    assert!(
        bytes.len() >= attempt.stream && possible.starts_with(&bytes),
        "{}: stream holds {} bytes, {} acknowledged before",
        attempt.dir,
        bytes.len(),
        attempt.stream
    );
    let report = rt.block_on(engine.verify());
    assert!(
        report.is_clean(),
        "{}: group verify: {:?}",
        attempt.dir,
        report.findings
    );
    drop(engine);
    store.close_blocking().expect("a clean close");
}
