//! Every command's argument parser, fed arbitrary argument vectors (the
//! input split at 0xFF bytes). Parsing must never panic, and what it accepts
//! must satisfy the contract's bounds.
#![no_main]

use dlock::commands::acquire::Acquire;
use dlock::commands::awaits::Await;
use dlock::commands::countdown::Countdown;
use dlock::commands::latch::CreateLatch;
use dlock::commands::latchstate::LatchState;
use dlock::commands::macquire::MultiAcquire;
use dlock::commands::parser::OwnerArg;
use dlock::commands::release::Release;
use dlock::commands::renew::Renew;
use dlock::commands::setstate::SetState;
use dlock::commands::watch::Watch;
use dlock::lock::latch::MAX_LATCH_COUNT;
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
    if let Ok(request) = CreateLatch::parse(args) {
        assert!(request.count >= 1 && request.count <= MAX_LATCH_COUNT);
        assert!(request.ttl_ms > 0 && request.ttl_ms < TTL_LIMIT_MS);
    }
    if let Ok(request) = Countdown::parse(args) {
        assert!(request.n >= 1);
    }
    if let Ok(request) = Await::parse(args) {
        assert!(request.timeout_ms < TTL_LIMIT_MS);
    }
    let _ = LatchState::parse(args);
    if let Ok(request) = Watch::parse(args) {
        assert!(request.token <= i64::MAX as u64);
        assert!(request.timeout_ms < TTL_LIMIT_MS);
    }
    if let Ok(request) = MultiAcquire::parse(args) {
        assert!(request.numkeys >= 1 && request.numkeys <= 1024);
        assert!(args.len() >= request.numkeys + 4);
    }
});
