//! Single-key lock waiters: the registry of clients waiting in lock queues
//! (kept by [`super::blocked`], which also holds the Redis callbacks). What
//! happens to waiters of either kind when their lock value goes away is
//! [`super::orphans`]'s, a layer up.
//!
//! Life of a waiter: [`block`] queues it in the lock and blocks its client
//! (its BLOCK timeout kept by the module, see [`super::timeouts`]); then
//! exactly one of these happens:
//! * a hand-off grants it the lock ([`wake`]): the reply callback sends the grant;
//! * its timeout passes: the scheduler takes it out of the queue ([`time_out`])
//!   and it is answered null;
//! * its connection closes (or CLIENT KILL, or a role change): it is taken
//!   out of the queue;
//! * `CLIENT UNBLOCK`: it is taken out of the queue and answered null.
//!
//! A grant whose reply Redis dropped (a grant and a `CLIENT UNBLOCK` or a
//! disconnect in one event-loop turn) is taken back when Redis frees it.
//!
//! All of this runs on Redis's main thread; the registry is a thread-local.

use std::cell::{Cell, RefCell};
use std::thread::LocalKey;

use super::blocked::{self, BlockedKind, Registry};
use super::ffi::{Ctx, KeyName, LockKey};
use super::scheduler::{self, QueuedWaiter};
use super::stats::{self, Event};
use super::timeouts::Blocked;
use crate::commands::CommandError;
use crate::lock::{Mode, Request, Waiter, WaiterGrant, WaiterId};

/// Where a blocked client waits, and what it asked for.
struct Record {
    db: i32,
    key: Box<[u8]>,
    /// Its position key in the lock's queue.
    seq: u64,
    owner: Box<[u8]>,
    waiter: Waiter,
    /// When its BLOCK timeout ends (ms since the epoch); None: never.
    times_out_at: Option<u64>,
    /// The blocked client's id (`CLIENT LIST`, `CLIENT KILL ID`).
    client: u64,
    /// When it blocked (µs since the epoch), for the wait histogram.
    blocked_at_us: u64,
}

/// Single-key lock waiters, as blocked clients.
struct Waiters;

thread_local! {
    static REGISTRY: RefCell<Registry<Waiters>> = RefCell::new(Registry::default());
    /// The last waiter id given (single-key and multi-key).
    static LAST_ID: Cell<WaiterId> = const { Cell::new(0) };
}

impl BlockedKind for Waiters {
    type Record = Record;
    type Answer = Outcome;

    fn registry() -> &'static LocalKey<RefCell<Registry<Self>>> {
        &REGISTRY
    }

    /// A waiter leaving is taken out of its queue (the scheduler then
    /// settles the key).
    fn leave(ctx: Ctx, id: WaiterId, record: &Record) {
        leave_queues(ctx, record.db, id, &[(&record.key, record.seq)]);
    }

    fn timeout_answer() -> Outcome {
        Outcome::Refused
    }

    fn timed_out(ctx: Ctx, record: &Record) {
        record_wait_of(record);
        let name = ctx.key_name(&record.key);
        let fact = super::audit::Fact {
            owner: &record.owner,
            token: 0,
            holds: 0,
        };
        stats::record_fact(ctx, Event::Timeout, name.name(), fact);
    }

    fn reply(ctx: Ctx, outcome: &Outcome) {
        match outcome {
            Outcome::Granted {
                token,
                holds,
                owner,
                delivered,
                ..
            } => {
                delivered.set(true);
                ctx.reply_array(3);
                ctx.reply_count(*token);
                ctx.reply_count(*holds);
                ctx.reply_bulk(owner);
            }
            Outcome::Refused => ctx.reply_null(),
        }
    }

    fn freed(outcome: Outcome) {
        if let Outcome::Granted {
            token,
            owner,
            mode,
            place: Some((db, key)),
            delivered,
            ..
        } = outcome
        {
            if !delivered.get() {
                // Redis dropped the reply: nobody knows of this hold.
                scheduler::revoke_grant(db, key, owner, mode, token);
            }
        }
    }
}

/// Takes waiter `id` (single-key or multi-key) out of the queues at its
/// places in database `db`: (key, its position there).
pub(super) fn leave_queues<K: AsRef<[u8]>>(ctx: Ctx, db: i32, id: WaiterId, places: &[(K, u64)]) {
    let previous_db = ctx.selected_db();
    for (key, seq) in places {
        if let Some((mut lock_key, _name)) = ctx.open_lock_in(db, key.as_ref()) {
            if let Some(lock) = lock_key.lock_mut() {
                lock.remove_waiter(*seq, id);
            }
        }
    }
    ctx.select_db(previous_db);
    // The queues changed: let the scheduler settle each key (delete it if
    // vacant, hand it on) where propagation is safe.
    let now_ms = crate::clock::now_ms();
    for (key, _) in places {
        scheduler::wake_at(now_ms, db, key.as_ref());
    }
}

/// Runs `f` on the registry. Never call Redis inside `f`: a Redis call may
/// free a lock value, whose callback needs the registry again.
fn with_registry<T>(f: impl FnOnce(&mut Registry<Waiters>) -> T) -> Option<T> {
    blocked::with(f)
}

/// What a woken client is told.
enum Outcome {
    Granted {
        token: u64,
        holds: u64,
        owner: Box<[u8]>,
        mode: Mode,
        /// Where the grant was made: (db, key).
        place: Option<(i32, Box<[u8]>)>,
        /// Whether the reply was sent. Redis 7.0 drops the reply of a client
        /// unblocked twice in one event-loop turn (a grant, then `CLIENT
        /// UNBLOCK` or a disconnect): such a grant is taken back.
        delivered: Cell<bool>,
    },
    /// The lock went away under it (its key now holds another type), or
    /// its BLOCK timeout passed: null.
    Refused,
}

/// Whether waiter `id` is still blocked and waiting.
pub fn is_waiting(id: WaiterId) -> bool {
    with_registry(|registry| registry.contains(id)).unwrap_or(false)
}

/// A blocked waiter as `DLOCK.INFO key FULL` shows it: its client id and
/// when its `BLOCK` timeout ends (None: `BLOCK 0`).
pub fn describe(id: WaiterId) -> Option<(u64, Option<u64>)> {
    with_registry(|registry| {
        let record = registry.get(id)?;
        Some((record.client, record.times_out_at))
    })
    .flatten()
}

/// Number of blocked clients.
pub fn blocked_count() -> usize {
    with_registry(|registry| registry.len()).unwrap_or(0)
}

/// A new waiter id, never used before by a single-key or a multi-key
/// waiter (they share the queues, so they share one id space).
pub(super) fn new_id() -> Option<WaiterId> {
    LAST_ID
        .try_with(|last| {
            last.set(last.get() + 1);
            last.get()
        })
        .ok()
}

/// Queues `request` in `key`'s lock and blocks the calling client for up to
/// `timeout_ms` (0: no timeout).
pub fn block(
    ctx: Ctx,
    name: KeyName,
    key: &mut LockKey,
    request: Request<'_>,
    timeout_ms: u64,
    now_ms: u64,
) -> Result<(), CommandError> {
    let id = new_id().ok_or(CommandError::BlockFailed)?;
    let lock = key.lock_mut().ok_or(CommandError::BlockFailed)?;
    let waiter = Waiter {
        id,
        ttl_ms: request.ttl_ms,
        session: request.session,
        want: request.want,
    };
    let seq = lock
        .enqueue_waiter(request.owner, waiter.clone(), now_ms)
        .map_err(|_| CommandError::Deadlock)?;
    let times_out_at = (timeout_ms > 0).then(|| now_ms.saturating_add(timeout_ms));
    let record = Record {
        db: ctx.selected_db(),
        key: name.bytes().into(),
        seq,
        owner: request.owner.into(),
        waiter,
        times_out_at,
        client: ctx.client_id(),
        blocked_at_us: crate::clock::now_us(),
    };
    // No Redis timeout: the module keeps it (see `super::timeouts`).
    if !blocked::block::<Waiters>(ctx, id, record) {
        lock.remove_waiter(seq, id);
        return Err(CommandError::BlockFailed);
    }
    if let Some(at) = times_out_at {
        scheduler::time_out_at(at, Blocked::Waiter(id));
    }
    Ok(())
}

/// Unblocks a waiter that was granted the lock.
pub fn wake(grant: WaiterGrant) {
    let outcome = Outcome::Granted {
        token: grant.grant.token,
        holds: grant.grant.holds,
        owner: grant.owner,
        mode: grant.grant.mode,
        place: None,
        delivered: Cell::new(false),
    };
    unblock(grant.waiter, outcome);
}

/// Answers waiter `id`; false if it is no blocked single-key waiter.
fn unblock(id: WaiterId, mut outcome: Outcome) -> bool {
    let Some((handle, record)) = blocked::take::<Waiters>(id) else {
        return false;
    };
    if let Outcome::Granted { place, .. } = &mut outcome {
        record_wait_of(&record);
        *place = Some((record.db, record.key));
    }
    handle.answer(outcome);
    true
}

/// Counts the wait of a waiter granted or timed out now in the wait
/// histogram.
fn record_wait_of(record: &Record) {
    let waited_us = crate::clock::now_us().saturating_sub(record.blocked_at_us);
    stats::record_wait(waited_us);
}

/// Answers waiter `id` null (its lock went away or moved, or it could not
/// be queued again); false if it is no blocked single-key waiter (see
/// [`super::orphans::refuse_id`] for either kind).
pub fn refuse(id: WaiterId) -> bool {
    unblock(id, Outcome::Refused)
}

/// Where waiter `id` waits: (db, key).
pub fn place_of(id: WaiterId) -> Option<(i32, Box<[u8]>)> {
    with_registry(|registry| {
        let record = registry.get(id)?;
        Some((record.db, record.key.clone()))
    })
    .flatten()
}

/// Waiter `id` was queued again at `db`/`key` (its lock value was deleted
/// under it), at position `seq`.
pub fn requeued(id: WaiterId, db: i32, key: &[u8], seq: u64) {
    with_registry(|registry| {
        if let Some(record) = registry.get_mut(id) {
            record.db = db;
            record.key = key.into();
            record.seq = seq;
        }
    });
}

/// Every waiter of database `db` (-1: all), with its place and position:
/// (db, key, seq, waiter).
pub fn queued_in_database(db: i32) -> Vec<(i32, Box<[u8]>, u64, QueuedWaiter)> {
    with_registry(|registry| {
        registry
            .iter()
            .filter(|(_, record)| db == -1 || record.db == db)
            .map(|(_, record)| {
                let waiter = (record.owner.clone(), record.waiter.clone());
                (record.db, record.key.clone(), record.seq, waiter)
            })
            .collect()
    })
    .unwrap_or_default()
}

/// Every blocked single-key waiter.
pub fn all_ids() -> Vec<WaiterId> {
    with_registry(|registry| registry.iter().map(|(id, _)| id).collect()).unwrap_or_default()
}

/// Waiters of databases `first` and `second`: (id, db, key, seq).
pub fn in_databases(first: i32, second: i32) -> Vec<(WaiterId, i32, Box<[u8]>, u64)> {
    with_registry(|registry| {
        registry
            .iter()
            .filter(|(_, record)| record.db == first || record.db == second)
            .map(|(id, record)| (id, record.db, record.key.clone(), record.seq))
            .collect()
    })
    .unwrap_or_default()
}

/// Waiter `id`'s BLOCK timeout passed (the scheduler's timer): it leaves
/// its queue and is answered null. False if `id` is no single-key waiter.
pub fn time_out(ctx: Ctx, id: WaiterId) -> bool {
    blocked::time_out::<Waiters>(ctx, id)
}
