//! A full disk on a real file system that cannot preallocate (an ext3-format image on a loop
//! device, which answers fallocate with `EOPNOTSUPP`): appends must fail with
//! `StoreError::NoSpace`, never kill the process with SIGBUS from a store into a mapped hole,
//! and every acknowledged record must be there once space is freed.
//!
//! The appends run in a child process (this test binary again), so that a signal would show as
//! the child's death instead of taking the test runner with it. Mounting needs root (CI runs as
//! root); `STRATA_REQUIRE_LOOP=1` (set by `.ci/run`) makes not being able to a failure.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use strata::segment::NewRecord;
use strata::{Durability, LogOptions, Store, StoreError};

/// The child's work directory, when this process is the child.
const CHILD: &str = "STRATA_NO_FALLOCATE_CHILD";

/// A small ext3-format image mounted on a loop device, unmounted and removed when dropped.
struct LoopMount {
    scratch: tempfile::TempDir,
}

impl LoopMount {
    fn dir(&self) -> PathBuf {
        self.scratch.path().join("mnt")
    }

    /// Mounts a 32 MiB ext3-format image, or says why it cannot.
    fn mount() -> Option<LoopMount> {
        let scratch = tempfile::tempdir().expect("scratch");
        let image = scratch.path().join("img");
        let mnt = scratch.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        let run = |cmd: &mut Command| cmd.status().is_ok_and(|s| s.success());
        let mounted = run(Command::new("truncate").args(["-s", "32M"]).arg(&image))
            && run(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-m", "0", "-t", "ext3"])
                .arg(&image))
            && run(Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mnt));
        if !mounted {
            assert!(
                std::env::var("STRATA_REQUIRE_LOOP").is_err(),
                "could not mount an ext3 image on a loop device (run as root)"
            );
            eprintln!("skipped: mounting a loop device needs root and e2fsprogs");
            return None;
        }
        Some(LoopMount { scratch })
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir()).status();
    }
}

/// A buffered log: no journal, so an append's only write is its copy into the segment, the
/// write that meets the full disk (a journaled log's `pwrite`s would meet it first).
fn options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(1 << 20)
        .with_durability(Durability::Interval(std::time::Duration::from_millis(50)))
}

fn record(i: u32) -> Vec<NewRecord> {
    let mut value = vec![(i % 251) as u8; 8000];
    value[..4].copy_from_slice(&i.to_le_bytes());
    vec![NewRecord::value(1, Bytes::from(value))]
}

/// The child: appends until the disk is full three times, printing each acknowledged offset
/// and record number, then `NOSPACE`; any other error ends it with a failure.
fn child(root: &Path) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let store = Store::open(root).expect("store");
    let log = store.open_log("full", 2, options()).expect("log");
    let mut refused = 0;
    for i in 0..100_000u32 {
        match rt.block_on(log.append(i % 2, record(i))) {
            Ok((offset, _)) => println!("ACK {} {offset} {i}", i % 2),
            Err(StoreError::NoSpace { .. }) => {
                refused += 1;
                if refused == 3 {
                    println!("NOSPACE");
                    std::process::exit(0);
                }
            }
            Err(other) => {
                println!("ERROR {other}");
                std::process::exit(3);
            }
        }
    }
    println!("NEVER FULL");
    std::process::exit(4);
}

#[test]
fn a_full_disk_without_fallocate_is_no_space_never_a_signal() {
    if let Ok(root) = std::env::var(CHILD) {
        child(Path::new(&root));
        return;
    }
    let Some(mount) = LoopMount::mount() else {
        return;
    };
    let root = mount.dir().join("store");
    let filler = mount.dir().join("filler");
    std::fs::write(&filler, vec![1u8; 4 << 20]).expect("filler");
    let out = Command::new(std::env::current_exe().expect("this test"))
        .args([
            "--exact",
            "a_full_disk_without_fallocate_is_no_space_never_a_signal",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &root)
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.signal(),
        None,
        "the child was killed by a signal (SIGBUS is 7); it printed:\n{}",
        stdout.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    assert!(
        out.status.success() && stdout.contains("NOSPACE"),
        "the child must end on NoSpace: {:?}\n{}",
        out.status,
        stdout.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    let acked: Vec<(u32, i64, u32)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ACK "))
        .map(|l| {
            let f: Vec<i64> = l.split(' ').map(|x| x.parse().expect("a number")).collect();
            (f[0] as u32, f[1], f[2] as u32)
        })
        .collect();
    assert!(
        acked.len() > 100,
        "{} appends before the disk filled",
        acked.len()
    );
    std::fs::remove_file(&filler).expect("space freed");
    let store = Store::open(&root).expect("reopen once space is back");
    let log = store.open_log("full", 2, options()).expect("log");
    for (partition, offset, i) in &acked {
        let page = log.read(*partition, *offset, 1).expect("read");
        let value = page.records[0].value.as_ref().expect("a value");
        assert_eq!(&value[..4], &i.to_le_bytes(), "record {i} at {offset}");
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(log.append(0, record(7)))
        .expect("appends work again");
    store.close_blocking().expect("close");
    drop(store);
    assert!(strata::tools::verify_store(&root)
        .expect("verify")
        .is_clean());
}
