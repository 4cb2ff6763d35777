//! The shared cursor-style argument parser. Pure: it reads byte slices, so the
//! same code runs under Redis, in unit tests and under the fuzzer.

use super::CommandError;
use crate::lock::{MAX_OWNER_LEN, TTL_LIMIT_MS};

/// Random access to a command's arguments as bytes, without copying them.
pub trait ArgSource<'a> {
    fn count(&self) -> usize;
    /// The argument at `index` (< `count()`).
    fn bytes(&self, index: usize) -> &'a [u8];
}

impl<'a> ArgSource<'a> for &'a [&'a [u8]] {
    fn count(&self) -> usize {
        self.len()
    }

    fn bytes(&self, index: usize) -> &'a [u8] {
        self[index]
    }
}

/// Who the caller names as owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerArg<'a> {
    /// A client-chosen owner string.
    Named(&'a [u8]),
    /// `*`: the server generates a UUID v4.
    Generate,
}

/// Walks the arguments after the command name and key.
pub struct ArgCursor<'a, A: ArgSource<'a>> {
    args: A,
    position: usize,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl<'a, A: ArgSource<'a>> ArgCursor<'a, A> {
    /// A cursor starting at argument `position` (argument 0 is the command name).
    pub fn starting_at(args: A, position: usize) -> Self {
        Self {
            args,
            position,
            _bytes: std::marker::PhantomData,
        }
    }

    /// The next argument, if any.
    pub fn next_arg(&mut self) -> Option<&'a [u8]> {
        if self.position >= self.args.count() {
            return None;
        }
        let bytes = self.args.bytes(self.position);
        self.position += 1;
        Some(bytes)
    }

    /// The next argument, which must be there.
    pub fn required(&mut self) -> Result<&'a [u8], CommandError> {
        self.next_arg().ok_or(CommandError::WrongArity)
    }

    /// The next argument as a value of an option, missing: a syntax error.
    pub fn option_value(&mut self) -> Result<&'a [u8], CommandError> {
        self.next_arg().ok_or(CommandError::Syntax)
    }

    /// An owner: 1 to 512 bytes, or `*`.
    pub fn owner(&mut self) -> Result<OwnerArg<'a>, CommandError> {
        let owner = self.required()?;
        parse_owner(owner)
    }

    /// A lease in milliseconds: an integer in 1..2^53.
    pub fn ttl(&mut self) -> Result<u64, CommandError> {
        let ttl = self.required()?;
        parse_ttl(ttl)
    }

    /// Fails with a syntax error if arguments are left over.
    pub fn finish(&self) -> Result<(), CommandError> {
        if self.position < self.args.count() {
            Err(CommandError::Syntax)
        } else {
            Ok(())
        }
    }
}

/// Validates an owner argument.
pub fn parse_owner(owner: &[u8]) -> Result<OwnerArg<'_>, CommandError> {
    match owner {
        b"*" => Ok(OwnerArg::Generate),
        _ if owner.is_empty() || owner.len() > MAX_OWNER_LEN => Err(CommandError::InvalidOwner),
        _ => Ok(OwnerArg::Named(owner)),
    }
}

/// Validates a ttl argument.
pub fn parse_ttl(ttl: &[u8]) -> Result<u64, CommandError> {
    match parse_i64(ttl) {
        Some(ms) if ms > 0 && (ms as u64) < TTL_LIMIT_MS => Ok(ms as u64),
        _ => Err(CommandError::InvalidTtl),
    }
}

/// Validates a BLOCK timeout: an integer in 0..2^53 (0: wait forever).
pub fn parse_timeout(timeout: &[u8]) -> Result<u64, CommandError> {
    match parse_i64(timeout) {
        Some(ms) if ms >= 0 && (ms as u64) < TTL_LIMIT_MS => Ok(ms as u64),
        _ => Err(CommandError::InvalidTimeout),
    }
}

/// Validates a LIMIT: an integer in 1..2^32.
pub fn parse_limit(limit: &[u8]) -> Result<u32, CommandError> {
    parse_i64(limit)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or(CommandError::InvalidLimit)
}

/// Reads a WEIGHT: an integer in 1..2^32 (checked against the LIMIT by the
/// caller).
pub fn parse_weight(weight: &[u8]) -> Result<u32, CommandError> {
    parse_i64(weight)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or(CommandError::InvalidWeight)
}

/// Parses a decimal integer with Redis's strictness: an optional `-`, digits,
/// no leading zeros, no spaces, no `+`, no overflow.
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    // At most 19 digits fit a u64 without overflow (10^19 - 1 < 2^64), so
    // the loop needs no checked arithmetic (a ttl is parsed on every
    // acquire); the range of i64 is checked once at the end.
    if digits.len() > 19 {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude * 10 + u64::from(digit - b'0');
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Compares an option name case-insensitively.
pub fn is_keyword(arg: &[u8], keyword: &str) -> bool {
    arg.eq_ignore_ascii_case(keyword.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_redis_rules() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"1.5",
            b"1e3",
            b"abc",
            b"9223372036854775808",
            b"-9223372036854775809",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// Redis's rule, spelled out independently: std's parser, minus a `+`,
    /// leading zeros and `-0`.
    fn redis_i64(text: &[u8]) -> Option<i64> {
        let text = std::str::from_utf8(text).ok()?;
        let digits = text.strip_prefix('-').unwrap_or(text);
        if text.starts_with('+') || text == "-0" || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        text.parse().ok()
    }

    proptest::proptest! {
        #[test]
        fn integers_parse_as_redis_parses_them(
            number in proptest::prelude::any::<i64>(),
            text in "[-+0-9]{0,22}",
        ) {
            let written = number.to_string();
            proptest::prop_assert_eq!(parse_i64(written.as_bytes()), Some(number));
            proptest::prop_assert_eq!(parse_i64(text.as_bytes()), redis_i64(text.as_bytes()), "{:?}", text);
        }
    }

    #[test]
    fn ttl_must_be_positive_and_below_two_to_the_53() {
        assert_eq!(parse_ttl(b"1"), Ok(1));
        assert_eq!(parse_ttl(b"9007199254740991"), Ok((1 << 53) - 1));
        for bad in [&b"0"[..], b"-1", b"9007199254740992", b"1.0", b"x", b""] {
            assert_eq!(parse_ttl(bad), Err(CommandError::InvalidTtl));
        }
    }

    #[test]
    fn limit_is_one_to_two_to_the_32_minus_one() {
        assert_eq!(parse_limit(b"1"), Ok(1));
        assert_eq!(parse_limit(b"4294967295"), Ok(u32::MAX));
        for bad in [&b"0"[..], b"-1", b"4294967296", b"1.5", b"", b"01"] {
            assert_eq!(parse_limit(bad), Err(CommandError::InvalidLimit));
        }
    }

    #[test]
    fn owner_is_one_to_512_bytes_or_star() {
        assert_eq!(parse_owner(b"*"), Ok(OwnerArg::Generate));
        assert_eq!(parse_owner(b"**"), Ok(OwnerArg::Named(b"**")));
        let max = [b'x'; MAX_OWNER_LEN];
        assert_eq!(parse_owner(&max), Ok(OwnerArg::Named(&max)));
        let too_long = [b'x'; MAX_OWNER_LEN + 1];
        assert_eq!(parse_owner(&too_long), Err(CommandError::InvalidOwner));
        assert_eq!(parse_owner(b""), Err(CommandError::InvalidOwner));
    }

    #[test]
    fn cursor_reports_missing_and_leftover_arguments() {
        let args: &[&[u8]] = &[b"DLOCK.X", b"key", b"owner"];
        let mut cursor = ArgCursor::starting_at(args, 2);
        assert_eq!(cursor.owner(), Ok(OwnerArg::Named(b"owner")));
        assert_eq!(cursor.finish(), Ok(()));
        assert_eq!(cursor.ttl(), Err(CommandError::WrongArity));
        let mut cursor = ArgCursor::starting_at(args, 1);
        assert!(cursor.next_arg().is_some());
        assert_eq!(cursor.finish(), Err(CommandError::Syntax));
    }
}
