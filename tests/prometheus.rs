//! dlock in Prometheus, end to end: redis-server with the module, Debian's
//! redis_exporter with `-script ops/prometheus/dlock.lua`, and Prometheus
//! scraping it every second with `ops/prometheus/dlock-rules.yml` loaded,
//! all on free loopback ports with their data in a temporary folder, all
//! stopped when the test ends (also when it fails).
//!
//! After known lock traffic, Prometheus's HTTP API must give every
//! `dlock_*` field of `INFO dlock` with INFO's value, every recording rule
//! and alert must evaluate without error, and every PromQL expression of
//! the rules and of the Grafana dashboard (`ops/grafana/dlock.json`) must
//! return a non-empty result. `promtool check rules` and `promtool test
//! rules` must pass.
//!
//! The packages (`prometheus`, which has `promtool`, and
//! `prometheus-redis-exporter`) are installed by `make` (scripts/ensure-deps.sh).
//! The test runs against the default server only (`DLOCK_SERVER` unset or
//! `redis-server`, Redis 7.0): `make test` runs every suite on three
//! servers at once, and one exporter run shows the script and the rules.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

fn ops(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ops").join(path)
}

/// A process killed and reaped when dropped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(name: &'static str, command: &mut Command, dir: &Path) -> Process {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("create a log file");
        let err = file.try_clone().expect("clone the log file");
        let child = command
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run {name} ({error}): `make deps` installs it"));
        Process { name, child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log());
        }
    }
}

/// A temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// `GET path` on 127.0.0.1:`port`: (status, body); None if nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Polls `check` every 200 ms until it returns Some, for at most `limit`.
fn poll<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An instant query: the result vector (None on an error reply).
fn query(port: u16, promql: &str) -> Option<Vec<Json>> {
    let (status, body) = http_get(port, &format!("/api/v1/query?query={}", url_encode(promql)))?;
    let reply: Json = serde_json::from_str(&body).ok()?;
    if status != 200 || reply["status"] != "success" {
        return None;
    }
    reply["data"]["result"].as_array().cloned()
}

/// Every numeric field of `INFO dlock`, with its prefix.
fn info_dlock(conn: &mut Connection) -> Vec<(String, f64)> {
    let section: String = redis::cmd("INFO").arg("dlock").query(conn).unwrap();
    section
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .filter(|(name, _)| name.starts_with("dlock_"))
        .filter_map(|(name, value)| Some((name.to_string(), value.parse().ok()?)))
        .collect()
}

/// `expr` with each comparison against a threshold (`> 10`) made `>= 0`:
/// every dlock series is >= 0, so the result is non-empty exactly when
/// the selectors and joins find the series (the thresholds are
/// `promtool test rules`' to check).
fn without_thresholds(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('>') {
        out.push_str(&rest[..at]);
        let after = rest[at + 1..].trim_start();
        let number_len = after
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(after.len());
        if number_len > 0 {
            out.push_str(">= 0");
            rest = &after[number_len..];
        } else {
            out.push('>');
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// Runs promtool with `args` in ops/prometheus; panics with its output on failure.
fn promtool(args: &[&str]) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(ops("prometheus"))
        .output()
        .expect("run promtool (`make deps` installs the prometheus package)");
    assert!(
        output.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn promtool_checks_and_tests_the_rules() {
    promtool(&["check", "rules", "dlock-rules.yml"]);
    promtool(&["test", "rules", "dlock-rules.test.yml"]);
}

#[test]
fn every_dlock_field_reaches_prometheus_and_every_expression_has_data() {
    if server_binary() != "redis-server" {
        eprintln!("skipped: runs once, against redis-server (Redis 7.0)");
        return;
    }
    let dir =
        TempDir(std::env::temp_dir().join(format!("dlock-prometheus-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(dir.0.join("data")).expect("create the temporary folder");

    let server = Server::start();
    let mut conn = server.connect();
    let exporter_port = free_port();
    let _exporter = Process::start(
        "redis_exporter",
        Command::new("prometheus-redis-exporter")
            .arg("-redis.addr")
            .arg(format!("redis://127.0.0.1:{}", server.port))
            .arg("-script")
            .arg(ops("prometheus/dlock.lua"))
            .arg("-web.listen-address")
            .arg(format!("127.0.0.1:{exporter_port}")),
        &dir.0,
    );
    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: redis\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n",
            rules = ops("prometheus/dlock-rules.yml").display()
        ),
    )
    .expect("write prometheus.yml");
    let prometheus_port = free_port();
    let prometheus = Process::start(
        "prometheus",
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"))
            .arg("--log.level=warn"),
        &dir.0,
    );

    // The exporter runs the script: the fields are there before any traffic.
    poll("the exporter to export dlock_locks", PATIENCE, || {
        let (_, body) = http_get(exporter_port, "/metrics")?;
        body.contains("redis_script_values{key=\"dlock_locks\"}")
            .then_some(())
    });
    // A first scrape before the traffic, so that rates see it.
    poll("Prometheus to scrape the exporter", PATIENCE, || {
        let result = query(prometheus_port, "redis_script_values{key=\"dlock_locks\"}")?;
        (!result.is_empty()).then_some(())
    });

    // Known traffic: two grants at once, a hand-off after a wait, a grant
    // after an expiry, a NOTOWNER, an OOM refusal, a renewal; then one
    // client left waiting and two locks held.
    acquire(&mut conn, "a", "first", 60_000).unwrap();
    acquire(&mut conn, "b", "other", 60_000).unwrap();
    let waiter = block_acquire(&server, "a", "second", 60_000, 10_000);
    wait_until("the waiter to block", || waiting(&mut conn, "a") == 1);
    std::thread::sleep(Duration::from_millis(20));
    release(&mut conn, "a", "first");
    waiter.granted();
    acquire(&mut conn, "c", "stalled", 200).unwrap();
    block_acquire(&server, "c", "next", 60_000, 10_000).granted();
    int(&mut conn, &["DLOCK.RENEW", "b", "other", "60000"]);
    assert!(error_of(&mut conn, &["DLOCK.RELEASE", "b", "nobody"]).starts_with("NOTOWNER"));
    cmd(&mut conn, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    assert!(error_of(&mut conn, &["DLOCK.ACQUIRE", "z", "me", "1000"]).starts_with("OOM"));
    cmd(&mut conn, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    let _left_waiting = block_acquire(&server, "b", "patient", 60_000, 0);
    wait_until("the last waiter to block", || waiting(&mut conn, "b") == 1);

    // Every field, with INFO's value, once Prometheus scraped after the traffic.
    let fields = info_dlock(&mut conn);
    assert!(fields.len() > 40, "{fields:?}");
    let expected = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    assert_eq!(expected("dlock_grants_immediate"), Some(3.0));
    assert_eq!(expected("dlock_grants_after_expiry"), Some(1.0));
    assert_eq!(expected("dlock_blocked_clients"), Some(1.0));
    poll(
        "every dlock_* series to carry INFO's value",
        PATIENCE,
        || {
            let result = query(prometheus_port, "redis_script_values{key=~\"dlock_.*\"}")?;
            let scraped: Vec<(String, f64)> = result
                .iter()
                .filter_map(|sample| {
                    let key = sample["metric"]["key"].as_str()?.to_string();
                    let value = sample["value"][1].as_str()?.parse().ok()?;
                    Some((key, value))
                })
                .collect();
            let all_match = fields
                .iter()
                .all(|(name, value)| scraped.iter().any(|(k, v)| k == name && v == value));
            (all_match && scraped.len() == fields.len()).then_some(())
        },
    );

    // Rules: loaded, evaluated without error.
    let rules = poll("the rules to be evaluated", PATIENCE, || {
        let (_, body) = http_get(prometheus_port, "/api/v1/rules")?;
        let reply: Json = serde_json::from_str(&body).ok()?;
        let rules: Vec<Json> = reply["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let evaluated = rules
            .iter()
            .all(|rule| rule["lastEvaluation"] != "0001-01-01T00:00:00Z");
        (evaluated && !rules.is_empty()).then_some(rules)
    });
    assert_eq!(rules.len(), 16, "every rule of dlock-rules.yml loaded");
    for rule in &rules {
        assert_eq!(
            rule["health"], "ok",
            "rule {}: {}",
            rule["name"], rule["lastError"]
        );
    }

    // Every expression of the rules and of the dashboard has data.
    let mut expressions: Vec<(String, String)> = rules
        .iter()
        .map(|rule| {
            let expr = rule["query"].as_str().unwrap_or_default();
            let expr = if rule["type"] == "alerting" {
                without_thresholds(expr)
            } else {
                expr.to_string()
            };
            (format!("rule {}", rule["name"]), expr)
        })
        .collect();
    let dashboard: Json =
        serde_json::from_str(&std::fs::read_to_string(ops("grafana/dlock.json")).unwrap())
            .expect("the dashboard is JSON");
    assert_eq!(
        dashboard["templating"]["list"][0]["type"], "datasource",
        "the datasource is a variable"
    );
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"]
                .as_str()
                .expect("expr")
                .replace("$instance", ".*");
            expressions.push((format!("panel {}", panel["title"]), expr));
        }
    }
    assert!(expressions.len() > 30, "{} expressions", expressions.len());
    for (source, expr) in &expressions {
        poll(
            &format!("{source} to return data: {expr}"),
            PATIENCE,
            || {
                let result = query(prometheus_port, expr)?;
                (!result.is_empty()).then_some(())
            },
        );
    }
    // The wait quantiles are numbers, not NaN: the waits reached the buckets.
    for quantile in ["dlock:wait_ms:p50", "dlock:wait_ms:p99"] {
        let result = query(prometheus_port, quantile).expect(quantile);
        let value: f64 = result[0]["value"][1].as_str().unwrap().parse().unwrap();
        assert!(value.is_finite() && value > 0.0, "{quantile} = {value}");
    }
    drop(prometheus);
}
