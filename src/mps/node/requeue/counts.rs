//! The node's own count of gpushare's counted requeues of each job, for
//! jobs whose `AdminComment` cannot hold gpushare's words (a site tool's,
//! unread, or rewritten by a tool that erased them): where the comment
//! holds them, they count every node's requeues; where it cannot, each
//! node counts its own, so a job fails after [`MAX_REQUEUES`] counted
//! refusals on one node, and a preemption, a node failure or an admin's
//! `scontrol requeue` (which `Restarts=` counts) never does.
//!
//! One job a line, `<job>\t<count>\t<since>` (seconds since the epoch of
//! its last counted requeue here); kept beside the exclusions
//! (`/var/lib/gpushare`), bounded: a line older than [`KEPT_FOR`] goes,
//! and past [`MOST_JOBS`] lines the oldest go first.

use std::collections::BTreeMap;

/// How many times gpushare requeues one job (its own requeues, as the
/// job's `AdminComment` counts them, or, where that cannot hold its words,
/// the node's own record: [`RequeueCounts`]; a preemption, a node failure
/// or the user's own `scontrol requeue` do not count): past it, a share
/// refused here fails with its reason instead of going round the nodes.
pub const MAX_REQUEUES: u32 = 3;

/// How long a job's count is kept after its last counted requeue here.
pub const KEPT_FOR: u64 = 30 * 24 * 3600;
/// The most jobs the record keeps.
pub const MOST_JOBS: usize = 10_000;

/// How many counted requeues gpushare made of a job, and whose count it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeued {
    /// gpushare's words in the job's `AdminComment`: every node's
    /// requeues (or this node's own, where that is higher: words a tool
    /// erased).
    InComment(u32),
    /// The job's `AdminComment` cannot hold gpushare's words: this node's
    /// own record of its requeues from here.
    OnThisNode(u32),
}

impl Requeued {
    /// The job's `AdminComment` count (`Some` where gpushare may write
    /// there) with this node's, as [`Requeued`].
    pub fn of(comment: Option<u32>, writable: bool, here: u32) -> Self {
        if writable {
            Self::InComment(comment.unwrap_or(0).max(here))
        } else {
            Self::OnThisNode(comment.unwrap_or(0).max(here))
        }
    }

    pub fn count(self) -> u32 {
        match self {
            Self::InComment(n) | Self::OnThisNode(n) => n,
        }
    }

    /// Whose count it is, in the words of the refusal that caps it.
    pub fn whose(self) -> &'static str {
        match self {
            Self::InComment(_) => "by gpushare",
            Self::OnThisNode(_) => {
                "by gpushare from this node (its AdminComment cannot hold gpushare's count: a \
                 site tool's, unread, or rewritten)"
            }
        }
    }

    /// Whether another counted requeue is past the cap.
    pub fn capped(self) -> bool {
        self.count() >= MAX_REQUEUES
    }
}

/// The record: job → (count, last counted requeue here).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequeueCounts(pub BTreeMap<u32, (u32, u64)>);

impl RequeueCounts {
    /// Reads the record; a line that does not read is left out.
    pub fn parse(text: &str) -> Self {
        let entries = text.lines().filter_map(|l| {
            let mut f = l.split('\t');
            let job = f.next()?.parse().ok()?;
            let count = f.next()?.parse().ok()?;
            let since = f.next()?.parse().ok()?;
            f.next().is_none().then_some((job, (count, since)))
        });
        Self(entries.collect())
    }

    pub fn to_text(&self) -> String {
        self.0
            .iter()
            .map(|(job, (count, since))| format!("{job}\t{count}\t{since}\n"))
            .collect()
    }

    /// This node's count of `job` (0: none).
    pub fn of(&self, job: u32) -> u32 {
        self.0.get(&job).map_or(0, |(n, _)| *n)
    }

    /// One more counted requeue of `job` here, at `now`: at least
    /// `at_least` (the count the requeue was made under, plus one). Lines
    /// past their time go, then the oldest past [`MOST_JOBS`].
    pub fn bump(&mut self, job: u32, at_least: u32, now: u64) {
        let entry = self.0.entry(job).or_insert((0, now));
        *entry = ((entry.0 + 1).max(at_least), now);
        self.0
            .retain(|_, (_, since)| now.saturating_sub(*since) <= KEPT_FOR);
        while self.0.len() > MOST_JOBS {
            let Some(oldest) = self
                .0
                .iter()
                .min_by_key(|(_, (_, since))| *since)
                .map(|(j, _)| *j)
            else {
                break;
            };
            self.0.remove(&oldest);
        }
    }
}
