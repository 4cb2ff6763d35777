//! `DLOCK.SETSTATE key HOLD owner holds token deadline`
//! `DLOCK.SETSTATE key FREE`
//! `DLOCK.SETSTATE key RESERVE owner deadline` (internal)
//!
//! The deterministic effects of lock changes, as the replication stream and
//! the AOF carry them (absolute deadlines in ms since the epoch, explicit
//! tokens and owners, never a value that depends on time or randomness):
//!
//! * `HOLD`: the lock is held by `owner` with `holds` re-entries under fencing
//!   token `token` until `deadline`. A token other than the current hold's is
//!   a new hold, which fulfils that owner's reservations (as on the master).
//!   The server's token counter rises to at least `token`, so a promoted
//!   replica keeps issuing larger tokens.
//! * `FREE`: the hold ended; the queued reservations stay.
//! * `RESERVE`: `owner` keeps a place in the queue until `deadline` (a new
//!   place at the tail, or its existing place refreshed).
//!
//! After each, the key expires at the latest of the lease and the
//! reservation deadlines. Blocked waiters are connection state and are never
//! carried. Accepted only from a master's replication stream or while
//! loading the AOF: a client could otherwise forge a hold.
//!
//! Replies: `OK`. Errors: `ERR DLOCK.SETSTATE is internal`, arity,
//! `ERR invalid owner`, `ERR invalid lock state`, `ERR syntax error`, `WRONGTYPE`.

use super::parser::{is_keyword, parse_i64, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::lock::{Hold, Lock, MAX_OWNER_LEN, MAX_TOKEN};
use crate::redis::{tokens, Argv, Ctx, KeyName};

/// A parsed DLOCK.SETSTATE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetState<'a> {
    Hold {
        owner: &'a [u8],
        holds: u64,
        token: u64,
        deadline_ms: u64,
    },
    Free,
    Reserve {
        owner: &'a [u8],
        deadline_ms: u64,
    },
}

impl<'a> SetState<'a> {
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 3 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let operation = cursor.required()?;
        let state = if is_keyword(operation, "HOLD") {
            SetState::Hold {
                owner: stored_owner(cursor.required()?)?,
                holds: number(cursor.required()?, 1, u64::MAX)?,
                token: number(cursor.required()?, 1, MAX_TOKEN)?,
                deadline_ms: number(cursor.required()?, 0, MAX_TOKEN)?,
            }
        } else if is_keyword(operation, "FREE") {
            SetState::Free
        } else if is_keyword(operation, "RESERVE") {
            SetState::Reserve {
                owner: stored_owner(cursor.required()?)?,
                deadline_ms: number(cursor.required()?, 0, MAX_TOKEN)?,
            }
        } else {
            return Err(CommandError::Syntax);
        };
        cursor.finish()?;
        Ok(state)
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut key = ctx.open_lock(name, true)?;
        let lock = match key.lock_mut() {
            Some(lock) => lock,
            None => key.insert(Lock::new())?,
        };
        match self {
            SetState::Hold {
                owner,
                holds,
                token,
                deadline_ms,
            } => {
                lock.apply_hold(Hold {
                    owner: owner.into(),
                    holds,
                    token,
                    deadline_ms,
                    session: None,
                });
                tokens::observe(token);
            }
            SetState::Free => lock.apply_free(),
            SetState::Reserve { owner, deadline_ms } => {
                lock.reserve(owner, deadline_ms);
            }
        }
        match lock.persisted_expire() {
            Some(deadline_ms) => key.set_deadline(deadline_ms),
            None => key.delete(),
        }
        ctx.reply_ok();
        Ok(())
    }
}

fn stored_owner(owner: &[u8]) -> Result<&[u8], CommandError> {
    if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
        Err(CommandError::InvalidOwner)
    } else {
        Ok(owner)
    }
}

fn number(text: &[u8], min: u64, max: u64) -> Result<u64, CommandError> {
    parse_i64(text)
        .and_then(|value| u64::try_from(value).ok())
        .filter(|value| (min..=max).contains(value))
        .ok_or(CommandError::InvalidState)
}

/// Command entry: `DLOCK.SETSTATE key HOLD|FREE|RESERVE ...`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    if !ctx.is_replicated_or_loading() {
        return Err(CommandError::InternalCommand);
    }
    let request = SetState::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_operation() {
        let hold: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"HOLD",
            b"o",
            b"2",
            b"9",
            b"1700000000000",
        ];
        assert_eq!(
            SetState::parse(hold),
            Ok(SetState::Hold {
                owner: b"o",
                holds: 2,
                token: 9,
                deadline_ms: 1_700_000_000_000
            })
        );
        let free: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"free"];
        assert_eq!(SetState::parse(free), Ok(SetState::Free));
        let reserve: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"RESERVE", b"o", b"5"];
        assert_eq!(
            SetState::parse(reserve),
            Ok(SetState::Reserve {
                owner: b"o",
                deadline_ms: 5
            })
        );
    }

    #[test]
    fn rejects_out_of_range_fields() {
        for bad in [
            &[
                &b"DLOCK.SETSTATE"[..],
                b"k",
                b"HOLD",
                b"o",
                b"0",
                b"9",
                b"1",
            ][..],
            &[b"DLOCK.SETSTATE", b"k", b"HOLD", b"o", b"1", b"0", b"1"],
            &[b"DLOCK.SETSTATE", b"k", b"HOLD", b"o", b"1", b"9", b"-1"],
            &[b"DLOCK.SETSTATE", b"k", b"RESERVE", b"o", b"x"],
        ] {
            assert_eq!(SetState::parse(bad), Err(CommandError::InvalidState));
        }
        let unknown: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"NOPE"];
        assert_eq!(SetState::parse(unknown), Err(CommandError::Syntax));
    }
}
