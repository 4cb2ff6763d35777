//! Commands in a Redis Cluster: each goes to the master of its key's slot,
//! and is sent again only when a reply proves that it did not run there
//! (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`), or, for an idempotent
//! command, after a connection error too.
//!
//! The redis crate's cluster connection would also re-send a request after
//! a connection error, when it may have run already (a re-entrant
//! `DLOCK.ACQUIRE` counted twice, a `DLOCK.RELEASE` giving back a hold the
//! caller still has: docs/clients.md R5.1). Its retries are turned off when
//! the client is built (`retries(0)`), so every error reaches this module,
//! which decides.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisError, RedisResult, Value};

/// Sends of one command at most, the first included.
const ATTEMPTS: u32 = 16;

/// Builds the cluster client with the crate's own retries off.
pub(crate) fn build(builder: ClusterClientBuilder) -> RedisResult<redis::cluster::ClusterClient> {
    builder.retries(0).build()
}

/// The route of a command on `key` to the master serving its slot.
pub(crate) fn route_of(key: &[u8]) -> Route {
    Route::with_key(key, SlotAddr::Master)
}

fn master_of(key: &[u8]) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::SpecificNode(route_of(key))
}

/// Where the next send of a command goes.
#[derive(Debug, PartialEq)]
enum Node {
    /// The master of the key's slot, as the slot map says.
    OfSlot,
    /// The node an `ASK` named, preceded by `ASKING` (a slot being migrated).
    Asked { host: String, port: u16 },
}

/// Whether a command may be sent again after an error that does not prove
/// it did not run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Resend {
    /// Only after a reply that proves it did not run (lock commands, R5.1).
    IfNotRun,
    /// After a connection error too (renewals, reads: R5.2).
    Idempotent,
}

/// The error replies after which the command has not run: a redirection,
/// or a refusal to run it now.
fn not_run(error: &RedisError) -> Option<Node> {
    match error.code()? {
        "ASK" => {
            let (address, _slot) = error.redirect_node()?;
            let (host, port) = address.rsplit_once(':')?;
            Some(Node::Asked {
                host: host.to_string(),
                port: port.parse().ok()?,
            })
        }
        // The crate refreshes its slot map on MOVED; the next send by slot
        // goes to the new master once it has.
        "MOVED" | "TRYAGAIN" | "CLUSTERDOWN" => Some(Node::OfSlot),
        _ => None,
    }
}

/// The node to send to after `error` on the `attempt`-th send (after a
/// pause unless `ASK`ed), or None to return the error.
async fn next_node(error: &RedisError, resend: Resend, attempt: u32) -> Option<Node> {
    if attempt >= ATTEMPTS {
        return None;
    }
    let next = match (not_run(error), resend) {
        (Some(node @ Node::Asked { .. }), _) => return Some(node),
        (Some(node), _) => node,
        (None, Resend::Idempotent) => Node::OfSlot,
        (None, Resend::IfNotRun) => return None,
    };
    pause(attempt).await;
    Some(next)
}

/// The pause before the send after the `attempt`-th: 10, 20, 40, 80, 160,
/// then 250 ms, about 3 s over all the attempts (a slot map refresh, an
/// election after a failover).
async fn pause(attempt: u32) {
    let ms = (10u64 << attempt.saturating_sub(1).min(5)).min(250);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn send(
    conn: &mut ClusterConnection,
    key: &[u8],
    node: &Node,
    cmd: &Cmd,
) -> RedisResult<Value> {
    match node {
        Node::OfSlot => {
            conn.route_command(cmd.clone(), RoutingInfo::SingleNode(master_of(key)))
                .await
        }
        Node::Asked { host, port } => {
            let mut pipe = Pipeline::new();
            pipe.cmd("ASKING").add_command(cmd.clone());
            let address = SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            };
            let mut replies = conn.route_pipeline(pipe, 1, 1, address).await?;
            Ok(replies.pop().unwrap_or(Value::Nil))
        }
    }
}

/// Runs `cmd`, which acts on `key`, on the master of `key`'s slot.
pub(crate) async fn run(
    conn: &mut ClusterConnection,
    key: &[u8],
    cmd: &Cmd,
    resend: Resend,
) -> RedisResult<Value> {
    let mut node = Node::OfSlot;
    let mut attempt = 1;
    loop {
        let error = match send(conn, key, &node, cmd).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        node = match next_node(&error, resend, attempt).await {
            Some(node) => node,
            None => return Err(error),
        };
        attempt += 1;
    }
}

/// Runs a blocking command like [`run`] with [`Resend::IfNotRun`], always
/// by slot (an `ASK` is waited out: the wait must stay on the node that
/// `CLIENT UNBLOCK`, routed by slot, reaches). Before sending it again, asks
/// the slot's master for this connection's `CLIENT ID` there and stores it
/// in `id`, the id that cancellation unblocks.
pub(crate) async fn run_blocking(
    conn: &mut ClusterConnection,
    key: &[u8],
    cmd: &Cmd,
    id: &AtomicI64,
) -> RedisResult<Value> {
    let mut attempt = 1;
    loop {
        let error = match send(conn, key, &Node::OfSlot, cmd).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if attempt >= ATTEMPTS || not_run(&error).is_none() {
            return Err(error);
        }
        pause(attempt).await;
        let mut client_id = redis::cmd("CLIENT");
        client_id.arg("ID");
        match run(conn, key, &client_id, Resend::Idempotent).await? {
            Value::Int(new_id) => id.store(new_id, Ordering::Relaxed),
            other => {
                return Err(RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "CLIENT ID did not reply an integer",
                    format!("{other:?}"),
                )))
            }
        }
        attempt += 1;
    }
}

/// Sends `pipe` (idempotent commands on keys of `key`'s slot) to the master
/// of that slot; one reply per command, errors as `Value::ServerError`.
pub(crate) async fn pipeline(
    conn: &mut ClusterConnection,
    key: &[u8],
    pipe: &Pipeline,
) -> RedisResult<Vec<Value>> {
    let mut attempt = 1;
    loop {
        let error = match conn
            .route_pipeline(pipe.clone(), 0, pipe.len(), master_of(key))
            .await
        {
            Ok(values) => return Ok(values),
            Err(error) => error,
        };
        // A pipeline's commands may be spread over a migration: re-send
        // all of them by slot, even after an ASK (they are idempotent).
        if next_node(&error, Resend::Idempotent, attempt)
            .await
            .is_none()
        {
            return Err(error);
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_error(reply: &str) -> RedisError {
        let value = redis::parse_redis_value(reply.as_bytes()).expect("a RESP error");
        value.extract_error().expect_err("an error reply")
    }

    /// Only the replies that prove a command did not run allow a re-send of
    /// a lock command; an ASK names its node.
    #[test]
    fn redirections_and_refusals_prove_a_command_did_not_run() {
        assert_eq!(
            not_run(&reply_error("-ASK 3999 127.0.0.1:6381\r\n")),
            Some(Node::Asked {
                host: "127.0.0.1".into(),
                port: 6381
            })
        );
        for reply in [
            "-MOVED 3999 127.0.0.1:6381\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
        ] {
            assert_eq!(not_run(&reply_error(reply)), Some(Node::OfSlot), "{reply}");
        }
        for reply in [
            "-NOTOWNER not held\r\n",
            "-READONLY replica\r\n",
            "-LOADING\r\n",
        ] {
            assert_eq!(not_run(&reply_error(reply)), None, "{reply}");
        }
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(not_run(&dropped), None);
    }

    /// A connection error ends a lock command at once; an idempotent one is
    /// sent again, until the attempts run out.
    #[tokio::test]
    async fn a_connection_error_is_retried_only_for_idempotent_commands() {
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(next_node(&dropped, Resend::IfNotRun, 1).await, None);
        assert_eq!(
            next_node(&dropped, Resend::Idempotent, 1).await,
            Some(Node::OfSlot)
        );
        assert_eq!(
            next_node(&dropped, Resend::Idempotent, ATTEMPTS).await,
            None
        );
        let moved = reply_error("-MOVED 3999 127.0.0.1:6381\r\n");
        assert_eq!(
            next_node(&moved, Resend::IfNotRun, 1).await,
            Some(Node::OfSlot)
        );
        assert_eq!(next_node(&moved, Resend::IfNotRun, ATTEMPTS).await, None);
    }
}
