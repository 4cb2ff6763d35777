//! `DLOCK.COUNTDOWN key [n]`
//!
//! Lowers the latch's count by `n` (default 1, an integer >= 1), not below
//! 0. When it reaches 0 the latch opens: every client blocked in
//! `DLOCK.AWAIT` on it is answered 1 in this same step, and the key is
//! deleted. On a missing key nothing changes.
//!
//! Replies: the remaining count (0 when the latch opened or did not exist).
//!
//! Errors: arity, `ERR invalid n`, `ERR syntax error` (extra arguments),
//! `WRONGTYPE`.

use super::parser::{parse_i64, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::redis::latches::{self, open_latch};
use crate::redis::stats::{self, Event};
use crate::redis::{Argv, Ctx, KeyName};

/// A parsed DLOCK.COUNTDOWN: by how much.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Countdown {
    pub n: u64,
}

impl Countdown {
    /// Parses `key [n]` (argv[1..]).
    pub fn parse<'a>(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 2 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let n = match cursor.next_arg() {
            Some(text) => parse_i64(text)
                .filter(|n| *n >= 1)
                .map(|n| n as u64)
                .ok_or(CommandError::InvalidDecrement)?,
            None => 1,
        };
        cursor.finish()?;
        Ok(Self { n })
    }

    /// Counts the latch at `name` down and replies.
    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        // A missing key must see no change at all (a write-opened key
        // invalidates WATCH).
        if open_latch(ctx, name, false)?.latch().is_none() {
            ctx.reply_integer(0);
            return Ok(());
        }
        let mut key = open_latch(ctx, name, true)?;
        let Some(latch) = key.latch_mut() else {
            ctx.reply_integer(0);
            return Ok(());
        };
        let remaining = latch.count_down(self.n);
        stats::record(ctx, Event::Countdown, name);
        if remaining > 0 {
            latches::replicate_set(ctx, name, latch);
        } else {
            stats::record(ctx, Event::LatchOpen, name);
            // Freeing the value answers every awaiter 1.
            key.delete();
            latches::replicate_open(ctx, name);
        }
        ctx.reply_count(remaining);
        Ok(())
    }
}

/// Command entry: `DLOCK.COUNTDOWN key [n]`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Countdown::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_defaults_to_one_and_must_be_positive() {
        let plain: &[&[u8]] = &[b"DLOCK.COUNTDOWN", b"k"];
        assert_eq!(Countdown::parse(plain), Ok(Countdown { n: 1 }));
        let five: &[&[u8]] = &[b"DLOCK.COUNTDOWN", b"k", b"5"];
        assert_eq!(Countdown::parse(five), Ok(Countdown { n: 5 }));
        let huge: &[&[u8]] = &[b"DLOCK.COUNTDOWN", b"k", b"9223372036854775807"];
        assert_eq!(Countdown::parse(huge), Ok(Countdown { n: i64::MAX as u64 }));
        let cases: &[(&[&[u8]], CommandError)] = &[
            (&[b"DLOCK.COUNTDOWN"], CommandError::WrongArity),
            (
                &[b"DLOCK.COUNTDOWN", b"k", b"0"],
                CommandError::InvalidDecrement,
            ),
            (
                &[b"DLOCK.COUNTDOWN", b"k", b"-2"],
                CommandError::InvalidDecrement,
            ),
            (
                &[b"DLOCK.COUNTDOWN", b"k", b"1.5"],
                CommandError::InvalidDecrement,
            ),
            (
                &[b"DLOCK.COUNTDOWN", b"k", b"1", b"2"],
                CommandError::Syntax,
            ),
        ];
        for (args, error) in cases {
            assert_eq!(Countdown::parse(*args), Err(*error), "{args:?}");
        }
    }
}
