//! Round trips of every other primitive through the client: read-write
//! lock, semaphore, latch and multi-lock. A test whose command (or option)
//! is not on the server yet is skipped with a printed reason.

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::Server;
use dlock_client::{Error, LatchWait};
use support::{client_of, eventually, has_command, has_shared_holds, skip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_round_trip() {
    let server = Server::start();
    let mut conn = server.connect();
    if !has_shared_holds(&mut conn) {
        return skip(
            "read_write_lock_round_trip",
            "DLOCK.ACQUIRE has no SHARED option yet",
        );
    }
    let dlock = client_of(&server).await;

    // Readers share; a writer is refused while they hold.
    let first = dlock.read_lock("catalog").acquire().await.unwrap();
    let second = dlock.read_lock("catalog").acquire().await.unwrap();
    assert!(first.is_shared() && second.is_shared());
    assert_ne!(first.owner(), second.owner());
    assert_eq!(common::info_int(&mut conn, "catalog", "shared"), 2);
    assert!(matches!(
        dlock.write_lock("catalog").acquire().await,
        Err(Error::Busy)
    ));

    // A waiting writer gets the lock when the readers leave.
    let writer = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .write_lock("catalog")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually("the writer waits", Duration::from_secs(5), || {
        common::waiting(&mut conn, "catalog") == 1
    })
    .await;
    first.release().await.unwrap();
    drop(second);
    let writer = writer.await.unwrap().unwrap();
    assert!(!writer.is_shared());
    assert_eq!(
        common::info_owner(&mut conn, "catalog").as_deref(),
        Some(writer.owner())
    );
    // Readers are refused while the writer holds.
    assert!(matches!(
        dlock.read_lock("catalog").acquire().await,
        Err(Error::Busy)
    ));
    writer.release().await.unwrap();
    assert!(common::info(&mut conn, "catalog").is_none());

    // Shared guards are renewed like exclusive ones.
    let reader = dlock
        .read_lock("catalog")
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(reader.is_held());
    assert_eq!(common::info_int(&mut conn, "catalog", "shared"), 1);
    reader.release().await.unwrap();
    assert!(common::info(&mut conn, "catalog").is_none());

    // Upgrades: the second owner asking to upgrade while one waits gets
    // DEADLOCK, kept as its own error; the first is granted once the other
    // reader leaves.
    let reader_a = dlock
        .read_lock("catalog")
        .owner("a")
        .acquire()
        .await
        .unwrap();
    let reader_b = dlock
        .read_lock("catalog")
        .owner("b")
        .acquire()
        .await
        .unwrap();
    let upgrade_a = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .write_lock("catalog")
                .owner("a")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually("the upgrade waits", Duration::from_secs(5), || {
        common::waiting(&mut conn, "catalog") == 1
    })
    .await;
    match dlock
        .write_lock("catalog")
        .owner("b")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
    {
        Err(error @ Error::Deadlock(_)) => assert_eq!(error.code(), Some("DEADLOCK")),
        other => panic!("expected DEADLOCK, got {other:?}"),
    }
    reader_b.release().await.unwrap();
    let writer_a = upgrade_a.await.unwrap().unwrap();
    assert_eq!(
        common::info_owner(&mut conn, "catalog").as_deref(),
        Some(&b"a"[..])
    );
    writer_a.release().await.unwrap();
    reader_a.release().await.unwrap();
    assert!(common::info(&mut conn, "catalog").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_round_trip() {
    let server = Server::start();
    let mut conn = server.connect();
    if !has_shared_holds(&mut conn) {
        return skip(
            "semaphore_round_trip",
            "DLOCK.ACQUIRE has no SHARED/LIMIT options yet",
        );
    }
    let dlock = client_of(&server).await;

    let one = dlock.semaphore("api", 2).acquire().await.unwrap();
    let two = dlock.semaphore("api", 2).acquire().await.unwrap();
    assert!(matches!(
        dlock.semaphore("api", 2).acquire().await,
        Err(Error::Busy)
    ));
    // A waiting third permit gets the slot that a drop frees.
    let third = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .semaphore("api", 2)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually("the third permit waits", Duration::from_secs(5), || {
        common::waiting(&mut conn, "api") == 1
    })
    .await;
    let dropped = Instant::now();
    drop(one);
    let third = third.await.unwrap().unwrap();
    eprintln!(
        "the freed permit was handed on {:?} after the drop",
        dropped.elapsed()
    );
    assert_eq!(common::info_int(&mut conn, "api", "shared"), 2);
    two.release().await.unwrap();
    third.release().await.unwrap();
    assert!(common::info(&mut conn, "api").is_none());
    // A limit of 0 is refused before anything is sent.
    assert!(matches!(
        dlock.semaphore("api", 0).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_round_trip() {
    let server = Server::start();
    let mut conn = server.connect();
    if !has_command(&mut conn, "DLOCK.LATCH") {
        return skip("latch_round_trip", "the server has no DLOCK.LATCH yet");
    }
    let dlock = client_of(&server).await;
    let latch = dlock.latch("batch");

    assert!(latch.create(2, Duration::from_secs(60)).await.unwrap());
    assert!(
        !latch.create(5, Duration::from_secs(60)).await.unwrap(),
        "trySet"
    );
    assert_eq!(latch.count().await.unwrap(), Some(2));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait(Duration::from_secs(10)).await })
        })
        .collect();
    common::wait_for_blocked_clients(&mut conn, 3);
    assert_eq!(latch.count_down(1).await.unwrap(), 1);
    assert_eq!(latch.count_down(1).await.unwrap(), 0);
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().unwrap(), LatchWait::Opened);
    }
    assert_eq!(
        latch.count().await.unwrap(),
        None,
        "an opened latch is gone"
    );
    assert_eq!(
        latch.wait(Duration::from_millis(50)).await.unwrap(),
        LatchWait::Opened
    );

    // Timeout and a latch that disappears without opening.
    assert!(latch.create(1, Duration::from_secs(60)).await.unwrap());
    assert_eq!(
        latch.wait(Duration::from_millis(100)).await.unwrap(),
        LatchWait::TimedOut
    );
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait(Duration::from_secs(10)).await }
    });
    common::wait_for_blocked_clients(&mut conn, 1);
    assert_eq!(common::int(&mut conn, &["DEL", "batch"]), 1);
    assert_eq!(waiter.await.unwrap().unwrap(), LatchWait::Vanished);

    // Lock commands on a latch are WRONGTYPE, kept as such.
    assert!(latch.create(1, Duration::from_secs(60)).await.unwrap());
    assert!(matches!(
        dlock.lock("batch").acquire().await,
        Err(Error::WrongType(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_round_trip() {
    let server = Server::start();
    let mut conn = server.connect();
    if !has_command(&mut conn, "DLOCK.MACQUIRE") {
        return skip(
            "multi_lock_round_trip",
            "the server has no DLOCK.MACQUIRE yet",
        );
    }
    let dlock = client_of(&server).await;

    let guard = dlock
        .multi_lock(["acct:1", "acct:2", "acct:3"])
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let tokens: Vec<(Vec<u8>, u64)> = guard.tokens().map(|(k, t)| (k.to_vec(), t)).collect();
    assert_eq!(tokens.len(), 3);
    for (key, token) in &tokens {
        let key = std::str::from_utf8(key).unwrap();
        assert_eq!(
            common::info_owner(&mut conn, key).as_deref(),
            Some(guard.owner())
        );
        assert_eq!(common::info_int(&mut conn, key, "token") as u64, *token);
    }
    // Renewed on every key.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(guard.is_held());
    // All or nothing: one held key refuses the whole request.
    assert!(matches!(
        dlock.multi_lock(["acct:3", "acct:4"]).acquire().await,
        Err(Error::Busy)
    ));
    assert!(common::info(&mut conn, "acct:4").is_none());
    // A waiting multi-lock gets every key when the holder leaves.
    let waiter = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .multi_lock(["acct:3", "acct:4"])
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    let queued = Instant::now();
    while common::waiting(&mut conn, "acct:3") != 1 {
        if waiter.is_finished() || queued.elapsed() > Duration::from_secs(5) {
            panic!("the multi-lock did not wait: {:?}", waiter.await);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    guard.release().await.unwrap();
    for key in ["acct:1", "acct:2"] {
        assert!(common::info(&mut conn, key).is_none(), "{key} released");
    }
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(
        common::info_owner(&mut conn, "acct:4").as_deref(),
        Some(next.owner())
    );
    drop(next);
    eventually(
        "dropping releases every key",
        Duration::from_millis(200),
        || {
            common::info(&mut conn, "acct:3").is_none()
                && common::info(&mut conn, "acct:4").is_none()
        },
    )
    .await;
    // A cancelled multi-lock wait leaves no waiter in any queue.
    common::acquire(&mut conn, "acct:9", "holder", 30_000).unwrap();
    let attempt = dlock
        .multi_lock(["acct:8", "acct:9"])
        .wait_forever()
        .acquire();
    let _ = tokio::time::timeout(Duration::from_millis(200), attempt).await;
    eventually("no waiter left", Duration::from_secs(2), || {
        common::waiting(&mut conn, "acct:9") == 0 && common::info(&mut conn, "acct:8").is_none()
    })
    .await;
}

/// R9.2: a latch count or ttl above 2^53-1 is refused before anything is
/// sent (the server would refuse it too, after a round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_beyond_2_53_is_refused_before_sending() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    let calls = |conn: &mut common::Connection| -> String {
        redis::cmd("INFO").arg("commandstats").query(conn).unwrap()
    };
    let before = calls(&mut conn);
    let latch = dlock.latch("big");
    let too_big = 1u64 << 53;
    assert!(matches!(
        latch.create(too_big, Duration::from_secs(1)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        latch.create(1, Duration::from_millis(too_big)).await,
        Err(Error::InvalidArgument(_))
    ));
    let after = calls(&mut conn);
    let latch_calls = |text: &str| {
        text.lines()
            .find(|line| line.starts_with("cmdstat_dlock.latch:"))
            .map(str::to_string)
    };
    assert_eq!(latch_calls(&before), latch_calls(&after), "nothing sent");
    assert!(latch
        .create((1 << 53) - 1, Duration::from_secs(1))
        .await
        .unwrap());
}
