//! The logic of the `gpu-qos` admin command: compare `gpu_qos.conf` with the
//! QOS in Slurm's accounting database, and derive a `gpu_qos.conf` from it.
//!
//! Sysadmins run `gpu-qos check` after changing either side (and monitoring
//! may run it from cron): the plugin only closes the untyped-request hole for
//! QOS that `gpu_qos.conf` lists, and its never-fits check is only right
//! while `GPULimit` matches the typed `GrpTRES`, yet nothing ties the two
//! together when `sacctmgr modify qos` runs. Everything here is pure, so it
//! is tested without Slurm; `src/bin/gpu-qos.rs` only runs `sacctmgr` and
//! prints.
//!
//! How accounting and the plugin count GPUs, which every check below follows:
//! a typed request (`gpu:a40:2`) counts against both `gres/gpu:a40` and
//! `gres/gpu` in `GrpTRES`; an untyped request counts only against
//! `gres/gpu`, which is the hole. The plugin's `GPULimit` is compared with
//! the request for *each* type on its own (see
//! `policy::rules::judge_under_rule`), so the most GPUs of type T a job can
//! ever get under a QOS is min(`gres/gpu:T`, `gres/gpu`): `GPULimit=N`
//! where every type has the same figure, `GPULimit=a40:4,h100:2` where they
//! differ.

//!
//! - `records`: what `sacctmgr` says of each QOS and association, and
//!   its parsers.
//! - `findings`: what `check` finds, with its severity and the words
//!   the admin reads.
//! - `compare`: `gpu_qos.conf` compared with the database.
//! - `report`: the tally, the summary line and the `--json` report.
//! - `generate`: a `gpu_qos.conf` derived from the database.

mod compare;
mod findings;
mod generate;
mod records;
mod report;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod fixtures;

pub use compare::{check, check_associations, check_exempt_users};
pub use findings::{Finding, Severity};
pub use generate::{generate, generate_for_site};
pub(crate) use records::parse_grp_tres;
pub use records::{
    limit_text, parse_assoc_users, parse_sacctmgr, parse_sacctmgr_assoc, AssocRecord, GpuTresLimit,
    QosRecord, SacctmgrParseError, TypeLimits, SACCTMGR_ARGS, SACCTMGR_ASSOC_ARGS,
};
pub use report::{summary_line, CheckJson, FindingJson, Tally};
