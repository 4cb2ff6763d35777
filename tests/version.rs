//! One version everywhere (the crate's): `MODULE LIST`, `COMMAND DOCS`
//! `since`, `INFO dlock` and the README; per-command owner docs; a quiet
//! start (no warning-level line from the module).

use crate::common;

use common::*;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn module_version() -> i64 {
    let parts: Vec<i64> = VERSION
        .split('.')
        .map(|part| part.parse().expect("numeric version part"))
        .collect();
    parts[0] * 10_000 + parts[1] * 100 + parts[2]
}

/// The flat text of a reply, for searching (bulk and simple strings, integers).
fn words(value: &Value) -> Vec<String> {
    match value {
        Value::BulkString(bytes) => vec![String::from_utf8_lossy(bytes).into_owned()],
        Value::SimpleString(text) => vec![text.clone()],
        Value::Int(n) => vec![n.to_string()],
        Value::Array(items) | Value::Set(items) => items.iter().flat_map(words).collect(),
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(k, v)| words(k).into_iter().chain(words(v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The value after `field` in a flat reply.
fn after(words: &[String], field: &str) -> Option<String> {
    let at = words.iter().position(|w| w == field)?;
    words.get(at + 1).cloned()
}

#[test]
fn module_list_command_docs_and_info_show_the_crate_version() {
    let server = Server::start();
    let mut conn = server.connect();

    let modules = words(&cmd(&mut conn, &["MODULE", "LIST"]).expect("MODULE LIST"));
    // Valkey lists its built-in modules too: read dlock's entry.
    let dlock = modules
        .iter()
        .position(|w| w == "dlock")
        .expect("dlock in MODULE LIST");
    assert_eq!(
        after(&modules[dlock..], "ver"),
        Some(module_version().to_string()),
        "MODULE LIST ver is major*10000 + minor*100 + patch of {VERSION}"
    );

    for command in [
        "dlock.acquire",
        "dlock.fair",
        "dlock.release",
        "dlock.renew",
        "dlock.info",
    ] {
        let docs = words(&cmd(&mut conn, &["COMMAND", "DOCS", command]).expect("COMMAND DOCS"));
        assert_eq!(
            after(&docs, "since").as_deref(),
            Some(VERSION),
            "{command}: {docs:?}"
        );
    }

    let info = info_field(&mut conn, "dlock", "dlock_version");
    assert_eq!(info, VERSION);

    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    assert!(
        readme.contains(&format!("dlock {VERSION}")),
        "README.md names the version as `dlock {VERSION}`"
    );
}

/// The summary of `owner` in COMMAND DOCS of `command`.
fn owner_summary(conn: &mut Connection, command: &str) -> String {
    let docs = words(&cmd(conn, &["COMMAND", "DOCS", command]).expect("COMMAND DOCS"));
    let at = docs
        .iter()
        .position(|w| w == "owner")
        .expect("an owner argument");
    let summary = docs[at..]
        .iter()
        .position(|w| w == "summary")
        .expect("owner has a summary");
    docs[at + summary + 1].clone()
}

#[test]
fn command_docs_say_what_a_star_owner_means_per_command() {
    let server = Server::start();
    let mut conn = server.connect();
    for command in ["dlock.acquire", "dlock.fair"] {
        let summary = owner_summary(&mut conn, command);
        assert!(summary.contains("UUID"), "{command}: {summary}");
    }
    for command in ["dlock.release", "dlock.renew"] {
        let summary = owner_summary(&mut conn, command);
        assert!(!summary.contains("UUID"), "{command}: {summary}");
        assert!(summary.contains("literal"), "{command}: {summary}");
    }
}

#[test]
fn the_module_logs_no_warning_when_it_loads() {
    let server = Server::start();
    let mut conn = server.connect();
    // The module is loaded once the server answers; its lines are written.
    cmd(&mut conn, &["PING"]).expect("PING");
    let log = server.log();
    assert!(
        log.contains("<dlock>"),
        "the module logs its data type: {log}"
    );
    // Log lines are `pid:role date time level message`, level `#` = warning.
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("<dlock>") && line.contains(" # "))
        .collect();
    assert!(
        warnings.is_empty(),
        "warning-level lines from the module: {warnings:?}"
    );
    assert!(!log.to_lowercase().contains("defrag"), "{log}");

    // At verbose level the skipped defrag registration is still told, on
    // the servers without the defrag callbacks API (Redis 7, Valkey);
    // Redis 8 has it, and the crate registers its callbacks silently.
    let verbose = Server::with_args(&["--save", "", "--appendonly", "no", "--loglevel", "verbose"]);
    let mut verbose_conn = verbose.connect();
    cmd(&mut verbose_conn, &["PING"]).expect("PING");
    let log = verbose.log();
    let notice = log
        .lines()
        .any(|line| line.contains("<dlock>") && line.contains("defrag") && line.contains(" - "));
    assert_eq!(
        notice,
        !has_defrag_callbacks_api(&mut verbose_conn),
        "the defrag notice is logged at verbose level where the API is missing: {log}"
    );
}

/// Whether the server offers modules `RedisModule_RegisterDefragCallbacks`
/// (Redis 8 and later; not Redis 7 nor Valkey 9).
fn has_defrag_callbacks_api(conn: &mut Connection) -> bool {
    let version = server_version(conn);
    version.valkey.is_none() && version.redis.first().is_some_and(|&major| major >= 8)
}
