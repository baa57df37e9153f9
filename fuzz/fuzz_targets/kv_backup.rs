#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mmapkit_fuzz::kv_backup(data));
