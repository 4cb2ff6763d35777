//! The FIFO wait queue of one lock: blocked waiters (connection state, never
//! persisted) and FAIR reservations (persisted, with absolute deadlines).
//!
//! Every operation is O(log n) in the queue length: entries are keyed by an
//! arrival sequence number in a B-tree, reservations are also indexed by
//! deadline (so expired ones are dropped from the front of that index, each
//! exactly once), and entries are indexed by owner (so an owner's entries are
//! found without a scan).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// Reservations stored in every queue of this process (for `INFO dlock`).
static STORED_RESERVATIONS: AtomicU64 = AtomicU64::new(0);

/// Reservations stored in every queue, live or not yet dropped.
pub fn stored_reservations() -> u64 {
    STORED_RESERVATIONS.load(Ordering::Relaxed)
}

/// Identifies a blocked client in the adapter's registry.
pub type WaiterId = u64;

/// A client blocked waiting for the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub id: WaiterId,
    /// The lease it asked for, applied when it is granted.
    pub ttl_ms: u64,
    /// The connection a SESSION hold is tied to.
    pub session: Option<u64>,
    /// The mode (and LIMIT) it asked for.
    pub want: Want,
}

/// What a queue entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Waiter(Waiter),
    /// A FAIR reservation: the place is kept until `deadline_ms` (inclusive).
    Reservation {
        deadline_ms: u64,
        want: Want,
    },
}

/// What a queue entry asks for: the mode, and for a shared request the
/// most permits it accepts to be held together, its own included (LIMIT),
/// and how many of them it takes (WEIGHT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub mode: super::Mode,
    /// LIMIT of a shared request; `None`: no bound.
    pub limit: Option<u32>,
    /// The permits a shared request takes (1..=LIMIT; 1 without LIMIT and
    /// for exclusive requests).
    pub weight: u32,
}

impl Default for Want {
    fn default() -> Self {
        Self::EXCLUSIVE
    }
}

impl Want {
    pub const EXCLUSIVE: Want = Want {
        mode: super::Mode::Exclusive,
        limit: None,
        weight: 1,
    };

    /// A shared request of weight 1 with an optional LIMIT.
    pub const fn shared(limit: Option<u32>) -> Want {
        Want {
            mode: super::Mode::Shared,
            limit,
            weight: 1,
        }
    }

    /// A shared request taking `weight` of `limit` permits.
    pub const fn weighted(limit: u32, weight: u32) -> Want {
        Want {
            mode: super::Mode::Shared,
            limit: Some(limit),
            weight,
        }
    }
}

/// One place in the queue.
#[derive(Clone, Debug)]
pub struct Entry {
    pub owner: Box<[u8]>,
    pub kind: EntryKind,
    /// When the owner took this place (ms since the epoch; a reservation
    /// refreshed in place, or a waiter taking over its owner's reservation,
    /// keeps it); 0 when unknown (a reservation restored from a file or
    /// received by a replica).
    pub since_ms: u64,
}

/// Two entries are the same place whatever `since_ms` says: it is
/// bookkeeping for `DLOCK.INFO key FULL`, never persisted or replicated.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner && self.kind == other.kind
    }
}

impl Eq for Entry {}

impl Entry {
    /// What the entry asks for.
    pub fn want(&self) -> Want {
        match &self.kind {
            EntryKind::Waiter(waiter) => waiter.want,
            EntryKind::Reservation { want, .. } => *want,
        }
    }
}

/// The place of an owner waiting to upgrade its shared hold to an exclusive
/// one: ahead of every other entry (sequence numbers of the tail start at 1).
pub const UPGRADE_SEQ: u64 = 0;

/// The entries of a non-empty queue.
#[derive(Debug, PartialEq, Eq)]
struct Inner {
    entries: BTreeMap<u64, Entry>,
    next_seq: u64,
    /// (deadline, seq) of every reservation.
    reservations: BTreeSet<(u64, u64)>,
    /// seqs of every entry, per owner.
    by_owner: HashMap<Box<[u8]>, Vec<u64>>,
    waiters: usize,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            next_seq: UPGRADE_SEQ + 1,
            reservations: BTreeSet::new(),
            by_owner: HashMap::new(),
            waiters: 0,
        }
    }
}

impl Clone for Inner {
    fn clone(&self) -> Self {
        STORED_RESERVATIONS.fetch_add(self.reservations.len() as u64, Ordering::Relaxed);
        Self {
            entries: self.entries.clone(),
            next_seq: self.next_seq,
            reservations: self.reservations.clone(),
            by_owner: self.by_owner.clone(),
            waiters: self.waiters,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        STORED_RESERVATIONS.fetch_sub(self.reservations.len() as u64, Ordering::Relaxed);
    }
}

impl Inner {
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Blocked waiters in the queue.
    pub fn waiter_count(&self) -> usize {
        self.waiters
    }

    /// Reservations, expired or not.
    pub fn reservation_count(&self) -> usize {
        self.reservations.len()
    }

    /// Reservations whose deadline has not passed.
    pub fn live_reservation_count(&self, now_ms: u64) -> usize {
        let expired = self.reservations.range(..(now_ms, 0)).count();
        self.reservations.len() - expired
    }

    /// Entries in order, without reservations that have run out.
    pub fn live_entries(&self, now_ms: u64) -> impl Iterator<Item = &Entry> + '_ {
        self.entries.values().filter(move |entry| match entry.kind {
            EntryKind::Reservation { deadline_ms, .. } => now_ms <= deadline_ms,
            EntryKind::Waiter(_) => true,
        })
    }

    /// Every entry in order (for persistence, which skips waiters itself).
    pub fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> + '_ {
        self.entries.iter().map(|(seq, entry)| (*seq, entry))
    }

    /// The first entry.
    pub fn head(&self) -> Option<(u64, &Entry)> {
        self.entries.iter().next().map(|(seq, entry)| (*seq, entry))
    }

    /// The latest reservation deadline, expired or not.
    pub fn last_reservation_deadline(&self) -> Option<u64> {
        self.reservations
            .iter()
            .next_back()
            .map(|(deadline, _)| *deadline)
    }

    /// Drops every reservation whose deadline is before `now_ms`.
    pub fn drop_expired_reservations(&mut self, now_ms: u64) -> usize {
        let mut dropped = 0;
        while let Some(&(deadline_ms, seq)) = self.reservations.first() {
            if deadline_ms >= now_ms {
                break;
            }
            self.remove(seq);
            dropped += 1;
        }
        dropped
    }

    /// Appends an entry at the tail; returns its sequence number.
    pub fn push(&mut self, owner: &[u8], kind: EntryKind, since_ms: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.insert(
            seq,
            Entry {
                owner: owner.into(),
                kind,
                since_ms,
            },
        );
        seq
    }

    /// Puts an upgrading owner's waiter ahead of every entry; false when an
    /// upgrade already waits there.
    pub fn push_upgrade(&mut self, owner: &[u8], waiter: Waiter, since_ms: u64) -> bool {
        if self.entries.contains_key(&UPGRADE_SEQ) {
            return false;
        }
        let entry = Entry {
            owner: owner.into(),
            kind: EntryKind::Waiter(waiter),
            since_ms,
        };
        self.insert(UPGRADE_SEQ, entry);
        true
    }

    fn insert(&mut self, seq: u64, entry: Entry) {
        match &entry.kind {
            EntryKind::Waiter(_) => self.waiters += 1,
            EntryKind::Reservation { deadline_ms, .. } => {
                self.reservations.insert((*deadline_ms, seq));
                STORED_RESERVATIONS.fetch_add(1, Ordering::Relaxed);
            }
        }
        match self.by_owner.get_mut(&entry.owner) {
            Some(seqs) => seqs.push(seq),
            None => {
                self.by_owner.insert(entry.owner.clone(), vec![seq]);
            }
        }
        self.entries.insert(seq, entry);
    }

    /// Removes the entry `seq`, if present.
    pub fn remove(&mut self, seq: u64) -> Option<Entry> {
        let entry = self.entries.remove(&seq)?;
        match &entry.kind {
            EntryKind::Waiter(_) => self.waiters -= 1,
            EntryKind::Reservation { deadline_ms, .. } => {
                self.reservations.remove(&(*deadline_ms, seq));
                STORED_RESERVATIONS.fetch_sub(1, Ordering::Relaxed);
            }
        }
        if let Some(seqs) = self.by_owner.get_mut(&entry.owner) {
            seqs.retain(|s| *s != seq);
            if seqs.is_empty() {
                self.by_owner.remove(&entry.owner);
            }
        }
        Some(entry)
    }

    /// Removes the waiter `id` at `seq`; false if that place holds something else.
    pub fn remove_waiter(&mut self, seq: u64, id: WaiterId) -> bool {
        let matches = matches!(
            self.entries.get(&seq),
            Some(Entry { kind: EntryKind::Waiter(waiter), .. }) if waiter.id == id
        );
        if matches {
            self.remove(seq);
        }
        matches
    }

    /// Sequence numbers of every entry of `owner`, in order.
    pub fn seqs_of(&self, owner: &[u8]) -> Vec<u64> {
        let mut seqs = self.by_owner.get(owner).cloned().unwrap_or_default();
        seqs.sort_unstable();
        seqs
    }

    /// The reservation of `owner`, if it has one.
    pub fn reservation_of(&self, owner: &[u8]) -> Option<u64> {
        let seqs = self.by_owner.get(owner)?;
        seqs.iter().copied().find(|seq| {
            matches!(
                self.entries.get(seq),
                Some(Entry {
                    kind: EntryKind::Reservation { .. },
                    ..
                })
            )
        })
    }

    /// Replaces the entry at `seq` in place (same position in the queue).
    pub fn replace(&mut self, seq: u64, kind: EntryKind) {
        if let Some(entry) = self.remove(seq) {
            self.insert(
                seq,
                Entry {
                    owner: entry.owner,
                    kind,
                    since_ms: entry.since_ms,
                },
            );
        }
    }

    /// Removes every waiter, in queue order (the lock value is going away).
    pub fn take_waiters(&mut self) -> Vec<(Box<[u8]>, Waiter)> {
        let seqs: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, entry)| matches!(entry.kind, EntryKind::Waiter(_)))
            .map(|(seq, _)| *seq)
            .collect();
        seqs.into_iter()
            .filter_map(|seq| self.remove(seq))
            .filter_map(|entry| match entry.kind {
                EntryKind::Waiter(waiter) => Some((entry.owner, waiter)),
                EntryKind::Reservation { .. } => None,
            })
            .collect()
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        self.entries
            .values()
            .map(|entry| 2 * entry.owner.len() + 128)
            .sum()
    }
}

/// The FIFO of one lock. Most locks never queue anyone, so an empty queue
/// is a single null pointer: the entries are allocated on first use and
/// freed when the queue empties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    inner: Option<Box<Inner>>,
}

impl Queue {
    pub fn is_empty(&self) -> bool {
        self.inner.as_ref().is_none_or(|inner| inner.is_empty())
    }

    /// Whether nobody ever queued here (nothing on the heap).
    pub fn is_unallocated(&self) -> bool {
        self.inner.is_none()
    }

    /// Blocked waiters in the queue.
    pub fn waiter_count(&self) -> usize {
        self.inner.as_ref().map_or(0, |inner| inner.waiter_count())
    }

    /// Reservations, expired or not.
    pub fn reservation_count(&self) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.reservation_count())
    }

    /// Reservations whose deadline has not passed.
    pub fn live_reservation_count(&self, now_ms: u64) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.live_reservation_count(now_ms))
    }

    /// Entries in order, without reservations that have run out.
    pub fn live_entries(&self, now_ms: u64) -> impl Iterator<Item = &Entry> + '_ {
        self.inner
            .iter()
            .flat_map(move |inner| inner.live_entries(now_ms))
    }

    /// Every entry in order with its position key.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> + '_ {
        self.inner.iter().flat_map(|inner| inner.entries())
    }

    /// The first entry.
    pub fn head(&self) -> Option<(u64, &Entry)> {
        self.inner.as_ref()?.head()
    }

    /// The entry at `seq`.
    pub fn get(&self, seq: u64) -> Option<&Entry> {
        self.inner.as_ref()?.entries.get(&seq)
    }

    /// The latest reservation deadline, expired or not.
    pub fn last_reservation_deadline(&self) -> Option<u64> {
        self.inner.as_ref()?.last_reservation_deadline()
    }

    /// Sequence numbers of every entry of `owner`, in order.
    pub fn seqs_of(&self, owner: &[u8]) -> Vec<u64> {
        self.inner
            .as_ref()
            .map_or_else(Vec::new, |inner| inner.seqs_of(owner))
    }

    /// The reservation of `owner`, if it has one.
    pub fn reservation_of(&self, owner: &[u8]) -> Option<u64> {
        self.inner.as_ref()?.reservation_of(owner)
    }

    /// Every entry of `owner`, in no particular order (without copying
    /// their positions, unlike [`Queue::seqs_of`]).
    pub fn entries_of<'q>(&'q self, owner: &'q [u8]) -> impl Iterator<Item = &'q Entry> + 'q {
        self.inner
            .iter()
            .filter_map(|inner| inner.by_owner.get(owner).map(|seqs| (inner, seqs)))
            .flat_map(|(inner, seqs)| seqs.iter().filter_map(|seq| inner.entries.get(seq)))
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |inner| std::mem::size_of::<Inner>() + inner.heap_bytes())
    }

    /// Appends an entry at the tail, taken at `since_ms` (0: unknown);
    /// returns its sequence number.
    pub fn push(&mut self, owner: &[u8], kind: EntryKind, since_ms: u64) -> u64 {
        self.inner
            .get_or_insert_with(Box::default)
            .push(owner, kind, since_ms)
    }

    /// Puts an upgrading owner's waiter at the head ([`UPGRADE_SEQ`]);
    /// false when another upgrade already waits.
    pub fn push_upgrade(&mut self, owner: &[u8], waiter: Waiter, since_ms: u64) -> bool {
        self.inner
            .get_or_insert_with(Box::default)
            .push_upgrade(owner, waiter, since_ms)
    }

    /// The owner whose upgrade waits at the head, if any.
    pub fn upgrading_owner(&self) -> Option<&[u8]> {
        let entry = self.inner.as_ref()?.entries.get(&UPGRADE_SEQ)?;
        Some(&entry.owner)
    }

    /// Runs `change` on the entries, then frees them if the queue emptied.
    fn change<T: Default>(&mut self, change: impl FnOnce(&mut Inner) -> T) -> T {
        let Some(inner) = self.inner.as_mut() else {
            return T::default();
        };
        let result = change(inner);
        if inner.is_empty() {
            self.inner = None;
        }
        result
    }

    /// Drops every reservation whose deadline is before `now_ms`.
    pub fn drop_expired_reservations(&mut self, now_ms: u64) -> usize {
        if self.inner.is_none() {
            return 0;
        }
        self.change(|inner| inner.drop_expired_reservations(now_ms))
    }

    /// Removes the entry `seq`, if present.
    pub fn remove(&mut self, seq: u64) -> Option<Entry> {
        self.change(|inner| inner.remove(seq))
    }

    /// Removes the waiter `id` at `seq`; false if that place holds something else.
    pub fn remove_waiter(&mut self, seq: u64, id: WaiterId) -> bool {
        self.change(|inner| inner.remove_waiter(seq, id))
    }

    /// Replaces the entry at `seq` in place (same position in the queue).
    pub fn replace(&mut self, seq: u64, kind: EntryKind) {
        self.change(|inner| inner.replace(seq, kind));
    }

    /// Removes every waiter, in queue order (the lock value is going away).
    pub fn take_waiters(&mut self) -> Vec<(Box<[u8]>, Waiter)> {
        self.change(|inner| inner.take_waiters())
    }

    /// The queue without its waiters (what is persisted and copied).
    pub fn without_waiters(&self) -> Queue {
        let mut copy = Queue::default();
        for (_, entry) in self.entries() {
            if let EntryKind::Reservation { .. } = entry.kind {
                copy.push(&entry.owner, entry.kind.clone(), entry.since_ms);
            }
        }
        copy
    }
}
