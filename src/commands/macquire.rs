//! `DLOCK.MACQUIRE numkeys key [key ...] owner ttl [SHARED] [LIMIT n] [WEIGHT w] [BLOCK timeout] [SESSION]`
//!
//! Takes a hold for `owner` on every key in one atomic step, or changes
//! nothing. Each key is judged by the rules of its own lock and queue, as if
//! a single-key `DLOCK.ACQUIRE` with the same options were sent to it in
//! that instant; the request is granted only when every key would grant it.
//!
//! * `numkeys`: an integer from 1 to 1024; the keys follow, each at most once.
//! * `owner`, `ttl` and the options: as for `DLOCK.ACQUIRE`, applied to
//!   every key.
//! * `BLOCK timeout`: when not granted at once, the request joins the tail
//!   of every key's queue in one step and waits until it can be granted on
//!   all keys at once; it is then removed from every queue and answered.
//!   Because a multi-key waiter enters all its queues in a single step,
//!   every queue orders waiters consistently and waiters never wait on each
//!   other in a cycle.
//!
//! Replies: an array with one grant `[token, holds, owner]` per key, in the
//! order given (each key's new hold its own token); null when not granted
//! (without BLOCK) or when the BLOCK timeout passes.
//!
//! Errors: arity, `ERR invalid numkeys`, `ERR duplicate key`, the errors of
//! `DLOCK.ACQUIRE`'s arguments, `ERR invalid weight` when the owner has
//! another weight on any of the keys, `WRONGTYPE`. Nothing changes on any
//! error.
//! In Redis Cluster every key must hash to one slot (Redis answers
//! `CROSSSLOT`).

use std::ffi::CStr;

use super::acquire::{generate_owner, grant_event, Acquire, GENERATED_OWNER_LEN};
use super::parser::{parse_i64, ArgSource, OwnerArg};
use super::{CommandError, CommandResult};
use crate::clock;
use crate::lock::{multi, Grant, Lock, Request, Step};
use crate::redis::keyspace::{self, settle, Changes};
use crate::redis::stats::{self, Event};
use crate::redis::{multiwaiters, orphans, Argv, Ctx, KeyName, LockKey};

/// The most keys one request may name.
pub const MAX_KEYS: usize = 1024;

/// A parsed DLOCK.MACQUIRE: the keys are arguments `2 .. 2 + numkeys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultiAcquire<'a> {
    pub numkeys: usize,
    /// The owner, ttl and options, as one ACQUIRE would take them.
    pub acquire: Acquire<'a>,
}

/// Why a DLOCK.MACQUIRE was refused before it touched anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    Command(CommandError),
    /// The key at this argument index is named twice.
    DuplicateKey(usize),
}

impl From<CommandError> for ParseError {
    fn from(error: CommandError) -> Self {
        ParseError::Command(error)
    }
}

/// The arguments after the keys, indexed as a single-key ACQUIRE's
/// (`1` is the last key, `2` the owner, ...), so that both commands share
/// one grammar.
struct AfterKeys<A> {
    args: A,
    numkeys: usize,
}

impl<'a, A: ArgSource<'a>> ArgSource<'a> for AfterKeys<A> {
    fn count(&self) -> usize {
        self.args.count().saturating_sub(self.numkeys)
    }

    fn bytes(&self, index: usize) -> &'a [u8] {
        self.args.bytes(index + self.numkeys)
    }
}

impl<'a> MultiAcquire<'a> {
    /// Parses the whole argv.
    pub fn parse<A: ArgSource<'a> + Copy>(args: A) -> Result<Self, ParseError> {
        if args.count() < 5 {
            return Err(CommandError::WrongArity.into());
        }
        let numkeys = parse_i64(args.bytes(1))
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_KEYS).contains(n))
            .ok_or(CommandError::InvalidNumkeys)?;
        if args.count() < numkeys + 4 {
            return Err(CommandError::WrongArity.into());
        }
        let acquire = Acquire::parse(AfterKeys { args, numkeys })?;
        if let Some(index) = duplicate_key(args, numkeys) {
            return Err(ParseError::DuplicateKey(index));
        }
        Ok(Self { numkeys, acquire })
    }
}

impl MultiAcquire<'_> {
    /// Applies the request to the keys `names` and replies (or blocks).
    pub fn apply(self, ctx: Ctx, names: &[KeyName]) -> CommandResult {
        let mut generated = [0u8; GENERATED_OWNER_LEN];
        let owner: &[u8] = match self.acquire.owner {
            OwnerArg::Named(owner) => owner,
            OwnerArg::Generate => generate_owner(&mut generated),
        };
        let request = Request {
            owner,
            ttl_ms: self.acquire.ttl_ms,
            session: self.acquire.session.then(|| ctx.client_id()),
            want: self.acquire.want,
        };
        // Every key is opened (WRONGTYPE ends the command) before any changes.
        let mut keys = Vec::with_capacity(names.len());
        for name in names {
            keys.push(ctx.open_lock(*name, true)?);
        }
        // One weight per owner and lock: a conflict on any key refuses the
        // whole request before anything changes.
        let now_ms = clock::now_ms();
        let conflict = keys.iter().any(|key| {
            key.lock()
                .is_some_and(|lock| lock.weight_conflict(owner, request.want, now_ms))
        });
        if conflict {
            return Err(CommandError::WeightMismatch);
        }
        let mut fresh = vec![false; names.len()];
        for (index, (name, key)) in names.iter().zip(keys.iter_mut()).enumerate() {
            orphans::adopt_orphans_at(ctx, *name, key);
            if key.lock().is_none() {
                if let Err(error) = key.insert(Lock::new()) {
                    discard_fresh(&mut keys, &fresh);
                    return Err(error);
                }
                fresh[index] = true;
            }
        }
        let mut steps: Vec<Step<'static>> = names.iter().map(|_| keyspace::step(now_ms)).collect();
        let granted = {
            let mut locks: Vec<&mut Lock> = keys.iter_mut().filter_map(LockKey::lock_mut).collect();
            multi::acquire_all(&mut locks, request, &mut steps)
        };
        if let Some(grants) = granted {
            stats::count(Event::MultiAcquire);
            for (index, (step, key)) in steps.into_iter().zip(keys.iter_mut()).enumerate() {
                let grant = grants[index];
                stats::record(ctx, grant_event(grant), names[index]);
                let changes = Changes {
                    session: request.session.filter(|_| !grant.reentry),
                    ..Changes::default()
                };
                settle(ctx, names[index], key, step, changes);
            }
            reply_grants(ctx, &grants, owner);
            return Ok(());
        }
        if let Some(timeout_ms) = self.acquire.block_ms.filter(|_| ctx.may_block()) {
            let blocked = multiwaiters::block(ctx, names, &mut keys, request, timeout_ms, now_ms);
            if blocked == Err(CommandError::Deadlock) {
                stats::count(Event::Deadlock);
            }
            let changes = Changes {
                queue: blocked.is_ok(),
                ..Changes::default()
            };
            settle_all(ctx, names, &mut keys, steps, &fresh, changes);
            return blocked;
        }
        settle_all(ctx, names, &mut keys, steps, &fresh, Changes::default());
        ctx.reply_null();
        Ok(())
    }
}

/// Settles every key after a request that was not granted; a lock created
/// for the request that is still empty is removed without a trace (it was
/// never replicated).
fn settle_all(
    ctx: Ctx,
    names: &[KeyName],
    keys: &mut [LockKey],
    steps: Vec<Step<'static>>,
    fresh: &[bool],
    changes: Changes<'_>,
) {
    let now_ms = clock::now_ms();
    for (index, (step, key)) in steps.into_iter().zip(keys.iter_mut()).enumerate() {
        let vacant = key.lock().is_none_or(|lock| lock.is_vacant(now_ms));
        if fresh[index] && vacant {
            key.delete();
        } else {
            settle(ctx, names[index], key, step, changes);
        }
    }
}

/// Removes the empty locks created for a request that failed.
fn discard_fresh(keys: &mut [LockKey], fresh: &[bool]) {
    for (key, _) in keys.iter_mut().zip(fresh).filter(|(_, fresh)| **fresh) {
        key.delete();
    }
}

/// The reply of a grant: one `[token, holds, owner]` per key, in order.
fn reply_grants(ctx: Ctx, grants: &[Grant], owner: &[u8]) {
    ctx.reply_array(grants.len());
    for grant in grants {
        super::acquire::reply_grant(ctx, *grant, owner);
    }
}

/// Command entry: `DLOCK.MACQUIRE numkeys key [key ...] owner ttl [options]`.
pub fn run(ctx: Ctx, args: &Argv<'_>) -> CommandResult {
    let request = match MultiAcquire::parse(args) {
        Ok(request) => request,
        Err(ParseError::Command(error)) => return Err(error),
        Err(ParseError::DuplicateKey(index)) => {
            let mut buffer = [0u8; 256];
            ctx.reply_error(duplicate_key_message(args.bytes(index), &mut buffer));
            return Ok(());
        }
    };
    let names: Option<Vec<KeyName>> = (2..2 + request.numkeys)
        .map(|index| args.key(index))
        .collect();
    let names = names.ok_or(CommandError::WrongArity)?;
    request.apply(ctx, &names)
}

/// The argument positions of the keys, for Redis's key-position requests:
/// `2 .. 2 + numkeys` when numkeys is valid and the arguments are there.
pub fn key_positions<'a>(args: impl ArgSource<'a>) -> std::ops::Range<usize> {
    let numkeys = (args.count() > 1)
        .then(|| parse_i64(args.bytes(1)))
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=MAX_KEYS).contains(n) && args.count() >= n + 4);
    match numkeys {
        Some(n) => 2..2 + n,
        None => 0..0,
    }
}

/// The argument index of the first key named a second time, if any.
pub fn duplicate_key<'a>(args: impl ArgSource<'a>, numkeys: usize) -> Option<usize> {
    let keys = 2..2 + numkeys;
    if numkeys <= 16 {
        // Few keys: compare pairs without allocating.
        return keys
            .clone()
            .find(|&later| (2..later).any(|earlier| args.bytes(earlier) == args.bytes(later)));
    }
    let mut order: Vec<usize> = keys.collect();
    order.sort_by(|a, b| args.bytes(*a).cmp(args.bytes(*b)).then(a.cmp(b)));
    order
        .windows(2)
        .filter(|pair| args.bytes(pair[0]) == args.bytes(pair[1]))
        .map(|pair| pair[1])
        .min()
}

/// Writes `ERR duplicate key '<key>' ...` into `buffer` (the key cut to fit,
/// bytes a RESP error cannot carry shown as `?`) and returns it.
pub fn duplicate_key_message<'b>(key: &[u8], buffer: &'b mut [u8; 256]) -> &'b CStr {
    const HEAD: &[u8] = b"ERR duplicate key '";
    const TAIL: &[u8] = b"': each key may be named once";
    const MAX_SHOWN: usize = 256 - HEAD.len() - TAIL.len() - 4;
    let mut len = 0;
    let mut put = |bytes: &[u8], buffer: &mut [u8; 256]| {
        buffer[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    put(HEAD, buffer);
    let shown = &key[..key.len().min(MAX_SHOWN)];
    for &byte in shown {
        let byte = if byte == 0 || byte == b'\r' || byte == b'\n' {
            b'?'
        } else {
            byte
        };
        put(&[byte], buffer);
    }
    if shown.len() < key.len() {
        put(b"...", buffer);
    }
    put(TAIL, buffer);
    buffer[len] = 0;
    CStr::from_bytes_until_nul(&buffer[..=len]).unwrap_or(c"ERR duplicate key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::parser::OwnerArg;

    fn parse<'a>(args: &'a [&'a [u8]]) -> Result<MultiAcquire<'a>, ParseError> {
        MultiAcquire::parse(args)
    }

    #[test]
    fn parses_keys_then_the_acquire_grammar() {
        let args: &[&[u8]] = &[
            b"DLOCK.MACQUIRE",
            b"2",
            b"a",
            b"b",
            b"me",
            b"1000",
            b"BLOCK",
            b"50",
            b"SESSION",
        ];
        let parsed = parse(args).unwrap();
        assert_eq!(parsed.numkeys, 2);
        assert_eq!(parsed.acquire.owner, OwnerArg::Named(b"me"));
        assert_eq!(parsed.acquire.ttl_ms, 1000);
        assert_eq!(parsed.acquire.block_ms, Some(50));
        assert!(parsed.acquire.session);
        let one: &[&[u8]] = &[b"DLOCK.MACQUIRE", b"1", b"a", b"*", b"10"];
        assert_eq!(parse(one).map(|p| p.acquire.owner), Ok(OwnerArg::Generate));
    }

    #[test]
    fn rejects_bad_numkeys_duplicates_and_options() {
        let arity = ParseError::Command(CommandError::WrongArity);
        let numkeys = ParseError::Command(CommandError::InvalidNumkeys);
        let cases: &[(&[&[u8]], ParseError)] = &[
            (&[b"DLOCK.MACQUIRE", b"1", b"a", b"me"], arity),
            (&[b"DLOCK.MACQUIRE", b"2", b"a", b"me", b"10"], arity),
            (&[b"DLOCK.MACQUIRE", b"0", b"a", b"me", b"10"], numkeys),
            (&[b"DLOCK.MACQUIRE", b"-1", b"a", b"me", b"10"], numkeys),
            (&[b"DLOCK.MACQUIRE", b"1025", b"a", b"me", b"10"], numkeys),
            (&[b"DLOCK.MACQUIRE", b"x", b"a", b"me", b"10"], numkeys),
            (
                &[b"DLOCK.MACQUIRE", b"2", b"a", b"a", b"me", b"10"],
                ParseError::DuplicateKey(3),
            ),
            (
                &[b"DLOCK.MACQUIRE", b"1", b"a", b"me", b"0"],
                ParseError::Command(CommandError::InvalidTtl),
            ),
            (
                &[b"DLOCK.MACQUIRE", b"1", b"a", b"me", b"10", b"NX"],
                ParseError::Command(CommandError::Syntax),
            ),
        ];
        for (args, error) in cases {
            assert_eq!(parse(args), Err(*error), "{args:?}");
        }
    }

    #[test]
    fn finds_the_first_repeated_key_among_many() {
        let names: Vec<Vec<u8>> = (0..MAX_KEYS)
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        let mut args: Vec<&[u8]> = vec![b"DLOCK.MACQUIRE", b"1024"];
        args.extend(names.iter().map(Vec::as_slice));
        let args_ref: &[&[u8]] = &args;
        assert_eq!(duplicate_key(args_ref, MAX_KEYS), None);
        args[700] = b"k5";
        args[900] = b"k5";
        let args_ref: &[&[u8]] = &args;
        assert_eq!(duplicate_key(args_ref, MAX_KEYS), Some(700));
        let few: &[&[u8]] = &[b"X", b"3", b"a", b"b", b"a"];
        assert_eq!(duplicate_key(few, 3), Some(4));
    }

    #[test]
    fn duplicate_message_names_the_key_safely() {
        let mut buffer = [0u8; 256];
        let message = duplicate_key_message(b"job\r\n1", &mut buffer);
        assert_eq!(
            message.to_bytes(),
            b"ERR duplicate key 'job??1': each key may be named once"
        );
        let long = [b'k'; 1000];
        let message = duplicate_key_message(&long, &mut buffer);
        assert!(message.to_bytes().len() < 256);
        assert!(message
            .to_bytes()
            .ends_with(b"...': each key may be named once"));
    }
}
