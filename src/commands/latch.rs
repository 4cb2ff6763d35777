//! `DLOCK.LATCH key count ttl`
//!
//! Creates a count-down latch (type `dlocklatc`) with `count` (an integer,
//! 1 <= count < 2^53) that lives `ttl` ms at most (the rules of a lock ttl).
//! When the key already holds a latch, nothing changes (Redisson's
//! `trySetCount`).
//!
//! Replies: 1 when created, 0 when the latch existed already.
//!
//! Errors: arity, `ERR invalid count`, `ERR invalid ttl`, `ERR syntax error`
//! (extra arguments), `WRONGTYPE` (the key holds a lock or another type).
//!
//! Also here: `DLOCK.INFO` on a latch ([`reply_info`]).

use super::parser::{parse_i64, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::lock::latch::{Latch, MAX_LATCH_COUNT};
use crate::redis::latches::{self, open_latch};
use crate::redis::stats::{self, Event};
use crate::redis::{Argv, Ctx, KeyName};

/// A parsed DLOCK.LATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateLatch {
    pub count: u64,
    pub ttl_ms: u64,
}

impl CreateLatch {
    /// Parses `key count ttl` (argv[1..]).
    pub fn parse<'a>(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 4 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let count = parse_count(cursor.required()?)?;
        let ttl_ms = cursor.ttl()?;
        cursor.finish()?;
        Ok(Self { count, ttl_ms })
    }

    /// Creates the latch at `name` unless one exists, and replies.
    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        // Look before opening for writing: an existing latch must see no
        // change at all (a write-opened key invalidates WATCH).
        if open_latch(ctx, name, false)?.latch().is_some() {
            ctx.reply_integer(0);
            return Ok(());
        }
        let mut key = open_latch(ctx, name, true)?;
        let deadline_ms = clock::now_ms().saturating_add(self.ttl_ms);
        let latch = Latch::new(self.count, deadline_ms).ok_or(CommandError::InvalidLatchCount)?;
        let latch = key.insert(latch)?;
        latches::replicate_set(ctx, name, latch);
        stats::record(ctx, Event::LatchCreate, name);
        ctx.reply_integer(1);
        Ok(())
    }
}

/// A latch count: an integer in 1..2^53.
pub fn parse_count(text: &[u8]) -> Result<u64, CommandError> {
    parse_i64(text)
        .and_then(|count| u64::try_from(count).ok())
        .filter(|count| (1..=MAX_LATCH_COUNT).contains(count))
        .ok_or(CommandError::InvalidLatchCount)
}

/// Command entry: `DLOCK.LATCH key count ttl`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = CreateLatch::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

/// `DLOCK.INFO key` on a latch: `count`, `pttl`, `waiting` (blocked
/// awaiters), in this order; a map in RESP3, a flat array in RESP2. Null
/// when the key does not exist, `WRONGTYPE` when it holds neither a lock
/// nor a latch.
pub fn reply_info(ctx: Ctx, name: KeyName) -> CommandResult {
    let key = open_latch(ctx, name, false)?;
    let Some(latch) = key.latch() else {
        ctx.reply_null();
        return Ok(());
    };
    ctx.reply_map(3);
    ctx.reply_bulk(b"count");
    ctx.reply_count(latch.count());
    ctx.reply_bulk(b"pttl");
    ctx.reply_count(latch.remaining_ms(clock::now_ms()));
    ctx.reply_bulk(b"waiting");
    ctx.reply_count(latch.awaiter_count() as u64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_count_and_ttl() {
        let args: &[&[u8]] = &[b"DLOCK.LATCH", b"k", b"3", b"1000"];
        assert_eq!(
            CreateLatch::parse(args),
            Ok(CreateLatch {
                count: 3,
                ttl_ms: 1000
            })
        );
        let max: &[&[u8]] = &[b"DLOCK.LATCH", b"k", b"9007199254740991", b"1"];
        assert_eq!(
            CreateLatch::parse(max).map(|c| c.count),
            Ok(MAX_LATCH_COUNT)
        );
    }

    #[test]
    fn rejects_bad_arguments() {
        let cases: &[(&[&[u8]], CommandError)] = &[
            (&[b"DLOCK.LATCH", b"k", b"3"], CommandError::WrongArity),
            (
                &[b"DLOCK.LATCH", b"k", b"0", b"10"],
                CommandError::InvalidLatchCount,
            ),
            (
                &[b"DLOCK.LATCH", b"k", b"-1", b"10"],
                CommandError::InvalidLatchCount,
            ),
            (
                &[b"DLOCK.LATCH", b"k", b"9007199254740992", b"10"],
                CommandError::InvalidLatchCount,
            ),
            (
                &[b"DLOCK.LATCH", b"k", b"x", b"10"],
                CommandError::InvalidLatchCount,
            ),
            (
                &[b"DLOCK.LATCH", b"k", b"3", b"0"],
                CommandError::InvalidTtl,
            ),
            (
                &[b"DLOCK.LATCH", b"k", b"3", b"10", b"NX"],
                CommandError::Syntax,
            ),
        ];
        for (args, error) in cases {
            assert_eq!(CreateLatch::parse(*args), Err(*error), "{args:?}");
        }
    }
}
