//! Blocking file work called from async code (synced RocksDB writes, fsyncs, unlinks, segment
//! reads) without stalling the executor.
//!
//! On a multi-thread tokio runtime the work runs under `block_in_place`: the worker hands its
//! other tasks to a fresh worker first, so nothing else waits for the disk. Outside a runtime,
//! and on a current-thread runtime (which has no second worker to hand tasks to; ursula's
//! thread-per-core mode gives each core such a runtime on a thread of its own), it runs inline.

use tokio::runtime::RuntimeFlavor;

/// Runs `f`, which may block on I/O, without holding up other tasks of a multi-thread runtime.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match runtime_flavor() {
        Some(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// True when [`blocking`] would run its work inline on an executor thread (a current-thread
/// runtime), holding up that runtime's other tasks for as long as the work takes.
pub fn runs_inline_on_executor() -> bool {
    runtime_flavor() == Some(RuntimeFlavor::CurrentThread)
}

/// The flavor of the tokio runtime the caller runs on, if any.
fn runtime_flavor() -> Option<RuntimeFlavor> {
    tokio::runtime::Handle::try_current()
        .ok()
        .map(|h| h.runtime_flavor())
}

/// Runs `f`, which blocks on I/O, where it holds up no other task: under `block_in_place` on a
/// multi-thread runtime (inline outside a runtime), on tokio's blocking pool on a
/// current-thread runtime ([`off_executor`]).
pub async fn aside<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: From<crate::error::StoreError> + Send + 'static,
{
    match runs_inline_on_executor() {
        true => off_executor(f).await,
        false => blocking(f),
    }
}

/// Runs `f`, which blocks on I/O for a while (opening a store, a log or an engine), on tokio's
/// blocking pool and awaits it, so no executor thread waits for it (a current-thread runtime's
/// other tasks go on). A panic in `f` resumes in the caller. Dropping the future lets `f` run to
/// its end and drops what it returns.
pub async fn off_executor<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: From<crate::error::StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(crate::error::StoreError::Closed.into()),
    }
}
