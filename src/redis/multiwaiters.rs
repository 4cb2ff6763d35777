//! Clients blocked in `DLOCK.MACQUIRE ... BLOCK`: the registry of
//! multi-key waiters (one waiter, one place in each of its keys' queues;
//! kept by [`super::blocked`], which also holds the Redis callbacks) and
//! their grant.
//!
//! Life of a multi-key waiter: [`block`] queues it at every key in one step
//! ([`multi::enqueue_all`]) and blocks its client; each key's hand-off stops
//! at it and, when it is grantable there, reports it ready
//! ([`ready_at_a_key`]); the scheduler then runs
//! [`super::multigrant::try_grant`] (with none of its keys open elsewhere),
//! which grants it on every key at once or leaves it waiting. Exactly one `RedisModule_UnblockClient` per client: the
//! grant, a refusal (null: one of its locks went away or moved, or the
//! server became a replica), its timeout (kept by the module, see
//! [`super::timeouts`]; `CLIENT UNBLOCK` runs Redis's timeout callback), or
//! its disconnect.
//!
//! A refused waiter's places are left in the queues: they no longer count
//! as present, so each key's hand-off drops them when they reach the head
//! (the keys are settled at once for that). A waiter that leaves by timeout
//! or disconnect is taken out of every queue at once.

use std::cell::{Cell, RefCell};
use std::thread::LocalKey;

use super::blocked::{self, BlockedKind, Registry};
use super::ffi::{Ctx, KeyName, LockKey};
use super::scheduler;
use super::stats::{self, Event};
use super::timeouts::Blocked;
use super::waiters;
use crate::commands::CommandError;
use crate::lock::{multi, Lock, Request, Waiter, WaiterId};

/// Where a blocked multi-key request waits, and for whom.
struct Record {
    db: i32,
    owner: Box<[u8]>,
    /// Each key, in the order given, and the waiter's position in its queue.
    places: Vec<(Box<[u8]>, u64)>,
    /// The connection its holds are tied to (SESSION), if any.
    session: Option<u64>,
    /// What it asked for, to queue it again where its place was lost.
    waiter: Waiter,
    /// A lock value it waited in was freed where its place is unknown (a
    /// flush; `Some(lease ended)`): its place there is found again at the
    /// tail. (A value deleted from a known key re-queues its waiters, this
    /// request among them, in their order: see `orphans::locate`.)
    orphaned: Option<bool>,
}

/// Multi-key requests, as blocked clients.
struct MultiWaiters;

thread_local! {
    static REGISTRY: RefCell<Registry<MultiWaiters>> = RefCell::new(Registry::default());
    /// The request `multigrant::try_grant` is working on (its own keys' hand-offs
    /// report it ready again; that is no news).
    static TRYING: Cell<Option<WaiterId>> = const { Cell::new(None) };
}

/// What a woken client is told.
enum Outcome {
    /// `[token, holds]` per key, in the order given.
    Granted {
        grants: Vec<(u64, u64)>,
        owner: Box<[u8]>,
    },
    /// Null: one of its locks went away or moved, or its timeout passed.
    Refused,
}

impl BlockedKind for MultiWaiters {
    type Record = Record;
    type Answer = Outcome;

    fn registry() -> &'static LocalKey<RefCell<Registry<Self>>> {
        &REGISTRY
    }

    /// A request leaving is taken out of every queue (the scheduler then
    /// settles each key).
    fn leave(ctx: Ctx, id: WaiterId, record: &Record) {
        waiters::leave_queues(ctx, record.db, id, &record.places);
    }

    fn timeout_answer() -> Outcome {
        Outcome::Refused
    }

    fn timed_out(ctx: Ctx, record: &Record) {
        for (key, _) in &record.places {
            let name = ctx.key_name(key);
            stats::record(ctx, Event::Timeout, name.name());
        }
    }

    fn reply(ctx: Ctx, outcome: &Outcome) {
        match outcome {
            Outcome::Granted { grants, owner } => {
                ctx.reply_array(grants.len());
                for (token, holds) in grants {
                    ctx.reply_array(3);
                    ctx.reply_count(*token);
                    ctx.reply_count(*holds);
                    ctx.reply_bulk(owner);
                }
            }
            Outcome::Refused => ctx.reply_null(),
        }
    }
}

/// Runs `f` on the registry; never call Redis inside `f`.
fn with_registry<T>(f: impl FnOnce(&mut Registry<MultiWaiters>) -> T) -> Option<T> {
    blocked::with(f)
}

/// Whether `id` is a blocked multi-key request.
pub fn contains(id: WaiterId) -> bool {
    with_registry(|registry| registry.contains(id)).unwrap_or(false)
}

/// Number of blocked multi-key requests.
pub fn blocked_count() -> usize {
    with_registry(|registry| registry.len()).unwrap_or(0)
}

/// A key's hand-off found request `id` at its head, grantable there.
pub fn ready_at_a_key(id: WaiterId) {
    if TRYING
        .try_with(|trying| trying.get() != Some(id))
        .unwrap_or(false)
    {
        scheduler::grant_multi_soon(id);
    }
}

/// Queues `request` at every key (in `keys`, named `names`, all holding a
/// lock) in one step and blocks the calling client for up to `timeout_ms`
/// (0: no timeout). On an error nothing is queued.
pub fn block(
    ctx: Ctx,
    names: &[KeyName],
    keys: &mut [LockKey],
    request: Request<'_>,
    timeout_ms: u64,
    now_ms: u64,
) -> Result<(), CommandError> {
    let id = waiters::new_id().ok_or(CommandError::BlockFailed)?;
    let mut locks: Vec<&mut Lock> = keys.iter_mut().filter_map(LockKey::lock_mut).collect();
    if locks.len() != names.len() {
        return Err(CommandError::BlockFailed);
    }
    let waiter = Waiter {
        id,
        ttl_ms: request.ttl_ms,
        session: request.session,
        want: request.want,
    };
    let seqs = multi::enqueue_all(&mut locks, request.owner, &waiter, now_ms)
        .map_err(|_| CommandError::Deadlock)?;
    let times_out_at = (timeout_ms > 0).then(|| now_ms.saturating_add(timeout_ms));
    let record = Record {
        db: ctx.selected_db(),
        owner: request.owner.into(),
        places: names
            .iter()
            .zip(seqs.iter())
            .map(|(name, seq)| (Box::from(name.bytes()), *seq))
            .collect(),
        session: request.session,
        waiter,
        orphaned: None,
    };
    // No Redis timeout: the module keeps it (see `super::timeouts`).
    if !blocked::block::<MultiWaiters>(ctx, id, record) {
        for (lock, seq) in locks.iter_mut().zip(&seqs) {
            lock.remove_waiter(*seq, id);
        }
        return Err(CommandError::BlockFailed);
    }
    if let Some(at) = times_out_at {
        scheduler::time_out_at(at, Blocked::Waiter(id));
    }
    Ok(())
}

/// What granting request `id` needs to know, read once its keys are open
/// (see [`super::multigrant`]).
pub struct GrantRequest {
    pub owner: Box<[u8]>,
    /// Each key, in the order given, and the request's position there.
    pub places: Vec<(Box<[u8]>, u64)>,
    pub session: Option<u64>,
    pub waiter: Waiter,
    /// `Some(lease ended)` when a lock value it waited in was freed where
    /// its place is unknown (taken: it is dealt with by this grant).
    pub orphaned: Option<bool>,
}

/// Request `id`'s database and keys, in the order given.
pub fn keys_of(id: WaiterId) -> Option<(i32, Vec<Box<[u8]>>)> {
    with_registry(|registry| {
        let record = registry.get(id)?;
        let keys = record.places.iter().map(|(key, _)| key.clone()).collect();
        Some((record.db, keys))
    })
    .flatten()
}

/// What granting request `id` needs; None if it is no longer blocked.
pub fn grant_request(id: WaiterId) -> Option<GrantRequest> {
    with_registry(|registry| {
        let record = registry.get_mut(id)?;
        Some(GrantRequest {
            owner: record.owner.clone(),
            places: record.places.clone(),
            session: record.session,
            waiter: record.waiter.clone(),
            orphaned: record.orphaned.take(),
        })
    })
    .flatten()
}

/// Request `id`'s positions in its keys' queues, in the order of its keys.
pub fn set_positions(id: WaiterId, seqs: Vec<u64>) {
    with_registry(|registry| {
        if let Some(record) = registry.get_mut(id) {
            for (place, seq) in record.places.iter_mut().zip(seqs) {
                place.1 = seq;
            }
        }
    });
}

/// The request being granted now, if any: its own keys' hand-offs report
/// it ready again, which is no news (see [`ready_at_a_key`]).
pub fn set_trying(id: Option<WaiterId>) {
    let _ = TRYING.try_with(|trying| trying.set(id));
}

/// A blocked multi-key client taken out of the registry, to be answered.
pub struct Granting(blocked::Handle<MultiWaiters>);

impl Granting {
    /// Answers the client its grants, `[token, holds]` per key in the order
    /// it gave them.
    pub fn answer(self, grants: Vec<(u64, u64)>, owner: Box<[u8]>) {
        stats::count(Event::MultiHandoff);
        self.0.answer(Outcome::Granted { grants, owner });
    }
}

/// Takes request `id` out of the registry to answer it its grant.
pub fn take_for_grant(id: WaiterId) -> Option<Granting> {
    blocked::take::<MultiWaiters>(id).map(|(handle, _)| Granting(handle))
}

/// Request `id` was queued again at `key` (its lock value there was deleted
/// under it), at position `seq`.
pub fn requeued(id: WaiterId, key: &[u8], seq: u64) {
    with_registry(|registry| {
        if let Some(record) = registry.get_mut(id) {
            for place in record.places.iter_mut().filter(|place| *place.0 == *key) {
                place.1 = seq;
            }
        }
    });
}

/// A lock value request `id` waited in is being freed where its place is
/// unknown (a flush): its place there is queued again (a new lock if
/// needed) by [`super::multigrant::try_grant`], soon.
pub fn orphaned(id: WaiterId, lease_expired: bool) {
    let known = with_registry(|registry| match registry.get_mut(id) {
        Some(record) => {
            record.orphaned = Some(record.orphaned.unwrap_or(true) && lease_expired);
            true
        }
        None => false,
    })
    .unwrap_or(false);
    if known {
        scheduler::grant_multi_soon(id);
    }
}

/// Answers request `id` null (one of its locks went away or moved): its
/// places are dropped by each key's next hand-off, which runs at once.
pub fn refuse(id: WaiterId) {
    let Some((handle, record)) = blocked::take::<MultiWaiters>(id) else {
        return;
    };
    let now = crate::clock::now_ms();
    for (key, _) in &record.places {
        scheduler::wake_at(now, record.db, key);
    }
    handle.answer(Outcome::Refused);
}

/// The server became a replica: every multi-key request is answered null.
pub fn refuse_all() {
    let ids: Vec<WaiterId> =
        with_registry(|registry| registry.iter().map(|(id, _)| id).collect()).unwrap_or_default();
    for id in ids {
        refuse(id);
    }
}

/// Request `id`'s BLOCK timeout passed (the scheduler's timer): it leaves
/// every queue and is answered null. False if `id` is no multi-key request.
pub fn time_out(ctx: Ctx, id: WaiterId) -> bool {
    blocked::time_out::<MultiWaiters>(ctx, id)
}
