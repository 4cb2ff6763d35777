use super::*;
use proptest::prelude::*;

/// An immediate acquire without SESSION, as the old two-argument form.
trait Take {
    fn take(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        now_ms: u64,
        next: impl FnOnce() -> u64,
    ) -> Option<Grant>;
}

impl Take for Lock {
    fn take(
        &mut self,
        owner: &[u8],
        ttl_ms: u64,
        now_ms: u64,
        next: impl FnOnce() -> u64,
    ) -> Option<Grant> {
        let request = Request {
            owner,
            ttl_ms,
            session: None,
        };
        self.acquire(request, now_ms, next, |_| true).grant
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
            reentry: false
        })
    );
    let hold = lock.live_hold(1_000).cloned();
    assert_eq!(
        hold,
        Some(Hold {
            owner: (*b"a").into(),
            holds: 1,
            token: 7,
            deadline_ms: 1_100,
            session: None,
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
            reentry: true
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
            reentry: false
        })
    );
}

#[test]
fn release_counts_down_and_frees_at_zero() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 100, 1_000, &mut next);
    lock.take(b"a", 100, 1_000, &mut next);
    assert_eq!(lock.release(b"a", 1_010), Ok(1));
    assert_eq!(lock.release(b"a", 1_010), Ok(0));
    assert!(lock.is_vacant(1_010));
    assert_eq!(lock.release(b"a", 1_010), Err(NotOwner));
}

#[test]
fn release_and_renew_refuse_strangers_and_expired_holders() {
    let mut lock = Lock::new();
    let mut next = counter();
    assert_eq!(lock.release(b"a", 1_000), Err(NotOwner));
    assert_eq!(lock.renew(b"a", 100, 1_000), Err(NotOwner));
    lock.take(b"a", 100, 1_000, &mut next);
    let before = lock.clone();
    assert_eq!(lock.release(b"b", 1_050), Err(NotOwner));
    assert_eq!(lock.renew(b"b", 100, 1_050), Err(NotOwner));
    assert_eq!(lock, before);
    assert_eq!(lock.release(b"a", 1_101), Err(NotOwner));
    assert_eq!(lock.renew(b"a", 100, 1_101), Err(NotOwner));
}

#[test]
fn renew_moves_the_deadline_and_keeps_holds_and_token() {
    let mut lock = Lock::new();
    let mut next = counter();
    lock.take(b"a", 100, 1_000, &mut next);
    lock.take(b"a", 100, 1_000, &mut next);
    assert_eq!(lock.renew(b"a", 5_000, 1_090), Ok(1));
    let hold = lock.live_hold(1_090).cloned().unwrap();
    assert_eq!((hold.holds, hold.token, hold.deadline_ms), (2, 1, 6_090));
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
    assert_eq!(other.release(binary, 1_000), Ok(0));
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
                    match lock.release(OWNERS[owner], now) {
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
                    match lock.renew(OWNERS[owner], ttl, now) {
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
                    prop_assert!(hold.holds >= 1);
                    let index = OWNERS.iter().position(|o| **o == *hold.owner).unwrap();
                    prop_assert_eq!(hold.holds, beliefs[index].holds);
                    prop_assert_eq!(hold.token, beliefs[index].token);
                    prop_assert_eq!(hold.deadline_ms, beliefs[index].deadline_ms);
                }
                None => prop_assert!(beliefs.iter().all(|b| b.holds == 0 || now > b.deadline_ms)),
            }
        }
    }
}
