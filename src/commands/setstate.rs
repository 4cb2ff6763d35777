//! `DLOCK.SETSTATE key owner holds token deadline` (internal)
//!
//! The deterministic effect of every lock change, as the replication stream
//! and the AOF carry it: the key holds a lock owned by `owner` with `holds`
//! re-entries under fencing token `token`, whose lease ends at the absolute
//! `deadline` (ms since the epoch). It also raises the server's token counter
//! to at least `token`, so a promoted replica keeps issuing larger tokens.
//!
//! Accepted only from a master's replication stream or while loading the
//! AOF: a client could otherwise forge a hold.
//!
//! Replies: `OK`. Errors: `ERR DLOCK.SETSTATE is internal`, arity,
//! `ERR invalid owner`, `ERR invalid lock state`, `WRONGTYPE`.

use super::parser::{parse_i64, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::lock::{Hold, Lock, MAX_OWNER_LEN, MAX_TOKEN};
use crate::redis::{tokens, Argv, Ctx, KeyName};

/// A parsed DLOCK.SETSTATE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetState<'a> {
    pub owner: &'a [u8],
    pub holds: u64,
    pub token: u64,
    pub deadline_ms: u64,
}

impl<'a> SetState<'a> {
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 6 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let owner = cursor.required()?;
        if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
            return Err(CommandError::InvalidOwner);
        }
        let holds = number(cursor.required()?, 1, u64::MAX)?;
        let token = number(cursor.required()?, 1, MAX_TOKEN)?;
        let deadline_ms = number(cursor.required()?, 0, MAX_TOKEN)?;
        cursor.finish()?;
        Ok(Self {
            owner,
            holds,
            token,
            deadline_ms,
        })
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut key = ctx.open_lock(name, true)?;
        let state = Lock::with_hold(Hold {
            owner: self.owner.into(),
            holds: self.holds,
            token: self.token,
            deadline_ms: self.deadline_ms,
        });
        match key.lock_mut() {
            Some(lock) => *lock = state,
            None => {
                key.insert(state)?;
            }
        }
        key.set_deadline(self.deadline_ms);
        tokens::observe(self.token);
        ctx.reply_ok();
        Ok(())
    }
}

fn number(text: &[u8], min: u64, max: u64) -> Result<u64, CommandError> {
    parse_i64(text)
        .and_then(|value| u64::try_from(value).ok())
        .filter(|value| (min..=max).contains(value))
        .ok_or(CommandError::InvalidState)
}

/// Command entry: `DLOCK.SETSTATE key owner holds token deadline`.
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
    fn parses_a_full_state() {
        let args: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"o", b"2", b"9", b"1700000000000"];
        assert_eq!(
            SetState::parse(args),
            Ok(SetState {
                owner: b"o",
                holds: 2,
                token: 9,
                deadline_ms: 1_700_000_000_000
            })
        );
    }

    #[test]
    fn rejects_out_of_range_fields() {
        for bad in [
            &[&b"DLOCK.SETSTATE"[..], b"k", b"o", b"0", b"9", b"1"][..],
            &[b"DLOCK.SETSTATE", b"k", b"o", b"1", b"0", b"1"],
            &[b"DLOCK.SETSTATE", b"k", b"o", b"1", b"9", b"-1"],
            &[b"DLOCK.SETSTATE", b"k", b"o", b"x", b"9", b"1"],
        ] {
            assert_eq!(SetState::parse(bad), Err(CommandError::InvalidState));
        }
    }
}
