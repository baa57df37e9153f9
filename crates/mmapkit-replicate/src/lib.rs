//! Replication of a [`mmapkit::log::CommitLog`] over HTTP: a **log
//! server** that serves a log's entries in pages, and a **follower** that
//! copies them into a log of its own and keeps following.
//!
//! ```no_run
//! use mmapkit_replicate::{serve_dir, follow, FollowOptions, ServeOptions};
//! // On the leader (a process that appends to "wal" may run beside it):
//! let server = serve_dir("wal", ServeOptions::default())?;
//! println!("{}", server.url());
//! // On a follower: catch up once.
//! let report = follow(server.url(), "copy", FollowOptions::default().once(true))?;
//! println!("{} entries copied", report.appended);
//! # Ok::<(), mmapkit_replicate::ReplicateError>(())
//! ```
//!
//! # Durable entries only
//!
//! A server serves a log up to its [durable
//! mark](mmapkit::log::CommitLog::durable_mark) (entries the writer has
//! synced; for a log another process writes, as it publishes them in
//! `DIR/durable`): "the last index" below means the last one served, and
//! a power loss of the leader's machine can never take back an entry a
//! follower holds. [`ServeOptions::serve_unsynced`] serves every appended
//! entry instead: then each page names the writer's incarnation and
//! durable mark (`x-mmapkit-incarnation`, `x-mmapkit-durable`), a
//! follower records (durably, before appending) which entries it copied
//! past the mark, and once the leader's writer has reopened the log
//! (another incarnation: a power loss may have taken them) it drops those
//! and copies them again. A follower holding entries the leader has
//! appended but not yet synced (`appended_index` in `/v1/state`) waits
//! for them to become durable.
//!
//! # Protocol (`/v1`)
//!
//! Every endpoint takes `Authorization: Bearer TOKEN` (the scheme in any
//! case) when the server has a token (else 401). A connection past the
//! server's cap gets a bare 503 with `Connection: close` before its
//! request is read. Errors are `text/plain` with the status:
//!
//! * `GET /v1/state[?since=E]` → JSON `{"log_id", "epoch", "completed",
//!   "cut_since", "first_index", "last_index", "last_term", "last_crc",
//!   "appended_index", "durable_index", "incarnation", "serves_unsynced"}`
//!   (the last four: the last entry appended, the durable mark and the
//!   writer's incarnation as a decimal string, `null` for a log no writer
//!   of this version opened, and whether unsynced entries are served):
//!   the log's random id, its truncation epoch (truncations started) and
//!   the number completed, and with `since`, `cut_since`: the lowest index
//!   that truncations numbered `E` or later cut after (`null`: none); 409
//!   when `E` is past the log's epoch. All from one view of the log
//!   (`last_term`/`last_crc` are `null` for an empty log). See
//!   `mmapkit::log`'s identity module and [`follow()`] for how followers use
//!   them.
//! * `GET /v1/term/{index}` → JSON `{"index", "term", "crc"}`: the
//!   log-matching probe. 410 when the leader purged `index`, 416 past its
//!   last entry (both by a fresh view), 503 when the read failed otherwise
//!   (the log is changing: retry), 400 for a malformed index.
//! * `GET /v1/entries?from=I[&max_count=N][&max_bytes=B][&prev_term=T][&prev_crc=C][&wait_ms=W]`
//!   → `application/octet-stream`, the entries from `I` as frames
//!   ([`wire`]): as many whole entries as fit in `B` payload bytes (at
//!   least one) and at most `N`. `N` and `B` are **clamped** to the
//!   server's limits ([`ServeOptions::max_page_count`],
//!   [`ServeOptions::max_page_bytes`]); the headers `x-mmapkit-count`,
//!   `x-mmapkit-last-index` say how many came and where the leader's log
//!   ends, `x-mmapkit-log-id` which log they come from, and
//!   `x-mmapkit-epoch` the read's tag (truncations completed when it read;
//!   a follower checks later that none numbered from it on cut what it
//!   got). With `prev_term`/`prev_crc`, the server first checks that its
//!   entry `I-1` has that term and CRC and answers 409 if not; either way
//!   `x-mmapkit-prev-term` and `x-mmapkit-prev-crc` name its entry `I-1`
//!   as read with the page (absent when `I` is its first entry), so a
//!   follower that asked before it had entry `I-1` checks the page itself.
//!   When `I` is just past the last entry, the request waits up to `W`
//!   milliseconds (long poll, clamped to [`ServeOptions::max_wait`]) for
//!   new entries and then answers with what there is (possibly none).
//!   410 Gone ("snapshot required") when `I` was purged, 416 when `I` is
//!   more than one past the end, 400 for malformed, repeated or zero
//!   parameters,
//!   503 when the server is too busy to start a page in time or a read
//!   failed while the log was changing.
//!
//! # Bounds
//!
//! At most [`ServeOptions::max_concurrent_pages`] page bodies are produced
//! at once (a semaphore; the others wait, then 503). A page's payloads are
//! not copied into a page buffer: payloads of 16 KiB and more are body
//! chunks that borrow the log's mapping ([`bytes::Bytes::from_owner`] over
//! the read's [`Entries`](mmapkit::log::Entries), which keep their
//! segments mapped); smaller entries are coalesced with their frame
//! headers into chunks of about 64 KiB (one chunk per 50-byte entry would
//! cost more than the copy). Each body is pulled by the socket, so a
//! page's memory is its index (40 bytes per entry) and one chunk. A client
//! that takes no bytes for [`ServeOptions::stall_timeout`] is cut off, so
//! stalled clients cannot keep the page slots.
//!
//! At most [`ServeOptions::max_connections`] connections are open (512 by
//! default); past it a new connection is answered `503` with
//! `Connection: close` and closed at once, never queued. With a token,
//! the oldest open connection that has not yet sent a request carrying
//! the token is closed instead, to make room: clients without the token
//! cannot keep followers with it out. A request head
//! must arrive whole within [`ServeOptions::header_timeout`] (10 s) of its
//! first byte (a new connection's first head: of the accept), and a
//! kept-alive connection with no request in flight closes after
//! [`ServeOptions::idle_timeout`] (30 s) without a byte. These hold
//! before the token is checked (it is read with the head), so silent or
//! byte-by-byte clients cannot use up the server's fds and memory. A long
//! poll or a body being sent is a request in flight, not idle time. A
//! request head over 64 KiB is refused (431).
//!
//! Long polls on a read-only log ([`serve_dir`]; another process appends)
//! cost one poller thread per server: while any request waits, it
//! refreshes the log every 5 ms after a change, backing off to 100 ms
//! while nothing changes (the worst added latency), and wakes the waiting
//! requests; with none waiting it does nothing. (Stores through another
//! process's mapping raise no file events, so it polls.) On a writable
//! log, appends wake the waiting requests directly.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conn;
pub mod error;
pub mod follow;
pub mod http;
mod served;
pub mod server;
mod wake;
pub mod wire;

pub use error::ReplicateError;
pub use follow::{follow, FollowOptions, FollowReport, Follower, StopHandle};
pub use server::{serve, serve_dir, ServeOptions, Server, ServerStop};

/// Result with [`ReplicateError`].
pub type Result<T, E = ReplicateError> = std::result::Result<T, E>;
