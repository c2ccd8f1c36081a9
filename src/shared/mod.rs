//! The small room both halves of gpushare share: Slurm's `Key=Value`
//! syntax and its one error type, where files live, the watched
//! configuration file, and the names of the SPANK variables through which
//! the controller half talks to the node half, the Prometheus text
//! both halves write, and the one way to do each common thing: replace a
//! file durably ([`durable`]), run an external program with a deadline
//! ([`bounded`]), read and add to Slurm's timestamps ([`calendar`]),
//! expand Slurm's host lists ([`hostlist`]); gpushare's words of what a
//! job used of each GPU, in its `AdminComment` ([`usage_words`]: the
//! node half writes them, `gpu-qos advise` reads them); a user's text
//! shown to others as text, and words quoted for a shell ([`user_text`]).
//!
//! Nothing here knows about QOS rules or GPU shares; `qos` and `mps` import
//! this room and never each other.

pub mod admin_comment;
pub mod autodetect;
pub mod batch_start;
pub mod booking;
pub mod bounded;
pub mod calendar;
#[cfg(test)]
pub mod doc_keys;
pub mod durable;
pub mod exit_status;
pub mod hostlist;
pub mod locations;
pub mod namespaces;
pub mod node_refusals;
pub mod prom;
pub mod slurm_release;
pub mod spank_env;
pub mod syntax;
pub mod usage_words;
pub mod user_text;
pub mod watched;

pub use syntax::ConfigError;
