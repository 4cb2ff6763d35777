//! One file per command. Each command parses its arguments with the shared
//! cursor in [`parser`], applies itself to the lock through the Redis adapter
//! in [`crate::redis`], and replies. Each file's doc comment states the
//! command's grammar and replies.

pub mod acquire;
pub mod fair;
pub mod info;
pub mod parser;
pub mod release;
pub mod renew;
pub mod setstate;

// The count-down latch.
pub mod awaits;
pub mod countdown;
pub mod latch;
pub mod latchstate;

// Atomic multi-key acquire.
pub mod macquire;

// Waiting for a change of a lock's newest holder.
pub mod watch;

// The module's statistics (INFO dlock).
pub mod stats;

use std::ffi::CStr;

/// Every way a command can fail. Each maps to one static error reply, so that
/// failing costs no allocation and every message is stated once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// Too few arguments: Redis's standard arity error.
    WrongArity,
    /// Unknown or repeated option, or an option missing its value.
    Syntax,
    InvalidTtl,
    /// A ttl above `dlock.max-lease-ms`.
    LeaseTooLong,
    InvalidOwner,
    /// BLOCK with a negative or non-integer timeout.
    InvalidTimeout,
    /// LIMIT outside 1..2^32.
    InvalidLimit,
    /// WEIGHT without both SHARED and LIMIT.
    WeightWithoutLimit,
    /// WEIGHT outside 1..=LIMIT.
    InvalidWeight,
    /// A shared request of an owner that already has another weight on the
    /// lock (held shared, or waiting shared).
    WeightMismatch,
    /// A second owner asked to wait for an upgrade while one already waits.
    Deadlock,
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
    /// A command that creates state while memory is over `maxmemory`.
    OutOfMemory,
    /// Redis refused to block the client.
    BlockFailed,
    /// DLOCK.LATCH with a count outside 1..2^53.
    InvalidLatchCount,
    /// DLOCK.COUNTDOWN with an n that is not a positive integer.
    InvalidDecrement,
    /// DLOCK.LATCHSTATE sent by a client rather than by a master or the AOF.
    InternalLatchCommand,
    /// DLOCK.MACQUIRE with numkeys outside 1..=1024.
    InvalidNumkeys,
    /// DLOCK.WATCH with a token that is not an integer from 0 to 2^63-1.
    InvalidToken,
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
            CommandError::LeaseTooLong => {
                c"ERR invalid ttl: above dlock.max-lease-ms, the longest lease this server grants"
            }
            CommandError::InvalidOwner => {
                c"ERR invalid owner: must be 1 to 512 bytes, or * to generate one"
            }
            CommandError::InvalidTimeout => {
                c"ERR invalid timeout: BLOCK takes a non-negative integer of milliseconds (0 waits forever)"
            }
            CommandError::InvalidLimit => {
                c"ERR invalid limit: LIMIT takes an integer from 1 to 4294967295"
            }
            CommandError::WeightWithoutLimit => {
                c"ERR syntax error: WEIGHT needs SHARED and LIMIT"
            }
            CommandError::InvalidWeight => {
                c"ERR invalid weight: WEIGHT takes an integer from 1 to the LIMIT"
            }
            CommandError::WeightMismatch => {
                c"ERR invalid weight: this owner already holds or waits for this lock shared with another weight (one weight per owner and lock)"
            }
            CommandError::Deadlock => {
                c"DEADLOCK another owner already waits to upgrade its shared hold on this lock; each would wait for the other"
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
            CommandError::OutOfMemory => {
                c"OOM command not allowed when used memory > 'maxmemory'."
            }
            CommandError::BlockFailed => c"ERR could not block the client",
            CommandError::InvalidLatchCount => {
                c"ERR invalid count: must be an integer from 1 to 2^53-1"
            }
            CommandError::InvalidDecrement => {
                c"ERR invalid n: COUNTDOWN takes a positive integer"
            }
            CommandError::InternalLatchCommand => {
                c"ERR DLOCK.LATCHSTATE is internal: only a master's replication stream or the AOF may send it"
            }
            CommandError::InvalidNumkeys => {
                c"ERR invalid numkeys: must be an integer from 1 to 1024"
            }
            CommandError::InvalidToken => {
                c"ERR invalid token: WATCH takes the newest fencing token known, an integer from 0 (free) to 2^63-1"
            }
        }
    }
}

/// The result of a command handler: its reply has been sent, or it failed
/// before replying and the caller sends the error.
pub type CommandResult = Result<(), CommandError>;
