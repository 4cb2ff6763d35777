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

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

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
///
/// A blocking acquire (`BLOCK` in `DLOCK.ACQUIRE`, `FAIR`, `MACQUIRE`) or a
/// latch wait (`DLOCK.AWAIT`) is also sent again after a reply that proves
/// nothing was granted while its wait is not over: null before the wait
/// ended (its lock or latch moved away with its slot, `MIGRATE` during
/// resharding, or a failover on Valkey: docs/commands.md), or `UNBLOCKED` (Redis, to the waiters of a master a
/// failover made a replica). Every send after the first carries the rest of
/// the wait, counted from the first send, so the wait ends by its original
/// deadline; one whose rest is over replies null (not granted). Never once
/// `abandoned` is set: the caller ended the wait itself (`CLIENT UNBLOCK`,
/// whose null must end it).
pub(crate) async fn run_blocking(
    conn: &mut ClusterConnection,
    key: &[u8],
    cmd: &Cmd,
    id: &AtomicI64,
    abandoned: &AtomicBool,
) -> RedisResult<Value> {
    let first_sent = Instant::now();
    let wait = BlockingAcquire::of(cmd);
    let mut current = cmd.clone();
    let mut attempt = 1;
    loop {
        let reply = send(conn, key, &Node::OfSlot, &current).await;
        let (early_end, redirected) = match &reply {
            Ok(Value::Nil) => (true, false),
            Ok(_) => return reply,
            Err(error) if error.code() == Some("UNBLOCKED") => (true, false),
            Err(error) => (false, not_run(error).is_some()),
        };
        let Some(wait) = wait.as_ref().filter(|_| early_end || redirected) else {
            if redirected && attempt < ATTEMPTS && !abandoned.load(Ordering::Relaxed) {
                // Not a wait with a rest to count (DLOCK.WATCH): sent
                // again as it was.
                pause(attempt).await;
                client_id_on_slot(conn, key, id).await?;
                attempt += 1;
                continue;
            }
            return reply;
        };
        if attempt >= ATTEMPTS || abandoned.load(Ordering::Relaxed) {
            return reply;
        }
        let Some(again) = wait.rest(first_sent.elapsed()) else {
            // The wait is over: its null was a timeout, or nothing ran.
            return Ok(Value::Nil);
        };
        if !matches!(reply, Ok(Value::Nil)) {
            // A redirection, or a failover (the node that answered
            // UNBLOCKED closes the connection): the slot map moves first.
            pause(attempt).await;
        }
        client_id_on_slot(conn, key, id).await?;
        if abandoned.load(Ordering::Relaxed) {
            return reply;
        }
        current = again;
        attempt += 1;
    }
}

/// Asks the master of `key`'s slot for this connection's `CLIENT ID`
/// there, into `id`.
async fn client_id_on_slot(
    conn: &mut ClusterConnection,
    key: &[u8],
    id: &AtomicI64,
) -> RedisResult<()> {
    let mut client_id = redis::cmd("CLIENT");
    client_id.arg("ID");
    match run(conn, key, &client_id, Resend::Idempotent).await? {
        Value::Int(new_id) => {
            id.store(new_id, Ordering::Relaxed);
            Ok(())
        }
        other => Err(RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "CLIENT ID did not reply an integer",
            format!("{other:?}"),
        ))),
    }
}

/// A blocking acquire's arguments and where its `BLOCK` milliseconds are.
struct BlockingAcquire {
    args: Vec<Vec<u8>>,
    block_at: usize,
    block_ms: u64,
}

/// Less than this left of a wait counts as over (a wait sent again for a
/// few ms would only end in another null).
const LEAST_REST_MS: u64 = 10;

impl BlockingAcquire {
    /// `cmd` when it is a blocking acquire: `DLOCK.ACQUIRE` or `DLOCK.FAIR`
    /// (`key owner ttl` then options), `DLOCK.MACQUIRE` (`n`, n keys,
    /// `owner ttl`, options) with `BLOCK ms` among its options; or a latch
    /// wait, `DLOCK.AWAIT key ms` (read-only, so as safe to send again).
    fn of(cmd: &Cmd) -> Option<BlockingAcquire> {
        let args = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect::<Option<Vec<Vec<u8>>>>()?;
        let name = args.first()?.to_ascii_uppercase();
        let options = match name.as_slice() {
            b"DLOCK.ACQUIRE" | b"DLOCK.FAIR" => Some(4),
            b"DLOCK.MACQUIRE" => Some(
                4 + std::str::from_utf8(args.get(1)?)
                    .ok()?
                    .parse::<usize>()
                    .ok()?,
            ),
            // `key timeout`: a latch that moved away with its slot answers
            // its awaiters null before their timeout (docs/commands.md).
            b"DLOCK.AWAIT" => None,
            _ => return None,
        };
        let block_at = match options {
            Some(options) => {
                (options..args.len().saturating_sub(1))
                    .find(|&at| args[at].eq_ignore_ascii_case(b"BLOCK"))?
                    + 1
            }
            None => 2,
        };
        let block_ms = std::str::from_utf8(&args[block_at]).ok()?.parse().ok()?;
        Some(BlockingAcquire {
            args,
            block_at,
            block_ms,
        })
    }

    /// The command again with what is left of its wait once `spent` has
    /// passed since its first send (`BLOCK 0`, a wait without end, as it
    /// was); None when it is over.
    fn rest(&self, spent: Duration) -> Option<Cmd> {
        let left = if self.block_ms == 0 {
            0
        } else {
            let spent = u64::try_from(spent.as_millis()).unwrap_or(u64::MAX);
            self.block_ms
                .checked_sub(spent)
                .filter(|&left| left >= LEAST_REST_MS)?
        };
        let mut again = Cmd::new();
        for (at, arg) in self.args.iter().enumerate() {
            if at == self.block_at {
                again.arg(left);
            } else {
                again.arg(arg.as_slice());
            }
        }
        Some(again)
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

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    /// A blocking acquire sent again carries the rest of its wait (a wait
    /// without end as it was), and none once its wait is over; other
    /// commands are no blocking acquires (a key or an owner named BLOCK
    /// included).
    #[test]
    fn a_blocking_acquire_is_sent_again_with_the_rest_of_its_wait() {
        let mut acquire = redis::cmd("DLOCK.ACQUIRE");
        acquire.arg("k").arg("o").arg(30000).arg("BLOCK").arg(3000);
        let mut forever = redis::cmd("DLOCK.FAIR");
        forever.arg("k").arg("o").arg(30000).arg("BLOCK").arg(0);
        let mut multi = redis::cmd("DLOCK.MACQUIRE");
        multi
            .arg(2)
            .arg("BLOCK")
            .arg("b")
            .arg("o")
            .arg(30000)
            .arg("SHARED")
            .arg("BLOCK")
            .arg(500);
        let spent = Duration::from_millis(1200);
        let rest = BlockingAcquire::of(&acquire).unwrap().rest(spent).unwrap();
        assert_eq!(
            words(&rest),
            ["DLOCK.ACQUIRE", "k", "o", "30000", "BLOCK", "1800"]
        );
        let rest = BlockingAcquire::of(&forever).unwrap().rest(spent).unwrap();
        assert_eq!(words(&rest), words(&forever));
        assert!(BlockingAcquire::of(&multi).unwrap().rest(spent).is_none());
        let mut immediate = redis::cmd("DLOCK.ACQUIRE");
        immediate.arg("BLOCK").arg("BLOCK").arg(30000);
        assert!(BlockingAcquire::of(&immediate).is_none());
        // A latch wait is sent again the same way (its latch may have moved).
        let mut await_latch = redis::cmd("DLOCK.AWAIT");
        await_latch.arg("k").arg(3000);
        let rest = BlockingAcquire::of(&await_latch)
            .unwrap()
            .rest(spent)
            .unwrap();
        assert_eq!(words(&rest), ["DLOCK.AWAIT", "k", "1800"]);
        let mut await_forever = redis::cmd("DLOCK.AWAIT");
        await_forever.arg("k").arg(0);
        let rest = BlockingAcquire::of(&await_forever)
            .unwrap()
            .rest(spent)
            .unwrap();
        assert_eq!(words(&rest), ["DLOCK.AWAIT", "k", "0"]);
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
