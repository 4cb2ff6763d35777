//! The client over TLS as a restricted ACL user (docs/operations.md, "TLS and
//! ACL users"): a server with only a TLS port, certificates made by openssl
//! in its folder, the ACL lines of the document as written there, and
//! through the client an acquire, a blocking hand-off, a renewal, a release
//! and an election; a key outside the user's pattern is refused with
//! `NOPERM`. A server built without TLS (Valkey from PyPI) skips, saying so.

use crate::common;

use std::error::Error as StdError;
use std::path::Path;
use std::time::Duration;

use common::{Connection, Server};
use dlock_client::Error;

const OPERATIONS_MD: &str = include_str!("../../../docs/operations.md");
const THIS_FILE: &str = include_str!("tls.rs");

/// The lines of the fenced block of docs/operations.md right after the
/// marker `<!-- tls: WHAT -->`.
fn doc_block(what: &str) -> Vec<String> {
    let marker = format!("<!-- tls: {what} -->");
    let mut lines = OPERATIONS_MD
        .lines()
        .skip_while(|line| line.trim() != marker);
    assert!(lines.next().is_some(), "docs/operations.md has no {marker}");
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "{marker} is not followed by a fence"
    );
    lines
        .take_while(|line| !line.starts_with("```"))
        .map(str::to_string)
        .collect()
}

/// A TLS-only server, or None (with the reason printed) when the server
/// binary has no TLS.
fn tls_server() -> Option<Server> {
    let server = Server::with_tls(&[]);
    if server.is_none() {
        eprintln!("skipped: {} has no TLS built in", common::server_binary());
    }
    server
}

fn ca_file(server: &Server) -> std::path::PathBuf {
    server.tls.as_ref().expect("a TLS server").join("ca.crt")
}

/// A connection over TLS as `user` (None: the default user, the harness's
/// administrator).
fn connect_as(server: &Server, user: Option<(&str, &str)>) -> Connection {
    let auth = user.map_or(String::new(), |(name, password)| {
        format!("{name}:{password}@")
    });
    let client = redis::Client::build_with_tls(
        format!("rediss://{auth}127.0.0.1:{}/", server.port),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca_file(server)).expect("read ca.crt")),
        },
    )
    .expect("a TLS client");
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect over TLS");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    conn
}

/// Runs the ACL line of docs/operations.md for `user` on `admin`: the
/// `+@dlock` line where the server has the category, else the Redis 7.0 one.
fn create_documented_user(admin: &mut Connection, user: &str) {
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(admin).expect("ACL CAT");
    let block = if user == "app" && !categories.iter().any(|c| c == "dlock") {
        "acl app redis-7.0".to_string()
    } else {
        format!("acl {user}")
    };
    let lines = doc_block(&block);
    assert_eq!(lines.len(), 1, "one ACL line under <!-- tls: {block} -->");
    let args: Vec<&str> = lines[0].split_whitespace().collect();
    let reply = common::cmd(admin, &args);
    assert!(reply.is_ok(), "{}: {reply:?}", lines[0]);
}

/// The connection line of docs/operations.md for Rust, as the document
/// shows it (`the_documented_rust_connection_is_this_one` checks).
async fn connect_app(
    host: &str,
    port: u16,
    ca_file: &Path,
) -> Result<dlock_client::Client, Box<dyn StdError>> {
    let redis = dlock_client::redis::Client::build_with_tls(
        format!("rediss://app1:app1-secret@{host}:{port}/"),
        dlock_client::redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca_file)?),
        },
    )?;
    let dlock = dlock_client::Client::from_redis(redis, dlock_client::Config::default()).await?;
    Ok(dlock)
}

#[test]
fn the_documented_server_settings_are_the_harness_ones() {
    let certs = Path::new("/etc/redis/tls");
    let harness: Vec<String> = common::tls_settings(certs, 6380)
        .into_iter()
        .map(|(name, value)| format!("{name} {value}"))
        .collect();
    assert_eq!(doc_block("server"), harness);
}

#[test]
fn the_documented_rust_connection_is_this_one() {
    let normalise = |text: &str| -> Vec<String> {
        text.lines()
            .map(|line| line.trim().to_string())
            .filter(|line| !line.is_empty())
            .collect()
    };
    let doc = normalise(&doc_block("client rust").join("\n"));
    let here = normalise(THIS_FILE);
    assert!(
        !doc.is_empty()
            && here
                .windows(doc.len())
                .any(|window| window == doc.as_slice()),
        "the Rust block of docs/operations.md is not in clients/rust/tests/tls.rs:\n{}",
        doc.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_over_tls_locks_hands_off_renews_releases_and_elects() {
    let Some(server) = tls_server() else { return };
    let mut admin = connect_as(&server, None);
    create_documented_user(&mut admin, "app");
    let ca = ca_file(&server);
    let first = connect_app("127.0.0.1", server.port, &ca)
        .await
        .expect("connect app1");
    let second = connect_app("127.0.0.1", server.port, &ca)
        .await
        .expect("connect app1");

    // Acquire, then a blocking hand-off to a waiter.
    let held = first
        .lock("app1:job")
        .lease(Duration::from_secs(10))
        .renew_every(Duration::from_secs(3600)) // renewed below by hand only
        .acquire()
        .await
        .expect("app1 acquires app1:job");
    let waiter = tokio::spawn(async move {
        second
            .lock("app1:job")
            .lease(Duration::from_secs(10))
            .wait(Duration::from_secs(15))
            .acquire()
            .await
            .map(|guard| (guard, second))
    });
    common::wait_for_waiting(&mut admin, "app1:job", 1);

    // The lease's deadline is the key's PEXPIRETIME: a renewal 50 ms or more
    // later moves it on, however slowly the replies come.
    let deadline = common::pexpiretime(&mut admin, "app1:job");
    common::wait_until("50 ms of the lease pass", || {
        common::info_int(&mut admin, "app1:job", "pttl") < 9_950
    });
    held.renew().await.expect("renew");
    assert!(common::pexpiretime(&mut admin, "app1:job") > deadline);
    let first_token = held.token();
    held.release().await.expect("release");
    let (granted, second) = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter is answered")
        .expect("the waiter task")
        .expect("the waiter is granted the lock on release");
    assert!(
        granted.token() > first_token,
        "hand-off with a larger token"
    );
    assert_eq!(
        common::info_owner(&mut admin, "app1:job").as_deref(),
        Some(granted.owner())
    );
    granted
        .release()
        .await
        .expect("release the handed-off lock");
    assert!(common::info(&mut admin, "app1:job").is_none());

    // An election: one leads, the other sees it.
    let leadership = first
        .election("app1:leader")
        .campaign("node-a")
        .await
        .expect("campaign");
    let leader = second
        .election("app1:leader")
        .leader()
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!(leader.value_str(), "node-a");
    assert_eq!(leader.term, leadership.term());
    leadership.resign().await.expect("resign");
    assert_eq!(
        second
            .election("app1:leader")
            .leader()
            .await
            .expect("leader"),
        None
    );

    // Outside the user's key pattern: NOPERM, as the client's server error.
    match first.lock("app2:job").acquire().await {
        Err(Error::Server { code, message }) => {
            assert_eq!(code, "NOPERM", "{message}");
        }
        other => panic!("app2:job is outside ~app1:*, got {other:?}"),
    }
    assert!(common::info(&mut admin, "app2:job").is_none());
}

#[test]
fn the_documented_observer_reads_and_watches_but_takes_nothing() {
    let Some(server) = tls_server() else { return };
    let mut admin = connect_as(&server, None);
    create_documented_user(&mut admin, "observer");
    let grant = common::acquire(&mut admin, "app1:job", "worker-1", 30_000).expect("a grant");
    let mut observer = connect_as(&server, Some(("observer", "observer-secret")));

    assert_eq!(
        common::info_owner(&mut observer, "app1:job").as_deref(),
        Some(&b"worker-1"[..])
    );
    // DLOCK.WATCH with an old token answers the current holder at once.
    let watched = common::cmd(&mut observer, &["DLOCK.WATCH", "app1:job", "0", "1000"]).unwrap();
    let common::Value::Array(items) = watched else {
        panic!("DLOCK.WATCH replied {watched:?}")
    };
    assert_eq!(items[0], common::Value::Int(grant.0));

    // It can take, release or renew nothing, on any key.
    for args in [
        &["DLOCK.ACQUIRE", "app1:job", "observer", "1000"][..],
        &["DLOCK.ACQUIRE", "other", "observer", "1000"],
        &["DLOCK.RELEASE", "app1:job", "worker-1"],
        &["DLOCK.RENEW", "app1:job", "worker-1", "1000"],
        &["SET", "app1:job", "x"],
    ] {
        let error = common::error_of(&mut observer, args);
        assert!(error.starts_with("NOPERM"), "{args:?}: {error}");
    }
    assert_eq!(common::info_int(&mut admin, "app1:job", "token"), grant.0);
}
