//! Settling a lock key after a change: the one place that turns the pure
//! lock's state into Redis state.

use super::ffi::{Ctx, KeyName, LockKey};
use super::stats::{self, Event};
use super::{multiwaiters, scheduler, tokens, waiters};
use crate::lock::{Mode, Step, WaiterId, Want};

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
    lock.hand_off(&mut step);
    // A multi-key request heading the queue, grantable here, is granted by
    // the scheduler on all its keys at once; nothing else is due now.
    let multi_head = !step.ready.is_empty();
    for id in step.ready.drain(..) {
        multiwaiters::ready_at_a_key(id);
    }
    for _ in 0..step.expired {
        stats::record(ctx, Event::Expire, name);
    }
    for grant in &step.woken {
        let event = match (grant.grant.reentry, grant.grant.mode) {
            (true, Mode::Exclusive) => Event::Reenter,
            (true, Mode::Shared) => Event::ReenterShared,
            (false, Mode::Exclusive) => Event::Handoff,
            (false, Mode::Shared) => Event::HandoffShared,
        };
        stats::record(ctx, event, name);
    }
    if lock.is_vacant(now_ms) {
        key.delete();
        ctx.replicate_delete(name);
        return;
    }
    let wakeup_at = lock
        .wakeup_at(now_ms)
        .filter(|at| !(multi_head && *at <= now_ms));
    let changed = step.holds_changed || changes.queue || changes.reserved.is_some();
    if !changed && step.woken.is_empty() {
        if let Some(at) = wakeup_at {
            scheduler::wake_at(at, ctx.selected_db(), name.bytes());
        }
        return;
    }
    if let Some((owner, deadline_ms, want)) = changes.reserved {
        ctx.replicate_reserve(name, owner, deadline_ms, want);
    }
    if step.holds_changed {
        let holders = lock.holders();
        match holders.single() {
            Some(hold) => ctx.replicate_hold(name, hold, true),
            None if holders.is_empty() => ctx.replicate_free(name),
            None => {
                let mut touched = std::mem::take(&mut step.touched);
                touched.sort_unstable();
                touched.dedup();
                for owner in &touched {
                    match holders.get(owner) {
                        Some(hold) => ctx.replicate_hold(name, hold, false),
                        None => ctx.replicate_drop(name, owner),
                    }
                }
            }
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

/// A step on a lock at `now_ms` with the server's token counter and
/// waiter registry.
pub fn step(now_ms: u64) -> Step<'static> {
    Step::new(now_ms, &tokens::issue, &is_waiting).with_multi_key(&multiwaiters::contains)
}

/// Whether a queued waiter, single-key or multi-key, still waits.
fn is_waiting(id: WaiterId) -> bool {
    waiters::is_waiting(id) || multiwaiters::is_waiting(id)
}
