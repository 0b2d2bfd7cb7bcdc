//! A count of holds: guards that keep some deletion from happening while they live (a backup
//! holds a log's segment deletions and a cold store's object deletions).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many [`Hold`]s are alive (cheap to clone: clones share the count).
#[derive(Debug, Clone, Default)]
pub(crate) struct Holds {
    count: Arc<AtomicUsize>,
}

/// One hold, released when dropped.
#[derive(Debug)]
pub struct Hold {
    count: Arc<AtomicUsize>,
}

impl Holds {
    /// Takes a hold until the guard drops.
    pub fn hold(&self) -> Hold {
        self.count.fetch_add(1, Ordering::AcqRel);
        Hold {
            count: self.count.clone(),
        }
    }

    /// True while any hold is alive.
    pub fn held(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_while_any_guard_of_any_clone_lives() {
        let holds = Holds::default();
        assert!(!holds.held());
        let first = holds.hold();
        let second = holds.clone().hold();
        drop(first);
        assert!(holds.held());
        drop(second);
        assert!(!holds.held());
    }
}
