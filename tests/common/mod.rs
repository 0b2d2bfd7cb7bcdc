//! Shared harness of the crash suites: run one ignored test of this test binary as a child
//! process, kill it with SIGKILL mid-flight, and keep what it printed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs the ignored test `child` of the current test binary with `env`, sends it SIGKILL after
/// `run_for`, and returns the lines it printed completely (a kill may cut the last one; a cut
/// line is not a complete acknowledgement and is dropped).
#[allow(dead_code)]
pub fn run_and_kill(child: &str, env: &[(&str, String)], run_for: Duration) -> Vec<String> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut process = Command::new(exe)
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = process.stdout.take().expect("a piped stdout");
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(n) if n > 0 && line.ends_with('\n') => lines.push(line.trim_end().to_string()),
                _ => break,
            }
        }
        lines
    });
    std::thread::sleep(run_for);
    process.kill().expect("SIGKILL the child");
    process.wait().expect("reap the child");
    reader.join().expect("the reader thread")
}

/// A store on the fault-injecting file layer over `dir`, with the layer to steer it.
#[allow(dead_code)]
pub fn fault_store(dir: &std::path::Path) -> (strata::fs::FaultFs, strata::Store) {
    let fs = strata::fs::FaultFs::new(dir).expect("the fault layer");
    let options = strata::StoreOptions::default().with_fs(fs.shared());
    let store = strata::Store::open_with(dir, options).expect("a store on the fault layer");
    (fs, store)
}

#[allow(dead_code)]
/// Runs `f` with a tracing subscriber that captures every event as text; returns both.
pub fn traced<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // While no scoped subscriber has ever existed in the process, tracing registers a callsite
    // by computing its interest from the global dispatcher (none: "never") without a lock, and
    // publishes it afterwards; a callsite another test thread registers that way while ours
    // is installed keeps "never", and its events never reach this subscriber (seen twice in a
    // parallel run). A first scoped subscriber switches every later registration to a locked
    // path; the pause lets registrations already under way finish; installing ours and
    // rebuilding the interest cache then covers every callsite.
    static FIRST: std::sync::Once = std::sync::Once::new();
    FIRST.call_once(|| {
        drop(tracing::subscriber::set_default(
            tracing::subscriber::NoSubscriber::default(),
        ));
        std::thread::sleep(std::time::Duration::from_millis(5));
    });
    let out = tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        f()
    });
    let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    (out, text)
}

/// Runs `work` on `rt` beside a task that yields in a loop (started first, so a stall of
/// `work` is a gap it sees); answers the longest time between two of that task's turns (the
/// longest anything held the executor) and what `work` gave.
#[allow(dead_code)]
pub fn longest_stall<T>(
    rt: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T>,
) -> (Duration, T) {
    use std::sync::atomic::{AtomicBool, Ordering};
    rt.block_on(async {
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let ticker = tokio::spawn(async move {
            let (mut last, mut longest) = (std::time::Instant::now(), Duration::ZERO);
            while !flag.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
                longest = longest.max(last.elapsed());
                last = std::time::Instant::now();
            }
            longest
        });
        tokio::task::yield_now().await;
        let out = work.await;
        done.store(true, Ordering::Release);
        (ticker.await.expect("the ticker ends"), out)
    })
}
