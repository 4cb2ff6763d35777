//! `DLOCK.LATCHSTATE key SET count deadline`
//! `DLOCK.LATCHSTATE key OPEN` (internal)
//!
//! The deterministic effects of latch changes, as the replication stream and
//! the AOF carry them (absolute deadlines in ms since the epoch):
//!
//! * `SET`: the key holds a latch of `count` ending at `deadline` (created,
//!   or its count and deadline replaced; its awaiters stay). The key
//!   expires at `deadline`.
//! * `OPEN`: the latch opened: its awaiters (clients blocked on a replica)
//!   are answered 1 and the key is deleted. Nothing on a missing key.
//!
//! Accepted only from a master's replication stream or while loading the
//! AOF. Replies: `OK`. Errors: `ERR DLOCK.LATCHSTATE is internal`, arity,
//! `ERR invalid lock state`, `ERR syntax error`, `WRONGTYPE`.

use super::parser::{is_keyword, ArgCursor, ArgSource};
use super::setstate::number;
use super::{CommandError, CommandResult};
use crate::lock::latch::{Latch, MAX_LATCH_COUNT};
use crate::lock::MAX_TOKEN;
use crate::redis::latches::open_latch;
use crate::redis::{Argv, Ctx, KeyName};

/// A parsed DLOCK.LATCHSTATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatchState {
    Set { count: u64, deadline_ms: u64 },
    Open,
}

impl LatchState {
    pub fn parse<'a>(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 3 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let operation = cursor.required()?;
        let state = if is_keyword(operation, "SET") {
            LatchState::Set {
                count: number(cursor.required()?, 1, MAX_LATCH_COUNT)?,
                deadline_ms: number(cursor.required()?, 0, MAX_TOKEN)?,
            }
        } else if is_keyword(operation, "OPEN") {
            LatchState::Open
        } else {
            return Err(CommandError::Syntax);
        };
        cursor.finish()?;
        Ok(state)
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut key = open_latch(ctx, name, true)?;
        match self {
            LatchState::Set { count, deadline_ms } => match key.latch_mut() {
                Some(latch) => {
                    latch.apply(count, deadline_ms);
                    key.set_deadline(deadline_ms);
                }
                None => {
                    let latch = Latch::new(count, deadline_ms).ok_or(CommandError::InvalidState)?;
                    key.insert(latch)?;
                }
            },
            LatchState::Open => {
                if let Some(latch) = key.latch_mut() {
                    latch.open();
                    key.delete();
                }
            }
        }
        ctx.reply_ok();
        Ok(())
    }
}

/// Command entry: `DLOCK.LATCHSTATE key SET|OPEN ...`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    if !ctx.is_replicated_or_loading() {
        return Err(CommandError::InternalLatchCommand);
    }
    let request = LatchState::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_operation_and_rejects_bad_fields() {
        let set: &[&[u8]] = &[b"DLOCK.LATCHSTATE", b"k", b"SET", b"3", b"1700000000000"];
        assert_eq!(
            LatchState::parse(set),
            Ok(LatchState::Set {
                count: 3,
                deadline_ms: 1_700_000_000_000
            })
        );
        let open: &[&[u8]] = &[b"DLOCK.LATCHSTATE", b"k", b"open"];
        assert_eq!(LatchState::parse(open), Ok(LatchState::Open));
        let cases: &[(&[&[u8]], CommandError)] = &[
            (
                &[b"DLOCK.LATCHSTATE", b"k", b"SET", b"0", b"1"],
                CommandError::InvalidState,
            ),
            (
                &[b"DLOCK.LATCHSTATE", b"k", b"SET", b"1", b"-1"],
                CommandError::InvalidState,
            ),
            (
                &[b"DLOCK.LATCHSTATE", b"k", b"SET", b"1"],
                CommandError::WrongArity,
            ),
            (
                &[b"DLOCK.LATCHSTATE", b"k", b"OPEN", b"1"],
                CommandError::Syntax,
            ),
            (&[b"DLOCK.LATCHSTATE", b"k", b"NOPE"], CommandError::Syntax),
        ];
        for (args, error) in cases {
            assert_eq!(LatchState::parse(*args), Err(*error), "{args:?}");
        }
    }
}
