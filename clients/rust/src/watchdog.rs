//! The watchdog: one task per client that renews every live guard's lease,
//! pipelining the renewals that fall due together, and marks a guard lost
//! when the server answers NOTOWNER or when no renewal succeeded before the
//! lease's deadline on the client's monotonic clock (less a safety margin).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Pipeline, Value};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::cluster::route_of;
use crate::conn::Shared;

/// What a guard and the watchdog share about one hold.
pub(crate) struct HoldState {
    lost: watch::Sender<bool>,
    released: AtomicBool,
}

impl HoldState {
    pub(crate) fn new() -> Arc<HoldState> {
        Arc::new(HoldState {
            lost: watch::Sender::new(false),
            released: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    /// Marks the hold released; true the first time only.
    pub(crate) fn mark_released(&self) -> bool {
        !self.released.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }
}

/// A guard under watch.
struct Entry {
    keys: Arc<[Vec<u8>]>,
    tokens: Arc<[u64]>,
    owner: Arc<[u8]>,
    ttl_ms: u64,
    lease: Duration,
    margin: Duration,
    period: Duration,
    next_renewal: Instant,
    deadline: Instant,
    in_flight: bool,
    hold: Arc<HoldState>,
}

/// What the watchdog needs to watch a new guard.
pub(crate) struct Watch {
    pub(crate) keys: Arc<[Vec<u8>]>,
    /// The token granted on each key: a renewal that answers another one
    /// finds the lock held by a new hold of the same owner name (R3.1).
    pub(crate) tokens: Arc<[u64]>,
    pub(crate) owner: Arc<[u8]>,
    pub(crate) lease: Duration,
    pub(crate) margin: Duration,
    pub(crate) period: Duration,
    /// When the command that granted the hold was sent.
    pub(crate) sent: Instant,
    pub(crate) hold: Arc<HoldState>,
}

pub(crate) struct Watchdog {
    entries: Mutex<HashMap<u64, Entry>>,
    /// When the watchdog task looks again (None while it is awake): a new
    /// guard wakes it only if it needs it sooner.
    sleeps_until: Mutex<Option<Instant>>,
    next_id: AtomicU64,
    wake: Notify,
    shutdown: AtomicBool,
    paused: AtomicBool,
    /// Renewal rounds sent so far (each one pipeline per slot).
    rounds: AtomicU64,
}

/// One guard's renewal in a round.
struct Due {
    id: u64,
    keys: Arc<[Vec<u8>]>,
    tokens: Arc<[u64]>,
    owner: Arc<[u8]>,
    ttl_ms: u64,
}

pub(crate) enum Renewed {
    /// Every key renewed.
    Yes,
    /// The server says the hold is gone (NOTOWNER, or the key now holds
    /// another type).
    Lost,
    /// No answer (connection) or a transient refusal (OOM, READONLY,
    /// LOADING, ...): try again soon, until the deadline.
    Retry,
}

impl Watchdog {
    pub(crate) fn new() -> Watchdog {
        Watchdog {
            entries: Mutex::new(HashMap::new()),
            sleeps_until: Mutex::new(None),
            next_id: AtomicU64::new(1),
            wake: Notify::new(),
            shutdown: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }

    /// Starts watching a hold; returns its id for [`Watchdog::unwatch`].
    pub(crate) fn watch(&self, watch: Watch) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let ttl_ms = u64::try_from(watch.lease.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let entry = Entry {
            keys: watch.keys,
            tokens: watch.tokens,
            owner: watch.owner,
            ttl_ms,
            lease: watch.lease,
            margin: watch.margin,
            period: watch.period,
            next_renewal: watch.sent + watch.period,
            deadline: deadline_of(watch.sent, watch.lease, watch.margin),
            in_flight: false,
            hold: watch.hold,
        };
        let soonest = entry.next_renewal.min(entry.deadline);
        self.table().insert(id, entry);
        let sleeps_until = *self.sleeps_until.lock().unwrap_or_else(|e| e.into_inner());
        if sleeps_until.is_none_or(|at| soonest < at) {
            self.wake.notify_one();
        }
        id
    }

    /// A renewal by hand ([`Guard::renew`](crate::Guard::renew)) sent at
    /// `sent` succeeded: moves the guard's deadline as a round would.
    pub(crate) fn renewed(&self, id: u64, sent: Instant) {
        if let Some(entry) = self.table().get_mut(&id) {
            let deadline = deadline_of(sent, entry.lease, entry.margin);
            if deadline > entry.deadline {
                entry.deadline = deadline;
            }
        }
    }

    /// The guard's local deadline (R3.2), or None when it is no longer
    /// watched (lost, or released).
    pub(crate) fn deadline(&self, id: u64) -> Option<Instant> {
        self.table().get(&id).map(|entry| entry.deadline)
    }

    /// A renewal by hand found the hold gone: the guard is lost.
    pub(crate) fn lost(&self, id: u64) {
        if let Some(entry) = self.table().remove(&id) {
            entry.hold.mark_lost();
        }
    }

    pub(crate) fn unwatch(&self, id: u64) {
        self.table().remove(&id);
    }

    pub(crate) fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        self.wake.notify_one();
    }

    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Marks overdue guards lost and takes the renewals due now (and the
    /// ones due soon after); returns them and when to look again.
    fn collect(&self, now: Instant, paused: bool, mut wake_at: Instant) -> (Vec<Due>, Instant) {
        let mut due = Vec::new();
        let mut table = self.table();
        table.retain(|_, entry| {
            if entry.hold.is_lost() {
                return false;
            }
            if now >= entry.deadline {
                entry.hold.mark_lost();
                return false;
            }
            wake_at = wake_at.min(entry.deadline);
            true
        });
        let any_due = !paused
            && table
                .values()
                .any(|entry| !entry.in_flight && now >= entry.next_renewal);
        for (id, entry) in table.iter_mut() {
            if entry.in_flight || paused {
                continue;
            }
            // A round also takes the renewals due within the next half of
            // their period: renewing early is harmless, and guards taken at
            // different moments fall into step (two groups of one lease
            // merge within a period), so a client's guards of one lease
            // cost the server one pipelined round per period.
            let early = entry
                .next_renewal
                .checked_sub(entry.period / 2)
                .unwrap_or(now);
            if any_due && now >= early {
                entry.in_flight = true;
                due.push(Due {
                    id: *id,
                    keys: entry.keys.clone(),
                    tokens: entry.tokens.clone(),
                    owner: entry.owner.clone(),
                    ttl_ms: entry.ttl_ms,
                });
            } else {
                wake_at = wake_at.min(entry.next_renewal);
            }
        }
        (due, wake_at)
    }

    /// The watchdog task: sleeps until the next renewal or deadline, sends
    /// the renewals due (in a task of their own, so that a slow round never
    /// delays the deadline checks) and marks overdue guards lost.
    pub(crate) async fn run(watchdog: Arc<Watchdog>, shared: Shared) {
        loop {
            if watchdog.shutdown.load(Ordering::Acquire) {
                for entry in watchdog.table().values() {
                    entry.hold.mark_lost();
                }
                return;
            }
            let now = Instant::now();
            let paused = watchdog.paused.load(Ordering::Acquire);
            let (due, wake_at) = watchdog.collect(now, paused, now + Duration::from_secs(3600));
            if !due.is_empty() {
                watchdog.rounds.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(Watchdog::round(watchdog.clone(), shared.clone(), due, now));
            }
            *watchdog
                .sleeps_until
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(wake_at);
            tokio::select! {
                _ = tokio::time::sleep_until(wake_at) => {}
                _ = watchdog.wake.notified() => {}
            }
            *watchdog
                .sleeps_until
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// One round of renewals sent at `sent`: one pipeline on a single
    /// server, one per slot in a Cluster (all sent at once).
    async fn round(watchdog: Arc<Watchdog>, shared: Shared, due: Vec<Due>, sent: Instant) {
        let mut groups: HashMap<Option<redis::cluster_routing::Route>, Vec<usize>> = HashMap::new();
        for (index, renewal) in due.iter().enumerate() {
            let route = match (&shared, renewal.keys.first()) {
                (Shared::Cluster(_), Some(key)) => Some(route_of(key)),
                _ => None,
            };
            groups.entry(route).or_default().push(index);
        }
        let sends = groups.into_values().map(|members| {
            let mut pipe = Pipeline::new();
            pipe.ignore_errors();
            for &index in &members {
                let renewal = &due[index];
                for key in renewal.keys.iter() {
                    pipe.cmd("DLOCK.RENEW")
                        .arg(key.as_slice())
                        .arg(&*renewal.owner)
                        .arg(renewal.ttl_ms);
                }
            }
            let shared = shared.clone();
            // Every member's keys share the slot of this one (the group's route).
            let key = members
                .first()
                .and_then(|&index| due[index].keys.first().cloned())
                .unwrap_or_default();
            async move { (members, shared.pipeline(&key, &pipe).await) }
        });
        let replies = futures_util::future::join_all(sends).await;
        let mut outcomes: Vec<(u64, Renewed)> = Vec::with_capacity(due.len());
        for (members, reply) in replies {
            match reply {
                Ok(values) => {
                    let mut values = values.into_iter();
                    for index in members {
                        let renewal = &due[index];
                        let mut outcome = Renewed::Yes;
                        for index in 0..renewal.keys.len() {
                            let token = renewal.tokens.get(index).copied();
                            outcome = worse(outcome, judge(values.next(), token));
                        }
                        outcomes.push((renewal.id, outcome));
                    }
                }
                Err(_) => {
                    for index in members {
                        outcomes.push((due[index].id, Renewed::Retry));
                    }
                }
            }
        }
        let now = Instant::now();
        {
            let mut table = watchdog.table();
            for (id, outcome) in outcomes {
                let Some(entry) = table.get_mut(&id) else {
                    continue;
                };
                entry.in_flight = false;
                match outcome {
                    Renewed::Yes => {
                        let deadline = deadline_of(sent, entry.lease, entry.margin);
                        if deadline > entry.deadline {
                            entry.deadline = deadline;
                        }
                        entry.next_renewal = sent + entry.period;
                    }
                    Renewed::Lost => {
                        entry.hold.mark_lost();
                        table.remove(&id);
                    }
                    Renewed::Retry => {
                        let retry = (entry.period / 4)
                            .clamp(Duration::from_millis(5), Duration::from_millis(50));
                        entry.next_renewal = now + retry;
                    }
                }
            }
        }
        watchdog.wake.notify_one();
    }
}

/// When a hold granted or renewed by a command sent at `sent` counts as
/// lost if no later renewal succeeds.
fn deadline_of(sent: Instant, lease: Duration, margin: Duration) -> Instant {
    sent + lease.saturating_sub(margin)
}

/// A renewal's reply: the token of the hold renewed, which must be the
/// guard's own (a different one is a new hold under the same owner name:
/// the guard's hold ended in between).
pub(crate) fn judge(reply: Option<Value>, token: Option<u64>) -> Renewed {
    match reply {
        Some(Value::Int(renewed)) if Some(renewed as u64) == token => Renewed::Yes,
        Some(Value::Int(_)) | Some(Value::Nil) => Renewed::Lost,
        Some(Value::ServerError(error)) => match error.code() {
            "NOTOWNER" | "WRONGTYPE" => Renewed::Lost,
            _ => Renewed::Retry,
        },
        _ => Renewed::Retry,
    }
}

pub(crate) fn worse(a: Renewed, b: Renewed) -> Renewed {
    match (a, b) {
        (Renewed::Lost, _) | (_, Renewed::Lost) => Renewed::Lost,
        (Renewed::Retry, _) | (_, Renewed::Retry) => Renewed::Retry,
        _ => Renewed::Yes,
    }
}
