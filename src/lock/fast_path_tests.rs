//! The straight routes of the uncontended path (first hold, re-entry of
//! the only holder, last release) against the general one:
//! random sequences of acquires in both modes, blocked waits, reservations,
//! releases, renewals, departures and time on three owners. Before every
//! acquire and every release the straight route is tried on a copy of the
//! lock; whenever it applies, it must leave exactly the lock, grant and
//! token the general route (and the hand-off the adapter runs after it)
//! gives, with nothing else in the step for the adapter to act on; whenever
//! it does not apply, it must change nothing and issue no token.

use super::test_ops::{counting, want as any_want, Op};
use super::*;
use proptest::prelude::*;
use std::cell::Cell;

const OWNERS: [&[u8]; 3] = [
    b"p",
    b"q",
    b"a-much-longer-owner-name-that-is-stored-on-the-heap",
];

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS.len();
    prop_oneof![
        3 => (owner.clone(), any_want(3), 1..60u64).prop_map(|(owner, want, ttl)| Op::Acquire { owner, want, ttl }),
        1 => (owner.clone(), any_want(3), 1..60u64).prop_map(|(owner, want, ttl)| Op::Block { owner, want, ttl }),
        1 => (owner.clone(), any_want(3), 1..60u64).prop_map(|(owner, want, ttl)| Op::Fair { owner, want, ttl }),
        3 => (owner.clone(), prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)])
            .prop_map(|(owner, mode)| Op::Release { owner, mode }),
        1 => (owner, 1..60u64).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
        1 => (0..4usize).prop_map(|nth| Op::Leave { nth }),
        2 => (0..70u64).prop_map(|ms| Op::Wait { ms }),
    ]
}

/// Whether a step left the adapter nothing to do but replicate the holder
/// set as a whole.
fn only_whole_holders_changed(step: &Step<'_>) -> bool {
    step.holds_changed
        && step.whole
        && step.touched.is_empty()
        && step.woken.is_empty()
        && step.expired.is_empty()
        && step.ready.is_empty()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_first_hold_built_whole_is_the_first_acquire_of_a_new_lock(
        owner in 0..OWNERS.len(),
        want in any_want(3),
        ttl in 1..(1u64 << 53),
        now in 0..(1u64 << 53),
        token in 1..u64::MAX,
        session in proptest::option::of(0..100u64),
    ) {
        let request = Request { owner: OWNERS[owner], ttl_ms: ttl, session, want };
        let mut acquired = Lock::new();
        let grant = acquired.acquire_first(request, now, || token);
        let (built, built_grant) = Lock::first_hold(request, now, token);
        prop_assert_eq!(Some(built_grant), grant);
        prop_assert_eq!(built, acquired);
    }

    #[test]
    fn straight_routes_agree_with_the_general_path(ops in prop::collection::vec(op(), 1..120)) {
        let mut lock = Lock::new();
        let tokens = Cell::new(0u64);
        let issue = counting(&tokens);
        let present = |_| true;
        let mut now = 1_000u64;
        let mut waiters: Vec<(u64, WaiterId)> = Vec::new();
        let mut next_waiter: WaiterId = 0;

        for op in ops {
            let mut step = Step::new(now, &issue, &present);
            match op {
                Op::Acquire { owner, want, ttl } | Op::Block { owner, want, ttl } | Op::Fair { owner, want, ttl } => {
                    let request = Request { owner: OWNERS[owner], ttl_ms: ttl, session: Some(7), want };
                    let before = lock.clone();
                    let mut straight = lock.clone();
                    let issued_before = tokens.get();
                    let straight_grant = straight.acquire_first(request, now, issue);
                    let straight_tokens = tokens.get() - issued_before;
                    tokens.set(issued_before);
                    let mut reentered = lock.clone();
                    let reentry_grant = reentered.reenter_sole(request, now);
                    let grant = lock.acquire(request, &mut step);
                    match reentry_grant {
                        Some(reentry_grant) => {
                            let hold = before.holders().single();
                            prop_assert!(hold.is_some_and(|hold| *hold.owner == *OWNERS[owner]));
                            prop_assert!(before.queue().is_empty());
                            prop_assert_eq!(Some(reentry_grant), grant);
                            prop_assert!(reentry_grant.reentry);
                            prop_assert!(only_whole_holders_changed(&step), "step after a re-entry");
                            let mut handed = lock.clone();
                            let mut hand_off_step = Step::new(now, &issue, &present);
                            handed.hand_off(&mut hand_off_step);
                            prop_assert!(hand_off_step.woken.is_empty() && hand_off_step.expired.is_empty());
                            prop_assert_eq!(&handed, &lock);
                            prop_assert_eq!(&reentered, &lock);
                            prop_assert_eq!(lock.wakeup_at(now), None);
                        }
                        None => {
                            prop_assert_eq!(&reentered, &before);
                            // A re-entry the straight route missed: only with
                            // a queue, other holders, or an upgrade.
                            if grant.is_some_and(|grant| grant.reentry) {
                                prop_assert!(
                                    !before.queue().is_empty()
                                        || before.holders().len() != 1
                                        || !step.expired.is_empty(),
                                    "a re-entry the straight route missed: {:?}",
                                    before
                                );
                            }
                        }
                    }
                    match straight_grant {
                        Some(straight_grant) => {
                            prop_assert!(before.holders().is_empty() && before.queue().is_empty());
                            prop_assert_eq!(Some(straight_grant), grant);
                            prop_assert_eq!(straight_tokens, 1);
                            prop_assert!(only_whole_holders_changed(&step), "step after a first hold");
                            // The adapter's hand-off finds nothing to do.
                            lock.hand_off(&mut step);
                            prop_assert!(only_whole_holders_changed(&step), "hand-off after a first hold");
                            prop_assert_eq!(&straight, &lock);
                            prop_assert!(!lock.is_vacant(now));
                            prop_assert_eq!(lock.wakeup_at(now), None);
                        }
                        None => {
                            prop_assert!(!(before.holders().is_empty() && before.queue().is_empty()));
                            prop_assert_eq!(straight_tokens, 0);
                            prop_assert_eq!(&straight, &before);
                        }
                    }
                    if grant.is_none() {
                        match op {
                            Op::Block { .. } => {
                                next_waiter += 1;
                                let waiter = Waiter { id: next_waiter, ttl_ms: ttl, session: None, want };
                                if let Ok(seq) = lock.enqueue_waiter(OWNERS[owner], waiter, now) {
                                    waiters.push((seq, next_waiter));
                                }
                            }
                            Op::Fair { .. } => {
                                lock.reserve(OWNERS[owner], want, now + 30, now);
                            }
                            _ => {}
                        }
                    }
                }
                Op::Release { owner, mode } => {
                    let before = lock.clone();
                    let mut straight = lock.clone();
                    let straight_token = straight.release_last(OWNERS[owner], mode, now);
                    let released = lock.release(OWNERS[owner], mode, &mut step);
                    match straight_token {
                        Some(token) => {
                            prop_assert_eq!(before.holders().get(OWNERS[owner]).map(|hold| hold.token), Some(token));
                            prop_assert_eq!(released, Ok(0));
                            prop_assert!(only_whole_holders_changed(&step), "step after the last release");
                            lock.hand_off(&mut step);
                            prop_assert!(only_whole_holders_changed(&step), "hand-off after the last release");
                            prop_assert!(lock.is_vacant(now));
                            prop_assert_eq!(&straight, &lock);
                        }
                        None => {
                            prop_assert_eq!(&straight, &before);
                            // The general path ends up vacant only through
                            // work the straight route does not do.
                            if released == Ok(0) {
                                lock.hand_off(&mut step);
                                if lock.is_vacant(now) && lock.queue().is_empty() {
                                    prop_assert!(
                                        !step.expired.is_empty()
                                            || !before.queue().is_empty()
                                            || before.holders().len() != 1,
                                        "a last release the straight route missed: {:?}",
                                        before
                                    );
                                }
                            }
                        }
                    }
                }
                Op::Renew { owner, ttl } => {
                    let _ = lock.renew(OWNERS[owner], ttl, &mut step);
                }
                Op::Leave { nth } => {
                    if !waiters.is_empty() {
                        let (seq, id) = waiters.remove(nth % waiters.len());
                        lock.remove_waiter(seq, id);
                    }
                }
                Op::Wait { ms } => {
                    // Time passes; nothing looks at the lock until the next command.
                    now += ms;
                    continue;
                }
            }
            // What settle does after every command.
            let mut step = Step::new(now, &issue, &present);
            lock.hand_off(&mut step);
            for grant in &step.woken {
                waiters.retain(|(_, id)| *id != grant.waiter);
            }
        }
    }
}
