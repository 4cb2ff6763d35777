//! The audit message: one line of text per lock event, published on the
//! channel of `dlock.audit-channel` (see docs/commands.md, "Audit channel").
//!
//! ```text
//! event=handoff time=1795387801228 db=0 key="orders:42" owner="worker-b" token=1795387801228156 holds=1
//! ```
//!
//! Seven fields, always in this order, separated by one space:
//! `event` (a word), `time` (ms since the Unix epoch), `db`, `key` and
//! `owner` (quoted: `"` and `\` are escaped with `\`, bytes outside
//! printable ASCII are `\xHH`, as Redis quotes strings in `MONITOR`),
//! `token` and `holds` (decimal integers; 0 where the event has none).
//!
//! In Redis Cluster the message goes to the shard channel of the key's
//! slot: [`shard_channel`].

/// Writes the message of one event into `out` (cleared first).
#[allow(clippy::too_many_arguments)]
pub fn format_message(
    out: &mut Vec<u8>,
    event: &str,
    time_ms: u64,
    db: i64,
    key: &[u8],
    owner: &[u8],
    token: u64,
    holds: u64,
) {
    use std::io::Write;
    out.clear();
    let _ = write!(out, "event={event} time={time_ms} db={db} key=");
    quote(out, key);
    out.extend_from_slice(b" owner=");
    quote(out, owner);
    let _ = write!(out, " token={token} holds={holds}");
}

fn quote(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0x20..=0x7e => out.push(b),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'x',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]);
            }
        }
    }
    out.push(b'"');
}

/// The CRC16 (XMODEM) Redis Cluster hashes keys with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of a key (or channel), hash tags included.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % 16384
}

/// The smallest non-negative integer whose decimal text hashes to `slot`.
/// Every slot has one below 110,000 (the largest is 109757; checked by a
/// test).
pub fn slot_tag(slot: u16) -> u32 {
    (0u32..)
        .find(|n| crc16(n.to_string().as_bytes()) % 16384 == slot % 16384)
        .unwrap_or(0)
}

/// The shard channel for `key`: `<base>{<tag>}` where tag is
/// [`slot_tag`] of the key's slot, so that the channel is in the key's slot
/// and every key of a slot shares one channel. A subscriber of slot `s`
/// runs `SSUBSCRIBE <base>{<slot_tag(s)>}` on the node serving `s`.
pub fn shard_channel(base: &[u8], key: &[u8], tags: &dyn Fn(u16) -> u32) -> Vec<u8> {
    let mut channel = Vec::with_capacity(base.len() + 8);
    channel.extend_from_slice(base);
    channel.push(b'{');
    channel.extend_from_slice(tags(key_slot(key)).to_string().as_bytes());
    channel.push(b'}');
    channel
}

/// `n` in decimal, written into `buffer` (no allocation).
fn decimal(mut n: u32, buffer: &mut [u8; 10]) -> &[u8] {
    let mut start = buffer.len();
    loop {
        start -= 1;
        buffer[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buffer[start..];
        }
    }
}

/// [`slot_tag`] for every slot, computed once (about 110,000 hashes of
/// short strings).
pub fn slot_tags() -> Vec<u32> {
    let mut tags = vec![u32::MAX; 16384];
    let mut missing = tags.len();
    let mut n = 0u32;
    let mut digits = [0u8; 10];
    while missing > 0 {
        let slot = usize::from(crc16(decimal(n, &mut digits)) % 16384);
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            missing -= 1;
        }
        n += 1;
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a message back into its fields (the documented grammar).
    fn parse(message: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut fields = Vec::new();
        let mut i = 0;
        while i < message.len() {
            let eq = i + message[i..].iter().position(|&b| b == b'=').unwrap();
            let name = String::from_utf8(message[i..eq].to_vec()).unwrap();
            let mut value = Vec::new();
            i = eq + 1;
            if message[i] == b'"' {
                i += 1;
                while message[i] != b'"' {
                    if message[i] == b'\\' {
                        if message[i + 1] == b'x' {
                            let hex = std::str::from_utf8(&message[i + 2..i + 4]).unwrap();
                            value.push(u8::from_str_radix(hex, 16).unwrap());
                            i += 4;
                        } else {
                            value.push(message[i + 1]);
                            i += 2;
                        }
                    } else {
                        value.push(message[i]);
                        i += 1;
                    }
                }
                i += 1;
            } else {
                while i < message.len() && message[i] != b' ' {
                    value.push(message[i]);
                    i += 1;
                }
            }
            fields.push((name, value));
            i += 1;
        }
        fields
    }

    #[test]
    fn a_message_has_seven_fields_in_order() {
        let mut out = Vec::new();
        format_message(
            &mut out,
            "handoff",
            1795387801228,
            0,
            b"orders:42",
            b"worker-b",
            1795387801228156,
            1,
        );
        assert_eq!(
            out,
            b"event=handoff time=1795387801228 db=0 key=\"orders:42\" owner=\"worker-b\" token=1795387801228156 holds=1"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_key_and_owner_round_trip(
            key in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            owner in proptest::collection::vec(proptest::num::u8::ANY, 1..40),
            token in proptest::num::u64::ANY,
            holds in proptest::num::u64::ANY,
        ) {
            let mut out = Vec::new();
            format_message(&mut out, "release", 7, 3, &key, &owner, token, holds);
            let fields = parse(&out);
            let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
            proptest::prop_assert_eq!(names, ["event", "time", "db", "key", "owner", "token", "holds"]);
            proptest::prop_assert_eq!(&fields[3].1, &key);
            proptest::prop_assert_eq!(&fields[4].1, &owner);
            proptest::prop_assert_eq!(&fields[5].1, &token.to_string().into_bytes());
            proptest::prop_assert_eq!(&fields[6].1, &holds.to_string().into_bytes());
            // One line of printable ASCII.
            proptest::prop_assert!(out.iter().all(|b| (0x20..=0x7e).contains(b)));
        }
    }

    #[test]
    fn slots_follow_redis_cluster() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
    }

    #[test]
    fn every_slot_has_a_small_tag_and_the_channel_is_in_the_key_slot() {
        let tags = slot_tags();
        assert_eq!(tags.iter().max(), Some(&109_757));
        let mut buffer = [0u8; 10];
        for n in [0u32, 7, 10, 109_757, u32::MAX] {
            assert_eq!(decimal(n, &mut buffer), n.to_string().as_bytes());
        }
        for slot in [0u16, 1, 5000, 12182, 16383] {
            assert_eq!(slot_tag(slot), tags[usize::from(slot)]);
        }
        for key in [&b"orders:42"[..], b"{user1}:lock", b"a}b", b""] {
            let channel = shard_channel(b"dlock-audit", key, &|s| tags[usize::from(s)]);
            assert_eq!(key_slot(&channel), key_slot(key), "{channel:?}");
        }
    }
}
