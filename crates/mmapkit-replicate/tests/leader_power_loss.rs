//! Issue 37, defect 7: a follower never holds, with success, entries its
//! leader lost in a power loss. The leader's disk returning to its last
//! sync is modelled by restoring a copy of its directory taken right after
//! that sync (the crashfs matrix in `mmapkit-crashfs` does it for real).
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit_replicate::{follow, serve, FollowOptions, FollowReport, ReplicateError, ServeOptions};

fn once() -> FollowOptions {
    FollowOptions::default()
        .once(true)
        .sync(SyncMode::Never)
        .give_up_after(Some(Duration::from_secs(20)))
}

fn unsynced_writer(dir: &Path) -> Arc<CommitLog> {
    Arc::new(
        CommitLog::open(dir, LogOptions::default().sync(SyncMode::Never).segment_size(1 << 20))
            .unwrap(),
    )
}

/// The leader: 10 synced entries (the copy taken then is what its disk
/// keeps), then 10 unsynced ones; served with `opts`.
fn leader_with_an_unsynced_tail(
    base: &Path,
    opts: ServeOptions,
) -> (Arc<CommitLog>, mmapkit_replicate::Server) {
    let w = unsynced_writer(&base.join("a"));
    fill(&w, 1, 11, 1, 0);
    copy_dir(&base.join("a"), &base.join("at-sync"));
    fill_unsynced(&w, 11, 21, 1, 0);
    let srv = serve(w.clone(), opts).unwrap();
    (w, srv)
}

/// The power loss, then a new writer appends 9 different entries and a
/// 10th equal to the old 20th: the case the follower's last-entry check
/// cannot see.
fn lose_power_and_append_other_entries(base: &Path, w: Arc<CommitLog>) -> Arc<CommitLog> {
    drop(w);
    restore(&base.join("at-sync"), &base.join("a"));
    let w = unsynced_writer(&base.join("a"));
    assert_eq!(w.last_index(), 10);
    fill_unsynced(&w, 11, 20, 2, 7);
    let twentieth: Vec<(u64, Vec<u8>)> = vec![(1, payload(20, 0))];
    w.append(&twentieth).unwrap();
    w.sync().unwrap();
    w
}

/// A follower catches up with the leader of [`leader_with_an_unsynced_tail`]
/// (served with `opts`), the leader loses power and gets other entries
/// ([`lose_power_and_append_other_entries`]), the follower follows again,
/// and must then hold the leader's log. Returns what the first follow
/// copied, what the second did, and the new leader with its server.
fn follow_across_a_power_loss(
    base: &Path,
    opts: ServeOptions,
) -> (u64, FollowReport, Arc<CommitLog>, mmapkit_replicate::Server) {
    let b = base.join("b");
    let (w, srv) = leader_with_an_unsynced_tail(base, opts.clone());
    let copied = follow(srv.url(), &b, once()).unwrap().last_index;
    let addr = srv.local_addr();
    drop(srv);
    let w = lose_power_and_append_other_entries(base, w);
    let srv = serve(w.clone(), opts.bind(addr.to_string())).unwrap();
    let r = follow(srv.url(), &b, once()).unwrap();
    assert_same(&base.join("a"), &b);
    (copied, r, w, srv)
}

#[test]
fn by_default_only_durable_entries_are_served_so_a_power_loss_leaves_no_difference() {
    let base = tempfile::tempdir().unwrap();
    let (copied, r, _, _) = follow_across_a_power_loss(base.path(), ServeOptions::default());
    assert_eq!(copied, 10, "entries the leader had not synced were served");
    assert_eq!((r.truncated, r.appended, r.last_index), (0, 10, 20));
}

#[test]
fn served_unsynced_the_follower_drops_what_a_new_incarnation_may_have_lost() {
    let base = tempfile::tempdir().unwrap();
    let b = base.path().join("b");
    let opts = ServeOptions::default().serve_unsynced(true);
    let (copied, r, w, srv) = follow_across_a_power_loss(base.path(), opts);
    assert_eq!(copied, 20);
    assert_eq!((r.truncated, r.appended, r.last_index), (10, 10, 20));
    let addr = srv.local_addr();
    // The writer reopens without syncing (its tail is not known durable):
    // served durable entries only, the follower waits for them, and says
    // so, instead of calling its copy diverged.
    drop(srv);
    drop(w);
    let w = unsynced_writer(&base.path().join("a"));
    let srv = serve(w.clone(), ServeOptions::default().bind(addr.to_string())).unwrap();
    let e =
        follow(srv.url(), &b, once().give_up_after(Some(Duration::from_millis(300)))).unwrap_err();
    assert!(e.to_string().contains("waiting for the leader to sync them"), "{e}");
    w.sync().unwrap();
    let r = follow(srv.url(), &b, once()).unwrap();
    assert_eq!((r.truncated, r.appended, r.last_index), (0, 0, 20));
    assert_same(&base.path().join("a"), &b);
}

/// A leader restored from a backup (durable entries lost, same log id
/// and history): reported with where the logs agree, and `reset` heals
/// it (it used to act only on another log's id).
#[test]
fn a_diverged_copy_of_the_same_log_says_where_they_agree_and_reset_heals_it() {
    let base = tempfile::tempdir().unwrap();
    let (a, b) = (base.path().join("a"), base.path().join("b"));
    let w = unsynced_writer(&a);
    fill(&w, 1, 11, 1, 0);
    copy_dir(&a, &base.path().join("backup"));
    fill(&w, 11, 21, 1, 0);
    let srv = serve(w.clone(), ServeOptions::default()).unwrap();
    follow(srv.url(), &b, once()).unwrap();
    let addr = srv.local_addr();
    drop(srv);
    drop(w);
    restore(&base.path().join("backup"), &a);
    let w = unsynced_writer(&a);
    fill(&w, 11, 23, 3, 5);
    let srv = serve(w, ServeOptions::default().bind(addr.to_string())).unwrap();
    let e = follow(srv.url(), &b, once()).unwrap_err();
    assert!(matches!(e, ReplicateError::Diverged { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("entry 10 is the same on both"), "{msg}");
    assert!(msg.contains(&format!("mmapkit log truncate {} 10", b.display())), "{msg}");
    assert_eq!(open_ro(&b).last_index(), 20, "a diverged copy was changed without reset");
    let r = follow(srv.url(), &b, once().reset(true)).unwrap();
    assert_eq!((r.truncated, r.appended, r.last_index), (20, 22, 22));
    assert_same(&a, &b);
}
