//! Helpers shared by the client's suites (on top of the root harness).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use crate::common::{self, Server};

/// A client of `server` with the default configuration.
pub async fn client_of(server: &Server) -> dlock_client::Client {
    dlock_client::Client::open(format!("redis://127.0.0.1:{}/", server.port))
        .await
        .expect("connect the dlock client")
}

/// Polls `condition` every 2 ms until it holds; panics after `within`.
pub async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Whether the server knows `command` (COMMAND INFO replies null for an
/// unknown one). A suite skips, with a printed reason, the tests of a
/// primitive whose command has not landed yet.
pub fn has_command(conn: &mut common::Connection, command: &str) -> bool {
    match redis::cmd("COMMAND")
        .arg("INFO")
        .arg(command)
        .query::<redis::Value>(conn)
    {
        Ok(redis::Value::Array(items)) => {
            items.first().is_some_and(|item| *item != redis::Value::Nil)
        }
        _ => false,
    }
}

/// Whether `DLOCK.ACQUIRE` takes `SHARED` (shared holds have landed).
pub fn has_shared_holds(conn: &mut common::Connection) -> bool {
    let reply = common::cmd(
        conn,
        &[
            "DLOCK.ACQUIRE",
            "dlock-client:probe",
            "probe",
            "1",
            "SHARED",
        ],
    );
    let supported = reply.is_ok();
    let _ = common::cmd(conn, &["DEL", "dlock-client:probe"]);
    supported
}

/// Prints why a test is skipped.
pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIPPED {test}: {reason}");
}
