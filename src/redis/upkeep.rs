//! What the scheduler's timer does (see [`scheduler`], which keeps the
//! work to do and when, and runs this from its timer): hands locks on whose
//! leases or reservations ended, re-queues orphaned waiters, grants
//! multi-key requests, takes back grants whose reply was dropped, releases
//! the SESSION holds of closed connections and answers blocked clients
//! whose timeout passed. It sits above the registries of blocked clients
//! and the keyspace code it drives; the scheduler, below them all, calls
//! it only through the entry points [`init`] hands over.

use super::audit::Fact;
use super::ffi::Ctx;
use super::keyspace::{self, settle, Changes};
use super::scheduler::{self, OrphanGroup, Revocation, Work};
use super::stats::{self, Event};
use super::timeouts::{self, Blocked};
use super::{awaiters, multigrant, multiwaiters, orphans, waiters, watchers};
use crate::clock;
use crate::lock::Lock;

/// Starts the scheduler with this work; called once from the module's init.
pub fn init(ctx: &redis_module::Context) {
    scheduler::init(
        ctx,
        Work {
            run_due,
            answer_timeouts: answer_due_timeouts,
            stand_by,
        },
    );
}

/// A replica or a loading server: the master decides. Lock waiters cannot
/// exist here (their clients were disconnected on demotion); latch awaiters
/// and watchers can (AWAIT and WATCH read), and time out here.
fn stand_by(ctx: Ctx) {
    answer_due_timeouts(ctx, clock::now_ms());
    for departure in scheduler::drop_master_work() {
        orphans::refuse(departure.waiters);
    }
}

/// Does everything due, on a master.
fn run_due(ctx: Ctx) {
    let original_db = ctx.selected_db();
    // Settling a key can orphan waiters (Redis expires the key as it is
    // opened); run again until nothing due is left, within reason.
    for _round in 0..8 {
        let now = clock::now_ms();
        run_round(ctx, now);
        if !scheduler::has_work(now) {
            break;
        }
    }
    ctx.select_db(original_db);
}

/// Answers null every blocked client whose timeout has passed.
fn answer_due_timeouts(ctx: Ctx, now: u64) {
    for who in timeouts::take_due(now) {
        match who {
            Blocked::Waiter(id) => {
                if !waiters::time_out(ctx, id) {
                    multiwaiters::time_out(ctx, id);
                }
            }
            Blocked::Awaiter(id) => awaiters::time_out(ctx, id),
            Blocked::Watcher(id) => watchers::time_out(ctx, id),
        }
    }
}

fn run_round(ctx: Ctx, now: u64) {
    // Timeouts first: a client whose wait has ended is answered null, as
    // Redis answers a BLPOP whose timeout passed before the data came.
    answer_due_timeouts(ctx, now);

    for id in scheduler::take_multi_ready() {
        multigrant::try_grant(ctx, id, now);
    }

    // Unlinked values not freed since: they were moved (RENAME, MOVE).
    for departure in scheduler::take_departures() {
        orphans::refuse(departure.waiters);
        if departure.sessions.is_empty() {
            continue;
        }
        if let Some((db, key)) = ctx.find_lock_value(departure.value, departure.db) {
            for client in departure.sessions {
                scheduler::move_session_place(client, (departure.db, &departure.key), (db, &key));
            }
        }
    }

    for revocation in scheduler::take_revoked() {
        revoke(ctx, &revocation, now);
    }

    for (client, places) in scheduler::take_closed_sessions() {
        for (db, key) in places {
            release_session(ctx, client, db, &key, now);
        }
    }

    for group in &scheduler::take_orphans() {
        rehome(ctx, group, now);
    }

    while let Some((db, key)) = scheduler::pop_due(now) {
        settle_key(ctx, db, &key, now);
    }
}

/// Hands on, re-arms or deletes the lock at `db`/`key` as its state requires.
fn settle_key(ctx: Ctx, db: i32, key: &[u8], now: u64) {
    let Some((mut lock_key, name)) = ctx.open_lock_in(db, key) else {
        return;
    };
    if lock_key.lock().is_some() {
        let step = keyspace::step(now);
        settle(ctx, name.name(), &mut lock_key, step, Changes::default());
    }
}

/// Takes back a hold whose grant never reached its client.
fn revoke(ctx: Ctx, revocation: &Revocation, now: u64) {
    let Some((mut lock_key, name)) = ctx.open_lock_in(revocation.db, &revocation.key) else {
        return;
    };
    let mut step = keyspace::step(now);
    let Some(lock) = lock_key.lock_mut() else {
        return;
    };
    let revoked = lock.revoke(
        &revocation.owner,
        revocation.mode,
        revocation.token,
        &mut step,
    );
    if revoked {
        stats::record(ctx, Event::Release, name.name());
    }
    settle(ctx, name.name(), &mut lock_key, step, Changes::default());
}

fn release_session(ctx: Ctx, client: u64, db: i32, key: &[u8], now: u64) {
    let Some((mut lock_key, name)) = ctx.open_lock_in(db, key) else {
        return;
    };
    let mut step = keyspace::step(now);
    let Some(lock) = lock_key.lock_mut() else {
        return;
    };
    for hold in lock.end_session(client, &mut step) {
        let fact = Fact {
            owner: &hold.owner,
            token: hold.token,
            holds: 0,
        };
        stats::record_fact(ctx, Event::Release, name.name(), fact);
    }
    settle(ctx, name.name(), &mut lock_key, step, Changes::default());
}

/// Re-queues the waiters of a deleted lock value at their key (a new lock
/// if the key is empty), then hands the lock to the head.
fn rehome(ctx: Ctx, group: &OrphanGroup, now: u64) {
    let entries = group.waiters.clone();
    if !group.rehomes_here(ctx.in_cluster()) {
        orphans::refuse(entries);
        return;
    }
    let Some((mut lock_key, name)) = ctx.open_lock_in(group.db, &group.key) else {
        orphans::refuse(entries);
        return;
    };
    if lock_key.lock().is_none() && lock_key.insert(Lock::new()).is_err() {
        orphans::refuse(entries);
        return;
    }
    if let Some(lock) = lock_key.lock_mut() {
        orphans::requeue(lock, group.db, &group.key, entries);
    }
    if group.lease_expired {
        stats::record(ctx, Event::Expire, name.name());
        stats::note_orphans_of_expired_lease();
    }
    let changes = Changes {
        queue: true,
        ..Changes::default()
    };
    settle(
        ctx,
        name.name(),
        &mut lock_key,
        keyspace::step(now),
        changes,
    );
}
