//! The timer of the work that must happen without a client asking:
//! lease-expiry and reservation-expiry hand-offs, waiters re-queued after
//! their lock value was deleted (DEL, FLUSHALL, eviction, Redis's own
//! expiry), settling a queue a waiter left, releasing SESSION holds of
//! closed connections, and answering blocked clients whose BLOCK timeout
//! passed (see [`timeouts`]).
//!
//! This file keeps the work to do and when: the lists the rest of the
//! adapter adds to, and one Redis timer armed for the earliest due time.
//! What the work is lives a layer up, in [`super::upkeep`], which hands
//! its entry points to [`init`]: the scheduler imports none of the
//! registries and keyspace code that schedule work here.
//!
//! The timer's callback runs on the main thread with a context that may
//! open keys and replicate, so every change made from it reaches replicas
//! and the AOF like a command's. Timers also fire on replicas and while
//! loading: nothing is done there (replicas hold no blocked clients, and
//! their state comes from the master).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::OnceLock;

use redis_module::raw;

use super::ffi::{api, Ctx};
use super::timeouts::{self, Blocked};
use super::wakeup;
use crate::clock;
use crate::lock::{Mode, Waiter, WaiterId};

/// A context owned by the module for the whole of its life, used to create
/// timers from places that have none (a value's free callback).
static TIMER_CONTEXT: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

pub type Place = (i32, Box<[u8]>);

/// A waiter taken out of a queue, with its owner.
pub type QueuedWaiter = (Box<[u8]>, Waiter);

/// Waiters of a deleted lock value that waited at the same key.
pub struct OrphanGroup {
    pub db: i32,
    pub key: Box<[u8]>,
    pub waiters: Vec<QueuedWaiter>,
    /// The value went away because its lease had ended (Redis expired it).
    pub lease_expired: bool,
}

impl OrphanGroup {
    /// Whether these waiters may be re-queued at their key on this server.
    /// In a cluster a value may have left for another node (MIGRATE during
    /// resharding deletes it here exactly as DEL does): granting a lock
    /// here could make a second holder, so only a value that Redis expired
    /// (its lease ended, here) is handed on; other waiters get null and
    /// retry, following MOVED if the slot moved.
    pub fn rehomes_here(&self, in_cluster: bool) -> bool {
        !in_cluster || self.lease_expired
    }
}

/// What the timer runs, handed to [`init`] by the layer above.
pub struct Work {
    /// Does everything due (the server may act: a master, not loading).
    pub run_due: fn(Ctx),
    /// Answers null the blocked clients whose timeout passed by `now` (ms).
    pub answer_timeouts: fn(Ctx, u64),
    /// Runs when the server may not act (a replica, or loading): answers
    /// due timeouts and drops the work the master decides.
    pub stand_by: fn(Ctx),
}

static WORK: OnceLock<Work> = OnceLock::new();

#[derive(Default)]
struct Scheduler {
    /// (when, db, key): look at this lock at or after `when` (ms since epoch).
    due: BTreeSet<(u64, i32, Box<[u8]>)>,
    /// The pending wake-up of each key in `due` (one per key: a key woken
    /// early is settled and re-scheduled for its next moment then).
    pending: HashMap<i32, HashMap<Box<[u8]>, u64>>,
    /// The armed timer and the time it fires at.
    armed: Option<(raw::RedisModuleTimerID, u64)>,
    /// Waiters of deleted lock values, to re-queue at their key.
    orphans: Vec<OrphanGroup>,
    /// Keys each connection holds SESSION locks on.
    sessions: HashMap<u64, Vec<Place>>,
    /// Closed connections whose SESSION holds are still to release.
    closed: Vec<u64>,
    /// Multi-key requests found grantable at one of their keys: try to
    /// grant them on all their keys at once.
    multi_ready: Vec<WaiterId>,
    /// Lock values unlinked from their key with waiters or a SESSION hold
    /// depending on that place (see [`depart`]).
    departures: Vec<Departure>,
    /// Holds granted to waiters whose reply Redis dropped: taken back.
    revoked: Vec<Revocation>,
}

/// A hold granted to a blocked client that never received the grant (Redis
/// 7.0 drops the reply of a client unblocked again in the same event-loop
/// turn, by `CLIENT UNBLOCK` or a disconnect).
pub struct Revocation {
    pub db: i32,
    pub key: Box<[u8]>,
    pub owner: Box<[u8]>,
    pub mode: Mode,
    pub token: u64,
}

/// A lock value Redis unlinked from its key (DEL, expiry, eviction,
/// overwrite, or RENAME/MOVE carrying it elsewhere) while blocked waiters or
/// a SESSION hold depended on its place. A deleted value is freed at once,
/// in the same call, and its free callback takes the record back (the
/// waiters are re-queued at their key); a value still alive when the timer
/// runs was moved: its waiters asked for the old name and are answered null
/// (they retry), and its SESSION hold is found at its new place.
pub struct Departure {
    /// The value's address: compared, never dereferenced.
    pub value: usize,
    pub db: i32,
    pub key: Box<[u8]>,
    pub waiters: Vec<QueuedWaiter>,
    /// Connections whose SESSION holds are in the value.
    pub sessions: Vec<u64>,
}

impl Scheduler {
    fn schedule(&mut self, at: u64, db: i32, key: &[u8]) {
        let keys = self.pending.entry(db).or_default();
        match keys.get_mut(key) {
            Some(pending) if *pending <= at => {}
            Some(pending) => {
                self.due.remove(&(*pending, db, key.into()));
                *pending = at;
                self.due.insert((at, db, key.into()));
            }
            None => {
                keys.insert(key.into(), at);
                self.due.insert((at, db, key.into()));
            }
        }
    }

    /// The next due key, removed from the schedule.
    fn pop_due(&mut self, now: u64) -> Option<Place> {
        let (at, _, _) = self.due.first()?;
        if *at > now {
            return None;
        }
        let (_, db, key) = self.due.pop_first()?;
        if let Some(keys) = self.pending.get_mut(&db) {
            keys.remove(&key);
        }
        Some((db, key))
    }

    /// When the timer must next fire.
    fn next_due(&self, now: u64) -> Option<u64> {
        let urgent = !self.orphans.is_empty()
            || !self.closed.is_empty()
            || !self.departures.is_empty()
            || !self.revoked.is_empty()
            || !self.multi_ready.is_empty();
        let first = self.due.first().map(|(at, _, _)| *at);
        let first = match (first, timeouts::next()) {
            (Some(key), Some(timeout)) => Some(key.min(timeout)),
            (key, timeout) => key.or(timeout),
        };
        if urgent {
            Some(now)
        } else {
            first
        }
    }

    /// Drops every piece of work on the keyspace (what is due, orphans,
    /// SESSION releases, multi-key grants, revocations), keeping which
    /// connections hold SESSION locks; returns the departures, whose
    /// waiters the caller may still answer.
    fn drop_keyspace_work(&mut self) -> Vec<Departure> {
        self.due.clear();
        self.pending.clear();
        self.orphans.clear();
        self.closed.clear();
        self.multi_ready.clear();
        self.revoked.clear();
        std::mem::take(&mut self.departures)
    }

    fn has_work(&self, now: u64) -> bool {
        self.next_due(now).is_some_and(|at| at <= now)
    }
}

thread_local! {
    static SCHEDULER: RefCell<Scheduler> = RefCell::new(Scheduler::default());
}

/// False when the scheduler certainly has no orphans (set when some are
/// added, cleared when they are looked for and none is there): every
/// ACQUIRE and FAIR looks for orphans at its key, and the uncontended path
/// should not pay a thread-local borrow for a list that is almost always
/// empty.
static MAY_HAVE_ORPHANS: AtomicBool = AtomicBool::new(false);
/// The same for departures, which every freed lock value looks for.
static MAY_HAVE_DEPARTURES: AtomicBool = AtomicBool::new(false);

/// Runs `f` on the scheduler; never call Redis inside `f`.
fn with_scheduler<T>(f: impl FnOnce(&mut Scheduler) -> T) -> Option<T> {
    SCHEDULER
        .try_with(|scheduler| scheduler.try_borrow_mut().ok().map(|mut s| f(&mut s)))
        .ok()
        .flatten()
}

/// Keeps a detached context for timers and what they run; called once from
/// the module's init (through [`super::upkeep::init`]).
pub fn init(ctx: &redis_module::Context, work: Work) {
    let _ = WORK.set(work);
    let detached =
        api!(RedisModule_GetDetachedThreadSafeContext(ctx.ctx) else std::ptr::null_mut());
    TIMER_CONTEXT.store(detached, Ordering::Relaxed);
    wakeup::init(on_precise_wakeup);
}

/// Asks for the lock at `db`/`key` to be looked at when `at_ms` has come.
pub fn wake_at(at_ms: u64, db: i32, key: &[u8]) {
    with_scheduler(|scheduler| scheduler.schedule(at_ms, db, key));
    arm();
}

/// Answers `who` null at `at_ms` (its BLOCK timeout) unless answered before.
pub fn time_out_at(at_ms: u64, who: Blocked) {
    // `at_ms` counts from a clock read truncated to the millisecond: the
    // wait has certainly lasted its whole timeout only once the next
    // millisecond has begun (Redis's own timeouts are strict the same way).
    timeouts::add(at_ms.saturating_add(1), who);
    arm();
}

/// Waiters of a lock value being freed: re-queue them at their key soon.
pub fn adopt_orphans(groups: Vec<OrphanGroup>) {
    if groups.is_empty() {
        return;
    }
    with_scheduler(|scheduler| scheduler.orphans.extend(groups));
    MAY_HAVE_ORPHANS.store(true, Ordering::Relaxed);
    arm();
}

/// Redis unlinked the lock value at `value` from `db`/`key` while `waiters`
/// (taken out of it) or the SESSION holds of connections `sessions`
/// depended on that place; see [`Departure`].
pub fn depart(value: usize, db: i32, key: &[u8], waiters: Vec<QueuedWaiter>, sessions: Vec<u64>) {
    with_scheduler(|scheduler| {
        scheduler.departures.push(Departure {
            value,
            db,
            key: key.into(),
            waiters,
            sessions,
        })
    });
    MAY_HAVE_DEPARTURES.store(true, Ordering::Relaxed);
    arm();
}

/// False when no unlinked value has departed waiters or SESSION places
/// (its free then has nothing to look for).
pub fn may_have_departures() -> bool {
    MAY_HAVE_DEPARTURES.load(Ordering::Relaxed)
}

/// The value at `value` is being freed: the place it was unlinked from and
/// the waiters taken out of it then, if any (they are its orphans).
pub fn take_departed_waiters(value: usize) -> (Option<Place>, Vec<QueuedWaiter>) {
    if !MAY_HAVE_DEPARTURES.load(Ordering::Relaxed) {
        return (None, Vec::new());
    }
    with_scheduler(|scheduler| {
        if scheduler.departures.is_empty() {
            MAY_HAVE_DEPARTURES.store(false, Ordering::Relaxed);
            return (None, Vec::new());
        }
        let mut place = None;
        let mut taken = Vec::new();
        scheduler.departures.retain_mut(|departure| {
            if departure.value != value {
                return true;
            }
            place = Some((departure.db, std::mem::take(&mut departure.key)));
            taken.append(&mut departure.waiters);
            false
        });
        (place, taken)
    })
    .unwrap_or_default()
}

/// A multi-key request heads a queue where it may be granted: try to grant
/// it on all its keys soon (not now: the caller has one of them open).
pub fn grant_multi_soon(id: WaiterId) {
    let added = with_scheduler(|scheduler| {
        let new = !scheduler.multi_ready.contains(&id);
        if new {
            scheduler.multi_ready.push(id);
        }
        new
    })
    .unwrap_or(false);
    if added {
        arm();
    }
}

/// Takes back, soon, one `mode` hold of `owner` under `token` at
/// `db`/`key`: it was granted to a client whose reply Redis dropped.
pub fn revoke_grant(db: i32, key: Box<[u8]>, owner: Box<[u8]>, mode: Mode, token: u64) {
    let revocation = Revocation {
        db,
        key,
        owner,
        mode,
        token,
    };
    with_scheduler(|scheduler| scheduler.revoked.push(revocation));
    arm();
}

/// Remembers that connection `client` holds a SESSION lock at `db`/`key`.
pub fn track_session(client: u64, db: i32, key: &[u8]) {
    with_scheduler(|scheduler| {
        let places = scheduler.sessions.entry(client).or_default();
        if !places.iter().any(|(d, k)| *d == db && **k == *key) {
            places.push((db, key.into()));
        }
    });
}

/// The SESSION lock of connection `client` moved from one place to another
/// (RENAME, MOVE): its hold follows.
pub fn move_session_place(client: u64, from: (i32, &[u8]), to: (i32, &[u8])) {
    with_scheduler(|scheduler| {
        let places = scheduler.sessions.entry(client).or_default();
        places.retain(|(db, key)| !(*db == from.0 && **key == *from.1));
        if !places.iter().any(|(db, key)| *db == to.0 && **key == *to.1) {
            places.push((to.0, to.1.into()));
        }
    });
}

/// SWAPDB: SESSION holds follow their locks into the other database.
pub fn swap_session_databases(first: i32, second: i32) {
    with_scheduler(|scheduler| {
        for places in scheduler.sessions.values_mut() {
            for (db, _) in places.iter_mut() {
                if *db == first {
                    *db = second;
                } else if *db == second {
                    *db = first;
                }
            }
        }
    });
}

/// The data set was replaced (a replica's async load completed): forget
/// every place of the old one. The armed timer, if any, finds nothing due.
pub fn forget_keyspace() {
    with_scheduler(|scheduler| {
        scheduler.drop_keyspace_work();
        scheduler.sessions.clear();
    });
}

/// Connection `client` closed: release its SESSION holds soon.
pub fn client_closed(client: u64) {
    let tracked = with_scheduler(|scheduler| {
        let tracked = scheduler.sessions.contains_key(&client);
        if tracked {
            scheduler.closed.push(client);
        }
        tracked
    })
    .unwrap_or(false);
    if tracked {
        arm();
    }
}

/// True while the timer callback runs: it re-arms once when it ends, so
/// what it schedules meanwhile (orphans of a key Redis expires as the
/// callback opens it, the next lease end of a lock it hands on) arms
/// nothing. Each arm costs a timer stop and start and a `timerfd_settime`
/// (a VM exit on virtual machines), and an arm for "now" from inside the
/// callback woke the event loop again for nothing: on the lease-expiry
/// hand-off this was about a third of the server's time from the wake-up
/// to the grant.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Marks the timer callback running until dropped (also on a panic).
struct Running;

impl Running {
    fn start() -> Running {
        RUNNING.store(true, Ordering::Relaxed);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Relaxed);
    }
}

/// Arms the timer for the earliest due time, if it is not armed already.
fn arm() {
    if RUNNING.load(Ordering::Relaxed) {
        return;
    }
    let ctx = TIMER_CONTEXT.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    let now = clock::now_ms();
    let Some(next) = with_scheduler(|scheduler| scheduler.next_due(now)).flatten() else {
        return;
    };
    let armed = with_scheduler(|scheduler| scheduler.armed).flatten();
    if let Some((timer, at)) = armed {
        if at <= next {
            return;
        }
        api!(RedisModule_StopTimer(ctx, timer, std::ptr::null_mut()) else 0);
    }
    // Redis timers count whole milliseconds from now and fire at the
    // earliest then: rounding the wait up, the timer never fires before
    // the instant (an early fire would re-arm, and a timer re-armed from a
    // timer callback waits at least another millisecond). The exact
    // instant comes from the wake-up (see [`wakeup`]); this timer is its
    // fallback.
    let due_us = next.saturating_mul(1_000);
    let delay = due_us.saturating_sub(clock::now_us()).div_ceil(1_000);
    let delay = i64::try_from(delay).unwrap_or(i64::MAX);
    let timer =
        api!(RedisModule_CreateTimer(ctx, delay, Some(on_timer), std::ptr::null_mut()) else 0);
    with_scheduler(|scheduler| scheduler.armed = Some((timer, next)));
    wakeup::wake_at_us(due_us);
}

/// The event loop woke at the instant the armed timer is due (see
/// [`wakeup`]): the timer is re-armed for now, outside any timer callback,
/// so Redis runs it in this same turn of the event loop.
fn on_precise_wakeup() {
    let ctx = TIMER_CONTEXT.load(Ordering::Relaxed);
    let Some((timer, at)) = with_scheduler(|scheduler| scheduler.armed).flatten() else {
        return;
    };
    if ctx.is_null() || at.saturating_mul(1_000) > clock::now_us() {
        return;
    }
    api!(RedisModule_StopTimer(ctx, timer, std::ptr::null_mut()) else 0);
    let timer = api!(RedisModule_CreateTimer(ctx, 0, Some(on_timer), std::ptr::null_mut()) else 0);
    with_scheduler(|scheduler| scheduler.armed = Some((timer, at)));
}

/// While clients are paused (`CLIENT PAUSE`, `FAILOVER`, a Cluster manual
/// failover), how often the timer looks whether the pause has ended.
const PAUSE_RETRY_MS: u64 = 10;

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    with_scheduler(|scheduler| scheduler.armed = None);
    let ctx = Ctx::from_raw(ctx);
    let running = Running::start();
    // During a pause nothing may be added to the replication stream (Redis
    // asserts on it, and a failover in progress relies on the offsets
    // standing still): the work waits until the pause ends.
    if api!(RedisModule_AvoidReplicaTraffic() else 0) != 0 {
        // Answering a timed-out client changes no data (a queue place is
        // not replicated; the key is settled after the pause), so timeouts
        // are kept during a pause, as Redis keeps BLPOP's.
        if let Some(work) = WORK.get() {
            let _ = std::panic::catch_unwind(|| (work.answer_timeouts)(ctx, clock::now_ms()));
        }
        let timer_ctx = TIMER_CONTEXT.load(Ordering::Relaxed);
        let retry = i64::try_from(PAUSE_RETRY_MS).unwrap_or(10);
        let timer = api!(RedisModule_CreateTimer(timer_ctx, retry, Some(on_timer), std::ptr::null_mut()) else 0);
        let at = clock::now_ms().saturating_add(PAUSE_RETRY_MS);
        with_scheduler(|scheduler| scheduler.armed = Some((timer, at)));
        return;
    }
    let outcome = std::panic::catch_unwind(|| match WORK.get() {
        Some(work) if ctx.may_act() => (work.run_due)(ctx),
        Some(work) => (work.stand_by)(ctx),
        None => {}
    });
    if outcome.is_err() {
        // Drop what failed rather than retrying it forever.
        with_scheduler(|scheduler| {
            scheduler.due.clear();
            scheduler.pending.clear();
        });
    }
    drop(running);
    arm();
}

// What the layer above takes to do its work (see [`Work`]).

/// False when no value has orphaned waiters waiting to be re-queued (see
/// [`MAY_HAVE_ORPHANS`]): one atomic load.
#[inline]
pub fn may_have_orphans() -> bool {
    MAY_HAVE_ORPHANS.load(Ordering::Relaxed)
}

/// Takes, at once, the orphaned waiters that waited at `db`/`key` and may
/// be re-queued there (see [`OrphanGroup::rehomes_here`]), in queue order,
/// and whether their value went away because its lease had ended.
pub fn take_orphans_at(db: i32, key: &[u8], in_cluster: bool) -> (Vec<QueuedWaiter>, bool) {
    if !MAY_HAVE_ORPHANS.load(Ordering::Relaxed) {
        return (Vec::new(), false);
    }
    with_scheduler(|scheduler| {
        let mut taken = Vec::new();
        let mut lease_expired = false;
        if scheduler.orphans.is_empty() {
            MAY_HAVE_ORPHANS.store(false, Ordering::Relaxed);
            return (taken, lease_expired);
        }
        scheduler.orphans.retain_mut(|group| {
            let here = group.db == db && *group.key == *key;
            if here && group.rehomes_here(in_cluster) {
                taken.append(&mut group.waiters);
                lease_expired |= group.lease_expired;
                false
            } else {
                true
            }
        });
        (taken, lease_expired)
    })
    .unwrap_or_default()
}

/// Whether something is due by `now` (ms).
pub fn has_work(now: u64) -> bool {
    with_scheduler(|scheduler| scheduler.has_work(now)).unwrap_or(false)
}

/// The next key due by `now` (ms), removed from the schedule.
pub fn pop_due(now: u64) -> Option<Place> {
    with_scheduler(|scheduler| scheduler.pop_due(now)).flatten()
}

/// The multi-key requests found grantable since last asked.
pub fn take_multi_ready() -> Vec<WaiterId> {
    with_scheduler(|scheduler| std::mem::take(&mut scheduler.multi_ready)).unwrap_or_default()
}

/// The unlinked values not freed since (see [`Departure`]).
pub fn take_departures() -> Vec<Departure> {
    with_scheduler(|scheduler| std::mem::take(&mut scheduler.departures)).unwrap_or_default()
}

/// The grants to take back (see [`revoke_grant`]).
pub fn take_revoked() -> Vec<Revocation> {
    with_scheduler(|scheduler| std::mem::take(&mut scheduler.revoked)).unwrap_or_default()
}

/// The closed connections with SESSION holds, each with the places of its
/// holds (forgotten here).
pub fn take_closed_sessions() -> Vec<(u64, Vec<Place>)> {
    with_scheduler(|scheduler| {
        let closed = std::mem::take(&mut scheduler.closed);
        closed
            .into_iter()
            .map(|client| {
                let places = scheduler.sessions.remove(&client).unwrap_or_default();
                (client, places)
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The groups of orphaned waiters not re-queued yet.
pub fn take_orphans() -> Vec<OrphanGroup> {
    with_scheduler(|scheduler| std::mem::take(&mut scheduler.orphans)).unwrap_or_default()
}

/// Drops the work only a master does (a replica or a loading server: the
/// master decides); returns the departures, whose waiters need an answer.
pub fn drop_master_work() -> Vec<Departure> {
    with_scheduler(Scheduler::drop_keyspace_work).unwrap_or_default()
}
