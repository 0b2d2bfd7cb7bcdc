//! Damaged bytes: every flipped byte is caught by a CRC and named with file and offset, a torn
//! tail is cut without losing acknowledged records, damage inside a file is never "repaired" by
//! truncation unless salvage is asked for.

mod common;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use strata::segment::RecoveryMode;
use strata::tools::verify::verify_segment;
use strata::tools::VerifyReport;
use strata::{Log, LogOptions, NewRecord, Store, StoreError};

fn records(n: usize, tag: &str) -> Vec<NewRecord> {
    (0..n)
        .map(|i| match i % 3 {
            0 => NewRecord::value(7, Bytes::from(format!("{tag}-{i}"))),
            1 => NewRecord::keyed(
                8,
                Bytes::from(format!("k{i}")),
                Some(Bytes::from_static(b"v")),
            ),
            _ => NewRecord::keyed(9, Bytes::from(format!("k{i}")), None),
        })
        .collect()
}

fn open(dir: &Path, options: LogOptions) -> Result<(Store, Log), StoreError> {
    let store = Store::open(dir)?;
    let log = store.open_log("l", 1, options)?;
    Ok((store, log))
}

fn read_everything(log: &Log) -> Result<usize, StoreError> {
    let high = log.high_water_mark(0)?;
    let mut next = 0;
    let mut n = 0;
    while next < high {
        let page = log.read(0, next, 1 << 20)?;
        n += page.records.len();
        next = page.next_offset;
    }
    Ok(n)
}

fn segment(dir: &Path, base: i64) -> PathBuf {
    dir.join("logs/l/0").join(format!("{base:020}.seg"))
}

/// Length of a segment's data, as its index (written at seal or at close) says: the file itself
/// is preallocated and longer.
fn data_len(dir: &Path, base: i64) -> usize {
    let index = std::fs::read(dir.join("logs/l/0").join(format!("{base:020}.idx"))).unwrap();
    strata::segment::SegmentIndex::decode(&index)
        .unwrap()
        .segment_len as usize
}

/// Writes three batches into a sealed segment 0 and one into the active segment.
/// Small segments, so tests that rewrite whole files stay fast.
fn small() -> LogOptions {
    LogOptions::default().with_segment_bytes(4096)
}

fn build(dir: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (_s, log) = open(dir, small()).unwrap();
        log.append(0, records(3, "a")).await.unwrap();
        log.append(0, records(2, "b")).await.unwrap();
        log.append(0, records(4, "c")).await.unwrap();
        log.roll_blocking(0).unwrap();
        log.append(0, records(1, "d")).await.unwrap();
        log.close().await.unwrap();
    });
}

#[test]
fn every_flipped_byte_of_a_segment_is_caught_and_named() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let path = segment(dir.path(), 0);
    let original = std::fs::read(&path).unwrap();
    let len = data_len(dir.path(), 0);
    assert!(len > 200);
    // Every byte of the data, and the zero tail's first batch header (what says "the end").
    for i in 0..len + 8 {
        let mut damaged = original.clone();
        damaged[i] ^= 0x01;
        std::fs::write(&path, &damaged).unwrap();

        let mut report = VerifyReport::default();
        verify_segment(&path, 0, false, &mut report).unwrap();
        assert!(
            report.findings.iter().any(|f| f.corrupt && f.file == path),
            "verify missed a flip at byte {i}"
        );

        let outcome =
            open(dir.path(), LogOptions::default()).and_then(|(_s, log)| read_everything(&log));
        match outcome {
            Err(StoreError::Corrupt { file, offset, .. }) => {
                assert_eq!(file, path, "flip at byte {i}");
                assert!(offset <= i as u64, "flip at byte {i} reported at {offset}");
            }
            other => panic!("a flip at byte {i} was not reported as corruption: {other:?}"),
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            damaged,
            "recovery must not cut a sealed segment"
        );
    }
    std::fs::write(&path, &original).unwrap();
    let (_s, log) = open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(read_everything(&log).unwrap(), 10);
}

#[test]
fn damage_inside_the_last_segment_is_an_error_naming_the_batch_unless_salvaging() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let positions = rt.block_on(async {
        let (_s, log) = open(dir.path(), LogOptions::default()).unwrap();
        let mut sizes = Vec::new();
        for n in 0..5 {
            log.append(0, records(2, &format!("b{n}"))).await.unwrap();
            sizes.push(log.stats()[0].bytes);
        }
        log.close().await.unwrap();
        sizes
    });
    let path = segment(dir.path(), 0);
    // Damage the third batch (it starts where the second ended).
    let third = positions[1];
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[third as usize + 60] ^= 0x80;
    std::fs::write(&path, &bytes).unwrap();
    let expect_third = |outcome: Result<usize, StoreError>| match outcome {
        Err(StoreError::Corrupt { file, offset, .. }) => {
            assert_eq!(file, path);
            assert_eq!(offset, third);
        }
        other => panic!("expected corruption, got {other:?}"),
    };
    // After a clean close the segment is not rescanned at open: its CRCs catch the damage on
    // the first read.
    expect_third(
        open(dir.path(), LogOptions::default()).and_then(|(_s, log)| read_everything(&log)),
    );
    // After an unclean shutdown (no clean marker) the open scan finds it, and cuts nothing.
    std::fs::remove_file(dir.path().join("logs/l/CLEAN")).unwrap();
    expect_third(open(dir.path(), LogOptions::default()).map(|_| 0));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was cut");
    let salvage = LogOptions::default().with_recovery(RecoveryMode::Salvage);
    let (_s, log) = open(dir.path(), salvage).unwrap();
    assert_eq!(log.high_water_mark(0).unwrap(), 4);
    assert_eq!(read_everything(&log).unwrap(), 4);
    let end = strata::segment::nonzero_end(&bytes) as u64;
    assert_eq!(log.recovery_report()[0].truncated_bytes, end - third);
}

#[test]
fn a_torn_tail_is_cut_and_every_acknowledged_record_survives() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let path = segment(dir.path(), 9);
    let clean = std::fs::read(&path).unwrap();
    let end = data_len(dir.path(), 9);
    // A batch whose write was cut short, right after the data (zeros follow, as preallocated).
    let mut torn = clean.clone();
    torn[end..end + 40].copy_from_slice(&clean[32..32 + 40]);
    std::fs::write(&path, &torn).unwrap();

    let strict = LogOptions::default().with_recovery(RecoveryMode::AbsoluteConsistency);
    assert!(
        matches!(open(dir.path(), strict), Err(StoreError::Corrupt { offset, .. }) if offset == end as u64)
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // What recovery cut is reported as a tracing warning, with the log and partition.
        let (opened, events) = common::traced(|| open(dir.path(), LogOptions::default()));
        assert!(
            events.contains("WARN") && events.contains("torn tail") && events.contains("log=\"l\""),
            "{events}"
        );
        let (_s, log) = opened.unwrap();
        let garbage_end = strata::segment::nonzero_end(&torn) - end;
        assert_eq!(log.recovery_report()[0].truncated_bytes, garbage_end as u64);
        assert_eq!(read_everything(&log).unwrap(), 10);
        assert_eq!(log.append(0, records(1, "e")).await.unwrap(), (10, 10));
        assert_eq!(read_everything(&log).unwrap(), 11);
    });
}

#[test]
fn a_new_segment_whose_header_never_became_durable_is_recreated() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    // A crash right after creating segment 10: its header is only partly there.
    std::fs::write(segment(dir.path(), 10), b"STRAT").unwrap();
    let (_s, log) = open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.high_water_mark(0).unwrap(), 10);
    assert_eq!(read_everything(&log).unwrap(), 10);
}

#[test]
fn a_damaged_manifest_is_reported_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let manifest = dir.path().join("MANIFEST");
    let mut bytes = std::fs::read(&manifest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&manifest, &bytes).unwrap();
    match Store::open(dir.path()) {
        Err(StoreError::Corrupt { file, .. }) => assert_eq!(file, manifest),
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(std::fs::read(&manifest).unwrap(), bytes);
    let report = strata::tools::verify_store(dir.path()).unwrap();
    assert!(!report.is_clean());
}

#[test]
fn verify_passes_a_clean_store_and_counts_its_records() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let report = strata::tools::verify_store(dir.path()).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.records, 10);
    assert_eq!(report.segments, 2);
}

/// Appends `batches` batches to the active segment of a log on a fault layer, syncing only after
/// the batches `sync_after` names, then cuts the power and returns a crash image that kept every
/// byte written (as a kernel that wrote back everything but the sync's own confirmation), and
/// each batch's start.
fn crash_after_rounds(dir: &Path, batches: usize, sync_after: &[usize]) -> (PathBuf, Vec<u64>) {
    let disk = dir.join("disk");
    std::fs::create_dir(&disk).unwrap();
    let fs = strata::fs::FaultFs::new(&disk).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let starts = rt.block_on(async {
        let options = strata::StoreOptions::default().with_fs(fs.shared());
        let store = Store::open_with(&disk, options).unwrap();
        let buffered = LogOptions::default().with_durability(strata::Durability::Interval(
            std::time::Duration::from_secs(3600),
        ));
        let log = store.open_log("l", 1, buffered).unwrap();
        let mut starts = Vec::new();
        for n in 0..batches {
            starts.push(log.stats()[0].bytes);
            // A batch of a few KiB, so batches lie on different pages.
            let big = Bytes::from(vec![b'x'; 5000]);
            log.append(0, vec![NewRecord::value(7, big)]).await.unwrap();
            if sync_after.contains(&n) {
                log.sync().await.unwrap();
            }
        }
        fs.cut_power();
        starts
    });
    let image = dir.join("image");
    fs.write_crash_image(&image, strata::fs::CrashMode::KeepAll)
        .unwrap();
    (image, starts)
}

/// Zeroes the bytes of the batch starting at `start` (a page the power cut never wrote).
fn zero_batch(path: &Path, start: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    let start = start as usize;
    bytes[start..start + 5000].fill(0);
    std::fs::write(path, &bytes).unwrap();
}

#[test]
fn a_hole_in_the_last_sync_round_is_a_torn_tail_even_with_valid_batches_after_it() {
    // Batches 0 and 1 synced; 2, 3 and 4 written in one round whose sync the power cut: 3 and 4
    // reached the disk, 2 did not. Nothing of that round was acknowledged: cut at 2.
    let dir = tempfile::tempdir().unwrap();
    let (image, starts) = crash_after_rounds(dir.path(), 5, &[1]);
    let path = segment(&image, 0);
    zero_batch(&path, starts[2]);
    let (_s, log) = open(&image, LogOptions::default()).expect("an ordinary torn tail opens");
    assert_eq!(log.high_water_mark(0).unwrap(), 2, "cut at the hole");
    assert_eq!(read_everything(&log).unwrap(), 2);
    assert_eq!(log.stats()[0].bytes, starts[2]);
}

#[test]
fn a_hole_in_synced_bytes_of_the_active_segment_is_corruption() {
    // Batch 2 was synced (batch 3 was written after that sync and says so): losing it is
    // damage to acknowledged data, never a torn tail to cut.
    let dir = tempfile::tempdir().unwrap();
    let (image, starts) = crash_after_rounds(dir.path(), 5, &[1, 2]);
    let path = segment(&image, 0);
    zero_batch(&path, starts[2]);
    match open(&image, LogOptions::default()) {
        Err(StoreError::Corrupt { file, offset, .. }) => {
            assert_eq!((file, offset), (path.clone(), starts[2]));
        }
        other => panic!("expected corruption at batch 2, got {other:?}"),
    }
    let report = strata::tools::verify_store(&image).unwrap();
    assert!(!report.is_clean(), "verify reports it too: {report:?}");
}

#[test]
fn damage_below_what_a_checkpoint_recorded_is_corruption_even_with_nothing_after_it() {
    // A clean close records the durable length in the index: a later bit flip in the last
    // batch cannot pass for an unsynced tail.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let path = segment(dir.path(), 9);
    let mut bytes = std::fs::read(&path).unwrap();
    let end = data_len(dir.path(), 9);
    bytes[end - 3] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    // As after an unclean shutdown: the open scan runs.
    std::fs::remove_file(dir.path().join("logs/l/CLEAN")).unwrap();
    assert!(matches!(
        open(dir.path(), LogOptions::default()),
        Err(StoreError::Corrupt { .. })
    ));
}

/// The lock-free reader of the tools (`strata read`/`tail`): damage in a sealed segment is an
/// error naming the file and the batch, while an incomplete batch in the last segment is the
/// end of the data (a writer may be in the middle of it).
#[test]
fn a_live_reader_names_damage_in_a_sealed_segment_and_ends_at_a_torn_last_batch() {
    use std::ops::ControlFlow;
    use strata::tools::live::LivePartition;
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let part = LivePartition::open(dir.path(), "l", 0).unwrap();
    let offsets = || {
        let mut seen = Vec::new();
        let next = part.scan(0, None, &mut |r| {
            seen.push(r.offset);
            Ok(ControlFlow::Continue(()))
        });
        next.map(|next| (seen, next))
    };
    assert_eq!(offsets().unwrap(), ((0..10).collect(), 10));
    let path = segment(dir.path(), 0);
    let original = std::fs::read(&path).unwrap();
    for i in 0..data_len(dir.path(), 0) + 8 {
        let mut damaged = original.clone();
        damaged[i] ^= 0x01;
        std::fs::write(&path, &damaged).unwrap();
        match offsets() {
            Err(StoreError::Corrupt { file, offset, .. }) => {
                assert_eq!(file, path, "flip at byte {i}");
                assert!(offset <= i as u64, "flip at byte {i} reported at {offset}");
            }
            other => panic!("a flip at byte {i} was not reported as corruption: {other:?}"),
        }
    }
    std::fs::write(&path, &original).unwrap();
    let last = segment(dir.path(), 9);
    let mut torn = std::fs::read(&last).unwrap();
    torn[data_len(dir.path(), 9) - 3] ^= 0x01;
    std::fs::write(&last, &torn).unwrap();
    assert_eq!(
        offsets().unwrap(),
        ((0..9).collect(), 9),
        "ends before the torn batch"
    );
}
