//! The conformance suite of clients/conformance (docs/clients.md, "What
//! every client does"), run by the Rust client: every scenario of every
//! file, one after another, on the server `DLOCK_SERVER` selects (Redis by
//! default, Valkey as `make test` runs it too). The format is
//! clients/conformance/README.md; an unknown step or field, or an unmet
//! expectation, fails the scenario, and a scenario is skipped only when its
//! `skip` list names `rust`.

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;
use dlock_client::{Client, Error, Guard, LatchWait, Leader, Leadership};
use redis::aio::MultiplexedConnection;
use serde::Deserialize;
use serde_json::{Map, Value as Json};
use tokio::task::JoinHandle;

const LANGUAGE: &str = "rust";
/// How long `await` waits for a background step when the step gives no
/// `within_ms`.
const DEFAULT_AWAIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(5);
/// The read timeout of the runner's raw connections: longer than any
/// `pause_server` of a scenario.
const RAW_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    area: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    scenarios: Vec<Scenario>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    rules: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    skip: HashMap<String, String>,
    steps: Vec<Step>,
    /// Runs in a row, each from a clean server with fresh clients.
    repeat: Option<u32>,
}

/// `error`: one kind, or a list of kinds (any of them).
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum Kinds {
    One(String),
    Any(Vec<String>),
}

impl Kinds {
    fn allows(&self, kind: &str) -> bool {
        match self {
            Kinds::One(one) => one == kind,
            Kinds::Any(any) => any.iter().any(|one| one == kind),
        }
    }
}

impl std::fmt::Display for Kinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kinds::One(one) => write!(f, "{one}"),
            Kinds::Any(any) => write!(f, "one of {}", any.join(", ")),
        }
    }
}

/// `result: null` is an expectation (the value is null), so an absent
/// `result` and a null one must differ.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Json>, D::Error> {
    Json::deserialize(d).map(Some)
}

#[derive(Deserialize, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct Step {
    op: String,
    #[serde(default)]
    #[allow(dead_code)]
    note: Option<String>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Json>,
    error: Option<Kinds>,
    capture: Option<String>,
    within_ms: Option<u64>,
    returns_within_ms: Option<u64>,
    #[serde(default)]
    background: bool,
    client: Option<String>,
    conn: Option<String>,
    guard: Option<String>,
    task: Option<String>,
    observer: Option<String>,
    #[serde(rename = "as")]
    name: Option<String>,
    kind: Option<String>,
    key: Option<String>,
    keys: Option<Vec<String>>,
    // Numbers a client must refuse (`bad_input`) may be negative or not
    // whole: read as JSON numbers, turned into the client's types by
    // `expressible`.
    limit: Option<serde_json::Number>,
    weight: Option<serde_json::Number>,
    lease_ms: Option<serde_json::Number>,
    wait_ms: Option<serde_json::Number>,
    #[serde(default)]
    wait_forever: bool,
    #[serde(default)]
    fair: bool,
    #[serde(default)]
    session: bool,
    owner: Option<String>,
    count: Option<u64>,
    n: Option<u64>,
    ttl_ms: Option<u64>,
    timeout_ms: Option<u64>,
    identity: Option<String>,
    args: Option<Vec<String>>,
    ms: Option<u64>,
    field: Option<String>,
}

/// A step's value, or the kind of the error it failed with (the kinds of
/// the README: `busy`, `lost`, `not_owner`, ..., `server:<CODE>`).
type Outcome = Result<Json, String>;

/// What an acquiring step got: a guard, or a campaign's leadership (whose
/// guard is the election's lock).
enum Held {
    Guard(Guard),
    Leader(Leadership),
}

impl Held {
    fn guard(&self) -> &Guard {
        match self {
            Held::Guard(guard) => guard,
            Held::Leader(leadership) => leadership.guard(),
        }
    }

    fn is_held(&self) -> bool {
        self.guard().is_held()
    }

    async fn release(self) -> dlock_client::Result<()> {
        match self {
            Held::Guard(guard) => guard.release().await,
            Held::Leader(leadership) => leadership.resign().await,
        }
    }
}

struct GuardSlot {
    /// Shared with a background `renew`; a release takes it back.
    guard: Option<Arc<Held>>,
    token: u64,
    tokens: Vec<u64>,
    owner: String,
    /// Whether the guard was lost when it was released (after a release
    /// the guard is gone, and a release is not a loss).
    lost_at_release: bool,
}

/// A background step: its task, which also tells when it ended, and when
/// it started (for `returns_within_ms`).
struct Task {
    started: Instant,
    kind: TaskKind,
}

type Timed<T> = JoinHandle<(T, Instant)>;

enum TaskKind {
    Acquire(Timed<dlock_client::Result<Guard>>),
    LatchWait(Timed<dlock_client::Result<LatchWait>>),
    Command(Timed<redis::RedisResult<redis::Value>>),
    Campaign(Timed<dlock_client::Result<Leadership>>),
    Renew(Timed<dlock_client::Result<()>>),
}

impl TaskKind {
    fn abort(&self) {
        match self {
            TaskKind::Acquire(handle) => handle.abort(),
            TaskKind::LatchWait(handle) => handle.abort(),
            TaskKind::Command(handle) => handle.abort(),
            TaskKind::Campaign(handle) => handle.abort(),
            TaskKind::Renew(handle) => handle.abort(),
        }
    }

    /// Aborts the task and waits until it is gone (a guard it had is
    /// dropped with it, which releases it).
    async fn cancel(self) {
        self.abort();
        match self {
            TaskKind::Acquire(handle) => drop(handle.await),
            TaskKind::LatchWait(handle) => drop(handle.await),
            TaskKind::Command(handle) => drop(handle.await),
            TaskKind::Campaign(handle) => drop(handle.await),
            TaskKind::Renew(handle) => drop(handle.await),
        }
    }
}

/// Spawns `work`, which also reports when it ended.
fn timed<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Timed<T> {
    tokio::spawn(async move {
        let value = work.await;
        (value, Instant::now())
    })
}

/// An observer started by `observe`: a task that reads every change into
/// `latest` ("nothing" before the first).
struct Observing {
    latest: Arc<Mutex<Json>>,
    task: JoinHandle<()>,
}

fn leader_json(leader: Option<Leader>) -> Json {
    match leader {
        Some(leader) => serde_json::json!({
            "identity": leader.value_str(),
            "term": leader.term,
        }),
        None => Json::Null,
    }
}

struct Runner {
    server: Server,
    /// After `stop_server`, until `start_server`.
    server_down: bool,
    /// The clients the running scenario names (`pause_server` opens them
    /// first: see there).
    scenario_clients: Vec<String>,
    /// Background tasks already awaited: a later `cancel` of one releases
    /// the guard it returned, if any.
    awaited: std::collections::HashSet<String>,
    /// How long the last `await`ed task ran, from its start to its end.
    task_took: Option<Duration>,
    clients: HashMap<String, Client>,
    conns: HashMap<String, MultiplexedConnection>,
    guards: HashMap<String, GuardSlot>,
    tasks: HashMap<String, Task>,
    observers: HashMap<String, Observing>,
    vars: HashMap<String, Json>,
}

/// A step's number as the client's type (`u32`, `u64`): a value the type
/// cannot hold (negative, not whole) is a scenario this runner must skip.
fn expressible<T: TryFrom<u64>>(number: &serde_json::Number) -> Result<T, String> {
    number
        .as_u64()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("{number} cannot be expressed in Rust: skip the scenario"))
}

/// `INFO commandstats`: the DLOCK commands the server received (`calls`
/// plus `rejected_calls` of every `cmdstat_dlock.*` line).
fn dlock_calls(text: &str) -> i64 {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("cmdstat_dlock."))
        .flat_map(|line| line.split_once(':').map(|(_, stats)| stats).into_iter())
        .flat_map(|stats| stats.split(','))
        .filter_map(|field| field.split_once('='))
        .filter(|(name, _)| *name == "calls" || *name == "rejected_calls")
        .filter_map(|(_, value)| value.parse::<i64>().ok())
        .sum()
}

fn kind_of(error: &Error) -> String {
    match error {
        Error::Busy => "busy".into(),
        Error::Lost => "lost".into(),
        Error::Deadlock(_) => "deadlock".into(),
        Error::NotOwner(_) => "not_owner".into(),
        Error::WrongType(_) => "wrongtype".into(),
        Error::Timeout => "timeout".into(),
        Error::InvalidArgument(_) => "invalid_argument".into(),
        Error::Server { code, .. } => format!("server:{code}"),
        // The shared connection's response timeout: no reply in time.
        Error::Connection(error) if error.is_timeout() => "timeout".into(),
        Error::Connection(error)
            if error.is_io_error()
                || error.is_connection_dropped()
                || error.is_connection_refusal() =>
        {
            "connection".into()
        }
        other => format!("other:{other}"),
    }
}

fn redis_kind(error: &redis::RedisError) -> String {
    match error.code() {
        Some(code) => format!("server:{code}"),
        None => format!("other:{error}"),
    }
}

/// A reply as JSON: integers exactly, bulk strings as UTF-8 text.
fn json_of(value: redis::Value) -> Outcome {
    use redis::Value as V;
    Ok(match value {
        V::Nil => Json::Null,
        V::Int(n) => Json::from(n),
        V::BulkString(bytes) => Json::String(String::from_utf8_lossy(&bytes).into_owned()),
        V::SimpleString(text) => Json::String(text),
        V::Okay => Json::String("OK".into()),
        V::Boolean(b) => Json::Bool(b),
        V::Array(items) | V::Set(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(json_of(item)?);
            }
            Json::Array(out)
        }
        V::Map(pairs) => {
            let mut out = Map::new();
            for (k, v) in pairs {
                let key = match json_of(k)? {
                    Json::String(s) => s,
                    other => other.to_string(),
                };
                out.insert(key, json_of(v)?);
            }
            Json::Object(out)
        }
        V::ServerError(error) => return Err(format!("server:{}", error.code())),
        other => Json::String(format!("{other:?}")),
    })
}

fn int_of(value: &Json) -> Option<i128> {
    match value {
        Json::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}

/// Whether `actual` matches the (resolved) matcher `expected`.
fn check(expected: &Json, actual: &Json) -> Result<(), String> {
    let fail = || Err(format!("expected {expected}, got {actual}"));
    match expected {
        Json::Object(map) if map.len() == 1 && map.keys().all(|k| k.starts_with('~')) => {
            let (op, arg) = map.iter().next().expect("one entry");
            let compare = |ok: fn(i128, i128) -> bool| match (int_of(actual), int_of(arg)) {
                (Some(a), Some(b)) if ok(a, b) => Ok(()),
                _ => fail(),
            };
            match op.as_str() {
                "~any" => Ok(()),
                "~gt" => compare(|a, b| a > b),
                "~ge" => compare(|a, b| a >= b),
                "~lt" => compare(|a, b| a < b),
                "~le" => compare(|a, b| a <= b),
                "~ne" => match check(arg, actual) {
                    Ok(()) => fail(),
                    Err(_) => Ok(()),
                },
                "~len" => {
                    let len = match actual {
                        Json::Array(items) => items.len(),
                        Json::String(s) => s.len(),
                        _ => return fail(),
                    };
                    if Some(len as i128) == int_of(arg) {
                        Ok(())
                    } else {
                        fail()
                    }
                }
                "~in" => match arg {
                    Json::Array(options) if options.iter().any(|o| check(o, actual).is_ok()) => {
                        Ok(())
                    }
                    _ => fail(),
                },
                other => Err(format!("unknown matcher {other}")),
            }
        }
        Json::Object(map) => {
            let Json::Object(got) = actual else {
                return fail();
            };
            for (key, want) in map {
                let Some(value) = got.get(key) else {
                    return Err(format!("no field {key} in {actual}"));
                };
                check(want, value).map_err(|e| format!("{key}: {e}"))?;
            }
            Ok(())
        }
        Json::Array(wants) => {
            let Json::Array(items) = actual else {
                return fail();
            };
            if wants.len() != items.len() {
                return fail();
            }
            for (want, item) in wants.iter().zip(items) {
                check(want, item).map_err(|e| format!("in {actual}: {e}"))?;
            }
            Ok(())
        }
        Json::Number(_) => match (int_of(expected), int_of(actual)) {
            (Some(a), Some(b)) if a == b => Ok(()),
            _ => fail(),
        },
        _ if expected == actual => Ok(()),
        _ => fail(),
    }
}

/// The read steps, which `within_ms` may repeat.
fn is_read(op: &str) -> bool {
    matches!(
        op,
        "info" | "info_dlock" | "command" | "held" | "lost" | "leader" | "observed" | "latch_count"
    )
}

impl Runner {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.server.port)
    }

    /// Resolves the references (`$g.token`, `$g.owner`, `$g.tokens`,
    /// `$g.tokens.N`, `$var`) in a value.
    fn resolve(&self, value: &Json) -> Result<Json, String> {
        match value {
            Json::String(s) if s.starts_with("$$") => Ok(Json::String(s[1..].to_string())),
            Json::String(s) if s.starts_with('$') => {
                let path: Vec<&str> = s[1..].split('.').collect();
                match path.as_slice() {
                    [var] => self
                        .vars
                        .get(*var)
                        .cloned()
                        .ok_or_else(|| format!("unknown variable {s}")),
                    [guard, field, rest @ ..] => {
                        let slot = self
                            .guards
                            .get(*guard)
                            .ok_or_else(|| format!("unknown guard in {s}"))?;
                        match (*field, rest) {
                            ("token", []) => Ok(Json::from(slot.token)),
                            ("owner", []) => Ok(Json::String(slot.owner.clone())),
                            ("tokens", []) => Ok(Json::Array(
                                slot.tokens.iter().map(|t| Json::from(*t)).collect(),
                            )),
                            ("tokens", [index]) => index
                                .parse::<usize>()
                                .ok()
                                .and_then(|i| slot.tokens.get(i))
                                .map(|t| Json::from(*t))
                                .ok_or_else(|| format!("no such token: {s}")),
                            _ => Err(format!("unknown reference {s}")),
                        }
                    }
                    _ => Err(format!("unknown reference {s}")),
                }
            }
            Json::Array(items) => items
                .iter()
                .map(|v| self.resolve(v))
                .collect::<Result<_, _>>()
                .map(Json::Array),
            Json::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    out.insert(k.clone(), self.resolve(v)?);
                }
                Ok(Json::Object(out))
            }
            other => Ok(other.clone()),
        }
    }

    /// A resolved value as a command argument or an owner name.
    fn text(&self, value: &str) -> Result<String, String> {
        match self.resolve(&Json::String(value.to_string()))? {
            Json::String(s) => Ok(s),
            Json::Number(n) => Ok(n.to_string()),
            other => Err(format!("{value} is not text: {other}")),
        }
    }

    async fn client(&mut self, name: &Option<String>) -> Result<Client, String> {
        let name = name.clone().ok_or("the step names no client")?;
        if let Some(client) = self.clients.get(&name) {
            return Ok(client.clone());
        }
        let client = Client::open(self.url())
            .await
            .map_err(|e| format!("connect client {name}: {e}"))?;
        self.clients.insert(name, client.clone());
        Ok(client)
    }

    async fn raw(&mut self, name: &str) -> Result<MultiplexedConnection, String> {
        if let Some(conn) = self.conns.get(name) {
            return Ok(conn.clone());
        }
        let conn = self.new_raw().await?;
        self.conns.insert(name.to_string(), conn.clone());
        Ok(conn)
    }

    async fn new_raw(&self) -> Result<MultiplexedConnection, String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        // Longer than any pause of a scenario (`pause_server`).
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(RAW_TIMEOUT));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| format!("raw connection: {e}"))
    }

    fn slot(&self, step: &Step) -> Result<&GuardSlot, String> {
        let name = step.guard.as_ref().ok_or("the step names no guard")?;
        self.guards
            .get(name)
            .ok_or_else(|| format!("unknown guard {name}"))
    }

    fn register(&mut self, name: &str, held: impl Into<Held>) {
        let held = held.into();
        let guard = held.guard();
        let slot = GuardSlot {
            token: guard.token(),
            tokens: guard.tokens().map(|(_, t)| t).collect(),
            owner: String::from_utf8_lossy(guard.owner()).into_owned(),
            guard: Some(Arc::new(held)),
            lost_at_release: false,
        };
        self.guards.insert(name.to_string(), slot);
    }

    /// Runs one step and checks its expectations.
    async fn step(&mut self, step: &Step) -> Result<(), String> {
        if step.background {
            let name = step.name.clone().ok_or("a background step needs `as`")?;
            let started = Instant::now();
            let kind = self.start(step).await?;
            self.tasks.insert(name, Task { started, kind });
            return Ok(());
        }
        let deadline = step
            .within_ms
            .filter(|_| is_read(&step.op))
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        loop {
            self.task_took = None;
            let started = Instant::now();
            let outcome = self.run(step).await?;
            let took = self.task_took.take().unwrap_or_else(|| started.elapsed());
            let judged = self.judge(step, &outcome).and_then(|()| {
                match step.returns_within_ms.map(Duration::from_millis) {
                    Some(bound) if took > bound => Err(format!(
                        "ended after {took:?}, beyond returns_within_ms {bound:?} ({})",
                        match &outcome {
                            Ok(value) => value.to_string(),
                            Err(kind) => kind.clone(),
                        }
                    )),
                    _ => Ok(()),
                }
            });
            match judged {
                Ok(()) => {
                    if let (Some(name), Ok(value)) = (&step.capture, &outcome) {
                        self.vars.insert(name.clone(), value.clone());
                    }
                    return Ok(());
                }
                Err(failure) => match deadline {
                    Some(deadline) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
                    _ => return Err(failure),
                },
            }
        }
    }

    /// A step with both `result` and `error` may end either way.
    fn judge(&self, step: &Step, outcome: &Outcome) -> Result<(), String> {
        match (&step.error, outcome) {
            (Some(want), Err(kind)) if want.allows(kind) => Ok(()),
            (Some(want), Err(kind)) => Err(format!("expected error {want}, got error {kind}")),
            (None, Err(kind)) => Err(format!("failed with {kind}")),
            (Some(want), Ok(value)) if step.result.is_none() => {
                Err(format!("expected error {want}, got {value}"))
            }
            (_, Ok(value)) => match &step.result {
                Some(expected) => check(&self.resolve(expected)?, value),
                None => Ok(()),
            },
        }
    }

    /// Starts a background step.
    async fn start(&mut self, step: &Step) -> Result<TaskKind, String> {
        match step.op.as_str() {
            "acquire" => {
                let builder = self.builder(step).await?;
                Ok(TaskKind::Acquire(timed(builder.acquire())))
            }
            "latch_wait" => {
                let client = self.client(&step.client).await?;
                let latch = client.latch(step.key.clone().ok_or("no key")?);
                let timeout = step.timeout_ms.ok_or("no timeout_ms")?;
                Ok(TaskKind::LatchWait(timed(async move {
                    if timeout == 0 {
                        latch.wait_forever().await
                    } else {
                        latch.wait(Duration::from_millis(timeout)).await
                    }
                })))
            }
            "command" => {
                let mut conn = self.new_raw().await?;
                let cmd = self.command(step)?;
                Ok(TaskKind::Command(timed(async move {
                    cmd.query_async::<redis::Value>(&mut conn).await
                })))
            }
            "campaign" => {
                let election = self.election(step).await?;
                let identity = self.text(step.identity.as_deref().ok_or("no identity")?)?;
                let wait = match (step.wait_forever, &step.wait_ms) {
                    (true, _) => None,
                    (false, Some(ms)) => Some(Duration::from_millis(expressible(ms)?)),
                    (false, None) => Some(Duration::ZERO),
                };
                Ok(TaskKind::Campaign(timed(async move {
                    match wait {
                        None => election.campaign(identity).await,
                        Some(wait) => election.campaign_within(identity, wait).await,
                    }
                })))
            }
            "renew" => {
                let slot = self.slot(step)?;
                let held = slot.guard.clone().ok_or("the guard was released")?;
                Ok(TaskKind::Renew(timed(
                    async move { held.guard().renew().await },
                )))
            }
            other => Err(format!("{other} cannot run in the background")),
        }
    }

    async fn builder(&mut self, step: &Step) -> Result<dlock_client::LockBuilder, String> {
        let client = self.client(&step.client).await?;
        let key = || step.key.clone().ok_or("the step names no key");
        let mut builder = match step.kind.as_deref().unwrap_or("lock") {
            "lock" => client.lock(key()?),
            "read" => client.read_lock(key()?),
            "write" => client.write_lock(key()?),
            "semaphore" => {
                client.semaphore(key()?, expressible(step.limit.as_ref().ok_or("no limit")?)?)
            }
            "multi" => client.multi_lock(step.keys.clone().ok_or("no keys")?),
            other => return Err(format!("unknown kind {other}")),
        };
        if let Some(weight) = &step.weight {
            builder = builder.weight(expressible(weight)?);
        }
        if let Some(ms) = &step.lease_ms {
            builder = builder.lease(Duration::from_millis(expressible(ms)?));
        }
        if let Some(ms) = &step.wait_ms {
            builder = builder.wait(Duration::from_millis(expressible(ms)?));
        }
        if step.wait_forever {
            builder = builder.wait_forever();
        }
        if step.fair {
            builder = builder.fair();
        }
        if step.session {
            builder = builder.session();
        }
        if let Some(owner) = &step.owner {
            builder = builder.owner(self.text(owner)?);
        }
        Ok(builder)
    }

    async fn election(&mut self, step: &Step) -> Result<dlock_client::Election, String> {
        let client = self.client(&step.client).await?;
        let mut election = client.election(step.key.clone().ok_or("no key")?);
        if let Some(ms) = &step.lease_ms {
            election = election.lease(Duration::from_millis(expressible(ms)?));
        }
        Ok(election)
    }

    fn command(&self, step: &Step) -> Result<redis::Cmd, String> {
        let args = step.args.as_ref().ok_or("no args")?;
        let mut cmd = redis::cmd(&self.text(&args[0])?);
        for arg in &args[1..] {
            cmd.arg(self.text(arg)?);
        }
        Ok(cmd)
    }

    /// Runs one (foreground) step: `Err` is a failure of the runner or
    /// the scenario, `Ok(Err(kind))` an error the step may expect.
    async fn run(&mut self, step: &Step) -> Result<Outcome, String> {
        let done = Ok(Ok(Json::Null));
        match step.op.as_str() {
            "acquire" => {
                let name = step.name.clone().ok_or("acquire needs `as`")?;
                match self.builder(step).await?.acquire().await {
                    Ok(guard) => {
                        self.register(&name, guard);
                        done
                    }
                    Err(error) => Ok(Err(kind_of(&error))),
                }
            }
            "release" => {
                let name = step.guard.clone().ok_or("no guard")?;
                let slot = self.guards.get_mut(&name).ok_or("unknown guard")?;
                let guard = slot.guard.take().ok_or("the guard was released already")?;
                slot.lost_at_release = !guard.is_held();
                let guard = Arc::try_unwrap(guard)
                    .map_err(|_| format!("guard {name} is still used by a background step"))?;
                Ok(guard
                    .release()
                    .await
                    .map(|()| Json::Null)
                    .map_err(|e| kind_of(&e)))
            }
            "renew" => {
                let slot = self.slot(step)?;
                let guard = slot.guard.as_ref().ok_or("the guard was released")?;
                Ok(guard
                    .guard()
                    .renew()
                    .await
                    .map(|()| Json::Null)
                    .map_err(|e| kind_of(&e)))
            }
            "held" => {
                let slot = self.slot(step)?;
                Ok(Ok(Json::Bool(
                    slot.guard.as_ref().is_some_and(|held| held.is_held()),
                )))
            }
            "lost" => {
                let slot = self.slot(step)?;
                let lost = match &slot.guard {
                    Some(guard) => !guard.is_held(),
                    None => slot.lost_at_release,
                };
                Ok(Ok(Json::Bool(lost)))
            }
            "token" => Ok(Ok(Json::from(self.slot(step)?.token))),
            "await" => {
                let name = step.task.clone().ok_or("no task")?;
                let Task { started, kind } = self
                    .tasks
                    .remove(&name)
                    .ok_or_else(|| format!("unknown task {name}"))?;
                self.awaited.insert(name.clone());
                let within = step
                    .within_ms
                    .map(Duration::from_millis)
                    .unwrap_or(DEFAULT_AWAIT);
                let late = || format!("task {name} not done within {within:?}");
                let panicked =
                    |join: tokio::task::JoinError| format!("task {name} panicked: {join}");
                macro_rules! finish {
                    ($handle:expr) => {{
                        let (value, ended) = tokio::time::timeout(within, $handle)
                            .await
                            .map_err(|_| late())?
                            .map_err(panicked)?;
                        self.task_took = Some(ended.saturating_duration_since(started));
                        value
                    }};
                }
                match kind {
                    TaskKind::Acquire(handle) => match finish!(handle) {
                        Ok(guard) => {
                            self.register(&name, guard);
                            done
                        }
                        Err(error) => Ok(Err(kind_of(&error))),
                    },
                    TaskKind::LatchWait(handle) => {
                        Ok(finish!(handle).map(latch_word).map_err(|e| kind_of(&e)))
                    }
                    TaskKind::Command(handle) => Ok(match finish!(handle) {
                        Ok(value) => json_of(value),
                        Err(error) => Err(redis_kind(&error)),
                    }),
                    TaskKind::Campaign(handle) => match finish!(handle) {
                        Ok(leadership) => {
                            self.register(&name, leadership);
                            done
                        }
                        Err(error) => Ok(Err(kind_of(&error))),
                    },
                    TaskKind::Renew(handle) => Ok(finish!(handle)
                        .map(|()| Json::Null)
                        .map_err(|e| kind_of(&e))),
                }
            }
            "cancel" => {
                // Rust's cancellation: drop the future. The task is aborted,
                // which drops the acquire future inside it (docs/clients.md,
                // Rust: "Dropping the future cancels the request"). A guard
                // granted before the abort is dropped too, which releases it.
                let name = step.task.clone().ok_or("no task")?;
                match self.tasks.remove(&name) {
                    Some(task) => task.kind.cancel().await,
                    // Awaited already: the grant won; the canceller drops
                    // what it got, which releases it.
                    None if self.awaited.contains(&name) => {
                        if let Some(slot) = self.guards.get_mut(&name) {
                            drop(slot.guard.take());
                        }
                    }
                    None => return Err(format!("unknown task {name}")),
                }
                done
            }
            "latch_create" => {
                let client = self.client(&step.client).await?;
                let latch = client.latch(step.key.clone().ok_or("no key")?);
                let ttl = Duration::from_millis(step.ttl_ms.ok_or("no ttl_ms")?);
                Ok(latch
                    .create(step.count.ok_or("no count")?, ttl)
                    .await
                    .map(Json::Bool)
                    .map_err(|e| kind_of(&e)))
            }
            "latch_count_down" => {
                let client = self.client(&step.client).await?;
                let latch = client.latch(step.key.clone().ok_or("no key")?);
                Ok(latch
                    .count_down(step.n.unwrap_or(1))
                    .await
                    .map(Json::from)
                    .map_err(|e| kind_of(&e)))
            }
            "latch_count" => {
                let client = self.client(&step.client).await?;
                let latch = client.latch(step.key.clone().ok_or("no key")?);
                Ok(latch
                    .count()
                    .await
                    .map(|count| count.map(Json::from).unwrap_or(Json::Null))
                    .map_err(|e| kind_of(&e)))
            }
            "latch_wait" => {
                let task = self.start(step).await?;
                let TaskKind::LatchWait(handle) = task else {
                    unreachable!("start gives a latch wait")
                };
                match handle.await {
                    Ok((result, _)) => Ok(result.map(latch_word).map_err(|e| kind_of(&e))),
                    Err(join) => Err(format!("latch wait panicked: {join}")),
                }
            }
            "command" => {
                let conn_name = step.conn.clone().ok_or("no conn")?;
                let mut conn = self.raw(&conn_name).await?;
                let cmd = self.command(step)?;
                Ok(match cmd.query_async::<redis::Value>(&mut conn).await {
                    Ok(value) => json_of(value),
                    Err(error) => Err(redis_kind(&error)),
                })
            }
            "info" => {
                let conn_name = step.conn.clone().unwrap_or_else(|| "admin".into());
                let mut conn = self.raw(&conn_name).await?;
                let key = step.key.clone().ok_or("no key")?;
                let reply: redis::Value = redis::cmd("DLOCK.INFO")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("DLOCK.INFO {key}: {e}"))?;
                Ok(match json_of(reply) {
                    Ok(Json::Array(items)) => {
                        let mut map = Map::new();
                        for pair in items.chunks(2) {
                            if let [Json::String(name), value] = pair {
                                map.insert(name.clone(), value.clone());
                            }
                        }
                        Ok(Json::Object(map))
                    }
                    other => other,
                })
            }
            "info_dlock" => {
                let conn_name = step.conn.clone().unwrap_or_else(|| "admin".into());
                let mut conn = self.raw(&conn_name).await?;
                let text: String = redis::cmd("INFO")
                    .arg("dlock")
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("INFO dlock: {e}"))?;
                let mut map = Map::new();
                for line in text.lines() {
                    if let Some((name, value)) = line.trim().split_once(':') {
                        let value = match value.parse::<i64>() {
                            Ok(n) => Json::from(n),
                            Err(_) => Json::String(value.to_string()),
                        };
                        map.insert(name.to_string(), value);
                    }
                }
                Ok(Ok(match &step.field {
                    Some(field) => map
                        .get(field)
                        .cloned()
                        .ok_or_else(|| format!("INFO dlock has no {field}"))?,
                    None => Json::Object(map),
                }))
            }
            "dlock_calls" => {
                let conn_name = step.conn.clone().unwrap_or_else(|| "admin".into());
                let mut conn = self.raw(&conn_name).await?;
                let text: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("INFO commandstats: {e}"))?;
                Ok(Ok(Json::from(dlock_calls(&text))))
            }
            "restart_server" | "start_server" => {
                self.conns.clear();
                tokio::task::block_in_place(|| self.server.restart());
                self.server_down = false;
                done
            }
            "stop_server" => {
                self.conns.clear();
                tokio::task::block_in_place(|| self.server.kill());
                self.server_down = true;
                done
            }
            "pause_server" => {
                let ms = step.ms.ok_or("no ms")?;
                // Opening a Rust client is a call of its own (the async
                // `Client::open`, which connects), made by the caller before
                // the calls whose bounds this scenario checks: the clients
                // the scenario names are opened now, before the stall.
                for name in self.scenario_clients.clone() {
                    self.client(&Some(name)).await?;
                }
                let mut conn = self.new_raw().await?;
                let _: redis::Value = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(ms)
                    .arg("ALL")
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("CLIENT PAUSE: {e}"))?;
                done
            }
            "sleep" => {
                tokio::time::sleep(Duration::from_millis(step.ms.ok_or("no ms")?)).await;
                done
            }
            "campaign" => {
                let name = step.name.clone().ok_or("campaign needs `as`")?;
                let task = self.start(step).await?;
                let TaskKind::Campaign(handle) = task else {
                    unreachable!("start gives a campaign")
                };
                match handle.await {
                    Ok((Ok(leadership), _)) => {
                        self.register(&name, leadership);
                        done
                    }
                    Ok((Err(error), _)) => Ok(Err(kind_of(&error))),
                    Err(join) => Err(format!("campaign panicked: {join}")),
                }
            }
            "resign" => {
                let name = step.guard.clone().ok_or("no guard")?;
                let slot = self.guards.get_mut(&name).ok_or("unknown guard")?;
                let held = slot.guard.take().ok_or("the guard was released already")?;
                slot.lost_at_release = !held.is_held();
                let held = Arc::try_unwrap(held)
                    .map_err(|_| format!("guard {name} is still used by a background step"))?;
                Ok(held
                    .release()
                    .await
                    .map(|()| Json::Null)
                    .map_err(|e| kind_of(&e)))
            }
            "leader" => {
                let election = self.election(step).await?;
                Ok(election
                    .leader()
                    .await
                    .map(leader_json)
                    .map_err(|e| kind_of(&e)))
            }
            "observe" => {
                let name = step.name.clone().ok_or("observe needs `as`")?;
                let mut observer = self.election(step).await?.observe();
                let latest = Arc::new(Mutex::new(Json::String("nothing".into())));
                let task = tokio::spawn({
                    let latest = latest.clone();
                    async move {
                        loop {
                            // An error (a connection lost) is retried by the
                            // next read; the latest observation stays.
                            if let Ok(state) = observer.next().await {
                                *latest.lock().unwrap() = leader_json(state);
                            }
                        }
                    }
                });
                if let Some(old) = self.observers.insert(name, Observing { latest, task }) {
                    old.task.abort();
                }
                done
            }
            "observed" => {
                let name = step.observer.as_ref().ok_or("no observer")?;
                let observing = self
                    .observers
                    .get(name)
                    .ok_or_else(|| format!("unknown observer {name}"))?;
                let latest = observing.latest.lock().unwrap().clone();
                Ok(Ok(latest))
            }
            "stop" => {
                let name = step.observer.as_ref().ok_or("no observer")?;
                let observing = self
                    .observers
                    .remove(name)
                    .ok_or_else(|| format!("unknown observer {name}"))?;
                observing.task.abort();
                let _ = observing.task.await;
                done
            }
            other => Err(format!("unknown step {other}")),
        }
    }

    /// Forgets everything of the last scenario and empties the server.
    async fn reset(&mut self) -> Result<(), String> {
        for (_, task) in self.tasks.drain() {
            task.kind.abort();
        }
        self.awaited.clear();
        if self.server_down {
            tokio::task::block_in_place(|| self.server.restart());
            self.server_down = false;
        }
        for (_, observing) in self.observers.drain() {
            observing.task.abort();
        }
        self.guards.clear();
        self.clients.clear();
        self.conns.clear();
        self.vars.clear();
        let mut admin = self.raw("admin").await?;
        // A CLIENT PAUSE of the last scenario may still run: wait it out.
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query_async(&mut admin)
            .await
            .map_err(|e| format!("CLIENT UNPAUSE: {e}"))?;
        let _: redis::Value = redis::cmd("FLUSHALL")
            .query_async(&mut admin)
            .await
            .map_err(|e| format!("FLUSHALL: {e}"))?;
        Ok(())
    }
}

fn latch_word(wait: LatchWait) -> Json {
    Json::String(
        match wait {
            LatchWait::Opened => "opened",
            LatchWait::Vanished => "vanished",
            LatchWait::TimedOut => "timed_out",
        }
        .into(),
    )
}

fn scenario_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario files in {}", dir.display());
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let server_name = std::path::Path::new(&common::server_binary())
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut runner = Runner {
        server: Server::start(),
        clients: HashMap::new(),
        conns: HashMap::new(),
        guards: HashMap::new(),
        tasks: HashMap::new(),
        observers: HashMap::new(),
        vars: HashMap::new(),
        server_down: false,
        scenario_clients: Vec::new(),
        awaited: std::collections::HashSet::new(),
        task_took: None,
    };
    let only = std::env::var("DLOCK_CONFORMANCE_ONLY").ok();
    let (mut run, mut skipped, mut failures) = (0, 0, Vec::new());
    let mut names = std::collections::HashSet::new();
    for path in scenario_files() {
        let text = std::fs::read_to_string(&path).expect("read a scenario file");
        let file: ScenarioFile = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a scenario file: {e}", path.display()));
        assert!(
            path.file_stem()
                .is_some_and(|stem| stem == file.area.as_str()),
            "{}: area {} differs from the file name",
            path.display(),
            file.area
        );
        for scenario in file.scenarios {
            assert!(
                names.insert(scenario.name.clone()),
                "scenario {} twice",
                scenario.name
            );
            if only
                .as_deref()
                .is_some_and(|only| !scenario.name.starts_with(only))
            {
                continue;
            }
            if let Some(reason) = scenario.skip.get(LANGUAGE) {
                eprintln!("conformance: SKIP {}: {reason}", scenario.name);
                skipped += 1;
                continue;
            }
            run += 1;
            let started = Instant::now();
            let mut clients: Vec<String> = Vec::new();
            for name in scenario.steps.iter().filter_map(|step| step.client.clone()) {
                if !clients.contains(&name) {
                    clients.push(name);
                }
            }
            let repeat = scenario.repeat.unwrap_or(1);
            let mut outcome = Ok(());
            for round in 1..=repeat {
                if outcome.is_err() {
                    break;
                }
                outcome = runner.reset().await;
                runner.scenario_clients = clients.clone();
                for (index, step) in scenario.steps.iter().enumerate() {
                    if outcome.is_err() {
                        break;
                    }
                    outcome = runner.step(step).await.map_err(|e| {
                        let run = if repeat > 1 {
                            format!("run {round} of {repeat}, ")
                        } else {
                            String::new()
                        };
                        format!("{run}step {} ({}): {e}", index + 1, step.op)
                    });
                }
            }
            match outcome {
                Ok(()) => eprintln!(
                    "conformance: ok {} ({:?})",
                    scenario.name,
                    started.elapsed()
                ),
                Err(failure) => {
                    eprintln!("conformance: FAIL {}: {failure}", scenario.name);
                    failures.push(format!("{}: {failure}", scenario.name));
                }
            }
        }
    }
    let _ = runner.reset().await;
    eprintln!(
        "conformance ({server_name}): {run} run, {skipped} skipped, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "conformance failures:\n{}",
        failures.join("\n")
    );
}

impl From<Guard> for Held {
    fn from(guard: Guard) -> Held {
        Held::Guard(guard)
    }
}

impl From<Leadership> for Held {
    fn from(leadership: Leadership) -> Held {
        Held::Leader(leadership)
    }
}
