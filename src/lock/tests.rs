use super::*;
use proptest::prelude::*;

/// The lock's operations with a plain token source and every waiter
/// present, as the exclusive-lock tests drive them.
trait Drive {
    fn take(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        now_ms: u64,
        next: impl FnMut() -> u64,
    ) -> Option<Grant>;
    fn acquire_at(
        &mut self,
        request: Request<'_>,
        now_ms: u64,
        next: impl FnMut() -> u64,
    ) -> (Option<Grant>, Vec<WaiterGrant>);
    fn release_at(&mut self, owner: &[u8], now_ms: u64) -> Result<u64, NotOwner>;
    fn renew_at(&mut self, owner: &[u8], ttl_ms: u64, now_ms: u64) -> Result<u64, NotOwner>;
    fn hand_off_at(&mut self, now_ms: u64, next: impl FnMut() -> u64) -> Vec<WaiterGrant>;
    /// The live exclusive holder.
    fn live_hold(&self, now_ms: u64) -> Option<&Hold>;
}

/// Runs `f` on a step at `now_ms` whose tokens come from `next`.
fn stepped<T>(now_ms: u64, next: impl FnMut() -> u64, f: impl FnOnce(&mut Step<'_>) -> T) -> T {
    let next = std::cell::RefCell::new(next);
    let issue = || (next.borrow_mut())();
    let present = |_| true;
    let mut step = Step::new(now_ms, &issue, &present);
    f(&mut step)
}

impl Drive for Lock {
    fn take(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        now_ms: u64,
        next: impl FnMut() -> u64,
    ) -> Option<Grant> {
        let request = Request {
            owner,
            ttl_ms,
            session: None,
            want: Want::EXCLUSIVE,
        };
        self.acquire_at(request, now_ms, next).0
    }

    fn acquire_at(
        &mut self,
        request: Request<'_>,
        now_ms: u64,
        next: impl FnMut() -> u64,
    ) -> (Option<Grant>, Vec<WaiterGrant>) {
        stepped(now_ms, next, |step| {
            let grant = self.acquire(request, step);
            (grant, std::mem::take(&mut step.woken))
        })
    }

    fn release_at(&mut self, owner: &[u8], now_ms: u64) -> Result<u64, NotOwner> {
        stepped(
            now_ms,
            || 0,
            |step| self.release(owner, Mode::Exclusive, step),
        )
    }

    fn renew_at(&mut self, owner: &[u8], ttl_ms: u64, now_ms: u64) -> Result<u64, NotOwner> {
        stepped(now_ms, || 0, |step| self.renew(owner, ttl_ms, step))
    }

    fn hand_off_at(&mut self, now_ms: u64, next: impl FnMut() -> u64) -> Vec<WaiterGrant> {
        stepped(now_ms, next, |step| {
            self.hand_off(step);
            std::mem::take(&mut step.woken)
        })
    }

    fn live_hold(&self, now_ms: u64) -> Option<&Hold> {
        self.exclusive_holder(now_ms)
    }
}

/// A token source that counts up from 1, like a server with a zero clock floor.
fn counter() -> impl FnMut() -> u64 {
    let mut tokens = TokenCounter::default();
    move || tokens.issue(0)
}

#[test]
fn free_lock_grants_a_new_hold() {
    let mut lock = Lock::new();
    let grant = lock.take(b"a", 100, 1_000, || 7);
    assert_eq!(
        grant,
        Some(Grant {
            token: 7,
            holds: 1,
            reentry: false,
            mode: Mode::Exclusive,
        })
    );
    let hold = lock.live_hold(1_000).cloned();
    assert_eq!(
        hold,
        Some(Hold {
            owner: (*b"a").into(),
            exclusive: 1,
            shared: 0,
            token: 7,
            deadline_ms: 1_100,
            session: None,
            weight: 1,
        })
    );
}

#[test]
fn reentry_counts_keeps_the_token_and_resets_the_lease() {
    let mut lock = Lock::new();
    let mut next = counter();
    let first = lock.take(b"a", 100, 1_000, &mut next).map(|g| g.token);
    let again = lock.take(b"a", 500, 1_050, &mut next);
    assert_eq!(
        again,
        Some(Grant {
            token: first.unwrap(),
            holds: 2,
            reentry: true,
            mode: Mode::Exclusive,
        })
    );
    assert_eq!(lock.live_hold(1_050).map(|h| h.deadline_ms), Some(1_550));
}

#[test]
fn another_owner_is_refused_while_the_lease_is_live() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 100, 1_000, &mut next);
    let before = lock.clone();
    assert_eq!(lock.take(b"b", 100, 1_100, &mut next), None);
    assert_eq!(lock, before, "a refused acquire changes nothing");
}

#[test]
fn lease_covers_its_deadline_and_ends_after_it() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 100, 1_000, &mut next);
    assert!(lock.live_hold(1_100).is_some());
    assert_eq!(
        lock.live_hold(1_100).map(|h| h.remaining_ms(1_100)),
        Some(0)
    );
    assert!(lock.live_hold(1_101).is_none());
    assert!(lock.is_vacant(1_101));
    let grant = lock.take(b"b", 100, 1_101, &mut next);
    assert_eq!(grant.map(|g| (g.token, g.holds)), Some((2, 1)));
}

#[test]
fn expired_holder_starts_a_new_hold_with_a_new_token() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 10, 1_000, &mut next);
    lock.take(b"a", 10, 1_005, &mut next);
    let grant = lock.take(b"a", 10, 2_000, &mut next);
    assert_eq!(
        grant,
        Some(Grant {
            token: 2,
            holds: 1,
            reentry: false,
            mode: Mode::Exclusive,
        })
    );
}

#[test]
fn release_counts_down_and_frees_at_zero() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 100, 1_000, &mut next);
    lock.take(b"a", 100, 1_000, &mut next);
    assert_eq!(lock.release_at(b"a", 1_010), Ok(1));
    assert_eq!(lock.release_at(b"a", 1_010), Ok(0));
    assert!(lock.is_vacant(1_010));
    assert_eq!(lock.release_at(b"a", 1_010), Err(NotOwner));
}

#[test]
fn release_and_renew_refuse_strangers_and_expired_holders() {
    let mut lock = Lock::new();
    let mut next = counter();
    assert_eq!(lock.release_at(b"a", 1_000), Err(NotOwner));
    assert_eq!(lock.renew_at(b"a", 100, 1_000), Err(NotOwner));
    lock.take(b"a", 100, 1_000, &mut next);
    let before = lock.clone();
    assert_eq!(lock.release_at(b"b", 1_050), Err(NotOwner));
    assert_eq!(lock.renew_at(b"b", 100, 1_050), Err(NotOwner));
    assert_eq!(lock, before);
    assert_eq!(lock.release_at(b"a", 1_101), Err(NotOwner));
    assert_eq!(lock.renew_at(b"a", 100, 1_101), Err(NotOwner));
}

#[test]
fn renew_moves_the_deadline_and_keeps_holds_and_token() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 100, 1_000, &mut next);
    lock.take(b"a", 100, 1_000, &mut next);
    assert_eq!(lock.renew_at(b"a", 5_000, 1_090), Ok(1));
    let hold = lock.live_hold(1_090).cloned().unwrap();
    assert_eq!(
        (hold.exclusive, hold.token, hold.deadline_ms),
        (2, 1, 6_090)
    );
}

#[test]
fn owners_are_compared_as_bytes() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"A", 100, 1_000, &mut next);
    assert_eq!(lock.take(b"a", 100, 1_000, &mut next), None);
    assert_eq!(lock.take(b"A\0", 100, 1_000, &mut next), None);
    let binary: &[u8] = &[0xff, 0x00, 0xfe];
    let mut other = Lock::new();
    assert!(other.take(binary, 100, 1_000, &mut next).is_some());
    assert_eq!(other.release_at(binary, 1_000), Ok(0));
}

#[derive(Clone, Debug)]
enum Op {
    Acquire { owner: usize, ttl: u64 },
    Release { owner: usize },
    Renew { owner: usize, ttl: u64 },
    Wait { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, 1..50u64).prop_map(|(owner, ttl)| Op::Acquire { owner, ttl }),
        (0..3usize).prop_map(|owner| Op::Release { owner }),
        (0..3usize, 1..50u64).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
        (0..40u64).prop_map(|ms| Op::Wait { ms }),
    ]
}

const OWNERS: [&[u8]; 3] = [b"alpha", b"beta", b"gamma"];

/// What each owner was told, independently of the lock: holds it believes it
/// has and the lease deadline it was last given.
#[derive(Clone, Copy, Default)]
struct Belief {
    holds: u64,
    token: u64,
    deadline_ms: u64,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_operation_sequences_keep_every_invariant(ops in prop::collection::vec(op(), 1..200)) {
        let mut lock = Lock::new();
        let mut tokens = TokenCounter::default();
        let mut now = 1_000u64;
        let mut beliefs = [Belief::default(); 3];
        let mut last_new_token = 0u64;

        for op in ops {
            // A belief whose lease has ended is void: the owner lost the lock.
            for belief in beliefs.iter_mut() {
                if belief.holds > 0 && now > belief.deadline_ms {
                    *belief = Belief::default();
                }
            }
            let live_believers = beliefs.iter().filter(|b| b.holds > 0).count();
            prop_assert!(live_believers <= 1, "two owners believe they hold the lock");

            match op {
                Op::Acquire { owner, ttl } => {
                    let others_hold = beliefs.iter().enumerate().any(|(i, b)| i != owner && b.holds > 0);
                    let grant = lock.take(OWNERS[owner], ttl, now, || tokens.issue(now));
                    match grant {
                        Some(grant) => {
                            prop_assert!(!others_hold, "granted while another owner holds it");
                            let belief = &mut beliefs[owner];
                            if grant.reentry {
                                prop_assert!(belief.holds > 0);
                                prop_assert_eq!(grant.token, belief.token);
                            } else {
                                prop_assert_eq!(belief.holds, 0);
                                prop_assert!(grant.token > last_new_token, "tokens strictly increase");
                                last_new_token = grant.token;
                                belief.token = grant.token;
                            }
                            belief.holds += 1;
                            prop_assert_eq!(grant.holds, belief.holds);
                            belief.deadline_ms = now + ttl;
                        }
                        None => prop_assert!(others_hold, "refused a free lock"),
                    }
                }
                Op::Release { owner } => {
                    let belief = &mut beliefs[owner];
                    match lock.release_at(OWNERS[owner], now) {
                        Ok(left) => {
                            prop_assert!(belief.holds > 0, "released a lock it did not hold");
                            belief.holds -= 1;
                            prop_assert_eq!(left, belief.holds);
                            if left == 0 {
                                *belief = Belief::default();
                            }
                        }
                        Err(NotOwner) => prop_assert_eq!(belief.holds, 0),
                    }
                }
                Op::Renew { owner, ttl } => {
                    let belief = &mut beliefs[owner];
                    match lock.renew_at(OWNERS[owner], ttl, now) {
                        Ok(token) => {
                            prop_assert!(belief.holds > 0);
                            prop_assert_eq!(token, belief.token);
                            belief.deadline_ms = now + ttl;
                        }
                        Err(NotOwner) => prop_assert_eq!(belief.holds, 0),
                    }
                }
                Op::Wait { ms } => now += ms,
            }

            match lock.live_hold(now) {
                Some(hold) => {
                    prop_assert!(hold.exclusive >= 1);
                    let index = OWNERS.iter().position(|o| **o == *hold.owner).unwrap();
                    prop_assert_eq!(hold.exclusive, beliefs[index].holds);
                    prop_assert_eq!(hold.token, beliefs[index].token);
                    prop_assert_eq!(hold.deadline_ms, beliefs[index].deadline_ms);
                }
                None => prop_assert!(beliefs.iter().all(|b| b.holds == 0 || now > b.deadline_ms)),
            }
        }
    }
}

/// Operations on a lock with a queue, as the Redis adapter drives it.
#[derive(Clone, Debug)]
enum QueueOp {
    Acquire {
        owner: usize,
        ttl: u64,
    },
    Block {
        owner: usize,
        ttl: u64,
    },
    Fair {
        owner: usize,
        ttl: u64,
    },
    Release {
        owner: usize,
    },
    Renew {
        owner: usize,
        ttl: u64,
    },
    /// The n-th queued waiter leaves (timeout or disconnect).
    Leave {
        nth: usize,
    },
    Wait {
        ms: u64,
    },
}

fn queue_op() -> impl Strategy<Value = QueueOp> {
    prop_oneof![
        (0..4usize, 1..60u64).prop_map(|(owner, ttl)| QueueOp::Acquire { owner, ttl }),
        (0..4usize, 1..60u64).prop_map(|(owner, ttl)| QueueOp::Block { owner, ttl }),
        (0..4usize, 1..60u64).prop_map(|(owner, ttl)| QueueOp::Fair { owner, ttl }),
        (0..4usize).prop_map(|owner| QueueOp::Release { owner }),
        (0..4usize, 1..60u64).prop_map(|(owner, ttl)| QueueOp::Renew { owner, ttl }),
        (0..8usize).prop_map(|nth| QueueOp::Leave { nth }),
        (0..50u64).prop_map(|ms| QueueOp::Wait { ms }),
    ]
}

const QUEUE_OWNERS: [&[u8]; 4] = [b"w", b"x", b"y", b"z"];
const RESERVATION_MS: u64 = 30;

/// An independent model of the queue: entries in arrival order.
#[derive(Clone, Debug, PartialEq)]
enum Place {
    Waiter {
        owner: usize,
        id: WaiterId,
        seq: u64,
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

struct QueueModel {
    places: Vec<Place>,
    last_new_token: u64,
}

impl QueueModel {
    fn drop_expired(&mut self, now: u64) {
        self.places
            .retain(|p| !matches!(p, Place::Reserved { deadline, .. } if *deadline < now));
    }

    /// Checks a new hold granted to `owner` (through waiter `via`, or
    /// directly) against FIFO and no-barging, then removes the owner's
    /// places; returns the waiter ids that must have been woken as re-entries.
    fn grant(
        &mut self,
        owner: usize,
        via: Option<WaiterId>,
        token: u64,
    ) -> Result<Vec<WaiterId>, TestCaseError> {
        prop_assert!(token > self.last_new_token, "tokens strictly increase");
        self.last_new_token = token;
        match (self.places.first(), via) {
            (Some(Place::Waiter { id, .. }), Some(via)) => prop_assert_eq!(*id, via, "FIFO"),
            (None, None) => {}
            (Some(Place::Reserved { owner: head, .. }), None) => {
                prop_assert_eq!(
                    *head,
                    owner,
                    "only the reserving owner takes a reserved lock"
                )
            }
            (head, via) => prop_assert!(false, "grant via {:?} with head {:?}", via, head),
        }
        if let Some(via) = via {
            self.places
                .retain(|p| !matches!(p, Place::Waiter { id, .. } if *id == via));
        }
        let mut reentries = Vec::new();
        self.places.retain(|p| {
            if p.owner() != owner {
                return true;
            }
            if let Place::Waiter { id, .. } = p {
                reentries.push(*id);
            }
            false
        });
        Ok(reentries)
    }
}

fn check_woken(
    model: &mut QueueModel,
    owner_of: &dyn Fn(WaiterId) -> usize,
    woken: &[WaiterGrant],
) -> Result<(), TestCaseError> {
    let mut expected_reentries: Vec<WaiterId> = Vec::new();
    for grant in woken {
        if grant.grant.reentry {
            prop_assert!(
                expected_reentries.contains(&grant.waiter),
                "unexpected re-entry grant"
            );
            expected_reentries.retain(|id| *id != grant.waiter);
        } else {
            prop_assert!(
                expected_reentries.is_empty(),
                "re-entries follow their new hold"
            );
            let owner = owner_of(grant.waiter);
            expected_reentries = model.grant(owner, Some(grant.waiter), grant.grant.token)?;
        }
    }
    prop_assert!(
        expected_reentries.is_empty(),
        "same-owner waiters not granted"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn queue_grants_only_the_head_in_fifo_order(ops in prop::collection::vec(queue_op(), 1..150)) {
        let mut lock = Lock::new();
        let mut tokens = TokenCounter::default();
        let mut now = 1_000u64;
        let mut next_waiter: WaiterId = 0;
        let mut owners: std::collections::HashMap<WaiterId, usize> = Default::default();
        let mut model = QueueModel { places: Vec::new(), last_new_token: 0 };

        for op in ops {
            model.drop_expired(now);
            let mut woken: Vec<WaiterGrant> = Vec::new();
            match op {
                QueueOp::Acquire { owner, ttl } | QueueOp::Block { owner, ttl } | QueueOp::Fair { owner, ttl } => {
                    let request = Request { owner: QUEUE_OWNERS[owner], ttl_ms: ttl, session: None, want: Want::EXCLUSIVE };
                    let held_before = lock.live_hold(now).map(|h| (h.owner.clone(), h.token));
                    let (grant, acquired_woken) = lock.acquire_at(request, now, || tokens.issue(now));
                    match grant {
                        Some(grant) if grant.reentry => {
                            let (held_by, token) = held_before.clone().expect("re-entry needs a holder");
                            prop_assert_eq!(&*held_by, QUEUE_OWNERS[owner]);
                            prop_assert_eq!(grant.token, token);
                        }
                        Some(grant) => {
                            prop_assert!(held_before.is_none(), "granted while held");
                            let reentries = model.grant(owner, None, grant.token)?;
                            let woken_ids: Vec<WaiterId> = acquired_woken.iter().map(|w| w.waiter).collect();
                            prop_assert_eq!(woken_ids, reentries);
                        }
                        None => {
                            let free = held_before.is_none();
                            if free {
                                prop_assert!(!model.places.is_empty(), "refused a free lock with an empty queue");
                            }
                            match op {
                                QueueOp::Block { .. } => {
                                    next_waiter += 1;
                                    let id = next_waiter;
                                    owners.insert(id, owner);
                                    let seq = lock.enqueue_waiter(QUEUE_OWNERS[owner], Waiter { id, ttl_ms: ttl, session: None, want: Want::EXCLUSIVE }, now).unwrap();
                                    let place = Place::Waiter { owner, id, seq };
                                    match model.places.iter().position(|p| matches!(p, Place::Reserved { owner: o, .. } if *o == owner)) {
                                        Some(index) => model.places[index] = place,
                                        None => model.places.push(place),
                                    }
                                }
                                QueueOp::Fair { .. } => {
                                    let deadline = now + RESERVATION_MS;
                                    lock.reserve(QUEUE_OWNERS[owner], Want::EXCLUSIVE, deadline, 0);
                                    let place = Place::Reserved { owner, deadline };
                                    let queued = model.places.iter().any(|p| p.owner() == owner);
                                    match model.places.iter().position(|p| matches!(p, Place::Reserved { owner: o, .. } if *o == owner)) {
                                        Some(index) => model.places[index] = place,
                                        // A waiting owner already has its place.
                                        None if queued => {}
                                        None => model.places.push(place),
                                    }
                                }
                                _ => {}
                            }
                        }
                    }
                }
                QueueOp::Release { owner } => {
                    let _ = lock.release_at(QUEUE_OWNERS[owner], now);
                }
                QueueOp::Renew { owner, ttl } => {
                    let _ = lock.renew_at(QUEUE_OWNERS[owner], ttl, now);
                }
                QueueOp::Leave { nth } => {
                    let waiters: Vec<(WaiterId, u64)> = model.places.iter().filter_map(|p| match p {
                        Place::Waiter { id, seq, .. } => Some((*id, *seq)),
                        Place::Reserved { .. } => None,
                    }).collect();
                    if let Some((id, seq)) = waiters.get(nth).copied() {
                        prop_assert!(lock.remove_waiter(seq, id));
                        model.places.retain(|p| !matches!(p, Place::Waiter { id: i, .. } if *i == id));
                    }
                }
                QueueOp::Wait { ms } => now += ms,
            }

            // What the adapter does after every change.
            model.drop_expired(now);
            woken.extend(lock.hand_off_at(now, || tokens.issue(now)));
            check_woken(&mut model, &|id| owners[&id], &woken)?;

            // No barging can follow: a free lock is never headed by a waiter.
            if lock.live_hold(now).is_none() {
                let head = lock.queue().live_entries(now).next().map(|e| e.kind.clone());
                prop_assert!(!matches!(head, Some(EntryKind::Waiter(_))), "a waiter heads a free lock");
            }
            let queued: Vec<&[u8]> = lock.queue().live_entries(now).map(|e| &*e.owner).collect();
            let expected: Vec<&[u8]> = model.places.iter().map(|p| QUEUE_OWNERS[p.owner()]).collect();
            prop_assert_eq!(queued, expected, "queue order");
            prop_assert_eq!(lock.waiting(now), model.places.len());
            if let Some(hold) = lock.live_hold(now) {
                let holder = QUEUE_OWNERS.iter().position(|o| **o == *hold.owner).unwrap();
                prop_assert!(model.places.iter().all(|p| p.owner() != holder), "the holder is still queued");
            }
        }
    }
}

#[test]
fn an_uncontended_lock_stays_small() {
    // Memory per held lock is a product target (docs/benchmarks.md): the
    // queue must cost one pointer until someone queues, and a short owner
    // (up to 38 bytes: a UUID) lives inside the lock, so that a held lock
    // is one allocation (it was 72 bytes plus the owner's own allocation).
    assert!(
        std::mem::size_of::<Lock>() <= 96,
        "{}",
        std::mem::size_of::<Lock>()
    );
    let mut lock = Lock::new();
    lock.reserve(b"r", Want::EXCLUSIVE, 10, 0);
    assert!(!lock.queue().is_empty());
    lock.hand_off_at(11, || 1);
    assert!(
        lock.queue().is_empty(),
        "the expired reservation was dropped"
    );
    assert_eq!(lock, Lock::new(), "an emptied queue frees its entries");
}

/// The box pool (`redis::boxes`) overwrites a kept lock without dropping
/// it, so it keeps only bare locks: nothing held, no queue ever allocated.
#[test]
fn a_lock_is_bare_until_held_or_queued_at_and_again_once_nothing_is_left() {
    let mut lock = Lock::new();
    assert!(lock.is_bare());
    let request = Request {
        owner: b"a",
        ttl_ms: 1_000,
        session: None,
        want: Want::EXCLUSIVE,
    };
    assert!(lock.acquire_first(request, 10, || 7).is_some());
    assert!(!lock.is_bare(), "held");
    assert_eq!(lock.release_last(b"a", Mode::Exclusive, 20), Some(7));
    assert!(lock.is_bare(), "released");

    let waiter = Waiter {
        id: 1,
        ttl_ms: 1_000,
        session: None,
        want: Want::EXCLUSIVE,
    };
    let seq = lock.enqueue_waiter(b"b", waiter, 30).expect("queued");
    assert!(!lock.is_bare(), "queued");
    assert!(lock.remove_waiter(seq, 1));
    assert!(lock.is_bare(), "the queue frees its storage once empty");
}
