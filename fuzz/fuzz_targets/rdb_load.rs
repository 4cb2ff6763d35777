//! The RDB value decoder, fed arbitrary (truncated, corrupted) payloads in
//! the codec's byte form. A corrupt payload is rejected, never a panic; what
//! is accepted round-trips through the encoder unchanged.
#![no_main]

use dlock::lock::codec::{decode, encode, SliceSource, VecSink};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(lock) = decode(&mut SliceSource { bytes: data }) {
        let mut sink = VecSink::default();
        encode(&lock, &mut sink);
        let again = decode(&mut SliceSource { bytes: &sink.bytes });
        assert_eq!(again.as_ref(), Some(&lock));
    }
});
