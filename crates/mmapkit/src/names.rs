//! One spelling per value of the core's option enums: `named_enum!`
//! writes `NAMES`, `Display` and `FromStr` from one table, so the CLI
//! (clap parses through `FromStr`) and the binding share the names and the
//! error for a bad one. `options!` defines the option structs users build
//! (`#[non_exhaustive]`, with one chainable setter per field). Both macros
//! are exported (`mmapkit::named_enum!`, `mmapkit::options!`) so that the
//! crates beside the core (replicate, raft) use the same ones.

/// `"a, b or c"`: how errors list the accepted names.
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// `named_enum!(Type, "what", { Variant => "name", ... })` implements
/// `Type::NAMES`, `Display` (the name) and `FromStr` (exactly the name; an
/// unknown one is an [`crate::Error::InvalidArgument`] listing them all).
/// Arms after `;` (full patterns) are shown but never parsed (internal
/// or raw values). `named_enum!(Type, "what", else parse, "hint", { ... })`
/// also accepts what `parse(&str) -> Option<Type>` accepts (values that
/// carry data, e.g. `interval:10ms`), and lists `hint` among the names in
/// the error. One spelling per value: there are no aliases.
#[macro_export]
macro_rules! named_enum {
    ($ty:ident, $what:literal, $(else $parse:path, $hint:literal,)? { $($v:ident => $name:literal),+ $(,)? } $(; $($hp:pat => $hshow:expr),+ $(,)? )?) => {
        impl $ty {
            /// The accepted names, in the order of the variants.
            pub const NAMES: &'static [&'static str] = &[$($name),+];
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $($ty::$v => f.write_str($name),)+
                    $($($hp => write!(f, "{}", $hshow),)+)?
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::Error;
            fn from_str(s: &str) -> $crate::Result<Self> {
                match s {
                    $($name => Ok($ty::$v),)+
                    other => {
                        $(if let Some(v) = $parse(other) {
                            return Ok(v);
                        })?
                        let shown: &[&str] = &[$($name,)+ $($hint)?];
                        Err($crate::Error::InvalidArgument(format!(
                            "unknown {} {other:?} (expected {})",
                            $what,
                            $crate::names::one_of(shown)
                        )))
                    }
                }
            }
        }
    };
}

/// `options! { /// docs  #[derive(..)] pub struct Name { /// docs  pub field: T, ... } }`
/// defines an options struct that users build: it is `#[non_exhaustive]`
/// (outside the defining crate it cannot be written as a struct literal,
/// so adding a field is not a breaking change), and every field gets a
/// chainable by-value setter of the same name and visibility:
/// `GrepOptions::default().ignore_case(true).max_count(Some(5))`. The
/// struct provides `Default` itself (derived or written). This is the one
/// naming scheme of the workspace's options: start from `default()` (or
/// a constructor), then one setter per field, named after the field.
#[macro_export]
macro_rules! options {
    (
        $(#[$sm:meta])*
        $svis:vis struct $name:ident {
            $( $(#[$fm:meta])* $fvis:vis $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$sm])*
        #[non_exhaustive]
        $svis struct $name {
            $( $(#[$fm])* $fvis $f: $t, )*
        }

        #[allow(dead_code)]
        impl $name {
            $(
                #[doc = concat!("Sets `", stringify!($f), "` (see the field).")]
                #[must_use]
                $fvis fn $f(mut self, $f: $t) -> Self {
                    self.$f = $f;
                    self
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
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
        for (s, ms) in
            [("interval:10ms", 10.0), ("interval:200us", 0.2), ("0.5s", 500.0), ("7", 7.0)]
        {
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
}
