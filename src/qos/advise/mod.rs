//! `gpu-qos advise`: from what jobs used, as accounting recorded it, the
//! jobs whose GPU request did not fit their use, each with the size to
//! ask for and the command line to type instead:
//!
//! - a job that held one GPU whole and would have fit a share of at most
//!   half a GPU: that share ([`Kind::ShareInstead`]);
//! - a share that used at most half of what it asked: the smaller size
//!   ([`Kind::Smaller`]);
//! - a share that reached its memory limit: a larger size, or a whole GPU
//!   where the largest share allowed is not larger ([`Kind::Larger`],
//!   [`Kind::WholeInstead`]).
//!
//! The figures come from gpushare's words in the job's `AdminComment` (or
//! its `SystemComment`, where the node left a site tool's `AdminComment` whole)
//! ([`crate::shared::usage_words`]), else from Slurm's own `gres/gpumem`
//! and `gres/gpuutil` of its steps (`TRESUsageInMax`/`Ave`, gathered
//! with `AutoDetect=nvml`). A size is the smallest whole number of units
//! that covers both the peak memory and the mean SM use with
//! [`HEADROOM_PERCENT`] more ([`needed_units`]); integers throughout,
//! so that a size never moves by a rounding.
//!
//! - `decide`: the decision for one job.
//! - `report`: the list, its text and JSON.
//! - `line`: the command line to type instead.

mod decide;
mod line;
mod report;

pub use decide::words_of;
pub use decide::{
    decide, ended, held_and_used, held_gpus, memory_named, needed_units, Decision, Held, Kind,
    NotAdvised, Site, Source, Used, DEFAULT_UNITS_PER_GPU, HEADROOM_PERCENT, LIMIT_HIT_PERCENT,
    MIN_SAMPLES, MIN_SLURM_ELAPSED_S,
};
pub use line::{advised_line, LineFrom};
pub use report::{decisions, entry, AdviseReport, JobAdvice, NotAdvisedCount};

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
