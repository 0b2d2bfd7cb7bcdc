//! The fault layer's model of thread interleavings: one thread (named by a prefix, such as a
//! log's journal preparer `strata-prep-`) is held just before its Nth file operation while the
//! other threads go on, until they have made a given number of operations; then it runs.
//!
//! Background threads (the journal preparer, checkpoints, detached syncs, maintenance, the cold
//! worker, a group's apply thread) write outside the locks their foreground takes, and a crash
//! suite that runs one step at a time sees them only where the scheduler happens to put them. A
//! hold puts a background operation at a chosen place among the foreground's: an explorer runs a
//! workload once per (operation of the held thread, operations of the others before it runs)
//! and checks the crash images each run leaves.
//!
//! A hold never deadlocks a workload: when the other threads make no operation for
//! [`QUIET`] (they wait for the held thread, or the workload ended), the held thread runs.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::fault::{OpKind, OpKinds};

/// How long the other threads may make no operation before a held thread is let go (they may
/// be waiting for it).
pub const QUIET: Duration = Duration::from_millis(20);

/// Which thread to hold, before which of its operations, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadHold {
    /// Threads whose name starts with this are held (and counted).
    pub thread: String,
    /// The operation of those threads (counted from 0, among `kinds`) held back; `u64::MAX`
    /// only counts them.
    pub before: u64,
    /// The kinds of operation counted.
    pub kinds: OpKinds,
    /// Operations the other threads make (of any kind) before the held one runs.
    pub others: u64,
    /// Cut the power just before the held threads' next operation after the held one (so the
    /// held one is the last thing they did): a crash image then shows what it left.
    pub cut_after: bool,
}

/// What a hold saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldReport {
    /// Operations of the held threads counted (among the hold's kinds).
    pub counted: u64,
    /// Whether a held thread reached the operation it was held before.
    pub reached: bool,
    /// Operations the other threads made while it was held.
    pub others_ran: u64,
    /// Whether it was let go because the others stopped making operations.
    pub quiet: bool,
    /// Whether the power was cut after the held operation ([`ThreadHold::cut_after`]).
    pub cut: bool,
}

#[derive(Debug, Default)]
struct HoldState {
    hold: Option<ThreadHold>,
    report: HoldReport,
    /// Operations by threads the hold does not name.
    others: u64,
    /// The held operation ran: cut the power before the held threads' next one.
    cut_next: bool,
    /// Bumped whenever the hold is replaced: a thread held under an older hold goes on.
    generation: u64,
}

/// The hold of a [`super::FaultFs`] (shared by its files and mappings).
#[derive(Debug, Default)]
pub(super) struct Interleaving {
    state: Mutex<HoldState>,
    changed: Condvar,
}

impl Interleaving {
    fn lock(&self) -> MutexGuard<'_, HoldState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the hold (the report starts again); a thread held under the old one goes on.
    pub fn set(&self, hold: Option<ThreadHold>) {
        let mut state = self.lock();
        state.hold = hold;
        state.report = HoldReport::default();
        state.cut_next = false;
        state.generation += 1;
        drop(state);
        self.changed.notify_all();
    }

    /// What the current hold saw.
    pub fn report(&self) -> HoldReport {
        self.lock().report
    }

    /// Called by the calling thread before each file operation of `kind`: counts it, and holds
    /// the thread here if this is the operation its hold names. True when the power must be cut
    /// before this operation.
    pub fn pass(&self, kind: OpKind) -> bool {
        let mut state = self.lock();
        let Some(hold) = &state.hold else {
            return false;
        };
        let current = std::thread::current();
        let mine = current
            .name()
            .is_some_and(|name| name.starts_with(&hold.thread));
        let (before, wanted, cut_after) = (hold.before, hold.others, hold.cut_after);
        let counted = hold.kinds.contains(kind);
        if !mine {
            state.others += 1;
            drop(state);
            self.changed.notify_all();
            return false;
        }
        if std::mem::take(&mut state.cut_next) {
            state.report.cut = true;
            return true;
        }
        if !counted {
            return false;
        }
        state.report.counted += 1;
        if state.report.counted - 1 != before {
            return false;
        }
        state.report.reached = true;
        let (start, generation) = (state.others, state.generation);
        while state.others - start < wanted && state.generation == generation {
            let seen = state.others;
            let (next, waited) = self
                .changed
                .wait_timeout(state, QUIET)
                .unwrap_or_else(|p| p.into_inner());
            state = next;
            if waited.timed_out() && state.others == seen {
                state.report.quiet = true;
                break;
            }
        }
        state.report.others_ran = state.others - start;
        state.cut_next = cut_after;
        false
    }
}
