//! Consumer positions under power cuts: commits of several consumers' offsets, some to the same
//! key, deletions of a consumer's positions, then a compaction of the positions log; after any
//! cut every acknowledged commit or deletion (or a later one of the same key that was in
//! flight) is what a reopen reports.

use std::collections::BTreeMap;
use std::path::Path;

use strata::event_log::ConsumerPositions;
use strata::Store;

use super::harness::{Disk, Outcome, Workload};
use super::log_paths::{open_image, open_with_retries, runtime, verify_clean, Tally};

/// The positions workload.
pub struct Positions;

/// Per key (consumer, partition): the last acknowledged offset (`None`: deleted) and any later
/// attempted ones.
#[derive(Debug, Default)]
pub struct PositionAcks {
    pub acked: BTreeMap<(String, u32), Option<i64>>,
    /// Offsets committed (or deletions) after the acknowledged one whose outcome is unknown
    /// (they failed).
    pub attempted: BTreeMap<(String, u32), Vec<Option<i64>>>,
    /// Records compaction removed (superseded commits).
    pub compacted: u64,
    /// Positions deletions removed.
    pub deleted: usize,
    pub tally: Tally,
}

const LOG: &str = "orders";

impl Workload for Positions {
    type Acks = PositionAcks;

    fn name(&self) -> &'static str {
        "consumer positions"
    }

    fn run(&self, disk: &Disk, acks: &mut PositionAcks, between: &dyn Fn()) {
        let open = || {
            Store::open_with(&disk.root, disk.options())
                .and_then(|s| ConsumerPositions::open(&s).map(|p| (s, p)))
        };
        let Some((store, positions)) = open_with_retries(disk, &mut acks.tally, between, open)
        else {
            return;
        };
        let rt = runtime();
        for step in 0..40i64 {
            if disk.dead() {
                return;
            }
            if step == 10 || step == 20 {
                // Seal what is there, so compaction has sealed segments to rewrite.
                if let Err(e) = positions.log().roll_blocking(0) {
                    acks.tally.failed(e);
                }
            }
            if step == 20 {
                between();
                acks.tally.halfway = true;
                match positions.log().compact_blocking(strata::now_ms()) {
                    Ok(report) => acks.compacted += report.records_removed,
                    Err(e) => acks.tally.failed(e),
                }
            }
            if step == 25 || step == 33 {
                delete_consumer(&rt, &positions, acks, "consumer-1");
                continue;
            }
            let key = (format!("consumer-{}", step % 3), (step % 2) as u32);
            let offset = step * 10;
            match rt.block_on(positions.commit(LOG, &key.0, key.1, offset)) {
                Ok(()) => {
                    acks.acked.insert(key.clone(), Some(offset));
                    acks.attempted.remove(&key);
                }
                Err(e) => {
                    acks.attempted.entry(key).or_default().push(Some(offset));
                    acks.tally.failed(e);
                }
            }
        }
        let probe = rt.block_on(positions.commit(LOG, "probe", 0, 1));
        acks.tally.probe_ok = !disk.dead()
            && (probe.is_ok() || rt.block_on(positions.commit(LOG, "probe", 0, 2)).is_ok());
        drop(positions);
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &PositionAcks) {
        let (disk, store) = open_image(root);
        let positions = ConsumerPositions::open(&store).expect("positions open");
        for ((consumer, partition), offset) in &acks.acked {
            let got = positions.committed(LOG, consumer, *partition);
            let later = acks.attempted.get(&(consumer.clone(), *partition));
            let allowed = got == *offset || later.is_some_and(|l| l.contains(&got));
            assert!(
                allowed,
                "{consumer}/{partition}: acknowledged {offset:?}, found {got:?} (in flight {later:?})"
            );
        }
        drop(positions);
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &PositionAcks) -> Outcome {
        acks.tally.outcome()
    }
}

/// Deletes every position of `consumer` (one batch of tombstones). The positions it removes are
/// the acknowledged ones (a failed commit changed nothing in memory): once the deletion is
/// acknowledged they read as deleted; if it fails, deleted is one more possible outcome.
fn delete_consumer(
    rt: &tokio::runtime::Runtime,
    positions: &ConsumerPositions,
    acks: &mut PositionAcks,
    consumer: &str,
) {
    let held: Vec<(String, u32)> = acks
        .acked
        .iter()
        .filter(|((c, _), offset)| c == consumer && offset.is_some())
        .map(|(key, _)| key.clone())
        .collect();
    match rt.block_on(positions.delete(LOG, consumer, None)) {
        Ok(removed) => {
            assert_eq!(removed, held.len(), "deletes the positions it holds");
            acks.deleted += removed;
            for key in held {
                acks.acked.insert(key.clone(), None);
                acks.attempted.remove(&key);
            }
        }
        Err(e) => {
            for key in held {
                acks.attempted.entry(key).or_default().push(None);
            }
            acks.tally.failed(e);
        }
    }
}
