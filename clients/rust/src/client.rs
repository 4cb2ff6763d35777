//! The client: connections, configuration and the entry points of every
//! primitive.

use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;

use crate::cluster;
use crate::conn::{Opener, Pool, Shared};
use crate::watchdog::Watchdog;
use crate::{Election, Error, Latch, LockBuilder, Result};

/// Settings of a [`Client`]: the watchdog's pace and safety margins, and
/// connection timeouts. Every setting has a default; change the ones you
/// need.
///
/// ```
/// use std::time::Duration;
/// let config = dlock_client::Config::default()
///     .renew_divisor(4)                          // renew at a quarter of the lease
///     .safety_margin(Duration::from_millis(10))  // count a lease as lost 10 ms early
///     .wait_margin(Duration::from_secs(1));      // read timeout of a wait: wait + 1 s
/// assert_eq!(config.renew_period(Duration::from_secs(30)), Duration::from_millis(7500));
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) renew_divisor: u32,
    pub(crate) safety_margin: Duration,
    pub(crate) clock_drift: f64,
    pub(crate) wait_margin: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

impl Default for Config {
    /// Renewal at a third of the lease, a safety margin of 5 ms plus 1% of
    /// the lease, a wait margin of 2 s, 5 s response and connect timeouts.
    ///
    /// ```
    /// let config = dlock_client::Config::default();
    /// # let _ = config;
    /// ```
    fn default() -> Config {
        Config {
            renew_divisor: 3,
            safety_margin: Duration::from_millis(5),
            clock_drift: 0.01,
            wait_margin: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl Config {
    /// Renew each lease every `lease / divisor` (default 3; at least 2, a
    /// smaller value is taken as 2). A single lock can override it with
    /// [`LockBuilder::renew_every`].
    ///
    /// ```
    /// let config = dlock_client::Config::default().renew_divisor(5);
    /// # let _ = config;
    /// ```
    pub fn renew_divisor(mut self, divisor: u32) -> Config {
        self.renew_divisor = divisor.max(2);
        self
    }

    /// The fixed part of the safety margin: a guard counts as lost when no
    /// renewal succeeded by `sent + lease - margin`, measured on the
    /// client's monotonic clock from the moment the last successful grant or
    /// renewal was *sent* (default 5 ms).
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = dlock_client::Config::default().safety_margin(Duration::from_millis(20));
    /// # let _ = config;
    /// ```
    pub fn safety_margin(mut self, margin: Duration) -> Config {
        self.safety_margin = margin;
        self
    }

    /// The part of the safety margin proportional to the lease, for the
    /// difference in clock rate between client and server (default 0.01, as
    /// Redlock's drift factor; clamped to 0..=0.5).
    ///
    /// ```
    /// let config = dlock_client::Config::default().clock_drift(0.02);
    /// # let _ = config;
    /// ```
    pub fn clock_drift(mut self, fraction: f64) -> Config {
        self.clock_drift = if fraction.is_finite() {
            fraction.clamp(0.0, 0.5)
        } else {
            0.01
        };
        self
    }

    /// How much longer than a wait the client reads before it gives up on
    /// the server (default 2 s): the read timeout of a blocking acquire is
    /// `wait + margin`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = dlock_client::Config::default().wait_margin(Duration::from_millis(500));
    /// # let _ = config;
    /// ```
    pub fn wait_margin(mut self, margin: Duration) -> Config {
        self.wait_margin = margin;
        self
    }

    /// The response timeout of the shared connection, which carries
    /// immediate acquires, renewals and releases (default 5 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = dlock_client::Config::default().response_timeout(Duration::from_secs(1));
    /// # let _ = config;
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Config {
        self.response_timeout = timeout;
        self
    }

    /// The timeout of each connection attempt (default 5 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = dlock_client::Config::default().connect_timeout(Duration::from_secs(2));
    /// # let _ = config;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Config {
        self.connect_timeout = timeout;
        self
    }

    /// The renewal period of a lease under this configuration.
    ///
    /// ```
    /// use std::time::Duration;
    /// let period = dlock_client::Config::default().renew_period(Duration::from_millis(300));
    /// assert_eq!(period, Duration::from_millis(100));
    /// ```
    pub fn renew_period(&self, lease: Duration) -> Duration {
        (lease / self.renew_divisor.max(2)).max(Duration::from_millis(1))
    }

    /// The safety margin for a lease: the fixed margin plus the clock-drift
    /// share of the lease.
    ///
    /// ```
    /// use std::time::Duration;
    /// let margin = dlock_client::Config::default().margin_for(Duration::from_secs(1));
    /// assert_eq!(margin, Duration::from_millis(15));
    /// ```
    pub fn margin_for(&self, lease: Duration) -> Duration {
        self.safety_margin + lease.mul_f64(self.clock_drift)
    }
}

/// A connection to dlock (one server, or a Redis Cluster) and the watchdog
/// that renews the leases of every guard it hands out. Cheap to clone: the
/// clones share the connections and the watchdog.
///
/// Create it inside a tokio runtime (it starts the watchdog task there).
///
/// ```no_run
/// # async fn demo() -> dlock_client::Result<()> {
/// use std::time::Duration;
/// let dlock = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
/// let guard = dlock
///     .lock("orders:42")
///     .lease(Duration::from_secs(30))
///     .wait(Duration::from_secs(10))
///     .acquire()
///     .await?;
/// println!("fencing token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) opener: Opener,
    pub(crate) shared: Shared,
    pub(crate) pool: Pool,
    pub(crate) config: Config,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) runtime: tokio::runtime::Handle,
    /// The owner of the last refused no-wait fair request per key, taken
    /// by the next one without an owner of its own, so that a poller
    /// keeps its reservation (R8); see [`LockBuilder::fair`].
    pub(crate) fair_owners: std::sync::Mutex<std::collections::HashMap<Vec<u8>, Arc<[u8]>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watchdog.shut_down();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cluster", &self.inner.shared.is_cluster())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Client {
    /// Connects to one server from a URL (`redis://host:port/db`,
    /// `rediss://...`, `redis+unix:///path`), with the default [`Config`].
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let dlock = dlock_client::Client::open("redis://127.0.0.1:6379/").await?;
    /// # let _ = dlock; Ok(()) }
    /// ```
    pub async fn open(url: impl IntoConnectionInfo) -> Result<Client> {
        Client::open_with(url, Config::default()).await
    }

    /// Connects to one server from a URL with the given [`Config`].
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let config = dlock_client::Config::default().renew_divisor(4);
    /// let dlock = dlock_client::Client::open_with("redis://127.0.0.1:6379/", config).await?;
    /// # let _ = dlock; Ok(()) }
    /// ```
    pub async fn open_with(url: impl IntoConnectionInfo, config: Config) -> Result<Client> {
        let client = redis::Client::open(url)?;
        Client::from_redis(client, config).await
    }

    /// Wraps a [`redis::Client`] (one server).
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let redis = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
    /// let dlock = dlock_client::Client::from_redis(redis, dlock_client::Config::default()).await?;
    /// # let _ = dlock; Ok(()) }
    /// ```
    pub async fn from_redis(client: redis::Client, config: Config) -> Result<Client> {
        Client::start(Opener::Standalone(Box::new(client)), config).await
    }

    /// Connects to a Redis Cluster through any of its nodes. Keys of a
    /// multi-lock must share a slot: use hash tags (`{order:42}:payment`).
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let dlock = dlock_client::Client::cluster(vec!["redis://127.0.0.1:7000/"]).await?;
    /// let guard = dlock.lock("{order:42}:payment").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Client> {
        let builder = redis::cluster::ClusterClientBuilder::new(nodes);
        Client::from_cluster(builder, Config::default()).await
    }

    /// Connects to a Redis Cluster set up with a
    /// [`redis::cluster::ClusterClientBuilder`] (credentials, TLS, timeouts).
    /// The client turns the builder's retries off (`retries(0)`): the redis
    /// crate would re-send a lock command after a connection error, when it
    /// may have run already. The client itself follows `MOVED` and `ASK`,
    /// and waits out `TRYAGAIN` and `CLUSTERDOWN`.
    ///
    /// ```no_run
    /// # async fn demo() -> dlock_client::Result<()> {
    /// let builder = redis::cluster::ClusterClientBuilder::new(vec!["redis://127.0.0.1:7000/"])
    ///     .password("secret");
    /// let dlock = dlock_client::Client::from_cluster(builder, dlock_client::Config::default()).await?;
    /// # let _ = dlock; Ok(()) }
    /// ```
    pub async fn from_cluster(
        builder: redis::cluster::ClusterClientBuilder,
        config: Config,
    ) -> Result<Client> {
        let client = cluster::build(builder)?;
        Client::start(Opener::Cluster(Box::new(client)), config).await
    }

    async fn start(opener: Opener, config: Config) -> Result<Client> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::InvalidArgument(
                "dlock_client::Client must be created inside a tokio runtime".into(),
            )
        })?;
        let shared = opener.shared(&config).await?;
        let watchdog = Arc::new(Watchdog::new());
        runtime.spawn(Watchdog::run(watchdog.clone(), shared.clone()));
        Ok(Client {
            inner: Arc::new(Inner {
                opener,
                shared,
                pool: Pool::new(),
                config,
                watchdog,
                runtime,
                fair_owners: Default::default(),
            }),
        })
    }

    /// An exclusive lock (a mutex) on `name`: one owner at a time,
    /// re-entrant for the same owner. Set its options, then `acquire()`.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        LockBuilder::new(self.clone(), Arc::from([name.as_ref().to_vec()]), false)
    }

    /// The read side of the read-write lock `name`: a shared hold, which
    /// coexists with other readers and excludes writers. Readers arriving
    /// after a waiting writer queue behind it.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let reader = dlock.read_lock("catalog").acquire().await?;
    /// let another = dlock.read_lock("catalog").acquire().await?;   // readers share
    /// reader.release().await?;
    /// another.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        self.lock(name).shared()
    }

    /// The write side of the read-write lock `name`: an exclusive hold on the
    /// same lock as [`Client::read_lock`].
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let writer = dlock.write_lock("catalog").wait(Duration::from_secs(5)).acquire().await?;
    /// writer.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self, name: impl AsRef<[u8]>) -> LockBuilder {
        self.lock(name)
    }

    /// A semaphore: at most `limit` owners hold `name` at once (shared holds
    /// with `LIMIT`). Each permit has its own lease, so a crashed holder's
    /// permit comes back when its lease ends.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let permit = dlock.semaphore("api:payments", 10).wait(Duration::from_secs(5)).acquire().await?;
    /// // at most 10 tasks run this at once
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<[u8]>, limit: u32) -> LockBuilder {
        self.lock(name).shared().limit(limit)
    }

    /// A leader election on the key `name`: candidates
    /// [`campaign`](Election::campaign) with a value (their address), the
    /// one holding the key's lock leads, and anyone can ask who
    /// [leads](Election::leader) or [observe](Election::observe) each change.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let leadership = dlock.election("billing:leader").campaign("10.0.0.7:8080").await?;
    /// println!("leading in term {}", leadership.term());
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl AsRef<[u8]>) -> Election {
        Election::new(self.clone(), name.as_ref().to_vec())
    }

    /// Several locks taken in one atomic step (`DLOCK.MACQUIRE`): all of them
    /// or none, waiting in every key's queue at once, so two multi-locks can
    /// never deadlock. In a Cluster all keys must share a slot (hash tags).
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let guard = dlock
    ///     .multi_lock(["account:{bank}:1", "account:{bank}:2"])
    ///     .wait(Duration::from_secs(5))
    ///     .acquire()
    ///     .await?;
    /// for (key, token) in guard.tokens() {
    ///     println!("{} -> {token}", String::from_utf8_lossy(key));
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I, K>(&self, names: I) -> LockBuilder
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let keys: Vec<Vec<u8>> = names.into_iter().map(|k| k.as_ref().to_vec()).collect();
        let keys = Arc::from(keys);
        LockBuilder::new(self.clone(), keys, true)
    }

    /// The count-down latch `name`.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// use std::time::Duration;
    /// let latch = dlock.latch("batch:7");
    /// latch.create(3, Duration::from_secs(60)).await?;
    /// latch.count_down(1).await?;
    /// # Ok(()) }
    /// ```
    pub fn latch(&self, name: impl AsRef<[u8]>) -> Latch {
        Latch::new(self.clone(), name.as_ref().to_vec())
    }

    /// The configuration this client runs with.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// println!("{:?}", dlock.config());
    /// # }
    /// ```
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The number of guards whose leases the watchdog keeps renewing.
    ///
    /// ```no_run
    /// # async fn demo(dlock: dlock_client::Client) -> dlock_client::Result<()> {
    /// let guard = dlock.lock("orders:42").acquire().await?;
    /// assert_eq!(dlock.watched(), 1);
    /// # Ok(()) }
    /// ```
    pub fn watched(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// The number of renewal rounds the watchdog has sent (each round is
    /// one pipeline, or one per slot in a Cluster): for benchmarks.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// println!("{} renewal rounds so far", dlock.renewal_rounds());
    /// # }
    /// ```
    pub fn renewal_rounds(&self) -> u64 {
        self.inner.watchdog.rounds()
    }

    /// Test hook: stops (`true`) or resumes (`false`) sending renewals,
    /// while lost-lease detection by the client's clock goes on. Lets a test
    /// let a lease run out without touching the server.
    ///
    /// ```no_run
    /// # fn demo(dlock: dlock_client::Client) {
    /// dlock.pause_renewals(true);
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn pause_renewals(&self, paused: bool) {
        self.inner.watchdog.pause(paused);
    }
}
