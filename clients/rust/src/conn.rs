//! Connections: the shared multiplexed one (renewals, releases, immediate
//! acquires) and the dedicated ones that blocking waits borrow from a pool.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisResult, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::client::Inner;
use crate::cluster::{self, Resend};
use crate::Config;

/// Where the client connects: one server (or a master behind a proxy), or a
/// Redis Cluster.
#[derive(Clone)]
pub(crate) enum Opener {
    // Boxed: with TLS built in, a redis::Client is some 240 bytes.
    Standalone(Box<redis::Client>),
    Cluster(Box<redis::cluster::ClusterClient>),
}

/// The connection every guard shares: commands are multiplexed on it and
/// never block on the server.
#[derive(Clone)]
pub(crate) enum Shared {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Opener {
    /// The shared connection: reconnects by itself (ConnectionManager, or
    /// the cluster connection's own reconnects).
    pub(crate) async fn shared(&self, config: &Config) -> RedisResult<Shared> {
        match self {
            Opener::Standalone(client) => {
                // Few reconnect attempts per failing command: a lock client
                // should fail fast (the watchdog tries again on its own,
                // and every later command starts a new reconnect).
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_response_timeout(Some(config.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let manager = client
                    .get_connection_manager_with_config(manager_config)
                    .await?;
                Ok(Shared::Standalone(manager))
            }
            Opener::Cluster(client) => {
                let cluster_config = ClusterConfig::new()
                    .set_connection_timeout(config.connect_timeout)
                    .set_response_timeout(config.response_timeout);
                let conn = client
                    .get_async_connection_with_config(cluster_config)
                    .await?;
                Ok(Shared::Cluster(conn))
            }
        }
    }

    /// A new connection of its own for blocking commands: no response
    /// timeout of its own (the caller bounds each wait).
    async fn dedicated(&self, config: &Config) -> RedisResult<Dedicated> {
        match self {
            Opener::Standalone(client) => {
                let async_config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_response_timeout(None);
                let conn = client
                    .get_multiplexed_async_connection_with_config(&async_config)
                    .await?;
                Ok(Dedicated {
                    conn: DedicatedConn::Standalone(conn),
                    id: None,
                    broken: false,
                })
            }
            Opener::Cluster(client) => {
                // Long enough never to fire before the caller's own bound.
                let cluster_config = ClusterConfig::new()
                    .set_connection_timeout(config.connect_timeout)
                    .set_response_timeout(Duration::from_secs(30 * 24 * 3600));
                let conn = client
                    .get_async_connection_with_config(cluster_config)
                    .await?;
                Ok(Dedicated {
                    conn: DedicatedConn::Cluster(conn),
                    id: None,
                    broken: false,
                })
            }
        }
    }
}

impl Shared {
    /// Runs `cmd`, which acts on `key`, on the master of `key`. Never sent
    /// twice after it may have reached the server (R5.1): on one server the
    /// connection manager reconnects but does not re-send; in a Cluster it
    /// is sent again only after a redirection or a refusal (`TRYAGAIN`).
    pub(crate) async fn run(&self, key: &[u8], cmd: &Cmd) -> RedisResult<Value> {
        self.run_with(key, cmd, Resend::IfNotRun).await
    }

    /// Runs an idempotent command (`DLOCK.INFO`, `CLIENT UNBLOCK`): in a
    /// Cluster it is also sent again after a connection error (R5.2).
    pub(crate) async fn run_idempotent(&self, key: &[u8], cmd: &Cmd) -> RedisResult<Value> {
        self.run_with(key, cmd, Resend::Idempotent).await
    }

    async fn run_with(&self, key: &[u8], cmd: &Cmd, resend: Resend) -> RedisResult<Value> {
        match self {
            Shared::Standalone(manager) => cmd.query_async(&mut manager.clone()).await,
            Shared::Cluster(conn) => cluster::run(&mut conn.clone(), key, cmd, resend).await,
        }
    }

    /// Sends `pipe`, idempotent commands (renewals) all on keys of `key`'s
    /// slot, and returns one reply per command, errors included as
    /// `Value::ServerError`.
    pub(crate) async fn pipeline(&self, key: &[u8], pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        let reply: Value = match self {
            Shared::Standalone(manager) => pipe.query_async(&mut manager.clone()).await?,
            Shared::Cluster(conn) => return cluster::pipeline(&mut conn.clone(), key, pipe).await,
        };
        match reply {
            Value::Array(items) => Ok(items),
            other => Ok(vec![other]),
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Shared::Cluster(_))
    }
}

enum DedicatedConn {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// A connection used by one blocking command at a time.
pub(crate) struct Dedicated {
    conn: DedicatedConn,
    /// `CLIENT ID` on the node of the key it is about to wait on, asked
    /// for when it is taken from the pool (which also proves it alive).
    id: Option<i64>,
    /// Set when a reply may still be in flight: never reused.
    broken: bool,
}

/// How a blocking command ended.
pub(crate) enum Blocking {
    /// The server replied (or the connection failed) before any deadline.
    Replied(RedisResult<Value>),
    /// The caller gave up (cancelled) or the deadline passed (the caller
    /// was told by `gave_up`): the wait was ended with CLIENT UNBLOCK and
    /// `late` is what came after it.
    Abandoned { late: Late },
}

/// The reply of a blocked command read after `CLIENT UNBLOCK`.
pub(crate) enum Late {
    /// Its reply: a grant that raced the unblock, or null.
    Reply(Value),
    /// No reply came, or the server dropped it: the command may have been
    /// granted without the client learning it.
    Lost,
}

/// The reply of the PING sent behind a blocked command.
fn is_ping_echo(value: &Value) -> bool {
    match value {
        Value::BulkString(bytes) => bytes.as_slice() == b"dlock-client",
        Value::SimpleString(text) => text == "dlock-client",
        _ => false,
    }
}

impl Dedicated {
    async fn query(&mut self, key: &[u8], cmd: &Cmd, resend: Resend) -> RedisResult<Value> {
        match &mut self.conn {
            DedicatedConn::Standalone(conn) => cmd.query_async(conn).await,
            DedicatedConn::Cluster(conn) => cluster::run(conn, key, cmd, resend).await,
        }
    }

    /// The server-side id of this connection on the master of `key`.
    async fn client_id(&mut self, key: &[u8]) -> RedisResult<i64> {
        if let Some(id) = self.id {
            return Ok(id);
        }
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("ID");
        match self.query(key, &cmd, Resend::Idempotent).await? {
            Value::Int(id) => {
                self.id = Some(id);
                Ok(id)
            }
            other => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "CLIENT ID did not reply an integer",
                format!("{other:?}"),
            ))),
        }
    }

    /// Sends a command that may block on the server; gives up when
    /// `cancelled` resolves or at `deadline` (the wait plus the margin,
    /// counted from the start of the caller's request), ending the
    /// server-side wait with `CLIENT UNBLOCK` (sent on the shared
    /// connection), running `after_unblock` and reading the reply that the
    /// unblock provokes, within the wait margin.
    ///
    /// `gave_up(timed_out)` runs as soon as the caller is given up on,
    /// before any of that clean-up: the callers run this in a task of their
    /// own and answer their caller from it, so that a stalled server delays
    /// the clean-up, never the caller (R4.7).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn call_blocking(
        &mut self,
        inner: &Inner,
        key: &[u8],
        cmd: &Cmd,
        deadline: Option<Instant>,
        cancelled: impl Future<Output = ()>,
        gave_up: impl FnOnce(bool),
        after_unblock: impl Future<Output = ()>,
    ) -> Blocking {
        let (shared, margin) = (&inner.shared, inner.config.wait_margin);
        let id = match self.client_id(key).await {
            Ok(id) => AtomicI64::new(id),
            Err(error) => {
                self.broken = true;
                return Blocking::Replied(Err(error));
            }
        };
        let mut ping_conn = match &self.conn {
            DedicatedConn::Standalone(conn) => DedicatedConn::Standalone(conn.clone()),
            DedicatedConn::Cluster(conn) => DedicatedConn::Cluster(conn.clone()),
        };
        let broken = &mut self.broken;
        let known_id = &mut self.id;
        // Set once the caller is given up on: a wait ended by this side
        // (CLIENT UNBLOCK) is never sent again.
        let abandoned = AtomicBool::new(false);
        let call = {
            let (conn, id, abandoned) = (&mut self.conn, &id, &abandoned);
            async move {
                match conn {
                    DedicatedConn::Standalone(conn) => cmd.query_async(conn).await,
                    // After a redirection, or a wait sent again after its
                    // slot moved, the wait runs on another node, under
                    // another id there.
                    DedicatedConn::Cluster(conn) => {
                        cluster::run_blocking(conn, key, cmd, id, abandoned).await
                    }
                }
            }
        };
        tokio::pin!(call);
        tokio::pin!(cancelled);
        let read_deadline = until(deadline);
        tokio::pin!(read_deadline);
        let timed_out = tokio::select! {
            reply = &mut call => {
                if reply.is_err() {
                    *broken = true;
                }
                *known_id = Some(id.load(Ordering::Relaxed));
                return Blocking::Replied(reply);
            }
            _ = &mut cancelled => false,
            _ = &mut read_deadline => true,
        };
        abandoned.store(true, Ordering::Relaxed);
        gave_up(timed_out);
        let mut unblock = redis::cmd("CLIENT");
        unblock.arg("UNBLOCK").arg(id.load(Ordering::Relaxed));
        let _ = shared.run_idempotent(key, &unblock).await;
        // From here on the server can no longer grant this wait.
        after_unblock.await;
        // Redis can drop the reply of a waiter granted in the same event-loop
        // turn as the unblock. A PING behind the blocked command tells: its
        // PONG then arrives where the blocked command's reply should have.
        let ping = async {
            let mut cmd = redis::cmd("PING");
            cmd.arg("dlock-client");
            match &mut ping_conn {
                DedicatedConn::Standalone(conn) => cmd.query_async::<Value>(conn).await,
                DedicatedConn::Cluster(conn) => {
                    cluster::run(conn, key, &cmd, Resend::IfNotRun).await
                }
            }
        };
        tokio::pin!(ping);
        let late = match tokio::time::timeout(margin, &mut call).await {
            Ok(Ok(value)) if is_ping_echo(&value) => Late::Lost,
            Ok(Ok(value)) => {
                // The PING's own reply follows; then the connection is clean.
                if !matches!(tokio::time::timeout(margin, &mut ping).await, Ok(Ok(_))) {
                    *broken = true;
                }
                Late::Reply(value)
            }
            _ => Late::Lost,
        };
        if matches!(late, Late::Lost) {
            *broken = true;
        }
        *known_id = Some(id.load(Ordering::Relaxed));
        Blocking::Abandoned { late }
    }
}

/// Resolves at `deadline`, never without one.
pub(crate) async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending::<()>().await,
    }
}

/// The caller of a request that runs in a task of its own: answered once,
/// as soon as the answer is known (the task may go on cleaning up), and
/// watched for going away (a dropped future) without being borrowed, so
/// that both can be handed to [`Dedicated::call_blocking`].
pub(crate) struct Caller<T> {
    sender: Mutex<Option<oneshot::Sender<T>>>,
}

impl<T> Caller<T> {
    pub(crate) fn new(sender: oneshot::Sender<T>) -> Caller<T> {
        Caller {
            sender: Mutex::new(Some(sender)),
        }
    }

    /// Answers the caller (the first time only). An answer the caller can
    /// no longer take is dropped here: a guard then releases itself.
    pub(crate) fn answer(&self, answer: T) {
        let sender = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(sender) = sender {
            let _ = sender.send(answer);
        }
    }

    /// Resolves when the caller has gone away before its answer.
    pub(crate) fn gone(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            match self
                .sender
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            {
                Some(sender) => sender.poll_closed(cx),
                None => Poll::Pending,
            }
        })
    }
}

/// A blocking read (`DLOCK.AWAIT`, `DLOCK.WATCH`: nothing to give back
/// when it races a cancel) for a request running in a task of its own: a
/// connection of the pool taken by `deadline`, the command sent on it, the
/// caller answered with a timeout as soon as the deadline passes (R4.6),
/// the clean-up after that answer (R4.7), the connection given back.
/// `Some`: the reply, for the caller to parse; `None`: the caller has its
/// answer already (a timeout, an error) or went away.
pub(crate) async fn blocking_read(
    inner: &Inner,
    caller: &Caller<crate::Result<impl Sized>>,
    key: &[u8],
    cmd: &Cmd,
    deadline: Option<Instant>,
) -> Option<Value> {
    let taken = inner
        .pool
        .take_by(&inner.opener, &inner.config, key, deadline, caller.gone())
        .await;
    let mut conn = match taken {
        Ok(Some(conn)) => conn,
        Ok(None) => return None,
        Err(None) => {
            caller.answer(Err(crate::Error::Timeout));
            return None;
        }
        Err(Some(error)) => {
            caller.answer(Err(error.into()));
            return None;
        }
    };
    let outcome = conn
        .call_blocking(
            inner,
            key,
            cmd,
            deadline,
            caller.gone(),
            |timed_out| {
                if timed_out {
                    caller.answer(Err(crate::Error::Timeout));
                }
            },
            async {},
        )
        .await;
    inner.pool.give_back(conn);
    match outcome {
        Blocking::Replied(Ok(reply)) => Some(reply),
        Blocking::Replied(Err(error)) => {
            caller.answer(Err(error.into()));
            None
        }
        // The caller has its timeout, or went away.
        Blocking::Abandoned { .. } => None,
    }
}

/// Idle dedicated connections, reused by later blocking waits.
pub(crate) struct Pool {
    idle: Mutex<Vec<Dedicated>>,
}

/// Idle connections kept at most; more are closed when returned.
const POOL_IDLE_MAX: usize = 16;

impl Pool {
    pub(crate) fn new() -> Pool {
        Pool {
            idle: Mutex::new(Vec::new()),
        }
    }

    /// [`Pool::take`] bounded by a request's `deadline` (`Err(None)` then:
    /// a stalled server may hold up the opening of a connection, its
    /// handshake or its `CLIENT ID`) and by its caller going away (`Ok(None)`).
    /// The opening also ends by the connect timeout, when that comes first
    /// (a wait without end, or a long one): a connection error then, whose
    /// `is_timeout()` is true (R4.6, R4.7: a connection the client opens has
    /// a connect and handshake timeout, `CLIENT ID` included).
    pub(crate) async fn take_by(
        &self,
        opener: &Opener,
        config: &Config,
        key: &[u8],
        deadline: Option<Instant>,
        gone: impl Future<Output = ()>,
    ) -> Result<Option<Dedicated>, Option<redis::RedisError>> {
        let opened_by = Instant::now().checked_add(config.connect_timeout);
        let deadline_first = match (deadline, opened_by) {
            (Some(deadline), Some(opened_by)) => deadline <= opened_by,
            (Some(_), None) => true,
            (None, _) => false,
        };
        tokio::select! {
            taken = self.take(opener, config, key) => taken.map(Some).map_err(Some),
            _ = until(deadline), if deadline_first => Err(None),
            _ = until(opened_by), if !deadline_first => Err(Some(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "opening a connection (handshake and CLIENT ID) timed out",
                ),
            ))),
            _ = gone => Ok(None),
        }
    }

    /// A connection to wait on `key`: an idle one that still answers, or a
    /// new one; its `CLIENT ID` on the key's node is known.
    pub(crate) async fn take(
        &self,
        opener: &Opener,
        config: &Config,
        key: &[u8],
    ) -> RedisResult<Dedicated> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(mut conn) = idle else {
                break;
            };
            // A connection closed while idle (a server restart, an idle
            // timeout) fails here, harmlessly, and is dropped.
            conn.id = None;
            if conn.client_id(key).await.is_ok() {
                return Ok(conn);
            }
        }
        let mut conn = opener.dedicated(config).await?;
        conn.client_id(key).await?;
        Ok(conn)
    }

    /// Returns a connection after use; a broken one (or one too many) is
    /// closed, which also ends any wait still on it in the server.
    pub(crate) fn give_back(&self, conn: Dedicated) {
        if conn.broken {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < POOL_IDLE_MAX {
            idle.push(conn);
        }
    }
}

impl Dedicated {
    /// Marks the connection as not reusable (a command's reply may still
    /// come on it).
    pub(crate) fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Runs a command that does not block (or whose blocking is bounded by
    /// the server, like WAIT), bounded by `limit`; never sent twice (a WAIT
    /// must run on the connection of the grant it waits for).
    pub(crate) async fn run_bounded(
        &mut self,
        key: &[u8],
        cmd: &Cmd,
        limit: Duration,
    ) -> RedisResult<Value> {
        match tokio::time::timeout(limit, self.query(key, cmd, Resend::IfNotRun)).await {
            Ok(reply) => {
                if reply.is_err() {
                    self.broken = true;
                }
                reply
            }
            Err(_) => {
                self.broken = true;
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no reply in time on the dedicated connection",
                )))
            }
        }
    }
}
