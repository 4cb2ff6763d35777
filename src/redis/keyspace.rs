//! Settling a lock key after a change: the one place that turns the pure
//! lock's state into Redis state.

use super::ffi::{Ctx, KeyName, LockKey};
use super::stats::{self, Event};
use super::{grace, scheduler, tokens, waiters};
use crate::lock::{self, WaiterGrant};

/// What a caller changed in the lock before settling it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Changes<'a> {
    /// The hold was granted, re-entered, renewed or released.
    pub hold: bool,
    /// A waiter joined or left the queue (not replicated).
    pub queue: bool,
    /// A FAIR reservation was made or refreshed: (owner, deadline).
    pub reserved: Option<(&'a [u8], u64)>,
}

impl Changes<'_> {
    fn any(&self) -> bool {
        self.hold || self.queue || self.reserved.is_some()
    }
}

/// Settles the lock in `key` after `changes`:
///
/// 1. a free lock is handed to the head of its queue (new token);
/// 2. a vacant lock (not held, nobody queued) is deleted, and `DEL` replicated;
/// 3. otherwise the key's expire follows the lease and the reservations, and
///    the changes are replicated as explicit state (`DLOCK.SETSTATE`);
/// 4. a timer is asked for the next moment the lock needs attention;
/// 5. SESSION holds are indexed by connection, and woken waiters unblocked.
///
/// `woken` carries waiters the caller's own operation already granted.
pub fn settle(
    ctx: Ctx,
    name: KeyName,
    key: &mut LockKey,
    now_ms: u64,
    mut changes: Changes<'_>,
    mut woken: Vec<WaiterGrant>,
) {
    let Some(lock) = key.lock_mut() else {
        return;
    };
    let expired = lock.stored_hold().is_some_and(|hold| !hold.is_live(now_ms));
    // No hand-off while a grace window is open (and no look before it closes).
    let window = grace::window(now_ms);
    let handed = lock::grace::hand_off(lock, window, now_ms, tokens::issue, waiters::is_waiting);
    if expired {
        stats::record(ctx, Event::Expire, name);
    }
    if !handed.is_empty() {
        changes.hold = true;
        woken.extend(handed);
    }
    for grant in &woken {
        let event = if grant.grant.reentry {
            Event::Reenter
        } else {
            Event::Handoff
        };
        stats::record(ctx, event, name);
    }
    if lock.is_vacant(now_ms) {
        key.delete();
        ctx.replicate_delete(name);
        return;
    }
    let wakeup_at = lock::grace::wakeup_at(lock, window, now_ms);
    if !changes.any() && woken.is_empty() {
        if let Some(at) = wakeup_at {
            scheduler::wake_at(at, ctx.selected_db(), name.bytes());
        }
        return;
    }
    let expire_at = lock.expire_at(now_ms);
    let session = lock.live_hold(now_ms).and_then(|hold| hold.session);
    if let Some((owner, deadline_ms)) = changes.reserved {
        ctx.replicate_reserve(name, owner, deadline_ms);
    }
    if changes.hold {
        match lock.live_hold(now_ms) {
            Some(hold) => ctx.replicate_hold(name, hold),
            None => ctx.replicate_free(name),
        }
    }
    match expire_at {
        Some(deadline_ms) => key.set_deadline(deadline_ms),
        None => key.remove_expire(),
    }
    // Only SESSION holds and locks with waiters need the database number.
    if let (true, Some(client)) = (changes.hold, session) {
        scheduler::track_session(client, ctx.selected_db(), name.bytes());
    }
    if let Some(at) = wakeup_at {
        scheduler::wake_at(at, ctx.selected_db(), name.bytes());
    }
    for grant in woken {
        waiters::wake(grant);
    }
}
