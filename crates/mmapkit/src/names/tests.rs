use std::time::Duration;

use crate::kmer::{Mode as KmerMode, OutFormat};
use crate::log::SyncMode;
use crate::map::{Advice, Mode as MapMode};
use crate::scan::Strategy;
use crate::stats::Method;

/// Every name parses to a value that displays as that name, and an
/// unknown name is refused with an error listing every accepted one.
fn round_trip<T>(names: &[&str], what: &str)
where
    T: std::str::FromStr<Err = crate::Error> + std::fmt::Display,
{
    for &n in names {
        let v: T = n.parse().unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(v.to_string(), n);
    }
    for bad in ["", "bogus", &names[0].to_uppercase(), &format!(" {}", names[0])] {
        let e = bad.parse::<T>().err().unwrap_or_else(|| panic!("{bad:?} parsed as a {what}"));
        assert!(matches!(e, crate::Error::InvalidArgument(_)), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("unknown {what} {bad:?} (expected ")), "{msg}");
        assert!(names.iter().all(|n| msg.contains(n)), "{msg}");
    }
}

#[test]
fn every_enum_round_trips_and_names_what_it_accepts() {
    round_trip::<Strategy>(Strategy::NAMES, "strategy");
    round_trip::<KmerMode>(KmerMode::NAMES, "mode");
    round_trip::<OutFormat>(OutFormat::NAMES, "format");
    round_trip::<MapMode>(MapMode::NAMES, "map mode");
    round_trip::<Advice>(Advice::NAMES, "advice");
    round_trip::<Method>(Method::NAMES, "quantile method");
    round_trip::<SyncMode>(SyncMode::NAMES, "sync mode");
}

/// A data-carrying value parses through the table's `else` parser and
/// displays in a form that parses back; the error lists its hint.
#[test]
fn sync_mode_intervals_and_no_aliases() {
    assert_eq!(SyncMode::NAMES, ["never", "batch"]);
    for (s, ms) in [("interval:10ms", 10.0), ("interval:200us", 0.2), ("0.5s", 500.0), ("7", 7.0)] {
        let v: SyncMode = s.parse().unwrap();
        assert_eq!(v, SyncMode::Interval(Duration::from_secs_f64(ms / 1e3)), "{s}");
        assert_eq!(v.to_string().parse::<SyncMode>().unwrap(), v);
    }
    assert_eq!(SyncMode::Interval(Duration::from_millis(10)).to_string(), "interval:10ms");
    // The undocumented aliases are gone; a negative interval is refused.
    for bad in ["none", "always", "interval:-1ms", "interval:", "10 ms"] {
        let e = bad.parse::<SyncMode>().unwrap_err().to_string();
        assert!(e.ends_with("(expected never, batch or interval:<N>ms)"), "{bad}: {e}");
    }
}

#[test]
fn tables_are_what_the_docs_promise() {
    assert_eq!(Strategy::NAMES, ["auto", "mmap", "read", "stream"]);
    assert_eq!(KmerMode::NAMES, ["single", "batch", "mmap"]);
    assert_eq!(OutFormat::NAMES, ["csv", "tsv", "npy"]);
    assert_eq!(MapMode::NAMES, ["read", "write", "copy"]);
    assert_eq!(Method::NAMES, ["linear", "inverted_cdf"]);
    // Raw is an internal format: shown, never parsed.
    assert_eq!(OutFormat::Raw.to_string(), "raw");
    assert!("raw".parse::<OutFormat>().is_err());
    assert_eq!(
        "x".parse::<Strategy>().unwrap_err().to_string(),
        "unknown strategy \"x\" (expected auto, mmap, read or stream)"
    );
    assert_eq!(Advice::PopulateWrite.to_string(), "populate_write");
    assert_eq!(super::one_of(&["a"]), "a");
}
