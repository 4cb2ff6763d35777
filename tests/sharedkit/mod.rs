//! Helpers of the shared-hold suites (tests/shared.rs,
//! tests/shared_durability.rs): acquires with options, RELEASE SHARED, and
//! the `shared` and `holders` fields of DLOCK.INFO.

#![allow(dead_code)]

use crate::common::*;

/// A grant reply: token, holds (in the mode just granted), owner.
pub type Grant = (i64, i64, Vec<u8>);

/// `command key owner ttl options...` as a grant (None: null); panics on an
/// error reply.
pub fn take(
    conn: &mut Connection,
    command: &str,
    key: &str,
    owner: &str,
    ttl: u64,
    options: &[&str],
) -> Option<Grant> {
    let ttl = ttl.to_string();
    let mut args = vec![command, key, owner, ttl.as_str()];
    args.extend_from_slice(options);
    grant(cmd(conn, &args).unwrap_or_else(|e| panic!("{args:?}: {e}")))
}

/// `DLOCK.ACQUIRE key owner ttl SHARED` as a grant.
pub fn shared(conn: &mut Connection, key: &str, owner: &str, ttl: u64) -> Option<Grant> {
    take(conn, "DLOCK.ACQUIRE", key, owner, ttl, &["SHARED"])
}

/// `DLOCK.ACQUIRE key owner ttl SHARED LIMIT n` as a grant.
pub fn permit(
    conn: &mut Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    limit: u64,
) -> Option<Grant> {
    let limit = limit.to_string();
    take(
        conn,
        "DLOCK.ACQUIRE",
        key,
        owner,
        ttl,
        &["SHARED", "LIMIT", &limit],
    )
}

/// `DLOCK.ACQUIRE key owner ttl` (exclusive) as a grant.
pub fn exclusive(conn: &mut Connection, key: &str, owner: &str, ttl: u64) -> Option<Grant> {
    take(conn, "DLOCK.ACQUIRE", key, owner, ttl, &[])
}

/// `DLOCK.RELEASE key owner SHARED`: the holds left in both modes.
pub fn release_shared(conn: &mut Connection, key: &str, owner: &str) -> i64 {
    int(conn, &["DLOCK.RELEASE", key, owner, "SHARED"])
}

/// A `DLOCK.ACQUIRE ... BLOCK timeout` with extra options, on its own
/// connection.
pub fn block_with(
    server: &Server,
    key: &str,
    owner: &str,
    ttl: u64,
    timeout: u64,
    options: &[&str],
) -> Pending {
    let (ttl, timeout) = (ttl.to_string(), timeout.to_string());
    let mut args = vec![
        "DLOCK.ACQUIRE",
        key,
        owner,
        ttl.as_str(),
        "BLOCK",
        timeout.as_str(),
    ];
    args.extend_from_slice(options);
    spawn_command(server, &args)
}

/// A blocked `DLOCK.ACQUIRE key owner ttl SHARED BLOCK timeout`.
pub fn block_shared(server: &Server, key: &str, owner: &str, ttl: u64, timeout: u64) -> Pending {
    block_with(server, key, owner, ttl, timeout, &["SHARED"])
}

/// One entry of the `holders` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub exclusive: i64,
    pub shared: i64,
    pub token: i64,
    pub pttl: i64,
    /// The permits its shared holds take (1 for exclusive and unweighted).
    pub weight: i64,
}

impl Holder {
    /// The entry without its pttl (which changes with time).
    pub fn fixed(&self) -> (String, i64, i64, i64) {
        (self.owner.clone(), self.exclusive, self.shared, self.token)
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// One field of DLOCK.INFO (panics when the key or the field is missing).
pub fn info_value(conn: &mut Connection, key: &str, field: &str) -> Value {
    let fields = info(conn, key).unwrap_or_else(|| panic!("{key} does not exist"));
    fields
        .into_iter()
        .find(|(name, _)| name == field)
        .unwrap_or_else(|| panic!("DLOCK.INFO {key} has no field {field}"))
        .1
}

/// Parses the value of a `holders` field.
pub fn parse_holders(value: &Value) -> Vec<Holder> {
    let Value::Array(entries) = value else {
        panic!("holders is not an array: {value:?}");
    };
    entries
        .iter()
        .map(|entry| match entry {
            Value::Array(items) => match items.as_slice() {
                [owner, Value::Int(exclusive), Value::Int(shared), Value::Int(token), Value::Int(pttl), Value::Int(weight)] => {
                    Holder {
                        owner: text(owner),
                        exclusive: *exclusive,
                        shared: *shared,
                        token: *token,
                        pttl: *pttl,
                        weight: *weight,
                    }
                }
                other => panic!("not a holders entry: {other:?}"),
            },
            other => panic!("not a holders entry: {other:?}"),
        })
        .collect()
}

/// The `holders` field, in the order the holds began (empty when the key
/// does not exist).
pub fn holders(conn: &mut Connection, key: &str) -> Vec<Holder> {
    if info(conn, key).is_none() {
        return Vec::new();
    }
    parse_holders(&info_value(conn, key, "holders"))
}

/// `holders` without the pttls: (owner, exclusive, shared, token).
pub fn holder_counts(conn: &mut Connection, key: &str) -> Vec<(String, i64, i64, i64)> {
    holders(conn, key).iter().map(Holder::fixed).collect()
}

/// The `shared` field: owners holding the lock shared (0 when missing).
pub fn shared_owners(conn: &mut Connection, key: &str) -> i64 {
    if info(conn, key).is_none() {
        return 0;
    }
    info_int(conn, key, "shared")
}

/// A holders entry without pttl, for comparisons.
pub fn entry(owner: &str, exclusive: i64, shared: i64, token: i64) -> (String, i64, i64, i64) {
    (owner.to_string(), exclusive, shared, token)
}

/// Everything DLOCK.INFO says about `key` except the pttls, which move with
/// time: the exclusive fields, queue, `shared` and the holders.
pub type Picture = Option<(
    Option<Vec<u8>>,
    i64,
    i64,
    Vec<String>,
    i64,
    Vec<(String, i64, i64, i64)>,
)>;

/// The [`Picture`] of `key`.
pub fn picture(conn: &mut Connection, key: &str) -> Picture {
    info(conn, key)?;
    Some((
        info_owner(conn, key),
        info_int(conn, key, "holds"),
        info_int(conn, key, "token"),
        queue(conn, key),
        info_int(conn, key, "shared"),
        holder_counts(conn, key),
    ))
}

/// Each holder's absolute lease deadline (now + pttl, in ms): compare with a
/// tolerance for the time between the calls.
pub fn holder_deadlines(conn: &mut Connection, key: &str) -> Vec<(String, i64)> {
    let before = now_ms();
    let list = holders(conn, key);
    list.into_iter()
        .map(|h| (h.owner.clone(), before + h.pttl))
        .collect()
}

/// `DEBUG DIGEST-VALUE key` (needs a server with DEBUG enabled).
pub fn digest(conn: &mut Connection, key: &str) -> Vec<String> {
    redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(conn)
        .expect("DEBUG DIGEST-VALUE")
}
