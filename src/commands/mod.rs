//! One file per command. Each command parses its arguments with the shared
//! cursor in [`parser`], applies itself to the lock through the Redis adapter
//! in [`crate::redis`], and replies. Each file's doc comment states the
//! command's grammar and replies.

pub mod acquire;
pub mod info;
pub mod parser;
pub mod release;
pub mod renew;
pub mod setstate;

use std::ffi::CStr;

use crate::redis::{Ctx, KeyName, LockKey};

/// Every way a command can fail. Each maps to one static error reply, so that
/// failing costs no allocation and every message is stated once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// Too few arguments: Redis's standard arity error.
    WrongArity,
    /// Unknown or repeated option, or an option missing its value.
    Syntax,
    InvalidTtl,
    InvalidOwner,
    /// A numeric field of the internal replication command is out of range.
    InvalidState,
    /// The caller does not hold the lock.
    NotOwner,
    /// The key holds a value of another type.
    WrongType,
    /// DLOCK.SETSTATE sent by a client rather than by a master or the AOF.
    InternalCommand,
    /// Redis refused to store the value.
    StoreFailed,
}

impl CommandError {
    /// The error reply (not used for `WrongArity`, which Redis formats itself).
    pub fn message(self) -> &'static CStr {
        match self {
            CommandError::WrongArity => c"ERR wrong number of arguments",
            CommandError::Syntax => c"ERR syntax error",
            CommandError::InvalidTtl => {
                c"ERR invalid ttl: must be a positive integer of milliseconds below 2^53"
            }
            CommandError::InvalidOwner => {
                c"ERR invalid owner: must be 1 to 512 bytes, or * to generate one"
            }
            CommandError::InvalidState => c"ERR invalid lock state",
            CommandError::NotOwner => {
                c"NOTOWNER the lock is not held by this owner (free, expired, or held by another owner)"
            }
            CommandError::WrongType => {
                c"WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            CommandError::InternalCommand => {
                c"ERR DLOCK.SETSTATE is internal: only a master's replication stream or the AOF may send it"
            }
            CommandError::StoreFailed => c"ERR could not store the lock value",
        }
    }
}

/// The result of a command handler: its reply has been sent, or it failed
/// before replying and the caller sends the error.
pub type CommandResult = Result<(), CommandError>;

/// Makes the key, the persisted expire and the replication stream reflect the
/// lock after a change: a live lock gets its deadline as the key's absolute
/// expire and is replicated as an explicit state (absolute deadline, explicit
/// token and owner, so replicas and the AOF never depend on time or on a
/// generated UUID); a vacant lock is deleted, and the deletion replicated.
pub(crate) fn commit(ctx: Ctx, name: KeyName, key: &mut LockKey, now_ms: u64) {
    let deadline = key
        .lock()
        .and_then(|lock| lock.live_hold(now_ms))
        .map(|hold| hold.deadline_ms);
    match deadline {
        Some(deadline_ms) => {
            key.set_deadline(deadline_ms);
            if let Some(hold) = key.lock().and_then(|lock| lock.stored_hold()) {
                ctx.replicate_hold(name, hold);
            }
        }
        None => {
            key.delete();
            ctx.replicate_delete(name);
        }
    }
}
