//! Process-wide helper threads of the group engine (the digest helper, the apply thread): each
//! is started on first use and fed through a channel (whose sender every thread shares without
//! a lock); a process that cannot start one does the work in the caller instead.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard};

/// Starts thread `name`, which runs `serve` on the receiving end of the returned sender (it
/// should return once every sender is gone); `None` (with a warning that `fallback` happens
/// instead) if the system refuses a thread.
pub(crate) fn start<T: Send + 'static>(
    name: &str,
    fallback: &str,
    serve: impl FnOnce(Receiver<T>) + Send + 'static,
) -> Option<Sender<T>> {
    let (send, receive) = channel::<T>();
    let started = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || serve(receive));
    match started {
        Ok(_) => Some(send),
        Err(e) => {
            tracing::warn!(error = %e, thread = name, "no {name} thread; {fallback}");
            None
        }
    }
}

/// Locks `m`, taking over a lock poisoned by a panic elsewhere (the data is a plain value).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
