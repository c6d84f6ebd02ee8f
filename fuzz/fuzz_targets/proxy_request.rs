#![no_main]
libfuzzer_sys::fuzz_target!(
    init: cacheline_fuzz_harness::proxy_request_init(),
    |data: &[u8]| cacheline_fuzz_harness::proxy_request(data)
);
