//! `strata positions`: the consumer positions of a store (list with lag, reset, delete).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use strata::event_log::{positions, ConsumerPositions};
use strata::tools::live::{self, LivePartition};
use strata::{Log, Store};

use crate::{open_store, runtime};

/// What `strata positions` does.
#[derive(Subcommand)]
pub enum PositionsCommand {
    /// List every committed position with its partition's high-water mark and the consumer's
    /// lag (without the store's lock: an application may hold it).
    List {
        /// Store directory.
        dir: PathBuf,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Set a consumer's position of one partition of a log, or of every partition.
    Reset {
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        to: Target,
    },
    /// Delete a consumer's positions of a log (one partition, or every partition).
    Delete {
        #[command(flatten)]
        which: Which,
    },
}

/// The positions a reset or deletion takes.
#[derive(Args)]
pub struct Which {
    /// Store directory.
    dir: PathBuf,
    /// Log name.
    log: String,
    /// Consumer name.
    consumer: String,
    /// One partition (default: every partition of the log).
    #[arg(long)]
    partition: Option<u32>,
}

/// Where a reset puts the position: exactly one of these.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// This offset (between the partition's low- and high-water marks).
    #[arg(long)]
    to: Option<i64>,
    /// The low-water mark: the consumer reads everything the partition holds.
    #[arg(long)]
    earliest: bool,
    /// The high-water mark: the consumer reads only what is appended next.
    #[arg(long)]
    latest: bool,
}

/// Runs a `strata positions` command.
pub fn run(command: PositionsCommand) -> Result<(), String> {
    match command {
        PositionsCommand::List { dir, json } => list(&dir, json),
        PositionsCommand::Reset { which, to } => reset(&which, &to),
        PositionsCommand::Delete { which } => delete(&which),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Lists the positions without the store's lock (an application may hold it).
fn list(dir: &Path, json: bool) -> Result<(), String> {
    crate::require_store(dir)?;
    let positions = live::committed_positions(dir).map_err(err)?;
    let mut marks: HashMap<(String, u32), Option<(i64, i64)>> = HashMap::new();
    if !json {
        say!(
            "{:<20} {:<20} {:>9} {:>12} {:>12} {:>12}",
            "LOG",
            "CONSUMER",
            "PARTITION",
            "COMMITTED",
            "HIGH",
            "LAG"
        );
    }
    for p in positions {
        let key = (p.log.clone(), p.partition);
        let marks = *marks.entry(key).or_insert_with(|| {
            // A log the store no longer holds (or a partition it never had) has no marks.
            let part = LivePartition::open(dir, &p.log, p.partition).ok();
            part.and_then(|part| part.water_marks().ok())
        });
        let lag = marks.map(|marks| positions::records_behind(Some(p.offset), marks));
        let show = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
        if json {
            say!(
                "{}",
                serde_json::json!({"log": p.log, "consumer": p.consumer, "partition": p.partition,
                    "committed": p.offset, "high": marks.map(|m| m.1), "lag": lag})
            );
        } else {
            say!(
                "{:<20} {:<20} {:>9} {:>12} {:>12} {:>12}",
                p.log,
                p.consumer,
                p.partition,
                p.offset,
                show(marks.map(|m| m.1)),
                show(lag)
            );
        }
    }
    Ok(())
}

/// A partition's low- and high-water marks (`None`: the log has no such partition).
fn water_marks(log: &Log, partition: u32) -> Result<Option<(i64, i64)>, String> {
    if partition >= log.partition_count() {
        return Ok(None);
    }
    let low = log.low_water_mark(partition).map_err(err)?;
    Ok(Some((low, log.high_water_mark(partition).map_err(err)?)))
}

/// The store and the log `which` names (which must exist), with the partitions it takes.
fn open_which(which: &Which) -> Result<(Store, Log, Vec<u32>), String> {
    let store = open_store(&which.dir)?;
    if !store.logs().iter().any(|l| l.name == which.log) {
        return Err(format!(
            "the store has no log {:?}; nothing was changed",
            which.log
        ));
    }
    let log = store.open_recorded_log(&which.log).map_err(err)?;
    let partitions = match which.partition {
        Some(p) if p >= log.partition_count() => {
            return Err(format!(
                "log {:?} has {} partition(s), not {p}; nothing was changed",
                which.log,
                log.partition_count()
            ))
        }
        Some(p) => vec![p],
        None => (0..log.partition_count()).collect(),
    };
    Ok((store, log, partitions))
}

fn reset(which: &Which, to: &Target) -> Result<(), String> {
    let (store, log, partitions) = open_which(which)?;
    let positions = ConsumerPositions::open(&store).map_err(err)?;
    // Every target is checked before anything is written.
    let mut targets = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let (low, high) = water_marks(&log, partition)?.unwrap_or((0, 0));
        let offset = match (to.to, to.earliest) {
            (Some(offset), _) if !(low..=high).contains(&offset) => {
                return Err(format!(
                    "offset {offset} is outside partition {partition}'s [{low}, {high}]; \
                     nothing was changed"
                ))
            }
            (Some(offset), _) => offset,
            (None, true) => low,
            (None, false) => high,
        };
        targets.push((partition, offset));
    }
    let rt = runtime()?;
    for (partition, offset) in targets {
        let commit = positions.commit(&which.log, &which.consumer, partition, offset);
        rt.block_on(commit).map_err(err)?;
        say!(
            "{} {} partition {partition}: position {offset}",
            which.log,
            which.consumer
        );
    }
    drop(log);
    close(store)
}

fn delete(which: &Which) -> Result<(), String> {
    let (store, log, _) = open_which(which)?;
    let positions = ConsumerPositions::open(&store).map_err(err)?;
    let rt = runtime()?;
    let deleting = positions.delete(&which.log, &which.consumer, which.partition);
    let removed = rt.block_on(deleting).map_err(err)?;
    say!(
        "{} {}: {removed} position(s) deleted",
        which.log,
        which.consumer
    );
    drop(log);
    close(store)
}

fn close(store: Store) -> Result<(), String> {
    store.close_blocking().map_err(err)
}
