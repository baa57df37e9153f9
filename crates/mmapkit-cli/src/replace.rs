//! `mmapkit replace`, `mmapkit keep-lines` / `mmapkit head --in-place` (being written).

use clap::Args;

pub const REPLACE_HELP: &str = "";
pub const KEEP_HELP: &str = "";

/// Arguments of `mmapkit replace`.
#[derive(Args, Debug)]
pub struct ReplaceArgs {}

/// Arguments of `mmapkit keep-lines`.
#[derive(Args, Debug)]
pub struct KeepArgs {}

/// Arguments of `mmapkit head` (only `--in-place` is supported).
#[derive(Args, Debug)]
pub struct HeadArgs {}

pub fn replace(_a: ReplaceArgs) -> anyhow::Result<u8> {
    anyhow::bail!("mmapkit replace is not built yet")
}

pub fn keep_lines(_a: KeepArgs) -> anyhow::Result<u8> {
    anyhow::bail!("mmapkit keep-lines is not built yet")
}

pub fn head(_a: HeadArgs) -> anyhow::Result<u8> {
    anyhow::bail!("mmapkit head is not built yet")
}
