//! When each queue entry joined (`Entry::since_ms`, for `DLOCK.INFO key
//! FULL`): set when a place is taken, kept when it is refreshed or taken
//! over, unknown (0) when restored.

use super::*;

fn waiter(id: WaiterId) -> Waiter {
    Waiter {
        id,
        ttl_ms: 1_000,
        session: None,
        want: Want::EXCLUSIVE,
    }
}

fn since_of(lock: &Lock, owner: &[u8]) -> Vec<u64> {
    lock.queue()
        .entries()
        .filter(|(_, entry)| &*entry.owner == owner)
        .map(|(_, entry)| entry.since_ms)
        .collect()
}

#[test]
fn a_place_keeps_the_moment_it_was_taken() {
    let mut lock = Lock::new();
    let step = &mut Step::new(100, &|| 7, &|_| true);
    lock.acquire(
        Request {
            owner: b"holder",
            ttl_ms: 10_000,
            session: None,
            want: Want::EXCLUSIVE,
        },
        step,
    )
    .expect("granted");
    assert!(lock.reserve(b"r", Want::EXCLUSIVE, 5_000, 200));
    lock.enqueue_waiter(b"w", waiter(1), 300).expect("queued");
    assert_eq!(since_of(&lock, b"r"), [200]);
    assert_eq!(since_of(&lock, b"w"), [300]);

    // A refresh moves the deadline, not the moment.
    assert!(lock.reserve(b"r", Want::EXCLUSIVE, 9_000, 400));
    assert_eq!(since_of(&lock, b"r"), [200]);
    // A blocked client of the same owner waits in the reservation's place.
    lock.enqueue_waiter(b"r", waiter(2), 500).expect("queued");
    assert_eq!(since_of(&lock, b"r"), [200]);

    // What a file or a replica restores has no moment.
    let mut restored = Lock::new();
    restored.restore_reservation(b"r", Want::EXCLUSIVE, 9_000);
    assert_eq!(since_of(&restored, b"r"), [0]);
    // The moment is bookkeeping, not state: equal locks compare equal.
    let mut other = Lock::new();
    assert!(other.reserve(b"r", Want::EXCLUSIVE, 9_000, 12_345));
    assert_eq!(restored, other);
}
