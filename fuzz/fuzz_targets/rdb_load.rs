//! The RDB value decoders (lock and latch), fed arbitrary (truncated, corrupted) payloads in
//! the codec's byte form. A corrupt payload is rejected, never a panic; what
//! is accepted round-trips through the encoder unchanged.
#![no_main]

use dlock::lock::codec::{decode, encode, SliceSource, VecSink, VERSION};
use dlock::lock::latch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the encoding version (1, 2 or 3).
    let Some((first, payload)) = data.split_first() else {
        return;
    };
    let version = 1 + i32::from(first % 3);
    if let Some(lock) = decode(&mut SliceSource { bytes: payload }, version) {
        let mut sink = VecSink::default();
        encode(&lock, &mut sink);
        let again = decode(&mut SliceSource { bytes: &sink.bytes }, VERSION);
        assert_eq!(again.as_ref(), Some(&lock));
    }
    if let Some(latch) = latch::decode(&mut SliceSource { bytes: data }) {
        let mut sink = VecSink::default();
        latch::encode(&latch, &mut sink);
        let again = latch::decode(&mut SliceSource { bytes: &sink.bytes });
        assert_eq!(again.as_ref(), Some(&latch));
    }
});
