//! Shared holds against an independent model: random sequences of
//! exclusive and shared requests with limits, blocked waits, reservations,
//! releases in either mode (downgrades), upgrades, departures and time.
//!
//! After every operation (and the hand-off the adapter runs after it) the
//! lock must agree with the model on every holder's counts and token and on
//! the queue order, and these rules must hold:
//! * never an exclusive holder together with another owner;
//! * a new shared hold never brings the weights of the shared owners above
//!   its LIMIT (exclusion by weight; weight 1 counts owners);
//! * one weight per owner and lock: a shared request with another weight
//!   than the owner's hold or shared waiter is refused, and changes nothing;
//! * no barging: a new hold goes only to the head of the queue (or to
//!   anyone when it is empty, or to the owner of the reservation heading it);
//! * FIFO: waiters are granted in queue order, consecutive compatible shared
//!   heads together, and a compatible head is never left waiting; a head
//!   too heavy to fit blocks the lighter requests behind it;
//! * tokens strictly increase with every new hold or upgrade;
//! * an immediate request is granted exactly when the rules allow it.

use super::test_ops::{counting, want as any_want, Op};
use super::*;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::BTreeMap;

const OWNERS: [&[u8]; 4] = [b"p", b"q", b"r", b"s"];

/// A hold as persisted and replicated: owner, exclusive, shared, token,
/// deadline, weight.
type StoredHold = (Box<[u8]>, u64, u64, u64, u64, u32);
const RESERVATION_MS: u64 = 30;

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize, any_want(4), 1..60u64).prop_map(|(owner, want, ttl)| Op::Acquire {
            owner,
            want,
            ttl
        }),
        (0..4usize, any_want(4), 1..60u64).prop_map(|(owner, want, ttl)| Op::Block {
            owner,
            want,
            ttl
        }),
        (0..4usize, any_want(4), 1..60u64).prop_map(|(owner, want, ttl)| Op::Fair {
            owner,
            want,
            ttl
        }),
        (0..4usize, mode()).prop_map(|(owner, mode)| Op::Release { owner, mode }),
        (0..4usize, 1..60u64).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
        (0..8usize).prop_map(|nth| Op::Leave { nth }),
        (0..50u64).prop_map(|ms| Op::Wait { ms }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct ModelHold {
    exclusive: u64,
    shared: u64,
    token: u64,
    deadline: u64,
    /// The permits of its shared holds (1 while it has none).
    weight: u32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Place {
    Waiter {
        owner: usize,
        id: WaiterId,
        seq: u64,
        want: Want,
        ttl: u64,
    },
    Reserved {
        owner: usize,
        deadline: u64,
    },
}

impl Place {
    fn owner(&self) -> usize {
        match self {
            Place::Waiter { owner, .. } | Place::Reserved { owner, .. } => *owner,
        }
    }
}

#[derive(Default)]
struct Model {
    holders: BTreeMap<usize, ModelHold>,
    places: Vec<Place>,
    last_token: u64,
}

impl Model {
    fn expire(&mut self, now: u64) {
        self.holders.retain(|_, hold| hold.deadline >= now);
        self.places
            .retain(|p| !matches!(p, Place::Reserved { deadline, .. } if *deadline < now));
    }

    fn shared_owners(&self) -> usize {
        self.holders.values().filter(|h| h.shared > 0).count()
    }

    fn shared_weight(&self) -> u64 {
        self.holders
            .values()
            .filter(|h| h.shared > 0)
            .map(|h| u64::from(h.weight))
            .sum()
    }

    /// A shared request with another weight than the owner's shared hold
    /// or shared waiter.
    fn weight_conflict(&self, owner: usize, want: Want) -> bool {
        want.mode == Mode::Shared
            && (self
                .holders
                .get(&owner)
                .is_some_and(|h| h.shared > 0 && h.weight != want.weight)
                || self.places.iter().any(|p| {
                    matches!(p, Place::Waiter { owner: o, want: w, .. }
                        if *o == owner && w.mode == Mode::Shared && w.weight != want.weight)
                }))
    }

    fn grantable(&self, owner: usize, want: Want) -> bool {
        match self.holders.get(&owner) {
            Some(hold) => {
                want.mode == Mode::Shared || hold.exclusive > 0 || self.holders.len() == 1
            }
            None => match want.mode {
                Mode::Exclusive => self.holders.is_empty(),
                Mode::Shared => {
                    self.holders.values().all(|h| h.exclusive == 0)
                        && want.limit.is_none_or(|n| {
                            self.shared_weight() + u64::from(want.weight) <= u64::from(n)
                        })
                }
            },
        }
    }

    fn queue_open_to(&self, owner: usize) -> bool {
        match self.places.first() {
            None => true,
            Some(Place::Reserved { owner: head, .. }) => *head == owner,
            Some(Place::Waiter { .. }) => false,
        }
    }

    /// Applies a grant the lock reported; checks it against the rules.
    fn apply_grant(
        &mut self,
        owner: usize,
        want: Want,
        ttl: u64,
        now: u64,
        grant: Grant,
    ) -> Result<(), TestCaseError> {
        prop_assert!(
            self.grantable(owner, want),
            "granted an incompatible request"
        );
        let before = self.holders.get(&owner).copied();
        let new_token = match before {
            None => true,
            Some(hold) => want.mode == Mode::Exclusive && hold.exclusive == 0,
        };
        prop_assert_eq!(grant.reentry, !new_token);
        prop_assert_eq!(grant.mode, want.mode);
        let mut hold = before.unwrap_or(ModelHold {
            exclusive: 0,
            shared: 0,
            token: 0,
            deadline: 0,
            weight: 1,
        });
        if new_token {
            prop_assert!(grant.token > self.last_token, "tokens strictly increase");
            self.last_token = grant.token;
            hold.token = grant.token;
            // A new token fulfils the owner's reservations.
            self.places
                .retain(|p| !matches!(p, Place::Reserved { owner: o, .. } if *o == owner));
        } else {
            prop_assert_eq!(grant.token, hold.token, "a re-entry keeps the token");
        }
        match want.mode {
            Mode::Exclusive => hold.exclusive += 1,
            Mode::Shared => {
                if hold.shared == 0 {
                    hold.weight = want.weight;
                }
                prop_assert_eq!(hold.weight, want.weight, "one weight per owner");
                hold.shared += 1;
            }
        }
        hold.deadline = now + ttl;
        prop_assert_eq!(
            grant.holds,
            match want.mode {
                Mode::Exclusive => hold.exclusive,
                Mode::Shared => hold.shared,
            }
        );
        let new_shared_owner = before.is_none_or(|h| h.shared == 0) && want.mode == Mode::Shared;
        self.holders.insert(owner, hold);
        if new_shared_owner && !grant.reentry {
            if let Some(limit) = want.limit {
                prop_assert!(
                    self.shared_weight() <= u64::from(limit),
                    "LIMIT exceeded by weight"
                );
            }
        }
        Ok(())
    }

    /// Checks the waiters the lock woke, in order: each new hold is the
    /// model's head, re-entries belong to holders.
    fn apply_woken(&mut self, woken: &[WaiterGrant], now: u64) -> Result<(), TestCaseError> {
        for grant in woken {
            let index = self
                .places
                .iter()
                .position(|p| matches!(p, Place::Waiter { id, .. } if *id == grant.waiter));
            let Some(index) = index else {
                return Err(TestCaseError::fail("woke a waiter that is not queued"));
            };
            let Place::Waiter {
                owner, want, ttl, ..
            } = self.places[index]
            else {
                return Err(TestCaseError::fail("not a waiter"));
            };
            prop_assert_eq!(OWNERS[owner], &*grant.owner);
            if !grant.grant.reentry {
                prop_assert_eq!(index, 0, "FIFO: a new hold goes to the head");
            } else {
                prop_assert!(
                    self.holders.contains_key(&owner),
                    "re-entry of a non-holder"
                );
            }
            self.places.remove(index);
            self.apply_grant(owner, want, ttl, now, grant.grant)?;
        }
        Ok(())
    }

    /// The head must not be a waiter the rules would grant (after hand-off).
    fn check_settled(&self) -> Result<(), TestCaseError> {
        if let Some(Place::Waiter { owner, want, .. }) = self.places.first() {
            prop_assert!(
                !self.grantable(*owner, *want),
                "a grantable head was left waiting"
            );
        }
        Ok(())
    }
}

fn check_agrees(lock: &Lock, model: &Model, now: u64) -> Result<(), TestCaseError> {
    let holders: BTreeMap<usize, ModelHold> = lock
        .live_holders(now)
        .map(|hold| {
            let owner = OWNERS.iter().position(|o| **o == *hold.owner).unwrap_or(99);
            let model_hold = ModelHold {
                exclusive: hold.exclusive,
                shared: u64::from(hold.shared),
                token: hold.token,
                deadline: hold.deadline_ms,
                weight: hold.weight,
            };
            (owner, model_hold)
        })
        .collect();
    prop_assert_eq!(&holders, &model.holders);
    if let Some(exclusive) = lock.exclusive_holder(now) {
        prop_assert_eq!(
            lock.live_holders(now).count(),
            1,
            "exclusive beside others: {:?}",
            exclusive
        );
    }
    prop_assert_eq!(lock.shared_owners(now), model.shared_owners());
    prop_assert_eq!(lock.shared_weight(now), model.shared_weight());
    let queued: Vec<&[u8]> = lock.queue().live_entries(now).map(|e| &*e.owner).collect();
    let expected: Vec<&[u8]> = model.places.iter().map(|p| OWNERS[p.owner()]).collect();
    prop_assert_eq!(queued, expected, "queue order");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn shared_and_exclusive_requests_follow_the_rules(ops in prop::collection::vec(op(), 1..150)) {
        let mut lock = Lock::new();
        // Fed only the replicated effects of every step, as a replica is.
        let mut replica = Lock::new();
        let mut model = Model::default();
        let tokens = Cell::new(0u64);
        let issue = counting(&tokens);
        let present = |_| true;
        let mut now = 1_000u64;
        let mut next_waiter: WaiterId = 0;
        let gauge_before = super::holders::live_holders_raw();

        for op in ops {
            if let Op::Wait { ms } = op {
                now += ms;
            }
            model.expire(now);
            let mut step = Step::new(now, &issue, &present);
            match op {
                Op::Acquire { owner, want, .. } | Op::Block { owner, want, .. } | Op::Fair { owner, want, .. }
                    if model.weight_conflict(owner, want) =>
                {
                    // Refused before anything changes.
                    prop_assert!(lock.weight_conflict(OWNERS[owner], want, now), "weight conflict");
                }
                Op::Acquire { owner, want, ttl } | Op::Block { owner, want, ttl } | Op::Fair { owner, want, ttl } => {
                    prop_assert!(!lock.weight_conflict(OWNERS[owner], want, now), "no weight conflict");
                    let expected = model.grantable(owner, want)
                        && (model.holders.contains_key(&owner) || model.queue_open_to(owner));
                    let request = Request { owner: OWNERS[owner], ttl_ms: ttl, session: None, want };
                    let grant = lock.acquire(request, &mut step);
                    prop_assert_eq!(grant.is_some(), expected, "immediate grant decision");
                    if let Some(grant) = grant {
                        if model.places.first().is_some_and(|p| p.owner() == owner) {
                            // Its own reservation headed the queue.
                        }
                        model.apply_grant(owner, want, ttl, now, grant)?;
                        // Its queued re-entries were woken.
                        let woken = std::mem::take(&mut step.woken);
                        model.apply_woken(&woken, now)?;
                    } else {
                        match op {
                            Op::Block { .. } => {
                                next_waiter += 1;
                                let id = next_waiter;
                                let waiter = Waiter { id, ttl_ms: ttl, session: None, want };
                                let upgrade = want.mode == Mode::Exclusive
                                    && model.holders.get(&owner).is_some_and(|h| h.exclusive == 0);
                                let upgrader = match model.places.first() {
                                    Some(Place::Waiter { seq: 0, owner: o, .. }) => Some(*o),
                                    _ => None,
                                };
                                match lock.enqueue_waiter(OWNERS[owner], waiter, now) {
                                    Err(Deadlock) => {
                                        prop_assert!(upgrade && upgrader.is_some_and(|o| o != owner), "DEADLOCK only for a second upgrader");
                                    }
                                    Ok(seq) => {
                                        let place = Place::Waiter { owner, id, seq, want, ttl };
                                        if upgrade && upgrader.is_none() {
                                            prop_assert_eq!(seq, UPGRADE_SEQ);
                                            model.places.insert(0, place);
                                        } else {
                                            match model.places.iter().position(|p| matches!(p, Place::Reserved { owner: o, .. } if *o == owner)) {
                                                Some(index) => model.places[index] = place,
                                                None => model.places.push(place),
                                            }
                                        }
                                    }
                                }
                            }
                            Op::Fair { .. } => {
                                let deadline = now + RESERVATION_MS;
                                let made = lock.reserve(OWNERS[owner], want, deadline, 0);
                                let reserved_at = model.places.iter().position(|p| matches!(p, Place::Reserved { owner: o, .. } if *o == owner));
                                let queued = model.places.iter().any(|p| p.owner() == owner);
                                let holds = model.holders.contains_key(&owner);
                                match reserved_at {
                                    Some(index) => {
                                        prop_assert!(made);
                                        model.places[index] = Place::Reserved { owner, deadline };
                                    }
                                    None if queued || holds => prop_assert!(!made),
                                    None => {
                                        prop_assert!(made);
                                        model.places.push(Place::Reserved { owner, deadline });
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                Op::Release { owner, mode } => {
                    let result = lock.release(OWNERS[owner], mode, &mut step);
                    match model.holders.get_mut(&owner) {
                        Some(hold) if (mode == Mode::Exclusive && hold.exclusive > 0) || (mode == Mode::Shared && hold.shared > 0) => {
                            match mode {
                                Mode::Exclusive => hold.exclusive -= 1,
                                Mode::Shared => {
                                    hold.shared -= 1;
                                    if hold.shared == 0 {
                                        // Every permit goes back at once.
                                        hold.weight = 1;
                                    }
                                }
                            }
                            let left = hold.exclusive + hold.shared;
                            prop_assert_eq!(result, Ok(left));
                            if left == 0 {
                                model.holders.remove(&owner);
                            }
                        }
                        _ => prop_assert_eq!(result, Err(NotOwner)),
                    }
                }
                Op::Renew { owner, ttl } => {
                    let result = lock.renew(OWNERS[owner], ttl, &mut step);
                    match model.holders.get_mut(&owner) {
                        Some(hold) => {
                            prop_assert_eq!(result, Ok(hold.token));
                            hold.deadline = now + ttl;
                        }
                        None => prop_assert_eq!(result, Err(NotOwner)),
                    }
                }
                Op::Leave { nth } => {
                    let waiters: Vec<(WaiterId, u64)> = model.places.iter().filter_map(|p| match p {
                        Place::Waiter { id, seq, .. } => Some((*id, *seq)),
                        Place::Reserved { .. } => None,
                    }).collect();
                    if let Some((id, seq)) = waiters.get(nth).copied() {
                        prop_assert!(lock.remove_waiter(seq, id));
                        model.places.retain(|p| !matches!(p, Place::Waiter { id: i, .. } if *i == id));
                    }
                }
                Op::Wait { .. } => {}
            }
            // What the adapter does after every change: hand the lock on in
            // the same step, then replicate what the step changed.
            let woken = std::mem::take(&mut step.woken);
            model.apply_woken(&woken, step.now_ms)?;
            model.expire(now);
            lock.hand_off(&mut step);
            model.apply_woken(&step.woken, now)?;
            model.check_settled()?;
            check_agrees(&lock, &model, now)?;
            if step.holds_changed {
                lock.holder_effects(&mut step, |effect| replica.apply_effect(effect));
            }
            let holds = |lock: &Lock| -> Vec<StoredHold> {
                let mut all: Vec<_> = lock
                    .holders()
                    .iter()
                    .filter(|hold| hold.is_live(now))
                    .map(|h| (h.owner.as_bytes().into(), h.exclusive, u64::from(h.shared), h.token, h.deadline_ms, h.weight))
                    .collect();
                all.sort();
                all
            };
            prop_assert_eq!(holds(&replica), holds(&lock), "the replica's holders follow the effects");
            // The `dlock_holders` gauge counts every holder of both locks.
            prop_assert_eq!(
                super::holders::live_holders_raw() - gauge_before,
                (lock.holders().len() + replica.holders().len()) as i64,
                "the holders gauge"
            );
        }
    }
}

/// A reader, then a writer waiting, then more readers: the late readers
/// wait behind the writer, and one release hands the lock to the writer
/// alone; its release lets every reader in at once.
#[test]
fn a_waiting_writer_is_not_starved_and_readers_are_granted_together() {
    let mut lock = Lock::new();
    let tokens = Cell::new(0u64);
    let issue = || {
        tokens.set(tokens.get() + 1);
        tokens.get()
    };
    let present = |_| true;
    let shared = Want::shared(None);
    let request = |owner: &'static [u8], want| Request {
        owner,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let waiter = |id, want| Waiter {
        id,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let mut step = Step::new(0, &issue, &present);
    assert!(lock.acquire(request(b"r1", shared), &mut step).is_some());
    assert!(lock
        .acquire(request(b"w", Want::EXCLUSIVE), &mut step)
        .is_none());
    lock.enqueue_waiter(b"w", waiter(1, Want::EXCLUSIVE), 0)
        .unwrap();
    assert!(
        lock.acquire(request(b"r2", shared), &mut step).is_none(),
        "no reader barges past the writer"
    );
    lock.enqueue_waiter(b"r2", waiter(2, shared), 0).unwrap();
    lock.enqueue_waiter(b"r3", waiter(3, shared), 0).unwrap();
    assert!(
        lock.acquire(request(b"r1", shared), &mut step).is_some(),
        "a holder re-enters past the writer"
    );
    lock.release(b"r1", Mode::Shared, &mut step).unwrap();
    lock.release(b"r1", Mode::Shared, &mut step).unwrap();
    lock.hand_off(&mut step);
    let woken: Vec<WaiterId> = step.woken.drain(..).map(|grant| grant.waiter).collect();
    assert_eq!(woken, vec![1], "the writer alone");
    lock.release(b"w", Mode::Exclusive, &mut step).unwrap();
    lock.hand_off(&mut step);
    let woken: Vec<WaiterId> = step.woken.drain(..).map(|grant| grant.waiter).collect();
    assert_eq!(woken, vec![2, 3], "both readers in one step");
}

/// Downgrade: exclusive, then shared, then release of the exclusive hold
/// keeps the token and lets queued readers in; a blocked upgrade waits ahead
/// of earlier waiters and a second one is a deadlock.
#[test]
fn downgrade_and_upgrade() {
    let mut lock = Lock::new();
    let tokens = Cell::new(0u64);
    let issue = || {
        tokens.set(tokens.get() + 1);
        tokens.get()
    };
    let present = |_| true;
    let shared = Want::shared(None);
    let request = |owner: &'static [u8], want| Request {
        owner,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let waiter = |id, want| Waiter {
        id,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let mut step = Step::new(0, &issue, &present);
    let write = lock
        .acquire(request(b"a", Want::EXCLUSIVE), &mut step)
        .unwrap();
    lock.enqueue_waiter(b"b", waiter(1, shared), 0).unwrap();
    let read = lock.acquire(request(b"a", shared), &mut step).unwrap();
    assert_eq!((read.token, read.reentry), (write.token, true));
    assert_eq!(lock.release(b"a", Mode::Exclusive, &mut step), Ok(1));
    lock.hand_off(&mut step);
    assert_eq!(
        step.woken.drain(..).map(|g| g.waiter).collect::<Vec<_>>(),
        vec![1]
    );
    // Both read; a waits to upgrade ahead of an earlier writer c.
    lock.enqueue_waiter(b"c", waiter(2, Want::EXCLUSIVE), 0)
        .unwrap();
    assert!(lock
        .acquire(request(b"a", Want::EXCLUSIVE), &mut step)
        .is_none());
    assert_eq!(
        lock.enqueue_waiter(b"a", waiter(3, Want::EXCLUSIVE), 0),
        Ok(UPGRADE_SEQ)
    );
    assert!(lock.upgrade_would_deadlock(b"b", 0));
    assert_eq!(
        lock.enqueue_waiter(b"b", waiter(4, Want::EXCLUSIVE), 0),
        Err(Deadlock)
    );
    assert_eq!(lock.release(b"b", Mode::Shared, &mut step), Ok(0));
    lock.hand_off(&mut step);
    let upgrade = step.woken.drain(..).next().unwrap();
    assert_eq!((upgrade.waiter, upgrade.grant.reentry), (3, false));
    assert!(
        upgrade.grant.token > write.token,
        "an upgrade gets a new token"
    );
    let holder = lock.exclusive_holder(0).unwrap();
    assert_eq!(
        (holder.exclusive, holder.shared),
        (1, 1),
        "it kept its shared hold"
    );
}

/// A semaphore of 4 permits: holders of weights 2 and 1, then a waiter of
/// 3 that does not fit heads the queue and keeps a waiter of 1 (which would
/// fit) behind it; releases that free too little grant nobody; the release
/// that makes room grants the 3, and the batch stops at the next request
/// that does not fit. The last shared release frees all of an owner's
/// permits at once.
#[test]
fn weights_add_up_to_the_limit_in_strict_fifo() {
    let mut lock = Lock::new();
    let tokens = Cell::new(0u64);
    let issue = counting(&tokens);
    let present = |_| true;
    let request = |owner: &'static [u8], want| Request {
        owner,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let waiter = |id, want| Waiter {
        id,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let w = |weight| Want::weighted(4, weight);
    let mut step = Step::new(0, &issue, &present);
    assert!(lock.acquire(request(b"a", w(2)), &mut step).is_some());
    assert!(lock.acquire(request(b"b", w(1)), &mut step).is_some());
    assert_eq!(lock.shared_weight(0), 3);
    assert!(
        lock.acquire(request(b"c", w(2)), &mut step).is_none(),
        "3 + 2 > 4"
    );
    lock.enqueue_waiter(b"c", waiter(1, w(3)), 0).unwrap();
    assert!(
        lock.acquire(request(b"d", w(1)), &mut step).is_none(),
        "a lighter request never passes the heavy head"
    );
    lock.enqueue_waiter(b"d", waiter(2, w(1)), 0).unwrap();
    lock.enqueue_waiter(b"e", waiter(3, w(2)), 0).unwrap();
    lock.enqueue_waiter(b"f", waiter(4, w(1)), 0).unwrap();
    assert!(
        lock.acquire(request(b"a", w(2)), &mut step).is_some(),
        "a holder re-enters with its weight"
    );
    assert!(lock.weight_conflict(b"a", w(1), 0), "one weight per owner");
    assert!(lock.weight_conflict(b"d", w(2), 0), "its waiter's weight");
    assert!(!lock.weight_conflict(b"d", Want::EXCLUSIVE, 0));
    assert!(!lock.weight_conflict(b"z", w(4), 0));
    lock.release(b"b", Mode::Shared, &mut step).unwrap();
    lock.hand_off(&mut step);
    assert!(step.woken.is_empty(), "2 held: the head of 3 does not fit");
    lock.release(b"a", Mode::Shared, &mut step).unwrap();
    lock.hand_off(&mut step);
    assert!(step.woken.is_empty(), "a still holds once: all 2 permits");
    assert_eq!(lock.shared_weight(0), 2);
    lock.release(b"a", Mode::Shared, &mut step).unwrap();
    lock.hand_off(&mut step);
    let woken: Vec<(WaiterId, u32)> = step
        .woken
        .drain(..)
        .map(|g| {
            (
                g.waiter,
                lock.live_hold_of(&g.owner, 0).map_or(0, |h| h.weight),
            )
        })
        .collect();
    assert_eq!(
        woken,
        vec![(1, 3), (2, 1)],
        "3 then 1 in one step; 2 does not fit and stops the batch"
    );
    assert_eq!(lock.shared_weight(0), 4);
    lock.release(b"c", Mode::Shared, &mut step).unwrap();
    lock.hand_off(&mut step);
    let woken: Vec<WaiterId> = step.woken.drain(..).map(|g| g.waiter).collect();
    assert_eq!(woken, vec![3, 4], "the permits of 3 let both in");
    assert_eq!(lock.shared_weight(0), 4);
}

/// An exclusive hold excludes every weight; an owner's weight is 1 again
/// once its shared holds end (a downgrade keeps the weight it asks for).
#[test]
fn a_weight_lives_with_the_shared_holds_only() {
    let mut lock = Lock::new();
    let tokens = Cell::new(0u64);
    let issue = counting(&tokens);
    let present = |_| true;
    let request = |owner: &'static [u8], want| Request {
        owner,
        ttl_ms: 1_000,
        session: None,
        want,
    };
    let mut step = Step::new(0, &issue, &present);
    lock.acquire(request(b"a", Want::EXCLUSIVE), &mut step)
        .unwrap();
    assert!(lock
        .acquire(request(b"b", Want::weighted(5, 1)), &mut step)
        .is_none());
    assert_eq!(lock.live_hold_of(b"a", 0).map(|h| h.weight), Some(1));
    lock.acquire(request(b"a", Want::weighted(5, 4)), &mut step)
        .unwrap();
    assert_eq!(lock.live_hold_of(b"a", 0).map(|h| h.weight), Some(4));
    lock.release(b"a", Mode::Exclusive, &mut step).unwrap();
    assert_eq!(lock.shared_weight(0), 4);
    assert!(lock
        .acquire(request(b"b", Want::weighted(5, 2)), &mut step)
        .is_none());
    assert!(lock
        .acquire(request(b"b", Want::weighted(5, 1)), &mut step)
        .is_some());
    lock.release(b"a", Mode::Shared, &mut step).unwrap();
    assert_eq!(lock.live_hold_of(b"a", 0), None);
    assert_eq!(lock.shared_weight(0), 1);
}

/// What DLOCK.WATCH watches: the largest token among the live holders, in
/// any mode; a re-entry or an older holder leaving does not change it, an
/// ended lease does.
#[test]
fn the_newest_hold_is_the_largest_live_token() {
    let mut lock = Lock::new();
    let tokens = Cell::new(0u64);
    let issue = counting(&tokens);
    let present = |_| true;
    let shared = Want {
        mode: Mode::Shared,
        limit: None,
        weight: 1,
    };
    let request = |owner: &'static [u8], ttl_ms| Request {
        owner,
        ttl_ms,
        session: None,
        want: shared,
    };
    assert!(lock.newest_hold(0).is_none());
    let mut step = Step::new(0, &issue, &present);
    let older = lock.acquire(request(b"a", 5_000), &mut step).unwrap();
    let newer = lock.acquire(request(b"b", 1_000), &mut step).unwrap();
    assert!(newer.token > older.token);
    let newest = |lock: &Lock, now| lock.newest_hold(now).map(|hold| hold.token);
    assert_eq!(newest(&lock, 0), Some(newer.token));
    let again = lock.acquire(request(b"a", 5_000), &mut step).unwrap();
    assert!(again.reentry);
    assert_eq!(
        newest(&lock, 0),
        Some(newer.token),
        "a re-entry is no change"
    );
    assert_eq!(newest(&lock, 1_001), Some(older.token), "b's lease ended");
    assert_eq!(newest(&lock, 5_001), None, "every lease ended");
    assert_eq!(lock.release(b"b", Mode::Shared, &mut step), Ok(0));
    assert_eq!(newest(&lock, 0), Some(older.token));
}
