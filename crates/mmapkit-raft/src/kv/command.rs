//! The client commands and how one applies to the data (a write
//! transaction's table, or a plain map in tests).

use super::*;

/// A client command.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Sets `key` to `value`.
    Set {
        /// The key written.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Removes `key`.
    Delete {
        /// The key removed.
        key: String,
    },
    /// Compare-and-set: sets `key` to `value` (removes it when `value` is
    /// `None`) only if its current value equals `expected` (`None`: the
    /// key is absent).
    Cas {
        /// The key compared and set.
        key: String,
        /// The value it must have now (`None`: absent).
        expected: Option<String>,
        /// Its new value (`None`: remove it).
        value: Option<String>,
    },
    /// Removes every key in `[start, end)` (`end` `None`: to the last key).
    DeleteRange {
        /// The first key removed (inclusive).
        start: String,
        /// The end of the range (exclusive; `None`: no end).
        end: Option<String>,
    },
    /// Several clients' commands in one raft entry, applied in order and
    /// atomically (one `apply`, under the state's lock). Formed by the
    /// node's proposer (the private `batch` module), never sent by clients: openraft
    /// 0.9 has no batched client-write API, and one entry per command
    /// costs one log sync each. Entries written before batches existed
    /// hold one plain command and still apply.
    Batch(Vec<Request>),
}

/// What a command returns: the key's value before the command, and
/// whether it took effect (always for `Set`/`Delete`; for `Cas`, whether
/// `expected` matched).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The key's value before the command (`None`: absent).
    pub previous: Option<String>,
    /// Absent in entries written before `Cas` existed: those took effect.
    #[serde(default = "yes")]
    pub ok: bool,
    /// For a `Batch`: each command's own response, in order (the fields
    /// above are then the defaults). Empty (and not serialized) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<Response>,
    /// For a `DeleteRange`: the keys it removed (0, not serialized, otherwise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deleted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn yes() -> bool {
    true
}

impl Default for Response {
    fn default() -> Self {
        Response { previous: None, ok: true, batch: Vec::new(), deleted: 0 }
    }
}

/// What a command reads and writes: a write transaction's table, or (the
/// batch module's tests) a plain map.
pub(crate) trait Data {
    /// The value of `key`.
    fn get(&mut self, key: &str) -> Result<Option<String>>;
    /// Sets `key` (written by the entry at `revision`); its previous value.
    fn set(&mut self, key: &str, value: &str, revision: u64) -> Result<Option<String>>;
    /// Removes `key`; its previous value.
    fn remove(&mut self, key: &str) -> Result<Option<String>>;
    /// Removes every key in `[start, end)` (`end` `None`: no end); the keys, in order.
    fn remove_range(&mut self, start: &str, end: Option<&str>) -> Result<Vec<String>>;
}

impl Data for BTreeMap<String, String> {
    fn get(&mut self, key: &str) -> Result<Option<String>> {
        Ok(BTreeMap::get(self, key).cloned())
    }

    fn set(&mut self, key: &str, value: &str, _revision: u64) -> Result<Option<String>> {
        Ok(self.insert(key.to_owned(), value.to_owned()))
    }

    fn remove(&mut self, key: &str) -> Result<Option<String>> {
        Ok(BTreeMap::remove(self, key))
    }

    fn remove_range(&mut self, start: &str, end: Option<&str>) -> Result<Vec<String>> {
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        let keys: Vec<String> =
            self.range::<str, _>((Bound::Included(start), hi)).map(|(k, _)| k.clone()).collect();
        for k in &keys {
            BTreeMap::remove(self, k);
        }
        Ok(keys)
    }
}

/// Applies one command to `data`.
#[cfg_attr(not(test), allow(dead_code, reason = "the batch module's tests apply through it"))]
pub(crate) fn apply_command(data: &mut BTreeMap<String, String>, req: Request) -> Response {
    apply_changes(data, req, 0, &mut |_, _| {}).expect("a map does not fail")
}

/// Applies one command (of the entry at `revision`) to `data`, telling
/// `changed` each key it sets (`Some(value)`) or removes (`None`), in order.
pub(super) fn apply_changes(
    data: &mut dyn Data,
    req: Request,
    revision: u64,
    changed: &mut dyn FnMut(&str, Option<&str>),
) -> Result<Response> {
    Ok(match req {
        Request::Set { key, value } => {
            changed(&key, Some(&value));
            Response { previous: data.set(&key, &value, revision)?, ..Response::default() }
        }
        Request::Delete { key } => {
            let previous = data.remove(&key)?;
            if previous.is_some() {
                changed(&key, None);
            }
            Response { previous, ..Response::default() }
        }
        Request::Cas { key, expected, value } => {
            let previous = data.get(&key)?;
            let ok = previous == expected;
            if ok {
                changed(&key, value.as_deref());
                match value {
                    Some(v) => data.set(&key, &v, revision)?,
                    None => data.remove(&key)?,
                };
            }
            Response { previous, ok, ..Response::default() }
        }
        Request::DeleteRange { start, end } => {
            let keys = match &end {
                Some(e) if *e <= start => Vec::new(),
                _ => data.remove_range(&start, end.as_deref())?,
            };
            for k in &keys {
                changed(k, None);
            }
            Response { deleted: keys.len() as u64, ..Response::default() }
        }
        Request::Batch(reqs) => Response {
            batch: reqs
                .into_iter()
                .map(|r| apply_changes(data, r, revision, changed))
                .collect::<Result<_>>()?,
            ..Response::default()
        },
    })
}
