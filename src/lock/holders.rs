//! The owners holding one lock, each with its exclusive and shared counts,
//! one fencing token and one lease.
//!
//! Most locks have at most one holder at a time (a mutex, or a read-write
//! lock used by one reader), so a single holder is stored inline and costs no
//! allocation. A second holder moves every holder into indexed storage where
//! each operation is O(log n) in the number of holders: holders are kept in
//! the order their holds began, indexed by owner, by lease deadline (so
//! expired holders are found from the front, each once) and by SESSION
//! connection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroU64;

/// One owner's holds on a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub owner: super::OwnerName,
    /// Exclusive re-entry count (0: the owner holds the lock only shared).
    pub exclusive: u64,
    /// Shared re-entry count (0: the owner holds the lock only exclusively).
    /// 32 bits, beside the 32-bit weight: a hold stays 80 bytes, so that a
    /// lock with one holder stays 96 (its allocation class).
    pub shared: u32,
    /// The fencing token issued when the hold (or its exclusive part) began.
    pub token: u64,
    /// Absolute deadline of the lease, in ms since the epoch.
    pub deadline_ms: u64,
    /// The connection a SESSION hold is tied to (never persisted; Redis
    /// numbers connections from 1).
    pub session: Option<NonZeroU64>,
    /// The permits the owner's shared holds take together (WEIGHT): one
    /// weight per owner whatever its shared count; 1 while it holds none
    /// shared.
    pub weight: u32,
}

impl Hold {
    /// Whether the lease still covers `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms <= self.deadline_ms
    }

    /// Whether Redis taking the key away at `now_ms` (expiry, or a delete)
    /// ends this lease rather than cutting it short: from the deadline's
    /// own millisecond on. The lease covers that millisecond
    /// ([`Hold::is_live`]), and Redis 7.0's expiry and every server's lazy
    /// expiry remove a key only once `now > expire`; but Redis 8's active
    /// expiry removes it already when `now >= expire`, in the lease's last
    /// millisecond, before the module's timer (armed for deadline + 1)
    /// could see the lease end. Judged like this, a lease end is the same
    /// lease end on every server, whoever sees it first.
    pub fn ended_by_removal_at(&self, now_ms: u64) -> bool {
        self.deadline_ms <= now_ms
    }

    /// Milliseconds left on the lease (0 at the deadline itself).
    pub fn remaining_ms(&self, now_ms: u64) -> u64 {
        self.deadline_ms.saturating_sub(now_ms)
    }

    /// Holds in both modes together.
    pub fn total(&self) -> u64 {
        self.exclusive.saturating_add(u64::from(self.shared))
    }

    /// The permits this hold takes from a LIMIT: its weight while it holds
    /// the lock shared, none otherwise.
    pub fn shared_weight(&self) -> u64 {
        if self.shared > 0 {
            u64::from(self.weight)
        } else {
            0
        }
    }

    /// The count of the given mode.
    pub fn count(&self, mode: super::Mode) -> u64 {
        match mode {
            super::Mode::Exclusive => self.exclusive,
            super::Mode::Shared => u64::from(self.shared),
        }
    }
}

/// Two or more holders, indexed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Many {
    /// Holders by the order their holds began.
    by_start: BTreeMap<u64, Hold>,
    next_start: u64,
    by_owner: HashMap<Box<[u8]>, u64>,
    /// (deadline, start) of every holder.
    by_deadline: BTreeSet<(u64, u64)>,
    /// (connection, start) of every SESSION holder.
    by_session: BTreeSet<(u64, u64)>,
    /// Owners whose shared count is above zero.
    shared_owners: usize,
    /// The weights of those owners, added up.
    shared_weight: u64,
    /// The start key of the owner holding the lock exclusively, if any.
    exclusive: Option<u64>,
}

impl Many {
    fn insert(&mut self, hold: Hold) {
        let start = self.next_start;
        self.next_start += 1;
        self.index(start, &hold);
        self.by_owner.insert(hold.owner.as_bytes().into(), start);
        self.by_start.insert(start, hold);
    }

    fn index(&mut self, start: u64, hold: &Hold) {
        self.by_deadline.insert((hold.deadline_ms, start));
        if let Some(client) = hold.session {
            self.by_session.insert((client.get(), start));
        }
        if hold.shared > 0 {
            self.shared_owners += 1;
            self.shared_weight += u64::from(hold.weight);
        }
        if hold.exclusive > 0 {
            self.exclusive = Some(start);
        }
    }

    fn unindex(&mut self, start: u64, hold: &Hold) {
        self.by_deadline.remove(&(hold.deadline_ms, start));
        if let Some(client) = hold.session {
            self.by_session.remove(&(client.get(), start));
        }
        if hold.shared > 0 {
            self.shared_owners -= 1;
            self.shared_weight -= u64::from(hold.weight);
        }
        if self.exclusive == Some(start) {
            self.exclusive = None;
        }
    }

    fn remove_start(&mut self, start: u64) -> Option<Hold> {
        let hold = self.by_start.remove(&start)?;
        self.unindex(start, &hold);
        self.by_owner.remove(hold.owner.as_bytes());
        Some(hold)
    }
}

/// The holders of one lock.
///
/// Every change to the number of holders also moves the process-wide count
/// of holds ([`live_holders`]), the `dlock_holders` gauge of `INFO dlock`:
/// kept here, where holders come and go, so that every way a hold ends
/// (release, expiry, a deleted or flushed key, a replica's full resync)
/// counts without each caller remembering to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Holders {
    /// The holder, when there is exactly one (then `many` is `None`).
    one: Option<Hold>,
    /// Every holder, when there are two or more.
    many: Option<Box<Many>>,
}

impl Holders {
    /// The holders of a lock with one holder.
    pub fn of_one(hold: Hold) -> Self {
        gauge::add(1);
        Self {
            one: Some(hold),
            many: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.one.is_none() && self.many.is_none()
    }

    /// Ends every hold of a lock with one holder ([`Holders::single`]),
    /// dropping only that hold; does nothing otherwise.
    pub fn clear_single(&mut self) {
        if self.many.is_none() && self.one.take().is_some() {
            gauge::sub(1);
        }
    }

    /// Number of owners holding the lock (live or not).
    pub fn len(&self) -> usize {
        match (&self.one, &self.many) {
            (Some(_), _) => 1,
            (None, Some(many)) => many.by_start.len(),
            (None, None) => 0,
        }
    }

    /// Whether the holders are in indexed storage (two or more).
    pub fn is_many(&self) -> bool {
        self.many.is_some()
    }

    /// Every holder in the order its hold began.
    pub fn iter(&self) -> impl Iterator<Item = &Hold> + '_ {
        self.one
            .iter()
            .chain(self.many.iter().flat_map(|many| many.by_start.values()))
    }

    /// The only holder, when there is exactly one.
    pub fn single(&self) -> Option<&Hold> {
        self.one.as_ref()
    }

    /// The hold of `owner`.
    pub fn get(&self, owner: &[u8]) -> Option<&Hold> {
        match (&self.one, &self.many) {
            (Some(hold), _) => (*hold.owner == *owner).then_some(hold),
            (None, Some(many)) => many
                .by_owner
                .get(owner)
                .and_then(|start| many.by_start.get(start)),
            (None, None) => None,
        }
    }

    /// The owner holding the lock exclusively, if any.
    pub fn exclusive_holder(&self) -> Option<&Hold> {
        match (&self.one, &self.many) {
            (Some(hold), _) => (hold.exclusive > 0).then_some(hold),
            (None, Some(many)) => many.exclusive.and_then(|start| many.by_start.get(&start)),
            (None, None) => None,
        }
    }

    /// Owners holding the lock shared.
    pub fn shared_owners(&self) -> usize {
        match (&self.one, &self.many) {
            (Some(hold), _) => usize::from(hold.shared > 0),
            (None, Some(many)) => many.shared_owners,
            (None, None) => 0,
        }
    }

    /// The permits the shared holders take together (their weights added up).
    pub fn shared_weight(&self) -> u64 {
        match (&self.one, &self.many) {
            (Some(hold), _) => hold.shared_weight(),
            (None, Some(many)) => many.shared_weight,
            (None, None) => 0,
        }
    }

    /// The earliest lease deadline.
    pub fn earliest_deadline(&self) -> Option<u64> {
        match (&self.one, &self.many) {
            (Some(hold), _) => Some(hold.deadline_ms),
            (None, Some(many)) => many.by_deadline.first().map(|(deadline, _)| *deadline),
            (None, None) => None,
        }
    }

    /// The latest lease deadline.
    pub fn latest_deadline(&self) -> Option<u64> {
        match (&self.one, &self.many) {
            (Some(hold), _) => Some(hold.deadline_ms),
            (None, Some(many)) => many.by_deadline.last().map(|(deadline, _)| *deadline),
            (None, None) => None,
        }
    }

    /// Whether Redis taking the key away at `now_ms` ends every lease in it
    /// (see [`Hold::ended_by_removal_at`]); false with no holder.
    pub fn all_ended_by_removal_at(&self, now_ms: u64) -> bool {
        self.latest_deadline()
            .is_some_and(|deadline| deadline <= now_ms)
    }

    /// Adds the hold of an owner that holds nothing yet.
    pub fn insert(&mut self, hold: Hold) {
        gauge::add(1);
        if let Some(many) = self.many.as_mut() {
            many.insert(hold);
            return;
        }
        match self.one.take() {
            None => self.one = Some(hold),
            Some(first) => {
                let mut many = Box::<Many>::default();
                many.insert(first);
                many.insert(hold);
                self.many = Some(many);
            }
        }
    }

    /// Changes the hold of `owner` in place (counts, lease, token), keeping
    /// the indexes right; `None` when the owner holds nothing. A change that
    /// leaves both counts at zero removes the hold.
    pub fn update<T>(&mut self, owner: &[u8], change: impl FnOnce(&mut Hold) -> T) -> Option<T> {
        let result;
        if let Some(hold) = self.one.as_mut() {
            if *hold.owner != *owner {
                return None;
            }
            result = change(hold);
            if hold.total() == 0 {
                self.one = None;
                gauge::sub(1);
            }
            return Some(result);
        }
        let many = self.many.as_mut()?;
        let start = *many.by_owner.get(owner)?;
        let mut hold = many.by_start.remove(&start)?;
        many.unindex(start, &hold);
        result = change(&mut hold);
        if hold.total() == 0 {
            many.by_owner.remove(hold.owner.as_bytes());
            gauge::sub(1);
        } else {
            many.index(start, &hold);
            many.by_start.insert(start, hold);
        }
        self.compact();
        Some(result)
    }

    /// Removes the hold of `owner`.
    pub fn remove(&mut self, owner: &[u8]) -> Option<Hold> {
        if self.one.as_ref().is_some_and(|hold| *hold.owner == *owner) {
            gauge::sub(1);
            return self.one.take();
        }
        let many = self.many.as_mut()?;
        let start = *many.by_owner.get(owner)?;
        let hold = many.remove_start(start);
        if hold.is_some() {
            gauge::sub(1);
        }
        self.compact();
        hold
    }

    /// Removes every holder whose lease ended before `now_ms`, earliest
    /// deadline first; returns them.
    pub fn remove_expired(&mut self, now_ms: u64) -> Vec<Hold> {
        if let Some(hold) = &self.one {
            if hold.is_live(now_ms) {
                return Vec::new();
            }
            gauge::sub(1);
            return self.one.take().into_iter().collect();
        }
        let Some(many) = self.many.as_mut() else {
            return Vec::new();
        };
        let mut expired = Vec::new();
        while let Some(&(deadline_ms, start)) = many.by_deadline.first() {
            if deadline_ms >= now_ms {
                break;
            }
            match many.remove_start(start) {
                Some(hold) => expired.push(hold),
                None => {
                    many.by_deadline.pop_first();
                }
            }
        }
        gauge::sub(expired.len());
        self.compact();
        expired
    }

    /// Removes every hold tied to connection `client`; returns them.
    pub fn remove_session(&mut self, client: u64) -> Vec<Hold> {
        if let Some(hold) = &self.one {
            if hold.session.map(NonZeroU64::get) != Some(client) {
                return Vec::new();
            }
            gauge::sub(1);
            return self.one.take().into_iter().collect();
        }
        let Some(many) = self.many.as_mut() else {
            return Vec::new();
        };
        let starts: Vec<u64> = many
            .by_session
            .range((client, 0)..=(client, u64::MAX))
            .map(|(_, start)| *start)
            .collect();
        let removed: Vec<Hold> = starts
            .into_iter()
            .filter_map(|start| many.remove_start(start))
            .collect();
        gauge::sub(removed.len());
        self.compact();
        removed
    }

    /// Removes every holder.
    pub fn clear(&mut self) {
        gauge::sub(self.len());
        self.one = None;
        self.many = None;
    }

    /// Back to inline storage once a single holder is left.
    fn compact(&mut self) {
        let Some(many) = self.many.as_mut() else {
            return;
        };
        match many.by_start.len() {
            0 => self.many = None,
            1 => {
                let last = many.by_start.pop_first().map(|(_, hold)| hold);
                self.many = None;
                self.one = last;
            }
            _ => {}
        }
    }

    /// Approximate heap bytes, for MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        match (&self.one, &self.many) {
            (Some(hold), _) => hold.owner.heap_len(),
            (None, Some(many)) => {
                std::mem::size_of::<Many>()
                    + many
                        .by_start
                        .values()
                        .map(|hold| 2 * hold.owner.len() + 160)
                        .sum::<usize>()
            }
            (None, None) => 0,
        }
    }
}

impl Clone for Holders {
    fn clone(&self) -> Self {
        gauge::add(self.len());
        Self {
            one: self.one.clone(),
            many: self.many.clone(),
        }
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        // The common end (a released lock) has no holder left: no count.
        let left = self.len();
        if left > 0 {
            gauge::sub(left);
        }
    }
}

impl Holders {
    /// Ends every hold of a value Redis frees off its main thread (an
    /// asynchronous flush), counting them apart: the main thread's count is
    /// a plain load and store (see `gauge`), which another thread must not
    /// touch.
    pub fn clear_off_main_thread(&mut self) {
        gauge::sub_background(self.len());
        self.one = None;
        self.many = None;
    }
}

/// Holds in every lock value alive in the process (see [`Holders`]): the
/// `dlock_holders` gauge.
pub fn live_holders() -> u64 {
    gauge::get()
}

/// The raw count of this test thread's holds, negative if a path
/// subtracted too much: the property tests check it against the holders
/// their locks have.
#[cfg(test)]
pub fn live_holders_raw() -> i64 {
    gauge::raw()
}

/// Holds are added and taken on Redis's main thread only (commands,
/// timers, loading, `free`), so a load and a store suffice there, as for
/// the event counters: a locked read-modify-write would cost every acquire
/// and release for no reader's sake. The one exception, a value freed by
/// an asynchronous flush on a background thread, is counted apart,
/// atomically ([`Holders::clear_off_main_thread`]).
#[cfg(not(test))]
mod gauge {
    use std::sync::atomic::{AtomicI64, Ordering};

    static MAIN_THREAD: AtomicI64 = AtomicI64::new(0);
    static FREED_IN_BACKGROUND: AtomicI64 = AtomicI64::new(0);

    #[inline]
    pub fn add(n: usize) {
        let now = MAIN_THREAD.load(Ordering::Relaxed);
        MAIN_THREAD.store(now + n as i64, Ordering::Relaxed);
    }

    #[inline]
    pub fn sub(n: usize) {
        let now = MAIN_THREAD.load(Ordering::Relaxed);
        MAIN_THREAD.store(now - n as i64, Ordering::Relaxed);
    }

    pub fn sub_background(n: usize) {
        FREED_IN_BACKGROUND.fetch_add(n as i64, Ordering::Relaxed);
    }

    pub fn get() -> u64 {
        let held = MAIN_THREAD.load(Ordering::Relaxed);
        (held - FREED_IN_BACKGROUND.load(Ordering::Relaxed)).max(0) as u64
    }
}

/// Unit tests run in parallel threads: each counts its own holds.
#[cfg(test)]
mod gauge {
    use std::cell::Cell;

    thread_local! {
        static LIVE_HOLDS: Cell<i64> = const { Cell::new(0) };
    }

    pub fn add(n: usize) {
        LIVE_HOLDS.with(|live| live.set(live.get() + n as i64));
    }

    pub fn sub(n: usize) {
        LIVE_HOLDS.with(|live| live.set(live.get() - n as i64));
    }

    pub fn sub_background(n: usize) {
        sub(n);
    }

    pub fn get() -> u64 {
        LIVE_HOLDS.with(|live| live.get()).max(0) as u64
    }

    /// The raw count, negative if a path subtracted too much.
    pub fn raw() -> i64 {
        LIVE_HOLDS.with(|live| live.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(owner: &str, exclusive: u64, shared: u32, deadline_ms: u64) -> Hold {
        Hold {
            owner: owner.as_bytes().into(),
            exclusive,
            shared,
            token: 1,
            deadline_ms,
            session: None,
            weight: 1,
        }
    }

    #[test]
    fn a_removal_in_the_leases_last_millisecond_ends_it() {
        // Redis 8's active expiry removes a key at `now >= expire`, the
        // lease's last (still live) millisecond: that is its end too.
        let single = hold("a", 1, 0, 100);
        assert!(single.is_live(100));
        assert!(!single.ended_by_removal_at(99));
        assert!(single.ended_by_removal_at(100));
        assert!(single.ended_by_removal_at(101));
        let mut holders = Holders::default();
        assert!(!holders.all_ended_by_removal_at(u64::MAX));
        holders.insert(hold("a", 0, 1, 100));
        assert!(holders.all_ended_by_removal_at(100));
        holders.insert(hold("b", 0, 1, 200));
        assert!(!holders.all_ended_by_removal_at(199));
        assert!(holders.all_ended_by_removal_at(200));
    }

    #[test]
    fn one_holder_is_inline_and_two_are_indexed() {
        let mut holders = Holders::default();
        holders.insert(hold("a", 0, 1, 100));
        assert!(!holders.is_many());
        holders.insert(hold("b", 0, 2, 50));
        assert!(holders.is_many());
        assert_eq!(holders.len(), 2);
        assert_eq!(holders.shared_owners(), 2);
        assert_eq!(holders.earliest_deadline(), Some(50));
        assert_eq!(holders.latest_deadline(), Some(100));
        let owners: Vec<&[u8]> = holders.iter().map(|h| &*h.owner).collect();
        assert_eq!(owners, vec![&b"a"[..], b"b"]);
        assert_eq!(holders.remove(b"a").map(|h| h.shared), Some(1));
        assert!(!holders.is_many());
        assert_eq!(holders.single().map(|h| &*h.owner), Some(&b"b"[..]));
    }

    #[test]
    fn update_keeps_the_indexes_and_removes_an_empty_hold() {
        let mut holders = Holders::default();
        holders.insert(hold("a", 0, 1, 100));
        holders.insert(hold("b", 0, 1, 200));
        holders.insert(hold("c", 0, 1, 300));
        holders.update(b"a", |h| {
            h.exclusive = 1;
            h.deadline_ms = 400;
        });
        assert_eq!(
            holders.exclusive_holder().map(|h| &*h.owner),
            Some(&b"a"[..])
        );
        assert_eq!(holders.earliest_deadline(), Some(200));
        assert_eq!(holders.latest_deadline(), Some(400));
        holders.update(b"b", |h| h.shared = 0);
        assert_eq!(holders.len(), 2);
        assert_eq!(holders.shared_owners(), 2);
        assert_eq!(holders.update(b"zz", |_| ()), None);
    }

    #[test]
    fn the_shared_weight_follows_every_change() {
        let weighted = |owner: &str, shared: u32, weight: u32| Hold {
            weight,
            ..hold(owner, 0, shared, 100)
        };
        let mut holders = Holders::default();
        holders.insert(weighted("a", 1, 3));
        assert_eq!(holders.shared_weight(), 3);
        holders.insert(weighted("b", 2, 2));
        holders.insert(hold("x", 1, 0, 100));
        assert_eq!(
            holders.shared_weight(),
            5,
            "an exclusive-only hold takes none"
        );
        holders.update(b"b", |h| h.shared = 1);
        assert_eq!(holders.shared_weight(), 5, "re-entries share one weight");
        holders.update(b"b", |h| {
            h.shared = 0;
            h.exclusive = 1;
        });
        assert_eq!(holders.shared_weight(), 3);
        holders.remove(b"x");
        holders.remove(b"b");
        assert!(!holders.is_many());
        assert_eq!(holders.shared_weight(), 3, "inline again");
        assert_eq!(holders.remove_expired(101).len(), 1);
        assert_eq!(holders.shared_weight(), 0);
    }

    #[test]
    fn expired_and_session_holders_are_removed_by_index() {
        let mut holders = Holders::default();
        for (i, owner) in ["a", "b", "c", "d"].iter().enumerate() {
            let mut h = hold(owner, 0, 1, 100 * (i as u64 + 1));
            h.session = NonZeroU64::new(if i % 2 == 0 { 7 } else { 8 });
            holders.insert(h);
        }
        let expired: Vec<Box<[u8]>> = holders
            .remove_expired(250)
            .into_iter()
            .map(|h| h.owner.into())
            .collect();
        assert_eq!(expired, vec![Box::from(&b"a"[..]), Box::from(&b"b"[..])]);
        let ended: Vec<Box<[u8]>> = holders
            .remove_session(7)
            .into_iter()
            .map(|h| h.owner.into())
            .collect();
        assert_eq!(ended, vec![Box::from(&b"c"[..])]);
        assert_eq!(holders.single().map(|h| &*h.owner), Some(&b"d"[..]));
    }

    #[test]
    fn the_holders_gauge_follows_every_change() {
        let start = live_holders_raw();
        let count = || live_holders_raw() - start;
        let mut holders = Holders::of_one(hold("a", 1, 0, 100));
        assert_eq!(count(), 1);
        holders.insert(hold("b", 0, 1, 50));
        holders.insert(hold("c", 0, 1, 300));
        assert_eq!(count(), 3);
        let copy = holders.clone();
        assert_eq!(count(), 6);
        drop(copy);
        assert_eq!(count(), 3);
        assert_eq!(holders.remove_expired(60).len(), 1);
        assert_eq!(count(), 2);
        holders.update(b"c", |hold| hold.shared = 0);
        assert_eq!(count(), 1);
        assert!(holders.remove(b"nobody").is_none());
        assert_eq!(count(), 1);
        holders.clear_single();
        assert_eq!(count(), 0);
        holders.insert(hold("d", 1, 0, 100));
        holders.insert(hold("e", 0, 1, 100));
        holders.clear();
        assert_eq!(count(), 0);
        holders.insert(hold("f", 1, 0, 100));
        drop(holders);
        assert_eq!(count(), 0);
    }
}
