//! The count-down latch.

use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::conn::{blocking_read, Caller};
use crate::{Client, Error, Result};

/// The largest count and ttl (ms) of a latch: 2^53-1, as the server's.
const MAX_SAFE: u64 = (1 << 53) - 1;

/// A count-down latch (`DLOCK.LATCH`, `DLOCK.COUNTDOWN`, `DLOCK.AWAIT`):
/// created with a count, opened when counted down to zero, which wakes every
/// waiter at once and deletes the key. Made by [`Client::latch`].
///
/// ```no_run
/// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// use dlock_client::LatchWait;
/// let latch = dlock.latch("batch:7");
/// latch.create(3, Duration::from_secs(60)).await?;
/// // three workers each call latch.count_down(1) when done; the coordinator:
/// match latch.wait(Duration::from_secs(30)).await? {
///     LatchWait::Opened => println!("all done"),
///     LatchWait::Vanished => println!("the latch expired or was deleted"),
///     LatchWait::TimedOut => println!("still waiting"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Latch {
    client: Client,
    key: Vec<u8>,
}

/// How [`Latch::wait`] ended.
///
/// ```
/// let outcome = dlock_client::LatchWait::Opened;
/// assert_ne!(outcome, dlock_client::LatchWait::TimedOut);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatchWait {
    /// The count reached zero (or the latch did not exist: an opened latch
    /// is gone).
    Opened,
    /// The latch disappeared without opening: its ttl ended, or it was
    /// deleted, flushed or evicted.
    Vanished,
    /// The timeout passed first.
    TimedOut,
}

impl Latch {
    pub(crate) fn new(client: Client, key: Vec<u8>) -> Latch {
        Latch { client, key }
    }

    /// The latch's key.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// assert_eq!(dlock.latch("batch:7").key(), b"batch:7");
    /// # }
    /// ```
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Creates the latch with `count` (1 to 2^53 - 1) living at most `ttl`;
    /// true if created, false if the key already existed (nothing changed).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let created = dlock.latch("batch:7").create(3, Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, count: u64, ttl: Duration) -> Result<bool> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if count == 0 || ttl_ms == 0 {
            return Err(Error::InvalidArgument(
                "a latch needs a count and a ttl of at least 1".into(),
            ));
        }
        // R9.2: refused here, before anything is sent, as the server would.
        if count > MAX_SAFE || ttl_ms > MAX_SAFE {
            return Err(Error::InvalidArgument(
                "a latch's count and ttl (in ms) are at most 2^53-1".into(),
            ));
        }
        let mut cmd = redis::cmd("DLOCK.LATCH");
        cmd.arg(self.key.as_slice()).arg(count).arg(ttl_ms);
        match self.client.inner.shared.run(&self.key, &cmd).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(Error::UnexpectedReply(format!(
                "DLOCK.LATCH replied {other:?}"
            ))),
        }
    }

    /// Lowers the count by `n` (at least 1) and returns the count left; at 0
    /// the latch opens. A missing latch replies 0.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let left = dlock.latch("batch:7").count_down(1).await?;
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self, n: u64) -> Result<u64> {
        if n == 0 {
            return Err(Error::InvalidArgument("count down by at least 1".into()));
        }
        let mut cmd = redis::cmd("DLOCK.COUNTDOWN");
        cmd.arg(self.key.as_slice()).arg(n);
        match self.client.inner.shared.run(&self.key, &cmd).await? {
            Value::Int(left) => Ok(left.max(0) as u64),
            other => Err(Error::UnexpectedReply(format!(
                "DLOCK.COUNTDOWN replied {other:?}"
            ))),
        }
    }

    /// The current count, or None when the latch does not exist.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// if let Some(count) = dlock.latch("batch:7").count().await? {
    ///     println!("{count} to go");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn count(&self) -> Result<Option<u64>> {
        let mut cmd = redis::cmd("DLOCK.INFO");
        cmd.arg(self.key.as_slice());
        let fields = match self
            .client
            .inner
            .shared
            .run_idempotent(&self.key, &cmd)
            .await?
        {
            Value::Nil => return Ok(None),
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|pair| match pair {
                    [name, value] => Some((name.clone(), value.clone())),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            Value::Map(pairs) => pairs,
            other => {
                return Err(Error::UnexpectedReply(format!(
                    "DLOCK.INFO replied {other:?}"
                )))
            }
        };
        for (name, value) in fields {
            let is_count = match &name {
                Value::BulkString(bytes) => bytes.as_slice() == b"count",
                Value::SimpleString(text) => text == "count",
                _ => false,
            };
            if let (true, Value::Int(count)) = (is_count, value) {
                return Ok(Some(count.max(0) as u64));
            }
        }
        Err(Error::UnexpectedReply(
            "DLOCK.INFO has no count field: the key is not a latch".into(),
        ))
    }

    /// Waits up to `timeout` (at least 1 ms) for the latch to open, on a
    /// pooled connection of its own. Cancel-safe: a dropped wait leaves no
    /// waiter on the server.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let outcome = dlock.latch("batch:7").wait(Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self, timeout: Duration) -> Result<LatchWait> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, (1 << 53) - 1);
        self.await_ms(ms, Some(timeout)).await
    }

    /// Waits for the latch to open however long it takes (`AWAIT key 0`).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let outcome = dlock.latch("batch:7").wait_forever().await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_forever(&self) -> Result<LatchWait> {
        self.await_ms(0, None).await
    }

    /// One `DLOCK.AWAIT` on a dedicated connection, in a task of its own:
    /// the caller has its answer at the wait plus the margin even on a
    /// stalled server (R4.6), and a dropped caller still ends the
    /// server-side wait (`CLIENT UNBLOCK`), the connection going back to
    /// the pool; that clean-up runs after the answer (R4.7).
    async fn await_ms(&self, ms: u64, timeout: Option<Duration>) -> Result<LatchWait> {
        let (sender, receiver) = oneshot::channel();
        let client = self.client.clone();
        let key = self.key.clone();
        let runtime = client.inner.runtime.clone();
        runtime.spawn(async move {
            let caller = Caller::new(sender);
            let inner = &client.inner;
            let deadline = timeout.and_then(|t| {
                Instant::now().checked_add(t.saturating_add(inner.config.wait_margin))
            });
            let mut cmd = redis::cmd("DLOCK.AWAIT");
            cmd.arg(key.as_slice()).arg(ms);
            let Some(reply) = blocking_read(inner, &caller, &key, &cmd, deadline).await else {
                return;
            };
            caller.answer(match reply {
                Value::Int(1) => Ok(LatchWait::Opened),
                Value::Int(0) => Ok(LatchWait::Vanished),
                Value::Nil => Ok(LatchWait::TimedOut),
                Value::ServerError(error) => Err(Error::from_server(
                    error.code(),
                    error.details().unwrap_or(""),
                )),
                other => Err(Error::UnexpectedReply(format!(
                    "DLOCK.AWAIT replied {other:?}"
                ))),
            });
        });
        match receiver.await {
            Ok(result) => result,
            Err(_) => Err(Error::UnexpectedReply(
                "the waiting task ended without a result".into(),
            )),
        }
    }
}
