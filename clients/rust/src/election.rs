//! Leader election on an exclusive lock: campaign, observe, resign.
//!
//! The leader is whoever holds the election's key exclusively. A campaign
//! waits in the lock's FIFO queue and leads once granted; the watchdog
//! renews its lease, and its fencing token is the term. Followers learn
//! each change with `DLOCK.WATCH key last-term timeout`, which the server
//! answers the moment the newest hold of the key changes, so no change is
//! missed and nothing polls.
//!
//! # The owner string (the same in every dlock client)
//!
//! The leader's identity is a value the caller gives (a host, an address).
//! A campaign holds the lock under the owner `<value>#<id>`, where `<id>` is
//! 32 lowercase hexadecimal digits new for each campaign (a UUID v4 without
//! dashes). The id keeps every campaign's owner unique, so two candidates
//! announcing the same value never share a hold through re-entry. A reader
//! takes the value as the owner up to its last `#` (the whole owner when it
//! has none: a hold taken outside an election). The value is 1 to 479 bytes
//! (an owner is at most 512) and may contain `#` itself.

use std::future::Future;
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::conn::{blocking_read, Caller};
use crate::{Client, Error, Guard, Result, DEFAULT_LEASE};

/// Separates a campaign's value from its unique id in the owner string.
pub const OWNER_SEPARATOR: u8 = b'#';

/// The longest value a campaign can announce: an owner is at most 512
/// bytes, and the separator and the 32-digit id take 33.
pub const MAX_VALUE_LEN: usize = 512 - 33;

/// How long one `DLOCK.WATCH` waits on the server when nothing changes
/// before the observer asks again (default): the read timeout of each wait
/// is this plus the client's wait margin, so a dead connection is noticed
/// within that time.
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The owner string of a campaign announcing `value`: `<value>#<32 hex>`.
///
/// ```
/// let owner = dlock_client::election_owner(b"10.0.0.7:8080");
/// assert_eq!(owner.len(), 13 + 1 + 32);
/// assert_eq!(dlock_client::election_value(&owner), b"10.0.0.7:8080");
/// ```
pub fn election_owner(value: &[u8]) -> Vec<u8> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut owner = Vec::with_capacity(value.len() + 1 + id.len());
    owner.extend_from_slice(value);
    owner.push(OWNER_SEPARATOR);
    owner.extend_from_slice(id.as_bytes());
    owner
}

/// The value a campaign announced, read from its owner string: the owner up
/// to its last `#`, or the whole owner when it has none.
///
/// ```
/// assert_eq!(dlock_client::election_value(b"a#b#0123"), b"a#b");
/// assert_eq!(dlock_client::election_value(b"plain-owner"), b"plain-owner");
/// ```
pub fn election_value(owner: &[u8]) -> &[u8] {
    match owner.iter().rposition(|&byte| byte == OWNER_SEPARATOR) {
        Some(at) => &owner[..at],
        None => owner,
    }
}

/// An election on one key: made by [`Client::election`]. Set its options,
/// then [`campaign`](Election::campaign), ask for the
/// [`leader`](Election::leader) or [`observe`](Election::observe) it.
///
/// ```no_run
/// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
/// # async fn serve(_term: u64) {}
/// use std::time::Duration;
/// let election = dlock.election("billing:leader").lease(Duration::from_secs(10));
/// let leadership = election.campaign("10.0.0.7:8080").await?; // waits to lead
/// tokio::select! {
///     _ = serve(leadership.term()) => {}          // pass the term to what it writes
///     _ = leadership.lost() => eprintln!("no longer the leader: stop at once"),
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    client: Client,
    key: Vec<u8>,
    lease: Duration,
    session: bool,
    watch_timeout: Duration,
}

/// Who leads an election: read by [`Election::leader`] and
/// [`Observer::next`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The owner string of the leader's hold (`<value>#<id>`).
    pub owner: Vec<u8>,
    /// The value the leader announced (its address, host name, ...).
    pub value: Vec<u8>,
    /// The leader's term: the fencing token of its hold. Terms only grow.
    pub term: u64,
    /// What was left of its lease when the server answered (None when the
    /// server did not say).
    pub pttl: Option<Duration>,
}

impl Leader {
    fn new(owner: Vec<u8>, term: u64, pttl: i64) -> Leader {
        Leader {
            value: election_value(&owner).to_vec(),
            owner,
            term,
            pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        }
    }

    /// The value as text (lossy for bytes that are not UTF-8).
    ///
    /// ```
    /// # let leader = dlock_client::Leader { owner: b"h#0".to_vec(), value: b"h".to_vec(), term: 1, pttl: None };
    /// assert_eq!(leader.value_str(), "h");
    /// ```
    pub fn value_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }
}

impl Election {
    pub(crate) fn new(client: Client, key: Vec<u8>) -> Election {
        Election {
            client,
            key,
            lease: DEFAULT_LEASE,
            session: false,
            watch_timeout: DEFAULT_WATCH_TIMEOUT,
        }
    }

    /// The election's key (the lock the leader holds).
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// assert_eq!(dlock.election("billing:leader").key(), b"billing:leader");
    /// # }
    /// ```
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The leader's lease (default 30 s), renewed by the watchdog while the
    /// leader lives: how long a crashed leader keeps the others waiting.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// use std::time::Duration;
    /// let election = dlock.election("billing:leader").lease(Duration::from_secs(5));
    /// # }
    /// ```
    pub fn lease(mut self, lease: Duration) -> Election {
        self.lease = lease;
        self
    }

    /// Ties the leadership to its connection (`SESSION`): when the leader's
    /// process dies, the server ends its term as soon as the connection
    /// closes, without waiting for the lease.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// let election = dlock.election("billing:leader").session();
    /// # }
    /// ```
    pub fn session(mut self) -> Election {
        self.session = true;
        self
    }

    /// How long each `DLOCK.WATCH` of an observer waits on the server before
    /// it asks again (default [`DEFAULT_WATCH_TIMEOUT`], at least 1 ms);
    /// its read timeout is this plus the client's wait margin.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// use std::time::Duration;
    /// let election = dlock.election("billing:leader").watch_timeout(Duration::from_secs(5));
    /// # }
    /// ```
    pub fn watch_timeout(mut self, timeout: Duration) -> Election {
        self.watch_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Waits to lead, announcing `value` (1 to [`MAX_VALUE_LEN`] bytes):
    /// queues for the election's lock under a new unique owner
    /// (`<value>#<id>`) and returns once granted. Candidates lead in the
    /// order they campaigned.
    ///
    /// Cancel-safe as [`LockBuilder::acquire`](crate::LockBuilder::acquire):
    /// drop the future (or wrap it in `tokio::time::timeout`) to give up,
    /// and nothing is left queued or held on the server.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("billing:leader").campaign("10.0.0.7:8080").await?;
    /// println!("leading, term {}", leadership.term());
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, value: impl AsRef<[u8]>) -> Result<Leadership> {
        self.campaign_with(value.as_ref(), None).await
    }

    /// [`campaign`](Election::campaign) for at most `wait`:
    /// [`Error::Busy`] when another candidate still leads then.
    /// `Duration::ZERO` does not wait at all (and leaves no place in the
    /// queue).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let election = dlock.election("billing:leader");
    /// match election.campaign_within("10.0.0.7:8080", Duration::ZERO).await {
    ///     Ok(leadership) => println!("leading, term {}", leadership.term()),
    ///     Err(dlock_client::Error::Busy) => println!("someone else leads"),
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn campaign_within(
        &self,
        value: impl AsRef<[u8]>,
        wait: Duration,
    ) -> Result<Leadership> {
        self.campaign_with(value.as_ref(), Some(wait)).await
    }

    async fn campaign_with(&self, value: &[u8], wait: Option<Duration>) -> Result<Leadership> {
        if value.is_empty() || value.len() > MAX_VALUE_LEN {
            return Err(Error::InvalidArgument(format!(
                "a campaign's value must be 1 to {MAX_VALUE_LEN} bytes"
            )));
        }
        let owner = election_owner(value);
        let mut request = self
            .client
            .lock(&self.key)
            .lease(self.lease)
            .unique_owner(owner);
        request = match wait {
            None => request.wait_forever(),
            Some(wait) => request.wait(wait),
        };
        if self.session {
            request = request.session();
        }
        let guard = request.acquire().await?;
        Ok(Leadership {
            value: value.to_vec(),
            guard,
        })
    }

    /// Who leads now (`DLOCK.INFO`), or None between terms.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// match dlock.election("billing:leader").leader().await? {
    ///     Some(leader) => println!("{} leads, term {}", leader.value_str(), leader.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let mut cmd = redis::cmd("DLOCK.INFO");
        cmd.arg(self.key.as_slice());
        let reply = self
            .client
            .inner
            .shared
            .run_idempotent(&self.key, &cmd)
            .await?;
        leader_of_info(reply)
    }

    /// The leadership changes, as they happen: first who leads now, then
    /// every new leader and every end of a term (None), each as soon as the
    /// server makes it. A change that happens while the caller is not
    /// reading is not queued: the next read gives the newest state, so an
    /// observer never misses the latest leader and never reads a stale one.
    ///
    /// Each wait is a `DLOCK.WATCH` on a pooled connection of its own.
    /// Dropping the observer, or the future of [`Observer::next`], ends the
    /// wait on the server (`CLIENT UNBLOCK`).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let mut observer = dlock.election("billing:leader").observe();
    /// loop {
    ///     match observer.next().await? {
    ///         Some(leader) => println!("leader {} (term {})", leader.value_str(), leader.term),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            last: None,
            failures: 0,
        }
    }

    /// One `DLOCK.WATCH key last timeout` on a dedicated connection, in a
    /// task of its own so that a dropped caller still ends the server-side
    /// wait (`CLIENT UNBLOCK`) and the connection goes back to the pool.
    /// `Ok(None)`: the server's timeout passed without a change.
    async fn watch_once(&self, last: u64) -> Result<Option<Option<Leader>>> {
        let (sender, receiver) = oneshot::channel();
        let client = self.client.clone();
        let key = self.key.clone();
        let wait = self.watch_timeout;
        let runtime = client.inner.runtime.clone();
        runtime.spawn(async move {
            let caller = Caller::new(sender);
            let inner = &client.inner;
            let deadline =
                Instant::now().checked_add(wait.saturating_add(inner.config.wait_margin));
            let wait_ms = u64::try_from(wait.as_millis())
                .unwrap_or(u64::MAX)
                .clamp(1, (1 << 53) - 1);
            let mut cmd = redis::cmd("DLOCK.WATCH");
            cmd.arg(key.as_slice()).arg(last).arg(wait_ms);
            if let Some(value) = blocking_read(inner, &caller, &key, &cmd, deadline).await {
                caller.answer(parse_watch(value));
            }
        });
        match receiver.await {
            Ok(result) => result,
            Err(_) => Err(Error::UnexpectedReply(
                "the watching task ended without a result".into(),
            )),
        }
    }
}

/// The leadership a campaign won: the guard of the election's lock, renewed
/// by the watchdog. Its [`term`](Leadership::term) is the hold's fencing
/// token.
///
/// A leader must stop acting as leader as soon as [`lost`](Leadership::lost)
/// resolves (the lease ran out, the key was deleted, a failover lost the
/// grant), and pass its term to whatever it writes, so that a resource can
/// refuse the writes of a deposed leader that has not noticed yet.
/// Dropping it resigns in the background.
///
/// ```no_run
/// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
/// # async fn lead(_term: u64) {}
/// let leadership = dlock.election("billing:leader").campaign("host-a").await?;
/// tokio::select! {
///     _ = lead(leadership.term()) => leadership.resign().await?,
///     _ = leadership.lost() => eprintln!("deposed"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Leadership {
    value: Vec<u8>,
    guard: Guard,
}

impl Leadership {
    /// The term: the fencing token of the leader's hold, larger than every
    /// earlier term of this election.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// let term: u64 = leadership.term();
    /// # Ok(()) }
    /// ```
    pub fn term(&self) -> u64 {
        self.guard.token()
    }

    /// The value this leader announced.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// assert_eq!(leadership.value(), b"host-a");
    /// # Ok(()) }
    /// ```
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The owner string of the hold (`<value>#<id>`).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// assert!(leadership.owner().starts_with(b"host-a#"));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &[u8] {
        self.guard.owner()
    }

    /// True while this process leads as far as it knows (not lost, not
    /// resigned).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// assert!(leadership.is_leader());
    /// # Ok(()) }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership is lost (or resigned): stop leading.
    /// The future does not borrow the leadership.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// leadership.lost().await;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.guard.lost()
    }

    /// The guard of the election's lock.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// assert_eq!(leadership.guard().key(), b"e");
    /// # Ok(()) }
    /// ```
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Steps down: releases the election's lock, which hands it to the next
    /// candidate in the same step. A lost leadership resigns without error.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("e").campaign("host-a").await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }
}

/// The leadership changes of an election: made by [`Election::observe`].
/// Read them with [`next`](Observer::next), or as a
/// [`Stream`](futures_util::Stream) with [`into_stream`](Observer::into_stream).
#[derive(Debug)]
pub struct Observer {
    election: Election,
    /// The term of the last state given to the caller (0: no leader);
    /// None before the first.
    last: Option<u64>,
    /// Failed reads in a row, for the pause before the next one.
    failures: u32,
}

impl Observer {
    /// The next state of the election: at first who leads now (None: no
    /// leader), then waits for a change. An error (a connection failure,
    /// `WRONGTYPE`, ...) leaves the observer usable: the next call picks up
    /// where this one stopped, after a short pause that grows while errors
    /// repeat.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let mut observer = dlock.election("e").observe();
    /// let now = observer.next().await?;       // who leads now
    /// let change = observer.next().await?;    // waits for the next change
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        if self.failures > 0 {
            let pause = Duration::from_millis(50) * (1 << self.failures.min(5));
            tokio::time::sleep(pause.min(Duration::from_secs(1))).await;
        }
        let result = self.read().await;
        match &result {
            Ok(state) => {
                self.failures = 0;
                self.last = Some(state.as_ref().map_or(0, |leader| leader.term));
            }
            Err(_) => self.failures = self.failures.saturating_add(1),
        }
        result
    }

    async fn read(&mut self) -> Result<Option<Leader>> {
        let Some(last) = self.last else {
            return self.election.leader().await;
        };
        loop {
            if let Some(state) = self.election.watch_once(last).await? {
                return Ok(state);
            }
        }
    }

    /// The term of the last state read (0 when it had no leader), None
    /// before the first read.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// assert_eq!(dlock.election("e").observe().last_term(), None);
    /// # }
    /// ```
    pub fn last_term(&self) -> Option<u64> {
        self.last
    }

    /// The changes as a [`Stream`](futures_util::Stream) that never ends by
    /// itself (errors are items; drop it to stop).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use futures_util::StreamExt;
    /// let mut changes = Box::pin(dlock.election("e").observe().into_stream());
    /// while let Some(change) = changes.next().await {
    ///     println!("{:?}", change?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<Option<Leader>>> + Send {
        futures_util::stream::unfold(self, |mut observer| async move {
            let item = observer.next().await;
            Some((item, observer))
        })
    }
}

fn text_of(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.as_bytes()),
        _ => None,
    }
}

fn int_of(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// The leader in `DLOCK.INFO`'s reply: the exclusive holder, or (a key
/// held shared, outside an election) the holder of the newest token.
fn leader_of_info(reply: Value) -> Result<Option<Leader>> {
    let fields: Vec<(Value, Value)> = match reply {
        Value::Nil => return Ok(None),
        Value::Array(items) => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut items = items.into_iter();
            while let (Some(name), Some(value)) = (items.next(), items.next()) {
                pairs.push((name, value));
            }
            pairs
        }
        Value::Map(pairs) => pairs,
        Value::ServerError(error) => {
            return Err(Error::from_server(
                error.code(),
                error.details().unwrap_or(""),
            ))
        }
        other => {
            return Err(Error::UnexpectedReply(format!(
                "DLOCK.INFO replied {other:?}"
            )))
        }
    };
    let field = |name: &[u8]| {
        fields
            .iter()
            .find(|(field, _)| text_of(field) == Some(name))
            .map(|(_, value)| value)
    };
    if let (Some(owner), Some(token), Some(pttl)) = (
        field(b"owner").and_then(text_of),
        field(b"token").and_then(int_of),
        field(b"pttl").and_then(int_of),
    ) {
        return Ok(Some(Leader::new(owner.to_vec(), token.max(0) as u64, pttl)));
    }
    let mut newest: Option<Leader> = None;
    if let Some(Value::Array(holders)) = field(b"holders") {
        for holder in holders {
            let Value::Array(entry) = holder else {
                continue;
            };
            let (Some(owner), Some(token), Some(pttl)) = (
                entry.first().and_then(text_of),
                entry.get(3).and_then(int_of),
                entry.get(4).and_then(int_of),
            ) else {
                continue;
            };
            let token = token.max(0) as u64;
            if newest.as_ref().is_none_or(|leader| token > leader.term) {
                newest = Some(Leader::new(owner.to_vec(), token, pttl));
            }
        }
    }
    Ok(newest)
}

/// `DLOCK.WATCH`'s reply: `Ok(None)` for null (its timeout passed),
/// `Ok(Some(None))` for `[0, nil, -1]` (no leader), the leader otherwise.
fn parse_watch(reply: Value) -> Result<Option<Option<Leader>>> {
    match reply {
        Value::Nil => Ok(None),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(0), Value::Nil, _] => Ok(Some(None)),
            [Value::Int(token), owner, pttl] => match (text_of(owner), int_of(pttl)) {
                (Some(owner), Some(pttl)) => Ok(Some(Some(Leader::new(
                    owner.to_vec(),
                    (*token).max(0) as u64,
                    pttl,
                )))),
                _ => Err(Error::UnexpectedReply(format!(
                    "DLOCK.WATCH replied {items:?}"
                ))),
            },
            _ => Err(Error::UnexpectedReply(format!(
                "DLOCK.WATCH replied {items:?}"
            ))),
        },
        Value::ServerError(error) => Err(Error::from_server(
            error.code(),
            error.details().unwrap_or(""),
        )),
        other => Err(Error::UnexpectedReply(format!(
            "DLOCK.WATCH replied {other:?}"
        ))),
    }
}
