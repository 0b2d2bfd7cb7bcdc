//! Cold-GC entries whose delete failed: set aside (re-queued at the back, due again after a
//! backoff that doubles with each failure) so that one object the store refuses to delete for
//! good (object lock, legal hold, a bucket policy) never stops the queue behind it.
//!
//! The failures are counted in memory: after a restart a set-aside entry is retried at the
//! next pass that finds it due, and its backoff starts again from the base.

use std::collections::BTreeMap;
use std::time::Duration;

/// A GC entry set aside after failed deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdGcFailure {
    /// The entry's sequence in the queue now (it changes each time the entry is set aside).
    pub seq: u64,
    /// Passes whose delete of this entry failed.
    pub attempts: u32,
    /// When the entry is due again (ms since the Unix epoch).
    pub retry_at_ms: u64,
    /// The last error.
    pub error: String,
}

/// Longest backoff of a set-aside entry, unless the base is longer.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// The set-aside entries of one group, by their current sequence.
#[derive(Debug, Default)]
pub(crate) struct GcFailures {
    by_seq: BTreeMap<u64, ColdGcFailure>,
}

impl GcFailures {
    /// Failures of entry `seq` so far.
    pub fn attempts(&self, seq: u64) -> u32 {
        self.by_seq.get(&seq).map_or(0, |f| f.attempts)
    }

    /// Records that the delete of entry `seq` failed with `error`; the entry is re-queued as
    /// `new_seq`, due again at `retry_at_ms` (see [`backoff_ms`]).
    pub fn failed(&mut self, (seq, new_seq): (u64, u64), error: String, retry_at_ms: u64) {
        let attempts = self.attempts(seq) + 1;
        self.by_seq.remove(&seq);
        self.by_seq.insert(
            new_seq,
            ColdGcFailure {
                seq: new_seq,
                attempts,
                retry_at_ms,
                error,
            },
        );
    }

    /// Entry `seq` was deleted and acknowledged.
    pub fn done(&mut self, seq: u64) {
        self.by_seq.remove(&seq);
    }

    /// The entries set aside now, oldest sequence first.
    pub fn list(&self) -> Vec<ColdGcFailure> {
        self.by_seq.values().cloned().collect()
    }

    /// How many entries are set aside now.
    pub fn len(&self) -> usize {
        self.by_seq.len()
    }
}

/// The backoff after the `attempts`-th failure: `base`, doubled per earlier failure, at most
/// [`MAX_BACKOFF`] (or `base`, when that is longer).
pub(crate) fn backoff_ms(base: Duration, attempts: u32) -> u64 {
    let doubled = base.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
    let capped = doubled.min(MAX_BACKOFF.max(base));
    u64::try_from(capped.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_follows_the_entry() {
        let base = Duration::from_secs(60);
        let mut f = GcFailures::default();
        let mut backoffs = Vec::new();
        for (seq, new_seq) in [(1, 10), (10, 11), (11, 12)] {
            let backoff = backoff_ms(base, f.attempts(seq) + 1);
            f.failed((seq, new_seq), "403".into(), backoff);
            backoffs.push(backoff);
        }
        assert_eq!(backoffs, [60_000, 120_000, 240_000]);
        assert_eq!(f.list().len(), 1);
        assert_eq!(f.list()[0].attempts, 3);
        assert_eq!(f.list()[0].retry_at_ms, 240_000);
        assert_eq!(backoff_ms(base, 30), 3_600_000);
        assert_eq!(backoff_ms(Duration::from_secs(7200), 5), 7_200_000);
        f.done(12);
        assert_eq!(f.len(), 0);
    }
}
