//! Fencing tokens.
//!
//! A token is a 64-bit integer that strictly increases with every new hold the
//! server grants, across all keys. Two sources keep it monotonic:
//!
//! * the last token issued, which the adapter persists (RDB aux data, every
//!   replicated grant) so that restarts and promoted replicas continue from it;
//! * a floor taken from the wall clock in microseconds, so that even a server
//!   restarted with persistence turned off (the counter lost) never issues a
//!   token lower than one issued before. This holds while the grant rate stays
//!   below one per microsecond on average, which a single Redis thread cannot
//!   exceed, and while the wall clock is not stepped backwards.

/// The largest token ever issued: tokens travel as RESP signed 64-bit integers.
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// The fencing-token counter: the highest token issued or observed so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenCounter {
    last: u64,
}

impl TokenCounter {
    /// A counter that has already issued (or seen) `last`.
    pub const fn starting_at(last: u64) -> Self {
        Self { last }
    }

    /// The highest token issued or observed.
    pub const fn last(&self) -> u64 {
        self.last
    }

    /// Issues the next token: above every token seen so far and at least `floor`.
    pub fn issue(&mut self, floor: u64) -> u64 {
        let next = self.last.saturating_add(1).max(floor).min(MAX_TOKEN);
        self.last = next;
        next
    }

    /// Records a token issued elsewhere (a master, an RDB file), so that later
    /// tokens from this counter are larger.
    pub fn observe(&mut self, token: u64) {
        self.last = self.last.max(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_is_strictly_increasing_even_with_a_stale_floor() {
        let mut counter = TokenCounter::default();
        assert_eq!(counter.issue(100), 100);
        assert_eq!(counter.issue(50), 101);
        assert_eq!(counter.issue(101), 102);
        assert_eq!(counter.issue(500), 500);
    }

    #[test]
    fn observe_never_moves_backwards() {
        let mut counter = TokenCounter::starting_at(10);
        counter.observe(5);
        assert_eq!(counter.last(), 10);
        counter.observe(20);
        assert_eq!(counter.issue(0), 21);
    }

    #[test]
    fn issue_saturates_at_the_largest_resp_integer() {
        let mut counter = TokenCounter::starting_at(MAX_TOKEN);
        assert_eq!(counter.issue(u64::MAX), MAX_TOKEN);
    }
}
