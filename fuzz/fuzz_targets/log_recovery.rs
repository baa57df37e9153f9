#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mmapkit_fuzz::log_recovery(data));
