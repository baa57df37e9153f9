use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, v.parse().unwrap());
    }
    h
}

#[test]
fn a_new_directory_draws_an_incarnation_and_keeps_it() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("log");
    let a = Identity::open(2, d.path(), Some(&state)).unwrap();
    assert_ne!(a.incarnation(), 0);
    std::fs::create_dir(&state).unwrap();
    let b = Identity::open(2, d.path(), Some(&state)).unwrap();
    assert_eq!(a.incarnation(), b.incarnation());
    b.join("c1").unwrap();
    let c = Identity::open(2, d.path(), Some(&state)).unwrap();
    assert_eq!(c.cluster().as_deref(), Some("c1"));
    assert!(c.join("c2").unwrap_err().contains("belongs to cluster c1"));
}

#[test]
fn a_directory_whose_state_is_gone_is_refused_and_an_old_one_is_zero() {
    let d = tempfile::tempdir().unwrap();
    let state = d.path().join("log");
    let a = Identity::open(2, d.path(), Some(&state)).unwrap();
    let b = Identity::open(2, d.path(), Some(&state)).unwrap();
    assert_eq!(a.incarnation(), b.incarnation(), "never in a cluster: nothing lost");
    b.join("c1").unwrap();
    let e = Identity::open(2, d.path(), Some(&state)).unwrap_err();
    assert!(e.contains("is gone") && e.contains("member remove 2"), "{e}");
    let old = tempfile::tempdir().unwrap();
    std::fs::create_dir(old.path().join("log")).unwrap();
    let i = Identity::open(1, old.path(), Some(&old.path().join("log"))).unwrap();
    assert_eq!(i.incarnation(), 0);
}

#[test]
fn rpcs_for_another_incarnation_node_or_cluster_or_from_strangers_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let i = Identity::open(2, d.path(), None).unwrap();
    let me = format!("2/{:016x}", i.incarnation());
    let ok = headers(&[(TO_HEADER, &me), (FROM_HEADER, "1"), (CLUSTER_HEADER, "c1")]);
    assert!(i.admit(&ok, |_| false).unwrap_err().contains("not a member"));
    assert_eq!(i.cluster(), None, "a refused RPC joins nothing");
    i.admit(&ok, |f| f == 1).unwrap();
    assert_eq!(i.cluster().as_deref(), Some("c1"));
    let other = headers(&[(TO_HEADER, &me), (FROM_HEADER, "1"), (CLUSTER_HEADER, "c2")]);
    assert!(i.admit(&other, |_| true).unwrap_err().contains("cluster c2"));
    let wiped =
        headers(&[(TO_HEADER, "2/0000000000000007"), (FROM_HEADER, "1"), (CLUSTER_HEADER, "c1")]);
    let e = i.admit(&wiped, |_| true).unwrap_err();
    assert!(e.contains("wiped or replaced") && e.contains("member remove 2"), "{e}");
    assert_eq!(i.answer().refused.as_deref(), Some(e.as_str()));
    let wrong = headers(&[(TO_HEADER, "3/0"), (FROM_HEADER, "1")]);
    assert!(i.admit(&wrong, |_| true).unwrap_err().contains("meant for node 3"));
    assert!(i.admit(&HeaderMap::new(), |_| true).unwrap_err().contains("no x-mmapkit-to"));
}
