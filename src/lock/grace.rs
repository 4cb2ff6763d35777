//! The grace window: for a while after a server starts or becomes master, it
//! grants no new hold.
//!
//! Why: a server that has just started (its data lost or partly lost) or has
//! just been promoted (the old master's last grants may not have reached it)
//! cannot see every hold that clients believe they have. Each of those holds
//! was granted or renewed before the server took over, and with leases
//! bounded by `dlock.max-lease-ms` none outlives the takeover by more than
//! that. Refusing new holds for that long after the takeover means no new
//! holder can overlap a hold the server could not see.
//!
//! The rule, as pure logic over [`Lock`]:
//!
//! * while the window is open, a request that would start a new hold is
//!   deferred: without BLOCK it gets what it would get if the lock were held
//!   (null, or a FAIR reservation), with BLOCK it waits in the queue;
//! * the holds the server knows of keep working: their owners re-enter,
//!   renew and release as usual (only [`Lock::acquire`] and
//!   [`Lock::hand_off`] start holds, and only those are gated);
//! * no hand-off happens while the window is open: a lock with waiters is
//!   looked at again when the window closes, and its queue is then served
//!   in FIFO order like after any release.
//!
//! The window itself is measured on a monotonic clock by the caller; here it
//! is only "open" or "closed", plus, for timers, the wall-clock instant at
//! which it closes.

use super::{Acquired, Lock, Request, WaiterGrant, WaiterId};

/// Whether the window is open, and until when on the wall clock (ms since
/// the epoch, the clock of lease deadlines), for scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Closed,
    OpenUntil(u64),
}

impl Window {
    pub fn is_open(self) -> bool {
        matches!(self, Window::OpenUntil(_))
    }
}

/// Whether a request of `owner` would start a new hold: the lock is not
/// held by `owner` (a re-entry never is a new hold).
pub fn starts_new_hold(lock: Option<&Lock>, owner: &[u8], now_ms: u64) -> bool {
    lock.and_then(|lock| lock.live_hold(now_ms))
        .is_none_or(|hold| *hold.owner != *owner)
}

/// Whether `window` defers `owner`'s request on `lock`.
pub fn defers(window: Window, lock: Option<&Lock>, owner: &[u8], now_ms: u64) -> bool {
    window.is_open() && starts_new_hold(lock, owner, now_ms)
}

/// [`Lock::acquire`] through the window: a request the window defers gets
/// nothing (and changes nothing); any other is applied as usual.
pub fn acquire(
    lock: &mut Lock,
    window: Window,
    request: Request<'_>,
    now_ms: u64,
    next_token: impl FnOnce() -> u64,
    present: impl Fn(WaiterId) -> bool,
) -> Acquired {
    if defers(window, Some(lock), request.owner, now_ms) {
        return Acquired::default();
    }
    lock.acquire(request, now_ms, next_token, present)
}

/// [`Lock::hand_off`] through the window: nothing is handed on while it is
/// open (an ended lease is cleared all the same).
pub fn hand_off(
    lock: &mut Lock,
    window: Window,
    now_ms: u64,
    next_token: impl FnOnce() -> u64,
    present: impl Fn(WaiterId) -> bool,
) -> Vec<WaiterGrant> {
    if window.is_open() {
        if lock.stored_hold().is_some() && lock.live_hold(now_ms).is_none() {
            lock.apply_free();
        }
        return Vec::new();
    }
    lock.hand_off(now_ms, next_token, present)
}

/// [`Lock::wakeup_at`] through the window: a lock whose waiters would be
/// served before the window closes is looked at again when it closes.
pub fn wakeup_at(lock: &Lock, window: Window, now_ms: u64) -> Option<u64> {
    let at = lock.wakeup_at(now_ms)?;
    Some(match window {
        Window::Closed => at,
        Window::OpenUntil(closes_at) => at.max(closes_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{EntryKind, Waiter};
    use proptest::prelude::*;

    fn request(owner: &[u8], ttl_ms: u64) -> Request<'_> {
        Request {
            owner,
            ttl_ms,
            session: None,
        }
    }

    fn waiter(id: u64, ttl_ms: u64) -> Waiter {
        Waiter {
            id,
            ttl_ms,
            session: None,
        }
    }

    #[test]
    fn an_open_window_defers_new_holds_and_keeps_known_ones_working() {
        let mut next = 0u64;
        let mut token = || {
            next += 1;
            next
        };
        let mut lock = Lock::new();
        let granted = lock.acquire(request(b"a", 100), 0, &mut token, |_| true);
        assert_eq!(granted.grant.map(|g| g.token), Some(1));
        let window = Window::OpenUntil(500);
        // Another owner: deferred, the lock unchanged.
        let before = lock.clone();
        let other = acquire(
            &mut lock,
            window,
            request(b"b", 100),
            10,
            &mut token,
            |_| true,
        );
        assert_eq!(other, Acquired::default());
        assert_eq!(lock, before);
        // The holder re-enters, renews and releases.
        let again = acquire(
            &mut lock,
            window,
            request(b"a", 100),
            10,
            &mut token,
            |_| true,
        );
        assert_eq!(
            again.grant.map(|g| (g.token, g.holds, g.reentry)),
            Some((1, 2, true))
        );
        assert_eq!(lock.renew(b"a", 200, 20), Ok(1));
        assert_eq!(lock.release(b"a", 30), Ok(1));
        assert_eq!(lock.release(b"a", 30), Ok(0));
        // Free, empty queue, window open: still deferred.
        let free = acquire(
            &mut lock,
            window,
            request(b"b", 100),
            40,
            &mut token,
            |_| true,
        );
        assert_eq!(free, Acquired::default());
        // Closed: granted, with the next token.
        let later = acquire(
            &mut lock,
            Window::Closed,
            request(b"b", 100),
            600,
            &mut token,
            |_| true,
        );
        assert_eq!(later.grant.map(|g| (g.token, g.reentry)), Some((2, false)));
    }

    #[test]
    fn waiters_are_served_in_order_when_the_window_closes() {
        let mut next = 0u64;
        let mut token = || {
            next += 1;
            next
        };
        let mut lock = Lock::new();
        lock.enqueue_waiter(b"w1", waiter(1, 100));
        lock.enqueue_waiter(b"w2", waiter(2, 100));
        let window = Window::OpenUntil(500);
        assert!(hand_off(&mut lock, window, 10, &mut token, |_| true).is_empty());
        assert_eq!(wakeup_at(&lock, window, 10), Some(500));
        assert_eq!(wakeup_at(&lock, Window::Closed, 10), Some(10));
        let first = hand_off(&mut lock, Window::Closed, 500, &mut token, |_| true);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].waiter, 1);
        assert_eq!(lock.release(b"w1", 510), Ok(0));
        let second = hand_off(&mut lock, Window::Closed, 510, &mut token, |_| true);
        assert_eq!(second[0].waiter, 2);
        assert!(second[0].grant.token > first[0].grant.token);
    }

    #[test]
    fn an_ended_lease_is_cleared_but_not_handed_on_while_open() {
        let mut lock = Lock::new();
        lock.acquire(request(b"a", 10), 0, || 1, |_| true);
        lock.enqueue_waiter(b"w", waiter(1, 100));
        let handed = hand_off(&mut lock, Window::OpenUntil(100), 50, || 2, |_| true);
        assert!(handed.is_empty());
        assert!(lock.stored_hold().is_none());
        assert_eq!(lock.queue().waiter_count(), 1);
        assert!(matches!(
            lock.queue().head().map(|(_, e)| &e.kind),
            Some(EntryKind::Waiter(_))
        ));
    }

    /// One step of a random history.
    #[derive(Clone, Debug)]
    enum Step {
        Acquire { owner: usize, ttl: u64 },
        Block { owner: usize, ttl: u64 },
        Release { owner: usize },
        Renew { owner: usize, ttl: u64 },
        Advance { ms: u64 },
        Open { for_ms: u64 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..3usize, 1..200u64).prop_map(|(owner, ttl)| Step::Acquire { owner, ttl }),
            (0..3usize, 1..200u64).prop_map(|(owner, ttl)| Step::Block { owner, ttl }),
            (0..3usize).prop_map(|owner| Step::Release { owner }),
            (0..3usize, 1..200u64).prop_map(|(owner, ttl)| Step::Renew { owner, ttl }),
            (1..120u64).prop_map(|ms| Step::Advance { ms }),
            (1..300u64).prop_map(|for_ms| Step::Open { for_ms }),
        ]
    }

    const OWNERS: [&[u8]; 3] = [b"a", b"b", b"c"];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// Over random histories with windows opening at random: no new
        /// token while a window is open; holds known when it opened keep
        /// re-entering, renewing and releasing; the waiters queued during a
        /// window are granted, after it, in the order they queued.
        #[test]
        fn no_new_hold_while_the_window_is_open(steps in proptest::collection::vec(step(), 1..150)) {
            let mut lock = Lock::new();
            let mut now = 0u64;
            let mut closes_at = 0u64;
            let mut last_token = 0u64;
            let mut next_waiter = 0u64;
            // Waiters in the order they queued, and the order they got the lock.
            let mut queued: Vec<u64> = Vec::new();
            let mut served: Vec<u64> = Vec::new();
            for step in steps {
                let window = if now < closes_at { Window::OpenUntil(closes_at) } else { Window::Closed };
                let mut issued = None;
                let mut token = || { last_token += 1; issued = Some(last_token); last_token };
                match step {
                    Step::Acquire { owner, ttl } => {
                        let holder_before = lock.live_hold(now).map(|h| h.owner.clone());
                        let out = acquire(&mut lock, window, request(OWNERS[owner], ttl), now, &mut token, |_| true);
                        if let Some(grant) = out.grant {
                            if window.is_open() {
                                prop_assert!(grant.reentry, "a new hold inside the window");
                                prop_assert_eq!(holder_before.as_deref(), Some(OWNERS[owner]));
                            }
                        } else if holder_before.as_deref() == Some(OWNERS[owner]) {
                            prop_assert!(false, "the holder could not re-enter");
                        }
                    }
                    Step::Block { owner, ttl } => {
                        let mine = lock.live_hold(now).is_some_and(|h| *h.owner == *OWNERS[owner]);
                        if !mine && !lock.queue().seqs_of(OWNERS[owner]).is_empty() {
                            continue;
                        }
                        let out = acquire(&mut lock, window, request(OWNERS[owner], ttl), now, &mut token, |_| true);
                        if out.grant.is_none() {
                            next_waiter += 1;
                            lock.enqueue_waiter(OWNERS[owner], waiter(next_waiter, ttl));
                            queued.push(next_waiter);
                        }
                    }
                    Step::Release { owner } => {
                        let held = lock.live_hold(now).is_some_and(|h| *h.owner == *OWNERS[owner]);
                        prop_assert_eq!(lock.release(OWNERS[owner], now).is_ok(), held);
                    }
                    Step::Renew { owner, ttl } => {
                        let held = lock.live_hold(now).is_some_and(|h| *h.owner == *OWNERS[owner]);
                        prop_assert_eq!(lock.renew(OWNERS[owner], ttl, now).is_ok(), held);
                    }
                    Step::Advance { ms } => now += ms,
                    Step::Open { for_ms } => closes_at = closes_at.max(now + for_ms),
                }
                let window = if now < closes_at { Window::OpenUntil(closes_at) } else { Window::Closed };
                let handed = hand_off(&mut lock, window, now, &mut token, |_| true);
                if window.is_open() {
                    prop_assert!(handed.is_empty());
                    prop_assert_eq!(issued, None, "a token issued inside the window");
                    if let Some(at) = wakeup_at(&lock, window, now) {
                        prop_assert!(at >= closes_at);
                    }
                }
                for grant in handed {
                    served.push(grant.waiter);
                }
            }
            // Granted waiters come in queue order.
            let order: Vec<u64> = queued.iter().copied().filter(|w| served.contains(w)).collect();
            let served_new: Vec<u64> = served.iter().copied().filter(|w| order.contains(w)).collect();
            prop_assert_eq!(served_new, order);
        }
    }
}
