//! Bytes of deleted segments that records handed to callers still pin.
//!
//! Records read from a segment are zero-copy slices of its mapping, so the mapping (and with it
//! the unlinked file's disk blocks) lives until the last such record is dropped. Every byte
//! string a segment hands out is wrapped by its [`Pin`]; once the segment is deleted, its length
//! counts in the partition's [`PinCounter`] until the last of them is gone. Callers that keep
//! records for long should copy them (`Bytes::copy_from_slice`) so retention frees the space.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Bytes of deleted segments still mapped, for one partition.
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

#[derive(Debug, Default)]
struct PinState {
    /// Byte strings handed out and still alive.
    live: usize,
    /// Bytes counted in the counter (the segment was deleted while some were alive).
    counted: u64,
}

/// One segment's record of what it handed out.
#[derive(Debug, Clone)]
pub struct Pin {
    state: Arc<Mutex<PinState>>,
    counter: Arc<PinCounter>,
}

/// Owns a handed-out byte string; its drop may end the segment's pin.
struct Guard {
    bytes: Bytes,
    pin: Pin,
}

impl AsRef<[u8]> for Guard {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut state = self.pin.lock();
        state.live -= 1;
        if state.live == 0 && state.counted > 0 {
            self.pin
                .counter
                .bytes
                .fetch_sub(state.counted, Ordering::AcqRel);
            state.counted = 0;
        }
    }
}

impl Pin {
    /// A segment's pin, counting into `counter`.
    pub fn new(counter: Arc<PinCounter>) -> Self {
        Self {
            state: Arc::new(Mutex::new(PinState::default())),
            counter,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PinState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands out `bytes` (a view of the segment's mapping) under this pin.
    pub fn guard(&self, bytes: Bytes) -> Bytes {
        self.lock().live += 1;
        Bytes::from_owner(Guard {
            bytes,
            pin: self.clone(),
        })
    }

    /// The segment's file (of `len` bytes) was deleted: while byte strings it handed out live,
    /// they pin that much.
    pub fn deleted(&self, len: u64) {
        let mut state = self.lock();
        if state.live > 0 && state.counted == 0 {
            state.counted = len;
            self.counter.bytes.fetch_add(len, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_segment_counts_until_its_last_slice_is_dropped() {
        let counter = Arc::new(PinCounter::default());
        let pin = Pin::new(counter.clone());
        let bytes = pin.guard(Bytes::from(vec![7u8; 100]));
        let other = pin.guard(Bytes::from(vec![7u8; 100]));
        let slice = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(counter.pinned_bytes(), 0);
        pin.deleted(100);
        assert_eq!(counter.pinned_bytes(), 100);
        pin.deleted(100);
        assert_eq!(counter.pinned_bytes(), 100, "marking twice counts once");
        drop(slice);
        assert_eq!(
            counter.pinned_bytes(),
            100,
            "another handed-out string is alive"
        );
        drop(other);
        assert_eq!(counter.pinned_bytes(), 0);
        let pin = Pin::new(counter.clone());
        drop(pin.guard(Bytes::from(vec![1u8; 8])));
        pin.deleted(8);
        assert_eq!(counter.pinned_bytes(), 0, "nothing alive pins nothing");
    }
}
