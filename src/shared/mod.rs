//! The small room both halves of gpushare share: Slurm's `Key=Value`
//! syntax and its one error type, where files live, the watched
//! configuration file, and the names of the SPANK variables through which
//! the controller half talks to the node half, and the Prometheus text
//! both halves write.
//!
//! Nothing here knows about QOS rules or GPU shares; `qos` and `mps` import
//! this room and never each other.

pub mod locations;
pub mod prom;
pub mod spank_env;
pub mod syntax;
pub mod watched;

pub use syntax::ConfigError;
