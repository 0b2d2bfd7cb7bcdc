//! The `strata` command line: demo, bench, inspect, verify, dump, read, tail, compact.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use strata::event_log::{DiskEventLog, KeyedEvent, MetadataEventLog, PartitionStart};
use strata::log::CompactionPolicy;
use strata::tools::live::LivePartition;
use strata::tools::read::ReadFrom;
use strata::{LogOptions, Store, StoreError};

/// Writes one line to stdout (see [`emit`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::emit(format_args!($($arg)*))
    };
}

/// Writes one line to stdout. A closed stdout (`strata inspect DIR | head`) ends the command
/// quietly; any other output error ends it with a message naming the output, not the store.
fn emit(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        output_failed(&e);
    }
}

mod positions;
mod records;

/// Ends the process after the output failed (see [`emit`]).
fn output_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("strata: writing the output: {e}");
    std::process::exit(1);
}

/// A tool's result as the command line reports it (output failures end the process).
fn tool_result(result: Result<(), StoreError>) -> Result<(), String> {
    result.map_err(tool_error)
}

/// A tool's error as the command line reports it (an output failure ends the process).
fn tool_error(e: StoreError) -> String {
    match e {
        StoreError::Output(e) => output_failed(&e),
        e => e.to_string(),
    }
}

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Strata: an embedded, durable, partitioned log store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Publish, subscribe, compact and reopen a store, reporting throughput.
    Demo {
        /// Store directory (created if missing).
        #[arg(long, default_value = "strata-data")]
        dir: PathBuf,
        /// Keyed events to publish.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Concurrent publishers.
        #[arg(long, default_value_t = 64)]
        publishers: usize,
    },
    /// Run Strata and RocksDB side by side on the same appends and reads; print ratios.
    Bench {
        /// Scratch directory (a temporary one by default).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Records of each 64-writer Sync workload (the one-writer one appends a tenth, the
        /// buffered ones ten times as many of 100 B and twice as many of 1 KiB, group appends
        /// a twentieth).
        #[arg(long, default_value_t = 100_000)]
        records: usize,
        /// Run only the workloads whose label contains this text (`sync`, `1024 B`, `group`).
        #[arg(long)]
        only: Option<String>,
        /// Runs of each log append workload per engine (alternating); the faster counts.
        #[arg(long, default_value_t = 3)]
        passes: usize,
    },
    /// Summarize the logs, partitions and segments of a store (read-only).
    Inspect {
        /// Store directory.
        dir: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check every CRC of a store, and every group's hot bytes and cold objects; exits non-zero
    /// when any data is corrupt.
    Verify {
        /// Store directory.
        dir: PathBuf,
        /// Cold store of the groups (`file:///dir` or `s3://bucket?endpoint=...`); default
        /// `<dir>/cold`.
        #[arg(long)]
        cold: Option<String>,
        /// Print one JSON object instead of text (the exit code is the same).
        #[arg(long)]
        json: bool,
    },
    /// Print every batch and record of one segment file.
    Dump {
        /// Segment file (`.seg`).
        segment: PathBuf,
    },
    /// Print records of one partition of a log as JSON lines, from an offset or a time (reads
    /// without the store's lock and writes nothing, so an application may hold the store open).
    Read {
        /// Store directory.
        dir: PathBuf,
        /// Log name.
        log: String,
        /// Partition.
        #[arg(long, default_value_t = 0)]
        partition: u32,
        /// First offset (default: the low-water mark).
        #[arg(long, conflicts_with = "time")]
        from: Option<i64>,
        /// Start at the first record whose timestamp (ms since the Unix epoch) is at or after this.
        #[arg(long)]
        time: Option<i64>,
        /// Most records to print.
        #[arg(long, default_value_t = 100)]
        max: u64,
    },
    /// Print the last records of one partition of a log as JSON lines, and with `--follow`
    /// every record appended after them (without the store's lock, like `read`).
    Tail {
        /// Store directory.
        dir: PathBuf,
        /// Log name.
        log: String,
        /// Partition.
        #[arg(long, default_value_t = 0)]
        partition: u32,
        /// How many of the last records to print.
        #[arg(long, default_value_t = 10)]
        last: u64,
        /// Keep printing records as they are appended, until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Write a consistent copy of a store (its logs, a checkpoint of every group's state, the
    /// local cold store) into a new directory, which `strata verify` and `strata restore` take.
    /// Takes the store's lock; an application backs up an open store with `Store::backup`.
    Backup {
        /// Store directory.
        dir: PathBuf,
        /// Backup directory to create (must not exist).
        dest: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Restore a backup into a new store directory.
    Restore {
        /// Backup directory (`strata backup` or `Store::backup` wrote it).
        backup: PathBuf,
        /// Store directory to create (must not exist).
        dir: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run one keyed compaction pass over a log of a store.
    Compact {
        /// Store directory.
        dir: PathBuf,
        /// Log name.
        log: String,
    },
    /// Consumer positions: list them with their lag (beside a running application), reset or
    /// delete a consumer's (these take the store's lock).
    Positions {
        #[command(subcommand)]
        command: positions::PositionsCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            dir,
            events,
            publishers,
        } => runtime().and_then(|rt| rt.block_on(demo(dir, events, publishers))),
        Command::Bench {
            dir,
            records,
            only,
            passes,
        } => bench(dir, records, only.as_deref(), passes),
        Command::Inspect { dir, json: false } => require_store(&dir)
            .and_then(|()| tool_result(strata::tools::inspect_store(&dir, &mut std::io::stdout()))),
        Command::Inspect { dir, json: true } => inspect_json(&dir),
        Command::Verify { dir, cold, json } => verify(&dir, cold.as_deref(), json),
        Command::Backup { dir, dest, json } => backup(&dir, &dest, json),
        Command::Restore { backup, dir, json } => restore(&backup, &dir, json),
        Command::Dump { segment } => tool_result(strata::tools::dump_segment(
            &segment,
            &mut std::io::stdout(),
        )),
        Command::Read {
            dir,
            log,
            partition,
            from,
            time,
            max,
        } => {
            let start = match (from, time) {
                (_, Some(ms)) => ReadFrom::Time(ms),
                (offset, None) => ReadFrom::Offset(offset.unwrap_or(0)),
            };
            read(&dir, &log, partition, start, max)
        }
        Command::Tail {
            dir,
            log,
            partition,
            last,
            follow,
        } => tail(&dir, &log, partition, last, follow),
        Command::Compact { dir, log } => compact(&dir, &log),
        Command::Positions { command } => positions::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: {e}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn inspect_json(dir: &std::path::Path) -> Result<(), String> {
    require_store(dir)?;
    let summary = strata::tools::summarize_store(dir).map_err(|e| e.to_string())?;
    let logs: Vec<_> = summary
        .logs
        .iter()
        .map(|log| {
            let partitions: Vec<_> = log
                .partitions
                .iter()
                .map(|p| {
                    p.as_ref().map(|p| {
                        let segments: Vec<_> = p
                            .segments
                            .iter()
                            .map(|s| {
                                serde_json::json!({"base_offset": s.base_offset, "bytes": s.bytes,
                                    "last_offset": s.last_offset, "indexed": s.indexed})
                            })
                            .collect();
                        serde_json::json!({"low": p.low, "high": p.high, "bytes": p.bytes, "segments": segments})
                    })
                })
                .collect();
            let options = log.options.as_ref().map(strata::tools::inspect::describe_options);
            serde_json::json!({"name": log.name, "options": options, "partitions": partitions})
        })
        .collect();
    let root = dir.display().to_string();
    say!(
        "{}",
        serde_json::json!({"store": root, "id": summary.store_id, "logs": logs})
    );
    Ok(())
}

fn verify(dir: &std::path::Path, cold: Option<&str>, json: bool) -> Result<(), String> {
    require_store(dir)?;
    let report = strata::tools::verify_store(dir).map_err(|e| e.to_string())?;
    let groups = runtime()?.block_on(verify_groups(dir, cold))?;
    let corrupt = report.findings.iter().filter(|f| f.corrupt).count()
        + groups.iter().map(|(_, g)| g.findings.len()).sum::<usize>();
    if json {
        say!("{}", verify_json(&report, &groups, corrupt));
    } else {
        print_verify(&report, &groups, corrupt);
    }
    match corrupt {
        0 => Ok(()),
        n => Err(format!("{n} corrupt structure(s) found")),
    }
}

fn print_verify(
    report: &strata::tools::VerifyReport,
    groups: &[(String, strata::group::GroupVerifyReport)],
    corrupt: usize,
) {
    say!(
        "verified {} segment(s): {} batch(es), {} record(s)",
        report.segments,
        report.batches,
        report.records
    );
    for f in &report.findings {
        let kind = if f.corrupt { "CORRUPT" } else { "note" };
        say!(
            "{kind}: {} at byte {}: {}",
            f.file.display(),
            f.offset,
            f.problem
        );
    }
    for (name, g) in groups {
        say!(
            "verified group {name}: {} stream(s), {} hot byte(s), {} cold object(s)",
            g.streams,
            g.hot_bytes,
            g.cold_objects
        );
        for f in &g.findings {
            say!(
                "CORRUPT: group {name}, stream {} at {}: {}",
                f.stream,
                f.at,
                f.problem
            );
        }
    }
    if corrupt == 0 {
        say!("ok");
    }
}

fn verify_json(
    report: &strata::tools::VerifyReport,
    groups: &[(String, strata::group::GroupVerifyReport)],
    corrupt: usize,
) -> serde_json::Value {
    let findings: Vec<_> = report
        .findings
        .iter()
        .map(|f| {
            serde_json::json!({"file": f.file.display().to_string(), "offset": f.offset,
                "problem": f.problem, "corrupt": f.corrupt})
        })
        .collect();
    let groups: Vec<_> = groups
        .iter()
        .map(|(name, g)| {
            let findings: Vec<_> = g
                .findings
                .iter()
                .map(|f| serde_json::json!({"stream": f.stream, "at": f.at, "problem": f.problem}))
                .collect();
            serde_json::json!({"name": name, "streams": g.streams, "hot_bytes": g.hot_bytes,
                "cold_objects": g.cold_objects, "findings": findings})
        })
        .collect();
    serde_json::json!({"segments": report.segments, "batches": report.batches,
        "records": report.records, "findings": findings, "groups": groups,
        "corrupt": corrupt, "ok": corrupt == 0})
}

/// Verifies every group under `<dir>/groups`; returns each group's report.
async fn verify_groups(
    dir: &std::path::Path,
    cold: Option<&str>,
) -> Result<Vec<(String, strata::group::GroupVerifyReport)>, String> {
    let store = open_store(dir)?;
    let mut reports = Vec::new();
    for (name, engine) in open_groups(&store, cold)? {
        reports.push((name, engine.verify().await));
    }
    Ok(reports)
}

/// Opens every group engine of the store (each has a payload log in the MANIFEST), with the
/// cold store `cold` (a URL) or `<store>/cold`.
fn open_groups(
    store: &Store,
    cold: Option<&str>,
) -> Result<Vec<(String, strata::group::DiskGroupEngine)>, String> {
    use strata::cold::ColdStore;
    use strata::group::{DiskGroupEngine, GroupOptions};
    let names = DiskGroupEngine::group_names(store).map_err(|e| e.to_string())?;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let cold_store = match cold {
        Some(url) => ColdStore::from_url(url),
        None => ColdStore::local(&store.root().join("cold")),
    }
    .map_err(|e| e.to_string())?;
    names
        .into_iter()
        .map(|name| {
            DiskGroupEngine::open(store, &name, cold_store.clone(), GroupOptions::default())
                .map(|engine| (name.clone(), engine))
                .map_err(|e| format!("group {name}: {e}"))
        })
        .collect()
}

/// `strata backup`: opens the store and writes the backup.
fn backup(dir: &Path, dest: &Path, json: bool) -> Result<(), String> {
    let store = open_store(dir)?;
    let report = store.backup(dest).map_err(|e| e.to_string())?;
    print_copy("backed up", dir, dest, &report, json);
    Ok(())
}

/// `strata restore`.
fn restore(backup: &Path, dir: &Path, json: bool) -> Result<(), String> {
    let report = strata::store::backup::restore(backup, dir).map_err(|e| e.to_string())?;
    print_copy("restored", backup, dir, &report, json);
    Ok(())
}

fn print_copy(
    what: &str,
    from: &Path,
    to: &Path,
    r: &strata::store::backup::BackupReport,
    json: bool,
) {
    if json {
        say!(
            "{}",
            serde_json::json!({"from": from, "to": to, "logs": r.logs, "groups": r.groups,
                "files": r.files, "bytes": r.bytes})
        );
    } else {
        say!(
            "{what} {} to {}: {} log(s), {} group(s), {} file(s), {} byte(s) (group checkpoints not counted)",
            from.display(),
            to.display(),
            r.logs,
            r.groups,
            r.files,
            r.bytes
        );
    }
}

/// Opens the existing log `name` of the store in `dir`.
/// Refuses a directory that is not a Strata store (no MANIFEST): a tool must never turn an empty
/// or mistyped directory into one.
fn require_store(dir: &Path) -> Result<(), String> {
    if dir.join("MANIFEST").is_file() {
        Ok(())
    } else {
        Err(format!(
            "{}: not a Strata store (no MANIFEST); nothing was changed",
            dir.display()
        ))
    }
}

/// Opens the store in `dir`, which must be one (a tool never turns a directory into a store).
fn open_store(dir: &std::path::Path) -> Result<Store, String> {
    require_store(dir)?;
    Store::open(dir).map_err(|e| match e {
        StoreError::Locked { .. } => format!(
            "{e}: this command needs the store to itself; `read`, `tail`, `inspect` and \
             `positions list` run beside the application that holds it"
        ),
        e => e.to_string(),
    })
}

/// Opens log `name` of the store in `dir` as the MANIFEST records it (partition count and
/// options), recording nothing.
fn open_existing(dir: &std::path::Path, name: &str) -> Result<(Store, strata::Log), String> {
    let store = open_store(dir)?;
    if !store.logs().iter().any(|l| l.name == name) {
        return Err(format!("the store has no log {name:?}"));
    }
    let log = store.open_recorded_log(name).map_err(|e| e.to_string())?;
    Ok((store, log))
}

fn read(
    dir: &std::path::Path,
    name: &str,
    partition: u32,
    from: ReadFrom,
    max: u64,
) -> Result<(), String> {
    require_store(dir)?;
    let part = LivePartition::open(dir, name, partition).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    let written = records::write_records(&part, partition, from, max, &mut out);
    tool_result(written.map(drop))
}

/// How often `tail --follow` looks for new records.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

fn tail(dir: &Path, name: &str, partition: u32, last: u64, follow: bool) -> Result<(), String> {
    require_store(dir)?;
    let part = LivePartition::open(dir, name, partition).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    let write = |from, max, out: &mut std::io::StdoutLock<'_>| {
        use std::io::Write;
        let (_, next) =
            records::write_records(&part, partition, from, max, out).map_err(tool_error)?;
        out.flush().map_err(|e| tool_error(StoreError::Output(e)))?;
        Ok::<i64, String>(next)
    };
    let mut next = write(ReadFrom::Last(last), last, &mut out)?;
    if !follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(FOLLOW_POLL);
        next = write(ReadFrom::Offset(next), u64::MAX, &mut out)?;
    }
}

fn compact(dir: &std::path::Path, name: &str) -> Result<(), String> {
    let (store, log) = open_existing(dir, name)?;
    if store.log_options(name).is_none() {
        return Err(format!(
            "log {name:?} has no recorded options (not opened since a version that did not \
             record them): compaction would run with defaults (its tombstone retention, its \
             compression); open it once from its application, then compact; nothing was changed"
        ));
    }
    let report = log
        .compact_blocking(strata::now_ms())
        .map_err(|e| e.to_string())?;
    say!(
        "compacted {name}: {} record(s) removed, {} segment(s) rewritten, {} removed, {} -> {} bytes",
        report.records_removed, report.segments_rewritten, report.segments_removed, report.bytes_before, report.bytes_after
    );
    log.close_blocking().map_err(|e| e.to_string())
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({per_sec})")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

async fn demo(dir: PathBuf, events: usize, publishers: usize) -> Result<(), String> {
    let err = |e: StoreError| e.to_string();
    let merr = |e: strata::event_log::MetadataLogError| e.to_string();
    const PARTITIONS: u32 = 8;
    const KEYS: usize = 1000;
    let options = LogOptions::default()
        .with_segment_bytes(1 << 20)
        .with_compaction(
            CompactionPolicy::default()
                .with_enabled(true)
                .with_delete_retention(Duration::ZERO),
        );
    say!("strata demo: store at {}", dir.display());
    let store = Store::open(&dir).map_err(err)?;
    let log = store
        .open_log("demo", PARTITIONS, options.clone())
        .map_err(err)?;
    let events_log = Arc::new(DiskEventLog::new(log.clone()));
    let before = events_log.high_water_marks().await.map_err(merr)?;
    say!(
        "opened log \"demo\" with {PARTITIONS} partitions; {} record(s) already stored",
        before.iter().sum::<i64>()
    );

    // A subscriber that starts at the current end and counts what it is delivered.
    let starts = before
        .iter()
        .enumerate()
        .map(|(p, &h)| PartitionStart {
            partition: p as i32,
            start_offset: h,
        })
        .collect();
    let (mut stream, _handle) = events_log.subscribe(starts);
    let delivered = Arc::new(AtomicU64::new(0));
    let counter = delivered.clone();
    let expected = events as u64;
    let subscriber = tokio::spawn(async move {
        while counter.load(Ordering::Relaxed) < expected {
            if stream.next().await.is_none() {
                break;
            }
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });

    let progress = bar(expected, "publish");
    let started = Instant::now();
    let per = events.div_ceil(publishers.max(1));
    let mut tasks = Vec::new();
    for w in 0..publishers.max(1) {
        let log = events_log.clone();
        let progress = progress.clone();
        let count = per.min(events.saturating_sub(w * per));
        tasks.push(tokio::spawn(async move {
            for i in 0..count {
                let n = w * per + i;
                let key = Bytes::from(format!("key-{:04}", n % KEYS));
                let value = Bytes::from(format!("{{\"event\":{n},\"writer\":{w}}}"));
                let partition = (n % KEYS) as i32 % PARTITIONS as i32;
                log.publish_keyed(partition, key, Some(value)).await?;
                progress.inc(1);
            }
            Ok::<(), strata::event_log::MetadataLogError>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())?.map_err(merr)?;
    }
    let publish_time = started.elapsed();
    progress.finish();
    say!(
        "published {events} keyed events with {publishers} publishers in {:.2?}: {:.0} events/s, each durable (fdatasync, group commit)",
        publish_time,
        events as f64 / publish_time.as_secs_f64().max(1e-9)
    );

    // A keyed group: one durability round trip for records on every partition.
    let group: Vec<KeyedEvent> = (0..PARTITIONS as i32)
        .map(|p| KeyedEvent {
            partition: p,
            key: Bytes::from(format!("group-{p}")),
            event: None,
        })
        .collect();
    let offsets = events_log.publish_keyed_group(group).await.map_err(merr)?;
    say!(
        "published a group of {} tombstones in one round trip at offsets {offsets:?}",
        offsets.len()
    );

    tokio::time::timeout(Duration::from_secs(60), subscriber)
        .await
        .map_err(|_| "the subscriber did not catch up within 60 s".to_string())?
        .map_err(|e| e.to_string())?;
    say!(
        "subscriber received {} of {events} events, replayed live in publish order",
        delivered.load(Ordering::Relaxed)
    );

    let spinner = ProgressBar::new_spinner();
    spinner.set_message("compacting");
    spinner.enable_steady_tick(Duration::from_millis(100));
    let compaction_started = Instant::now();
    let report = log.compact(strata::now_ms()).await.map_err(err)?;
    spinner.finish_and_clear();
    say!(
        "compaction in {:.2?}: removed {} superseded record(s), {} -> {} bytes in the cleaned segments",
        compaction_started.elapsed(),
        report.records_removed,
        report.bytes_before,
        report.bytes_after
    );

    let highs = events_log.high_water_marks().await.map_err(merr)?;
    let lows = events_log.low_water_marks().await.map_err(merr)?;
    let mut visited = 0usize;
    let read_started = Instant::now();
    for p in 0..PARTITIONS as i32 {
        let mut visit = |_r| {
            visited += 1;
            Ok(())
        };
        events_log
            .visit_range(p, lows[p as usize], highs[p as usize], &mut visit)
            .await
            .map_err(merr)?;
    }
    say!(
        "visit_range over every partition: {visited} retained record(s) in {:.2?} (at most one 1 MiB page in memory)",
        read_started.elapsed()
    );

    events_log.close().await.map_err(merr)?;
    drop(events_log);
    drop(log);
    drop(store);
    let store = Store::open(&dir).map_err(err)?;
    let log = store.open_log("demo", PARTITIONS, options).map_err(err)?;
    let reopened: Vec<i64> = (0..PARTITIONS)
        .map(|p| log.high_water_mark(p))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    if reopened != highs {
        return Err(format!(
            "after reopen the high-water marks are {reopened:?}, expected {highs:?}"
        ));
    }
    say!("reopened the store: high-water marks {reopened:?} survived");
    log.close().await.map_err(err)?;
    demo_group(&store, events).await?;
    demo_runtime().await
}

/// The group engine as ursula runs it: a thread-per-core `ShardRuntime` with
/// `DiskGroupEngineFactory` (8 raft groups, 16 clients appending), beside ursula's in-memory
/// engine, in a scratch store removed afterwards.
async fn demo_runtime() -> Result<(), String> {
    let scratch = tempfile_dir()?;
    let run = strata::tools::bench::shard_runtime(&scratch, 8, 16, 50).await;
    let _ = std::fs::remove_dir_all(&scratch);
    let c = run?;
    let (p50, p99) = percentiles(&c.strata.latencies);
    say!(
        "ShardRuntime (thread-per-core, {} cores, {} raft groups, {} clients): {} durable 1 KiB appends at {:.0}/s (p50 {p50:.2?}, p99 {p99:.2?}), every byte read back; ursula's in-memory engine {:.0}/s",
        strata::tools::bench::RUNTIME_CORES,
        c.groups,
        c.clients,
        c.strata.latencies.len(),
        c.strata.rate(),
        c.in_memory.rate()
    );
    Ok(())
}

/// The GroupEngine part of the demo: a stream in RocksDB-backed group state, its bytes in
/// segments, flushed to the local cold store, read back across both tiers, checkpointed, retained
/// and garbage-collected.
async fn demo_group(store: &Store, appends: usize) -> Result<(), String> {
    use strata::group::DiskGroupEngine;
    use ursula_runtime::{
        AdvanceRetentionRequest, AppendBatchRequest, AppendRequest, ColdWriteAdmission,
        CreateStreamRequest, GroupEngine, HeadStreamRequest, PublishSnapshotRequest,
        ReadStreamRequest,
    };
    use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};
    use ursula_stream::ProducerRequest;
    let e = |e: ursula_runtime::GroupEngineError| e.to_string();
    let p = ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    };
    let none = ColdWriteAdmission::default();
    let ct = "application/octet-stream";
    let mut engine = DiskGroupEngine::open_local(store, "demo").map_err(|e| e.to_string())?;
    let id = BucketStreamId::new("demo-tenant", "orders");
    let now = strata::now_ms() as u64;
    let mut create = CreateStreamRequest::new(id.clone(), ct);
    create.now_ms = now;
    let created = engine.create_stream(create, p, none).await.map_err(e)?;
    say!(
        "\ngroup engine: stream {id} {} (tail {}), state in {}, cold objects in {}",
        if created.already_exists {
            "reopened"
        } else {
            "created"
        },
        created.next_offset,
        DiskGroupEngine::state_dir(store).display(),
        engine.cold_store().description()
    );

    let progress = bar(appends as u64, "append");
    let started = Instant::now();
    for chunk in (0..appends).collect::<Vec<_>>().chunks(100) {
        let payloads = chunk
            .iter()
            .map(|i| {
                Bytes::from(format!(
                    "{{\"order\":{i},\"pad\":\"{}\"}}\n",
                    "x".repeat(480)
                ))
            })
            .collect();
        let mut r = AppendBatchRequest::new(id.clone(), payloads);
        r.content_type = ct.into();
        r.now_ms = now;
        engine.append_batch(r, p, none).await.map_err(e)?;
        progress.inc(chunk.len() as u64);
    }
    progress.finish();
    let elapsed = started.elapsed();
    say!(
        "appended {appends} orders in batches of 100 in {elapsed:.2?}: {:.0} appends/s, each batch one fdatasync (its payloads and commit record), applied to RocksDB without its WAL",
        appends as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    let producer = ProducerRequest {
        producer_id: "demo-writer".into(),
        producer_epoch: now,
        producer_seq: 0,
    };
    let mut once = AppendRequest::from_bytes(
        id.clone(),
        Bytes::from_static(b"{\"order\":\"exactly-once\"}\n"),
    );
    once.content_type = ct.into();
    once.now_ms = now;
    once.producer = Some(producer);
    let first = engine.append(once.clone(), p, none).await.map_err(e)?;
    let retry = engine.append(once, p, none).await.map_err(e)?;
    say!(
        "producer append at {}..{}; its retry was deduplicated: {} (same offsets {}..{})",
        first.start_offset,
        first.next_offset,
        retry.deduplicated,
        retry.start_offset,
        retry.next_offset
    );

    let hot = engine.hot_bytes();
    let started = Instant::now();
    let mut objects = 0;
    while engine
        .flush_stream_cold(&id, 1 << 20, p)
        .await
        .map_err(e)?
        .is_some()
    {
        objects += 1;
    }
    let elapsed = started.elapsed();
    say!(
        "flushed {hot} hot bytes to {objects} zstd cold object(s) in {elapsed:.2?} ({:.1} MB/s); hot bytes now {}",
        hot as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9),
        engine.hot_bytes()
    );
    let head = engine
        .head_stream(
            HeadStreamRequest {
                stream_id: id.clone(),
                now_ms: now,
            },
            p,
        )
        .await
        .map_err(e)?;
    let mut offset = head.retained_offset;
    let mut read = 0usize;
    let started = Instant::now();
    while offset < head.tail_offset {
        let r = ReadStreamRequest {
            stream_id: id.clone(),
            offset,
            max_len: 1 << 20,
            now_ms: now,
            record: None,
            max_records: None,
        };
        let page = engine.read_stream(r, p).await.map_err(e)?;
        read += page.payload.len();
        offset = page.next_offset;
    }
    say!(
        "read {read} bytes back across the cold and hot tiers in {:.2?}",
        started.elapsed()
    );

    let checkpoint = PublishSnapshotRequest {
        stream_id: id.clone(),
        snapshot_offset: head.tail_offset,
        content_type: "application/json".into(),
        payload: Bytes::from(format!("{{\"orders_through\":{}}}", head.tail_offset)),
        expected_digest: None,
        now_ms: now,
    };
    engine.publish_snapshot(checkpoint, p).await.map_err(e)?;
    let retained = engine
        .advance_retention(
            AdvanceRetentionRequest {
                stream_id: id.clone(),
                retained_offset: head.tail_offset,
                now_ms: now,
            },
            p,
        )
        .await
        .map_err(e)?;
    let gc = engine.run_cold_gc(now, 1024, p).await.map_err(e)?;
    say!(
        "checkpoint at {} and retention up to it; cold GC reclaimed {} object(s) from {} queue entr(ies)",
        retained.retained_offset, gc.objects, gc.entries
    );
    for usage in engine.bucket_usage(p).await.map_err(e)? {
        say!(
            "usage of bucket {}: {} committed bytes, {} records, {} write units, {} retained bytes, {} stream(s)",
            usage.bucket_id,
            usage.usage.committed_append_bytes,
            usage.usage.committed_records,
            usage.usage.committed_write_units,
            usage.usage.retained_bytes,
            usage.usage.stream_count
        );
    }
    engine.shutdown().await.map_err(e)?;
    Ok(())
}

fn bench(
    dir: Option<PathBuf>,
    records: usize,
    only: Option<&str>,
    passes: usize,
) -> Result<(), String> {
    use strata::tools::bench::{compare, AppendWorkload};
    let scratch = match dir {
        Some(d) => d,
        None => tempfile_dir()?,
    };
    let row = |records, value_size, writers, sync| AppendWorkload {
        records,
        value_size,
        writers,
        sync,
    };
    let wanted = |label: &str| only.is_none_or(|o| label.contains(o));
    let workloads: Vec<_> = [
        row(records, 100, 64, true),
        row(records, 1024, 64, true),
        row((records / 10).max(1), 100, 1, true),
        row(records * 10, 100, 4, false),
        row(records * 2, 1024, 4, false),
    ]
    .into_iter()
    .filter(|w| wanted(&format!("append {}", w.label())))
    .collect();
    let group = strata::tools::group_bench::GroupWorkload {
        appends: (records / 20).max(64),
        payload_size: 1024,
        batch: 32,
        read_page: 64 * 1024,
    };
    let results = compare(&scratch.join("log"), &workloads, passes).and_then(|log| {
        if !wanted("group") {
            return Ok((log, Vec::new(), None));
        }
        let rt = runtime()?;
        let (group, flush) = rt.block_on(strata::tools::group_bench::compare_group(
            &scratch.join("group"),
            &group,
        ))?;
        Ok((log, group, Some(flush)))
    });
    let seams = if wanted("seam") {
        runtime().and_then(|rt| {
            rt.block_on(strata::tools::bench::seam_rows(
                &scratch.join("seams"),
                records,
            ))
        })
    } else {
        Ok(Vec::new())
    };
    let opens = if wanted("open") {
        strata::tools::bench::open_times(&scratch.join("open")).map(Some)
    } else {
        Ok(None)
    };
    let scale = if wanted("scale") {
        scale_rows(&scratch.join("scale")).map(Some)
    } else {
        Ok(None)
    };
    let runtime_rows = if wanted("runtime") {
        runtime_rows(&scratch.join("runtime")).map(Some)
    } else {
        Ok(None)
    };
    if let Err(e) = std::fs::remove_dir_all(&scratch) {
        eprintln!(
            "strata: could not remove the scratch directory {}: {e}",
            scratch.display()
        );
    }
    let (log, group, flush) = results?;
    let seams = seams?;
    print_comparisons(log.iter().chain(&group).chain(&seams));
    if let Some(flush) = flush {
        say!(
            "{:>7}  {:<46} {:>8} objs {:>8.1} MB/s ({} bytes in {:?}; no RocksDB counterpart)",
            "-",
            "flush to the local cold store",
            flush.objects,
            flush.megabytes_per_sec(),
            flush.bytes,
            flush.duration
        );
    }
    if let Some((groups, partitions, concurrent)) = scale? {
        print_scale(&groups, &partitions);
        concurrent.iter().for_each(print_concurrent);
    }
    if let Some(rows) = runtime_rows? {
        rows.iter().for_each(print_runtime);
    }
    if let Some(o) = opens? {
        say!(
            "Opening a fresh store (median of {}), RocksDB opening a fresh database: {:?}",
            strata::tools::bench::OPEN_PASSES,
            o.rocksdb
        );
        say!(
            "  durable store + 4-partition log {:?}, + one group engine {:?}",
            o.durable_log,
            o.durable_group
        );
        say!(
            "  TemporaryStore + 4-partition log {:?}, + one group engine {:?}",
            o.temporary_log,
            o.temporary_group
        );
    }
    Ok(())
}

/// Groups in one store, beside RocksDB, and logs of many partitions.
fn scale_rows(root: &Path) -> Result<ScaleRows, String> {
    use strata::tools::bench::{concurrent_groups, group_scale, partition_scale};
    let rt = runtime()?;
    let groups = rt.block_on(group_scale(root, SCALE_GROUPS))?;
    let partitions = SCALE_PARTITIONS
        .iter()
        .map(|&n| partition_scale(root, n))
        .collect::<Result<_, _>>()?;
    let concurrent = CONCURRENT_GROUPS
        .iter()
        .map(|&(n, appends)| rt.block_on(concurrent_groups(root, n, appends)))
        .collect::<Result<_, _>>()?;
    Ok((groups, partitions, concurrent))
}

/// ursula's thread-per-core `ShardRuntime` with Strata's engines and with ursula's in-memory
/// engine, at each count of [`RUNTIME_GROUPS`].
fn runtime_rows(root: &Path) -> Result<Vec<strata::tools::bench::RuntimeComparison>, String> {
    let rt = runtime()?;
    RUNTIME_GROUPS
        .iter()
        .map(|&groups| {
            rt.block_on(strata::tools::bench::shard_runtime(
                root,
                groups,
                RUNTIME_CLIENTS,
                RUNTIME_APPENDS,
            ))
        })
        .collect()
}

/// Raft groups, client tasks and single appends per client of the `runtime` rows.
const RUNTIME_GROUPS: [usize; 3] = [1, 8, 64];
const RUNTIME_CLIENTS: usize = 64;
const RUNTIME_APPENDS: usize = 100;

fn print_runtime(c: &strata::tools::bench::RuntimeComparison) {
    let ((s50, s99), (m50, m99)) = (
        percentiles(&c.strata.latencies),
        percentiles(&c.in_memory.latencies),
    );
    say!(
        "{:>6.3}x  ShardRuntime thread-per-core ({} cores), {} raft group(s), {} clients, single 1 KiB appends: Strata {:.0}/s (p50 {s50:?}, p99 {s99:?}), ursula's in-memory engine {:.0}/s (p50 {m50:?}, p99 {m99:?})",
        c.ratio(),
        strata::tools::bench::RUNTIME_CORES,
        c.groups,
        c.clients,
        c.strata.rate(),
        c.in_memory.rate()
    );
}

/// What the `scale` rows of `strata bench` measured.
type ScaleRows = (
    strata::tools::bench::GroupScale,
    Vec<strata::tools::bench::PartitionScale>,
    Vec<strata::tools::bench::ConcurrentGroups>,
);

/// Groups appending at once in the `scale` rows, and single appends per group.
const CONCURRENT_GROUPS: [(usize, usize); 3] = [(1, 200), (64, 200), (1000, 20)];

/// Group engines opened in one store by the `scale` rows of `strata bench`.
const SCALE_GROUPS: usize = 100;
/// Partitions of each log of the `scale` rows.
const SCALE_PARTITIONS: [u32; 2] = [1_000, 10_000];

/// Percentiles of a latency sample: (p50, p99).
fn percentiles(times: &[Duration]) -> (Duration, Duration) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let at = |q: f64| {
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * q) as usize)
            .copied()
    };
    (at(0.5).unwrap_or_default(), at(0.99).unwrap_or_default())
}

fn print_concurrent(c: &strata::tools::bench::ConcurrentGroups) {
    let rate = |n: usize, wall: Duration| n as f64 / wall.as_secs_f64().max(1e-9);
    let (s, r) = (
        rate(c.strata.len(), c.strata_wall),
        rate(c.rocksdb.len(), c.rocksdb_wall),
    );
    let ((s50, s99), (r50, r99)) = (percentiles(&c.strata), percentiles(&c.rocksdb));
    say!(
        "{:>6.2}x  {} group(s) appending at once, {} single 1 KiB appends each: Strata {s:.0}/s (p50 {s50:?}, p99 {s99:?}), RocksDB {r:.0}/s (p50 {r50:?}, p99 {r99:?}); {} fds, {} threads",
        s / r.max(1e-9),
        c.groups,
        c.appends,
        c.footprint.fds,
        c.footprint.threads
    );
}

/// Prints the `scale` rows: groups in one store, then each log of many partitions.
fn print_scale(
    g: &strata::tools::bench::GroupScale,
    logs: &[strata::tools::bench::PartitionScale],
) {
    let stats = |times: &[Duration]| {
        let mean = times.iter().sum::<Duration>() / times.len().max(1) as u32;
        let (p50, p99) = percentiles(times);
        (mean, p50, p99)
    };
    let ((s_mean, s50, s99), (r_mean, r50, r99)) = (stats(&g.strata), stats(&g.rocksdb));
    let ratio = r_mean.as_secs_f64() / s_mean.as_secs_f64().max(1e-9);
    say!(
        "{ratio:>6.2}x  {} groups in one store: open + create + one 1 KiB append, per group: Strata {s_mean:?} (p50 {s50:?}, p99 {s99:?}); RocksDB's two synced writes per group {r_mean:?} (p50 {r50:?}, p99 {r99:?})",
        g.groups
    );
    let f = &g.footprint;
    say!(
        "         with every group open: {} KiB of disk per group (RocksDB {} KiB), {} fds, {} threads, {} mappings in the process",
        f.disk_bytes / 1024 / g.groups.max(1) as u64,
        g.rocksdb_disk_bytes / 1024 / g.groups.max(1) as u64,
        f.fds,
        f.threads,
        f.mappings
    );
    for p in logs {
        print_partition_scale(p);
    }
}

/// One log of many partitions (the `scale` rows).
fn print_partition_scale(p: &strata::tools::bench::PartitionScale) {
    let per = |d: Duration| d / p.partitions.max(1);
    say!(
        "         one log of {} partitions, 10 x 100 B each: create {:?} ({:?} per partition), append {:?}, reopen {:?}; {} MiB of disk, {} fds, {} mappings",
        p.partitions,
        p.create,
        per(p.create),
        p.append,
        p.reopen,
        p.footprint.disk_bytes >> 20,
        p.footprint.fds,
        p.footprint.mappings
    );
}

/// Prints ratios first, then each engine's rate, then Sync append latencies.
fn print_comparisons<'a>(rows: impl Iterator<Item = &'a strata::tools::bench::Comparison>) {
    say!("Strata vs RocksDB, same work, same run (speedup = RocksDB time / Strata time)");
    say!(
        "{:>7}  {:<46} {:>8} {:>14} {:>14} {:>9}",
        "speedup",
        "workload",
        "ops",
        "strata ops/s",
        "rocksdb ops/s",
        "strata MB/s"
    );
    let rows: Vec<_> = rows.collect();
    for c in &rows {
        say!(
            "{:>6.2}x  {:<46} {:>8} {:>14.0} {:>14.0} {:>9.1}",
            c.speedup(),
            c.name,
            c.operations,
            c.strata_ops_per_sec(),
            c.rocksdb_ops_per_sec(),
            c.strata_megabytes_per_sec()
        );
    }
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    if rows.iter().any(|c| c.latency.is_some()) {
        say!("Latency per operation (append, command or read page), microseconds (p50 / p99 / p999); buffered appends sampled 1 in 16, whole-log scans not timed per record");
    }
    for c in &rows {
        if let Some((s, r)) = &c.latency {
            say!(
                "  {:<46} strata {:>7.1} {:>7.1} {:>7.1}   rocksdb {:>7.1} {:>7.1} {:>7.1}",
                c.name,
                us(s.p50),
                us(s.p99),
                us(s.p999),
                us(r.p50),
                us(r.p99),
                us(r.p999)
            );
        }
    }
    print_cpu(&rows);
}

/// Prints each row's CPU per operation (the whole process, every thread) on both engines.
fn print_cpu(rows: &[&strata::tools::bench::Comparison]) {
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    if rows.iter().any(|c| c.cpu.is_some()) {
        say!("CPU per operation, microseconds (the whole process, background threads included; ratio = RocksDB / Strata)");
    }
    for c in rows {
        if let Some((s, r)) = c.cpu_per_op() {
            say!(
                "  {:<46} strata {:>8.2}   rocksdb {:>8.2}   {:>5.2}x",
                c.name,
                us(s),
                us(r),
                us(r) / us(s).max(1e-9)
            );
        }
    }
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "strata-bench-{}-{}",
        std::process::id(),
        strata::now_ms()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}
