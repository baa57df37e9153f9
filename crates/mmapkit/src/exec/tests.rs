use super::*;

#[test]
fn parses_and_prints() {
    for (s, want) in [
        ("auto", Threads::AUTO),
        ("AUTO", Threads::AUTO),
        ("0", Threads::AUTO),
        ("1", Threads::ONE),
        ("3", Threads(3)),
    ] {
        assert_eq!(s.parse::<Threads>().unwrap(), want, "{s}");
    }
    assert_eq!(Threads::AUTO.to_string(), "auto");
    assert_eq!(Threads(7).to_string(), "7");
    assert_eq!(Threads::default(), Threads::AUTO);
    for bad in ["", "-1", "two", "1.5", "1025", "99999999999999999999999"] {
        let e = bad.parse::<Threads>().unwrap_err().to_string();
        assert!(e.starts_with("threads: "), "{bad:?}: {e}");
    }
    assert!(Threads::new(Threads::MAX).is_ok());
    assert!(Threads::new(Threads::MAX + 1).is_err());
}

#[test]
fn resolves_auto_to_the_cores() {
    assert_eq!(Threads::AUTO.get(), cores());
    assert_eq!(Threads::ONE.get(), 1);
    assert!(Threads::ONE.is_sequential());
    assert!(!Threads(2).is_sequential());
}

#[test]
fn one_pool_per_count_reused() {
    let a = Threads(3).pool().unwrap();
    let b = Threads::new(3).unwrap().pool().unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.current_num_threads(), 3);
    let c = Threads(2).pool().unwrap();
    assert!(!Arc::ptr_eq(&a, &c));
    // auto is the pool of the core count
    assert!(Arc::ptr_eq(&Threads::AUTO.pool().unwrap(), &Threads(cores()).pool().unwrap()));
}

#[test]
fn install_uses_that_many_workers() {
    for n in [1, 2, 3] {
        assert_eq!(Threads(n).install(rayon::current_num_threads).unwrap(), n);
    }
}

#[test]
fn progress_counts_only_when_watched() {
    let p = Progress::none();
    p.advance(5);
    p.set_total(9);
    assert_eq!((p.done(), p.total(), p.is_watched()), (0, 0, false));
    let p = Progress::watched();
    let q = p.clone();
    q.set_total(10);
    q.advance(4);
    q.advance(2);
    assert_eq!((p.done(), p.total(), p.is_watched()), (6, 10, true));
}
