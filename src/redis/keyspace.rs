//! Settling a lock key after a change: the one place that turns the pure
//! lock's state into Redis state.

use super::audit::Fact;
use super::ffi::{Ctx, KeyName, LockKey};
use super::stats::{self, Event};
use super::{grace, multiwaiters, propagation, scheduler, tokens, waiters};
use crate::lock::{self, Grant, HolderEffect, Lock, Mode, Step, WaiterId, Want};

/// What a caller changed in the lock, besides its holds (which the
/// [`Step`] records), before settling it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Changes<'a> {
    /// A waiter joined or left the queue (not replicated).
    pub queue: bool,
    /// A FAIR reservation was made or refreshed: (owner, deadline, want).
    pub reserved: Option<(&'a [u8], u64, Want)>,
    /// A SESSION hold was granted to this connection.
    pub session: Option<u64>,
}

/// Settles the lock in `key` after a change recorded in `step` and `changes`:
///
/// 1. the lock is handed to the head of its queue while the head can be
///    granted (new tokens), holders whose lease ended are dropped;
/// 2. a vacant lock (not held, nobody queued) is deleted, and `DEL` replicated;
/// 3. otherwise the key's expire follows the leases and the reservations,
///    and the changes are replicated as explicit state (`DLOCK.SETSTATE`);
/// 4. a timer is asked for the next moment the lock needs attention;
/// 5. SESSION holds are indexed by connection, and woken waiters unblocked.
pub fn settle(
    ctx: Ctx,
    name: KeyName,
    key: &mut LockKey,
    mut step: Step<'_>,
    changes: Changes<'_>,
) {
    let Some(lock) = key.lock_mut() else {
        return;
    };
    let now_ms = step.now_ms;
    // Waiters of a value Redis removed after its lease ended were queued
    // here again just before: their grants below follow an expiry. Taken
    // whether or not anyone is granted now, so that it never outlives
    // this settle.
    let orphans_of_expiry = stats::take_orphans_of_expired_lease();
    // No hand-off while a grace window is open (and no look before it closes).
    let window = grace::window(now_ms);
    lock::grace::hand_off(lock, window, &mut step);
    // A multi-key request heading the queue, grantable here, is granted by
    // the scheduler on all its keys at once; nothing else is due now.
    let multi_head = !step.ready.is_empty();
    for id in step.ready.drain(..) {
        multiwaiters::ready_at_a_key(id);
    }
    for hold in &step.expired {
        let fact = Fact {
            owner: &hold.owner,
            token: hold.token,
            holds: hold.total(),
        };
        stats::record_fact(ctx, Event::Expire, name, fact);
    }
    if !step.woken.is_empty() {
        // The waiters' wait ended because a lease did: a holder's in this
        // step, or that of a value Redis removed under them.
        let after_expiry = orphans_of_expiry || !step.expired.is_empty();
        for grant in &step.woken {
            let event = handoff_event(&grant.grant);
            let fact = Fact {
                owner: &grant.owner,
                token: grant.grant.token,
                holds: grant.grant.holds,
            };
            stats::record_fact(ctx, event, name, fact);
            stats::count_grant_cause(event, after_expiry);
        }
    }
    if lock.is_vacant(now_ms) {
        key.delete();
        if propagation::needed(ctx) {
            ctx.replicate_delete(name);
        }
        return;
    }
    let wakeup_at =
        lock::grace::wakeup_at(lock, window, now_ms).filter(|at| !(multi_head && *at <= now_ms));
    let changed = step.holds_changed || changes.queue || changes.reserved.is_some();
    if !changed && step.woken.is_empty() {
        if let Some(at) = wakeup_at {
            scheduler::wake_at(at, ctx.selected_db(), name.bytes());
        }
        return;
    }
    if (changes.reserved.is_some() || step.holds_changed) && propagation::needed(ctx) {
        if let Some((owner, deadline_ms, want)) = changes.reserved {
            ctx.replicate_reserve(name, owner, deadline_ms, want);
        }
        if step.holds_changed {
            replicate_holders(ctx, name, lock, &mut step);
        }
    }
    match lock.expire_at(now_ms) {
        Some(deadline_ms) => key.set_deadline(deadline_ms),
        None => key.remove_expire(),
    }
    // Only SESSION holds and locks with waiters need the database number.
    let sessions = changes
        .session
        .into_iter()
        .chain(step.woken.iter().filter_map(|grant| grant.session));
    for client in sessions {
        scheduler::track_session(client, ctx.selected_db(), name.bytes());
    }
    if let Some(at) = wakeup_at {
        scheduler::wake_at(at, ctx.selected_db(), name.bytes());
    }
    for grant in step.woken {
        waiters::wake(grant);
    }
}

/// What [`settle`] does after [`Lock::acquire_first`] gave a lock its first
/// hold, or [`Lock::reenter_sole`] let its only holder re-enter (one holder,
/// nothing queued, nothing else changed), without looking for what cannot
/// be there (no hand-off, vacancy, timer or waiter to wake): the holder is
/// replicated (`HOLD`), the key expires with the lease, and a new SESSION
/// hold (`session`) is indexed by its connection.
#[inline]
pub fn settle_sole_hold(ctx: Ctx, name: KeyName, key: &mut LockKey, session: Option<u64>) {
    let Some(hold) = key.lock().and_then(|lock| lock.holders().single()) else {
        return;
    };
    let deadline_ms = hold.deadline_ms;
    if propagation::needed(ctx) {
        ctx.replicate_hold(name, hold, true);
    }
    key.set_deadline(deadline_ms);
    if let Some(client) = session {
        scheduler::track_session(client, ctx.selected_db(), name.bytes());
    }
}

/// What [`settle`] does after [`Lock::release_last`] ended a lock's last
/// hold (nothing held, nothing queued): the key is deleted and `DEL`
/// replicated.
pub fn settle_vacated(ctx: Ctx, name: KeyName, key: &mut LockKey) {
    key.delete();
    if propagation::needed(ctx) {
        ctx.replicate_delete(name);
    }
}

/// The event a key publishes when a waiter is granted it from the queue.
pub fn handoff_event(grant: &Grant) -> Event {
    match (grant.reentry, grant.mode) {
        (true, Mode::Exclusive) => Event::Reenter,
        (true, Mode::Shared) => Event::ReenterShared,
        (false, Mode::Exclusive) => Event::Handoff,
        (false, Mode::Shared) => Event::HandoffShared,
    }
}

/// Propagates the holders a step changed (see [`Lock::holder_effects`]).
fn replicate_holders(ctx: Ctx, name: KeyName, lock: &Lock, step: &mut Step<'_>) {
    lock.holder_effects(step, |effect| match effect {
        HolderEffect::Only(hold) => ctx.replicate_hold(name, hold, true),
        HolderEffect::Beside(hold) => ctx.replicate_hold(name, hold, false),
        HolderEffect::Drop(owner) => ctx.replicate_drop(name, owner),
        HolderEffect::Free => ctx.replicate_free(name),
    });
}

/// A step on a lock at `now_ms` with the server's token counter and
/// waiter registry.
pub fn step(now_ms: u64) -> Step<'static> {
    Step::new(now_ms, &tokens::issue, &is_waiting).with_multi_key(&multiwaiters::contains)
}

/// Whether a queued waiter, single-key or multi-key, still waits.
fn is_waiting(id: WaiterId) -> bool {
    waiters::is_waiting(id) || multiwaiters::contains(id)
}

/// A command's step at `now_us` (the clock read once for the whole
/// command): leases count its milliseconds, and `issue` (made by
/// [`token_issuer`] from the same instant) gives new tokens its
/// microseconds as their floor.
pub fn step_at<'a>(now_us: u64, issue: &'a dyn Fn() -> u64) -> Step<'a> {
    Step::new(now_us / 1_000, issue, &is_waiting).with_multi_key(&multiwaiters::contains)
}

/// Issues tokens with `now_us` as their floor, without reading the clock.
pub fn token_issuer(now_us: u64) -> impl Fn() -> u64 {
    move || tokens::issue_at(now_us)
}
