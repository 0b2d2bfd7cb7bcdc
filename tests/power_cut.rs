//! Power-cut safety, proven through the file layer: every write path runs on a [`FaultFs`]
//! that cuts the power before each of its syncs, renames and unlinks (and at sampled random
//! operations), and every crash image a cut there could leave (nothing unsynced, everything, and
//! seeded mixes of kept, lost, zeroed and torn pages and directory changes) must reopen with
//! every acknowledged record and command, nothing half there, nothing deleted back, and a clean
//! `strata verify`. The same workloads run with each operation failing once and with a full
//! disk: typed errors, nothing lost, and the store works again once the fault is gone.
//!
//! `STRATA_POWER_CUT_LONG=1` runs many more random images per crash point (the long version);
//! `STRATA_POWER_CUT_SEED` replays the random images of a reported failure.
//!
//! [`FaultFs`]: strata::fs::FaultFs
//!
//! Built with the `ursula` feature (the group engine's and backup's workloads need it).
#![cfg(feature = "ursula")]

#[path = "common/group_state.rs"]
mod group_state;

mod power_cut {
    pub mod backup_paths;
    pub mod coordination_paths;
    pub mod group_paths;
    pub mod harness;
    pub mod log_paths;
    pub mod positions_paths;
}

use power_cut::backup_paths::Backup;
use power_cut::coordination_paths::Coordination;
use power_cut::group_paths::{CurrentThreadGroups, Group, Upgrade};
use power_cut::harness::{
    explore, explore_interleavings, explore_random, explore_with, fail_each_operation,
    fill_disk_at_fractions, with_open_files_bound, Images,
};
use power_cut::log_paths::{
    Appends, CheckpointedAppends, Compaction, CurrentThreadAppends, JournalRecycling, Manifest,
    Retention, UndoneAppends,
};
use power_cut::positions_paths::Positions;
use strata::fs::OpKinds;

#[test]
fn log_appends_and_rolls_survive_a_power_cut_at_every_sync_rename_and_unlink() {
    explore(&Appends, OpKinds::SYNC_RENAME_UNLINK);
}

/// The stores bounded to the fewest open files (4): segments, journals and the state's files
/// close and open again between their operations, and appends with rolls, recycled journals and
/// group commands with the cold tier survive every power cut all the same.
#[test]
fn write_paths_survive_every_power_cut_while_their_files_close_and_open_again() {
    with_open_files_bound(strata::fs::MIN_MAX_OPEN_FILES, || {
        explore(&Appends, OpKinds::SYNC_RENAME_UNLINK);
        explore(&JournalRecycling { large: 1 }, OpKinds::SYNC_RENAME_UNLINK);
        explore(&Group, OpKinds::SYNC_RENAME_UNLINK);
    });
}

#[test]
fn log_retention_survives_a_power_cut_at_every_sync_rename_and_unlink() {
    explore(&Retention, OpKinds::SYNC_RENAME_UNLINK);
}

#[test]
fn recycled_journal_files_survive_a_power_cut_at_every_sync_rename_and_unlink() {
    explore(&JournalRecycling { large: 1 }, OpKinds::SYNC_RENAME_UNLINK);
}

/// Kept failing seed: a power cut just before the recycled file's new header was synced tore
/// the file's first block into the old header and a damaged old frame, and the valid old frames
/// after it made the damage look like lost acknowledged data (open failed with `Corrupt` in
/// journal file 0 at offset 32). Recycling now writes only the header's sector.
#[test]
fn recycled_journal_regression_seed_1592642302() {
    let images = Images {
        seed: 1_592_642_302,
        per_point: 16,
        overwritten: false,
    };
    explore_with(
        &JournalRecycling { large: 1 },
        OpKinds::SYNC_RENAME_UNLINK,
        images,
    );
}

/// The journal preparer held before each of its operations while the appenders, file switches
/// and checkpoints go on, then the power cut: a preparation cut short by a file switch must never
/// write its zeros into a file that was recycled meanwhile and holds acknowledged frames.
#[test]
fn the_journal_preparer_in_every_place_among_the_appenders() {
    explore_interleavings(
        &JournalRecycling { large: 6 },
        "strata-prep-",
        &[0, 8, 64, 512],
    );
}

/// Appends by tasks of a current-thread runtime, whose rounds the commit workers run: the power
/// cut at every sync, rename and unlink, and the commit worker held before each of its
/// operations while the appenders go on, then the power cut.
#[test]
fn rounds_handed_to_the_commit_workers_survive_every_power_cut_and_interleaving() {
    explore(&CurrentThreadAppends, OpKinds::SYNC_RENAME_UNLINK);
    explore_interleavings(&CurrentThreadAppends, "strata-commit-", &[0, 4, 32]);
}

/// A checkpoint (detached segment syncs, durable floors, journal files let go) held before each
/// of its operations while appends, rolls and journal switches go on, then the power cut.
#[test]
fn checkpoints_in_every_place_among_the_appenders() {
    explore_interleavings(
        &CheckpointedAppends { checkpoints: 3 },
        "strata-test-checkpointer",
        &[0, 4, 32],
    );
}

/// The maintenance thread's compaction passes held before each of their operations while the
/// keyed writes go on, then the power cut: a deleted key never comes back, no acknowledged
/// value is lost.
#[test]
fn background_compaction_in_every_place_among_the_appenders() {
    explore_interleavings(
        &Compaction { background: true },
        "strata-maintenance-",
        &[0, 4, 32],
    );
}

/// The group engine's payload log: its journal preparer held before each of its operations
/// while stream commands, checkpoints and cold work go on, then the power cut.
#[test]
fn the_payload_journal_preparer_in_every_place_among_group_commands() {
    explore_interleavings(&Group, "strata-prep-", &[0, 2, 8, 32, 128]);
}

#[test]
fn a_late_preparation_never_zeroes_a_recycled_journal_file() {
    power_cut::log_paths::a_late_preparation_never_zeroes_a_recycled_file();
}

#[test]
fn a_roll_that_fails_to_make_its_segment_leaves_the_old_one_checkpointed() {
    power_cut::log_paths::a_failed_roll_leaves_its_segment_checkpointed();
}

#[test]
fn an_undone_batch_never_takes_an_acknowledged_offset() {
    power_cut::log_paths::an_undone_batch_never_takes_an_acknowledged_offset();
}

#[test]
fn keyed_compaction_never_brings_a_deleted_key_back() {
    explore(
        &Compaction { background: false },
        OpKinds::SYNC_RENAME_UNLINK,
    );
}

#[test]
fn the_manifest_survives_a_power_cut_at_every_sync_rename_and_unlink() {
    explore(&Manifest, OpKinds::SYNC_RENAME_UNLINK);
}

#[test]
fn log_paths_answer_each_failed_operation_and_keep_working() {
    fail_each_operation(&Appends, 3);
    fail_each_operation(&Retention, 2);
    fail_each_operation(&Compaction { background: false }, 2);
    fail_each_operation(&Manifest, 1);
    fail_each_operation(&JournalRecycling { large: 1 }, 1);
}

/// Every operation of requests that span two partitions failed in turn, then the power cut:
/// an undone batch that write-back made durable never takes an acknowledged offset.
#[test]
fn undone_requests_survive_each_failed_operation_and_a_power_cut() {
    fail_each_operation(&UndoneAppends, 1);
}

#[test]
fn log_paths_recover_once_a_full_disk_has_space_again() {
    fill_disk_at_fractions(&Appends);
    fill_disk_at_fractions(&Retention);
    fill_disk_at_fractions(&Compaction { background: false });
    fill_disk_at_fractions(&JournalRecycling { large: 1 });
}

#[test]
fn coordination_epochs_leases_and_compaction_survive_every_power_cut() {
    explore(&Coordination, OpKinds::SYNC_RENAME_UNLINK);
}

#[test]
fn coordination_answers_each_failed_operation_and_recovers_from_a_full_disk() {
    fail_each_operation(&Coordination, 2);
    fill_disk_at_fractions(&Coordination);
}

#[test]
fn group_commands_and_the_cold_tier_survive_every_power_cut() {
    explore(&Group, OpKinds::SYNC_RENAME_UNLINK);
}

/// Several groups as tasks of one current-thread runtime, their commands awaiting durability
/// together while the commit workers run each group's rounds.
#[test]
fn groups_of_one_current_thread_runtime_survive_every_power_cut() {
    explore(&CurrentThreadGroups, OpKinds::SYNC_RENAME_UNLINK);
}

/// The commit workers held before each of their operations while the groups of one
/// current-thread runtime go on writing, then the power cut.
#[test]
fn the_commit_workers_in_every_place_among_groups_of_one_runtime() {
    explore_interleavings(&CurrentThreadGroups, "strata-commit-", &[0, 2, 8, 32]);
}

#[test]
fn the_group_state_upgrade_and_move_into_the_state_database_survive_every_power_cut() {
    explore(&Upgrade, OpKinds::SYNC_RENAME_UNLINK);
}

#[test]
fn group_commands_answer_each_failed_operation_and_recover_from_a_full_disk() {
    fail_each_operation(&Group, 3);
    fill_disk_at_fractions(&Group);
}

#[test]
fn every_write_path_survives_power_cuts_at_random_operations() {
    explore_random(&Appends, 24);
    explore_random(&Retention, 12);
    explore_random(&Compaction { background: false }, 24);
    explore_random(&Coordination, 12);
    explore_random(&Group, 24);
}

#[test]
fn consumer_positions_survive_every_power_cut_and_fault() {
    let dry = power_cut::harness::Disk::new();
    let mut acks = Default::default();
    power_cut::harness::Workload::run(&Positions, &dry, &mut acks, &|| {});
    assert!(
        acks.compacted > 0,
        "compaction removed superseded commits: {acks:?}"
    );
    assert!(acks.deleted >= 2, "deletions removed positions: {acks:?}");
    explore(&Positions, OpKinds::SYNC_RENAME_UNLINK);
    fail_each_operation(&Positions, 2);
    fill_disk_at_fractions(&Positions);
}

#[test]
fn backup_and_restore_survive_every_power_cut_and_fault() {
    let dry = power_cut::harness::Disk::new();
    let mut acks = Default::default();
    power_cut::harness::Workload::run(&Backup, &dry, &mut acks, &|| {});
    let acks: power_cut::backup_paths::BackupAcks = acks;
    assert!(
        acks.backups.first().is_some_and(|a| a.done)
            && acks.restores.first().is_some_and(|a| a.done),
        "the dry run backs up and restores: {acks:?}"
    );
    let coverage = explore(&Backup, OpKinds::SYNC_RENAME_UNLINK);
    println!("backup: {coverage:?}");
    fail_each_operation(&Backup, 3);
    fill_disk_at_fractions(&Backup);
}
