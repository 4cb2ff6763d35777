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

use super::{Grant, Lock, Mode, Request, Step, Want};

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

/// Whether `owner` asking for `want` would get a new token: a new hold (it
/// holds nothing) or an upgrade (it holds the lock only shared and asks for
/// it exclusively). Re-entries keep their token and are never new holds.
pub fn starts_new_hold(lock: Option<&Lock>, owner: &[u8], want: Want, now_ms: u64) -> bool {
    match lock.and_then(|lock| lock.live_hold_of(owner, now_ms)) {
        None => true,
        Some(hold) => want.mode == Mode::Exclusive && hold.exclusive == 0,
    }
}

/// Whether `window` defers `owner`'s request for `want` on `lock`.
pub fn defers(window: Window, lock: Option<&Lock>, owner: &[u8], want: Want, now_ms: u64) -> bool {
    window.is_open() && starts_new_hold(lock, owner, want, now_ms)
}

/// [`Lock::acquire`] through the window: a request the window defers gets
/// nothing (holders whose lease ended are dropped all the same); any other
/// is applied as usual.
pub fn acquire(
    lock: &mut Lock,
    window: Window,
    request: Request<'_>,
    step: &mut Step<'_>,
) -> Option<Grant> {
    if defers(window, Some(lock), request.owner, request.want, step.now_ms) {
        lock.expire_holders(step);
        lock.queue.drop_expired_reservations(step.now_ms);
        return None;
    }
    lock.acquire(request, step)
}

/// [`Lock::hand_off`] through the window: nothing is handed on while it is
/// open (holders whose lease ended are dropped all the same).
pub fn hand_off(lock: &mut Lock, window: Window, step: &mut Step<'_>) {
    if window.is_open() {
        lock.expire_holders(step);
        lock.queue.drop_expired_reservations(step.now_ms);
        return;
    }
    lock.hand_off(step);
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
    use crate::lock::{Waiter, WaiterId};
    use proptest::prelude::*;
    use std::cell::Cell;

    const SHARED: Want = Want::shared(None);

    fn request(owner: &[u8], ttl_ms: u64, want: Want) -> Request<'_> {
        Request {
            owner,
            ttl_ms,
            session: None,
            want,
        }
    }

    fn waiter(id: WaiterId, ttl_ms: u64, want: Want) -> Waiter {
        Waiter {
            id,
            ttl_ms,
            session: None,
            want,
        }
    }

    /// A token source counting what it issued.
    struct Tokens(Cell<u64>);

    impl Tokens {
        fn next(&self) -> u64 {
            self.0.set(self.0.get() + 1);
            self.0.get()
        }
    }

    fn present(_: WaiterId) -> bool {
        true
    }

    #[test]
    fn an_open_window_defers_new_holds_and_keeps_known_ones_working() {
        let tokens = Tokens(Cell::new(0));
        let next = || tokens.next();
        let step = |now| Step::new(now, &next, &present);
        let mut lock = Lock::new();
        let granted = lock.acquire(request(b"a", 100, Want::EXCLUSIVE), &mut step(0));
        assert_eq!(granted.map(|g| g.token), Some(1));
        let window = Window::OpenUntil(500);
        // Another owner: deferred, the lock unchanged.
        let before = lock.clone();
        let other = acquire(
            &mut lock,
            window,
            request(b"b", 100, Want::EXCLUSIVE),
            &mut step(10),
        );
        assert_eq!(other, None);
        assert_eq!(lock, before);
        // The holder re-enters, renews and releases.
        let again = acquire(
            &mut lock,
            window,
            request(b"a", 100, Want::EXCLUSIVE),
            &mut step(10),
        );
        assert_eq!(
            again.map(|g| (g.token, g.holds, g.reentry)),
            Some((1, 2, true))
        );
        assert_eq!(lock.renew(b"a", 200, &mut step(20)), Ok(1));
        assert_eq!(lock.release(b"a", Mode::Exclusive, &mut step(30)), Ok(1));
        assert_eq!(lock.release(b"a", Mode::Exclusive, &mut step(30)), Ok(0));
        // Free, empty queue, window open: still deferred.
        let free = acquire(
            &mut lock,
            window,
            request(b"b", 100, Want::EXCLUSIVE),
            &mut step(40),
        );
        assert_eq!(free, None);
        assert_eq!(tokens.0.get(), 1, "no token inside the window");
        // Closed: granted, with the next token.
        let later = acquire(
            &mut lock,
            Window::Closed,
            request(b"b", 100, Want::EXCLUSIVE),
            &mut step(600),
        );
        assert_eq!(later.map(|g| (g.token, g.reentry)), Some((2, false)));
    }

    #[test]
    fn readers_reenter_but_new_readers_and_upgrades_wait_for_the_window() {
        let tokens = Tokens(Cell::new(0));
        let next = || tokens.next();
        let step = |now| Step::new(now, &next, &present);
        let mut lock = Lock::new();
        lock.acquire(request(b"r1", 100, SHARED), &mut step(0));
        let window = Window::OpenUntil(500);
        let again = acquire(
            &mut lock,
            window,
            request(b"r1", 100, SHARED),
            &mut step(10),
        );
        assert_eq!(
            again.map(|g| (g.token, g.holds, g.reentry)),
            Some((1, 2, true))
        );
        assert_eq!(
            acquire(
                &mut lock,
                window,
                request(b"r2", 100, SHARED),
                &mut step(10)
            ),
            None
        );
        // An upgrade would take a new token: a new (exclusive) hold.
        assert_eq!(
            acquire(
                &mut lock,
                window,
                request(b"r1", 100, Want::EXCLUSIVE),
                &mut step(10)
            ),
            None
        );
        assert_eq!(tokens.0.get(), 1);
        let upgraded = acquire(
            &mut lock,
            Window::Closed,
            request(b"r1", 100, Want::EXCLUSIVE),
            &mut step(20),
        );
        assert_eq!(upgraded.map(|g| (g.token, g.reentry)), Some((2, false)));
    }

    #[test]
    fn waiters_are_served_in_order_when_the_window_closes() {
        let tokens = Tokens(Cell::new(0));
        let next = || tokens.next();
        let step = |now| Step::new(now, &next, &present);
        let mut lock = Lock::new();
        lock.enqueue_waiter(b"w1", waiter(1, 100, Want::EXCLUSIVE), 0)
            .unwrap();
        lock.enqueue_waiter(b"w2", waiter(2, 100, Want::EXCLUSIVE), 0)
            .unwrap();
        let window = Window::OpenUntil(500);
        let mut open = step(10);
        hand_off(&mut lock, window, &mut open);
        assert!(open.woken.is_empty());
        assert_eq!(wakeup_at(&lock, window, 10), Some(500));
        assert_eq!(wakeup_at(&lock, Window::Closed, 10), Some(10));
        let mut first = step(500);
        hand_off(&mut lock, Window::Closed, &mut first);
        assert_eq!(first.woken.len(), 1);
        assert_eq!(first.woken[0].waiter, 1);
        assert_eq!(lock.release(b"w1", Mode::Exclusive, &mut step(510)), Ok(0));
        let mut second = step(510);
        hand_off(&mut lock, Window::Closed, &mut second);
        assert_eq!(second.woken[0].waiter, 2);
        assert!(second.woken[0].grant.token > first.woken[0].grant.token);
    }

    #[test]
    fn an_ended_lease_is_dropped_but_not_handed_on_while_open() {
        let tokens = Tokens(Cell::new(0));
        let next = || tokens.next();
        let step = |now| Step::new(now, &next, &present);
        let mut lock = Lock::new();
        lock.acquire(request(b"a", 10, Want::EXCLUSIVE), &mut step(0));
        lock.enqueue_waiter(b"w", waiter(1, 100, Want::EXCLUSIVE), 0)
            .unwrap();
        let mut open = step(50);
        hand_off(&mut lock, Window::OpenUntil(100), &mut open);
        assert!(open.woken.is_empty());
        assert_eq!(open.expired.len(), 1);
        assert!(lock.holders().is_empty());
        assert_eq!(lock.queue().waiter_count(), 1);
    }

    /// One step of a random history.
    #[derive(Clone, Debug)]
    enum Op {
        Acquire {
            owner: usize,
            ttl: u64,
            shared: bool,
        },
        Block {
            owner: usize,
            ttl: u64,
            shared: bool,
        },
        Release {
            owner: usize,
            shared: bool,
        },
        Renew {
            owner: usize,
            ttl: u64,
        },
        Advance {
            ms: u64,
        },
        Open {
            for_ms: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4usize, 1..200u64, any::<bool>()).prop_map(|(owner, ttl, shared)| Op::Acquire {
                owner,
                ttl,
                shared
            }),
            (0..4usize, 1..200u64, any::<bool>()).prop_map(|(owner, ttl, shared)| Op::Block {
                owner,
                ttl,
                shared
            }),
            (0..4usize, any::<bool>()).prop_map(|(owner, shared)| Op::Release { owner, shared }),
            (0..4usize, 1..200u64).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
            (1..120u64).prop_map(|ms| Op::Advance { ms }),
            (1..300u64).prop_map(|for_ms| Op::Open { for_ms }),
        ]
    }

    const OWNERS: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];

    fn want(shared: bool) -> Want {
        if shared {
            SHARED
        } else {
            Want::EXCLUSIVE
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// Over random histories of exclusive and shared requests with
        /// windows opening at random: no token is issued while a window is
        /// open; a live holder's re-entries are granted inside it (only
        /// upgrades wait); the waiters queued are granted, after it, in the
        /// order they queued.
        #[test]
        fn no_new_hold_while_the_window_is_open(ops in proptest::collection::vec(op(), 1..150)) {
            let tokens = Tokens(Cell::new(0));
            let next = || tokens.next();
            let mut lock = Lock::new();
            let mut now = 0u64;
            let mut closes_at = 0u64;
            let mut next_waiter = 0u64;
            let mut queued: Vec<u64> = Vec::new();
            let mut served: Vec<u64> = Vec::new();
            for op in ops {
                let window = if now < closes_at { Window::OpenUntil(closes_at) } else { Window::Closed };
                let issued_before = tokens.0.get();
                let mut step = Step::new(now, &next, &present);
                match op {
                    Op::Acquire { owner, ttl, shared } => {
                        let owner = OWNERS[owner];
                        let hold = lock.live_hold_of(owner, now).cloned();
                        let granted = acquire(&mut lock, window, request(owner, ttl, want(shared)), &mut step);
                        if window.is_open() {
                            let upgrade = hold.as_ref().is_some_and(|h| !shared && h.exclusive == 0);
                            match (&hold, upgrade) {
                                (Some(_), false) => prop_assert!(granted.is_some_and(|g| g.reentry), "a holder could not re-enter"),
                                _ => prop_assert_eq!(granted, None, "a new hold inside the window"),
                            }
                        }
                    }
                    Op::Block { owner, ttl, shared } => {
                        let owner = OWNERS[owner];
                        if lock.live_hold_of(owner, now).is_some() || !lock.queue().seqs_of(owner).is_empty() {
                            continue;
                        }
                        let granted = acquire(&mut lock, window, request(owner, ttl, want(shared)), &mut step);
                        if granted.is_none() {
                            next_waiter += 1;
                            if lock.enqueue_waiter(owner, waiter(next_waiter, ttl, want(shared)), now).is_ok() {
                                queued.push(next_waiter);
                            }
                        }
                    }
                    Op::Release { owner, shared } => {
                        let mode = if shared { Mode::Shared } else { Mode::Exclusive };
                        let _ = lock.release(OWNERS[owner], mode, &mut step);
                    }
                    Op::Renew { owner, ttl } => {
                        let held = lock.live_hold_of(OWNERS[owner], now).is_some();
                        prop_assert_eq!(lock.renew(OWNERS[owner], ttl, &mut step).is_ok(), held);
                    }
                    Op::Advance { ms } => now += ms,
                    Op::Open { for_ms } => closes_at = closes_at.max(now + for_ms),
                }
                served.extend(step.woken.iter().map(|grant| grant.waiter));
                let window = if now < closes_at { Window::OpenUntil(closes_at) } else { Window::Closed };
                let mut settle = Step::new(now, &next, &present);
                hand_off(&mut lock, window, &mut settle);
                if window.is_open() {
                    prop_assert!(settle.woken.is_empty());
                    prop_assert_eq!(tokens.0.get(), issued_before, "a token issued inside the window");
                    if let Some(at) = wakeup_at(&lock, window, now) {
                        prop_assert!(at >= closes_at);
                    }
                }
                served.extend(settle.woken.iter().map(|grant| grant.waiter));
            }
            let order: Vec<u64> = queued.iter().copied().filter(|w| served.contains(w)).collect();
            let served_queued: Vec<u64> = served.iter().copied().filter(|w| order.contains(w)).collect();
            prop_assert_eq!(served_queued, order);
        }
    }
}
