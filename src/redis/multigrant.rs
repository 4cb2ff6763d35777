//! Granting a blocked multi-key request (`DLOCK.MACQUIRE .. BLOCK`) on
//! all its keys at once, from the scheduler's timer once a key's hand-off
//! found it ready (see [`multiwaiters`], the registry it reads). It opens
//! the keys and settles them, so it sits above [`keyspace`], which reports
//! ready requests to the registry below it.

use super::ffi::{Ctx, LockKey};
use super::keyspace::{self, settle, Changes};
use super::multiwaiters::{self, GrantRequest};
use super::orphans;
use super::stats;
use crate::lock::{multi, Lock, WaiterId};

/// Grants request `id` on all its keys if it heads every queue and is
/// grantable everywhere now; settles every key either way. Runs from the
/// scheduler, where no key is open.
pub fn try_grant(ctx: Ctx, id: WaiterId, now_ms: u64) {
    let Some((db, key_names)) = multiwaiters::keys_of(id) else {
        return;
    };
    if !ctx.select_db(db) {
        multiwaiters::refuse(id);
        return;
    }
    let names: Vec<_> = key_names.iter().map(|key| ctx.key_name(key)).collect();
    let mut keys = Vec::with_capacity(names.len());
    for name in &names {
        match ctx.open_lock(name.name(), true) {
            Ok(mut key) => {
                // Opening a key whose lease has ended makes Redis expire it:
                // its waiters (this request among them) are queued again at
                // once, in their order.
                orphans::adopt_orphans_at(ctx, name.name(), &mut key);
                keys.push(key);
            }
            Err(_) => {
                // The key now holds another type.
                drop(keys);
                multiwaiters::refuse(id);
                return;
            }
        }
    }
    // Read only now: its places may have moved, and a value it waited in
    // may have been flushed (its place unknown). In a cluster a deleted value
    // may have moved to another node: only one that Redis expired (its lease
    // ended here) is re-created here.
    let Some(GrantRequest {
        owner,
        places,
        session,
        waiter,
        orphaned,
    }) = multiwaiters::grant_request(id)
    else {
        // Refused while its orphaned places were queued again.
        return;
    };
    let may_recreate = orphaned.is_some_and(|lease_expired| lease_expired || !ctx.in_cluster());
    for key in &mut keys {
        if key.lock().is_none() && (!may_recreate || key.insert(Lock::new()).is_err()) {
            drop(keys);
            multiwaiters::refuse(id);
            return;
        }
    }
    if orphaned.is_some() {
        // Find the places lost with a deleted value again, at the tail.
        let mut seqs: Vec<u64> = places.iter().map(|(_, seq)| *seq).collect();
        for (key, seq) in keys.iter_mut().zip(seqs.iter_mut()) {
            let Some(lock) = key.lock_mut() else {
                continue;
            };
            let there = lock.queue().get(*seq).is_some_and(
                |entry| matches!(&entry.kind, crate::lock::EntryKind::Waiter(w) if w.id == id),
            );
            if !there {
                match lock.enqueue_waiter(&owner, waiter.clone(), now_ms) {
                    Ok(new_seq) => *seq = new_seq,
                    Err(_) => {
                        drop(keys);
                        multiwaiters::refuse(id);
                        return;
                    }
                }
            }
        }
        multiwaiters::set_positions(id, seqs);
    }
    multiwaiters::set_trying(Some(id));
    let mut steps: Vec<_> = names.iter().map(|_| keyspace::step(now_ms)).collect();
    let granted = {
        let mut locks: Vec<&mut Lock> = keys.iter_mut().filter_map(LockKey::lock_mut).collect();
        if multi::ready_on_all(&mut locks, id, &mut steps) {
            multi::grant_all(&mut locks, id, &mut steps)
        } else {
            None
        }
    };
    let handle = match granted {
        Some(_) => multiwaiters::take_for_grant(id),
        None => None,
    };
    for (index, (step, key)) in steps.into_iter().zip(keys.iter_mut()).enumerate() {
        let name = names[index].name();
        let grant = granted.as_ref().and_then(|grants| grants.get(index));
        if let Some(grant) = grant {
            let event = keyspace::handoff_event(grant);
            stats::record(ctx, event, name);
            stats::count_grant_cause(event, false);
        }
        let changes = Changes {
            session: session.filter(|_| grant.is_some_and(|grant| !grant.reentry)),
            ..Changes::default()
        };
        settle(ctx, name, key, step, changes);
    }
    multiwaiters::set_trying(None);
    if let (Some(grants), Some(handle)) = (granted, handle) {
        let grants = grants
            .iter()
            .map(|grant| (grant.token, grant.holds))
            .collect();
        handle.answer(grants, owner);
    }
}
