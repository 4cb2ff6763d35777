//! `DLOCK.FAIR key owner ttl [SHARED] [LIMIT n] [BLOCK timeout] [SESSION]`
//!
//! Like DLOCK.ACQUIRE, but a caller that is not granted the lock and does not
//! block keeps its place: it joins the queue (or keeps its place if it has
//! one) as a reservation lasting `dlock.fair-reservation-ms` (default 5000)
//! from this call; calling again refreshes it. While the lock is free and a
//! reservation heads the queue, only that owner can take it. A reservation
//! that runs out is dropped and the next entry moves up. With BLOCK it
//! behaves exactly like DLOCK.ACQUIRE with BLOCK (an owner with a
//! reservation waits in the reservation's place).
//!
//! Replies and errors: as DLOCK.ACQUIRE (null when only a reservation was made).

use super::acquire::{Acquire, Fallback};
use super::{CommandError, CommandResult};
use crate::redis::{Argv, Ctx};
use std::sync::atomic::{AtomicI64, Ordering};

/// `dlock.fair-reservation-ms`: how long a FAIR reservation keeps its place.
pub static FAIR_RESERVATION_MS: AtomicI64 = AtomicI64::new(5_000);

/// Command entry: `DLOCK.FAIR key owner ttl [SHARED] [LIMIT n] [BLOCK timeout] [SESSION]`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Acquire::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    let for_ms = u64::try_from(FAIR_RESERVATION_MS.load(Ordering::Relaxed)).unwrap_or(1);
    request.apply(ctx, name, Fallback::Reserve { for_ms })
}
