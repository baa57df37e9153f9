//! Long-poll wake-ups for a read-only log (one another process appends
//! to): ONE thread per server refreshes the log while some request waits
//! and publishes the last index served (`served::servable`) on the same
//! `watch` channel a writable log's watcher uses, so waiting requests
//! only await the channel.
//!
//! Polling is needed: stores through a shared mapping by another process
//! raise no file events. Its cost is one refresh per interval whatever
//! the number of waiting requests (each request used to refresh every
//! 20 ms on a blocking thread of its own), and none while nobody waits.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mmapkit::log::CommitLog;
use tokio::sync::watch;

use crate::served::servable;

/// Pause before the next refresh after one that found news...
const FAST: Duration = Duration::from_millis(5);
/// ...doubling, while nothing changes, up to this (the worst added
/// latency of a long poll).
const SLOW: Duration = Duration::from_millis(100);
/// How often an idle poller looks at the stop flag.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// Who waits, and how often the log was refreshed (for tests).
#[derive(Default)]
pub(crate) struct Poller {
    waiting: AtomicUsize,
    refreshes: AtomicU64,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Poller {
    /// Marks a request as waiting for news until the guard is dropped.
    pub(crate) fn waiter(self: &Arc<Self>) -> Waiting {
        if self.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_one();
        }
        Waiting(self.clone())
    }
    /// Counts a refresh (or a request's check whether one is due).
    pub(crate) fn count_refresh(&self) {
        self.refreshes.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// A waiting request (see [`Poller::waiter`]).
pub(crate) struct Waiting(Arc<Poller>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts the poller's thread; it ends soon after `stop` is set.
pub(crate) fn spawn(
    log: Arc<CommitLog>,
    poller: Arc<Poller>,
    last_tx: watch::Sender<u64>,
    stop: Arc<AtomicBool>,
    unsynced: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut last = servable(&log, unsynced);
        let mut pause = FAST;
        while !stop.load(Ordering::Acquire) {
            if poller.waiting() == 0 {
                let g = poller.lock.lock().unwrap_or_else(|e| e.into_inner());
                if poller.waiting() == 0 {
                    let _ = poller.wake.wait_timeout(g, IDLE_TICK);
                }
                continue;
            }
            std::thread::sleep(pause);
            if poller.waiting() == 0 {
                continue;
            }
            poller.count_refresh();
            match log.refresh() {
                Ok(()) => {
                    let now = servable(&log, unsynced);
                    // Also publishes truncations.
                    last_tx.send_if_modified(|v| std::mem::replace(v, now) != now);
                    pause = if now != last { FAST } else { (pause * 2).min(SLOW) };
                    last = now;
                }
                // The log is being rewritten or the disk failed: the
                // requests' own refreshes report errors; retry slowly.
                Err(_) => pause = SLOW,
            }
        }
    })
}
