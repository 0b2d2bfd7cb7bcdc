//! Prefaulting a writable mapping (`WritableMap::prefault`, the segment writer's background
//! prefault): the pages it maps take no fault when written, and a range past the end of the
//! file is refused with an error, never a signal, leaving the file as it was. Unmapping before
//! a sync (`WritableMap::unmap_from`) drops the page-table entries, so written pages fault
//! again, and changes no byte of the file or of a view. A sparse file's data end
//! (`FileHandle::data_end`) stops before its unwritten tail.

use std::path::Path;

use strata::fs::{FileSystem, OpenMode, RealFs};

const PAGE: usize = 4096;

/// Page faults this thread has taken so far, minor and major (`/proc/thread-self/stat` fields
/// 10 and 12; a first touch of allocated, unwritten file blocks counts as major).
fn page_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("thread stat");
    let after_name = &stat[stat.rfind(')').expect("a command name") + 2..];
    // Fields after the name start at field 3 (state).
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> u64 { fields[n - 3].parse().expect("a fault count") };
    field(10) + field(12)
}

/// Writes one byte into each page of `pages` and returns the page faults that took.
fn faults_writing(map: &dyn strata::fs::WritableMap, pages: std::ops::Range<usize>) -> u64 {
    let before = page_faults();
    for page in pages {
        map.write(page * PAGE, &[1])
            .expect("a write inside the mapping");
    }
    page_faults() - before
}

/// A file of `pages` pages, reserved, and its writable mapping (the directory keeps it).
fn mapped(pages: usize) -> (tempfile::TempDir, strata::fs::FileRef, strata::fs::MapRef) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = open_allocated(dir.path(), (pages * PAGE) as u64);
    let map = file.map_writable((pages * PAGE) as u64).expect("a mapping");
    (dir, file, map)
}

fn open_allocated(dir: &Path, len: u64) -> strata::fs::FileRef {
    let file = RealFs
        .open(&dir.join("mapped"), OpenMode::CreateNew)
        .expect("a new file");
    file.set_len(len).expect("a length");
    file.reserve(len).expect("reserved blocks");
    file
}

#[test]
fn prefaulted_pages_take_no_fault_when_written_and_others_do() {
    let (_dir, _file, map) = mapped(256);
    map.prefault(0, 128 * PAGE).expect("prefaulted");
    let prefaulted = faults_writing(&*map, 0..128);
    let cold = faults_writing(&*map, 128..256);
    // A kernel may map more than one page per fault; the fresh pages must still fault often
    // enough for the count to tell the two apart.
    assert!(
        cold >= 32,
        "{cold} faults in 128 fresh pages: the count is not measuring faults"
    );
    assert!(
        prefaulted * 4 < cold,
        "{prefaulted} faults in 128 prefaulted pages, {cold} in 128 fresh ones"
    );
}

#[test]
fn a_prefault_past_the_end_of_the_file_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = open_allocated(dir.path(), 16 * PAGE as u64);
    let map = file.map_writable(256 * PAGE as u64).expect("a mapping");
    map.write(100, b"kept").expect("a write inside the file");
    assert!(
        map.prefault(0, 256 * PAGE).is_err(),
        "pages past the end of the file"
    );
    assert_eq!(file.len().expect("a length"), 16 * PAGE as u64);
    let mut bytes = vec![0u8; 16 * PAGE];
    file.read_exact_at(&mut bytes, 0).expect("the file");
    assert_eq!(&bytes[100..104], b"kept");
    assert!(bytes[..100].iter().chain(&bytes[104..]).all(|b| *b == 0));
    // The part inside the file was mapped before the refusal, and still accepts writes.
    map.write(15 * PAGE, b"tail")
        .expect("a write inside the file");
}

#[test]
fn unmapped_pages_fault_again_and_keep_their_bytes() {
    let (_dir, file, map) = mapped(256);
    map.prefault(0, 256 * PAGE).expect("prefaulted");
    let while_mapped = faults_writing(&*map, 0..128);
    let view = map.view(128 * PAGE);
    map.unmap_from(64 * PAGE + 100).expect("unmapped");
    let after_unmap = faults_writing(&*map, 128..256);
    assert!(
        after_unmap >= 32 && while_mapped * 4 < after_unmap,
        "{while_mapped} faults in 128 mapped pages, {after_unmap} in 128 unmapped ones"
    );
    file.sync_data().expect("synced");
    let mut bytes = vec![0u8; 256 * PAGE];
    file.read_exact_at(&mut bytes, 0).expect("the file");
    for page in 0..256 {
        assert_eq!(bytes[page * PAGE], 1, "page {page} in the file");
    }
    for page in 0..128 {
        assert_eq!(view[page * PAGE], 1, "page {page} in the view");
    }
    // Past the mapping: nothing to unmap, no error.
    map.unmap_from(256 * PAGE).expect("an empty range");
}

#[test]
fn the_data_end_of_a_sparse_file_stops_before_its_unwritten_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = RealFs
        .open(&dir.path().join("sparse"), OpenMode::CreateNew)
        .expect("a new file");
    file.set_len(64 << 20).expect("a length");
    file.reserve(4 << 20).expect("reserved blocks");
    file.write_at(b"x", 1 << 20).expect("a byte");
    let end = file.data_end().expect("the data's end");
    assert!(
        end > 1 << 20 && end <= 4 << 20,
        "data ends at {end} in a 64 MiB file with one byte at 1 MiB and 4 MiB reserved"
    );
    assert_eq!(
        file.len().expect("a length"),
        64 << 20,
        "the length is untouched"
    );
}
