#![no_main]
//! Honest producer operations interleaved with arbitrary writes, against the consumer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| shmring_fuzz::run(data, true));
