//! The data the workloads write, so the checks can recompute it.

/// Payload of entry `k` of batch `s` of thread `t`: self-describing, of varying length.
pub fn entry(t: u64, s: u64, k: u64) -> Vec<u8> {
    let mut v = format!("t{t}-s{s}-k{k}:").into_bytes();
    let len = 20 + ((t * 7 + s * 13 + k * 31) % 300) as usize;
    while v.len() < len {
        v.push(b'a' + ((v.len() as u64 + s + k) % 26) as u8);
    }
    v
}

/// Record `i` of the writer workload.
pub fn record(i: u64, width: usize) -> Vec<u8> {
    let mut r = format!("{i:08}|").into_bytes();
    r.resize(width - 1, b'.');
    r.push(b'\n');
    r
}
