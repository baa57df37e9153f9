//! [`KvClient`]: a client of the KV service that finds the leader.

use super::*;

/// A client of the KV service: sends requests to the node it believes
/// leads (following `ForwardToLeader` answers, trying the other nodes
/// when one is down or has no quorum; nodes also forward to the leader
/// themselves).
#[derive(Clone)]
pub struct KvClient {
    http: reqwest::Client,
    pub(crate) nodes: Arc<Vec<String>>,
    leader: Arc<Mutex<usize>>,
    token: Option<HeaderValue>,
}

/// Why a client call failed. `TooLarge`, `Unauthorized` and `Rejected`
/// mean the write was not applied; `Unknown` that it may or may not have
/// been. `Timeout` means not applied for a `Cas`; a `Set` or `Delete`
/// retried after an attempt of unknown outcome may have been (see
/// [`KvClient::write`]).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No node address was given.
    #[error("no nodes given (pass at least one HOST:PORT)")]
    NoNodes,
    /// The token cannot be sent as a bearer token.
    #[error("bad token: {0}")]
    BadToken(String),
    /// The HTTP client could not be built, or a direct request to one node failed.
    #[error("http client: {0}")]
    Http(String),
    /// No leader answered within the time (the last error seen).
    #[error("no leader answered within {0:?} (last error: {1})")]
    Timeout(Duration, String),
    /// `413`: the command exceeds the server's limit (not applied).
    #[error("too large: {0}")]
    TooLarge(String),
    /// `401`: no or a wrong token (not applied).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Another `4xx` (not applied).
    #[error("refused with HTTP {0}: {1}")]
    Rejected(u16, String),
    /// The request was sent and its answer lost (timeout, connection
    /// lost, `504`): the write may or may not take effect.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

/// One attempt's failure inside the retry loops.
pub(super) enum Attempt {
    /// Not applied; try again (maybe elsewhere).
    Retry(String),
    /// Sent, answer lost.
    Unknown(String),
    Fatal(ClientError),
}

impl KvClient {
    /// A client of the nodes at `addrs` (`host:port`); fails on none.
    pub fn new(addrs: impl IntoIterator<Item = String>) -> Result<KvClient, ClientError> {
        let nodes: Vec<String> = addrs.into_iter().filter(|a| !a.trim().is_empty()).collect();
        if nodes.is_empty() {
            return Err(ClientError::NoNodes);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // Below a node's idle timeout (60 s by default).
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| ClientError::Http(e.to_string()))?;
        Ok(KvClient { http, nodes: Arc::new(nodes), leader: Arc::new(Mutex::new(0)), token: None })
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_token(mut self, token: Option<&str>) -> Result<KvClient, ClientError> {
        self.token = token.map(bearer_value).transpose().map_err(ClientError::BadToken)?;
        Ok(self)
    }

    pub(crate) fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url).timeout(REQUEST_TIMEOUT + Duration::from_secs(4));
        match &self.token {
            Some(t) => r.header(header::AUTHORIZATION, t.clone()),
            None => r,
        }
    }

    pub(crate) fn current(&self) -> usize {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes through the leader; returns once the entry is committed and
    /// applied, with its log id and the command's [`Response`]. Retries
    /// for up to `patience` while the write was certainly not applied
    /// (no leader, no quorum, a node down). After an attempt of unknown
    /// outcome it retries `Set` and `Delete` (idempotent on the state) but
    /// returns [`ClientError::Unknown`] for `Cas`.
    pub async fn write(
        &self,
        req: &Request,
        patience: Duration,
    ) -> Result<(LogId<NodeId>, Response), ClientError> {
        let deadline = Instant::now() + patience;
        let retry_unknown = !matches!(req, Request::Cas { .. });
        let mut last_err = String::new();
        while Instant::now() < deadline {
            let k = self.current();
            let url = format!("http://{}/kv/write", self.nodes[k]);
            match self.write_once(k, url, req).await {
                Ok(r) => return Ok(r),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Unknown(e)) if !retry_unknown => return Err(ClientError::Unknown(e)),
                Err(Attempt::Retry(e) | Attempt::Unknown(e)) => {
                    last_err = e;
                    if self.current() == k {
                        self.rotate(k);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
        Err(ClientError::Timeout(patience, last_err))
    }

    async fn write_once(
        &self,
        k: usize,
        url: String,
        req: &Request,
    ) -> Result<(LogId<NodeId>, Response), Attempt> {
        let resp = match self.request(reqwest::Method::POST, url).json(req).send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(Attempt::Retry(e.to_string())),
            Err(e) => return Err(Attempt::Unknown(e.to_string())),
        };
        let status = resp.status();
        // A follower relayed this from the leader: talk to the leader next.
        let hint = resp.headers().get(LEADER_HINT).and_then(|v| v.to_str().ok());
        if let Some(i) = hint.and_then(|h| self.nodes.iter().position(|a| a == h)) {
            *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = i;
        }
        if status.is_success() {
            let answer: WriteResult =
                resp.json().await.map_err(|e| Attempt::Unknown(e.to_string()))?;
            return match answer {
                Ok(r) => Ok((r.log_id, r.data)),
                Err(e) if e.forward_to_leader().is_none() => Err(Attempt::Unknown(e.to_string())),
                Err(e) => {
                    // Not applied: follow the hint when it names a known node.
                    let next = e
                        .forward_to_leader()
                        .and_then(|f| f.leader_node.as_ref())
                        .and_then(|n| self.nodes.iter().position(|a| *a == n.addr));
                    if let Some(i) = next.filter(|&i| i != k) {
                        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = i;
                    }
                    Err(Attempt::Retry(e.to_string()))
                }
            };
        }
        let body = resp.text().await.unwrap_or_default().trim().to_owned();
        Err(match status {
            StatusCode::PAYLOAD_TOO_LARGE => Attempt::Fatal(ClientError::TooLarge(body)),
            StatusCode::UNAUTHORIZED => Attempt::Fatal(ClientError::Unauthorized(body)),
            StatusCode::SERVICE_UNAVAILABLE => Attempt::Retry(body),
            s if s.is_client_error() => Attempt::Fatal(ClientError::Rejected(s.as_u16(), body)),
            _ => Attempt::Unknown(format!("HTTP {status}: {body}")),
        })
    }

    /// A linearizable read of `key` (through any node; nodes forward to
    /// the leader). Retries for up to `patience`.
    pub async fn get(&self, key: &str, patience: Duration) -> Result<Option<String>, ClientError> {
        let deadline = Instant::now() + patience;
        let mut last_err = String::new();
        while Instant::now() < deadline {
            let k = self.current();
            let url = format!("http://{}/kv/get", self.nodes[k]);
            match self.get_at(url, key, false).await {
                Ok(v) => return Ok(v),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e) | Attempt::Unknown(e)) => {
                    last_err = e;
                    self.rotate(k);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        Err(ClientError::Timeout(patience, last_err))
    }

    /// The value of `key` in the state machine of the node at `addr`,
    /// unchecked (may be stale).
    pub async fn get_stale(&self, addr: &str, key: &str) -> Result<Option<String>, ClientError> {
        self.get_at(format!("http://{addr}/kv/get"), key, true).await.map_err(|e| match e {
            Attempt::Fatal(e) => e,
            Attempt::Retry(e) | Attempt::Unknown(e) => ClientError::Http(e),
        })
    }

    async fn get_at(&self, url: String, key: &str, stale: bool) -> Result<Option<String>, Attempt> {
        let mut q = vec![("key", key)];
        if stale {
            q.push(("stale", "true"));
        }
        let resp = self
            .request(reqwest::Method::GET, url)
            .query(&q)
            .send()
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?;
        let status = resp.status();
        if status.is_success() {
            let a: GetAnswer = resp.json().await.map_err(|e| Attempt::Retry(e.to_string()))?;
            return Ok(a.value);
        }
        let body = resp.text().await.unwrap_or_default().trim().to_owned();
        Err(match status {
            StatusCode::UNAUTHORIZED => Attempt::Fatal(ClientError::Unauthorized(body)),
            s if s.is_client_error() => Attempt::Fatal(ClientError::Rejected(s.as_u16(), body)),
            _ => Attempt::Retry(format!("HTTP {status}: {body}")),
        })
    }

    pub(crate) fn rotate(&self, from: usize) {
        let mut l = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        if *l == from {
            *l = (from + 1) % self.nodes.len();
        }
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(
        &self,
        addr: &str,
        route: &str,
    ) -> Result<T, String> {
        self.get_json_query(addr, route, &[]).await
    }

    /// [`KvClient::get_json`] with `query`'s parameters (URL-encoded).
    async fn get_json_query<T: DeserializeOwned>(
        &self,
        addr: &str,
        route: &str,
        query: &[(&str, &str)],
    ) -> Result<T, String> {
        let mut req = self.request(reqwest::Method::GET, format!("http://{addr}/{route}"));
        if !query.is_empty() {
            req = req.query(query);
        }
        let r = req.timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            return Err(format!("{addr}/{route}: HTTP {status}: {}", body.trim()));
        }
        r.json().await.map_err(|e| e.to_string())
    }

    /// One page of a node's applied state, from key `start`, at most `limit` keys.
    pub async fn state_page(
        &self,
        addr: &str,
        start: &str,
        limit: usize,
    ) -> Result<KvState, String> {
        let limit = limit.to_string();
        self.get_json_query(addr, "kv/state", &[("start", start), ("limit", &limit)]).await
    }

    /// A node's whole applied state (every page, gathered here: for tests
    /// and checks), or an error when it changed between pages.
    pub async fn state(&self, addr: &str) -> Result<KvState, String> {
        use super::query::RANGE_MAX;
        let mut all = self.state_page(addr, "", RANGE_MAX).await?;
        while let Some(start) = all.next.take() {
            let page = self.state_page(addr, &start, RANGE_MAX).await?;
            if page.last_applied != all.last_applied {
                return Err(format!("{addr}: the state changed while it was read"));
            }
            all.data.extend(page.data);
            all.next = page.next;
        }
        Ok(all)
    }

    /// One page of a node's log ids: from raft index `from`, at most `max`.
    pub async fn log_ids_page(&self, addr: &str, from: u64, max: usize) -> Result<LogIds, String> {
        self.get_json(addr, &format!("log/ids?from={from}&max={max}")).await
    }

    /// A node's whole log (every page).
    pub async fn log_ids(&self, addr: &str) -> Result<LogIds, String> {
        let mut all = self.log_ids_page(addr, 0, LOG_IDS_MAX).await?;
        while let Some(from) = all.next {
            let page = self.log_ids_page(addr, from, LOG_IDS_MAX).await?;
            all.entries.extend(page.entries);
            all.next = page.next;
        }
        Ok(all)
    }

    /// A node's openraft metrics.
    pub async fn metrics(&self, addr: &str) -> Result<RaftMetrics<NodeId, Member>, String> {
        self.get_json(addr, "metrics").await
    }

    /// Initializes the cluster through the node at `addr`, waiting up to
    /// 30 s for nodes still starting (the node asks every other one who it
    /// is: a connection refused or a `503` is retried).
    pub async fn init(&self, addr: &str, nodes: &BTreeMap<NodeId, String>) -> Result<(), String> {
        // Each node's incarnation the node itself tells the initializer.
        let members: BTreeMap<NodeId, serde_json::Value> =
            nodes.iter().map(|(id, a)| (*id, serde_json::json!({ "addr": a }))).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let sent = self
                .request(reqwest::Method::POST, format!("http://{addr}/cluster/init"))
                .json(&members)
                .send()
                .await;
            let retry = match sent {
                Err(e) if e.is_connect() => e.to_string(),
                Err(e) => return Err(e.to_string()),
                Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                    r.text().await.unwrap_or_default().trim().to_owned()
                }
                Ok(r) if !r.status().is_success() => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    return Err(format!("{addr}/cluster/init: HTTP {status}: {}", body.trim()));
                }
                Ok(r) => {
                    let res: Result<(), RaftError<NodeId, InitializeError<NodeId, Member>>> =
                        r.json().await.map_err(|e| e.to_string())?;
                    return res.map_err(|e| e.to_string());
                }
            };
            if Instant::now() >= deadline {
                return Err(format!("{addr}/cluster/init: {retry}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
