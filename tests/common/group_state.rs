//! Direct access to the RocksDB of group state, as a tool would (the store closed): the store's
//! shared database, and the per-group layout of earlier versions, which a test makes from a
//! group of the shared one to check the move at open.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rocksdb::{IteratorMode, Options, WriteBatch, DB};

/// The store's state database, every column family open.
pub fn shared_db(root: &Path) -> DB {
    open_all(&root.join("group_state"))
}

/// Where the per-group layout kept group `name`'s database.
pub fn per_group_dir(root: &Path, name: &str) -> PathBuf {
    root.join("groups").join(name)
}

/// A per-group database (or any RocksDB directory), every column family open.
pub fn open_all(path: &Path) -> DB {
    let options = Options::default();
    let families = DB::list_cf(&options, path).expect("column families");
    DB::open_cf(&options, path, families).expect("the RocksDB of group state")
}

/// Group `name`'s key prefix in the shared database (format/GROUP_STATE.md, "Layout").
pub fn prefix(name: &str) -> Vec<u8> {
    let mut p = vec![name.len() as u8];
    p.extend_from_slice(name.as_bytes());
    p
}

/// `key` under group `name`'s prefix.
pub fn key(name: &str, key: impl AsRef<[u8]>) -> Vec<u8> {
    let mut k = prefix(name);
    k.extend_from_slice(key.as_ref());
    k
}

/// Moves group `name` of the closed store at `root` back to the per-group layout: its rows
/// leave the shared database (durably) for a database of its own at `groups/<name>`, keys
/// without the prefix, flushed, as an earlier version left it.
pub fn to_per_group_layout(root: &Path, name: &str) {
    copy_to_per_group_layout(root, name);
    remove_from_shared(root, name);
}

/// The first half of [`to_per_group_layout`]: group `name`'s rows copied (durably) into a
/// database of its own at `groups/<name>`, and still in the shared one.
pub fn copy_to_per_group_layout(root: &Path, name: &str) {
    let shared = shared_db(root);
    let old_path = per_group_dir(root, name);
    std::fs::create_dir_all(old_path.parent().expect("groups/")).expect("groups/");
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    let families: Vec<String> =
        DB::list_cf(&Options::default(), root.join("group_state")).expect("column families");
    let old = DB::open_cf(&options, &old_path, &families).expect("a per-group database");
    let p = prefix(name);
    for family in &families {
        let (from, to) = (
            shared.cf_handle(family).expect("family"),
            old.cf_handle(family).expect("family"),
        );
        for item in shared.iterator_cf(from, IteratorMode::From(&p, rocksdb::Direction::Forward)) {
            let (k, v) = item.expect("a row");
            if !k.starts_with(&p) {
                break;
            }
            old.put_cf(to, &k[p.len()..], v).expect("copied");
        }
        old.flush_cf(to).expect("flushed");
    }
}

/// The second half of [`to_per_group_layout`]: group `name`'s rows deleted (durably) from the
/// shared database.
pub fn remove_from_shared(root: &Path, name: &str) {
    let shared = shared_db(root);
    let p = prefix(name);
    let mut end = p.clone();
    *end.last_mut().expect("a prefix") += 1;
    for family in DB::list_cf(&Options::default(), root.join("group_state")).expect("families") {
        let cf = shared.cf_handle(&family).expect("family");
        let mut removed = WriteBatch::default();
        removed.delete_range_cf(cf, &p, &end);
        shared.write(removed).expect("removed");
        shared.flush_cf(cf).expect("flushed");
    }
}
