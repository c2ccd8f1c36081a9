//! The node's MPS sharing state on disk: which job holds how many units on
//! which GPU and for whom, and which jobs hold GPUs whole.
//!
//! Who uses it: the slurmd prolog (`gpu-mps-prolog`) places a job's share
//! (once per job: every later step finds the same GPU) and records
//! whole-GPU holders; the SPANK plugin in slurmstepd reads the placement;
//! the epilog (`gpu-mps-epilog`) releases the job; the `gpu-mps` admin
//! command shows a [`Snapshot`] and runs `gc` ([`Ledger::reconcile`],
//! [`Ledger::rebuild`]).
//!
//! # Crash and race safety
//!
//! Every change is one transaction: an exclusive `flock` on `lock`, read
//! `state`, apply the change, publish the world-readable status copy, write
//! the new `state` ([`state_dir::replace_file`]), unlock. Concurrent job
//! starts therefore see each other's placements and never over-fill a GPU,
//! and a crash at any point leaves either the old or the new `state` in
//! place; readers ([`Ledger::snapshot`]) take no lock and always see a whole
//! file. The lock file is never removed: removing a file others may hold a
//! `flock` on would let two writers each lock a different inode.
//!
//! The lock is waited for within a deadline (`mps::lock_wait`: a node
//! program's budget): a wait that runs out is [`LedgerError::Busy`] and
//! changes nothing. A prolog then refuses the job; an epilog leaves its
//! release to the next transaction (`pending`), which makes it first.
//!
//! [`state_dir::replace_file`]: crate::mps::state_dir::replace_file
//!
//! The directory is created with its first (empty) state file already in
//! it, by renaming a finished directory into place; so a state directory
//! without a state file means the state was lost, never that it is new.
//!
//! # Lost state fails safe
//!
//! A state file that cannot be parsed is moved to `state.corrupt-<time>`
//! (kept until an admin removes it) and a missing one is noticed. The
//! transaction then rebuilds the state from the published status copy,
//! which is written before `state` in every transaction and so never knows
//! less than the ledger did. Where there is no readable copy either, the
//! state is marked *lost*: the GPU loads are unknown, no share is placed
//! until `gpu-mps gc` rebuilds it, and `gpu-mps status` says so.
//!
//! # State file format (`state`)
//!
//! One JSON object, `{"format":"gpushare-mps-ledger","version":2,
//! "shares":[...],"whole":[...]}` plus `"lost":{"since":..,"reason":..}`
//! while the state is lost. A share is `{"job","uid","user","gpu","units",
//! "since"}` (`units` ≥ 1, `gpu` the index on the node, `since` Unix
//! seconds); a whole-GPU holder `{"job","gpus","since"}` with a non-empty
//! list of GPUs without repeats. A job has at most one record of each kind.
//! Unknown fields, another format or version are refused, not guessed at;
//! the text format of gpushare 0.1 is recognised and named in the error.
//!
//! # Where each part lives
//!
//! - `records`: the records and the state they make up.
//! - `format`: the state file's JSON, read and written whole.
//! - `per_gpu`: the state GPU by GPU: the loads a share is placed by, the
//!   view `gpu-mps status` shows, and a state rebuilt from that view.
//! - `store`: the ledger in its directory: opening, the lock-free read,
//!   the transaction under `flock`, the views it publishes.
//! - `changes`: what writers change, one transaction each.
//! - `pending`: releases an epilog left to the next transaction, its wait
//!   for the lock having run out.
//! - `outcome`: what a call returns, and why it failed.

mod changes;
mod format;
mod outcome;
mod pending;
mod per_gpu;
mod records;

pub(crate) use records::unix_now;
mod store;

pub use changes::{Holder, Placed, SlurmChoice};
pub use format::ParseError;
pub use outcome::{LedgerError, Outcome, Repair};
pub use per_gpu::{GpuView, Snapshot};
pub use records::{LedgerState, Lost, Record, ShareRecord, WholeRecord};
pub use store::{Ledger, ShareMemory, View, LOCK_WHAT};

/// Temporary ledgers for unit tests, the ledger's and other rooms' (`ok`,
/// `place`), and the name state files are set aside under.
#[cfg(test)]
pub(crate) use store::{tests, SET_ASIDE_PREFIX};
