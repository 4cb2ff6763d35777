//! Atomic multi-key acquire (`DLOCK.MACQUIRE`) over several locks, pure.
//!
//! * At once: the request is granted only when every lock would grant it
//!   by its own single-key rules ([`Lock::would_acquire`]) in that instant;
//!   then it is granted on every lock, or nothing changes.
//! * Waiting: the request is one blocked waiter (one id) queued at the tail
//!   of every lock in one step ([`enqueue_all`]). Each lock's hand-off stops
//!   at it (it never takes one key alone) and reports it `ready` when it
//!   heads that queue and is compatible there; the adapter then asks
//!   [`ready_on_all`] and, if so, [`grant_all`] takes it out of every queue
//!   with a hold on each.
//!
//! Why waiters cannot wait on each other in a cycle: each request enters
//! all its queues in the same step, so any two requests that share keys are
//! in the same order in every queue they share. The oldest waiting request
//! therefore heads every queue it is in, and is granted as soon as the
//! holds on its keys end (holds are leases; they never wait). This holds
//! for requests whose owner holds none of their keys while it waits: an
//! owner upgrading a shared hold waits at the head of that key's queue (the
//! single-key rule), holding while it waits, and a reservation is replaced
//! in its own place.

use super::{Deadlock, Grant, Lock, Mode, Request, Step, Waiter, WaiterId};

/// Grants `request` on every lock if each would grant it now; otherwise
/// `None` and no hold changes (holders whose lease ended may be dropped).
pub fn acquire_all(
    locks: &mut [&mut Lock],
    request: Request<'_>,
    steps: &mut [Step<'_>],
) -> Option<Vec<Grant>> {
    let grantable = locks
        .iter_mut()
        .zip(steps.iter_mut())
        .all(|(lock, step)| lock.would_acquire(request, step));
    if !grantable {
        return None;
    }
    let grants: Vec<Grant> = locks
        .iter_mut()
        .zip(steps.iter_mut())
        .filter_map(|(lock, step)| lock.acquire(request, step))
        .collect();
    (grants.len() == locks.len()).then_some(grants)
}

/// Queues `waiter` of `owner` in every lock, by each lock's own rules (the
/// tail; an upgrade ahead; in place of the owner's reservation). Returns its
/// position key in each lock, or `Deadlock` (and queues it nowhere) when an
/// upgrade would wait behind another upgrade on some lock.
pub fn enqueue_all(
    locks: &mut [&mut Lock],
    owner: &[u8],
    waiter: &Waiter,
    now_ms: u64,
) -> Result<Vec<u64>, Deadlock> {
    let would_deadlock = waiter.want.mode == Mode::Exclusive
        && locks
            .iter()
            .any(|lock| lock.upgrade_would_deadlock(owner, now_ms));
    if would_deadlock {
        return Err(Deadlock);
    }
    let mut seqs = Vec::with_capacity(locks.len());
    for index in 0..locks.len() {
        match locks[index].enqueue_waiter(owner, waiter.clone(), now_ms) {
            Ok(seq) => seqs.push(seq),
            Err(deadlock) => {
                for (lock, seq) in locks.iter_mut().zip(&seqs) {
                    lock.remove_waiter(*seq, waiter.id);
                }
                return Err(deadlock);
            }
        }
    }
    Ok(seqs)
}

/// Runs every lock's hand-off (granting the single-key waiters ahead that
/// can be, into each step) and tells whether waiter `id` now heads every
/// queue and may be granted on every lock.
pub fn ready_on_all(locks: &mut [&mut Lock], id: WaiterId, steps: &mut [Step<'_>]) -> bool {
    let mut ready = true;
    for (lock, step) in locks.iter_mut().zip(steps.iter_mut()) {
        lock.hand_off(step);
        ready &= lock.head_is_ready(id);
    }
    ready
}

/// Grants waiter `id` on every lock and takes it out of every queue, if it
/// heads each and may be granted on each; otherwise `None`, nothing changes.
pub fn grant_all(
    locks: &mut [&mut Lock],
    id: WaiterId,
    steps: &mut [Step<'_>],
) -> Option<Vec<Grant>> {
    if !locks.iter().all(|lock| lock.head_is_ready(id)) {
        return None;
    }
    let grants: Vec<Grant> = locks
        .iter_mut()
        .zip(steps.iter_mut())
        .filter_map(|(lock, step)| lock.grant_head(id, step))
        .collect();
    (grants.len() == locks.len()).then_some(grants)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{TokenCounter, Want};
    use proptest::prelude::*;
    use std::cell::{Cell, RefCell};
    use std::collections::{BTreeMap, BTreeSet};

    const LOCKS: usize = 4;
    const TTL: u64 = 1_000_000;
    const NOW: u64 = 1_000;

    /// A waiting multi-key request: its owner, lock indices and mode.
    type Waiting = (Vec<u8>, Vec<usize>, Want);

    /// A world of locks, one token counter, and the multi-key waiters.
    struct World {
        locks: Vec<Lock>,
        tokens: RefCell<TokenCounter>,
        next_id: Cell<WaiterId>,
        /// Waiting multi-key requests: id -> (owner, lock indices, want).
        waiting: RefCell<BTreeMap<WaiterId, Waiting>>,
    }

    impl World {
        fn new() -> World {
            World {
                locks: (0..LOCKS).map(|_| Lock::new()).collect(),
                tokens: RefCell::new(TokenCounter::default()),
                next_id: Cell::new(0),
                waiting: RefCell::default(),
            }
        }

        /// Runs `f` over the locks at `indices`, with one step each.
        fn with_locks<T>(
            &mut self,
            indices: &[usize],
            f: impl FnOnce(&mut [&mut Lock], &mut [Step<'_>]) -> T,
        ) -> T {
            let issue = || self.tokens.borrow_mut().issue(0);
            let present = |id| self.waiting.borrow().contains_key(&id);
            let multi_key = |id| self.waiting.borrow().contains_key(&id);
            let mut steps: Vec<Step<'_>> = indices
                .iter()
                .map(|_| Step::new(NOW, &issue, &present).with_multi_key(&multi_key))
                .collect();
            let mut locks: Vec<&mut Lock> = self
                .locks
                .iter_mut()
                .enumerate()
                .filter(|(index, _)| indices.contains(index))
                .map(|(_, lock)| lock)
                .collect();
            let result = f(&mut locks, &mut steps);
            for step in &steps {
                assert!(step.woken.is_empty(), "only multi-key waiters here");
            }
            result
        }

        /// Grants every waiting request that can be, until none can.
        fn settle(&mut self) -> Vec<WaiterId> {
            let mut granted = Vec::new();
            loop {
                let candidates: Vec<(WaiterId, Vec<u8>, Vec<usize>)> = self
                    .waiting
                    .borrow()
                    .iter()
                    .map(|(id, (owner, keys, _))| (*id, owner.clone(), keys.clone()))
                    .collect();
                let mut progress = false;
                for (id, owner, keys) in candidates {
                    let grants = self.with_locks(&keys, |locks, steps| {
                        if ready_on_all(locks, id, steps) {
                            grant_all(locks, id, steps)
                        } else {
                            None
                        }
                    });
                    if let Some(grants) = grants {
                        assert_eq!(grants.len(), keys.len());
                        for index in &keys {
                            let holders = self.locks[*index].holders();
                            assert!(holders.get(&owner).is_some(), "held on every key");
                        }
                        self.waiting.borrow_mut().remove(&id);
                        granted.push(id);
                        progress = true;
                    }
                }
                if !progress {
                    return granted;
                }
            }
        }

        fn check(&self) {
            for lock in &self.locks {
                let holders = lock.holders();
                if holders.exclusive_holder().is_some() {
                    assert_eq!(holders.len(), 1, "an exclusive holder is alone");
                }
            }
        }

        fn release_everything(&mut self) {
            for lock in &mut self.locks {
                let owners: Vec<super::super::OwnerName> = lock
                    .holders()
                    .iter()
                    .map(|hold| hold.owner.clone())
                    .collect();
                let issue = || 0;
                let present = |_| true;
                let mut step = Step::new(NOW, &issue, &present);
                for owner in owners {
                    while lock.release(&owner, Mode::Exclusive, &mut step).is_ok() {}
                    while lock.release(&owner, Mode::Shared, &mut step).is_ok() {}
                }
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Acquire {
            owner: u8,
            keys: Vec<usize>,
            shared: bool,
            block: bool,
        },
        Release {
            owner: u8,
            key: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let keys =
            prop::sample::subsequence((0..LOCKS).collect::<Vec<_>>(), 1..=LOCKS).prop_shuffle();
        prop_oneof![
            3 => (0u8..5, keys, any::<bool>(), any::<bool>())
                .prop_map(|(owner, keys, shared, block)| Op::Acquire { owner, keys, shared, block }),
            2 => (0u8..5, 0..LOCKS).prop_map(|(owner, key)| Op::Release { owner, key }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn all_or_nothing_and_every_waiter_finishes(ops in prop::collection::vec(op(), 1..60)) {
            let mut world = World::new();
            for op in ops {
                match op {
                    Op::Acquire { owner, keys, shared, block } => {
                        let owner = vec![b'o', owner];
                        let want = if shared {
                            Want::shared(Some(2))
                        } else {
                            Want::EXCLUSIVE
                        };
                        let request = Request { owner: &owner, ttl_ms: TTL, session: None, want };
                        let before = world.locks.clone();
                        let granted = world.with_locks(&keys, |locks, steps| acquire_all(locks, request, steps));
                        match granted {
                            Some(grants) => {
                                prop_assert_eq!(grants.len(), keys.len());
                                for index in &keys {
                                    prop_assert!(world.locks[*index].holders().get(&owner).is_some());
                                }
                            }
                            None => {
                                prop_assert_eq!(&world.locks, &before, "nothing changes");
                                // Only a request that holds none of its keys
                                // waits at the tail of every queue (an upgrade
                                // waits at the head: it holds while it waits).
                                let holds_some = keys
                                    .iter()
                                    .any(|index| world.locks[*index].holders().get(&owner).is_some());
                                if block && !holds_some {
                                    let id = world.next_id.get() + 1;
                                    world.next_id.set(id);
                                    let waiter = Waiter { id, ttl_ms: TTL, session: None, want };
                                    let queued = world.with_locks(&keys, |locks, _| {
                                        enqueue_all(locks, &owner, &waiter, NOW)
                                    });
                                    if queued.is_ok() {
                                        world.waiting.borrow_mut().insert(id, (owner.clone(), keys.clone(), want));
                                    } else {
                                        prop_assert_eq!(&world.locks, &before, "a refused wait changes nothing");
                                    }
                                }
                            }
                        }
                    }
                    Op::Release { owner, key } => {
                        let owner = vec![b'o', owner];
                        let issue = || 0;
                        let present = |_| true;
                        let mut step = Step::new(NOW, &issue, &present);
                        let lock = &mut world.locks[key];
                        let _ = lock.release(&owner, Mode::Exclusive, &mut step)
                            .or_else(|_| lock.release(&owner, Mode::Shared, &mut step));
                    }
                }
                world.settle();
                world.check();
            }
            // Deadlock freedom: while holders keep releasing, every waiting
            // request is granted, at least one per round.
            let mut rounds = 0;
            while !world.waiting.borrow().is_empty() {
                rounds += 1;
                prop_assert!(rounds <= 100, "waiters stuck: {:?}", world.waiting.borrow());
                world.release_everything();
                let granted = world.settle();
                prop_assert!(!granted.is_empty(), "no progress: {:?}", world.waiting.borrow());
                world.check();
            }
            let queued: BTreeSet<usize> = world.locks.iter().map(|lock| lock.queue().waiter_count()).collect();
            prop_assert_eq!(queued, BTreeSet::from([0]));
        }
    }

    #[test]
    fn a_waiter_holds_its_place_at_a_free_key_until_every_key_is_free() {
        let mut world = World::new();
        let holder = Request {
            owner: b"h",
            ttl_ms: TTL,
            session: None,
            want: Want::EXCLUSIVE,
        };
        assert!(world
            .with_locks(&[1], |locks, steps| acquire_all(locks, holder, steps))
            .is_some());
        let multi = Request {
            owner: b"m",
            ..holder
        };
        assert!(world
            .with_locks(&[0, 1], |locks, steps| acquire_all(locks, multi, steps))
            .is_none());
        let waiter = Waiter {
            id: 1,
            ttl_ms: TTL,
            session: None,
            want: Want::EXCLUSIVE,
        };
        let seqs = world.with_locks(&[0, 1], |locks, _| enqueue_all(locks, b"m", &waiter, NOW));
        assert_eq!(seqs.map(|s| s.len()), Ok(2));
        world
            .waiting
            .borrow_mut()
            .insert(1, (b"m".to_vec(), vec![0, 1], Want::EXCLUSIVE));
        assert!(world.settle().is_empty());
        // Key 0 is free but its queue is headed by the multi-key waiter.
        let barger = Request {
            owner: b"b",
            ..holder
        };
        assert!(world
            .with_locks(&[0], |locks, steps| acquire_all(locks, barger, steps))
            .is_none());
        // Its hand-off reports the waiter ready there, without granting it.
        let ready = world.with_locks(&[0], |locks, steps| {
            locks[0].hand_off(&mut steps[0]);
            steps[0].ready.clone()
        });
        assert_eq!(ready, vec![1]);
        assert!(world.locks[0].holders().is_empty());
        world.release_everything();
        assert_eq!(world.settle(), vec![1]);
        assert!(world
            .locks
            .iter()
            .take(2)
            .all(|lock| lock.holders().get(b"m").is_some()));
    }
}
