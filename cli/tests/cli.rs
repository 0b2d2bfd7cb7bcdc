//! The `strata` command line as a user runs it: a closed stdout ends a command quietly, and an
//! output error names the output, not the store.

use std::io::Read;
use std::process::{Command, Stdio};

use bytes::Bytes;
use strata::{LogOptions, NewRecord, Store};

/// A store with one log whose only segment holds 20 000 records, so `dump` prints far more
/// than a pipe buffers (the writer is still writing when the reader goes).
fn store_with_a_log() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("events", 1, LogOptions::default()).unwrap();
    for _ in 0..20 {
        let records = (0..1000)
            .map(|_| NewRecord::value(1, Bytes::from_static(b"a record value")))
            .collect();
        log.append_blocking(0, records).unwrap();
    }
    store.close_blocking().unwrap();
    dir
}

fn segment(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path()
        .join("logs/events/0")
        .join(format!("{:020}.seg", 0))
}

#[test]
fn dump_into_a_closed_pipe_ends_quietly() {
    let dir = store_with_a_log();
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("dump")
        .arg(segment(&dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one byte, then close the pipe, as `| head -c 1` does.
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "a closed pipe is not an error: {stderr}");
}

#[test]
fn an_output_error_names_the_output_not_the_store() {
    let dir = store_with_a_log();
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // no /dev/full here: nothing to write into that fails
    };
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("dump")
        .arg(segment(&dir))
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("writing the output"), "{stderr}");
    assert!(!stderr.contains(&*dir.path().to_string_lossy()), "{stderr}");
}

/// Runs `strata` with `args`, which must fail; returns its stderr.
fn strata_refuses(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `strata` with `args`; returns stdout, failing on a non-zero exit.
fn strata(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn read_and_tail_print_records_as_json_lines_by_offset_time_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store.open_log("events", 2, LogOptions::default()).unwrap();
    for i in 0..10i64 {
        let value = Bytes::from(format!("event {i}"));
        let record = NewRecord::keyed(1000 + i * 100, Bytes::from_static(b"k"), Some(value));
        log.append_blocking(1, vec![record]).unwrap();
    }
    store.close_blocking().unwrap();
    drop((log, store));
    let d = dir.path().as_os_str();
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let by_offset = strata(&[
        os("read"),
        d,
        os("events"),
        os("--partition"),
        os("1"),
        os("--from"),
        os("3"),
        os("--max"),
        os("2"),
    ]);
    assert_eq!(
        by_offset,
        "{\"partition\":1,\"offset\":3,\"timestamp\":1300,\"key\":\"k\",\"value\":\"event 3\"}\n\
         {\"partition\":1,\"offset\":4,\"timestamp\":1400,\"key\":\"k\",\"value\":\"event 4\"}\n"
    );
    let by_time = strata(&[
        os("read"),
        d,
        os("events"),
        os("--partition"),
        os("1"),
        os("--time"),
        os("1750"),
        os("--max"),
        os("1"),
    ]);
    assert!(by_time.contains("\"offset\":8,"), "{by_time}");
    let tail = strata(&[
        os("tail"),
        d,
        os("events"),
        os("--partition"),
        os("1"),
        os("--last"),
        os("3"),
    ]);
    let offsets: Vec<&str> = tail.lines().map(|l| &l[15..27]).collect();
    assert_eq!(tail.lines().count(), 3, "{tail}");
    assert!(
        tail.lines().last().unwrap().contains("\"offset\":9,"),
        "{offsets:?}"
    );
    assert!(
        strata(&[os("tail"), d, os("events")]).is_empty(),
        "partition 0 is empty"
    );
}

#[test]
fn inspect_and_verify_print_json_when_asked() {
    let dir = store_with_a_log();
    let d = dir.path().as_os_str();
    let os = std::ffi::OsStr::new;
    let inspect: serde_json::Value =
        serde_json::from_str(&strata(&[os("inspect"), d, os("--json")])).unwrap();
    let log = &inspect["logs"][0];
    assert_eq!(log["name"], "events");
    assert_eq!(log["partitions"][0]["high"], 20_000);
    assert_eq!(log["partitions"][0]["segments"][0]["base_offset"], 0);
    let verify: serde_json::Value =
        serde_json::from_str(&strata(&[os("verify"), d, os("--json")])).unwrap();
    assert_eq!(verify["ok"], true);
    assert_eq!(verify["records"], 20_000);
    assert!(verify["findings"].as_array().unwrap().is_empty());
    // Damage one byte of a batch: the JSON names it and the exit code says so.
    let path = segment(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[strata::segment::SEGMENT_HEADER_LEN + 200] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([os("verify"), d, os("--json")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let verify: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verify["ok"], false);
    assert_eq!(verify["findings"][0]["corrupt"], true);
    assert!(verify["findings"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with(".seg"));
}

#[test]
fn backup_and_restore_copy_a_store_that_verify_and_read_accept() {
    let dir = store_with_a_log();
    let scratch = tempfile::tempdir().unwrap();
    let (backup, restored) = (
        scratch.path().join("backup"),
        scratch.path().join("restored"),
    );
    let os = std::ffi::OsStr::new;
    let report: serde_json::Value = serde_json::from_str(&strata(&[
        os("backup"),
        dir.path().as_os_str(),
        backup.as_os_str(),
        os("--json"),
    ]))
    .unwrap();
    assert_eq!(report["logs"], 1);
    // A second backup to the same place is refused, naming it.
    let again = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([os("backup"), dir.path().as_os_str(), backup.as_os_str()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    let text = strata(&[os("restore"), backup.as_os_str(), restored.as_os_str()]);
    assert!(text.starts_with("restored "), "{text}");
    let verify: serde_json::Value =
        serde_json::from_str(&strata(&[os("verify"), restored.as_os_str(), os("--json")])).unwrap();
    assert_eq!(
        (verify["ok"].clone(), verify["records"].clone()),
        (true.into(), 20_000.into())
    );
    let tail = |d: &std::path::Path| {
        strata(&[
            os("tail"),
            d.as_os_str(),
            os("events"),
            os("--last"),
            os("3"),
        ])
    };
    assert_eq!(tail(&restored), tail(dir.path()));
}

#[test]
fn read_and_tail_count_records_across_the_gaps_compaction_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = LogOptions::default().with_segment_bytes(4096);
    let log = store.open_log("kv", 1, options).unwrap();
    let keyed = |key: String, value: Vec<u8>| {
        NewRecord::keyed(1_000, Bytes::from(key), Some(Bytes::from(value)))
    };
    log.append_blocking(0, vec![keyed("early".into(), b"kept".to_vec())])
        .unwrap();
    for round in 0..20u8 {
        for k in 0..10 {
            log.append_blocking(0, vec![keyed(format!("k{k}"), vec![round; 1000])])
                .unwrap();
        }
    }
    let report = log.compact_blocking(strata::now_ms()).unwrap();
    assert!(report.records_removed >= 180, "{report:?}");
    store.close_blocking().unwrap();
    drop((log, store));
    let (d, os) = (dir.path().as_os_str(), |s: &'static str| {
        std::ffi::OsStr::new(s)
    });
    let offsets = |out: String| -> Vec<i64> {
        out.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["offset"].as_i64().unwrap()
            })
            .collect()
    };
    let all = offsets(strata(&[os("read"), d, os("kv"), os("--max"), os("1000")]));
    assert_eq!(
        all.len(),
        11,
        "the early key and the last round survive: {all:?}"
    );
    // Offsets 1..191 are gone: a read from 1 still finds 3 records, and the last 11 records
    // reach back to offset 0.
    let from_one = offsets(strata(&[
        os("read"),
        d,
        os("kv"),
        os("--from"),
        os("1"),
        os("--max"),
        os("3"),
    ]));
    assert_eq!(from_one, all[1..4].to_vec());
    let last = offsets(strata(&[os("tail"), d, os("kv"), os("--last"), os("11")]));
    assert_eq!(last, all);
    let last_two = offsets(strata(&[os("tail"), d, os("kv"), os("--last"), os("2")]));
    assert_eq!(last_two, all[9..].to_vec());
}

/// Every tool that opens a store refuses a directory that is not one (an empty or mistyped
/// path), with a clear error, and leaves it as it was.
#[test]
fn tools_refuse_a_directory_that_is_not_a_store_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("backup");
    let d = dir.path().as_os_str();
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["verify".as_ref(), d],
        vec!["inspect".as_ref(), d],
        vec!["inspect".as_ref(), d, "--json".as_ref()],
        vec!["read".as_ref(), d, "events".as_ref()],
        vec!["tail".as_ref(), d, "events".as_ref()],
        vec!["compact".as_ref(), d, "events".as_ref()],
        vec!["backup".as_ref(), d, dest.as_os_str()],
        vec!["positions".as_ref(), "list".as_ref(), d],
        vec![
            "positions".as_ref(),
            "delete".as_ref(),
            d,
            "events".as_ref(),
            "c".as_ref(),
        ],
    ];
    for args in commands {
        let stderr = strata_refuses(&args);
        assert!(stderr.contains("not a Strata store"), "{args:?}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{args:?} changed the directory: {left:?}");
    }
}

/// `dump` of a segment still preallocated (the active one) prints its batches and ends at its
/// data, successfully: the zeros after it are not damage.
#[test]
fn dump_of_an_active_segment_ends_at_its_data() {
    let dir = store_with_a_log();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("dump")
        .arg(segment(&dir))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stdout.contains("offset 19999 "),
        "the last record is printed"
    );
    assert!(
        stdout.contains("end of data at byte"),
        "{}",
        &stdout[stdout.len().saturating_sub(300)..]
    );
}

/// `compact` of the log that holds the groups' payloads is refused (only the group engine trims
/// it), and the log is unchanged.
#[test]
fn compact_refuses_the_group_payload_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = std::sync::Arc::new(Store::open(dir.path()).unwrap());
        let cold = strata::cold::ColdStore::local(&dir.path().join("cold")).unwrap();
        let options = strata::group::GroupOptions::default();
        drop(strata::group::DiskGroupEngine::open(&store, "g", cold, options).unwrap());
        store.close_blocking().unwrap();
    }
    let logs = || Store::open(dir.path()).unwrap().logs();
    let before = logs();
    let stderr = strata_refuses(&[
        "compact".as_ref(),
        dir.path().as_os_str(),
        "__groups".as_ref(),
    ]);
    assert!(stderr.contains("owned"), "{stderr}");
    assert_eq!(logs(), before);
}

/// `compact` runs a log with the options its application recorded: a tombstone younger than
/// the recorded tombstone retention (48 hours) survives, though the default (24 hours) would
/// drop it. A log whose options were never recorded is refused, unchanged.
#[test]
fn compact_runs_a_log_with_its_recorded_options() {
    let dir = tempfile::tempdir().unwrap();
    let hour_ms = 3600 * 1000;
    let now = strata::now_ms();
    {
        let store = Store::open(dir.path()).unwrap();
        let retention = std::time::Duration::from_secs(48 * 3600);
        let options = LogOptions::default()
            .with_segment_bytes(4096)
            .with_compaction(
                strata::log::CompactionPolicy::default().with_delete_retention(retention),
            );
        let log = store.open_log("kv", 1, options).unwrap();
        let key = || Bytes::from_static(b"gone");
        let value = Some(Bytes::from_static(b"old"));
        log.append_blocking(0, vec![NewRecord::keyed(now - 40 * hour_ms, key(), value)])
            .unwrap();
        log.append_blocking(0, vec![NewRecord::keyed(now - 36 * hour_ms, key(), None)])
            .unwrap();
        for i in 0..20 {
            let filler =
                NewRecord::keyed(now, Bytes::from(format!("k{i}")), Some(vec![1; 900].into()));
            log.append_blocking(0, vec![filler]).unwrap();
        }
        store.close_blocking().unwrap();
    }
    let d = dir.path().as_os_str();
    strata(&["compact".as_ref(), d, "kv".as_ref()]);
    let lines = strata(&[
        "read".as_ref(),
        d,
        "kv".as_ref(),
        "--max".as_ref(),
        "100".as_ref(),
    ]);
    let records: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let gone: Vec<_> = records.iter().filter(|r| r["key"] == "gone").collect();
    assert_eq!(
        gone.len(),
        1,
        "the value went, the tombstone stayed: {gone:?}"
    );
    assert!(gone[0]["value"].is_null());

    // The same store with the options taken out of its MANIFEST, as an earlier version wrote it.
    let manifest_fs = strata::fs::RealFs;
    let mut manifest = strata::store::manifest::Manifest::load(&manifest_fs, dir.path())
        .unwrap()
        .unwrap();
    manifest.logs.iter_mut().for_each(|l| l.options = None);
    manifest.store(&manifest_fs, dir.path()).unwrap();
    let stderr = strata_refuses(&["compact".as_ref(), d, "kv".as_ref()]);
    assert!(stderr.contains("no recorded options"), "{stderr}");
    let again = strata(&[
        "read".as_ref(),
        d,
        "kv".as_ref(),
        "--max".as_ref(),
        "100".as_ref(),
    ]);
    assert_eq!(again, lines, "nothing changed");
}

/// `strata positions` lists each consumer's position with its lag, resets one partition or
/// all of them (refusing an offset outside the partition, changing nothing), and deletes.
#[test]
fn positions_are_listed_reset_and_deleted() {
    use strata::event_log::{CommittedPosition, ConsumerPositions};
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        let log = store.open_log("orders", 2, LogOptions::default()).unwrap();
        for partition in 0..2 {
            let records = (0..10)
                .map(|_| NewRecord::value(1, Bytes::from_static(b"o")))
                .collect();
            log.append_blocking(partition, records).unwrap();
        }
        let positions = ConsumerPositions::open(&store).unwrap();
        rt.block_on(positions.commit("orders", "billing", 0, 4))
            .unwrap();
        rt.block_on(positions.commit("orders", "billing", 1, 10))
            .unwrap();
        rt.block_on(positions.commit("orders", "audit", 0, 0))
            .unwrap();
        drop(positions);
        store.close_blocking().unwrap();
    }
    let d = dir.path().as_os_str();
    let run = |args: &[&str]| {
        let mut all: Vec<&std::ffi::OsStr> = vec!["positions".as_ref(), args[0].as_ref(), d];
        all.extend(args[1..].iter().map(std::ffi::OsStr::new));
        strata(&all)
    };
    let table = run(&["list"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["orders", "audit", "0", "0", "10", "10"],
            vec!["orders", "billing", "0", "4", "10", "6"],
            vec!["orders", "billing", "1", "10", "10", "0"],
        ],
        "{table}"
    );
    let json = run(&["list", "--json"]);
    let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(first["consumer"], "audit");
    assert_eq!(first["lag"], 10);

    run(&[
        "reset",
        "orders",
        "billing",
        "--partition",
        "0",
        "--to",
        "7",
    ]);
    run(&["reset", "orders", "audit", "--latest"]);
    let reset = ["positions", "reset", "orders", "billing", "--to", "11"].map(std::ffi::OsStr::new);
    let stderr = strata_refuses(&[&reset[..2], &[d], &reset[2..]].concat());
    assert!(
        stderr.contains("outside") && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    let committed: Vec<(String, u64, i64)> = run(&["list", "--json"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            let consumer = v["consumer"].as_str().unwrap().to_string();
            (
                consumer,
                v["partition"].as_u64().unwrap(),
                v["committed"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("audit", 0, 10),
        ("audit", 1, 10),
        ("billing", 0, 7),
        ("billing", 1, 10),
    ];
    let expected: Vec<(String, u64, i64)> = expected
        .iter()
        .map(|(c, p, o)| (c.to_string(), *p, *o))
        .collect();
    assert_eq!(
        committed, expected,
        "reset as asked, and the refused reset changed nothing"
    );
    let deleted = run(&["delete", "orders", "billing"]);
    assert!(deleted.contains("2 position(s) deleted"), "{deleted}");

    let store = Store::open(dir.path()).unwrap();
    let positions = ConsumerPositions::open(&store).unwrap();
    let at = |consumer: &str, partition, offset| CommittedPosition {
        log: "orders".into(),
        consumer: consumer.into(),
        partition,
        offset,
    };
    assert_eq!(
        positions.positions(),
        vec![at("audit", 0, 10), at("audit", 1, 10)]
    );
}

/// With an application (this test) holding the store open and appending: `read`, `tail`,
/// `inspect` and `positions list` work without its lock and change nothing, `tail --follow` prints what is appended
/// after it started (across segment rolls), and the commands that need the store's lock say
/// it is held, changing nothing.
#[test]
fn the_read_tools_work_on_a_store_an_application_holds_open() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let options = LogOptions::default().with_segment_bytes(4096);
    let log = store.open_log("events", 1, options).unwrap();
    let append = |i: usize| {
        let value = Bytes::from(format!("{i:04}-{}", "x".repeat(900)));
        log.append_blocking(0, vec![NewRecord::value(1, value)])
            .unwrap();
    };
    (0..5).for_each(append);
    let d = dir.path().as_os_str();
    let offsets = |out: String| -> Vec<i64> {
        let parse = |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap();
        out.lines()
            .map(|l| parse(l)["offset"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        offsets(strata(&["read".as_ref(), d, "events".as_ref()])),
        vec![0, 1, 2, 3, 4]
    );
    let tail = strata(&[
        "tail".as_ref(),
        d,
        "events".as_ref(),
        "--last".as_ref(),
        "2".as_ref(),
    ]);
    assert_eq!(offsets(tail), vec![3, 4]);
    let last = ["tail", "events", "--last", "0"].map(std::ffi::OsStr::new);
    let none = strata(&[&last[..1], &[d], &last[1..]].concat());
    assert_eq!(offsets(none), Vec::<i64>::new(), "no record asked for");
    assert!(strata(&["inspect".as_ref(), d]).contains("log \"events\""));

    let mut follower = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "tail".as_ref(),
            d,
            "events".as_ref(),
            "--last".as_ref(),
            "1".as_ref(),
        ])
        .arg("--follow")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if lines_tx.send(v["offset"].as_i64().unwrap()).is_err() {
                return;
            }
        }
    });
    let wait = std::time::Duration::from_secs(20);
    assert_eq!(lines.recv_timeout(wait), Ok(4), "the last record first");
    (5..25).for_each(append);
    let followed: Vec<i64> = (5..25).map(|_| lines.recv_timeout(wait).unwrap()).collect();
    assert_eq!(
        followed,
        (5..25).collect::<Vec<i64>>(),
        "every append, in order"
    );
    follower.kill().unwrap();
    follower.wait().unwrap();

    let positions = strata::event_log::ConsumerPositions::open(&store).unwrap();
    let commit = positions.commit("events", "reader", 0, 20);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(commit)
        .unwrap();
    let listed = strata(&["positions".as_ref(), "list".as_ref(), d]);
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        row,
        vec!["events", "reader", "0", "20", "25", "5"],
        "{listed}"
    );
    for args in [
        vec!["compact".as_ref(), d, "events".as_ref()],
        vec![
            "positions".as_ref(),
            "delete".as_ref(),
            d,
            "events".as_ref(),
            "reader".as_ref(),
        ],
    ] {
        let stderr = strata_refuses(&args);
        assert!(stderr.contains("already open"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("run beside the application"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(log.high_water_mark(0).unwrap(), 25);
    drop(log);
    store.close_blocking().unwrap();
}
