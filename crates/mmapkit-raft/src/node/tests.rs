use super::*;

/// The store names go through the core's `named_enum!`: one spelling
/// each, and the core's error (kind and text) for an unknown one.
#[test]
fn store_kinds_parse_through_named_enum() {
    assert_eq!(StoreKind::NAMES, ["mmapkit", "memory", "rocksdb"]);
    for n in StoreKind::NAMES {
        assert_eq!(n.parse::<StoreKind>().unwrap().to_string(), *n);
    }
    let e = "rocks".parse::<StoreKind>().unwrap_err();
    assert_eq!(e.kind(), mmapkit::ErrorKind::InvalidArgument);
    assert_eq!(e.to_string(), "unknown store \"rocks\" (expected mmapkit, memory or rocksdb)");
}
