//! Helpers shared by the client's suites (on top of the root harness).

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

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

/// A TCP proxy on loopback in front of one node. Armed with a marker, it
/// forwards the next command that contains it, then waits for its reply
/// (or for `cut`) and closes both sides without relaying that reply: the
/// server ran the command, the client cannot know. It counts the commands
/// with the marker it forwarded.
pub struct CuttingProxy {
    pub port: u16,
    state: Arc<ProxyState>,
    accept: tokio::task::JoinHandle<()>,
}

struct ProxyState {
    marker: Mutex<Vec<u8>>,
    armed: AtomicBool,
    seen: AtomicUsize,
    cut: Notify,
}

/// Connections the proxy serves at once, at most.
const PROXY_CONNECTIONS: usize = 64;

impl CuttingProxy {
    pub async fn start(target: u16) -> CuttingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(ProxyState {
            marker: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            seen: AtomicUsize::new(0),
            cut: Notify::new(),
        });
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                // Dropped with the accept task: every connection ends too.
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((client, _)) = listener.accept().await {
                    while connections.try_join_next().is_some() {}
                    if connections.len() < PROXY_CONNECTIONS {
                        connections.spawn(relay(client, target, state.clone()));
                    }
                }
            }
        });
        CuttingProxy {
            port,
            state,
            accept,
        }
    }

    /// Cuts the connection of the next command containing `marker`; counts
    /// those commands from zero.
    pub fn arm(&self, marker: &str) {
        *self.state.marker.lock().unwrap() = marker.as_bytes().to_vec();
        self.state.seen.store(0, Ordering::SeqCst);
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Ends the connection of an armed command that blocks (its reply
    /// does not come).
    pub fn cut(&self) {
        self.state.cut.notify_one();
    }

    /// Commands containing the marker forwarded since `arm`.
    pub fn seen(&self) -> usize {
        self.state.seen.load(Ordering::SeqCst)
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: tokio::net::TcpStream, target: u16, state: Arc<ProxyState>) {
    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let mut request = vec![0u8; 16 * 1024];
    let mut reply = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = from_client.read(&mut request) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &request[..n];
                let marked = {
                    let marker = state.marker.lock().unwrap();
                    !marker.is_empty() && chunk.windows(marker.len()).any(|w| w == marker.as_slice())
                };
                if marked {
                    state.seen.fetch_add(1, Ordering::SeqCst);
                }
                if to_server.write_all(chunk).await.is_err() {
                    return;
                }
                if marked && state.armed.swap(false, Ordering::SeqCst) {
                    // The server runs it; its reply (or the test's signal,
                    // for a command that blocks) ends the connection.
                    tokio::select! {
                        _ = from_server.read(&mut reply) => {}
                        _ = state.cut.notified() => {}
                    }
                    return;
                }
            }
            read = from_server.read(&mut reply) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if to_client.write_all(&reply[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Cuts, through `proxy`, the connection of an acquire of `key` that waits
/// behind another holder: the wait ends with a connection error, its
/// blocking `DLOCK.ACQUIRE` went out once (never re-sent, R5.1), and the
/// closed connection's wait leaves the queue (read on `direct`, a
/// connection to the server that holds `key`).
pub async fn cut_a_blocked_acquire(
    dlock: &dlock_client::Client,
    proxy: &CuttingProxy,
    direct: &mut common::Connection,
    key: &str,
) {
    proxy.arm("DLOCK.ACQUIRE");
    let waiter = tokio::spawn({
        let (dlock, key) = (dlock.clone(), key.to_string());
        async move {
            dlock
                .lock(key)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    eventually("the acquire waits", Duration::from_secs(5), || {
        common::waiting(direct, key) == 1
    })
    .await;
    proxy.cut();
    let waited = waiter.await.unwrap();
    assert!(
        matches!(&waited, Err(error) if error.is_connection_error()),
        "a connection error: {waited:?}"
    );
    assert_eq!(proxy.seen(), 1, "the blocking DLOCK.ACQUIRE sent once");
    eventually(
        "the closed connection's wait leaves the queue",
        Duration::from_secs(5),
        || common::waiting(direct, key) == 0,
    )
    .await;
}
