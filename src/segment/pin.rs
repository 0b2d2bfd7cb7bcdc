//! Bytes of deleted segments that records handed to callers still pin.
//!
//! Records read from a sealed segment are zero-copy slices of its mapping, so the mapping (and
//! with it the unlinked file's disk blocks) lives until the last such record is dropped. A
//! [`PinGuard`] owns each mapping; once its segment is deleted, its length counts in the log's
//! [`PinCounter`] until the mapping is really gone. Callers that keep records for long should
//! copy them (`Bytes::copy_from_slice`) so retention frees the space.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// Bytes of deleted segments still mapped, for one log.
#[derive(Debug, Default)]
pub struct PinCounter {
    bytes: AtomicU64,
}

impl PinCounter {
    /// Bytes of deleted segments whose mapping is still alive.
    pub fn pinned_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }
}

const LIVE: u8 = 0;
const DELETED: u8 = 1;
const DROPPED: u8 = 2;

/// Shared between a segment and the owner of its mapping.
#[derive(Debug)]
struct PinState {
    state: AtomicU8,
    len: u64,
    counter: Arc<PinCounter>,
}

/// The owner of a segment's mapping: counts it as pinned from deletion until it is dropped.
struct PinGuard {
    map: Bytes,
    state: Arc<PinState>,
}

impl AsRef<[u8]> for PinGuard {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if self.state.state.swap(DROPPED, Ordering::AcqRel) == DELETED {
            self.state
                .counter
                .bytes
                .fetch_sub(self.state.len, Ordering::AcqRel);
        }
    }
}

/// The handle a segment keeps to mark its mapping deleted.
#[derive(Debug)]
pub struct Pin {
    state: Arc<PinState>,
}

impl Pin {
    /// Wraps `map` so that its lifetime after [`Pin::deleted`] counts in `counter`.
    pub fn wrap(map: Bytes, counter: Arc<PinCounter>) -> (Bytes, Pin) {
        let state = Arc::new(PinState {
            state: AtomicU8::new(LIVE),
            len: map.len() as u64,
            counter,
        });
        let owner = PinGuard {
            map,
            state: state.clone(),
        };
        (Bytes::from_owner(owner), Pin { state })
    }

    /// The segment's file was deleted: its mapping counts as pinned until dropped.
    pub fn deleted(&self) {
        let state = &self.state;
        state.counter.bytes.fetch_add(state.len, Ordering::AcqRel);
        if state
            .state
            .compare_exchange(LIVE, DELETED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Already dropped (or already marked): take the count back.
            state.counter.bytes.fetch_sub(state.len, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_mapping_counts_until_its_last_slice_is_dropped() {
        let counter = Arc::new(PinCounter::default());
        let (bytes, pin) = Pin::wrap(Bytes::from(vec![7u8; 100]), counter.clone());
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(counter.pinned_bytes(), 0);
        pin.deleted();
        assert_eq!(counter.pinned_bytes(), 100);
        pin.deleted();
        assert_eq!(counter.pinned_bytes(), 100, "marking twice counts once");
        drop(slice);
        assert_eq!(counter.pinned_bytes(), 0);
        let (bytes, pin) = Pin::wrap(Bytes::from(vec![1u8; 8]), counter.clone());
        drop(bytes);
        pin.deleted();
        assert_eq!(
            counter.pinned_bytes(),
            0,
            "a mapping already gone pins nothing"
        );
    }
}
