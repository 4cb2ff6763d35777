//! `DLOCK.ACQUIRE key owner ttl`
//!
//! Takes the lock for `owner` with a lease of `ttl` milliseconds.
//!
//! * `owner`: 1 to 512 bytes naming the holder, or `*` for a server-generated
//!   UUID v4.
//! * `ttl`: a positive integer below 2^53.
//!
//! Replies:
//! * `[token, holds, owner]` on a grant: a new hold (holds 1, a new fencing
//!   token) when the lock is free, or a re-entry (holds + 1, same token, lease
//!   reset) when `owner` already holds it;
//! * null when another owner holds it (nothing changes).
//!
//! Errors: arity, `ERR invalid ttl`, `ERR invalid owner`, `ERR syntax error`
//! for extra arguments, `WRONGTYPE`.

use super::parser::{ArgCursor, ArgSource, OwnerArg};
use super::{commit, CommandError, CommandResult};
use crate::clock;
use crate::lock::{Grant, Lock};
use crate::redis::{tokens, Argv, Ctx, KeyName};

/// Length of a generated owner: a hyphenated UUID.
const GENERATED_OWNER_LEN: usize = 36;

/// A parsed DLOCK.ACQUIRE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub owner: OwnerArg<'a>,
    pub ttl_ms: u64,
}

impl<'a> Acquire<'a> {
    /// Parses the arguments after the key (argv[2..]).
    pub fn parse(args: impl ArgSource<'a>) -> Result<Self, CommandError> {
        if args.count() < 4 {
            return Err(CommandError::WrongArity);
        }
        let mut cursor = ArgCursor::starting_at(args, 2);
        let owner = cursor.owner()?;
        let ttl_ms = cursor.ttl()?;
        cursor.finish()?;
        Ok(Self { owner, ttl_ms })
    }

    /// Applies the acquire to the key `name` and replies.
    pub fn apply(self, ctx: Ctx, name: KeyName) -> CommandResult {
        let mut generated = [0u8; GENERATED_OWNER_LEN];
        let owner: &[u8] = match self.owner {
            OwnerArg::Named(owner) => owner,
            OwnerArg::Generate => generate_owner(&mut generated),
        };
        let mut key = ctx.open_lock(name, true)?;
        let now_ms = clock::now_ms();
        let grant = match key.lock_mut() {
            Some(lock) => lock.acquire(owner, self.ttl_ms, now_ms, tokens::issue),
            None => key
                .insert(Lock::new())?
                .acquire(owner, self.ttl_ms, now_ms, tokens::issue),
        };
        match grant {
            Some(grant) => {
                commit(ctx, name, &mut key, now_ms);
                reply_grant(ctx, grant, owner);
            }
            None => ctx.reply_null(),
        }
        Ok(())
    }
}

/// Command entry: `DLOCK.ACQUIRE key owner ttl`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = Acquire::parse(args)?;
    let name = args.key(1).ok_or(CommandError::WrongArity)?;
    request.apply(ctx, name)
}

/// The grant reply: `[token, holds, owner]`.
pub fn reply_grant(ctx: Ctx, grant: Grant, owner: &[u8]) {
    ctx.reply_array(3);
    ctx.reply_count(grant.token);
    ctx.reply_count(grant.holds);
    ctx.reply_bulk(owner);
}

/// Writes a random UUID v4 into `buffer` and returns it.
fn generate_owner(buffer: &mut [u8; GENERATED_OWNER_LEN]) -> &[u8] {
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
    fn parses_owner_and_ttl() {
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"me", b"1000"]),
            Ok(Acquire {
                owner: OwnerArg::Named(b"me"),
                ttl_ms: 1000
            })
        );
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"*", b"5"]).map(|a| a.owner),
            Ok(OwnerArg::Generate)
        );
    }

    #[test]
    fn rejects_bad_arguments() {
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"me"]),
            Err(CommandError::WrongArity)
        );
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"me", b"0"]),
            Err(CommandError::InvalidTtl)
        );
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"", b"10"]),
            Err(CommandError::InvalidOwner)
        );
        assert_eq!(
            parse(&[b"DLOCK.ACQUIRE", b"k", b"me", b"10", b"NX"]),
            Err(CommandError::Syntax)
        );
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
