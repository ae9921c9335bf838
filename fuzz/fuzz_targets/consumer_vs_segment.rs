#![no_main]
//! The consumer against segment contents chosen by the fuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| shmring_fuzz::run(data, false));
