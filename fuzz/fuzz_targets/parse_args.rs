//! Every command's argument parser, fed arbitrary argument vectors (the
//! input split at 0xFF bytes). Parsing must never panic, and what it accepts
//! must satisfy the contract's bounds.
#![no_main]

use dlock::commands::acquire::Acquire;
use dlock::commands::parser::OwnerArg;
use dlock::commands::release::Release;
use dlock::commands::renew::Renew;
use dlock::commands::setstate::SetState;
use dlock::lock::{MAX_OWNER_LEN, TTL_LIMIT_MS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let args: Vec<&[u8]> = data.split(|byte| *byte == 0xff).collect();
    let args = args.as_slice();
    if let Ok(request) = Acquire::parse(args) {
        assert!(request.ttl_ms > 0 && request.ttl_ms < TTL_LIMIT_MS);
        if let OwnerArg::Named(owner) = request.owner {
            assert!(!owner.is_empty() && owner.len() <= MAX_OWNER_LEN);
        }
        assert!(request.block_ms.map_or(true, |ms| ms < TTL_LIMIT_MS));
    }
    if let Ok(request) = Release::parse(args) {
        assert!(!request.owner.is_empty() && request.owner.len() <= MAX_OWNER_LEN);
    }
    if let Ok(request) = Renew::parse(args) {
        assert!(request.ttl_ms > 0 && request.ttl_ms < TTL_LIMIT_MS);
    }
    let _ = SetState::parse(args);
});
