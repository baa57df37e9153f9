//! `mmapkit grep` (being written).

use clap::Args;

pub const GREP_HELP: &str = "";

/// Arguments of `mmapkit grep`.
#[derive(Args, Debug)]
pub struct GrepArgs {}

pub fn grep(_a: GrepArgs) -> anyhow::Result<u8> {
    anyhow::bail!("mmapkit grep is not built yet")
}
