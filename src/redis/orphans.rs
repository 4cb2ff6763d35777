//! Waiters of either kind (single-key [`waiters`], multi-key
//! [`multiwaiters`]) whose lock value went away under them (DEL, expiry,
//! eviction, a flush, a move): where they waited, their queueing again at
//! their key, and the null answer when they cannot be. Both kinds share
//! the queues and one id space, so this sits above both registries, which
//! import neither it nor each other's users.

use super::ffi::{Ctx, KeyName, LockKey};
use super::scheduler::{self, OrphanGroup, QueuedWaiter};
use super::stats::{self, Event};
use super::{multiwaiters, waiters};
use crate::lock::{Lock, WaiterId};

/// Re-queues, at once, the orphaned waiters that waited at `name` (the
/// value under them was just deleted, e.g. by Redis expiring the key as this
/// command opened it), so that nobody takes the lock ahead of them.
#[inline]
pub fn adopt_orphans_at(ctx: Ctx, name: KeyName, key: &mut LockKey) {
    // One atomic load on the commands' path while no value has orphans.
    if may_have_orphans() {
        adopt_orphans_now(ctx, name, key);
    }
}

/// Whether any lock value may have orphaned waiters (one atomic load): if
/// not, [`adopt_orphans_at`] has nothing to do.
#[inline]
pub fn may_have_orphans() -> bool {
    scheduler::may_have_orphans()
}

#[inline(never)]
fn adopt_orphans_now(ctx: Ctx, name: KeyName, key: &mut LockKey) {
    let db = ctx.selected_db();
    let (waiting, lease_expired) = scheduler::take_orphans_at(db, name.bytes(), ctx.in_cluster());
    if waiting.is_empty() {
        return;
    }
    if lease_expired {
        // Counted here as the timer counts it when it re-queues them.
        stats::record(ctx, Event::Expire, name);
    }
    if key.lock().is_none() && key.insert(Lock::new()).is_err() {
        refuse(waiting);
        return;
    }
    if let Some(lock) = key.lock_mut() {
        requeue(lock, db, name.bytes(), waiting);
        if lease_expired {
            stats::note_orphans_of_expired_lease();
        }
    }
}

/// Where each waiter of a dying lock value waited: groups by key, in queue
/// order. `unlinked_from` is where Redis took the value from, if known.
///
/// A multi-key request stays in its key's group, so that it is queued again
/// in its place among that key's waiters: every queue must keep ordering
/// multi-key requests as they entered, or two of them could wait on each
/// other for ever. Only when the place is unknown (a value freed by a
/// flush) does it find its lost place again itself.
pub fn locate(
    waiters: Vec<QueuedWaiter>,
    lease_expired: bool,
    unlinked_from: Option<(i32, Box<[u8]>)>,
) -> Vec<OrphanGroup> {
    let places = waiters.into_iter().filter_map(|(owner, waiter)| {
        let place = match waiters::place_of(waiter.id) {
            Some(place) => place,
            None if multiwaiters::contains(waiter.id) => match &unlinked_from {
                Some(place) => place.clone(),
                None => {
                    multiwaiters::orphaned(waiter.id, lease_expired);
                    return None;
                }
            },
            None => return None,
        };
        Some((place.0, place.1, (owner, waiter)))
    });
    group_by_key(places, lease_expired)
}

/// Groups consecutive waiters of the same key.
fn group_by_key(
    places: impl Iterator<Item = (i32, Box<[u8]>, QueuedWaiter)>,
    lease_expired: bool,
) -> Vec<OrphanGroup> {
    let mut groups: Vec<OrphanGroup> = Vec::new();
    for (db, key, waiter) in places {
        match groups.last_mut() {
            Some(group) if group.db == db && group.key == key => group.waiters.push(waiter),
            _ => groups.push(OrphanGroup {
                db,
                key,
                waiters: vec![waiter],
                lease_expired,
            }),
        }
    }
    groups
}

/// Re-queues waiters whose lock value was deleted into `lock` (in order),
/// now living at `db`/`key`.
pub fn requeue(lock: &mut Lock, db: i32, key: &[u8], waiters: Vec<QueuedWaiter>) {
    let now_ms = crate::clock::now_ms();
    for (owner, waiter) in waiters {
        let id = waiter.id;
        if multiwaiters::contains(id) {
            match lock.enqueue_waiter(&owner, waiter, now_ms) {
                Ok(seq) => multiwaiters::requeued(id, key, seq),
                Err(_) => multiwaiters::refuse(id),
            }
            continue;
        }
        if !waiters::is_waiting(id) {
            continue;
        }
        match lock.enqueue_waiter(&owner, waiter, now_ms) {
            Ok(seq) => waiters::requeued(id, db, key, seq),
            Err(_) => {
                waiters::refuse(id);
            }
        }
    }
}

/// Answers waiter `id` null, whichever its kind: the lock it waited for
/// moved or went away.
pub fn refuse_id(id: WaiterId) {
    if !waiters::refuse(id) {
        multiwaiters::refuse(id);
    }
}

/// Answers these waiters null: the lock they waited for moved away.
pub fn refuse_ids(ids: impl IntoIterator<Item = WaiterId>) {
    for id in ids {
        refuse_id(id);
    }
}

/// Unblocks waiters whose lock can no longer exist (the key now holds
/// another type) with a null reply.
pub fn refuse(waiters: Vec<QueuedWaiter>) {
    for (_, waiter) in waiters {
        refuse_id(waiter.id);
    }
}

/// Every single-key waiter of database `db` (-1: all), grouped by key in
/// queue order: their values are about to be freed where the registry
/// cannot be reached.
pub fn orphan_database(db: i32) -> Vec<OrphanGroup> {
    let mut places = waiters::queued_in_database(db);
    places.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    group_by_key(
        places
            .into_iter()
            .map(|(db, key, _, waiter)| (db, key, waiter)),
        false,
    )
}

/// The server became a replica: every waiter is answered null at once
/// (Redis disconnects blocked clients on demotion, Valkey in cluster mode
/// does not; the master's state replaces this server's anyway).
pub fn refuse_all() {
    multiwaiters::refuse_all();
    for id in waiters::all_ids() {
        waiters::refuse(id);
    }
}
