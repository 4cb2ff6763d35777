//! Lock requests (exclusive, read, write, semaphore, multi-key) and the
//! guards they grant.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::conn::{Blocking, Caller, Dedicated, Late};
use crate::watchdog::{judge, worse, HoldState, Renewed, Watch};
use crate::{Client, Error, Result};

/// The lease when none is set: 30 s, as Redisson's watchdog.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Most keys in one multi-lock (the server's limit for `numkeys`).
const MAX_KEYS: usize = 1024;

#[derive(Clone, Copy, Debug)]
enum Wait {
    No,
    For(Duration),
    Forever,
}

/// A lock request: set its options, then call [`LockBuilder::acquire`].
/// Made by [`Client::lock`], [`Client::read_lock`], [`Client::write_lock`],
/// [`Client::semaphore`] and [`Client::multi_lock`].
///
/// ```no_run
/// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let guard = dlock
///     .lock("orders:42")
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .fair()
///     .acquire()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a lock request does nothing until acquire() is awaited"]
pub struct LockBuilder {
    client: Client,
    /// Shared with the guards it grants (no copy per acquire).
    keys: Arc<[Vec<u8>]>,
    multi: bool,
    lease: Duration,
    wait: Wait,
    fair: bool,
    session: bool,
    shared: bool,
    limit: Option<u32>,
    weight: Option<u32>,
    owner: Option<Vec<u8>>,
    /// The owner is this request's alone (generated, or unique per
    /// campaign): a grant that raced a cancellation can be released.
    owner_unique: bool,
    replicas: Option<(u32, Duration)>,
    renew_every: Option<Duration>,
}

impl LockBuilder {
    /// An owner this request alone uses (a campaign's): like a generated
    /// one, a grant that raced a cancellation is released.
    pub(crate) fn unique_owner(mut self, owner: Vec<u8>) -> LockBuilder {
        self.owner = Some(owner);
        self.owner_unique = true;
        self
    }

    pub(crate) fn new(client: Client, keys: Arc<[Vec<u8>]>, multi: bool) -> LockBuilder {
        LockBuilder {
            client,
            keys,
            multi,
            lease: DEFAULT_LEASE,
            wait: Wait::No,
            fair: false,
            session: false,
            shared: false,
            limit: None,
            weight: None,
            owner: None,
            owner_unique: false,
            replicas: None,
            renew_every: None,
        }
    }

    /// The lease: how long the server keeps the hold without a renewal
    /// (default 30 s, whole milliseconds). The watchdog renews it while the
    /// guard lives, so it bounds how long a crashed holder blocks others.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let guard = dlock.lock("orders:42").lease(Duration::from_secs(5)).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn lease(mut self, lease: Duration) -> LockBuilder {
        self.lease = lease;
        self
    }

    /// Waits up to `wait` in the lock's queue (`BLOCK`) when it is not free
    /// (default: no wait, [`Error::Busy`] at once). The wait runs on a
    /// pooled connection of its own, never on the shared one.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let guard = dlock.lock("orders:42").wait(Duration::from_secs(10)).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn wait(mut self, wait: Duration) -> LockBuilder {
        self.wait = if wait.is_zero() {
            Wait::No
        } else {
            Wait::For(wait)
        };
        self
    }

    /// Waits in the queue until the lock is granted (`BLOCK 0`). Cancel the
    /// future (drop, `select!`, `tokio::time::timeout`) to give up.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").wait_forever().acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_forever(mut self) -> LockBuilder {
        self.wait = Wait::Forever;
        self
    }

    /// Asks with `DLOCK.FAIR`: with a wait, the same as a plain wait; without
    /// one, a refused request leaves a reservation that keeps this owner's
    /// place in the queue for `dlock.fair-reservation-ms`. A poller keeps
    /// its place (R8): the next no-wait fair request for the same key
    /// through the same [`Client`] without an [`owner`](LockBuilder::owner)
    /// asks again under the refused request's owner (an owner is never
    /// reused once granted, nor by two requests at once). Not for
    /// multi-locks.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let guard = dlock.lock("report").owner("worker-7").fair().acquire().await;
    /// # Ok(()) }
    /// ```
    pub fn fair(mut self) -> LockBuilder {
        self.fair = true;
        self
    }

    /// Ties the hold to a connection (`SESSION`): the server releases it
    /// when that connection closes, as when this process dies. The lease
    /// still applies and the watchdog still renews it.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("leader").session().acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn session(mut self) -> LockBuilder {
        self.session = true;
        self
    }

    /// Asks for a shared hold (`SHARED`): the read side of a read-write
    /// lock, or a semaphore permit with [`limit`](LockBuilder::limit).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.multi_lock(["{t}:a", "{t}:b"]).shared().acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn shared(mut self) -> LockBuilder {
        self.shared = true;
        self
    }

    /// Bounds the shared holders (`LIMIT n`, implies [`shared`](LockBuilder::shared)):
    /// granted only if at most `limit` owners then hold the lock shared.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let permit = dlock.lock("api:payments").limit(10).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn limit(mut self, limit: u32) -> LockBuilder {
        self.shared = true;
        self.limit = Some(limit);
        self
    }

    /// The number of permits this hold takes (`WEIGHT w`, needs a
    /// [`limit`](LockBuilder::limit); 1 to the limit, default 1): granted
    /// when the weights of the shared owners, this one's included, add up
    /// to at most the limit. The queue stays FIFO, so a heavy request at
    /// its head is never starved by lighter ones behind it. One owner has
    /// one weight per lock.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// // 3 of the 8 permits of a pool of connections
    /// let permits = dlock.semaphore("db:pool", 8).weight(3).wait_forever().acquire().await?;
    /// assert_eq!(permits.weight(), 3);
    /// # Ok(()) }
    /// ```
    pub fn weight(mut self, weight: u32) -> LockBuilder {
        self.weight = Some(weight);
        self
    }

    /// The owner name (default: a new UUID v4 per guard). Guards of the same
    /// owner re-enter the lock instead of queueing: pass your own owner for
    /// re-entry across calls, and keep it unique to one holder.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let outer = dlock.lock("orders:42").owner("job-17").acquire().await?;
    /// let inner = dlock.lock("orders:42").owner("job-17").acquire().await?; // re-entry
    /// assert_eq!(outer.token(), inner.token());
    /// # Ok(()) }
    /// ```
    pub fn owner(mut self, owner: impl AsRef<[u8]>) -> LockBuilder {
        self.owner = Some(owner.as_ref().to_vec());
        self
    }

    /// After the grant, sends `WAIT n timeout` on the same connection; when
    /// fewer than `n` replicas confirm the grant in time, releases the lock
    /// and fails with [`Error::NotReplicated`]. A grant that no replica has
    /// may be lost in a failover, and the promoted replica would then grant
    /// the lock to someone else (see docs/operations.md).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let guard = dlock.lock("orders:42").replicas(1, Duration::from_millis(500)).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn replicas(mut self, n: u32, timeout: Duration) -> LockBuilder {
        self.replicas = if n == 0 { None } else { Some((n, timeout)) };
        self
    }

    /// Renews this guard's lease every `period` instead of at the client's
    /// [`Config::renew_divisor`](crate::Config::renew_divisor) share of the
    /// lease (at least 1 ms).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let guard = dlock
    ///     .lock("orders:42")
    ///     .lease(Duration::from_secs(30))
    ///     .renew_every(Duration::from_secs(5))
    ///     .acquire()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn renew_every(mut self, period: Duration) -> LockBuilder {
        self.renew_every = Some(period.max(Duration::from_millis(1)));
        self
    }

    /// Sends the request and waits for the grant. Errors: [`Error::Busy`]
    /// when not granted in time, [`Error::NotReplicated`], server errors
    /// (`DEADLOCK` for a second upgrader, `WRONGTYPE`, ...) and connection
    /// errors.
    ///
    /// Cancel-safe: dropping the future (or losing a `select!`, or a
    /// `tokio::time::timeout`) leaves no waiter in the server's queue and no
    /// hold; a grant that raced the cancellation is released.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let attempt = dlock.lock("orders:42").wait_forever().acquire();
    /// match tokio::time::timeout(Duration::from_secs(1), attempt).await {
    ///     Ok(guard) => guard?.release().await?,
    ///     Err(_) => println!("gave up; nothing left queued on the server"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(self) -> Result<Guard> {
        if matches!(self.wait, Wait::No) && self.replicas.is_none() && self.owner.is_none() {
            return self.acquire_at_once().await;
        }
        let (sender, receiver) = oneshot::channel();
        let runtime = self.client.inner.runtime.clone();
        // The request runs in a task of its own, so that a cancelled caller
        // never leaves it half-done: the task unblocks the wait, and a
        // guard it cannot deliver is dropped, which releases it. The task
        // answers as soon as it knows the answer and cleans up afterwards
        // (R4.7): a stalled server delays the clean-up, not the caller.
        runtime.spawn(async move {
            let caller = Caller::new(sender);
            self.run(&caller).await;
        });
        match receiver.await {
            Ok(result) => result,
            Err(_) => Err(Error::UnexpectedReply(
                "the acquiring task ended without a result".into(),
            )),
        }
    }

    /// The common case inline (no wait, no replicas, a generated owner):
    /// one command on the shared connection. If the caller drops the future
    /// while the command is in flight, a release of the generated owner
    /// follows it on the same connection, so a grant cannot outlive it.
    async fn acquire_at_once(self) -> Result<Guard> {
        self.check()?;
        let fair_poll = self.fair && !self.multi;
        let owner = match fair_poll {
            true => self.take_fair_owner(),
            false => None,
        }
        .unwrap_or_else(generated_owner);
        let cmd = self.command(&owner, self.ttl_ms());
        let mut in_flight = InFlight {
            client: Some(self.client.clone()),
            keys: &self.keys,
            owner: &owner,
            shared: self.shared,
        };
        let sent = Instant::now();
        let reply = self.client.inner.shared.run(self.first_key(), &cmd).await;
        in_flight.client = None;
        if fair_poll && matches!(reply, Ok(Value::Nil)) {
            // Refused: a reservation now keeps this owner's place.
            self.keep_fair_owner(owner.clone());
        }
        if let Err(error) = &reply {
            // R5.3 in the background (R4.7): on a stalled server the
            // release waits as long as the acquire did.
            let (client, keys, shared) = (self.client.clone(), self.keys.clone(), self.shared);
            let (owner, error) = (owner.clone(), error.clone());
            self.client.inner.runtime.spawn(async move {
                settle_unanswered(&client, &keys, &owner, shared, &error).await;
            });
        }
        drop(in_flight);
        reply
            .map_err(Error::from)
            .and_then(|value| self.granted(value, owner, sent, None))
    }

    /// The owner a refused fair poll of this key left, taken for this one.
    fn take_fair_owner(&self) -> Option<Arc<[u8]>> {
        let mut owners = self
            .client
            .inner
            .fair_owners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        owners.remove(self.first_key())
    }

    /// Keeps a refused fair poll's owner for the next poll of the key.
    fn keep_fair_owner(&self, owner: Arc<[u8]>) {
        /// Keys remembered at most: a reservation ends within seconds
        /// anyway, and an owner whose reservation ended is just a new one.
        const KEPT_MAX: usize = 1024;
        let mut owners = self
            .client
            .inner
            .fair_owners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if owners.len() >= KEPT_MAX {
            owners.clear();
        }
        owners.insert(self.first_key().to_vec(), owner);
    }

    /// The key a single-key command acts on, and that routes a multi-key
    /// one (`check` makes sure there is one).
    fn first_key(&self) -> &[u8] {
        self.keys.first().map(Vec::as_slice).unwrap_or_default()
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis())
            .unwrap_or(u64::MAX)
            .min((1 << 53) - 1)
    }

    fn check(&self) -> Result<()> {
        if self.keys.is_empty() {
            return Err(Error::InvalidArgument("no key to lock".into()));
        }
        if self.keys.len() > MAX_KEYS {
            return Err(Error::InvalidArgument(format!(
                "at most {MAX_KEYS} keys in one multi-lock"
            )));
        }
        if self.lease < Duration::from_millis(1) {
            return Err(Error::InvalidArgument(
                "the lease must be at least 1 ms".into(),
            ));
        }
        // The server's and every client's integers hold a lease up to
        // 2^53-1 ms exactly: a longer one is refused, never shortened.
        if self.lease > Duration::from_millis((1 << 53) - 1) {
            return Err(Error::InvalidArgument(
                "the lease must be at most 2^53-1 ms".into(),
            ));
        }
        if self.limit == Some(0) {
            return Err(Error::InvalidArgument(
                "the limit must be at least 1".into(),
            ));
        }
        if let Some(weight) = self.weight {
            match self.limit {
                None => {
                    return Err(Error::InvalidArgument(
                        "a weight needs a limit (a semaphore)".into(),
                    ))
                }
                Some(limit) if weight < 1 || weight > limit => {
                    return Err(Error::InvalidArgument(format!(
                        "the weight must be 1 to the limit ({limit})"
                    )))
                }
                Some(_) => {}
            }
        }
        if self.multi && self.fair {
            return Err(Error::InvalidArgument(
                "a multi-lock has no fair (reservation) mode".into(),
            ));
        }
        if let Some(owner) = &self.owner {
            if owner.is_empty() || owner.len() > 512 || owner.as_slice() == b"*" {
                return Err(Error::InvalidArgument(
                    "the owner must be 1 to 512 bytes and not `*`".into(),
                ));
            }
        }
        Ok(())
    }

    fn command(&self, owner: &[u8], ttl_ms: u64) -> Cmd {
        let mut cmd = if self.multi {
            let mut cmd = redis::cmd("DLOCK.MACQUIRE");
            cmd.arg(self.keys.len());
            for key in self.keys.iter() {
                cmd.arg(key.as_slice());
            }
            cmd
        } else {
            let mut cmd = redis::cmd(if self.fair {
                "DLOCK.FAIR"
            } else {
                "DLOCK.ACQUIRE"
            });
            cmd.arg(self.first_key());
            cmd
        };
        cmd.arg(owner).arg(ttl_ms);
        if self.shared {
            cmd.arg("SHARED");
        }
        if let Some(limit) = self.limit {
            cmd.arg("LIMIT").arg(limit);
            if let Some(weight) = self.weight {
                cmd.arg("WEIGHT").arg(weight);
            }
        }
        match self.wait {
            Wait::No => {}
            Wait::For(wait) => {
                let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
                cmd.arg("BLOCK").arg(ms.min((1 << 53) - 1));
            }
            Wait::Forever => {
                cmd.arg("BLOCK").arg(0);
            }
        }
        if self.session {
            cmd.arg("SESSION");
        }
        cmd
    }

    /// Runs the request and answers `caller` as soon as the answer is
    /// known; the clean-up of a timeout, a cancel or a failure without an
    /// answer follows in this task, after the answer.
    async fn run(self, caller: &Caller<Result<Guard>>) {
        if let Err(error) = self.check() {
            return caller.answer(Err(error));
        }
        let started = Instant::now();
        let owner = match &self.owner {
            Some(owner) => Arc::from(owner.as_slice()),
            None => generated_owner(),
        };
        let cmd = self.command(&owner, self.ttl_ms());
        let inner = &self.client.inner;
        let key = self.first_key().to_vec();
        let dedicated_needed = !matches!(self.wait, Wait::No) || self.replicas.is_some();
        let generated_owner = self.owner.is_none() || self.owner_unique;
        if !dedicated_needed {
            let sent = Instant::now();
            let reply = inner.shared.run(&key, &cmd).await;
            match reply {
                Ok(value) => caller.answer(self.granted(value, owner.clone(), sent, None)),
                Err(error) => {
                    caller.answer(Err(Error::from(error.clone())));
                    if generated_owner {
                        settle_unanswered(&self.client, &self.keys, &owner, self.shared, &error)
                            .await;
                    }
                }
            }
            return;
        }
        // R4.2, R4.6: the whole request, the opening of its connection
        // included, ends by the wait plus the margin.
        // (A wait too long for the clock has no deadline: it is forever.)
        let deadline = match self.wait {
            Wait::No => started.checked_add(inner.config.wait_margin),
            Wait::For(wait) => started.checked_add(wait.saturating_add(inner.config.wait_margin)),
            Wait::Forever => None,
        };
        let taken = inner
            .pool
            .take_by(&inner.opener, &inner.config, &key, deadline, caller.gone())
            .await;
        let mut conn = match taken {
            Ok(Some(conn)) => conn,
            // Nothing was sent: nothing to clean up.
            Ok(None) => return,
            Err(None) => return caller.answer(Err(Error::Timeout)),
            Err(Some(error)) => return caller.answer(Err(error.into())),
        };
        // After CLIENT UNBLOCK this wait can no longer be granted, so
        // releasing a generated owner (this request's alone) then settles a
        // grant that raced the cancellation, whether its reply arrives or not.
        let release_generated = async {
            if generated_owner {
                let _ = send_release(&self.client, &self.keys, &owner, self.shared).await;
            }
        };
        let sent = Instant::now();
        let outcome = conn
            .call_blocking(
                inner,
                &key,
                &cmd,
                deadline,
                caller.gone(),
                |timed_out| {
                    if timed_out {
                        caller.answer(Err(Error::Timeout));
                    }
                },
                release_generated,
            )
            .await;
        let value = match outcome {
            Blocking::Replied(Ok(value)) => value,
            Blocking::Replied(Err(error)) => {
                caller.answer(Err(Error::from(error.clone())));
                // Broken: closed, which also ends a wait still queued on it.
                inner.pool.give_back(conn);
                if generated_owner {
                    settle_unanswered(&self.client, &self.keys, &owner, self.shared, &error).await;
                }
                return;
            }
            Blocking::Abandoned { late, .. } => {
                // The caller has its answer (a timeout) or is gone. A
                // generated owner was released right after the unblock; a
                // grant read after it is released once more (the request
                // may have run after the unblock and the release, when a
                // stall postponed it). A caller's own owner may also hold
                // the lock through another guard, so only a grant actually
                // read is released (a guard made and dropped at once); a
                // grant the server failed to deliver is left to its lease.
                if let Late::Reply(value) = late {
                    drop(self.granted(value, owner.clone(), sent, None));
                }
                inner.pool.give_back(conn);
                return;
            }
        };
        // R3.2: the lease of a grant after a wait began when the server
        // granted it, unknown to the client but no earlier than the reply
        // was sent: count from when the reply was read, not from when the
        // wait was sent (a wait longer than the lease would otherwise make
        // the guard lost at once).
        let granted_at = Instant::now();
        let guard = match self.granted(value, owner.clone(), granted_at, None) {
            Ok(guard) => guard,
            Err(error) => {
                inner.pool.give_back(conn);
                return caller.answer(Err(error));
            }
        };
        if let Some((wanted, timeout)) = self.replicas {
            let mut wait = redis::cmd("WAIT");
            let timeout_ms = u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            wait.arg(wanted).arg(timeout_ms);
            let limit = timeout + inner.config.wait_margin;
            let acked = tokio::select! {
                reply = conn.run_bounded(&key, &wait, limit) => reply,
                _ = caller.gone() => {
                    // The guard is dropped here, which releases it; the
                    // WAIT may still be running: the connection goes.
                    conn.mark_broken();
                    return;
                }
            };
            let failure = match acked {
                Ok(Value::Int(n)) => {
                    let acked = u32::try_from(n.max(0)).unwrap_or(u32::MAX);
                    (acked < wanted).then_some(Error::NotReplicated { wanted, acked })
                }
                Ok(other) => Some(Error::UnexpectedReply(format!("WAIT replied {other:?}"))),
                Err(error) => Some(error.into()),
            };
            if let Some(failure) = failure {
                inner.pool.give_back(conn);
                let _ = guard.release().await;
                return caller.answer(Err(failure));
            }
        }
        if self.session {
            // The hold lives as long as this connection: the guard keeps it.
            let mut guard = guard;
            guard.session_conn = Some(conn);
            return caller.answer(Ok(guard));
        }
        inner.pool.give_back(conn);
        caller.answer(Ok(guard))
    }

    /// Turns a reply into a guard (watched from now on), or `Busy` for null.
    /// (No allocation here beyond the guard's own state: the keys are
    /// shared with the builder, the owner moved in, one token list.)
    fn granted(
        &self,
        reply: Value,
        owner: Arc<[u8]>,
        sent: Instant,
        session_conn: Option<Dedicated>,
    ) -> Result<Guard> {
        let (tokens, holds): (Arc<[u64]>, i64) = match reply {
            Value::Nil => return Err(Error::Busy),
            Value::ServerError(error) => {
                return Err(Error::from_server(
                    error.code(),
                    error.details().unwrap_or(""),
                ))
            }
            Value::Array(items) if self.multi => {
                let mut tokens = Vec::with_capacity(items.len());
                let mut first_holds = 0;
                for (index, item) in items.into_iter().enumerate() {
                    let (token, holds) = parse_grant(item)?;
                    if index == 0 {
                        first_holds = holds;
                    }
                    tokens.push(token as u64);
                }
                (Arc::from(tokens), first_holds)
            }
            single => {
                let (token, holds) = parse_grant(single)?;
                (Arc::from([token as u64]), holds)
            }
        };
        if tokens.len() != self.keys.len() {
            return Err(Error::UnexpectedReply(format!(
                "{} grants for {} keys",
                tokens.len(),
                self.keys.len()
            )));
        }
        let inner = &self.client.inner;
        let hold = HoldState::new();
        let keys = self.keys.clone();
        let period = self
            .renew_every
            .unwrap_or_else(|| inner.config.renew_period(self.lease));
        let watch_id = inner.watchdog.watch(Watch {
            keys: keys.clone(),
            tokens: tokens.clone(),
            owner: owner.clone(),
            lease: self.lease,
            margin: inner.config.margin_for(self.lease),
            period,
            sent,
            hold: hold.clone(),
        });
        Ok(Guard {
            client: self.client.clone(),
            keys,
            tokens,
            holds: holds as u64,
            owner,
            shared: self.shared,
            weight: self.weight.unwrap_or(1),
            lease: self.lease,
            hold,
            watch_id,
            session_conn,
        })
    }
}

/// A new owner: a UUID v4 in its 36-character text form, formatted on the
/// stack (no `fmt` machinery, one allocation).
fn generated_owner() -> Arc<[u8]> {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
    Arc::from(&text[..])
}

/// An immediate acquire whose reply has not come yet: dropped with a client
/// still set, it releases the generated owner in the background.
struct InFlight<'a> {
    client: Option<Client>,
    keys: &'a [Vec<u8>],
    owner: &'a [u8],
    shared: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let (keys, owner, shared) = (self.keys.to_vec(), self.owner.to_vec(), self.shared);
            let runtime = client.inner.runtime.clone();
            runtime.spawn(async move {
                let _ = send_release(&client, &keys, &owner, shared).await;
            });
        }
    }
}

/// One `[token, holds, owner]` grant.
fn parse_grant(value: Value) -> Result<(i64, i64)> {
    match value {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(token), Value::Int(holds), _owner] => Ok((*token, *holds)),
            other => Err(Error::UnexpectedReply(format!("not a grant: {other:?}"))),
        },
        other => Err(Error::UnexpectedReply(format!("not a grant: {other:?}"))),
    }
}

/// A granted hold: exclusive, shared (read lock, semaphore permit) or on
/// several keys (multi-lock). While it lives, the client's watchdog renews
/// its lease; release it with [`Guard::release`], or drop it to release it
/// in the background.
///
/// When the lock is lost (the server answered a renewal with `NOTOWNER`, or
/// no renewal succeeded before the lease's end by the client's clock, less a
/// safety margin), [`Guard::lost`] resolves and [`Guard::is_held`] turns
/// false: stop the protected work, because the resource's fencing check will
/// refuse this guard's token once another holder has written.
///
/// ```no_run
/// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
/// # async fn work() {}
/// let guard = dlock.lock("orders:42").acquire().await?;
/// tokio::select! {
///     _ = work() => {}
///     _ = guard.lost() => eprintln!("lock lost: stopping"),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct Guard {
    client: Client,
    keys: Arc<[Vec<u8>]>,
    tokens: Arc<[u64]>,
    holds: u64,
    owner: Arc<[u8]>,
    shared: bool,
    weight: u32,
    lease: Duration,
    hold: Arc<HoldState>,
    watch_id: u64,
    session_conn: Option<Dedicated>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field(
                "keys",
                &self
                    .keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k))
                    .collect::<Vec<_>>(),
            )
            .field("owner", &String::from_utf8_lossy(&self.owner))
            .field("tokens", &self.tokens)
            .field("shared", &self.shared)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Guard {
    /// The fencing token of the hold (of the first key for a multi-lock):
    /// pass it to the resource, which must refuse a token lower than the
    /// highest it has seen. Tokens grow strictly with every new hold.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// let token: u64 = guard.token();
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.tokens.first().copied().unwrap_or(0)
    }

    /// Each key with its fencing token, in the order of the request.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.multi_lock(["{a}:1", "{a}:2"]).acquire().await?;
    /// let tokens: Vec<(&[u8], u64)> = guard.tokens().collect();
    /// # Ok(()) }
    /// ```
    pub fn tokens(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        self.keys
            .iter()
            .map(Vec::as_slice)
            .zip(self.tokens.iter().copied())
    }

    /// The key (the first one for a multi-lock).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// assert_eq!(guard.key(), b"orders:42");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.keys.first().map(Vec::as_slice).unwrap_or(&[])
    }

    /// The owner name the hold was granted to.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").owner("job-17").acquire().await?;
    /// assert_eq!(guard.owner(), b"job-17");
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// The owner's hold count (of the mode granted) right after the grant:
    /// 1 for a new hold, more for a re-entry.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// assert_eq!(guard.holds(), 1);
    /// # Ok(()) }
    /// ```
    pub fn holds(&self) -> u64 {
        self.holds
    }

    /// Whether the hold is shared (read lock, semaphore permit).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.read_lock("catalog").acquire().await?;
    /// assert!(guard.is_shared());
    /// # Ok(()) }
    /// ```
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The permits this hold takes: its [`weight`](LockBuilder::weight),
    /// 1 unless set.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let permit = dlock.semaphore("api:payments", 10).acquire().await?;
    /// assert_eq!(permit.weight(), 1);
    /// # Ok(()) }
    /// ```
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The lease the watchdog renews.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// assert_eq!(guard.lease(), dlock_client::DEFAULT_LEASE);
    /// # Ok(()) }
    /// ```
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// True while the hold is live as far as the client knows: not lost, not
    /// released.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// if !guard.is_held() {
    ///     return Ok(()); // the lock is gone: do not touch the resource
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        !self.hold.is_lost() && !self.hold.is_released()
    }

    /// Resolves when the hold is lost (or the guard released). The future
    /// does not borrow the guard.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// let lost = guard.lost();
    /// tokio::spawn(async move {
    ///     lost.await;
    ///     eprintln!("orders:42 lost");
    /// });
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut lost = self.hold.subscribe();
        async move {
            let _ = lost.wait_for(|lost| *lost).await;
        }
    }

    /// Renews the lease now, by hand, as the watchdog does: one
    /// `DLOCK.RENEW` per key with the guard's lease. [`Error::Lost`] when
    /// the guard is lost (docs/clients.md R3.4), including when this
    /// renewal finds the lock gone or held under another token; a lost
    /// guard never becomes held again.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// guard.renew().await?; // Err(Error::Lost) once the lock is gone
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self) -> Result<()> {
        if !self.is_held() {
            return Err(Error::Lost);
        }
        let ttl_ms = u64::try_from(self.lease.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut pipe = Pipeline::new();
        pipe.ignore_errors();
        for key in self.keys.iter() {
            pipe.cmd("DLOCK.RENEW")
                .arg(key.as_slice())
                .arg(&*self.owner)
                .arg(ttl_ms);
        }
        let sent = Instant::now();
        let watchdog = &self.client.inner.watchdog;
        // R4.6: no later than the guard's local deadline, which a renewal
        // of the watchdog may push back meanwhile. Past it without a reply
        // the guard is lost, whatever the server does later.
        let renewal = self.client.inner.shared.pipeline(self.key(), &pipe);
        tokio::pin!(renewal);
        let replies = loop {
            let Some(deadline) = watchdog.deadline(self.watch_id) else {
                self.hold.mark_lost();
                return Err(Error::Lost);
            };
            if let Ok(replies) = tokio::time::timeout_at(deadline, &mut renewal).await {
                break replies?;
            }
            if watchdog
                .deadline(self.watch_id)
                .is_none_or(|deadline| deadline <= Instant::now())
            {
                watchdog.lost(self.watch_id);
                self.hold.mark_lost();
                return Err(Error::Lost);
            }
        };
        let mut outcome = Renewed::Yes;
        let mut refusal = None;
        for (index, reply) in replies.into_iter().enumerate() {
            if let Value::ServerError(error) = &reply {
                if refusal.is_none() && !matches!(error.code(), "NOTOWNER" | "WRONGTYPE") {
                    refusal = Some(Error::from_server(
                        error.code(),
                        error.details().unwrap_or(""),
                    ));
                }
            }
            outcome = worse(outcome, judge(Some(reply), self.tokens.get(index).copied()));
        }
        match outcome {
            Renewed::Lost => {
                watchdog.lost(self.watch_id);
                self.hold.mark_lost();
                Err(Error::Lost)
            }
            _ if self.hold.is_lost() => Err(Error::Lost),
            Renewed::Yes => {
                watchdog.renewed(self.watch_id, sent);
                Ok(())
            }
            Renewed::Retry => Err(refusal.unwrap_or_else(|| {
                Error::UnexpectedReply("a renewal answered neither a token nor an error".into())
            })),
        }
    }

    /// Releases the hold (one hold of each key, in its mode). A guard that
    /// was lost releases without error; `Error::NotOwner` means the lock was
    /// gone although the watchdog had not noticed yet.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        if !self.hold.mark_released() {
            return Ok(());
        }
        let inner = &self.client.inner;
        inner.watchdog.unwatch(self.watch_id);
        let was_lost = self.hold.is_lost();
        let result = send_release(&self.client, &self.keys, &self.owner, self.shared).await;
        if let Some(conn) = self.session_conn.take() {
            inner.pool.give_back(conn);
        }
        self.hold.mark_lost();
        match result {
            Err(Error::NotOwner(_)) if was_lost => Ok(()),
            other => other,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.hold.mark_released() {
            return;
        }
        let inner = &self.client.inner;
        inner.watchdog.unwatch(self.watch_id);
        self.hold.mark_lost();
        let client = self.client.clone();
        let keys = self.keys.clone();
        let owner = self.owner.clone();
        let shared = self.shared;
        let session_conn = self.session_conn.take();
        inner.runtime.spawn(async move {
            let _ = send_release(&client, &keys, &owner, shared).await;
            if let Some(conn) = session_conn {
                client.inner.pool.give_back(conn);
            }
        });
    }
}

/// `DLOCK.RELEASE key owner [SHARED]` for every key, sent at once (the
/// multiplexed connection pipelines them). One command each rather than a
/// pipeline: in a Cluster, a redirection can hit some of them and not
/// others, and only those are sent again.
async fn send_release(client: &Client, keys: &[Vec<u8>], owner: &[u8], shared: bool) -> Result<()> {
    if let [key] = keys {
        // One key (the common case): no join of futures to allocate.
        return release_one(client, key, owner, shared).await;
    }
    let releases = keys
        .iter()
        .map(|key| release_one(client, key, owner, shared));
    let results = futures_util::future::join_all(releases).await;
    results.into_iter().collect()
}

async fn release_one(client: &Client, key: &[u8], owner: &[u8], shared: bool) -> Result<()> {
    let mut cmd = redis::cmd("DLOCK.RELEASE");
    cmd.arg(key).arg(owner);
    if shared {
        cmd.arg("SHARED");
    }
    match client.inner.shared.run(key, &cmd).await? {
        Value::ServerError(error) => Err(Error::from_server(
            error.code(),
            error.details().unwrap_or(""),
        )),
        _ => Ok(()),
    }
}

/// R5.3: an acquire that failed without an answer may have been granted;
/// a generated owner (this request's alone, holding at most one hold) is
/// released once, which cannot undo anything else. That release may be
/// sent again after a connection error of its own: a second one can only
/// find the owner gone. The error stays the caller's.
async fn settle_unanswered(
    client: &Client,
    keys: &[Vec<u8>],
    owner: &[u8],
    shared: bool,
    error: &redis::RedisError,
) {
    if !matches!(Error::from(error.clone()), Error::Connection(_)) {
        return;
    }
    let releases = keys.iter().map(|key| async move {
        let mut cmd = redis::cmd("DLOCK.RELEASE");
        cmd.arg(key.as_slice()).arg(owner);
        if shared {
            cmd.arg("SHARED");
        }
        let _ = client.inner.shared.run_idempotent(key, &cmd).await;
    });
    futures_util::future::join_all(releases).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchdog::{judge, Renewed};

    /// R6.1: a token is an exact 64-bit integer, 2^63-1 included.
    #[test]
    fn a_grant_keeps_a_token_of_2_63_minus_1_exactly() {
        let max = i64::MAX;
        let grant = Value::Array(vec![
            Value::Int(max),
            Value::Int(1),
            Value::BulkString(b"owner".to_vec()),
        ]);
        let (token, holds) = parse_grant(grant).expect("a grant");
        assert_eq!(token as u64, 9_223_372_036_854_775_807);
        assert_eq!(holds, 1);
        assert!(matches!(
            parse_grant(Value::Nil),
            Err(Error::UnexpectedReply(_))
        ));
    }

    /// R3.1: a renewal is good only when it replies the guard's own token.
    #[test]
    fn a_renewal_with_another_token_is_a_loss() {
        let max = i64::MAX as u64;
        assert!(matches!(
            judge(Some(Value::Int(i64::MAX)), Some(max)),
            Renewed::Yes
        ));
        assert!(matches!(
            judge(Some(Value::Int(i64::MAX - 1)), Some(max)),
            Renewed::Lost
        ));
        assert!(matches!(judge(Some(Value::Nil), Some(max)), Renewed::Lost));
        assert!(matches!(judge(None, Some(max)), Renewed::Retry));
    }
}
