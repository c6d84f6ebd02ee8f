#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cacheline_fuzz_harness::stabilize_body(data));
