//! The persisted form of a lock (RDB encoding version 1), over a small
//! reader/writer pair so that the same decoder runs on Redis's RDB I/O, in
//! unit tests and under the fuzzer.
//!
//! ```text
//! unsigned  1 if a hold follows, 0 if not
//! [buffer   owner (1..=512 bytes)
//!  unsigned holds (>= 1)
//!  unsigned token (1..=i64::MAX)
//!  unsigned lease deadline, ms since the epoch (<= i64::MAX)]
//! unsigned  number of FAIR reservations, then that many
//!           (buffer owner, unsigned deadline) pairs, in queue order
//! ```
//!
//! Blocked waiters and SESSION ties are connection state: never written.

use super::{EntryKind, Hold, Lock, MAX_OWNER_LEN, MAX_TOKEN};

/// More reservations than this in one value is a corrupt payload.
pub const MAX_STORED_RESERVATIONS: u64 = 1 << 32;

/// Where a lock is read from. `None` means the input ended or failed.
pub trait Source {
    fn unsigned(&mut self) -> Option<u64>;
    fn buffer(&mut self) -> Option<Box<[u8]>>;
}

/// Where a lock is written to.
pub trait Sink {
    fn unsigned(&mut self, value: u64);
    fn buffer(&mut self, bytes: &[u8]);
}

/// Writes the persistent part of `lock`.
pub fn encode(lock: &Lock, sink: &mut impl Sink) {
    match lock.stored_hold() {
        Some(hold) => {
            sink.unsigned(1);
            sink.buffer(&hold.owner);
            sink.unsigned(hold.holds);
            sink.unsigned(hold.token);
            sink.unsigned(hold.deadline_ms);
        }
        None => sink.unsigned(0),
    }
    sink.unsigned(lock.queue().reservation_count() as u64);
    for (owner, deadline_ms) in reservations(lock) {
        sink.buffer(owner);
        sink.unsigned(deadline_ms);
    }
}

/// The reservations of a lock in queue order: (owner, deadline).
pub fn reservations(lock: &Lock) -> impl Iterator<Item = (&[u8], u64)> + '_ {
    lock.queue()
        .entries()
        .filter_map(|(_, entry)| match entry.kind {
            EntryKind::Reservation { deadline_ms } => Some((&*entry.owner, deadline_ms)),
            EntryKind::Waiter(_) => None,
        })
}

fn valid_owner(owner: &[u8]) -> bool {
    !owner.is_empty() && owner.len() <= MAX_OWNER_LEN
}

/// Reads and validates one lock; `None` for a truncated or corrupt payload.
pub fn decode(source: &mut impl Source) -> Option<Lock> {
    let mut lock = match source.unsigned()? {
        0 => Lock::new(),
        1 => {
            let owner = source.buffer()?;
            let holds = source.unsigned()?;
            let token = source.unsigned()?;
            let deadline_ms = source.unsigned()?;
            let valid = valid_owner(&owner)
                && holds >= 1
                && (1..=MAX_TOKEN).contains(&token)
                && deadline_ms <= MAX_TOKEN;
            if !valid {
                return None;
            }
            Lock::with_hold(Hold {
                owner,
                holds,
                token,
                deadline_ms,
                session: None,
            })
        }
        _ => return None,
    };
    let count = source.unsigned()?;
    if count > MAX_STORED_RESERVATIONS {
        return None;
    }
    for _ in 0..count {
        let owner = source.buffer()?;
        let deadline_ms = source.unsigned()?;
        if !valid_owner(&owner) || deadline_ms > MAX_TOKEN {
            return None;
        }
        lock.reserve(&owner, deadline_ms);
    }
    Some(lock)
}

/// A byte-slice source (little-endian u64s, u32-length-prefixed buffers),
/// for tests and the fuzzer.
pub struct SliceSource<'a> {
    pub bytes: &'a [u8],
}

impl Source for SliceSource<'_> {
    fn unsigned(&mut self) -> Option<u64> {
        let (head, rest) = self.bytes.split_first_chunk::<8>()?;
        self.bytes = rest;
        Some(u64::from_le_bytes(*head))
    }

    fn buffer(&mut self) -> Option<Box<[u8]>> {
        let (head, rest) = self.bytes.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*head) as usize;
        if rest.len() < len {
            return None;
        }
        let (buffer, rest) = rest.split_at(len);
        self.bytes = rest;
        Some(buffer.into())
    }
}

/// The matching byte-vector sink.
#[derive(Default)]
pub struct VecSink {
    pub bytes: Vec<u8>,
}

impl Sink for VecSink {
    fn unsigned(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    fn buffer(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Request, Waiter};
    use proptest::prelude::*;

    fn sample() -> Lock {
        let mut lock = Lock::new();
        let request = Request {
            owner: b"holder",
            ttl_ms: 100,
            session: Some(7),
        };
        lock.acquire(request, 1_000, || 42, |_| true);
        lock.reserve(b"r1", 5_000);
        let waiter = Waiter {
            id: 1,
            ttl_ms: 10,
            session: None,
        };
        lock.enqueue_waiter(b"blocked", waiter);
        lock.reserve(b"r2", 6_000);
        lock
    }

    #[test]
    fn round_trip_keeps_the_persistent_part() {
        let lock = sample();
        let mut sink = VecSink::default();
        encode(&lock, &mut sink);
        let decoded = decode(&mut SliceSource { bytes: &sink.bytes }).unwrap();
        assert_eq!(decoded, lock.persistent_copy());
        assert_eq!(decoded.queue().waiter_count(), 0);
        assert_eq!(decoded.stored_hold().unwrap().session, None);
        let owners: Vec<&[u8]> = reservations(&decoded).map(|(owner, _)| owner).collect();
        assert_eq!(owners, vec![&b"r1"[..], b"r2"]);
    }

    #[test]
    fn every_truncation_is_rejected() {
        let mut sink = VecSink::default();
        encode(&sample(), &mut sink);
        for len in 0..sink.bytes.len() {
            assert!(
                decode(&mut SliceSource {
                    bytes: &sink.bytes[..len]
                })
                .is_none(),
                "{len}"
            );
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_decode_only_valid_locks(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            if let Some(lock) = decode(&mut SliceSource { bytes: &bytes }) {
                if let Some(hold) = lock.stored_hold() {
                    prop_assert!(hold.holds >= 1 && hold.token >= 1 && !hold.owner.is_empty());
                }
            }
        }
    }
}
