//! `DLOCK.RENEW key owner ttl`
//!
//! Resets the lease of `owner`'s hold (in whichever modes it holds the lock)
//! to `ttl` milliseconds from now; the hold counts are unchanged.
//!
//! Replies: the hold's fencing token as an integer.
//!
//! Errors: `NOTOWNER` when the owner holds no live hold in either mode
//! (nothing changes), arity, `ERR invalid ttl`, `ERR invalid owner`,
//! `ERR syntax error`, `WRONGTYPE`.

use super::parser::{parse_owner, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::redis::audit::Fact;
use crate::redis::keyspace::{self, settle, Changes};
use crate::redis::stats::{self, Event};
use crate::redis::{Argv, Ctx, KeyName};

/// A parsed DLOCK.RENEW.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renew<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
}

impl<'a> Renew<'a> {
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 4 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let owner = cursor.required()?;
        parse_owner(owner)?;
        let ttl_ms = cursor.ttl()?;
        cursor.finish()?;
        Ok(Self { owner, ttl_ms })
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        crate::redis::grace::check_lease(self.ttl_ms)?;
        let mut key = ctx.open_lock(name, true)?;
        // The command's time, taken once: leases and the token floor of hand-offs.
        let now_us = clock::command_now_us();
        let lock = key.lock_mut().ok_or(CommandError::NotOwner)?;
        let issue = keyspace::token_issuer(now_us);
        let mut step = keyspace::step_at(now_us, &issue);
        let renewed = lock.renew(self.owner, self.ttl_ms, &mut step);
        if let Ok(token) = renewed {
            let fact = Fact {
                owner: self.owner,
                token,
                holds: lock
                    .holders()
                    .get(self.owner)
                    .map_or(0, |hold| hold.total()),
            };
            stats::record_fact(ctx, Event::Renew, name, fact);
        }
        // Settled either way: holders whose lease ended were dropped.
        settle(ctx, name, &mut key, step, Changes::default());
        let token = renewed.map_err(|_| CommandError::NotOwner)?;
        ctx.reply_count(token);
        Ok(())
    }
}

/// Command entry: `DLOCK.RENEW key owner ttl`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Renew::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_and_ttl() {
        let ok: &[&[u8]] = &[b"DLOCK.RENEW", b"k", b"me", b"50"];
        assert_eq!(
            Renew::parse(ok),
            Ok(Renew {
                owner: b"me",
                ttl_ms: 50
            })
        );
        let bad_ttl: &[&[u8]] = &[b"DLOCK.RENEW", b"k", b"me", b"-5"];
        assert_eq!(Renew::parse(bad_ttl), Err(CommandError::InvalidTtl));
        let short: &[&[u8]] = &[b"DLOCK.RENEW", b"k", b"me"];
        assert_eq!(Renew::parse(short), Err(CommandError::WrongArity));
    }
}
