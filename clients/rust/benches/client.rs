//! Client benchmark (`make bench`; `cargo bench -p dlock-client --bench
//! client [-- --quick]`):
//!
//! 1. acquire + release through the client against the same two commands
//!    sent raw with the redis crate on one multiplexed connection, 4 tasks on
//!    distinct keys; goal: the client at least 0.9x the raw rate;
//!    also the heap allocations per pair, client and raw, counted by the
//!    process's allocator over sequential pairs (the same on a loaded
//!    machine as on an idle one: what the client adds per call);
//! 2. the renewal cost: 10,000 live guards with 30 s leases; goal: at most
//!    one pipelined round of RENEWs per renewal period, reported as rounds
//!    and RENEW commands/s at the server.
//!
//! Starts its own redis-server (the test harness) and writes
//! docs/benchmarks-client.md, or with `--quick` (or QUICK=1) runs briefly
//! and writes its report to a temporary file.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;

/// The system allocator, counting allocations (for the allocations per
/// acquire + release, which do not depend on the machine's load).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a relaxed atomic that never allocates.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from the system allocator.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Sequential pairs counted for the allocations per pair.
const COUNTED_PAIRS: u64 = 2_000;

/// Heap allocations per acquire + release (the whole process: the
/// connection's driver task included), raw and through the client.
async fn allocations_per_pair(url: &str, dlock: &dlock_client::Client) -> (f64, f64) {
    let client = redis::Client::open(url).expect("client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let raw_pair = || {
        let mut conn = conn.clone();
        async move {
            let granted: redis::Value = redis::cmd("DLOCK.ACQUIRE")
                .arg("bench:alloc:raw")
                .arg("raw-owner")
                .arg(30_000)
                .query_async(&mut conn)
                .await
                .expect("acquire");
            assert!(matches!(granted, redis::Value::Array(_)), "granted");
            let _: redis::Value = redis::cmd("DLOCK.RELEASE")
                .arg("bench:alloc:raw")
                .arg("raw-owner")
                .query_async(&mut conn)
                .await
                .expect("release");
        }
    };
    let client_pair = || async {
        let guard = dlock
            .lock("bench:alloc:client")
            .acquire()
            .await
            .expect("acquire");
        guard.release().await.expect("release");
    };
    for _ in 0..200 {
        raw_pair().await;
        client_pair().await;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..COUNTED_PAIRS {
        raw_pair().await;
    }
    let raw = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / COUNTED_PAIRS as f64;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..COUNTED_PAIRS {
        client_pair().await;
    }
    let client = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / COUNTED_PAIRS as f64;
    (raw, client)
}

const TASKS: usize = 4;
/// Alternating raw and client phases of the throughput scenario.
const ROUNDS: usize = 5;

struct Settings {
    quick: bool,
    phase: Duration,
    guards: usize,
    lease: Duration,
    observe: Duration,
}

fn settings() -> Settings {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("QUICK").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false" | "no"));
    if quick {
        Settings {
            quick,
            phase: Duration::from_millis(300),
            guards: 10_000,
            lease: Duration::from_secs(3),
            observe: Duration::from_secs(3),
        }
    } else {
        Settings {
            quick,
            phase: Duration::from_secs(2),
            guards: 10_000,
            lease: Duration::from_secs(30),
            observe: Duration::from_secs(30),
        }
    }
}

/// Acquire + release pairs per second, raw, on one multiplexed connection.
async fn raw_rate(url: &str, phase: Duration) -> f64 {
    let client = redis::Client::open(url).expect("client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (mut conn, stop, done) = (conn.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("bench:raw:{task}");
            let owner = format!("raw-{task}");
            while !stop.load(Ordering::Relaxed) {
                let granted: redis::Value = redis::cmd("DLOCK.ACQUIRE")
                    .arg(&key)
                    .arg(&owner)
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await
                    .expect("DLOCK.ACQUIRE");
                assert!(matches!(granted, redis::Value::Array(_)), "granted");
                let _: i64 = redis::cmd("DLOCK.RELEASE")
                    .arg(&key)
                    .arg(&owner)
                    .query_async(&mut conn)
                    .await
                    .expect("DLOCK.RELEASE");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    measure(phase, stop, done, tasks).await
}

/// Acquire + release pairs per second through dlock-client.
async fn client_rate(dlock: &dlock_client::Client, phase: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (dlock, stop, done) = (dlock.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("bench:client:{task}");
            while !stop.load(Ordering::Relaxed) {
                let guard = dlock.lock(&key).acquire().await.expect("acquire");
                guard.release().await.expect("release");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    measure(phase, stop, done, tasks).await
}

async fn measure(
    phase: Duration,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> f64 {
    // A short warm-up, then the measured phase.
    tokio::time::sleep(phase / 5).await;
    let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::time::sleep(phase).await;
    let (elapsed, after) = (start.elapsed(), done.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a bench task");
    }
    (after - before) as f64 / elapsed.as_secs_f64()
}

fn renew_calls(conn: &mut common::Connection) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    text.lines()
        .find_map(|line| line.strip_prefix("cmdstat_dlock.renew:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let settings = settings();
    let server = Server::start();
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut report = String::new();
    let _ = writeln!(report, "# Client benchmarks\n");
    let _ = writeln!(
        report,
        "Written by `make bench` (clients/rust/benches/client.rs){}. One redis-server \
         7.0 with the module, the client on a 2-thread tokio runtime.\n",
        if settings.quick { ", quick run" } else { "" }
    );

    runtime.block_on(async {
        let dlock = dlock_client::Client::open(url.as_str())
            .await
            .expect("dlock client");

        // 1. Acquire + release: raw and client alternate in short phases
        // (the machine may be shared); the ratio is the median of the
        // ratios of adjacent phases.
        let mut raw_rates = Vec::new();
        let mut client_rates = Vec::new();
        let mut ratios = Vec::new();
        for _ in 0..ROUNDS {
            let raw = raw_rate(&url, settings.phase).await;
            let client = client_rate(&dlock, settings.phase).await;
            raw_rates.push(raw);
            client_rates.push(client);
            ratios.push(client / raw);
        }
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios[ratios.len() / 2];
        let median = |rates: &mut Vec<f64>| {
            rates.sort_by(f64::total_cmp);
            rates[rates.len() / 2]
        };
        let (raw, client) = (median(&mut raw_rates), median(&mut client_rates));
        let _ = writeln!(report, "## Acquire + release, {TASKS} tasks on distinct keys\n");
        let _ = writeln!(report, "Medians of {ROUNDS} alternating phases of {:?} each.\n", settings.phase);
        let _ = writeln!(report, "| | pairs/s |\n|---|---:|");
        let _ = writeln!(report, "| raw commands (redis crate, one multiplexed connection) | {raw:.0} |");
        let _ = writeln!(report, "| dlock-client (`lock(k).acquire()` + `release()`) | {client:.0} |");
        let _ = writeln!(
            report,
            "\nRatio client / raw (median of the phase pairs): **{ratio:.2}x** (goal: at least 0.9x): {}.\n",
            if ratio >= 0.9 { "met" } else { "NOT met" }
        );
        println!("acquire+release: raw {raw:.0}/s, client {client:.0}/s, ratio {ratio:.2}");
        let (raw_allocs, client_allocs) = allocations_per_pair(&url, &dlock).await;
        let _ = writeln!(
            report,
            "Heap allocations per pair (the whole process, {COUNTED_PAIRS} sequential pairs): raw {raw_allocs:.1}, dlock-client {client_allocs:.1}.\n"
        );
        println!("allocations per pair: raw {raw_allocs:.1}, client {client_allocs:.1}");

        // 2. Renewal cost of many live guards.
        let mut conn = server.connect();
        let lease = settings.lease;
        let mut guards = Vec::with_capacity(settings.guards);
        let taking = Instant::now();
        for chunk in (0..settings.guards).collect::<Vec<_>>().chunks(500) {
            let batch = chunk.iter().map(|i| {
                let dlock = dlock.clone();
                async move { dlock.lock(format!("bench:guard:{i}")).lease(lease).acquire().await }
            });
            for guard in futures_util::future::join_all(batch).await {
                guards.push(guard.expect("a guard"));
            }
        }
        let took = taking.elapsed();
        let period = dlock.config().renew_period(lease);
        // Let the first rounds fall into step, then observe.
        tokio::time::sleep(period + period / 2).await;
        let (calls_before, rounds_before, start) =
            (renew_calls(&mut conn), dlock.renewal_rounds(), Instant::now());
        tokio::time::sleep(settings.observe).await;
        let elapsed = start.elapsed();
        let calls = renew_calls(&mut conn) - calls_before;
        let rounds = dlock.renewal_rounds() - rounds_before;
        let periods = elapsed.as_secs_f64() / period.as_secs_f64();
        let held = guards.iter().filter(|g| g.is_held()).count();
        let _ = writeln!(
            report,
            "## Renewal cost: {} live guards, {:?} leases\n",
            settings.guards, lease
        );
        let _ = writeln!(report, "| | |\n|---|---:|");
        let _ = writeln!(report, "| guards acquired in | {took:.2?} |");
        let _ = writeln!(report, "| renewal period | {period:?} |");
        let _ = writeln!(report, "| observed | {elapsed:.2?} ({periods:.2} periods) |");
        let _ = writeln!(report, "| RENEW commands at the server | {calls} ({:.0}/s) |", calls as f64 / elapsed.as_secs_f64());
        let _ = writeln!(report, "| RENEWs per guard per period | {:.2} |", calls as f64 / settings.guards as f64 / periods);
        let _ = writeln!(report, "| renewal rounds (pipelines) | {rounds} ({:.2} per period) |", rounds as f64 / periods);
        let _ = writeln!(report, "| guards still held | {held} of {} |", settings.guards);
        let per_period = rounds as f64 / periods;
        let _ = writeln!(
            report,
            "\nGoal: at most one pipelined round per renewal period: {}.",
            if per_period <= 1.0 + 1e-9 || rounds <= periods.ceil() as u64 { "met" } else { "NOT met" }
        );
        println!(
            "renewals: {calls} RENEWs in {elapsed:.2?} ({:.0}/s), {rounds} rounds over {periods:.2} periods, {held} held",
            calls as f64 / elapsed.as_secs_f64()
        );
        drop(guards);
    });

    let out = if settings.quick {
        std::env::temp_dir().join("dlock-benchmarks-client.md")
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks-client.md")
    };
    std::fs::write(&out, report).expect("write the report");
    println!("report written to {}", out.display());
}
