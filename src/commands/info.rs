//! `DLOCK.INFO key`
//!
//! Read-only introspection of a lock.
//!
//! Replies: null when the key does not exist; otherwise field/value pairs (a
//! map in RESP3, a flat array in RESP2):
//! * `owner`: the exclusive holder (bulk string), or null when nobody holds
//!   the lock exclusively;
//! * `holds`: its exclusive re-entry count, 0 when nobody holds it exclusively;
//! * `token`: its fencing token, 0 when nobody holds it exclusively;
//! * `pttl`: milliseconds left on its lease, -1 when nobody holds it exclusively;
//! * `waiting`: integer queue length: blocked waiters plus live reservations;
//! * `queue`: array of the queued owners, head first;
//! * `shared`: the number of owners holding the lock shared;
//! * `holders`: one entry per owner holding the lock in any mode, in the
//!   order their holds began: `[owner, exclusive holds, shared holds, token, pttl]`.
//!
//! On a latch: see [`super::latch::reply_info`].
//!
//! Errors: arity, `ERR syntax error` for extra arguments, `WRONGTYPE`.

use super::parser::{ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::redis::{Argv, Ctx};

/// Command entry: `DLOCK.INFO key`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    if args.count() < 2 {
        return Err(CommandError::WrongArity);
    }
    ArgCursor::starting_at(args, 2).finish()?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    let key = match ctx.open_lock(name, false) {
        Err(CommandError::WrongType) => return super::latch::reply_info(ctx, name),
        key => key?,
    };
    let Some(lock) = key.lock() else {
        ctx.reply_null();
        return Ok(());
    };
    let now_ms = clock::now_ms();
    let hold = lock.exclusive_holder(now_ms);
    ctx.reply_map(8);
    ctx.reply_bulk(b"owner");
    match hold {
        Some(hold) => ctx.reply_bulk(&hold.owner),
        None => ctx.reply_null(),
    }
    ctx.reply_bulk(b"holds");
    ctx.reply_count(hold.map_or(0, |hold| hold.exclusive));
    ctx.reply_bulk(b"token");
    ctx.reply_count(hold.map_or(0, |hold| hold.token));
    ctx.reply_bulk(b"pttl");
    match hold {
        Some(hold) => ctx.reply_count(hold.remaining_ms(now_ms)),
        None => ctx.reply_integer(-1),
    }
    ctx.reply_bulk(b"waiting");
    let waiting = lock.waiting(now_ms);
    ctx.reply_count(waiting as u64);
    ctx.reply_bulk(b"queue");
    ctx.reply_array(waiting);
    for entry in lock.queue().live_entries(now_ms) {
        ctx.reply_bulk(&entry.owner);
    }
    ctx.reply_bulk(b"shared");
    ctx.reply_count(lock.shared_owners(now_ms) as u64);
    ctx.reply_bulk(b"holders");
    ctx.reply_array(lock.live_holders(now_ms).count());
    for hold in lock.live_holders(now_ms) {
        ctx.reply_array(5);
        ctx.reply_bulk(&hold.owner);
        ctx.reply_count(hold.exclusive);
        ctx.reply_count(hold.shared);
        ctx.reply_count(hold.token);
        ctx.reply_count(hold.remaining_ms(now_ms));
    }
    Ok(())
}
