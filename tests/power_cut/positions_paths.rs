//! Consumer positions under power cuts: commits of several consumers' offsets, some to the same
//! key, then a compaction of the positions log; after any cut every acknowledged commit (or a
//! later one of the same key that was in flight) is what a reopen reports.

use std::collections::BTreeMap;
use std::path::Path;

use strata::event_log::ConsumerPositions;
use strata::Store;

use super::harness::{Disk, Outcome, Workload};
use super::log_paths::{open_image, open_with_retries, runtime, verify_clean, Tally};

/// The positions workload.
pub struct Positions;

/// Per key (consumer, partition): the last acknowledged offset and any later attempted ones.
#[derive(Debug, Default)]
pub struct PositionAcks {
    pub acked: BTreeMap<(String, u32), i64>,
    /// Offsets committed after the acknowledged one whose outcome is unknown (they failed).
    pub attempted: BTreeMap<(String, u32), Vec<i64>>,
    /// Records compaction removed (superseded commits).
    pub compacted: u64,
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
            let key = (format!("consumer-{}", step % 3), (step % 2) as u32);
            let offset = step * 10;
            match rt.block_on(positions.commit(LOG, &key.0, key.1, offset)) {
                Ok(()) => {
                    acks.acked.insert(key.clone(), offset);
                    acks.attempted.remove(&key);
                }
                Err(e) => {
                    acks.attempted.entry(key).or_default().push(offset);
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
            let allowed =
                got == Some(*offset) || got.is_some_and(|g| later.is_some_and(|l| l.contains(&g)));
            assert!(
                allowed,
                "{consumer}/{partition}: acknowledged {offset}, found {got:?} (in flight {later:?})"
            );
        }
        drop(positions);
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &PositionAcks) -> Outcome {
        acks.tally.outcome()
    }
}
