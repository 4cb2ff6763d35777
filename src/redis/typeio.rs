//! What the two native types' callbacks (`datatype.rs` for locks,
//! `latches.rs` for latches) share: Redis's RDB I/O as the codec's source
//! and sink, and the panic guard every callback body runs in.

use redis_module::raw;

use crate::lock::codec::{Sink, Source};

/// Runs a callback body, turning a panic into `fallback` (a panic unwinding
/// into Redis would abort the server).
pub fn guarded<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// Redis's RDB I/O as a codec source and sink.
pub struct RdbIo(pub *mut raw::RedisModuleIO);

impl Source for RdbIo {
    fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }

    fn buffer(&mut self) -> Option<Box<[u8]>> {
        raw::load_string_buffer(self.0)
            .ok()
            .map(|buffer| buffer.as_ref().into())
    }
}

impl Sink for RdbIo {
    fn unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.0, value);
    }

    fn buffer(&mut self, bytes: &[u8]) {
        raw::save_slice(self.0, bytes);
    }
}
