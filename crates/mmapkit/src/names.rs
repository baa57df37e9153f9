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
mod tests;
