//! Clients blocked in `DLOCK.WATCH`: the registry of watchers, by key, and
//! every path that answers them when a key's newest token changes.
//!
//! A watcher waits while the newest token of its key (the largest token
//! among the live holders, 0 without one, see [`Lock::newest_hold`]) equals
//! the token it knows. It is answered, with every other watcher of the key
//! in the same step, when:
//! * the module changes the lock (a grant at once or from the queue, a
//!   batch grant, a release, an expiry or revocation handled by the timer,
//!   a SESSION closing, a replicated `DLOCK.SETSTATE` on a replica): each
//!   of these ends with the lock's key, opened for writing, being closed,
//!   which [`super::ffi`] reports to [`key_closed`]; a re-entry or a RENEW
//!   closes the key too, but leaves the newest token as it was;
//! * Redis takes the value off its key (DEL, UNLINK, expiry, eviction, an
//!   overwrite, RENAME or MOVE away; on a replica the master's DEL): the
//!   type's unlink callback calls [`key_removed`];
//! * a value arrives at the key from elsewhere (RENAME or MOVE onto it,
//!   RESTORE, COPY): watchers block on their key
//!   ([`blocked::block_on_key`]), so Redis signals the key as ready when a
//!   value is added at it and [`BlockedKind::key_ready`] rereads it. A
//!   keyspace-event subscription would tell the same, but Redis would call
//!   it for every DEL and EXPIRE of every key, and a module cannot take a
//!   subscription back: the signal of a key costs nothing to commands on
//!   keys nobody watches;
//! * a flush, SWAPDB or a replica's full load replaces the data set
//!   ([`flush_database`], [`recheck_databases`], [`recheck_all`]).
//!
//! Then as for every blocked client (see [`super::blocked`]): its timeout
//! answers null, `CLIENT UNBLOCK` null (or the `UNBLOCKED` error), and a
//! closed connection takes it out of the registry.
//!
//! Ended leases: Redis removes an expired key only when it samples or
//! touches it, and a newest hold may end before the lock's other holders.
//! While a key is watched, the scheduler is asked to look at it just after
//! its newest hold's deadline; settling it then closes the key as above.
//!
//! All of this runs on Redis's main thread; the registries are
//! thread-locals.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CStr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::LocalKey;

use super::blocked::{self, BlockedKind, Registry};
use super::ffi::{self, Ctx, KeyName};
use super::scheduler;
use super::timeouts::Blocked;
use crate::commands::CommandError;
use crate::lock::{Hold, Lock, WaiterId};

/// Watchers answered because their key's newest token changed (`INFO
/// dlock`'s `dlock_watch_wakeups`).
pub static WATCH_WAKEUPS: AtomicU64 = AtomicU64::new(0);

/// Whether any client watches: one load for the type's unlink callback.
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Records whether any client watches, for [`any`] and for the observer
/// of closing keys.
fn set_watching(on: bool) {
    WATCHING.store(on, Ordering::Relaxed);
    ffi::observe_closes(on);
}

/// A key's newest live hold, as a watcher is told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Newest {
    pub token: u64,
    pub owner: Rc<[u8]>,
    pub deadline_ms: u64,
}

impl Newest {
    fn of(hold: &Hold) -> Self {
        Self {
            token: hold.token,
            owner: Rc::from(&*hold.owner),
            deadline_ms: hold.deadline_ms,
        }
    }
}

/// What a watcher is answered.
pub enum Answer {
    /// The newest token changed: to this hold, or to none (0).
    Changed(Option<Newest>),
    /// The WATCH timeout passed: null.
    TimedOut,
}

/// What a blocked watcher waits on.
struct Record {
    db: i32,
    key: Box<[u8]>,
    /// The newest token the client knows; it waits while the key's equals it.
    known: u64,
}

/// Watchers, as blocked clients.
struct Watchers;

/// The watchers of each key: by database, then key name.
type ByKey = HashMap<i32, HashMap<Box<[u8]>, Vec<WaiterId>>>;

thread_local! {
    static REGISTRY: RefCell<Registry<Watchers>> = RefCell::new(Registry::default());
    static BY_KEY: RefCell<ByKey> = RefCell::new(HashMap::new());
    static NEXT_ID: Cell<WaiterId> = const { Cell::new(0) };
}

impl BlockedKind for Watchers {
    type Record = Record;
    type Answer = Answer;
    const REPLY_ERROR: &'static CStr = c"ERR dlock internal error while replying to a watcher";

    fn deadline_key(id: WaiterId) -> Blocked {
        Blocked::Watcher(id)
    }

    fn registry() -> &'static LocalKey<RefCell<Registry<Self>>> {
        &REGISTRY
    }

    /// A watcher leaving is taken out of its key's list.
    fn leave(_ctx: Ctx, id: WaiterId, record: &Record) {
        unindex(record.db, &record.key, id);
    }

    fn timeout_answer() -> Answer {
        Answer::TimedOut
    }

    fn timed_out(_ctx: Ctx, _record: &Record) {}

    fn reply(ctx: Ctx, answer: &Answer) {
        match answer {
            Answer::Changed(newest) => reply_state(ctx, newest.as_ref(), crate::clock::now_ms()),
            Answer::TimedOut => ctx.reply_null(),
        }
    }

    /// A value was added at a watched key (RENAME, MOVE, RESTORE, COPY, or
    /// a lock created there): its watchers whose token differs are answered.
    fn key_ready(ctx: Ctx, key: &[u8]) {
        if is_watched(ctx.selected_db(), key) {
            recheck(ctx, key);
        }
    }
}

/// Replies `[newest-token, owner, pttl]`, or `[0, nil, -1]` without a live
/// holder: the reply of `DLOCK.WATCH`.
pub fn reply_state(ctx: Ctx, newest: Option<&Newest>, now_ms: u64) {
    match newest {
        Some(newest) => reply_hold(ctx, newest.token, &newest.owner, newest.deadline_ms, now_ms),
        None => reply_none(ctx),
    }
}

/// [`reply_state`] of a hold read from the lock.
pub fn reply_newest(ctx: Ctx, hold: Option<&Hold>, now_ms: u64) {
    match hold {
        Some(hold) => reply_hold(ctx, hold.token, &hold.owner, hold.deadline_ms, now_ms),
        None => reply_none(ctx),
    }
}

fn reply_hold(ctx: Ctx, token: u64, owner: &[u8], deadline_ms: u64, now_ms: u64) {
    ctx.reply_array(3);
    ctx.reply_count(token);
    ctx.reply_bulk(owner);
    ctx.reply_count(deadline_ms.saturating_sub(now_ms));
}

fn reply_none(ctx: Ctx) {
    ctx.reply_array(3);
    ctx.reply_integer(0);
    ctx.reply_null();
    ctx.reply_integer(-1);
}

/// Number of blocked watchers.
pub fn blocked_count() -> usize {
    blocked::with::<Watchers, _>(|registry| registry.len()).unwrap_or(0)
}

/// Has the closing of lock keys reported here; called once from the
/// module's init.
pub fn init() {
    ffi::set_close_observer(key_closed);
}

/// Blocks the calling client on `name` while its newest token is `known`,
/// for up to `timeout_ms` (0: no timeout). `newest_deadline_ms` is the
/// deadline of the key's newest live hold, if it has one.
pub fn block(
    ctx: Ctx,
    name: KeyName,
    known: u64,
    timeout_ms: u64,
    newest_deadline_ms: Option<u64>,
) -> Result<(), CommandError> {
    let id = NEXT_ID
        .try_with(|next| {
            next.set(next.get() + 1);
            next.get()
        })
        .map_err(|_| CommandError::BlockFailed)?;
    let db = ctx.selected_db();
    let record = Record {
        db,
        key: name.bytes().into(),
        known,
    };
    if !blocked::block_on_key::<Watchers>(ctx, name, id, record) {
        return Err(CommandError::BlockFailed);
    }
    BY_KEY.with_borrow_mut(|by_key| {
        by_key
            .entry(db)
            .or_default()
            .entry(name.bytes().into())
            .or_default()
            .push(id);
    });
    set_watching(true);
    if timeout_ms > 0 {
        let now_ms = crate::clock::now_ms();
        scheduler::time_out_at(now_ms.saturating_add(timeout_ms), Blocked::Watcher(id));
    }
    if let Some(deadline_ms) = newest_deadline_ms {
        // Look at the lock just after its newest lease ends (see the
        // module docs above).
        scheduler::wake_at(deadline_ms.saturating_add(1), db, name.bytes());
    }
    Ok(())
}

/// Takes watcher `id` out of its key's list.
fn unindex(db: i32, key: &[u8], id: WaiterId) {
    let _ = BY_KEY.try_with(|by_key| {
        let Ok(mut by_key) = by_key.try_borrow_mut() else {
            return;
        };
        let Some(keys) = by_key.get_mut(&db) else {
            return;
        };
        if let Some(ids) = keys.get_mut(key) {
            ids.retain(|watcher| *watcher != id);
            if ids.is_empty() {
                keys.remove(key);
            }
        }
        if keys.is_empty() {
            by_key.remove(&db);
        }
        if by_key.is_empty() {
            set_watching(false);
        }
    });
}

/// Whether any client watches `db`/`key`.
fn is_watched(db: i32, key: &[u8]) -> bool {
    BY_KEY
        .try_with(|by_key| {
            by_key
                .try_borrow()
                .is_ok_and(|by_key| by_key.get(&db).is_some_and(|keys| keys.contains_key(key)))
        })
        .unwrap_or(false)
}

/// Whether any client watches at all (one load; read on every unlink).
pub fn any() -> bool {
    WATCHING.load(Ordering::Relaxed)
}

/// The key `db`/`key` now has `newest` as its newest live hold: every
/// watcher that knows another token is answered, all in this call.
/// Returns whether watchers of the key are left waiting.
fn answer_changed(db: i32, key: &[u8], newest: Option<Newest>) -> bool {
    let token = newest.as_ref().map_or(0, |newest| newest.token);
    let ids: Vec<WaiterId> = BY_KEY
        .try_with(|by_key| {
            let Ok(by_key) = by_key.try_borrow() else {
                return Vec::new();
            };
            by_key
                .get(&db)
                .and_then(|keys| keys.get(key))
                .cloned()
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let mut left = false;
    for id in ids {
        let known =
            blocked::with::<Watchers, _>(|registry| registry.get(id).map(|r| r.known)).flatten();
        match known {
            Some(known) if known != token => {
                if let Some((handle, record)) = blocked::take::<Watchers>(id) {
                    unindex(record.db, &record.key, id);
                    let count = WATCH_WAKEUPS.load(Ordering::Relaxed);
                    WATCH_WAKEUPS.store(count + 1, Ordering::Relaxed);
                    handle.answer(Answer::Changed(newest.clone()));
                }
            }
            Some(_) => left = true,
            None => unindex(db, key, id),
        }
    }
    left
}

/// The close observer (see [`super::ffi::observe_closes`]): the lock at
/// `db`/`key`, opened for writing, is being closed with `lock` in it.
fn key_closed(db: i32, key: &[u8], lock: Option<&Lock>) {
    if !is_watched(db, key) {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let now_ms = crate::clock::now_ms();
        let hold = lock.and_then(|lock| lock.newest_hold(now_ms));
        let deadline_ms = hold.map(|hold| hold.deadline_ms);
        let left = answer_changed(db, key, hold.map(Newest::of));
        if let (true, Some(deadline_ms)) = (left, deadline_ms) {
            // A RENEW moved the newest lease's end: look again after it.
            scheduler::wake_at(deadline_ms.saturating_add(1), db, key);
        }
    }));
}

/// Redis takes the lock value off `db`/`key` (see the type's unlink
/// callback): the key has no holder now.
pub fn key_removed(db: i32, key: &[u8]) {
    if is_watched(db, key) {
        answer_changed(db, key, None);
    }
}

/// Reads the key `key` in the database selected in `ctx` and answers its
/// watchers whose token differs; the others are looked at again just after
/// the newest lease's end. Another type counts as no holder.
fn recheck(ctx: Ctx, key: &[u8]) {
    let name = ctx.key_name(key);
    let newest = match ctx.open_lock(name.name(), false) {
        Ok(lock_key) => {
            let now_ms = crate::clock::now_ms();
            lock_key
                .lock()
                .and_then(|lock| lock.newest_hold(now_ms))
                .map(Newest::of)
        }
        Err(_) => None,
    };
    let deadline_ms = newest.as_ref().map(|newest| newest.deadline_ms);
    let db = ctx.selected_db();
    if let (true, Some(deadline_ms)) = (answer_changed(db, key, newest), deadline_ms) {
        scheduler::wake_at(deadline_ms.saturating_add(1), db, key);
    }
}

/// Rereads every watched key of the databases that `selects` accepts.
fn recheck_where(ctx: Ctx, selects: impl Fn(i32) -> bool) {
    let places: Vec<(i32, Box<[u8]>)> = BY_KEY
        .try_with(|by_key| {
            let Ok(by_key) = by_key.try_borrow() else {
                return Vec::new();
            };
            by_key
                .iter()
                .filter(|(db, _)| selects(**db))
                .flat_map(|(db, keys)| keys.keys().map(|key| (*db, key.clone())))
                .collect()
        })
        .unwrap_or_default();
    if places.is_empty() {
        return;
    }
    let previous_db = ctx.selected_db();
    for (db, key) in places {
        if ctx.select_db(db) {
            recheck(ctx, &key);
        }
    }
    ctx.select_db(previous_db);
}

/// SWAPDB of `first` and `second`: their watched keys are read again.
pub fn recheck_databases(ctx: Ctx, first: i32, second: i32) {
    recheck_where(ctx, |db| db == first || db == second);
}

/// A replica loaded a new data set, or a replica became a master (whose
/// timer now ends leases): every watched key is read again.
pub fn recheck_all(ctx: Ctx) {
    recheck_where(ctx, |_| true);
}

/// A flush of database `db` (-1: all) starts: its keys go, so every watcher
/// there that knows a token is answered `[0, nil, -1]`.
pub fn flush_database(db: i32) {
    let places: Vec<(i32, Box<[u8]>)> = BY_KEY
        .try_with(|by_key| {
            let Ok(by_key) = by_key.try_borrow() else {
                return Vec::new();
            };
            by_key
                .iter()
                .filter(|(watched, _)| db == -1 || **watched == db)
                .flat_map(|(db, keys)| keys.keys().map(|key| (*db, key.clone())))
                .collect()
        })
        .unwrap_or_default();
    for (db, key) in places {
        answer_changed(db, &key, None);
    }
}

/// Watcher `id`'s timeout passed (the scheduler's timer): answered null.
pub fn time_out(ctx: Ctx, id: WaiterId) {
    blocked::time_out::<Watchers>(ctx, id);
}
