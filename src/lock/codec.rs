//! The persisted form of a lock, over a small reader/writer pair so that the
//! same decoder runs on Redis's RDB I/O, in unit tests and under the fuzzer.
//!
//! Encoding version 3 (written):
//!
//! ```text
//! unsigned  number of holders, then for each, in the order its hold began:
//!           buffer   owner (1..=512 bytes)
//!           unsigned exclusive holds
//!           unsigned shared holds (< 2^32; exclusive + shared >= 1)
//!           unsigned token (1..=i64::MAX)
//!           unsigned lease deadline, ms since the epoch (<= i64::MAX)
//!           unsigned weight of the shared holds (1..2^32; 1 without any)
//! unsigned  number of FAIR reservations, then for each, in queue order:
//!           buffer   owner
//!           unsigned deadline
//!           unsigned mode (0 exclusive, 1 shared)
//!           unsigned LIMIT (0: none; else < 2^32)
//!           unsigned WEIGHT (1..=LIMIT; 1 without LIMIT)
//! ```
//!
//! Version 2 (read only; shared holds before weights): version 3 without
//! the two weights, each of which is then 1.
//!
//! Version 1 (read only; the exclusive lock before shared holds):
//!
//! ```text
//! unsigned  1 if a hold follows, 0 if not
//! [buffer   owner, unsigned holds (>= 1), unsigned token, unsigned deadline]
//! unsigned  number of FAIR reservations, then (buffer owner, unsigned deadline) pairs
//! ```
//!
//! Blocked waiters and SESSION ties are connection state: never written.

use super::{EntryKind, Hold, Lock, Mode, Want, MAX_OWNER_LEN, MAX_TOKEN};

/// The encoding version [`encode`] writes.
pub const VERSION: i32 = 3;

/// The encoding of shared holds before weights (read only).
const SHARED_VERSION: i32 = 2;

/// More holders or reservations than this in one value is a corrupt payload.
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

/// Writes the persistent part of `lock` (version 3).
pub fn encode(lock: &Lock, sink: &mut impl Sink) {
    sink.unsigned(lock.holders().len() as u64);
    for hold in lock.holders().iter() {
        sink.buffer(&hold.owner);
        sink.unsigned(hold.exclusive);
        sink.unsigned(u64::from(hold.shared));
        sink.unsigned(hold.token);
        sink.unsigned(hold.deadline_ms);
        sink.unsigned(u64::from(hold.weight));
    }
    sink.unsigned(lock.queue().reservation_count() as u64);
    for (owner, deadline_ms, want) in reservations(lock) {
        sink.buffer(owner);
        sink.unsigned(deadline_ms);
        sink.unsigned(match want.mode {
            Mode::Exclusive => 0,
            Mode::Shared => 1,
        });
        sink.unsigned(want.limit.map_or(0, u64::from));
        sink.unsigned(u64::from(want.weight));
    }
}

/// The reservations of a lock in queue order: (owner, deadline, want).
pub fn reservations(lock: &Lock) -> impl Iterator<Item = (&[u8], u64, Want)> + '_ {
    lock.queue()
        .entries()
        .filter_map(|(_, entry)| match entry.kind {
            EntryKind::Reservation { deadline_ms, want } => {
                Some((&*entry.owner, deadline_ms, want))
            }
            EntryKind::Waiter(_) => None,
        })
}

fn valid_owner(owner: &[u8]) -> bool {
    !owner.is_empty() && owner.len() <= MAX_OWNER_LEN
}

/// A hold's fields as stored; `None` when they are out of range.
pub fn valid_hold(
    owner: Box<[u8]>,
    exclusive: u64,
    shared: u64,
    token: u64,
    deadline_ms: u64,
) -> Option<Hold> {
    // Shared counts are 32-bit (no owner re-enters four billion times).
    let shared = u32::try_from(shared).ok()?;
    let valid = valid_owner(&owner)
        && exclusive
            .checked_add(u64::from(shared))
            .is_some_and(|total| total >= 1)
        && (1..=MAX_TOKEN).contains(&token)
        && deadline_ms <= MAX_TOKEN;
    valid.then(|| Hold {
        owner: owner.into(),
        exclusive,
        shared,
        token,
        deadline_ms,
        session: None,
        weight: 1,
    })
}

/// A stored weight: 1..2^32, and 1 for holds or requests that are not
/// shared (`shared`: whether it is).
fn valid_weight(weight: u64, shared: bool) -> Option<u32> {
    let weight = u32::try_from(weight).ok().filter(|weight| *weight >= 1)?;
    (shared || weight == 1).then_some(weight)
}

/// Reads and validates one lock of encoding `version`; `None` for a
/// truncated or corrupt payload or an unknown version.
pub fn decode(source: &mut impl Source, version: i32) -> Option<Lock> {
    match version {
        1 => decode_v1(source),
        SHARED_VERSION => decode_shared(source, false),
        VERSION => decode_shared(source, true),
        _ => None,
    }
}

/// Versions 2 and 3: the same layout, with (`weighted`) or without the
/// weights.
fn decode_shared(source: &mut impl Source, weighted: bool) -> Option<Lock> {
    let mut lock = Lock::new();
    let holders = source.unsigned()?;
    if holders > MAX_STORED_RESERVATIONS {
        return None;
    }
    for _ in 0..holders {
        let owner = source.buffer()?;
        let exclusive = source.unsigned()?;
        let shared = source.unsigned()?;
        let token = source.unsigned()?;
        let deadline_ms = source.unsigned()?;
        let mut hold = valid_hold(owner, exclusive, shared, token, deadline_ms)?;
        if weighted {
            hold.weight = valid_weight(source.unsigned()?, hold.shared > 0)?;
        }
        let duplicate = lock.holders().get(&hold.owner).is_some();
        let second_exclusive = hold.exclusive > 0 && lock.holders().exclusive_holder().is_some();
        if duplicate || second_exclusive {
            return None;
        }
        lock.apply_hold(hold, false);
    }
    if lock.holders().exclusive_holder().is_some() && lock.holders().len() > 1 {
        // An exclusive holder beside other owners can never have been granted.
        return None;
    }
    let count = source.unsigned()?;
    if count > MAX_STORED_RESERVATIONS {
        return None;
    }
    for _ in 0..count {
        let owner = source.buffer()?;
        let deadline_ms = source.unsigned()?;
        let mode = match source.unsigned()? {
            0 => Mode::Exclusive,
            1 => Mode::Shared,
            _ => return None,
        };
        let limit = match source.unsigned()? {
            0 => None,
            limit => Some(u32::try_from(limit).ok()?),
        };
        let weight = match weighted {
            true => valid_weight(source.unsigned()?, limit.is_some())?,
            false => 1,
        };
        if !valid_owner(&owner)
            || deadline_ms > MAX_TOKEN
            || (limit.is_some() && mode != Mode::Shared)
            || limit.is_some_and(|limit| weight > limit)
        {
            return None;
        }
        let want = Want {
            mode,
            limit,
            weight,
        };
        lock.restore_reservation(&owner, want, deadline_ms);
    }
    Some(lock)
}

fn decode_v1(source: &mut impl Source) -> Option<Lock> {
    let mut lock = Lock::new();
    match source.unsigned()? {
        0 => {}
        1 => {
            let owner = source.buffer()?;
            let holds = source.unsigned()?;
            let token = source.unsigned()?;
            let deadline_ms = source.unsigned()?;
            let hold = valid_hold(owner, holds, 0, token, deadline_ms)?;
            lock.apply_hold(hold, true);
        }
        _ => return None,
    }
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
        lock.restore_reservation(&owner, Want::EXCLUSIVE, deadline_ms);
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
    use crate::lock::{Request, Step, Waiter};
    use proptest::prelude::*;

    fn sample() -> Lock {
        let mut lock = Lock::new();
        let tokens = std::cell::Cell::new(41);
        let next = || {
            tokens.set(tokens.get() + 1);
            tokens.get()
        };
        let present = |_| true;
        let mut step = Step::new(1_000, &next, &present);
        for (owner, session) in [(&b"holder"[..], Some(7)), (b"reader", None)] {
            let request = Request {
                owner,
                ttl_ms: 100,
                session,
                want: Want::shared(None),
            };
            lock.acquire(request, &mut step);
        }
        lock.reserve(b"r1", Want::EXCLUSIVE, 5_000, 0);
        let waiter = Waiter {
            id: 1,
            ttl_ms: 10,
            session: None,
            want: Want::EXCLUSIVE,
        };
        lock.enqueue_waiter(b"blocked", waiter, 1_000).unwrap();
        let shared = Want::shared(Some(3));
        lock.reserve(b"r2", shared, 6_000, 0);
        lock
    }

    #[test]
    fn round_trip_keeps_the_persistent_part() {
        let lock = sample();
        let mut sink = VecSink::default();
        encode(&lock, &mut sink);
        let decoded = decode(&mut SliceSource { bytes: &sink.bytes }, VERSION).unwrap();
        assert_eq!(decoded, lock.persistent_copy());
        assert_eq!(decoded.queue().waiter_count(), 0);
        assert_eq!(decoded.holders().len(), 2);
        assert!(decoded.holders().iter().all(|hold| hold.session.is_none()));
        let reserved: Vec<(&[u8], Want)> = reservations(&decoded)
            .map(|(owner, _, want)| (owner, want))
            .collect();
        assert_eq!(
            reserved,
            vec![
                (&b"r1"[..], Want::EXCLUSIVE),
                (&b"r2"[..], Want::shared(Some(3)))
            ]
        );
    }

    #[test]
    fn version_one_payloads_still_load() {
        let mut sink = VecSink::default();
        sink.unsigned(1);
        sink.buffer(b"old");
        sink.unsigned(2);
        sink.unsigned(9);
        sink.unsigned(5_000);
        sink.unsigned(1);
        sink.buffer(b"r");
        sink.unsigned(6_000);
        let lock = decode(&mut SliceSource { bytes: &sink.bytes }, 1).unwrap();
        let hold = lock.holders().single().unwrap();
        assert_eq!(
            (&*hold.owner, hold.exclusive, hold.shared, hold.token),
            (&b"old"[..], 2, 0, 9)
        );
        assert_eq!(reservations(&lock).count(), 1);
        assert!(decode(&mut SliceSource { bytes: &sink.bytes }, 3).is_none());
    }

    #[test]
    fn weights_round_trip_and_version_two_loads_with_weight_one() {
        let mut lock = Lock::new();
        let tokens = std::cell::Cell::new(0);
        let next = || {
            tokens.set(tokens.get() + 1);
            tokens.get()
        };
        let present = |_| true;
        let mut step = Step::new(1_000, &next, &present);
        for (owner, weight) in [(&b"a"[..], 3), (b"b", 1)] {
            let request = Request {
                owner,
                ttl_ms: 100,
                session: None,
                want: Want::weighted(5, weight),
            };
            assert!(lock.acquire(request, &mut step).is_some());
        }
        lock.reserve(b"r", Want::weighted(5, 2), 5_000, 0);
        let mut sink = VecSink::default();
        encode(&lock, &mut sink);
        let decoded = decode(&mut SliceSource { bytes: &sink.bytes }, VERSION).unwrap();
        assert_eq!(decoded, lock.persistent_copy());
        let weights: Vec<u32> = decoded.holders().iter().map(|h| h.weight).collect();
        assert_eq!(weights, vec![3, 1]);
        let reserved: Vec<Want> = reservations(&decoded).map(|(_, _, want)| want).collect();
        assert_eq!(reserved, vec![Want::weighted(5, 2)]);

        // Version 2: the same fields without the weights.
        let mut old = VecSink::default();
        old.unsigned(1);
        old.buffer(b"reader");
        old.unsigned(0);
        old.unsigned(2);
        old.unsigned(7);
        old.unsigned(5_000);
        old.unsigned(1);
        old.buffer(b"r");
        old.unsigned(6_000);
        old.unsigned(1);
        old.unsigned(3);
        let lock = decode(&mut SliceSource { bytes: &old.bytes }, 2).unwrap();
        let hold = lock.holders().single().unwrap();
        assert_eq!((hold.shared, hold.weight), (2, 1));
        let reserved: Vec<Want> = reservations(&lock).map(|(_, _, want)| want).collect();
        assert_eq!(reserved, vec![Want::shared(Some(3))]);
        assert!(
            decode(&mut SliceSource { bytes: &old.bytes }, VERSION).is_none(),
            "a version 2 payload is too short for version 3"
        );
    }

    #[test]
    fn weights_out_of_range_are_rejected() {
        let payload = |shared: u64, weight: u64, limit: u64, reserved_weight: u64| {
            let mut sink = VecSink::default();
            sink.unsigned(1);
            sink.buffer(b"h");
            sink.unsigned(1);
            sink.unsigned(shared);
            sink.unsigned(7);
            sink.unsigned(5_000);
            sink.unsigned(weight);
            sink.unsigned(1);
            sink.buffer(b"r");
            sink.unsigned(6_000);
            sink.unsigned(1);
            sink.unsigned(limit);
            sink.unsigned(reserved_weight);
            sink.bytes
        };
        let load = |bytes: Vec<u8>| decode(&mut SliceSource { bytes: &bytes }, VERSION).is_some();
        assert!(load(payload(1, 4, 4, 4)));
        assert!(!load(payload(1, 0, 4, 1)), "weight 0");
        assert!(!load(payload(1, 1 << 32, 4, 1)), "weight above 2^32 - 1");
        assert!(!load(payload(0, 2, 4, 1)), "a weight without shared holds");
        assert!(
            !load(payload(1, 1, 4, 5)),
            "a reserved weight above its LIMIT"
        );
        assert!(
            !load(payload(1, 1, 0, 2)),
            "a reserved weight without LIMIT"
        );
    }

    #[test]
    fn every_truncation_is_rejected() {
        let mut sink = VecSink::default();
        encode(&sample(), &mut sink);
        for len in 0..sink.bytes.len() {
            assert!(
                decode(
                    &mut SliceSource {
                        bytes: &sink.bytes[..len]
                    },
                    VERSION
                )
                .is_none(),
                "{len}"
            );
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_decode_only_valid_locks(bytes in prop::collection::vec(any::<u8>(), 0..256), version in 1i32..=3) {
            if let Some(lock) = decode(&mut SliceSource { bytes: &bytes }, version) {
                for hold in lock.holders().iter() {
                    prop_assert!(hold.total() >= 1 && hold.weight >= 1 && hold.token >= 1 && !hold.owner.is_empty());
                }
                if lock.holders().exclusive_holder().is_some() {
                    prop_assert_eq!(lock.holders().len(), 1);
                }
            }
        }
    }
}
