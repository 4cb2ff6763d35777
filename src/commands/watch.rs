//! `DLOCK.WATCH key token timeout`
//!
//! Waits for a change of a lock without taking it (leader election: who
//! leads now). `token` is the newest fencing token the caller knows for the
//! key, 0 for "I know it as free". The key's *newest token* is the largest
//! token among its live holders (any mode), 0 without one (missing key,
//! only waiters or reservations, every lease ended). `timeout` is in ms (0:
//! forever), with the rules of BLOCK.
//!
//! Replies:
//! * when the newest token differs from `token`, at once: `[newest-token,
//!   owner, pttl]`, the owner and remaining lease of the newest hold, or
//!   `[0, nil, -1]` without one;
//! * otherwise the client blocks until it differs (a grant, the release or
//!   expiry of that hold, DEL, FLUSH, RENAME, MOVE, eviction, RESTORE, a
//!   replicated change), then replies the same way; a re-entry, a RENEW or
//!   a change among older holders leaves the newest token as it is and
//!   wakes nobody;
//! * null when the timeout passes, or on `CLIENT UNBLOCK`.
//!
//! Inside MULTI/EXEC, scripts and functions it never blocks: the state when
//! it differs, null otherwise. It reads only: it works on replicas (a change
//! replicated there wakes it) and during a grace window.
//!
//! Errors: arity, `ERR invalid token`, `ERR invalid timeout`, `ERR syntax
//! error` (extra arguments), `WRONGTYPE` (a latch or any other type).

use super::parser::{parse_i64, parse_timeout, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::redis::{watchers, Argv, Ctx, KeyName};

/// A parsed DLOCK.WATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The newest token the caller knows (0: it knows the lock as free).
    pub token: u64,
    /// How long to wait, in ms (0: forever).
    pub timeout_ms: u64,
}

/// Validates a known token: an integer from 0 to 2^63-1.
pub fn parse_token(token: &[u8]) -> Result<u64, CommandError> {
    parse_i64(token)
        .and_then(|token| u64::try_from(token).ok())
        .ok_or(CommandError::InvalidToken)
}

impl Watch {
    /// Parses `key token timeout` (argv[1..]).
    pub fn parse<'a>(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 4 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let token = parse_token(cursor.required()?)?;
        let timeout_ms = parse_timeout(cursor.required()?)?;
        cursor.finish()?;
        Ok(Self { token, timeout_ms })
    }

    /// Replies at once or blocks the client on the lock at `name`.
    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        // Read-only: a watcher joining is no change to the data.
        let key = ctx.open_lock(name, false)?;
        let now_ms = crate::clock::now_ms();
        let newest = key.lock().and_then(|lock| lock.newest_hold(now_ms));
        if newest.map_or(0, |hold| hold.token) != self.token {
            watchers::reply_newest(ctx, newest, now_ms);
            return Ok(());
        }
        if !ctx.may_block() {
            ctx.reply_null();
            return Ok(());
        }
        let deadline_ms = newest.map(|hold| hold.deadline_ms);
        drop(key);
        watchers::block(ctx, name, self.token, self.timeout_ms, deadline_ms)
    }
}

/// Command entry: `DLOCK.WATCH key token timeout`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Watch::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_and_timeout_are_checked() {
        let ok: &[&[u8]] = &[b"DLOCK.WATCH", b"k", b"0", b"0"];
        assert_eq!(
            Watch::parse(ok),
            Ok(Watch {
                token: 0,
                timeout_ms: 0
            })
        );
        let ok: &[&[u8]] = &[b"DLOCK.WATCH", b"k", b"9223372036854775807", b"15"];
        assert_eq!(
            Watch::parse(ok),
            Ok(Watch {
                token: i64::MAX as u64,
                timeout_ms: 15
            })
        );
        let cases: &[(&[&[u8]], CommandError)] = &[
            (&[b"DLOCK.WATCH", b"k", b"0"], CommandError::WrongArity),
            (
                &[b"DLOCK.WATCH", b"k", b"-1", b"0"],
                CommandError::InvalidToken,
            ),
            (
                &[b"DLOCK.WATCH", b"k", b"x", b"0"],
                CommandError::InvalidToken,
            ),
            (
                &[b"DLOCK.WATCH", b"k", b"9223372036854775808", b"0"],
                CommandError::InvalidToken,
            ),
            (
                &[b"DLOCK.WATCH", b"k", b"1", b"-1"],
                CommandError::InvalidTimeout,
            ),
            (
                &[b"DLOCK.WATCH", b"k", b"1", b"1.5"],
                CommandError::InvalidTimeout,
            ),
            (
                &[b"DLOCK.WATCH", b"k", b"1", b"2", b"3"],
                CommandError::Syntax,
            ),
        ];
        for (args, error) in cases {
            assert_eq!(Watch::parse(*args), Err(*error), "{args:?}");
        }
    }
}
