//! `DLOCK.INFO key [FULL]`
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
//!   order their holds began: `[owner, exclusive holds, shared holds, token,
//!   pttl, weight]`, the weight being the permits its shared holds take
//!   (WEIGHT; 1 for exclusive holds and unweighted shared ones).
//!
//! With `FULL` (as `XINFO STREAM key FULL`), two more fields:
//! * `queue-detail`: one map per `queue` entry, in the same order: `owner`,
//!   `kind` (`blocked` or `reservation`), `mode` (`exclusive` or `shared`),
//!   `limit` (integer, or null without LIMIT), `weight` (the permits it
//!   asks for: WEIGHT, 1 without), `waited-ms` (since the owner
//!   took this place; -1 when unknown: a reservation loaded from a file or
//!   replicated), `expires-in-ms` (until the BLOCK timeout or the
//!   reservation's deadline; -1 for BLOCK 0), `client-id` (the blocked
//!   client's id, as CLIENT LIST shows it; null for a reservation);
//! * `holders-detail`: one map per `holders` entry: `owner`, `holds` (both
//!   modes together), `exclusive`, `shared`, `token`, `pttl`, `client-id`
//!   (the connection of a SESSION hold, null otherwise).
//!
//! On a latch: see [`super::latch::reply_info`].
//!
//! Errors: arity, `ERR syntax error` for extra arguments, `WRONGTYPE`.

use super::parser::{is_keyword, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::lock::{EntryKind, Lock, Mode};
use crate::redis::{waiters, Argv, Ctx};

/// Command entry: `DLOCK.INFO key [FULL]`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    if args.count() < 2 {
        return Err(CommandError::WrongArity);
    }
    let mut cursor = ArgCursor::starting_at(args, 2);
    let full = match cursor.next_arg() {
        None => false,
        Some(option) if is_keyword(option, "FULL") => true,
        Some(_) => return Err(CommandError::Syntax),
    };
    cursor.finish()?;
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
    ctx.reply_map(if full { 10 } else { 8 });
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
        ctx.reply_array(6);
        ctx.reply_bulk(&hold.owner);
        ctx.reply_count(hold.exclusive);
        ctx.reply_count(u64::from(hold.shared));
        ctx.reply_count(hold.token);
        ctx.reply_count(hold.remaining_ms(now_ms));
        ctx.reply_count(u64::from(hold.weight));
    }
    if full {
        reply_details(ctx, lock, now_ms);
    }
    Ok(())
}

/// The `queue-detail` and `holders-detail` fields of `FULL`.
fn reply_details(ctx: Ctx, lock: &Lock, now_ms: u64) {
    let reply_optional = |value: Option<u64>| match value {
        Some(value) => ctx.reply_count(value),
        None => ctx.reply_null(),
    };
    let reply_remaining = |deadline: Option<u64>| match deadline {
        Some(deadline) => ctx.reply_count(deadline.saturating_sub(now_ms)),
        None => ctx.reply_integer(-1),
    };
    ctx.reply_bulk(b"queue-detail");
    ctx.reply_array(lock.waiting(now_ms));
    for entry in lock.queue().live_entries(now_ms) {
        ctx.reply_map(8);
        ctx.reply_bulk(b"owner");
        ctx.reply_bulk(&entry.owner);
        let want = entry.want();
        let (kind, client, deadline): (&[u8], _, _) = match &entry.kind {
            EntryKind::Waiter(waiter) => {
                let (client, times_out_at) = waiters::describe(waiter.id).unzip();
                (b"blocked", client, times_out_at.flatten())
            }
            EntryKind::Reservation { deadline_ms, .. } => {
                (b"reservation", None, Some(*deadline_ms))
            }
        };
        ctx.reply_bulk(b"kind");
        ctx.reply_bulk(kind);
        ctx.reply_bulk(b"mode");
        ctx.reply_bulk(match want.mode {
            Mode::Exclusive => b"exclusive",
            Mode::Shared => b"shared",
        });
        ctx.reply_bulk(b"limit");
        reply_optional(want.limit.map(u64::from));
        ctx.reply_bulk(b"weight");
        ctx.reply_count(u64::from(want.weight));
        ctx.reply_bulk(b"waited-ms");
        match entry.since_ms {
            0 => ctx.reply_integer(-1),
            since => ctx.reply_count(now_ms.saturating_sub(since)),
        }
        ctx.reply_bulk(b"expires-in-ms");
        reply_remaining(deadline);
        ctx.reply_bulk(b"client-id");
        reply_optional(client);
    }
    ctx.reply_bulk(b"holders-detail");
    ctx.reply_array(lock.live_holders(now_ms).count());
    for hold in lock.live_holders(now_ms) {
        ctx.reply_map(7);
        ctx.reply_bulk(b"owner");
        ctx.reply_bulk(&hold.owner);
        ctx.reply_bulk(b"holds");
        ctx.reply_count(hold.total());
        ctx.reply_bulk(b"exclusive");
        ctx.reply_count(hold.exclusive);
        ctx.reply_bulk(b"shared");
        ctx.reply_count(u64::from(hold.shared));
        ctx.reply_bulk(b"token");
        ctx.reply_count(hold.token);
        ctx.reply_bulk(b"pttl");
        ctx.reply_count(hold.remaining_ms(now_ms));
        ctx.reply_bulk(b"client-id");
        reply_optional(hold.session.map(std::num::NonZeroU64::get));
    }
}
