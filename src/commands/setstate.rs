//! `DLOCK.SETSTATE key HOLD owner exclusive token deadline [SHARED shared [WEIGHT w]]`
//! `DLOCK.SETSTATE key HOLDER owner exclusive token deadline [SHARED shared [WEIGHT w]]`
//! `DLOCK.SETSTATE key DROP owner`
//! `DLOCK.SETSTATE key FREE`
//! `DLOCK.SETSTATE key RESERVE owner deadline [SHARED limit [WEIGHT w]]` (internal)
//!
//! The deterministic effects of lock changes, as the replication stream and
//! the AOF carry them (absolute deadlines in ms since the epoch, explicit
//! tokens and owners, never a value that depends on time or randomness):
//!
//! * `HOLD`: `owner` is the only holder, with `exclusive` exclusive and
//!   `shared` shared holds (0 when absent; together at least 1) under fencing
//!   token `token` until `deadline`; every other hold ends. `WEIGHT w`: the
//!   permits the shared holds take together (1 when absent).
//! * `HOLDER`: the same for one owner beside other holders, whose holds stay.
//!   For both, a token other than the owner's current one is a new hold (or
//!   an upgrade), which fulfils that owner's reservations (as on the
//!   master). The server's token counter rises to at least `token`, so a
//!   promoted replica keeps issuing larger tokens.
//! * `DROP`: `owner`'s holds ended; the other holders and the queue stay.
//! * `FREE`: every hold ended; the queued reservations stay.
//! * `RESERVE`: `owner` keeps a place in the queue until `deadline` (a new
//!   place at the tail, or its existing place refreshed), for an exclusive
//!   hold, or with `SHARED limit` for a shared one (limit 0: no LIMIT), of
//!   `WEIGHT w` permits (1 when absent; at most the limit).
//!
//! After each, the key expires at the latest of the leases and the
//! reservation deadlines. Blocked waiters are connection state and are never
//! carried. Accepted only from a master's replication stream or while
//! loading the AOF: a client could otherwise forge a hold.
//!
//! Replies: `OK`. Errors: `ERR DLOCK.SETSTATE is internal`, arity,
//! `ERR invalid owner`, `ERR invalid lock state`, `ERR syntax error`, `WRONGTYPE`.

use super::parser::{is_keyword, parse_i64, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::lock::codec::valid_hold;
use crate::lock::{Lock, Mode, Want, MAX_OWNER_LEN, MAX_TOKEN};
use crate::redis::{tokens, Argv, Ctx, KeyName};

/// A parsed DLOCK.SETSTATE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetState<'a> {
    Hold {
        owner: &'a [u8],
        exclusive: u64,
        shared: u64,
        token: u64,
        deadline_ms: u64,
        /// The weight of the shared holds (1 without).
        weight: u32,
        /// `HOLD`: the only holder; `HOLDER`: one of several.
        only_holder: bool,
    },
    Drop {
        owner: &'a [u8],
    },
    Free,
    Reserve {
        owner: &'a [u8],
        deadline_ms: u64,
        want: Want,
    },
}

impl<'a> SetState<'a> {
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 3 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let operation = cursor.required()?;
        let only_holder = is_keyword(operation, "HOLD");
        let state = if only_holder || is_keyword(operation, "HOLDER") {
            let owner = stored_owner(cursor.required()?)?;
            let exclusive = number(cursor.required()?, 0, u64::MAX)?;
            let token = number(cursor.required()?, 1, MAX_TOKEN)?;
            let deadline_ms = number(cursor.required()?, 0, MAX_TOKEN)?;
            let shared = match cursor.next_arg() {
                None => 0,
                Some(option) if is_keyword(option, "SHARED") => {
                    number(cursor.option_value()?, 1, u64::from(u32::MAX))?
                }
                Some(_) => return Err(CommandError::Syntax),
            };
            if exclusive == 0 && shared == 0 {
                return Err(CommandError::InvalidState);
            }
            let weight = match shared {
                0 => 1,
                _ => weight(&mut cursor, u32::MAX)?,
            };
            SetState::Hold {
                owner,
                exclusive,
                shared,
                token,
                deadline_ms,
                weight,
                only_holder,
            }
        } else if is_keyword(operation, "DROP") {
            SetState::Drop {
                owner: stored_owner(cursor.required()?)?,
            }
        } else if is_keyword(operation, "FREE") {
            SetState::Free
        } else if is_keyword(operation, "RESERVE") {
            let owner = stored_owner(cursor.required()?)?;
            let deadline_ms = number(cursor.required()?, 0, MAX_TOKEN)?;
            let want = match cursor.next_arg() {
                None => Want::EXCLUSIVE,
                Some(option) if is_keyword(option, "SHARED") => {
                    let limit = number(cursor.option_value()?, 0, u64::from(u32::MAX))?;
                    let limit = u32::try_from(limit).ok().filter(|limit| *limit > 0);
                    Want {
                        mode: Mode::Shared,
                        limit,
                        weight: weight(&mut cursor, limit.unwrap_or(1))?,
                    }
                }
                Some(_) => return Err(CommandError::Syntax),
            };
            SetState::Reserve {
                owner,
                deadline_ms,
                want,
            }
        } else {
            return Err(CommandError::Syntax);
        };
        cursor.finish()?;
        Ok(state)
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut key = ctx.open_lock(name, true)?;
        let lock = match key.lock_mut() {
            Some(lock) => lock,
            None => key.insert(Lock::new())?,
        };
        match self {
            SetState::Hold {
                owner,
                exclusive,
                shared,
                token,
                deadline_ms,
                weight,
                only_holder,
            } => {
                let mut hold = valid_hold(owner.into(), exclusive, shared, token, deadline_ms)
                    .ok_or(CommandError::InvalidState)?;
                hold.weight = weight;
                lock.apply_hold(hold, only_holder);
                tokens::observe(token);
            }
            SetState::Drop { owner } => lock.apply_drop(owner),
            SetState::Free => lock.apply_free(),
            SetState::Reserve {
                owner,
                deadline_ms,
                want,
            } => lock.restore_reservation(owner, want, deadline_ms),
        }
        match lock.persisted_expire() {
            Some(deadline_ms) => key.set_deadline(deadline_ms),
            None => key.delete(),
        }
        ctx.reply_ok();
        Ok(())
    }
}

fn stored_owner(owner: &[u8]) -> Result<&[u8], CommandError> {
    if owner.is_empty() || owner.len() > MAX_OWNER_LEN {
        Err(CommandError::InvalidOwner)
    } else {
        Ok(owner)
    }
}

/// An optional `WEIGHT w` (1..=`max`) after a shared count or limit; 1
/// when absent.
fn weight<'a>(
    cursor: &mut ArgCursor<'a, impl ArgSource<'a>>,
    max: u32,
) -> Result<u32, CommandError> {
    match cursor.next_arg() {
        None => Ok(1),
        Some(option) if is_keyword(option, "WEIGHT") => {
            let weight = number(cursor.option_value()?, 1, u64::from(max))?;
            u32::try_from(weight).map_err(|_| CommandError::InvalidState)
        }
        Some(_) => Err(CommandError::Syntax),
    }
}

/// A field of a replicated state command: an integer in `min..=max`, else
/// `InvalidState` (DLOCK.LATCHSTATE reads its fields the same way).
pub(super) fn number(text: &[u8], min: u64, max: u64) -> Result<u64, CommandError> {
    parse_i64(text)
        .and_then(|value| u64::try_from(value).ok())
        .filter(|value| (min..=max).contains(value))
        .ok_or(CommandError::InvalidState)
}

/// Command entry: `DLOCK.SETSTATE key HOLD|HOLDER|DROP|FREE|RESERVE ...`.
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
    fn parses_each_operation() {
        let hold: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"HOLD",
            b"o",
            b"2",
            b"9",
            b"1700000000000",
        ];
        assert_eq!(
            SetState::parse(hold),
            Ok(SetState::Hold {
                owner: b"o",
                exclusive: 2,
                shared: 0,
                token: 9,
                deadline_ms: 1_700_000_000_000,
                weight: 1,
                only_holder: true,
            })
        );
        let free: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"free"];
        assert_eq!(SetState::parse(free), Ok(SetState::Free));
        let reserve: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"RESERVE", b"o", b"5"];
        assert_eq!(
            SetState::parse(reserve),
            Ok(SetState::Reserve {
                owner: b"o",
                deadline_ms: 5,
                want: Want::EXCLUSIVE,
            })
        );
        let holder: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"HOLDER",
            b"o",
            b"0",
            b"9",
            b"5",
            b"SHARED",
            b"3",
        ];
        assert_eq!(
            SetState::parse(holder),
            Ok(SetState::Hold {
                owner: b"o",
                exclusive: 0,
                shared: 3,
                token: 9,
                deadline_ms: 5,
                weight: 1,
                only_holder: false,
            })
        );
        let drop: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"DROP", b"o"];
        assert_eq!(SetState::parse(drop), Ok(SetState::Drop { owner: b"o" }));
        let shared_reserve: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"RESERVE",
            b"o",
            b"5",
            b"SHARED",
            b"0",
        ];
        assert_eq!(
            SetState::parse(shared_reserve),
            Ok(SetState::Reserve {
                owner: b"o",
                deadline_ms: 5,
                want: Want::shared(None),
            })
        );
    }

    #[test]
    fn parses_weights_of_holds_and_reservations() {
        let holder: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"HOLDER",
            b"o",
            b"0",
            b"9",
            b"5",
            b"SHARED",
            b"2",
            b"WEIGHT",
            b"3",
        ];
        assert_eq!(
            SetState::parse(holder),
            Ok(SetState::Hold {
                owner: b"o",
                exclusive: 0,
                shared: 2,
                token: 9,
                deadline_ms: 5,
                weight: 3,
                only_holder: false,
            })
        );
        let reserve: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"RESERVE",
            b"o",
            b"5",
            b"SHARED",
            b"4",
            b"WEIGHT",
            b"4",
        ];
        assert_eq!(
            SetState::parse(reserve),
            Ok(SetState::Reserve {
                owner: b"o",
                deadline_ms: 5,
                want: Want::weighted(4, 4),
            })
        );
        for bad in [
            &[
                &b"DLOCK.SETSTATE"[..],
                b"k",
                b"RESERVE",
                b"o",
                b"5",
                b"SHARED",
                b"4",
                b"WEIGHT",
                b"5",
            ][..],
            &[
                b"DLOCK.SETSTATE",
                b"k",
                b"RESERVE",
                b"o",
                b"5",
                b"SHARED",
                b"0",
                b"WEIGHT",
                b"2",
            ],
            &[
                b"DLOCK.SETSTATE",
                b"k",
                b"HOLD",
                b"o",
                b"0",
                b"9",
                b"5",
                b"SHARED",
                b"1",
                b"WEIGHT",
                b"0",
            ],
        ] {
            assert_eq!(SetState::parse(bad), Err(CommandError::InvalidState));
        }
        let weight_without_shared: &[&[u8]] = &[
            b"DLOCK.SETSTATE",
            b"k",
            b"HOLD",
            b"o",
            b"1",
            b"9",
            b"5",
            b"WEIGHT",
            b"2",
        ];
        assert_eq!(
            SetState::parse(weight_without_shared),
            Err(CommandError::Syntax)
        );
    }

    #[test]
    fn rejects_out_of_range_fields() {
        for bad in [
            &[
                &b"DLOCK.SETSTATE"[..],
                b"k",
                b"HOLD",
                b"o",
                b"0",
                b"9",
                b"1",
            ][..],
            &[b"DLOCK.SETSTATE", b"k", b"HOLD", b"o", b"1", b"0", b"1"],
            &[b"DLOCK.SETSTATE", b"k", b"HOLD", b"o", b"1", b"9", b"-1"],
            &[b"DLOCK.SETSTATE", b"k", b"RESERVE", b"o", b"x"],
        ] {
            assert_eq!(SetState::parse(bad), Err(CommandError::InvalidState));
        }
        let unknown: &[&[u8]] = &[b"DLOCK.SETSTATE", b"k", b"NOPE"];
        assert_eq!(SetState::parse(unknown), Err(CommandError::Syntax));
    }
}
