//! BLOCK timeouts, kept by the module instead of by Redis.
//!
//! Every blocking command (ACQUIRE/FAIR `BLOCK`, MACQUIRE `BLOCK`, AWAIT)
//! blocks its client with no Redis timeout and records its deadline here;
//! the scheduler's timer answers it null when the deadline comes.
//!
//! Why not Redis's own timeout: Redis 7.0 handles due timeouts before it
//! replies to clients unblocked in the same event-loop turn, and for a
//! client that the module had already unblocked (a grant, an opened latch)
//! it then sends nothing at all: the timeout callback is skipped because the
//! client is already being unblocked, and the reply callback is skipped
//! because the client is no longer blocked. A grant made in the last
//! milliseconds of a wait, or any grant in a turn that started late on a
//! loaded machine, left its client unanswered for ever (and its lock held).
//! With the deadline in the module, every end of a wait is one
//! `RedisModule_UnblockClient` with its answer, and that answer is always
//! delivered.
//!
//! A client answered otherwise (granted, refused, gone) leaves this table
//! at once (`super::blocked` removes it as it leaves its registry), so the
//! timer never wakes for a wait that has already ended.
//!
//! This is the bottom layer of the blocked-client code: it knows ids and
//! instants, nothing of Redis.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use crate::lock::WaiterId;

/// Who waits: lock waiters (single-key and multi-key share one id space),
/// latch awaiters and watchers have ids of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blocked {
    /// A client blocked in `DLOCK.ACQUIRE`/`DLOCK.FAIR`/`DLOCK.MACQUIRE`.
    Waiter(WaiterId),
    /// A client blocked in `DLOCK.AWAIT`.
    Awaiter(WaiterId),
    /// A client blocked in `DLOCK.WATCH`.
    Watcher(WaiterId),
}

/// The deadlines of the blocked clients that have one.
#[derive(Default)]
struct Deadlines {
    /// (deadline in ms since the epoch, who), earliest first.
    by_time: BTreeSet<(u64, Blocked)>,
    /// Each client's deadline, to forget it when it is answered otherwise
    /// (a stale entry would wake the timer for nothing at its deadline).
    by_client: HashMap<Blocked, u64>,
}

thread_local! {
    static DEADLINES: RefCell<Option<Deadlines>> = const { RefCell::new(None) };
}

fn with_deadlines<T>(f: impl FnOnce(&mut Deadlines) -> T) -> Option<T> {
    DEADLINES
        .try_with(|deadlines| {
            let mut deadlines = deadlines.try_borrow_mut().ok()?;
            Some(f(deadlines.get_or_insert_with(Deadlines::default)))
        })
        .ok()
        .flatten()
}

/// `who` is answered null at `at_ms` unless answered before.
pub fn add(at_ms: u64, who: Blocked) {
    with_deadlines(|deadlines| {
        if let Some(previous) = deadlines.by_client.insert(who, at_ms) {
            deadlines.by_time.remove(&(previous, who));
        }
        deadlines.by_time.insert((at_ms, who));
    });
}

/// `who` was answered otherwise (or never had a deadline).
pub fn remove(who: Blocked) {
    with_deadlines(|deadlines| {
        if let Some(at) = deadlines.by_client.remove(&who) {
            deadlines.by_time.remove(&(at, who));
        }
    });
}

/// The earliest deadline, if any.
pub fn next() -> Option<u64> {
    with_deadlines(|deadlines| deadlines.by_time.first().map(|(at, _)| *at)).flatten()
}

/// Every client whose deadline is `now_ms` or earlier, taken out.
pub fn take_due(now_ms: u64) -> Vec<Blocked> {
    with_deadlines(|deadlines| {
        let mut due = Vec::new();
        while let Some(&(at, who)) = deadlines.by_time.first() {
            if at > now_ms {
                break;
            }
            deadlines.by_time.pop_first();
            deadlines.by_client.remove(&who);
            due.push(who);
        }
        due
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_clients_come_out_in_deadline_order_and_once() {
        add(30, Blocked::Waiter(3));
        add(10, Blocked::Awaiter(1));
        add(20, Blocked::Waiter(2));
        add(40, Blocked::Waiter(4));
        add(50, Blocked::Waiter(5));
        remove(Blocked::Waiter(4));
        remove(Blocked::Waiter(6));
        assert_eq!(next(), Some(10));
        assert_eq!(take_due(9), vec![]);
        assert_eq!(
            take_due(30),
            vec![Blocked::Awaiter(1), Blocked::Waiter(2), Blocked::Waiter(3)]
        );
        assert_eq!(next(), Some(50));
        remove(Blocked::Waiter(5));
        assert_eq!(take_due(u64::MAX), vec![]);
        assert_eq!(next(), None);
    }
}
