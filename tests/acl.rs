//! ACL categories: where the server lets modules set them (Redis 7.2+,
//! Valkey), every command is `write` or `read`, `fast` or `slow`, and
//! `blocking` when it can block; where it also lets modules add categories
//! (Redis 7.4+, Valkey 8+), every DLOCK command is in `@dlock`. On Redis
//! 7.0 the module loads without categories, as before.
//!
//! The module detects each API by the function the server provides; these
//! tests know which server they run on by what INFO says, to check that the
//! module found what that server has.

use crate::common;

use common::*;

/// Every DLOCK command and the categories it must carry (besides `dlock`).
/// A new command adds its line here.
const COMMANDS: &[(&str, &[&str])] = &[
    ("dlock.acquire", &["write", "slow", "blocking"]),
    ("dlock.fair", &["write", "slow"]),
    ("dlock.release", &["write", "slow"]),
    ("dlock.renew", &["write", "slow"]),
    ("dlock.info", &["read", "fast"]),
    ("dlock.setstate", &["write", "slow"]),
    ("dlock.macquire", &["write", "slow", "blocking"]),
    ("dlock.latch", &["write", "slow"]),
    ("dlock.countdown", &["write", "slow"]),
    ("dlock.await", &["read", "slow", "blocking"]),
    ("dlock.latchstate", &["write", "slow"]),
    ("dlock.watch", &["read", "slow", "blocking"]),
    ("dlock.stats", &["slow"]),
];

/// The ACL categories this test sets and checks.
const CATEGORIES: &[&str] = &["write", "read", "fast", "slow", "blocking"];

/// What the server lets modules do with ACL categories.
#[derive(Debug, PartialEq)]
enum Support {
    /// Redis 7.0: nothing.
    None,
    /// Redis 7.2: categories on commands, no module category.
    CommandCategories,
    /// Redis 7.4+, Valkey 8+: both.
    ModuleCategory,
}

fn support(conn: &mut Connection) -> Support {
    let version = server_version(conn);
    if let Some(valkey) = version.valkey {
        return if valkey.as_slice() >= [8].as_slice() {
            Support::ModuleCategory
        } else {
            Support::CommandCategories
        };
    }
    if version.redis.as_slice() >= [7, 4].as_slice() {
        Support::ModuleCategory
    } else if version.redis.as_slice() >= [7, 2].as_slice() {
        Support::CommandCategories
    } else {
        Support::None
    }
}

/// The commands in `ACL CAT category`, DLOCK ones only, sorted.
fn dlock_commands_in(conn: &mut Connection, category: &str) -> Vec<String> {
    let mut names: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg(category)
        .query::<Vec<String>>(conn)
        .unwrap_or_else(|e| panic!("ACL CAT {category}: {e}"))
        .into_iter()
        .map(|name| name.to_ascii_lowercase())
        .filter(|name| name.starts_with("dlock."))
        .collect();
    names.sort();
    names
}

fn sorted(names: impl IntoIterator<Item = &'static str>) -> Vec<String> {
    let mut names: Vec<String> = names.into_iter().map(str::to_string).collect();
    names.sort();
    names
}

/// A connection as `user` (password `pw`).
fn connect_as(server: &Server, user: &str) -> Connection {
    redis::Client::open(format!("redis://{user}:pw@127.0.0.1:{}/", server.port))
        .expect("client")
        .get_connection()
        .unwrap_or_else(|e| panic!("AUTH as {user}: {e}"))
}

fn acl_setuser(conn: &mut Connection, rules: &[&str]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(rules)
        .query(conn)
        .unwrap_or_else(|e| panic!("ACL SETUSER {rules:?}: {e}"));
}

fn noperm(conn: &mut Connection, args: &[&str]) {
    let refused = error_of(conn, args);
    assert!(refused.starts_with("NOPERM"), "{args:?}: {refused}");
}

#[test]
fn every_command_carries_the_categories_its_flags_promise() {
    let server = Server::start();
    let mut conn = server.connect();
    let support = support(&mut conn);
    if support == Support::None {
        // Redis 7.0: the module loads as before, says why it sets no
        // categories, and no category holds its commands.
        assert!(
            server
                .log()
                .contains("no RedisModule_SetCommandACLCategories"),
            "the module does not say it skips categories:\n{}",
            server.log()
        );
        for category in CATEGORIES {
            assert!(dlock_commands_in(&mut conn, category).is_empty());
        }
        let unknown = error_of(&mut conn, &["ACL", "CAT", "dlock"]);
        assert!(unknown.contains("dlock"), "{unknown}");
        assert!(
            acquire(&mut conn, "k", "me", 1_000).is_some(),
            "the module works"
        );
        eprintln!(
            "skipped: this server (Redis before 7.2) gives module commands no ACL categories"
        );
        return;
    }

    for category in CATEGORIES {
        let expected = sorted(
            COMMANDS
                .iter()
                .filter(|(_, categories)| categories.contains(category))
                .map(|(name, _)| *name),
        );
        assert_eq!(
            dlock_commands_in(&mut conn, category),
            expected,
            "the DLOCK commands in @{category}"
        );
    }
    // The categories follow the command flags COMMAND INFO shows.
    for (name, categories) in COMMANDS {
        let info = cmd(&mut conn, &["COMMAND", "INFO", name]).expect("COMMAND INFO");
        let Value::Array(entries) = info else {
            panic!("COMMAND INFO {name}: {info:?}")
        };
        let Some(Value::Array(fields)) = entries.first() else {
            panic!("COMMAND INFO {name}: {entries:?}")
        };
        let Some(Value::Array(flags)) = fields.get(2) else {
            panic!("COMMAND INFO {name}: no flags in {fields:?}")
        };
        let flags: Vec<String> = flags
            .iter()
            .map(|flag| match flag {
                Value::SimpleString(text) => text.clone(),
                Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => panic!("COMMAND INFO {name}: flag {other:?}"),
            })
            .collect();
        let has = |flag: &str| flags.iter().any(|f| f == flag);
        assert_eq!(
            has("write"),
            categories.contains(&"write"),
            "{name}: {flags:?}"
        );
        assert_eq!(
            has("readonly"),
            categories.contains(&"read"),
            "{name}: {flags:?}"
        );
        assert_eq!(
            has("fast"),
            categories.contains(&"fast"),
            "{name}: {flags:?}"
        );
    }

    let all = sorted(COMMANDS.iter().map(|(name, _)| *name));
    if support == Support::ModuleCategory {
        assert_eq!(dlock_commands_in(&mut conn, "dlock"), all, "ACL CAT dlock");
        let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut conn).unwrap();
        assert!(categories.iter().any(|c| c == "dlock"), "{categories:?}");
    } else {
        eprintln!("skipped @dlock: this server (Redis 7.2) lets modules add no ACL category");
    }
    assert!(!server.log().contains("panicked"), "a panic was logged");
}

/// `+@dlock ~locks:*` lets a user run dlock on its keys and nothing else.
#[test]
fn a_dlock_user_runs_dlock_and_nothing_else() {
    let server = Server::start();
    let mut admin = server.connect();
    if support(&mut admin) != Support::ModuleCategory {
        eprintln!("skipped: this server lets modules add no ACL category (Redis before 7.4, Valkey before 8)");
        return;
    }
    acl_setuser(&mut admin, &["app", "on", ">pw", "~locks:*", "+@dlock"]);
    let mut app = connect_as(&server, "app");

    let (token, holds, owner) = acquire(&mut app, "locks:a", "me", 60_000).expect("free");
    assert!(token > 0);
    assert_eq!((holds, owner), (1, b"me".to_vec()));
    assert_eq!(info_owner(&mut app, "locks:a"), Some(b"me".to_vec()));
    assert_eq!(
        int(&mut app, &["DLOCK.RENEW", "locks:a", "me", "60000"]),
        token
    );
    assert_eq!(int(&mut app, &["DLOCK.RELEASE", "locks:a", "me"]), 0);
    let multi = cmd(
        &mut app,
        &[
            "DLOCK.MACQUIRE",
            "2",
            "locks:{m}1",
            "locks:{m}2",
            "me",
            "60000",
        ],
    )
    .expect("MACQUIRE");
    assert_ne!(multi, Value::Nil, "MACQUIRE granted");
    assert_eq!(
        int(&mut app, &["DLOCK.LATCH", "locks:gate", "1", "60000"]),
        1
    );
    assert_eq!(int(&mut app, &["DLOCK.COUNTDOWN", "locks:gate"]), 0);
    let awaited = cmd(&mut app, &["DLOCK.AWAIT", "locks:gate", "1"]).expect("AWAIT");
    assert!(
        matches!(awaited, Value::Int(_)),
        "AWAIT of an open latch: {awaited:?}"
    );
    assert!(cmd(&mut app, &["DLOCK.FAIR", "locks:b", "me", "1000"]).is_ok());

    // Nothing but dlock, and only on its keys.
    noperm(&mut app, &["SET", "locks:a", "v"]);
    noperm(&mut app, &["GET", "locks:a"]);
    noperm(&mut app, &["DEL", "locks:a"]);
    noperm(&mut app, &["DLOCK.ACQUIRE", "other:a", "me", "1000"]);
    let exists: i64 = redis::cmd("EXISTS")
        .arg("other:a")
        .query(&mut admin)
        .unwrap();
    assert_eq!(exists, 0, "a refused ACQUIRE created its key");
}

/// `+@write` grants the writers, `+@read` DLOCK.INFO and AWAIT, and
/// neither the other.
#[test]
fn read_and_write_categories_grant_the_commands_in_them() {
    let server = Server::start();
    let mut admin = server.connect();
    let support = support(&mut admin);
    acl_setuser(&mut admin, &["writer", "on", ">pw", "~*", "+@write"]);
    acl_setuser(&mut admin, &["reader", "on", ">pw", "~*", "+@read"]);
    let mut writer = connect_as(&server, "writer");
    let mut reader = connect_as(&server, "reader");
    if support == Support::None {
        // Redis 7.0: the categories hold no module command.
        noperm(&mut writer, &["DLOCK.ACQUIRE", "k", "me", "1000"]);
        noperm(&mut reader, &["DLOCK.INFO", "k"]);
        eprintln!(
            "skipped: this server (Redis before 7.2) gives module commands no ACL categories"
        );
        return;
    }
    assert!(acquire(&mut writer, "k", "me", 60_000).is_some());
    assert_eq!(int(&mut writer, &["DLOCK.RELEASE", "k", "me"]), 0);
    assert_eq!(int(&mut writer, &["DLOCK.LATCH", "gate", "2", "60000"]), 1);
    assert_eq!(int(&mut writer, &["DLOCK.COUNTDOWN", "gate"]), 1);
    noperm(&mut writer, &["DLOCK.INFO", "k"]);
    noperm(&mut writer, &["DLOCK.AWAIT", "gate", "1"]);

    assert!(info(&mut reader, "k").is_none());
    assert_eq!(
        cmd(&mut reader, &["DLOCK.AWAIT", "gate", "1"]).expect("AWAIT"),
        Value::Nil,
        "the latch is still closed"
    );
    noperm(&mut reader, &["DLOCK.ACQUIRE", "k", "me", "1000"]);
    noperm(&mut reader, &["DLOCK.COUNTDOWN", "gate"]);
}
