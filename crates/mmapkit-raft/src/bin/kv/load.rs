//! `mmapkit-kv load`: a load generator and its report.

use super::*;

#[derive(serde::Serialize)]
pub(super) struct LoadReport {
    pub(super) clients: usize,
    pub(super) writes: usize,
    pub(super) seconds: f64,
    pub(super) writes_per_s: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    /// The slowest write: what a stall (a snapshot, a sync) cost a client.
    pub(super) max_ms: f64,
}

/// `writes` writes shared by `clients` concurrent clients, each waiting
/// for its write to be committed before sending the next.
pub(super) async fn load(
    client: KvClient,
    clients: usize,
    writes: usize,
    value_size: usize,
) -> Result<LoadReport, String> {
    let value = "v".repeat(value_size);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, next, value) = (client.clone(), next.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= writes {
                    return Ok::<_, String>(lat);
                }
                let req = Request::Set { key: format!("k{c}-{i}"), value: value.clone() };
                let t = Instant::now();
                client.write(&req, Duration::from_secs(30)).await.map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_secs_f64());
            }
        }));
    }
    let mut lat = Vec::with_capacity(writes);
    for t in tasks {
        lat.extend(t.await.map_err(|e| e.to_string())??);
    }
    let seconds = t0.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0) * 1e3
    };
    Ok(LoadReport {
        clients,
        writes: lat.len(),
        seconds,
        writes_per_s: lat.len() as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: pct(1.0),
    })
}
