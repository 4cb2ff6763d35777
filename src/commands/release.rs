//! `DLOCK.RELEASE key owner`
//!
//! Gives up one hold of `owner`.
//!
//! Replies: the holds left as an integer; 0 means the lock is released: it
//! is handed at once to the head of the queue if a blocked waiter heads it,
//! and the key is deleted if nobody is queued.
//!
//! Errors: `NOTOWNER` when the lock is free, expired or held by another owner
//! (nothing changes), arity, `ERR invalid owner`, `ERR syntax error`,
//! `WRONGTYPE`.

use super::parser::{parse_owner, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::redis::keyspace::{settle, Changes};
use crate::redis::stats::{self, Event};
use crate::redis::{Argv, Ctx, KeyName};

/// A parsed DLOCK.RELEASE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release<'a> {
    pub owner: &'a [u8],
}

impl<'a> Release<'a> {
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 3 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let owner = cursor.required()?;
        parse_owner(owner)?;
        cursor.finish()?;
        Ok(Self { owner })
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut key = ctx.open_lock(name, true)?;
        let now_ms = clock::now_ms();
        let lock = key.lock_mut().ok_or(CommandError::NotOwner)?;
        let remaining = lock
            .release(self.owner, now_ms)
            .map_err(|_| CommandError::NotOwner)?;
        let changes = Changes {
            hold: true,
            ..Changes::default()
        };
        stats::record(ctx, Event::Release, name);
        settle(ctx, name, &mut key, now_ms, changes, Vec::new());
        ctx.reply_count(remaining);
        Ok(())
    }
}

/// Command entry: `DLOCK.RELEASE key owner`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Release::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly_one_owner() {
        let ok: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b"me"];
        assert_eq!(Release::parse(ok), Ok(Release { owner: b"me" }));
        let short: &[&[u8]] = &[b"DLOCK.RELEASE", b"k"];
        assert_eq!(Release::parse(short), Err(CommandError::WrongArity));
        let long: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b"me", b"x"];
        assert_eq!(Release::parse(long), Err(CommandError::Syntax));
        let empty: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b""];
        assert_eq!(Release::parse(empty), Err(CommandError::InvalidOwner));
    }
}
