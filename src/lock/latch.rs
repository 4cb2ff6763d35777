//! The count-down latch: a count that only goes down, an absolute deadline,
//! and the blocked clients awaiting it. Pure Rust, like the lock: the Redis
//! adapter stores, persists and replicates what this module decides.
//!
//! The latch is open when its count reaches 0; an open latch does not exist
//! as a key (the adapter deletes it in the step that opens it, answering its
//! awaiters 1). A latch lives until its deadline (inclusive, as a Redis key
//! whose expire time is that deadline).
//!
//! RDB encoding (version 1):
//! ```text
//! unsigned  count (1 ..= MAX_LATCH_COUNT)
//! unsigned  deadline, ms since the epoch (<= i64::MAX)
//! ```
//! Awaiters are connection state: never written.

use std::collections::BTreeSet;

use super::codec::{Sink, Source};
use super::{WaiterId, MAX_TOKEN};

/// A latch count must be below 2^53 (clients with doubles count exactly).
pub const MAX_LATCH_COUNT: u64 = (1 << 53) - 1;

/// One latch key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latch {
    count: u64,
    deadline_ms: u64,
    /// Blocked awaiters, in arrival order (ids only ever grow).
    awaiters: BTreeSet<WaiterId>,
}

impl Latch {
    /// A closed latch of `count` (1 ..= MAX_LATCH_COUNT) ending at
    /// `deadline_ms`; `None` for a count out of range.
    pub fn new(count: u64, deadline_ms: u64) -> Option<Latch> {
        (1..=MAX_LATCH_COUNT).contains(&count).then(|| Latch {
            count,
            deadline_ms,
            awaiters: BTreeSet::new(),
        })
    }

    /// The remaining count (0: open).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Absolute deadline, ms since the epoch.
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// Whether the latch has opened (its count reached 0).
    pub fn is_open(&self) -> bool {
        self.count == 0
    }

    /// Milliseconds left until the deadline (0 at the deadline itself).
    pub fn remaining_ms(&self, now_ms: u64) -> u64 {
        self.deadline_ms.saturating_sub(now_ms)
    }

    /// Lowers the count by `n`, not below 0, and returns what remains.
    pub fn count_down(&mut self, n: u64) -> u64 {
        self.count = self.count.saturating_sub(n);
        self.count
    }

    /// Applies a replicated state: the count and deadline become these
    /// (the awaiters stay). False (nothing changes) for a count out of range.
    pub fn apply(&mut self, count: u64, deadline_ms: u64) -> bool {
        if !(1..=MAX_LATCH_COUNT).contains(&count) {
            return false;
        }
        self.count = count;
        self.deadline_ms = deadline_ms;
        true
    }

    /// Opens the latch at once (a replicated opening).
    pub fn open(&mut self) {
        self.count = 0;
    }

    /// Adds a blocked awaiter.
    pub fn add_awaiter(&mut self, id: WaiterId) {
        self.awaiters.insert(id);
    }

    /// Removes an awaiter that left (timeout, disconnect); false if absent.
    pub fn remove_awaiter(&mut self, id: WaiterId) -> bool {
        self.awaiters.remove(&id)
    }

    /// Number of blocked awaiters.
    pub fn awaiter_count(&self) -> usize {
        self.awaiters.len()
    }

    /// Takes every awaiter out, in arrival order.
    pub fn take_awaiters(&mut self) -> Vec<WaiterId> {
        std::mem::take(&mut self.awaiters).into_iter().collect()
    }

    /// The same latch without awaiters (COPY: they await the original).
    pub fn persistent_copy(&self) -> Latch {
        Latch {
            count: self.count,
            deadline_ms: self.deadline_ms,
            awaiters: BTreeSet::new(),
        }
    }

    /// Heap memory owned by the latch (an estimate for MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        // A B-tree node holds up to 11 ids plus its header.
        self.awaiters.len() * std::mem::size_of::<WaiterId>() * 2
    }
}

/// Writes the persistent part of `latch`.
pub fn encode(latch: &Latch, sink: &mut impl Sink) {
    sink.unsigned(latch.count);
    sink.unsigned(latch.deadline_ms);
}

/// Reads a latch; `None` for a truncated or invalid payload.
pub fn decode(source: &mut impl Source) -> Option<Latch> {
    let count = source.unsigned()?;
    let deadline_ms = source.unsigned()?;
    if deadline_ms > MAX_TOKEN {
        return None;
    }
    Latch::new(count, deadline_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::codec::{SliceSource, VecSink};
    use proptest::prelude::*;

    #[test]
    fn count_is_one_to_two_to_the_53_minus_one() {
        assert!(Latch::new(0, 10).is_none());
        assert!(Latch::new(1, 10).is_some());
        assert!(Latch::new(MAX_LATCH_COUNT, 10).is_some());
        assert!(Latch::new(MAX_LATCH_COUNT + 1, 10).is_none());
    }

    #[test]
    fn counts_down_to_zero_and_not_below() {
        let mut latch = Latch::new(3, 10).unwrap();
        assert_eq!(latch.count_down(1), 2);
        assert!(!latch.is_open());
        assert_eq!(latch.count_down(5), 0);
        assert!(latch.is_open());
        assert_eq!(latch.count_down(u64::MAX), 0);
    }

    #[test]
    fn awaiters_leave_in_arrival_order_and_are_not_copied() {
        let mut latch = Latch::new(2, 10).unwrap();
        for id in [3, 7, 9] {
            latch.add_awaiter(id);
        }
        assert!(latch.remove_awaiter(7));
        assert!(!latch.remove_awaiter(7));
        assert_eq!(latch.awaiter_count(), 2);
        assert_eq!(latch.persistent_copy().awaiter_count(), 0);
        assert_eq!(latch.take_awaiters(), vec![3, 9]);
        assert_eq!(latch.awaiter_count(), 0);
    }

    #[test]
    fn remaining_time_ends_at_the_deadline() {
        let latch = Latch::new(1, 1_000).unwrap();
        assert_eq!(latch.remaining_ms(400), 600);
        assert_eq!(latch.remaining_ms(1_000), 0);
        assert_eq!(latch.remaining_ms(2_000), 0);
    }

    #[test]
    fn applied_state_keeps_awaiters_and_rejects_bad_counts() {
        let mut latch = Latch::new(5, 10).unwrap();
        latch.add_awaiter(1);
        assert!(latch.apply(2, 20));
        assert_eq!(
            (latch.count(), latch.deadline_ms(), latch.awaiter_count()),
            (2, 20, 1)
        );
        assert!(!latch.apply(0, 30));
        assert!(!latch.apply(MAX_LATCH_COUNT + 1, 30));
        assert_eq!((latch.count(), latch.deadline_ms()), (2, 20));
        latch.open();
        assert!(latch.is_open());
    }

    #[test]
    fn round_trip_and_truncations() {
        let mut latch = Latch::new(1_000, 1_700_000_000_000).unwrap();
        latch.add_awaiter(4);
        let mut sink = VecSink::default();
        encode(&latch, &mut sink);
        let decoded = decode(&mut SliceSource { bytes: &sink.bytes }).unwrap();
        assert_eq!(decoded, latch.persistent_copy());
        for len in 0..sink.bytes.len() {
            let bytes = &sink.bytes[..len];
            assert!(decode(&mut SliceSource { bytes }).is_none(), "{len}");
        }
    }

    proptest! {
        #[test]
        fn count_never_rises_and_opens_exactly_when_the_sum_reaches_it(
            count in 1..=MAX_LATCH_COUNT,
            steps in prop::collection::vec(1u64..u64::MAX, 0..50),
        ) {
            let mut latch = Latch::new(count, 0).unwrap();
            let mut subtracted: u128 = 0;
            let mut previous = count;
            for n in steps {
                let remaining = latch.count_down(n);
                subtracted += u128::from(n);
                prop_assert!(remaining <= previous);
                let expected = u128::from(count).saturating_sub(subtracted) as u64;
                prop_assert_eq!(remaining, expected);
                prop_assert_eq!(latch.is_open(), subtracted >= u128::from(count));
                previous = remaining;
            }
        }

        #[test]
        fn arbitrary_bytes_decode_only_valid_latches(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            if let Some(latch) = decode(&mut SliceSource { bytes: &bytes }) {
                prop_assert!((1..=MAX_LATCH_COUNT).contains(&latch.count()));
                prop_assert!(latch.deadline_ms() <= MAX_TOKEN);
            }
        }
    }
}
