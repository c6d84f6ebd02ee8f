#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cacheline_fuzz_harness::stream_anthropic(data));
