#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    blox_harness::fuzzing::rpc(data);
});
