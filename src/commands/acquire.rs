//! `DLOCK.ACQUIRE key owner ttl [SHARED] [LIMIT n] [WEIGHT w] [BLOCK timeout] [SESSION]`
//!
//! Takes the lock for `owner` with a lease of `ttl` milliseconds, exclusively
//! or (with `SHARED`) beside other shared holders.
//!
//! * `owner`: 1 to 512 bytes naming the holder, or `*` for a server-generated
//!   UUID v4 (returned in the reply).
//! * `ttl`: a positive integer below 2^53.
//! * `SHARED`: a shared hold (a read lock, a semaphore permit). Without it the
//!   hold is exclusive: it excludes every other owner in either mode.
//! * `LIMIT n` (with `SHARED` only; 1 <= n < 2^32): compatible only if the
//!   weights of the distinct owners that would then hold the lock shared,
//!   the caller included, add up to at most `n` (a semaphore of `n`
//!   permits). Without it there is no bound.
//! * `WEIGHT w` (with `SHARED` and `LIMIT` only; 1 <= w <= n): the caller
//!   takes `w` permits (1 without it). One owner has one weight per lock:
//!   a shared request of an owner that holds the lock shared, or waits for
//!   it shared, with another weight is refused.
//! * `BLOCK timeout`: when the lock is not granted at once, wait in the
//!   lock's FIFO queue for up to `timeout` ms (0: forever). Ignored inside
//!   MULTI/EXEC, scripts and functions, where one immediate attempt is made.
//! * `SESSION`: tie the hold to this connection: closing it releases the
//!   owner's holds (both modes).
//!
//! Options come in any order. A new hold is granted only to the head of the
//! queue, or to anyone when the queue is empty, and only when compatible
//! with the current holders. A holder re-enters at once: exclusive after
//! exclusive, shared after either (even past a waiting writer, whatever its
//! LIMIT). A holder that holds the lock only shared and asks for an
//! exclusive hold upgrades: at once when it is the only holder; otherwise
//! null, or with BLOCK it waits ahead of every other waiter, keeping its
//! shared holds, and only one owner may wait so per lock.
//!
//! Tokens: an owner's hold has one token, new when the owner goes from no
//! hold to a hold and when it goes from no exclusive hold to an exclusive
//! one; other acquires keep it. Any grant resets the owner's lease.
//!
//! Replies: `[token, holds, owner]` on a grant (at once or when a blocked
//! wait ends with the lock), `holds` being the owner's count in the mode
//! granted; null when not granted (nothing changes) or when the BLOCK
//! timeout passes.
//!
//! Errors: arity, `ERR invalid ttl`, `ERR invalid owner`, `ERR invalid
//! timeout`, `ERR invalid limit`, `ERR syntax error` (unknown or repeated
//! option, LIMIT without SHARED; `WEIGHT needs SHARED and LIMIT`), `ERR
//! invalid weight` (outside 1..=LIMIT, or another weight than the owner's
//! on this lock, which changes nothing), `DEADLOCK` (an upgrade with BLOCK while
//! another owner's upgrade waits), `WRONGTYPE`.

use super::parser::{
    is_keyword, parse_limit, parse_owner, parse_timeout, parse_ttl, parse_weight, ArgCursor,
    ArgSource, OwnerArg,
};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::lock::{self, Grant, Lock, Mode, Request, Want};
use crate::redis::audit::Fact;
use crate::redis::grace;
use crate::redis::keyspace::{self, settle, Changes};
use crate::redis::stats::{self, Event};
use crate::redis::{orphans, tokens, waiters, Argv, Ctx, KeyName, LockKey};

/// Length of a generated owner: a hyphenated UUID.
pub(super) const GENERATED_OWNER_LEN: usize = 36;

/// A parsed DLOCK.ACQUIRE or DLOCK.FAIR (they share their grammar).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub owner: OwnerArg<'a>,
    pub ttl_ms: u64,
    /// The mode and LIMIT asked for.
    pub want: Want,
    /// BLOCK timeout in ms (0: forever).
    pub block_ms: Option<u64>,
    pub session: bool,
}

/// What to do when the lock is not granted at once and the caller does not block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// ACQUIRE: reply null, leave no trace.
    Nothing,
    /// FAIR: keep the caller's place as a reservation for this many ms.
    Reserve { for_ms: u64 },
}

impl<'a> Acquire<'a> {
    /// Parses `key owner ttl [SHARED] [LIMIT n] [WEIGHT w] [BLOCK timeout]
    /// [SESSION]` (argv[1..]).
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 4 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let owner = cursor.owner()?;
        let ttl_ms = cursor.ttl()?;
        let mut request = Self {
            owner,
            ttl_ms,
            want: Want::EXCLUSIVE,
            block_ms: None,
            session: false,
        };
        let mut weight = None;
        while let Some(option) = cursor.next_arg() {
            if is_keyword(option, "BLOCK") && request.block_ms.is_none() {
                request.block_ms = Some(parse_timeout(cursor.option_value()?)?);
            } else if is_keyword(option, "SESSION") && !request.session {
                request.session = true;
            } else if is_keyword(option, "SHARED") && request.want.mode == Mode::Exclusive {
                request.want.mode = Mode::Shared;
            } else if is_keyword(option, "LIMIT") && request.want.limit.is_none() {
                request.want.limit = Some(parse_limit(cursor.option_value()?)?);
            } else if is_keyword(option, "WEIGHT") && weight.is_none() {
                weight = Some(parse_weight(cursor.option_value()?)?);
            } else {
                return Err(CommandError::Syntax);
            }
        }
        if let Some(weight) = weight {
            if request.want.mode != Mode::Shared {
                return Err(CommandError::WeightWithoutLimit);
            }
            match request.want.limit {
                None => return Err(CommandError::WeightWithoutLimit),
                Some(limit) if weight > limit => return Err(CommandError::InvalidWeight),
                Some(_) => request.want.weight = weight,
            }
        }
        if request.want.limit.is_some() && request.want.mode != Mode::Shared {
            return Err(CommandError::Syntax);
        }
        Ok(request)
    }

    /// Applies the request to the key `name` and replies (or blocks).
    pub fn apply(self, ctx: Ctx, name: KeyName, fallback: Fallback) -> CommandResult {
        grace::check_lease(self.ttl_ms)?;
        let key = ctx.open_lock(name, true)?;
        self.apply_to(ctx, name, key, fallback)
    }

    /// [`Acquire::apply`] once the ttl is checked and the key `name` open.
    #[inline(never)]
    fn apply_to(
        self,
        ctx: Ctx,
        name: KeyName,
        mut key: LockKey,
        fallback: Fallback,
    ) -> CommandResult {
        let mut generated = [0u8; GENERATED_OWNER_LEN];
        let owner: &[u8] = match self.owner {
            OwnerArg::Named(owner) => owner,
            OwnerArg::Generate => generate_owner(&mut generated),
        };
        let request = Request {
            owner,
            ttl_ms: self.ttl_ms,
            session: self.session.then(|| ctx.client_id()),
            want: self.want,
        };
        orphans::adopt_orphans_at(ctx, name, &mut key);
        // The command's time, taken once: leases and the token floor.
        let now_us = clock::command_now_us();
        let now_ms = now_us / 1_000;
        if key
            .lock()
            .is_some_and(|lock| lock.weight_conflict(owner, self.want, now_ms))
        {
            return Err(CommandError::WeightMismatch);
        }
        // The grace window defers new holds: as if the lock were held.
        let window = grace::window(now_ms);
        if lock::grace::defers(window, key.lock(), owner, self.want, now_ms) {
            grace::count_deferred();
            let blocks = self.block_ms.is_some() && ctx.may_block();
            if key.lock().is_none() && !blocks && fallback == Fallback::Nothing {
                ctx.reply_null();
                return Ok(());
            }
        }
        let lock = match key.lock_mut() {
            Some(lock) => lock,
            None => key.insert(Lock::new())?,
        };
        // Outside a grace window, with nothing queued, by the straight
        // route: a new key's first hold, or a re-entry of its only holder
        // (which ties no SESSION: only a new hold does).
        if !window.is_open() {
            let straight = match lock.acquire_first(request, now_ms, || tokens::issue_at(now_us)) {
                Some(grant) => Some((grant, request.session)),
                None => lock
                    .reenter_sole(request, now_ms)
                    .map(|grant| (grant, None)),
            };
            if let Some((grant, session)) = straight {
                let fact = Fact {
                    owner,
                    token: grant.token,
                    holds: grant.holds,
                };
                stats::record_fact(ctx, grant_event(grant), name, fact);
                keyspace::settle_sole_hold(ctx, name, &mut key, session);
                reply_grant(ctx, grant, owner);
                return Ok(());
            }
        }
        let issue = keyspace::token_issuer(now_us);
        let mut step = keyspace::step_at(now_us, &issue);
        if let Some(grant) = lock::grace::acquire(lock, window, request, &mut step) {
            let fact = Fact {
                owner,
                token: grant.token,
                holds: grant.holds,
            };
            stats::record_fact(ctx, grant_event(grant), name, fact);
            let changes = Changes {
                session: request.session.filter(|_| !grant.reentry),
                ..Changes::default()
            };
            settle(ctx, name, &mut key, step, changes);
            reply_grant(ctx, grant, owner);
            return Ok(());
        }
        if let Some(timeout_ms) = self.block_ms.filter(|_| ctx.may_block()) {
            if lock.upgrade_would_deadlock(owner, now_ms) {
                stats::count(Event::Deadlock);
                settle(ctx, name, &mut key, step, Changes::default());
                return Err(CommandError::Deadlock);
            }
            waiters::block(ctx, name, &mut key, request, timeout_ms, now_ms)?;
            let changes = Changes {
                queue: true,
                ..Changes::default()
            };
            settle(ctx, name, &mut key, step, changes);
            return Ok(());
        }
        let changes = match fallback {
            Fallback::Nothing => Changes::default(),
            // A generated owner can never come back to claim a reservation.
            Fallback::Reserve { .. } if self.owner == OwnerArg::Generate => Changes::default(),
            Fallback::Reserve { for_ms } => {
                let deadline_ms = now_ms.saturating_add(for_ms);
                if lock.reserve(owner, self.want, deadline_ms, now_ms) {
                    let fact = Fact {
                        owner,
                        token: 0,
                        holds: 0,
                    };
                    stats::record_fact(ctx, Event::Reserve, name, fact);
                    Changes {
                        reserved: Some((owner, deadline_ms, self.want)),
                        ..Changes::default()
                    }
                } else {
                    // Already waiting in the queue, or holding the lock (an
                    // upgrade that cannot be granted): nothing to keep.
                    Changes::default()
                }
            }
        };
        settle(ctx, name, &mut key, step, changes);
        ctx.reply_null();
        Ok(())
    }
}

/// The event a grant publishes.
pub fn grant_event(grant: Grant) -> Event {
    match (grant.reentry, grant.mode) {
        (false, Mode::Exclusive) => Event::Acquire,
        (false, Mode::Shared) => Event::AcquireShared,
        (true, Mode::Exclusive) => Event::Reenter,
        (true, Mode::Shared) => Event::ReenterShared,
    }
}

/// Command entry: `DLOCK.ACQUIRE key owner ttl [SHARED] [LIMIT n] [BLOCK timeout] [SESSION]`.
///
/// The plain form, `key owner ttl` with a named owner and a valid ttl, the
/// one nearly every lock sends, is read without the general parser; a new
/// key then gets its first hold by [`acquire_new`] unless a grace window
/// is open or orphaned waiters may exist, and an existing key goes to the
/// general path opened once. Everything else (any option, a generated
/// owner, a bad argument, whose error the general parser reports) takes
/// the general path from the start.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let (Some(name), Some((owner, ttl_ms))) = (args.key(1), plain(args)) else {
        return run_general(ctx, args);
    };
    let mut key = ctx.open_lock(name, true)?;
    if key.lock().is_none() && !grace::is_open() && !orphans::may_have_orphans() {
        return acquire_new(ctx, name, &mut key, owner, ttl_ms);
    }
    let request = Acquire {
        owner: OwnerArg::Named(owner),
        ttl_ms,
        want: Want::EXCLUSIVE,
        block_ms: None,
        session: false,
    };
    request.apply_to(ctx, name, key, Fallback::Nothing)
}

/// `key owner ttl` (argv[1..]): the named owner and the ttl, when both are
/// valid and the ttl is within `dlock.max-lease-ms`.
#[inline]
fn plain<'a>(args: &Argv<'a>) -> Option<(&'a [u8], u64)> {
    if args.count() != 4 {
        return None;
    }
    let OwnerArg::Named(owner) = parse_owner(args.bytes(2)).ok()? else {
        return None;
    };
    let ttl_ms = parse_ttl(args.bytes(3)).ok()?;
    grace::check_lease(ttl_ms).ok()?;
    Some((owner, ttl_ms))
}

/// [`run`] for every form but the plain one.
#[cold]
#[inline(never)]
fn run_general(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Acquire::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name, Fallback::Nothing)
}

/// The first hold on the new key `name` (open and empty in `key`), outside
/// a grace window and with no orphaned waiter to adopt: what
/// [`Acquire::apply`] does there ([`Lock::acquire_first`], then
/// [`keyspace::settle_sole_hold`]), in few instructions and few cache
/// lines: the lock is built whole and stored once, then settled (the hold
/// replicated, the key set to expire with the lease), the grant published
/// and replied.
#[inline]
fn acquire_new(
    ctx: Ctx,
    name: KeyName,
    key: &mut LockKey,
    owner: &[u8],
    ttl_ms: u64,
) -> CommandResult {
    let now_us = clock::command_now_us();
    let request = Request {
        owner,
        ttl_ms,
        session: None,
        want: Want::EXCLUSIVE,
    };
    // The token is issued before the store: a store that failed (which a
    // key opened for writing does not) would skip one token, which costs
    // nothing, since tokens only have to increase.
    let (lock, grant) = Lock::first_hold(request, now_us / 1_000, tokens::issue_at(now_us));
    key.insert(lock)?;
    let fact = Fact {
        owner,
        token: grant.token,
        holds: grant.holds,
    };
    stats::record_fact(ctx, Event::Acquire, name, fact);
    keyspace::settle_sole_hold(ctx, name, key, None);
    reply_grant(ctx, grant, owner);
    Ok(())
}

/// The grant reply: `[token, holds, owner]`.
pub fn reply_grant(ctx: Ctx, grant: Grant, owner: &[u8]) {
    ctx.reply_array(3);
    ctx.reply_count(grant.token);
    ctx.reply_count(grant.holds);
    ctx.reply_bulk(owner);
}

/// Writes a random UUID v4 into `buffer` and returns it.
pub(super) fn generate_owner(buffer: &mut [u8; GENERATED_OWNER_LEN]) -> &[u8] {
    uuid::Uuid::new_v4().hyphenated().encode_lower(buffer);
    buffer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<'a>(args: &'a [&'a [u8]]) -> Result<Acquire<'a>, CommandError> {
        Acquire::parse(args)
    }

    #[test]
    fn parses_owner_ttl_and_options_in_any_order() {
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"me", b"1000"]),
            Ok(Acquire {
                owner: OwnerArg::Named(b"me"),
                ttl_ms: 1000,
                want: Want::EXCLUSIVE,
                block_ms: None,
                session: false,
            })
        );
        let expected = Ok(Acquire {
            owner: OwnerArg::Generate,
            ttl_ms: 5,
            want: Want::EXCLUSIVE,
            block_ms: Some(0),
            session: true,
        });
        assert_eq!(
            parse(&[
                b"DLOCK.ACQUIRE",
                b"k",
                b"*",
                b"5",
                b"block",
                b"0",
                b"SESSION"
            ]),
            expected
        );
        assert_eq!(
            parse(&[
                b"DLOCK.ACQUIRE",
                b"k",
                b"*",
                b"5",
                b"session",
                b"BLOCK",
                b"0"
            ]),
            expected
        );
    }

    #[test]
    fn parses_shared_and_limit_in_any_order() {
        let semaphore = Want::shared(Some(10));
        for args in [
            &[
                &b"DLOCK.ACQUIRE"[..],
                b"k",
                b"w",
                b"9",
                b"SHARED",
                b"LIMIT",
                b"10",
            ][..],
            &[
                b"DLOCK.ACQUIRE",
                b"k",
                b"w",
                b"9",
                b"limit",
                b"10",
                b"shared",
            ],
        ] {
            assert_eq!(parse(args).map(|a| a.want), Ok(semaphore));
        }
        let read: &[&[u8]] = &[
            b"DLOCK.ACQUIRE",
            b"k",
            b"w",
            b"9",
            b"SHARED",
            b"BLOCK",
            b"5",
        ];
        assert_eq!(
            parse(read).map(|a| (a.want, a.block_ms)),
            Ok((Want::shared(None), Some(5)))
        );
    }

    #[test]
    fn parses_weight_with_shared_and_limit_only() {
        let weighted: &[&[u8]] = &[
            b"DLOCK.ACQUIRE",
            b"k",
            b"w",
            b"9",
            b"WEIGHT",
            b"3",
            b"SHARED",
            b"LIMIT",
            b"4",
        ];
        assert_eq!(parse(weighted).map(|a| a.want), Ok(Want::weighted(4, 3)));
        let full: &[&[u8]] = &[
            b"DLOCK.ACQUIRE",
            b"k",
            b"w",
            b"9",
            b"SHARED",
            b"LIMIT",
            b"4",
            b"weight",
            b"4",
        ];
        assert_eq!(parse(full).map(|a| a.want), Ok(Want::weighted(4, 4)));
        let cases: &[(&[&[u8]], CommandError)] = &[
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"WEIGHT", b"1"],
                CommandError::WeightWithoutLimit,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"WEIGHT",
                    b"1",
                ],
                CommandError::WeightWithoutLimit,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"3",
                    b"WEIGHT",
                    b"4",
                ],
                CommandError::InvalidWeight,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"3",
                    b"WEIGHT",
                    b"0",
                ],
                CommandError::InvalidWeight,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"3",
                    b"WEIGHT",
                    b"-1",
                ],
                CommandError::InvalidWeight,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"3",
                    b"WEIGHT",
                ],
                CommandError::Syntax,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"3",
                    b"WEIGHT",
                    b"1",
                    b"WEIGHT",
                    b"1",
                ],
                CommandError::Syntax,
            ),
        ];
        for (args, error) in cases {
            assert_eq!(parse(args), Err(*error), "{args:?}");
        }
    }

    #[test]
    fn rejects_bad_arguments() {
        let cases: &[(&[&[u8]], CommandError)] = &[
            (&[b"DLOCK.ACQUIRE", b"k", b"me"], CommandError::WrongArity),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"0"],
                CommandError::InvalidTtl,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"", b"10"],
                CommandError::InvalidOwner,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"NX"],
                CommandError::Syntax,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"BLOCK"],
                CommandError::Syntax,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"BLOCK", b"-1"],
                CommandError::InvalidTimeout,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"BLOCK", b"1.5"],
                CommandError::InvalidTimeout,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"BLOCK",
                    b"1",
                    b"BLOCK",
                    b"1",
                ],
                CommandError::Syntax,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"SESSION", b"SESSION"],
                CommandError::Syntax,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"LIMIT", b"3"],
                CommandError::Syntax,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"SHARED", b"SHARED"],
                CommandError::Syntax,
            ),
            (
                &[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"SHARED", b"LIMIT"],
                CommandError::Syntax,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"0",
                ],
                CommandError::InvalidLimit,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"4294967296",
                ],
                CommandError::InvalidLimit,
            ),
            (
                &[
                    b"DLOCK.ACQUIRE",
                    b"k",
                    b"me",
                    b"10",
                    b"SHARED",
                    b"LIMIT",
                    b"2",
                    b"LIMIT",
                    b"2",
                ],
                CommandError::Syntax,
            ),
        ];
        for (args, error) in cases {
            assert_eq!(parse(args), Err(*error), "{args:?}");
        }
    }

    #[test]
    fn generated_owners_are_uuid_v4_text() {
        let mut buffer = [0u8; GENERATED_OWNER_LEN];
        let owner = generate_owner(&mut buffer).to_vec();
        let parsed = uuid::Uuid::try_parse_ascii(&owner).map(|u| u.get_version_num());
        assert_eq!(parsed, Ok(4));
        let mut other = [0u8; GENERATED_OWNER_LEN];
        assert_ne!(owner, generate_owner(&mut other));
    }
}
