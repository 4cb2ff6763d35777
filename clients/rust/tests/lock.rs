//! The exclusive lock through the client: guards, the watchdog, lost-lock
//! detection, release on drop, cancellation, blocking waits beside renewals,
//! fencing under contention and replication safety.

use crate::common;
use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;
use dlock_client::Error;
use support::{client_of, cut_a_blocked_acquire, eventually, CuttingProxy};

const SHORT_LEASE: Duration = Duration::from_millis(300);

/// A client whose safety margin leaves room for a loaded machine's
/// scheduling delays: a guard counts as lost 50 ms (plus 1% of the lease)
/// before its lease ends.
async fn client_with_margin(server: &Server) -> dlock_client::Client {
    let config = dlock_client::Config::default().safety_margin(Duration::from_millis(50));
    dlock_client::Client::open_with(format!("redis://127.0.0.1:{}/", server.port), config)
        .await
        .expect("connect the dlock client")
}

fn owner_of(conn: &mut common::Connection, key: &str) -> Option<Vec<u8>> {
    common::info_owner(conn, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_drop() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;

    let guard = dlock.lock("orders:42").acquire().await.unwrap();
    assert!(guard.is_held());
    assert_eq!(guard.key(), b"orders:42");
    assert_eq!(guard.holds(), 1);
    assert_eq!(guard.owner().len(), 36, "a UUID owner by default");
    assert_eq!(
        owner_of(&mut conn, "orders:42").as_deref(),
        Some(guard.owner())
    );
    assert_eq!(
        common::info_int(&mut conn, "orders:42", "token") as u64,
        guard.token()
    );
    let pttl = common::info_int(&mut conn, "orders:42", "pttl");
    assert!(
        pttl > 29_000 && pttl <= 30_000,
        "default lease 30 s: {pttl}"
    );
    assert_eq!(dlock.watched(), 1);

    // Held: a second request is refused at once.
    match dlock.lock("orders:42").acquire().await {
        Err(Error::Busy) => {}
        other => panic!("expected Busy, got {other:?}"),
    }

    let first_token = guard.token();
    guard.release().await.unwrap();
    assert!(common::info(&mut conn, "orders:42").is_none(), "released");
    assert_eq!(dlock.watched(), 0);

    // Dropping a guard releases it in the background within milliseconds.
    let guard = dlock.lock("orders:42").acquire().await.unwrap();
    assert!(guard.token() > first_token, "a new hold gets a new token");
    let dropped = Instant::now();
    drop(guard);
    eventually(
        "the dropped guard's lock is free",
        Duration::from_millis(100),
        || common::info(&mut conn, "orders:42").is_none(),
    )
    .await;
    eprintln!("released {:?} after drop", dropped.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_reach_the_server() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;

    // owner(...) and re-entry: same token, holds 2, released hold by hold.
    let outer = dlock.lock("job").owner("job-17").acquire().await.unwrap();
    let inner = dlock.lock("job").owner("job-17").acquire().await.unwrap();
    assert_eq!(outer.owner(), b"job-17");
    assert_eq!(outer.token(), inner.token());
    assert_eq!(inner.holds(), 2);
    assert_eq!(common::info_int(&mut conn, "job", "holds"), 2);
    inner.release().await.unwrap();
    assert_eq!(common::info_int(&mut conn, "job", "holds"), 1);
    outer.release().await.unwrap();
    assert!(common::info(&mut conn, "job").is_none());

    // lease(...) sets the ttl.
    let guard = dlock
        .lock("leased")
        .lease(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let pttl = common::info_int(&mut conn, "leased", "pttl");
    assert!(pttl > 4_000 && pttl <= 5_000, "{pttl}");
    drop(guard);

    // fair() without a wait leaves a reservation for its owner.
    let holder = dlock.lock("report").acquire().await.unwrap();
    match dlock.lock("report").owner("poller").fair().acquire().await {
        Err(Error::Busy) => {}
        other => panic!("expected Busy, got {other:?}"),
    }
    assert_eq!(
        common::queue(&mut conn, "report"),
        vec!["poller".to_string()]
    );
    holder.release().await.unwrap();
    let granted = dlock
        .lock("report")
        .owner("poller")
        .fair()
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        owner_of(&mut conn, "report").as_deref(),
        Some(&b"poller"[..])
    );
    granted.release().await.unwrap();

    // Server errors keep their code.
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("x")
        .query(&mut conn)
        .unwrap();
    match dlock.lock("plain").acquire().await {
        Err(error @ Error::WrongType(_)) => assert_eq!(error.code(), Some("WRONGTYPE")),
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
    // Bad arguments are refused before anything is sent.
    assert!(matches!(
        dlock.lock("x").lease(Duration::ZERO).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        dlock.multi_lock(Vec::<&str>::new()).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(common::info(&mut conn, "x").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_hold_ends_with_its_connection() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    let guard = dlock.lock("tied").session().acquire().await.unwrap();
    assert_eq!(owner_of(&mut conn, "tied").as_deref(), Some(guard.owner()));
    // The client's connections close (as when its process dies): the server
    // releases the hold at once, and the watchdog reports it lost.
    let lost = guard.lost();
    let _ = common::cmd(
        &mut conn,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    );
    eventually(
        "the SESSION hold ends with its connection",
        Duration::from_secs(2),
        || common::info(&mut conn, "tied").is_none(),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), lost)
        .await
        .expect("the guard is reported lost");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_short_lease_held() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;

    let guard = dlock
        .lock("kept")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    let token = guard.token();
    let start = Instant::now();
    let mut checks = 0;
    while start.elapsed() < Duration::from_secs(3) {
        assert_eq!(
            owner_of(&mut conn, "kept").as_deref(),
            Some(guard.owner()),
            "held all along ({:?} in)",
            start.elapsed()
        );
        assert_eq!(common::info_int(&mut conn, "kept", "token") as u64, token);
        assert!(guard.is_held());
        checks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(checks > 50);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_makes_the_guard_lost() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;

    let guard = dlock
        .lock("doomed")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    let lost = guard.lost();
    assert_eq!(common::int(&mut conn, &["DEL", "doomed"]), 1);
    let deleted = Instant::now();
    tokio::time::timeout(SHORT_LEASE, lost)
        .await
        .expect("lost() resolves within one lease of the DEL");
    eprintln!("lost {:?} after DEL", deleted.elapsed());
    assert!(!guard.is_held());
    // Someone else may take it now; the lost guard's release is no error
    // and does not touch the new holder.
    let next = dlock.lock("doomed").acquire().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(owner_of(&mut conn, "doomed").as_deref(), Some(next.owner()));
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_makes_the_guard_lost_before_it_ends() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_with_margin(&server).await;

    dlock.pause_renewals(true);
    let asked = Instant::now();
    let guard = dlock
        .lock("lapsing")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    tokio::time::timeout(SHORT_LEASE, guard.lost())
        .await
        .expect("lost() resolves within the lease");
    let lost_after = asked.elapsed();
    assert!(
        lost_after < SHORT_LEASE,
        "lost before the server's lease ends"
    );
    assert!(!guard.is_held());
    eprintln!("lost {lost_after:?} after the acquire was sent");
    // The server's lease does end (nothing renewed it).
    eventually("the server's lease ends", Duration::from_secs(2), || {
        common::info(&mut conn, "lapsing").is_none()
    })
    .await;
    // A lost guard is never renewed again, even with renewals back on.
    dlock.pause_renewals(false);
    let other = client_of(&server).await;
    let next = other
        .lock("lapsing")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(SHORT_LEASE).await;
    assert_eq!(
        owner_of(&mut conn, "lapsing").as_deref(),
        Some(next.owner())
    );
    guard.release().await.unwrap();
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_makes_the_guard_lost_within_one_lease() {
    let mut server = Server::start();
    let dlock = client_with_margin(&server).await;

    let guard = dlock
        .lock("gone")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    let lost = guard.lost();
    // A blocking request leaves a connection in the pool.
    dlock
        .lock("pooled")
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    eventually(
        "the lease was renewed twice",
        Duration::from_secs(5),
        || dlock.renewal_rounds() >= 2,
    )
    .await;
    assert!(guard.is_held());
    server.kill();
    let killed = Instant::now();
    tokio::time::timeout(SHORT_LEASE, lost)
        .await
        .expect("lost() resolves within one lease of the crash");
    eprintln!("lost {:?} after the kill", killed.elapsed());
    assert!(!guard.is_held());
    // Releasing a lost guard against a dead server reports the connection
    // error, but never panics.
    let _ = guard.release().await;

    // The client reconnects once the server is back.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        match dlock.lock("gone").acquire().await {
            Ok(guard) => break guard,
            Err(error) if error.is_connection_error() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(other) => panic!("no reconnect: {other:?}"),
        }
    };
    assert!(guard.is_held());
    guard.release().await.unwrap();
    // The pooled connection died with the server: it is replaced, and the
    // first blocking request after the restart succeeds.
    let waited = dlock
        .lock("pooled")
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    waited.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_blocked_acquire_leaves_no_waiter_and_no_hold() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;

    // Cancelled while waiting: the queue empties at once.
    common::acquire(&mut conn, "busy", "holder", 30_000).unwrap();
    let attempt = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .lock("busy")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually(
        "the acquire waits in the queue",
        Duration::from_secs(5),
        || common::waiting(&mut conn, "busy") == 1,
    )
    .await;
    attempt.abort();
    let _ = attempt.await;
    eventually(
        "the cancelled waiter leaves the queue",
        Duration::from_secs(1),
        || common::waiting(&mut conn, "busy") == 0,
    )
    .await;
    assert_eq!(common::release(&mut conn, "busy", "holder"), 0);
    assert!(
        common::info(&mut conn, "busy").is_none(),
        "the lock is free"
    );

    // The grant racing the cancellation: the holder releases at about the
    // moment the acquire is dropped. Whatever wins, nothing is left held or
    // queued.
    for round in 0..20u64 {
        let key = format!("race:{round}");
        common::acquire(&mut conn, &key, "holder", 30_000).unwrap();
        let attempt = dlock.lock(&key).wait_forever().acquire();
        let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            tokio::select! {
                granted = attempt => Some(granted),
                _ = cancelled => None,
            }
        });
        eventually("the acquire waits", Duration::from_secs(5), || {
            common::waiting(&mut conn, &key) == 1
        })
        .await;
        if round % 2 == 0 {
            let _ = cancel.send(());
            tokio::time::sleep(Duration::from_micros(round * 50)).await;
            common::release(&mut conn, &key, "holder");
        } else {
            common::release(&mut conn, &key, "holder");
            tokio::time::sleep(Duration::from_micros(round * 50)).await;
            let _ = cancel.send(());
        }
        if let Some(granted) = handle.await.unwrap() {
            granted.unwrap().release().await.unwrap();
        }
        let mut last = None;
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            last = common::info(&mut conn, &key);
            if last.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(
            last.is_none(),
            "round {round}: still held or queued: {last:?}"
        );
    }
}

/// R8: a fair poller keeps its place. Each no-wait fair request without
/// an owner of its own (a new builder each time, as a polling loop writes
/// it) asks under the owner of the refused one before it, so its
/// reservation, not another poller's, takes the lock once it is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_poller_keeps_its_place_across_tries() {
    let server = Server::start();
    let mut conn = server.connect();
    let poller = client_of(&server).await;
    let other = client_of(&server).await;
    common::acquire(&mut conn, "fair", "holder", 30_000).unwrap();
    // The poller's first try reserves the head of the queue, the other
    // client's the place behind it.
    assert!(matches!(
        poller.lock("fair").fair().acquire().await,
        Err(Error::Busy)
    ));
    assert!(matches!(
        other.lock("fair").fair().acquire().await,
        Err(Error::Busy)
    ));
    let reserved = common::queue(&mut conn, "fair");
    assert_eq!(reserved.len(), 2, "two reservations: {reserved:?}");
    // A second try while held: still one place, the poller's own.
    assert!(matches!(
        poller.lock("fair").fair().acquire().await,
        Err(Error::Busy)
    ));
    assert_eq!(common::queue(&mut conn, "fair"), reserved);
    common::release(&mut conn, "fair", "holder");
    // Free, with the poller's reservation at the head: the other client is
    // refused and the poller's next try is granted, under its reserved owner.
    assert!(matches!(
        other.lock("fair").fair().acquire().await,
        Err(Error::Busy)
    ));
    let guard = poller.lock("fair").fair().acquire().await.unwrap();
    assert_eq!(guard.owner(), reserved[0].as_bytes());
    guard.release().await.unwrap();
    // A granted owner is never reused: the next poll asks under a new one.
    let next = poller.lock("fair").fair().acquire().await;
    // (The other client's reservation heads the queue now.)
    assert!(matches!(next, Err(Error::Busy)), "{next:?}");
    let queue = common::queue(&mut conn, "fair");
    assert!(
        !queue.contains(&reserved[0]),
        "the granted owner is not reused: {queue:?}"
    );
}

/// A wait too long for the clock (`Duration::MAX`) is a wait without end,
/// not a panic of the acquiring task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_of_duration_max_is_a_wait_without_end() {
    let server = Server::start();
    let dlock = client_of(&server).await;
    let guard = dlock
        .lock("long")
        .wait(Duration::MAX)
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let dlock = dlock.clone();
        async move { dlock.lock("long").wait(Duration::MAX).acquire().await }
    });
    let mut conn = server.connect();
    eventually("the second waits", Duration::from_secs(5), || {
        common::waiting(&mut conn, "long") == 1
    })
    .await;
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// How a caller gives up a waiting acquire, the three ways of Rust.
#[derive(Clone, Copy, Debug)]
enum Cancel {
    /// The future is dropped (a lost `select!`).
    Drop,
    /// `tokio::time::timeout` around the acquire runs out.
    Timeout,
    /// The task that awaits it is aborted.
    Abort,
}

/// R4.4, 50-fold for each way of cancelling: the holder's release (a grant
/// to the waiter) races the cancel, with the order and the gap between
/// them varied; whichever wins, once the dust settles nothing is held and
/// nothing is queued (a grant that won is released by the client, or by
/// the caller that got it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_grant_leaves_nothing_50_times_each_way() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    let mut grants_won = 0;
    for how in [Cancel::Drop, Cancel::Timeout, Cancel::Abort] {
        for round in 0..50u64 {
            let key = format!("race:{how:?}:{round}");
            common::acquire(&mut conn, &key, "holder", 30_000).unwrap();
            let mut request = dlock.lock(&key);
            request = if round % 2 == 0 {
                request.wait_forever()
            } else {
                request.wait(Duration::from_secs(10))
            };
            let gap = Duration::from_micros((round % 5) * 300);
            let release_first = round % 4 < 2;
            let queued = |conn: &mut common::Connection| common::waiting(conn, &key) == 1;
            let granted = match how {
                Cancel::Drop => {
                    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
                    let attempt = tokio::spawn(async move {
                        tokio::select! {
                            granted = request.acquire() => Some(granted),
                            _ = cancelled => None,
                        }
                    });
                    eventually("the acquire waits", Duration::from_secs(5), || {
                        queued(&mut conn)
                    })
                    .await;
                    if release_first {
                        common::release(&mut conn, &key, "holder");
                        tokio::time::sleep(gap).await;
                        let _ = cancel.send(());
                    } else {
                        let _ = cancel.send(());
                        tokio::time::sleep(gap).await;
                        common::release(&mut conn, &key, "holder");
                    }
                    attempt.await.unwrap()
                }
                Cancel::Timeout => {
                    // The timeout runs out `gap` after (or before) the
                    // holder's release. On a loaded machine the acquire
                    // may not be queued by then: a round without a race.
                    let runs_out = tokio::time::Instant::now() + Duration::from_millis(50);
                    let attempt =
                        tokio::spawn(tokio::time::timeout_at(runs_out, request.acquire()));
                    eventually("the acquire waits", Duration::from_secs(5), || {
                        queued(&mut conn) || tokio::time::Instant::now() >= runs_out
                    })
                    .await;
                    let release_at = if release_first {
                        runs_out.checked_sub(gap).unwrap_or(runs_out)
                    } else {
                        runs_out + gap
                    };
                    tokio::time::sleep_until(release_at).await;
                    common::release(&mut conn, &key, "holder");
                    attempt.await.unwrap().ok()
                }
                Cancel::Abort => {
                    let attempt = tokio::spawn(request.acquire());
                    eventually("the acquire waits", Duration::from_secs(5), || {
                        queued(&mut conn)
                    })
                    .await;
                    if release_first {
                        common::release(&mut conn, &key, "holder");
                        tokio::time::sleep(gap).await;
                        attempt.abort();
                    } else {
                        attempt.abort();
                        tokio::time::sleep(gap).await;
                        common::release(&mut conn, &key, "holder");
                    }
                    attempt.await.ok()
                }
            };
            if let Some(granted) = granted {
                // The grant won: the caller has a guard and drops it.
                drop(granted.unwrap());
                grants_won += 1;
            }
            let mut last = None;
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                last = common::info(&mut conn, &key);
                if last.is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            assert!(
                last.is_none(),
                "{how:?}, round {round}: still held or queued: {last:?}"
            );
        }
    }
    eventually("no blocked client left", Duration::from_secs(3), || {
        common::info_field(&mut conn, "dlock", "dlock_blocked_clients") == "0"
    })
    .await;
    eprintln!("cancel races: the grant won {grants_won} of 150");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_acquire_does_not_delay_renewals() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;

    let guard = dlock
        .lock("renewed")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    common::acquire(&mut conn, "taken", "someone", 60_000).unwrap();
    let waiter = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .lock("taken")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    eventually("the 10 s wait is queued", Duration::from_secs(5), || {
        common::waiting(&mut conn, "taken") == 1
    })
    .await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        assert_eq!(
            owner_of(&mut conn, "renewed").as_deref(),
            Some(guard.owner())
        );
        assert!(guard.is_held());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "the wait is still on");
    waiter.abort();
    let _ = waiter.await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_tasks_see_increasing_tokens_and_one_holder() {
    const TASKS: usize = 32;
    const ROUNDS: usize = 8;
    let server = Server::start();
    let dlock = client_of(&server).await;
    let inside = Arc::new(AtomicBool::new(false));
    let last_token = Arc::new(Mutex::new(0u64));
    let grants = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (dlock, inside, last_token, grants) = (
            dlock.clone(),
            inside.clone(),
            last_token.clone(),
            grants.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = dlock
                    .lock("contended")
                    .lease(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("granted within the wait");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                {
                    // The fencing check a resource makes: strictly increasing.
                    let mut last = last_token.lock().unwrap();
                    assert!(
                        guard.token() > *last,
                        "token {} after {}",
                        guard.token(),
                        *last
                    );
                    *last = guard.token();
                }
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(grants.load(Ordering::SeqCst), TASKS * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_confirm_the_grant_or_the_lock_is_released() {
    let master = Server::start();
    let mut conn = master.connect();
    let dlock = client_of(&master).await;

    // Without a replica: NotReplicated, and the lock is released again.
    let started = Instant::now();
    match dlock
        .lock("replicated")
        .replicas(1, Duration::from_millis(200))
        .acquire()
        .await
    {
        Err(Error::NotReplicated {
            wanted: 1,
            acked: 0,
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(common::info(&mut conn, "replicated").is_none(), "released");

    // With one: granted, and the replica has the hold.
    let replica = common::replica_of(&master, &[]);
    let mut replica_conn = replica.connect();
    let guard = dlock
        .lock("replicated")
        .replicas(1, Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        owner_of(&mut replica_conn, "replicated").as_deref(),
        Some(guard.owner())
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_the_server_drops_is_released() {
    // redis-server 7.0 drops the reply of a waiter that is granted the lock
    // and unblocked by CLIENT UNBLOCK in the same event-loop turn (here: one
    // MULTI), leaving the lock held in the waiter's name. The client's read
    // timeout ends the wait, its PING finds the reply missing, and the
    // generated owner's hold is released.
    let server = Server::start();
    let mut conn = server.connect();
    let config = dlock_client::Config::default().wait_margin(Duration::from_millis(300));
    let dlock =
        dlock_client::Client::open_with(format!("redis://127.0.0.1:{}/", server.port), config)
            .await
            .unwrap();
    common::acquire(&mut conn, "dropped", "holder", 30_000).unwrap();
    let attempt = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .lock("dropped")
                .wait(Duration::from_secs(1))
                .acquire()
                .await
        }
    });
    eventually("the acquire waits", Duration::from_secs(5), || {
        common::waiting(&mut conn, "dropped") == 1
    })
    .await;
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
    let waiter = clients
        .lines()
        .find(|line| line.contains("cmd=dlock.acquire"))
        .and_then(|line| line.strip_prefix("id="))
        .and_then(|rest| rest.split(' ').next())
        .expect("the waiting connection")
        .to_string();
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("DLOCK.RELEASE")
        .arg("dropped")
        .arg("holder")
        .cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(&waiter)
        .query(&mut conn)
        .unwrap();
    match attempt.await.unwrap() {
        Ok(guard) => guard.release().await.unwrap(), // a server that delivers it
        Err(Error::Timeout) => {}
        Err(other) => panic!("unexpected {other:?}"),
    }
    eventually("no hold left behind", Duration::from_secs(2), || {
        common::info(&mut conn, "dropped").is_none()
    })
    .await;
}

/// R5 on one server: an acquire whose connection breaks after the server
/// granted it is not sent again; the caller gets the connection error and
/// the generated owner's hold is released (R5.3), in the background so
/// that a stalled server never delays the caller (R4.7). A blocking
/// acquire cut while it waits is not sent again either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_not_sent_again_and_its_grant_is_released() {
    let server = Server::start();
    let mut direct = server.connect();
    let proxy = CuttingProxy::start(server.port).await;
    let dlock = dlock_client::Client::open(format!("redis://127.0.0.1:{}/", proxy.port))
        .await
        .unwrap();

    proxy.arm("DLOCK.ACQUIRE");
    let attempt = dlock.lock("cut").acquire().await;
    assert!(
        matches!(&attempt, Err(error) if error.is_connection_error()),
        "a connection error, not a second grant: {attempt:?}"
    );
    assert_eq!(proxy.seen(), 1, "DLOCK.ACQUIRE sent once");
    eventually("released", Duration::from_secs(5), || {
        common::info(&mut direct, "cut").is_none()
    })
    .await;

    common::acquire(&mut direct, "cut", "holder", 30_000).unwrap();
    cut_a_blocked_acquire(&dlock, &proxy, &mut direct, "cut").await;
    assert_eq!(
        owner_of(&mut direct, "cut").as_deref(),
        Some(&b"holder"[..])
    );
}
