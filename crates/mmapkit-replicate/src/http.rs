//! What the crate's HTTP servers share with each other and with
//! `mmapkit-kv` (the raft crate's node): the bearer-token check (the
//! scheme in any case, a constant-time compare), plain-text error
//! answers, and the names of the `x-mmapkit-*` headers of the `/v1`
//! protocol (server and follower both use these constants).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// `x-mmapkit-count`: entries in a page.
pub const X_COUNT: &str = "x-mmapkit-count";
/// `x-mmapkit-first-index`: the leader's first entry (pages; 410 and 416 answers).
pub const X_FIRST_INDEX: &str = "x-mmapkit-first-index";
/// `x-mmapkit-last-index`: the last entry the leader serves.
pub const X_LAST_INDEX: &str = "x-mmapkit-last-index";
/// `x-mmapkit-log-id`: the random id of the log a page comes from.
pub const X_LOG_ID: &str = "x-mmapkit-log-id";
/// `x-mmapkit-epoch`: a page's read tag (truncations completed when it was read).
pub const X_EPOCH: &str = "x-mmapkit-epoch";
/// `x-mmapkit-prev-term`: the term of the entry before a page, as read with it.
pub const X_PREV_TERM: &str = "x-mmapkit-prev-term";
/// `x-mmapkit-prev-crc`: the CRC of the entry before a page, as read with it.
pub const X_PREV_CRC: &str = "x-mmapkit-prev-crc";
/// `x-mmapkit-durable`: the writer's durable mark (servers of unsynced entries).
pub const X_DURABLE: &str = "x-mmapkit-durable";
/// `x-mmapkit-incarnation`: the writer's incarnation (servers of unsynced entries).
pub const X_INCARNATION: &str = "x-mmapkit-incarnation";

/// The content type of every plain-text answer.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// Whether `a` and `b` are equal, in a time that does not depend on where
/// they first differ (only on their lengths).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether `headers` carry `token` as a bearer token (`Ok`), or why not.
/// The scheme is case-insensitive (RFC 7235 section 2.1); whitespace
/// before the scheme and around the token is ignored; the comparison
/// takes the same time wherever the first difference is ([`ct_eq`]).
pub fn check_token(headers: &HeaderMap, token: &str) -> std::result::Result<(), &'static str> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .and_then(|(scheme, t)| scheme.eq_ignore_ascii_case("bearer").then_some(t));
    match given {
        None => Err("missing bearer token (send Authorization: Bearer TOKEN)"),
        Some(g) if !ct_eq(g.trim().as_bytes(), token.as_bytes()) => Err("bad bearer token"),
        _ => Ok(()),
    }
}

/// Checks that `token` can be sent in an `Authorization` header as is:
/// non-empty, visible ASCII only (anything else could not be sent, or
/// would be trimmed from the header, so no client could authenticate).
pub fn check_sendable(token: &str) -> std::result::Result<(), String> {
    if token.is_empty() {
        return Err("the token must not be empty".into());
    }
    match token.char_indices().find(|(_, c)| !matches!(c, '\x21'..='\x7e')) {
        Some((i, c)) => Err(format!(
            "the token holds {c:?} at byte {i}, which cannot be sent in an HTTP header: use \
             visible ASCII only (letters, digits, punctuation; no spaces or control characters)"
        )),
        None => Ok(()),
    }
}

/// A plain-text answer: `msg` and a newline, with `status`.
pub fn text(status: StatusCode, msg: String) -> Response {
    let mut r = (status, format!("{msg}\n")).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN));
    r
}

/// The bearer check of a server with `token` (none: every request is
/// let in): the answer to a request it refuses, 401 with
/// `WWW-Authenticate: Bearer` and why ([`check_token`]); `None` to let
/// the request in.
pub fn refusal(headers: &HeaderMap, token: Option<&str>) -> Option<Response> {
    let why = check_token(headers, token?).err()?;
    let mut r = text(StatusCode::UNAUTHORIZED, why.into());
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq_is_equality() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }

    #[test]
    fn only_visible_ascii_tokens_are_sendable() {
        assert!(check_sendable("s3cret~!").is_ok());
        assert_eq!(check_sendable("").unwrap_err(), "the token must not be empty");
        for bad in ["a b", "a\nb", "tök", "a\u{7f}"] {
            let e = check_sendable(bad).unwrap_err();
            assert!(e.contains("visible ASCII") && e.contains("at byte 1"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_refused_request_gets_401_with_the_scheme() {
        let mut h = HeaderMap::new();
        assert!(refusal(&h, None).is_none());
        let r = refusal(&h, Some("t")).expect("no token sent");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(r.headers()[header::CONTENT_TYPE], TEXT_PLAIN);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  t "));
        assert!(refusal(&h, Some("t")).is_none());
    }
}
