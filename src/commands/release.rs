//! `DLOCK.RELEASE key owner [SHARED]`
//!
//! Gives up one hold of `owner`: an exclusive one, or with `SHARED` a shared
//! one.
//!
//! Replies: the owner's holds left in both modes together, as an integer; 0
//! means the owner holds nothing any more. Whenever the lock changes, the
//! head of the queue is granted if compatible, then the following shared
//! waiters while compatible (a downgrade, exclusive then shared then this
//! release of the exclusive hold, lets queued readers in at once); the key
//! is deleted when nobody holds or waits.
//!
//! Errors: `NOTOWNER` when the owner has no live hold of that mode (nothing
//! changes), arity, `ERR invalid owner`, `ERR syntax error`, `WRONGTYPE`.

use super::parser::{is_keyword, parse_owner, ArgCursor, ArgSource};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::lock::Mode;
use crate::redis::audit::{self, Fact};
use crate::redis::keyspace::{self, settle, Changes};
use crate::redis::stats::{self, Event};
use crate::redis::{Argv, Ctx, KeyName, LockKey};

/// A parsed DLOCK.RELEASE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release<'a> {
    pub owner: &'a [u8],
    pub mode: Mode,
}

impl<'a> Release<'a> {
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 3 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let owner = cursor.required()?;
        parse_owner(owner)?;
        let mode = match cursor.next_arg() {
            None => Mode::Exclusive,
            Some(option) if is_keyword(option, "SHARED") => Mode::Shared,
            Some(_) => return Err(CommandError::Syntax),
        };
        cursor.finish()?;
        Ok(Self { owner, mode })
    }

    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut key = ctx.open_lock(name, true)?;
        // The command's time, taken once: leases and the token floor of hand-offs.
        let now_us = clock::command_now_us();
        let lock = key.lock_mut().ok_or(CommandError::NotOwner)?;
        // The owner's live hold was the lock's only one and nothing is
        // queued: the key goes, by the straight route.
        if let Some(token) = lock.release_last(self.owner, self.mode, now_us / 1_000) {
            let fact = Fact {
                owner: self.owner,
                token,
                holds: 0,
            };
            stats::record_fact(ctx, self.event(), name, fact);
            keyspace::settle_vacated(ctx, name, &mut key);
            ctx.reply_count(0);
            return Ok(());
        }
        self.apply_general(ctx, name, key, now_us)
    }

    /// [`Release::apply`] of every release but a lock's last hold.
    #[inline(never)]
    fn apply_general(
        self,
        ctx: Ctx,
        name: KeyName,
        mut key: LockKey,
        now_us: u64,
    ) -> CommandResult {
        // Looked up again: the borrow `apply` held cannot outlive its call
        // (settling needs the key itself), and the lock is there.
        let Some(lock) = key.lock_mut() else {
            return Err(CommandError::NotOwner);
        };
        let issue = keyspace::token_issuer(now_us);
        let mut step = keyspace::step_at(now_us, &issue);
        // The token, for the audit channel, before a release to zero ends the hold.
        let token = audit::is_on()
            .then(|| lock.holders().get(self.owner).map(|hold| hold.token))
            .flatten();
        let released = lock.release(self.owner, self.mode, &mut step);
        if let Ok(_remaining) = released {
            let fact = Fact {
                owner: self.owner,
                token: token.unwrap_or(0),
                holds: lock
                    .holders()
                    .get(self.owner)
                    .map_or(0, |hold| hold.count(self.mode)),
            };
            stats::record_fact(ctx, self.event(), name, fact);
        }
        // Settled either way: holders whose lease ended were dropped.
        settle(ctx, name, &mut key, step, Changes::default());
        let remaining = released.map_err(|_| CommandError::NotOwner)?;
        ctx.reply_count(remaining);
        Ok(())
    }

    /// The event a release publishes.
    fn event(self) -> Event {
        match self.mode {
            Mode::Exclusive => Event::Release,
            Mode::Shared => Event::ReleaseShared,
        }
    }
}

/// Command entry: `DLOCK.RELEASE key owner [SHARED]`.
///
/// The plain form, `key owner` with a valid owner, is read without the
/// general parser; every other form, and any bad argument (whose error the
/// parser reports), goes through the parser.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    match (args.key(1), plain(args)) {
        (Some(name), Some(request)) => request.apply(ctx, name),
        _ => run_general(ctx, args),
    }
}

/// `key owner` (argv[1..]), when the owner is valid.
#[inline]
fn plain<'a>(args: &Argv<'a>) -> Option<Release<'a>> {
    if args.count() != 3 {
        return None;
    }
    let owner = args.bytes(2);
    parse_owner(owner).ok()?;
    Some(Release {
        owner,
        mode: Mode::Exclusive,
    })
}

/// [`run`] for every form but the plain one.
#[cold]
#[inline(never)]
fn run_general(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Release::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_owner_and_an_optional_shared() {
        let ok: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b"me"];
        assert_eq!(
            Release::parse(ok),
            Ok(Release {
                owner: b"me",
                mode: Mode::Exclusive
            })
        );
        let shared: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b"me", b"shared"];
        assert_eq!(
            Release::parse(shared),
            Ok(Release {
                owner: b"me",
                mode: Mode::Shared
            })
        );
        let short: &[&[u8]] = &[b"DLOCK.RELEASE", b"k"];
        assert_eq!(Release::parse(short), Err(CommandError::WrongArity));
        let long: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b"me", b"x"];
        assert_eq!(Release::parse(long), Err(CommandError::Syntax));
        let twice: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b"me", b"SHARED", b"SHARED"];
        assert_eq!(Release::parse(twice), Err(CommandError::Syntax));
        let empty: &[&[u8]] = &[b"DLOCK.RELEASE", b"k", b""];
        assert_eq!(Release::parse(empty), Err(CommandError::InvalidOwner));
    }
}
