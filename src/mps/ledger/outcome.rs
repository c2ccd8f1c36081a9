//! What a ledger call returns: its value with the repair the transaction
//! made first ([`Outcome`], [`Repair`]), or why it could not run
//! ([`LedgerError`]).

use std::fmt;
use std::path::{Path, PathBuf};

use super::format::{ParseError, FORMAT_VERSION};
use super::records::Record;
use crate::mps::lock_wait::Busy;
use crate::mps::placement::PlacementError;
use crate::mps::state_dir::DirError;

/// What a transaction had to repair before it could run: the state file
/// was unreadable (and moved aside) or missing, and the state was rebuilt
/// from the published copy or marked lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// Where the unreadable file went (`None`: it was missing).
    pub moved_to: Option<PathBuf>,
    /// What was wrong with it.
    pub reason: String,
    /// The published copy the records were taken from (`None`: none was
    /// readable, so the state is now lost).
    pub rebuilt_from: Option<PathBuf>,
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the MPS state file {}", self.reason)?;
        if let Some(moved_to) = &self.moved_to {
            write!(f, "; it was moved to {}", moved_to.display())?;
        }
        match &self.rebuilt_from {
            Some(copy) => write!(f, "; the records were rebuilt from {}", copy.display()),
            None => f.write_str(
                "; no readable status copy was left, so the GPU loads are unknown and no share \
                 is placed until an admin runs `gpu-mps gc`",
            ),
        }
    }
}

/// What a transaction returned, and whether it had to repair the state
/// first (callers log that).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    pub value: T,
    pub repair: Option<Repair>,
    /// What the optional views could not publish (see
    /// [`View::required`](super::View::required)).
    pub notes: Vec<String>,
    /// Records of ended jobs whose epilogs left their release to this
    /// transaction (their wait for the lock ran out).
    pub released: Vec<Record>,
}

impl<T> Outcome<T> {
    /// What callers log: the repair, what the views could not publish,
    /// the releases made for epilogs that could not make them.
    pub fn remarks(&self) -> Vec<String> {
        let repair = self.repair.as_ref().map(|r| r.to_string());
        let released = self.released.iter().map(|r| {
            format!(
                "released job {}'s record, left to this change by its epilog (it found the \
                 ledger locked): {r}",
                r.job()
            )
        });
        repair
            .into_iter()
            .chain(self.notes.iter().cloned())
            .chain(released)
            .collect()
    }
}

/// Why the ledger could not be used or changed.
#[derive(Debug)]
pub enum LedgerError {
    /// The state directory (or the status copy's) cannot be trusted or used.
    Dir(DirError),
    /// A reader found a state file it cannot parse (readers never move it).
    Corrupt(ParseError),
    /// A reader found no state file in an existing state directory.
    Missing(PathBuf),
    /// No GPU could take the share; the state is unchanged, except that it
    /// may have been repaired first.
    Placement {
        error: PlacementError,
        repair: Option<Repair>,
    },
    /// [`Ledger::record_whole`](super::Ledger::record_whole) was given no GPUs.
    NoWholeGpus { job: u32 },
    /// A [`View`](super::View) could not publish (the text says which and why).
    View(String),
    /// The state file was written by a newer gpushare (a downgrade): it is
    /// left as it is, never set aside as unreadable.
    TooNew { path: PathBuf, version: u32 },
    /// The lock stayed held by another process for the whole wait the
    /// caller allows (see `lock_wait`): nothing was read or changed.
    Busy(Busy),
}

impl From<DirError> for LedgerError {
    fn from(e: DirError) -> Self {
        LedgerError::Dir(e)
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(e) => write!(f, "MPS {e}"),
            Self::Corrupt(reason) => write!(
                f,
                "MPS state file is unreadable: {reason} (the next prolog, epilog or \
                 `gpu-mps gc` sets it aside and rebuilds the state)"
            ),
            Self::Missing(path) => write!(
                f,
                "MPS state file {} is missing (the next prolog, epilog or `gpu-mps gc` \
                 rebuilds the state)",
                path.display()
            ),
            Self::Placement { error, repair } => {
                write!(f, "{error}")?;
                if let Some(repair) = repair {
                    write!(f, "; also, {repair}")?;
                }
                Ok(())
            }
            Self::NoWholeGpus { job } => write!(
                f,
                "job {job} was to be recorded as holding GPUs whole, but no GPU was named"
            ),
            Self::View(text) => write!(f, "{text}"),
            Self::Busy(busy) => write!(f, "{busy}"),
            Self::TooNew { path, version } => write!(
                f,
                "MPS state file {} was written by a newer gpushare (ledger version {version}; \
                 this gpushare reads version {FORMAT_VERSION}): it is left as it is, and no \
                 share is placed or released here until the newer gpushare is back, or until \
                 the node's jobs have ended and the directory {} is removed (downgrade a \
                 node only while it is drained)",
                path.display(),
                path.parent().unwrap_or(Path::new("/")).display()
            ),
        }
    }
}

impl std::error::Error for LedgerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Dir(e) => Some(e),
            Self::Corrupt(reason) => Some(reason),
            Self::Placement { error, .. } => Some(error),
            _ => None,
        }
    }
}
