//! A stalled server (`CLIENT PAUSE ... ALL`, as a long fork or a frozen VM)
//! never holds a caller past its bound (docs/clients.md R4.6, R4.7): a wait
//! ends by its wait plus the margin, whether the stall hits the opening of
//! its connection or the wait itself; the clean-up after a timeout runs in
//! the background; a renewal by hand ends by the guard's local deadline.
//! Each test then checks what is left on the server once the pause is
//! over (`CLIENT UNPAUSE` cannot end a pause of `ALL`: it is postponed too).

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::Server;
use dlock_client::{Client, Config, Error, LatchWait};
use support::{client_of, eventually};

/// Longer than every bound a test checks: without the fixes each call
/// below would return only when it ends.
const PAUSE_MS: u64 = 3_000;
const WAIT: Duration = Duration::from_millis(300);
/// A wait margin shorter than the default 2 s, so that a wait's bound
/// stays well inside the pause.
const MARGIN: Duration = Duration::from_millis(500);
/// R4.2: the wait plus the margin, plus slack for a loaded machine.
const WAIT_BOUND: Duration = Duration::from_millis(300 + 500 + 1_500);

fn pause(conn: &mut common::Connection) {
    common::cmd(conn, &["CLIENT", "PAUSE", &PAUSE_MS.to_string(), "ALL"]).expect("CLIENT PAUSE");
}

/// A client with the wait margin [`MARGIN`].
async fn client(server: &Server) -> Client {
    let config = Config::default().wait_margin(MARGIN);
    Client::open_with(format!("redis://127.0.0.1:{}/", server.port), config)
        .await
        .expect("connect the dlock client")
}

/// A connection whose reads outlast the pause (the harness's default read
/// timeout is shorter than the pause).
fn admin(server: &Server) -> common::Connection {
    common::connect_port(server.port, Duration::from_secs(60))
}

/// Nothing left on `key` once the server runs again: no hold, no waiter.
async fn nothing_left(conn: &mut common::Connection, key: &str) {
    eventually(
        &format!("{key} neither held nor waited for"),
        Duration::from_secs(5),
        || common::info(conn, key).is_none(),
    )
    .await;
}

/// A wait whose connection is not opened yet when the server stalls: the
/// opening (handshake, `CLIENT ID`) counts against the wait's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_connection_opens_during_a_pause_ends_by_wait_plus_margin() {
    let server = Server::start();
    let mut conn = admin(&server);
    let dlock = client(&server).await;
    pause(&mut conn);
    let started = Instant::now();
    let outcome = dlock.lock("k").wait(WAIT).acquire().await;
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout)),
        "a timeout: {outcome:?}"
    );
    assert!(took < WAIT_BOUND, "returned after {took:?}");
    nothing_left(&mut conn, "k").await;
}

/// A wait on a pooled connection that times out on a stalled server: the
/// caller has its timeout at the read timeout, not once the clean-up
/// (`CLIENT UNBLOCK`, the release of R4.4) could run; after the resume the
/// postponed request leaves no hold (R5.3 for a read timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_wait_leaves_its_clean_up_to_the_background() {
    let server = Server::start();
    let mut conn = admin(&server);
    let dlock = client(&server).await;
    // A first wait fills the pool, so that the stall hits the wait itself.
    let warm = dlock.lock("warm").wait(WAIT).acquire().await.unwrap();
    warm.release().await.unwrap();
    pause(&mut conn);
    let started = Instant::now();
    let outcome = dlock.lock("k").wait(WAIT).acquire().await;
    let took = started.elapsed();
    // The next wait is not held up by that clean-up either.
    let started = Instant::now();
    let next = dlock.lock("k2").wait(WAIT).acquire().await;
    let next_took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout)),
        "a timeout: {outcome:?}"
    );
    assert!(took < WAIT_BOUND, "returned after {took:?}");
    assert!(matches!(next, Err(Error::Timeout)), "a timeout: {next:?}");
    assert!(
        next_took < WAIT_BOUND,
        "the next returned after {next_took:?}"
    );
    nothing_left(&mut conn, "k").await;
    nothing_left(&mut conn, "k2").await;
    let guard = dlock.lock("k").wait(WAIT).acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// A latch wait on a stalled server ends by its timeout plus the margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_during_a_pause_ends_by_wait_plus_margin() {
    let server = Server::start();
    let mut conn = admin(&server);
    let dlock = client(&server).await;
    let latch = dlock.latch("l");
    latch.create(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(latch.wait(WAIT).await.unwrap(), LatchWait::TimedOut);
    pause(&mut conn);
    let started = Instant::now();
    let outcome = latch.wait(WAIT).await;
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout)),
        "a timeout: {outcome:?}"
    );
    assert!(took < WAIT_BOUND, "returned after {took:?}");
    eventually("no latch waiter left", Duration::from_secs(5), || {
        common::info_field(&mut conn, "dlock", "dlock_blocked_clients") == "0"
    })
    .await;
}

/// R4.6: a renewal by hand on a stalled server ends by the guard's local
/// deadline, with `Lost`, and the guard is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_by_hand_during_a_pause_ends_by_the_local_deadline() {
    let server = Server::start();
    let mut conn = admin(&server);
    let dlock = client_of(&server).await;
    let guard = dlock
        .lock("k")
        .lease(Duration::from_millis(1_000))
        .acquire()
        .await
        .unwrap();
    pause(&mut conn);
    let started = Instant::now();
    let outcome = guard.renew().await;
    let took = started.elapsed();
    assert!(matches!(outcome, Err(Error::Lost)), "lost: {outcome:?}");
    assert!(
        took < Duration::from_millis(1_000 + 1_000),
        "returned after {took:?}"
    );
    assert!(!guard.is_held());
}

/// R4.7: a no-wait acquire whose reply does not come within the shared
/// connection's response timeout fails then; its release (R5.3) follows
/// in the background and leaves nothing once the server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_immediate_acquire_releases_in_the_background() {
    let server = Server::start();
    let mut conn = admin(&server);
    let timeout = Duration::from_millis(1_000);
    let config = Config::default().response_timeout(timeout);
    let dlock = Client::open_with(format!("redis://127.0.0.1:{}/", server.port), config)
        .await
        .unwrap();
    pause(&mut conn);
    let started = Instant::now();
    let outcome = dlock.lock("k").acquire().await;
    let took = started.elapsed();
    match &outcome {
        Err(error) => assert!(error.is_connection_error(), "a timeout: {error:?}"),
        Ok(_) => panic!("granted on a paused server"),
    }
    // Before: the caller also waited for the release's own response timeout.
    assert!(
        took < timeout + Duration::from_millis(900),
        "returned after {took:?}"
    );
    nothing_left(&mut conn, "k").await;
}

/// R4.6: with the server down, a renewal by hand rejects, and the guard is
/// lost by its local deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_by_hand_with_the_server_down_rejects() {
    let mut server = Server::start();
    let dlock = client_of(&server).await;
    let guard = dlock
        .lock("k")
        .lease(Duration::from_millis(1_000))
        .acquire()
        .await
        .unwrap();
    server.kill();
    let started = Instant::now();
    let outcome = guard.renew().await;
    assert!(
        outcome.is_err(),
        "a renewal with the server down: {outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let lost = guard.lost();
    tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("lost by the local deadline");
    assert!(matches!(guard.renew().await, Err(Error::Lost)));
}
