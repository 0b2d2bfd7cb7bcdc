use std::time::Instant;
use strata::{LogOptions, Store};
fn main() {
    let dir = std::path::PathBuf::from("/tmp/zz_reopen");
    let n = 10_000;
    if !dir.exists() {
        let store = Store::open(&dir).unwrap();
        let log = store.open_log("wide", n, LogOptions::default()).unwrap();
        for p in 0..n {
            log.append_blocking(
                p,
                vec![strata::NewRecord::value(1, bytes::Bytes::from_static(b"x"))],
            )
            .unwrap();
        }
        store.close_blocking().unwrap();
    }
    for _ in 0..3 {
        let t = Instant::now();
        let store = Store::open(&dir).unwrap();
        let log = store.open_log("wide", n, LogOptions::default()).unwrap();
        println!("reopen {:?}", t.elapsed());
        let t = Instant::now();
        drop(log);
        store.close_blocking().unwrap();
        println!("close {:?}", t.elapsed());
    }
}
