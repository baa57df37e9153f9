//! `mmapkit-kv watch`: the changes under a prefix, long-polled.

use super::*;

/// Long-polls the nodes in turn (the next after an error), printing each
/// change once.
pub(super) async fn watch(
    conn: Conn,
    prefix: String,
    from: Option<u64>,
    count: Option<usize>,
    patience: Duration,
) -> Result<i32, BoxError> {
    let nodes = conn.nodes.clone();
    let c = client(conn.nodes, conn.token)?;
    let mut from = match from {
        Some(f) => f,
        None => c.range(&prefix, None, 1, patience).await?.revision + 1,
    };
    let (mut printed, mut k, mut failures) = (0usize, 0usize, 0u32);
    let mut out = std::io::stdout().lock();
    while count.is_none_or(|n| printed < n) {
        match c.watch(&nodes[k % nodes.len()], &prefix, from, Duration::from_secs(30)).await {
            Ok(Ok(a)) => {
                failures = 0;
                for e in a.events.iter().take(count.map_or(usize::MAX, |n| n - printed)) {
                    writeln!(out, "{}", serde_json::to_string(e)?)?;
                    printed += 1;
                }
                out.flush()?;
                from = a.next;
            }
            Ok(Err(gone)) => {
                return Err(format!(
                    "revision {from} is compacted away (the oldest held is {}): read the range again and watch from its revision + 1",
                    gone.oldest
                )
                .into())
            }
            Err(e) => {
                failures += 1;
                if failures as usize > 3 * nodes.len() {
                    return Err(e.into());
                }
                k += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    Ok(0)
}
