//! `DLOCK.AWAIT key timeout`
//!
//! Waits for a count-down latch to open. `timeout` is in ms (0: forever),
//! with the rules of BLOCK.
//!
//! Replies:
//! * 1 at once when the key does not exist (an opened latch is gone);
//! * otherwise the client blocks until the latch opens (1), until it
//!   disappears without opening, by its ttl, DEL, FLUSH, eviction, RENAME or
//!   MOVE (0), or until the timeout (null).
//!
//! Inside MULTI/EXEC, scripts and functions it never blocks: 1 when the key
//! does not exist, null otherwise.
//!
//! Errors: arity, `ERR invalid timeout`, `ERR syntax error` (extra
//! arguments), `WRONGTYPE`.

use super::parser::{parse_timeout, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::redis::latches::open_latch;
use crate::redis::{awaiters, Argv, Ctx, KeyName};

/// A parsed DLOCK.AWAIT: the timeout in ms (0: forever).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Await {
    pub timeout_ms: u64,
}

impl Await {
    /// Parses `key timeout` (argv[1..]).
    pub fn parse<'a>(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 3 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let timeout_ms = parse_timeout(cursor.required()?)?;
        cursor.finish()?;
        Ok(Self { timeout_ms })
    }

    /// Replies at once or blocks the client on the latch at `name`.
    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        // Read-only: an awaiter joining is no change to the data.
        let mut key = open_latch(ctx, name, false)?;
        if key.latch().is_none() {
            ctx.reply_integer(1);
            return Ok(());
        }
        if !ctx.may_block() {
            ctx.reply_null();
            return Ok(());
        }
        awaiters::block(ctx, name, &mut key, self.timeout_ms)
    }
}

/// Command entry: `DLOCK.AWAIT key timeout`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Await::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_follows_the_block_rules() {
        let ok: &[&[u8]] = &[b"DLOCK.AWAIT", b"k", b"0"];
        assert_eq!(Await::parse(ok), Ok(Await { timeout_ms: 0 }));
        let cases: &[(&[&[u8]], CommandError)] = &[
            (&[b"DLOCK.AWAIT", b"k"], CommandError::WrongArity),
            (&[b"DLOCK.AWAIT", b"k", b"-1"], CommandError::InvalidTimeout),
            (&[b"DLOCK.AWAIT", b"k", b"x"], CommandError::InvalidTimeout),
            (&[b"DLOCK.AWAIT", b"k", b"1", b"2"], CommandError::Syntax),
        ];
        for (args, error) in cases {
            assert_eq!(Await::parse(*args), Err(*error), "{args:?}");
        }
    }
}
