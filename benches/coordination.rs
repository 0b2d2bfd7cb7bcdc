//! Criterion benches of the coordination transport: `acquire_epoch` and `write_lease` latency,
//! each beside RocksDB doing the same durable work in the same run (read the role's current token,
//! check or bump it, write the record with a synced WAL).

use std::sync::Mutex;

mod common;
use common::runtime;
use criterion::{criterion_group, criterion_main, Criterion};
use strata::coordination::{
    CoordinationTransport, DiskCoordinationTransport, FencingToken, Lease, MemberId, Role,
};
use strata::Store;

/// RocksDB doing what the transport does: token per role under a lock, records synced.
struct RocksCoordination {
    db: rocksdb::DB,
    lock: Mutex<()>,
    sync: rocksdb::WriteOptions,
}

impl RocksCoordination {
    fn open(path: &std::path::Path) -> Self {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let mut sync = rocksdb::WriteOptions::default();
        sync.set_sync(true);
        Self {
            db: rocksdb::DB::open(&opts, path).unwrap(),
            lock: Mutex::new(()),
            sync,
        }
    }

    fn token(&self, role: &str) -> Option<(i64, i16)> {
        self.db.get(format!("epoch/{role}")).unwrap().map(|v| {
            let id = i64::from_be_bytes(v[..8].try_into().unwrap());
            (id, i16::from_be_bytes([v[8], v[9]]))
        })
    }

    fn acquire(&self, role: &str) -> (i64, i16) {
        let _g = self.lock.lock().unwrap();
        let next = match self.token(role) {
            Some((id, e)) if e < i16::MAX => (id, e + 1),
            Some((id, _)) => (id + 1, 0),
            None => (0, 0),
        };
        let mut v = next.0.to_be_bytes().to_vec();
        v.extend_from_slice(&next.1.to_be_bytes());
        self.db
            .put_opt(format!("epoch/{role}"), v, &self.sync)
            .unwrap();
        next
    }

    fn write_lease(&self, role: &str, token: (i64, i16), lease: &[u8]) {
        let _g = self.lock.lock().unwrap();
        assert_eq!(self.token(role), Some(token), "fenced");
        self.db
            .put_opt(format!("lease/{role}"), lease, &self.sync)
            .unwrap();
    }
}

fn coordination(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("strata")).unwrap();
    let transport = DiskCoordinationTransport::open(&store).unwrap();
    let rocks = RocksCoordination::open(&dir.path().join("rocksdb"));
    let role = Role::new("controller").unwrap();

    let mut group = c.benchmark_group("acquire_epoch");
    group.sample_size(30);
    group.bench_function("strata", |b| {
        b.iter(|| rt.block_on(transport.acquire_epoch(&role)).unwrap())
    });
    group.bench_function("rocksdb", |b| b.iter(|| rocks.acquire("controller")));
    group.finish();

    let token: FencingToken = rt.block_on(transport.acquire_epoch(&role)).unwrap();
    let lease = Lease {
        member: MemberId::new("node-1").unwrap(),
        token,
        granted_at: 1,
        deadline: 2,
    };
    let rocks_token = rocks.acquire("controller");
    let mut group = c.benchmark_group("write_lease");
    group.sample_size(30);
    group.bench_function("strata", |b| {
        b.iter(|| {
            rt.block_on(transport.write_lease(&role, token, &lease))
                .unwrap()
        })
    });
    group.bench_function("rocksdb", |b| {
        b.iter(|| rocks.write_lease("controller", rocks_token, b"node-1 lease bytes"))
    });
    group.finish();
}

criterion_group!(benches, coordination);
criterion_main!(benches);
