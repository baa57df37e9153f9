//! The follower's requests to the leader: `GET` with the token, the
//! statuses every caller handles, JSON answers, `/v1/state`.

use super::{Ctx, LeaderState};
use crate::{ReplicateError, Result};

impl Ctx {
    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path`: a future that borrows nothing, so a request can run
    /// as a task of its own (a page asked for ahead).
    pub(super) fn get(
        &self,
        path: &str,
    ) -> impl std::future::Future<Output = Result<reqwest::Response>> + Send + 'static {
        let url = self.url(path);
        let mut req = self.http.get(&url);
        if let Some(t) = &self.opts.token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.map_err(|e| {
                ReplicateError::http(
                    url.clone(),
                    None,
                    format!("request failed: {}", chain(&e)),
                    true,
                )
            })?;
            let status = resp.status();
            if status.is_success()
                || status.as_u16() == 410
                || status.as_u16() == 416
                || status.as_u16() == 409
            {
                return Ok(resp);
            }
            let text = resp.text().await.unwrap_or_default();
            let detail = format!("{status}: {}", text.trim());
            Err(if status.as_u16() == 401 {
                ReplicateError::Unauthorized { url, detail: text.trim().to_string() }
            } else {
                ReplicateError::http(
                    url,
                    Some(status.as_u16()),
                    detail,
                    status.is_server_error() || status.as_u16() == 429,
                )
            })
        }
    }

    pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(u16, Option<T>)> {
        let resp = self.get(path).await?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Ok((status, None));
        }
        let url = self.url(path);
        let body = resp.bytes().await.map_err(|e| {
            ReplicateError::http(
                url.clone(),
                Some(status),
                format!("reading the answer: {}", chain(&e)),
                true,
            )
        })?;
        let v = serde_json::from_slice(&body).map_err(|e| {
            ReplicateError::http(url, Some(status), format!("malformed answer: {e}"), false)
        })?;
        Ok((status, Some(v)))
    }

    /// `/v1/state`, with `since` = the recorded epoch.
    pub(super) async fn leader_state(&self) -> Result<LeaderState> {
        let path = match &self.followed {
            Some(f) => format!("/v1/state?since={}", f.epoch),
            None => "/v1/state".into(),
        };
        let (status, st) = self.get_json::<LeaderState>(&path).await?;
        match (status, st) {
            (200, Some(st)) => Ok(st),
            (409, _) => {
                // Past the epoch of *this* log; but another log in the
                // leader's place (a replaced directory) has a history of
                // its own, shorter or not: that is told by the id, and
                // reconcile refuses it (or, with reset, copies it).
                if let (200, Some(st)) = self.get_json::<LeaderState>("/v1/state").await? {
                    if st.log_id.as_deref() != self.followed.as_ref().map(|f| f.log_id.as_str()) {
                        return Ok(st);
                    }
                }
                Err(self.diverged(format!(
                    "the leader's truncation history is behind the epoch {} this follower saw \
                     (was its log restored from a backup?)",
                    self.followed.as_ref().map_or(0, |f| f.epoch)
                )))
            }
            (s, _) => Err(ReplicateError::http(
                self.url(&path),
                Some(s),
                format!("unexpected status {s}"),
                true,
            )),
        }
    }
}

pub(super) fn header_u64(r: &reqwest::Response, name: &str) -> Option<u64> {
    r.headers().get(name)?.to_str().ok()?.parse().ok()
}

pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
