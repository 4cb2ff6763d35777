//! Random operations on one lock, shared by the property tests that replay
//! them against a model or against another path (`shared_tests`,
//! `fast_path_tests`).

use super::{Mode, Want};
use proptest::prelude::*;
use std::cell::Cell;

/// One operation by owner number `owner` (an index into the test's owners).
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    Acquire { owner: usize, want: Want, ttl: u64 },
    Block { owner: usize, want: Want, ttl: u64 },
    Fair { owner: usize, want: Want, ttl: u64 },
    Release { owner: usize, mode: Mode },
    Renew { owner: usize, ttl: u64 },
    Leave { nth: usize },
    Wait { ms: u64 },
}

/// Exclusive, or shared without a limit, or with a LIMIT below
/// `limits_below` and a WEIGHT from 1 to that LIMIT (1 half the time, so
/// that owners often agree on their weight).
pub(super) fn want(limits_below: u32) -> impl Strategy<Value = Want> {
    let weighted = (1..limits_below).prop_flat_map(|limit| {
        prop_oneof![Just(1), 1..=limit].prop_map(move |weight| Want::weighted(limit, weight))
    });
    prop_oneof![Just(Want::EXCLUSIVE), Just(Want::shared(None)), weighted,]
}

/// A token issuer counting up from `last` (which it updates, so a test can
/// read how many tokens a step issued, or take them back).
pub(super) fn counting(last: &Cell<u64>) -> impl Fn() -> u64 + Copy + '_ {
    move || {
        last.set(last.get() + 1);
        last.get()
    }
}
