//! `gpu_qos.conf`: which QOS may use which GPU types and how many, plus the
//! site-wide settings of the `job_submit/gpu_qos` plugin (low-priority QOS,
//! shared-GPU reservations, MPS share cap).
//!
//! The file is in Slurm's own `Key=Value` style: `#` starts a comment
//! anywhere, keys are case-insensitive, values case-sensitive, several pairs
//! per line. A line holding `QOS=` is a rule; every other non-empty line sets
//! global keys. [`parse`] stops at the first error, reported as
//! `FILE:LINE: reason`, because slurmctld keeps the last good file in force
//! and the admin fixes one line at a time anyway.
//!
//! QOS names are matched without regard to ASCII case, as slurmctld itself
//! matches `--qos`: a rule for `qos_lafferty` must also catch
//! `--qos=QOS_Lafferty`, or the typed limit could be dodged by spelling.
//!
//! - `rules`: what the file says once parsed: the rules and the
//!   site-wide settings, and the questions the plugin asks of them.
//! - `patterns`: type entries and reservation names as globs.
//! - `keys`: the keys of the file, and what can be wrong with a line.
//! - `parse`: reading the file and checking every value.
//! - `last_good`: the copy of the last good file slurmctld keeps, and
//!   which policy a start with a bad file puts in force.

mod keys;
pub mod last_good;
mod parse;
mod patterns;
mod rules;

pub use keys::keys;
pub use parse::{megabytes, metrics_file_in, parse};
pub use patterns::{glob_matches, is_pattern, type_matches};
pub use rules::{
    mem_text, Cap, Enforce, ExemptUser, GpuLimit, GpuQosConfig, QosRule, RequireGpuType, RuleScope,
    TypeCaps, WITHOUT_FILE,
};
