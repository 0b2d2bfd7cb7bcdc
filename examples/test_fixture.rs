//! Strata as the disk-backed fixture of a test suite: each test opens a fresh store in a
//! temporary directory (cheap: no RocksDB unless a group is opened), exercises code against a
//! real log, and can restart the store to check what survives. (When a test needs no restart,
//! `strata::TemporaryStore::new()` is quicker still: it skips every sync and cleans up itself.)
//!
//! `cargo test --example test_fixture`

use bytes::Bytes;
use strata::{Log, LogOptions, NewRecord, Store};

/// A store in a temporary directory, removed when the fixture drops.
pub struct Fixture {
    dir: tempfile::TempDir,
    store: Option<Store>,
}

impl Fixture {
    /// A fresh, empty store.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(dir.path()).expect("a fresh store");
        Self {
            dir,
            store: Some(store),
        }
    }

    /// The log `name` with `partitions` partitions (created on first use).
    pub fn log(&self, name: &str, partitions: u32) -> Log {
        let store = self.store.as_ref().expect("the store is open");
        store
            .open_log(name, partitions, LogOptions::default())
            .expect("the log opens")
    }

    /// Closes the store cleanly and opens it again, as a process restart would.
    pub fn restart(&mut self) {
        if let Some(store) = self.store.take() {
            store.close_blocking().expect("a clean close");
        }
        self.store = Some(Store::open(self.dir.path()).expect("the store reopens"));
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

/// The code under test: an audit trail that appends one record per action.
fn record_action(log: &Log, action: &str) -> i64 {
    let record = NewRecord::value(strata::now_ms(), Bytes::from(action.to_string()));
    log.append_blocking(0, vec![record]).expect("appended").0
}

#[test]
fn actions_survive_a_restart() {
    let mut fixture = Fixture::new();
    let first = record_action(&fixture.log("audit", 1), "login");
    record_action(&fixture.log("audit", 1), "logout");
    fixture.restart();
    let log = fixture.log("audit", 1);
    assert_eq!(log.high_water_mark(0).unwrap(), first + 2);
    let page = log.read(0, first, 1 << 20).unwrap();
    let actions: Vec<_> = page
        .records
        .iter()
        .map(|r| r.value.clone().unwrap())
        .collect();
    assert_eq!(actions, [Bytes::from("login"), Bytes::from("logout")]);
}

#[test]
fn each_test_gets_its_own_store() {
    let fixture = Fixture::new();
    assert_eq!(fixture.log("audit", 1).high_water_mark(0).unwrap(), 0);
}

/// Run as a program, it shows the fixture once; `cargo test --example test_fixture` runs the
/// tests above.
fn main() {
    let mut fixture = Fixture::new();
    record_action(&fixture.log("audit", 1), "demo");
    fixture.restart();
    let high = fixture
        .log("audit", 1)
        .high_water_mark(0)
        .expect("a water mark");
    println!("after a restart the audit log holds {high} record(s)");
}
