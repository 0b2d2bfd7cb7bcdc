//! Group commit for a journaled log: the first waiter leads.
//!
//! An append writes its frames into the journal and waits until the journal is durable past
//! them. The first waiter that finds no sync running leads one: it takes the journal's current
//! end, fdatasyncs the journal file (every frame written so far, by any writer, rides along),
//! publishes what became durable in every partition, and wakes the others; a waiter whose frames
//! came after that end leads the next round. No thread is spawned and nothing is handed to
//! another thread: the leader is an appending thread (an async appender leads through
//! [`crate::blocking::blocking`], so the executor is not held).

use std::sync::{Condvar, Mutex, MutexGuard};

use tokio::sync::watch;

use super::append::poisoned;
use super::LogInner;
use crate::error::{StoreError, StoreResult};

#[derive(Debug, Default)]
struct CommitState {
    /// Journal position made durable.
    synced: u64,
    /// A round is running.
    syncing: bool,
    /// The last failed round: frames up to this position may or may not be durable.
    failed: Option<(u64, String)>,
}

/// The group commit of one journaled log.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<CommitState>,
    done: Condvar,
    /// The durable position, for async waiters.
    synced: watch::Sender<u64>,
}

/// What a waiter should do next.
enum Step {
    Done(StoreResult<()>),
    Lead,
    Wait,
}

impl GroupCommit {
    /// A group commit whose journal is durable up to `synced`.
    pub fn new(synced: u64) -> Self {
        Self {
            state: Mutex::new(CommitState {
                synced,
                ..CommitState::default()
            }),
            done: Condvar::new(),
            synced: watch::channel(synced).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, CommitState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn step(state: &mut CommitState, lsn: u64) -> Step {
        if state.synced >= lsn {
            return Step::Done(Ok(()));
        }
        if let Some((upto, reason)) = &state.failed {
            if lsn <= *upto {
                return Step::Done(Err(poisoned(u32::MAX, &format!("journal: {reason}"))));
            }
        }
        if state.syncing {
            Step::Wait
        } else {
            state.syncing = true;
            Step::Lead
        }
    }

    /// Blocks until the journal is durable past `lsn`, leading rounds as needed.
    pub fn wait(&self, log: &LogInner, lsn: u64) -> StoreResult<()> {
        let mut state = self.lock();
        loop {
            match Self::step(&mut state, lsn) {
                Step::Done(result) => return result,
                Step::Lead => {
                    drop(state);
                    self.lead(log);
                    state = self.lock();
                }
                Step::Wait => {
                    state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }

    /// Waits until the journal is durable past `lsn`, leading rounds as needed.
    pub async fn wait_async(&self, log: &LogInner, lsn: u64) -> StoreResult<()> {
        let mut changes = self.synced.subscribe();
        loop {
            let step = Self::step(&mut self.lock(), lsn);
            match step {
                Step::Done(result) => return result,
                Step::Lead => crate::blocking::blocking(|| self.lead(log)),
                Step::Wait => {
                    if changes.changed().await.is_err() {
                        return Err(StoreError::Closed);
                    }
                }
            }
        }
    }

    /// Runs one round: syncs the journal to its current end, publishes, wakes the waiters.
    fn lead(&self, log: &LogInner) {
        let outcome = log.sync_journal();
        let mut state = self.lock();
        state.syncing = false;
        match outcome {
            Ok(upto) => state.synced = state.synced.max(upto),
            Err((upto, e)) => state.failed = Some((upto, e.to_string())),
        }
        let synced = state.synced;
        drop(state);
        log.publish_journaled(synced);
        self.synced.send_replace(synced);
        self.done.notify_all();
    }

    /// The position the journal is durable to.
    pub fn synced(&self) -> u64 {
        self.lock().synced
    }
}
