//! What writers change in the ledger, each change one transaction: a
//! share placed (or recorded where Slurm put it), the clients of a step,
//! a job holding GPUs whole, a job released, the records of jobs no longer
//! running dropped, a lost state ended.

use std::collections::BTreeSet;

use std::path::PathBuf;

use super::outcome::{LedgerError, Outcome};
use super::pending;
use super::records::{index, unix_now, LedgerState, Record, ShareRecord, WholeRecord};
use super::store::Ledger;
use crate::mps::placement::{self, PlacementError, MAX_GPUS_PER_NODE};
use crate::mps::state_dir;

/// The result of [`Ledger::place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The job's record; `share.gpu` is its GPU.
    pub share: ShareRecord,
    /// The job already had a share (a later step, or a repeated call), which
    /// is returned unchanged.
    pub already_recorded: bool,
    /// With this share its GPU holds more units than it has, or another job
    /// holds it whole: only where Slurm chose the GPU, and then a sign of
    /// records whose jobs ended without an epilog.
    pub crowded: bool,
}

/// Who a share is for: the job and its user as slurmd named them to the
/// prolog, and the job's SLUID where slurmd gave one (26.05 and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    pub job: u32,
    pub uid: u32,
    pub user: &'a str,
    pub sluid: Option<&'a str>,
}

impl<'a> Holder<'a> {
    /// `job` of user `user` (`uid`), no SLUID.
    pub fn new(job: u32, uid: u32, user: &'a str) -> Self {
        Self {
            job,
            uid,
            user,
            sluid: None,
        }
    }
}

/// The GPU Slurm chose for a share, and the node it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmChoice {
    pub gpu: u32,
    pub gpu_count: u32,
    pub units_per_gpu: u32,
}

impl Ledger {
    /// Places `job`'s share of `units` on the least-loaded GPU among
    /// `0..gpu_count` that no job holds whole, and records it. A job that
    /// already has a share gets it back unchanged, whatever it asks now.
    pub fn place(
        &self,
        job: u32,
        uid: u32,
        user: &str,
        units: u32,
        gpu_count: u32,
        units_per_gpu: u32,
    ) -> Result<Outcome<Placed>, LedgerError> {
        let holder = Holder::new(job, uid, user);
        self.place_beside(holder, units, (gpu_count, units_per_gpu), &[], &[])
    }

    /// [`Self::place`] on a node where the GPUs `single_user` have a daemon
    /// that serves one user at a time although the rule says several (it
    /// started before `MultiUser=yes`): no second user is placed there
    /// while another GPU can take the share; and where the GPUs `failed`
    /// are set aside ([`crate::mps::health`]): nothing goes there.
    pub fn place_beside(
        &self,
        holder: Holder<'_>,
        units: u32,
        (gpu_count, units_per_gpu): (u32, u32),
        single_user: &[u32],
        failed: &[u32],
    ) -> Result<Outcome<Placed>, LedgerError> {
        let uid = holder.uid;
        self.record_share(holder, units, None, |state| {
            if let Some(lost) = &state.lost {
                return Err(PlacementError::LoadsUnknown {
                    reason: lost.reason.clone(),
                });
            }
            if gpu_count > MAX_GPUS_PER_NODE {
                return Err(PlacementError::TooManyGpus { gpu_count });
            }
            let loads = state.placing_loads(gpu_count, uid, single_user, failed);
            let chosen = placement::choose_gpu_for_user(&loads, units_per_gpu, units, self.rule)?;
            u32::try_from(chosen).map_err(|_| PlacementError::TooManyGpus { gpu_count })
        })
    }

    /// Records `job`'s share of `units` on `gpu`, the GPU Slurm chose: Slurm
    /// booked it there, so no room is checked and lost loads do not matter
    /// (a share that overfills a GPU shows as such in `gpu-mps status`, and
    /// is reported as [`Placed::crowded`]). A job that already has a share
    /// gets it back unchanged.
    pub fn record_slurm_share(
        &self,
        holder: Holder<'_>,
        units: u32,
        choice: SlurmChoice,
    ) -> Result<Outcome<Placed>, LedgerError> {
        let SlurmChoice { gpu, gpu_count, .. } = choice;
        let max_clients = self.rule.max_clients;
        self.record_share(holder, units, Some(choice), |state| {
            if gpu >= gpu_count {
                return Err(PlacementError::SlurmGpuUnknown { gpu, gpu_count });
            }
            // Slurm booked the units, but the GPU's server takes only so
            // many clients: refused before anything is recorded.
            if state
                .gpu_loads(gpu_count)
                .get(index(gpu))
                .is_some_and(|l| l.clients >= max_clients)
            {
                return Err(PlacementError::TooManyClients { max_clients });
            }
            Ok(gpu)
        })
    }

    /// Records a new share on the GPU `choose` names, under the lock; a job
    /// already recorded keeps its share. `slurm`: Slurm chose the GPU.
    fn record_share(
        &self,
        holder: Holder<'_>,
        units: u32,
        slurm: Option<SlurmChoice>,
        choose: impl FnOnce(&LedgerState) -> Result<u32, PlacementError>,
    ) -> Result<Outcome<Placed>, LedgerError> {
        let Holder {
            job,
            uid,
            user,
            sluid,
        } = holder;
        self.transact(|state| {
            if let Some(share) = state.share(job) {
                return Ok(Placed {
                    share: share.clone(),
                    already_recorded: true,
                    crowded: false,
                });
            }
            let share = ShareRecord {
                job,
                uid,
                user: user.to_string(),
                gpu: choose(state)?,
                units,
                since: unix_now(),
                placed_by_slurm: slurm.is_some(),
                memory_mib: self
                    .share_memory
                    .as_ref()
                    .and_then(|limit| (limit.0)(units)),
                clients: None,
                sluid: sluid.map(str::to_owned),
            };
            state.insert_share(share.clone());
            let crowded = slurm.is_some_and(|s| {
                state
                    .gpu_loads(s.gpu_count)
                    .get(share.gpu as usize)
                    .is_some_and(|l| l.held_whole || l.used_units > s.units_per_gpu)
            });
            Ok(Placed {
                share,
                already_recorded: false,
                crowded,
            })
        })
    }

    /// Records that a step of `job` runs `tasks` MPS clients on its GPU:
    /// the job counts for its largest step. `Ok(Err(text))`: the GPU would
    /// then have more than `max_clients` (the step must fail with `text`).
    pub fn note_step_clients(
        &self,
        job: u32,
        tasks: u32,
        max_clients: u32,
    ) -> Result<Outcome<Result<(), String>>, LedgerError> {
        self.transact(|state| {
            let Some(share) = state.shares.get(&job).cloned() else {
                return Ok(Ok(()));
            };
            if tasks <= share.client_count() {
                return Ok(Ok(()));
            }
            let others: u32 = state
                .shares
                .values()
                .filter(|s| s.gpu == share.gpu && s.job != job)
                .map(ShareRecord::client_count)
                .sum();
            if others.saturating_add(tasks) > max_clients {
                return Ok(Err(format!(
                    "gpu_mps: job {job}: this step runs {tasks} tasks on GPU {}, each an MPS \
                     client, and the GPU's MPS server already serves {others} clients of other \
                     jobs; it takes at most {max_clients} (MaxClientsPerGPU): run fewer tasks \
                     per share, or ask for whole GPUs",
                    share.gpu
                )));
            }
            if let Some(s) = state.shares.get_mut(&job) {
                s.clients = Some(tasks);
            }
            Ok(Ok(()))
        })
    }

    /// Removes every record of `job` and returns them; releasing a job that
    /// has none (a second epilog) changes nothing.
    pub fn release(&self, job: u32) -> Result<Outcome<Vec<Record>>, LedgerError> {
        self.transact(|state| Ok(state.remove_job(job)))
    }

    /// Leaves `job`'s release to the next transaction (its epilog could
    /// not take the lock, see `pending`): the records of it in `seen`, the
    /// state as read without the lock (`None`: it could not be read).
    /// Returns the marker's path.
    pub fn defer_release(
        &self,
        job: u32,
        seen: Option<&LedgerState>,
    ) -> Result<PathBuf, LedgerError> {
        let (name, text) = pending::marker(job, seen);
        state_dir::replace_file(self.dir(), &name, text.as_bytes(), 0o600)?;
        Ok(self.dir().join(name))
    }

    /// Runs a transaction that changes nothing but the releases left to
    /// it, where there are any (the node timer: no job may start or end
    /// here for a long time); what they released.
    pub fn finish_deferred(&self) -> Result<Vec<Record>, LedgerError> {
        if pending::read_all(self.dir()).is_empty() {
            return Ok(Vec::new());
        }
        self.transact(|_| Ok(())).map(|out| out.released)
    }

    /// Records that `job` holds `gpus` whole, so no share goes there while
    /// it runs. Returns the shares already on those GPUs (an overlap Slurm
    /// created; callers log it). Recording again replaces the GPU list and
    /// keeps the first time.
    pub fn record_whole(
        &self,
        job: u32,
        gpus: &[u32],
    ) -> Result<Outcome<Vec<ShareRecord>>, LedgerError> {
        if gpus.is_empty() {
            return Err(LedgerError::NoWholeGpus { job });
        }
        self.transact(|state| {
            let since = state
                .whole_holder(job)
                .map_or_else(unix_now, |earlier| earlier.since);
            state.insert_whole(WholeRecord {
                job,
                gpus: gpus.to_vec(),
                since,
            });
            let held: BTreeSet<u32> = gpus.iter().copied().collect();
            Ok(state
                .shares()
                .filter(|share| share.job != job && held.contains(&share.gpu))
                .cloned()
                .collect())
        })
    }

    /// Drops the records of every job for which `is_running` says no, and
    /// returns them. It runs under the lock: pass a lookup in a list taken
    /// beforehand, not a query to slurmctld.
    pub fn reconcile(
        &self,
        mut is_running: impl FnMut(u32) -> bool,
    ) -> Result<Outcome<Vec<Record>>, LedgerError> {
        self.transact(|state| {
            Ok(state
                .jobs()
                .into_iter()
                .filter(|job| !is_running(*job))
                .flat_map(|job| state.remove_job(job))
                .collect())
        })
    }

    /// Ends a lost state once `unaccounted` (given the records the ledger
    /// holds) says no running job holds a share the ledger does not know:
    /// `Err(jobs)` names those that do, and the state stays lost. Returns
    /// whether the state was lost.
    pub fn rebuild(
        &self,
        unaccounted: impl FnOnce(&LedgerState) -> Vec<u32>,
    ) -> Result<Outcome<Result<bool, Vec<u32>>>, LedgerError> {
        self.transact(|state| {
            if state.lost.is_none() {
                return Ok(Ok(false));
            }
            let missing = unaccounted(state);
            if missing.is_empty() {
                state.lost = None;
                Ok(Ok(true))
            } else {
                Ok(Err(missing))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::tests::{jobs, mode_of, ok, place, read, TempDir};
    use super::super::store::{ShareMemory, LOCK_FILE};
    use super::*;
    use crate::mps::placement::ServerRule;
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    #[test]
    fn a_slurm_chosen_gpu_at_its_client_limit_is_refused_unrecorded() {
        let temp = TempDir::new();
        let ledger = temp.ledger().with_server_rule(ServerRule {
            multi_user: false,
            refuse_other_users: false,
            max_clients: 1,
        });
        let choice = SlurmChoice {
            gpu: 1,
            gpu_count: 2,
            units_per_gpu: 100,
        };
        ok(ledger.record_slurm_share(Holder::new(1, 1000, "a"), 10, choice));
        match ledger.record_slurm_share(Holder::new(2, 1000, "a"), 10, choice) {
            Err(LedgerError::Placement {
                error: PlacementError::TooManyClients { max_clients: 1 },
                ..
            }) => {}
            other => panic!("expected TooManyClients, got {other:?}"),
        }
        let state = ok(ledger.snapshot()).state;
        assert!(state.share(2).is_none());
        // The other GPU still takes it.
        ok(ledger.record_slurm_share(
            Holder::new(2, 1000, "a"),
            10,
            SlurmChoice { gpu: 0, ..choice },
        ));
    }

    #[test]
    fn a_share_is_placed_with_its_memory_limit_in_one_transaction() {
        let temp = TempDir::new();
        let mut ledger = temp.ledger();
        ledger.set_share_memory(ShareMemory(Arc::new(|units| Some(u64::from(units) * 480))));
        let placed = ok(ledger.place(7, 1000, "alice", 25, 4, 100)).value;
        assert_eq!(placed.share.memory_mib, Some(12000));
        // Written so: a reader sees the limit with the share, never without.
        let state = ok(ledger.snapshot()).state;
        assert_eq!(state.share(7).and_then(|s| s.memory_mib), Some(12000));
        let slurm = SlurmChoice {
            gpu: 2,
            gpu_count: 4,
            units_per_gpu: 100,
        };
        let placed = ok(ledger.record_slurm_share(Holder::new(8, 1000, "alice"), 50, slurm)).value;
        assert_eq!(placed.share.memory_mib, Some(24000));
    }

    #[test]
    fn a_placement_is_written_as_versioned_json() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let outcome = ok(ledger.place(123, 1000, "alice", 50, 4, 100));
        assert_eq!(outcome.repair, None);
        let share = outcome.value.share;
        assert!(!outcome.value.already_recorded);
        assert_eq!(
            (
                share.job,
                share.uid,
                share.user.as_str(),
                share.gpu,
                share.units
            ),
            (123, 1000, "alice", 0, 50)
        );
        assert!(share.since > 1_600_000_000);
        ok(ledger.record_whole(124, &[3, 1]));
        let json: serde_json::Value =
            serde_json::from_str(&read(&ledger.state_path())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["format"], "gpushare-mps-ledger");
        assert_eq!(json["version"], 2);
        assert_eq!(json["shares"][0]["job"], 123);
        assert_eq!(json["shares"][0]["user"], "alice");
        assert_eq!(json["shares"][0]["units"], 50);
        assert_eq!(json["whole"][0]["gpus"], serde_json::json!([1, 3]));
        assert!(json.get("lost").is_none());
        assert_eq!(mode_of(&ledger.state_path()), 0o600);
        assert_eq!(mode_of(&ledger.dir().join(LOCK_FILE)), 0o600);
        assert!(!ledger.dir().join("state.new").exists());
    }

    #[test]
    fn placing_a_job_again_returns_its_gpu_unchanged_without_writing() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        assert_eq!(place(&ledger, 1, 50), 0);
        assert_eq!(place(&ledger, 2, 50), 1);
        let before = read(&ledger.state_path());
        let inode = fs::metadata(ledger.state_path())
            .map(|m| m.ino())
            .unwrap_or_default();
        // A later step of job 1, even one that states other units.
        let again = ok(ledger.place(1, 1001, "user1", 10, 4, 100)).value;
        assert!(again.already_recorded);
        assert_eq!((again.share.gpu, again.share.units), (0, 50));
        assert_eq!(read(&ledger.state_path()), before);
        assert_eq!(
            fs::metadata(ledger.state_path())
                .map(|m| m.ino())
                .unwrap_or_default(),
            inode
        );
    }

    #[test]
    fn halves_spread_one_per_gpu_then_two_per_gpu_then_are_refused() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let first: Vec<u32> = (1..=4).map(|job| place(&ledger, job, 50)).collect();
        assert_eq!(first, vec![0, 1, 2, 3]);
        let second: Vec<u32> = (5..=8).map(|job| place(&ledger, job, 50)).collect();
        assert_eq!(second, vec![0, 1, 2, 3]);
        let before = read(&ledger.state_path());
        let error = ledger.place(9, 1009, "user9", 50, 4, 100).err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(
                error,
                Some(LedgerError::Placement {
                    error: PlacementError::NoGpuHasRoom {
                        units: 50,
                        most_free_on_one_gpu: 0,
                        ..
                    },
                    repair: None,
                })
            ),
            "{text}"
        );
        assert!(
            text.starts_with("no single GPU on this node has room for 50 MPS units"),
            "{text}"
        );
        assert_eq!(
            read(&ledger.state_path()),
            before,
            "a refusal must not change the state"
        );
    }

    #[test]
    fn bad_unit_counts_are_refused_before_any_change() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let empty = read(&ledger.state_path());
        let refused = |units, gpus| match ledger.place(1, 1, "u", units, gpus, 100) {
            Err(LedgerError::Placement { error, .. }) => error,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(0, 4), PlacementError::ZeroUnits);
        assert_eq!(
            refused(101, 4),
            PlacementError::MoreThanOneGpu {
                units: 101,
                units_per_gpu: 100
            }
        );
        assert_eq!(refused(10, 0), PlacementError::NoGpus);
        assert!(matches!(
            refused(10, u32::MAX),
            PlacementError::TooManyGpus { .. }
        ));
        assert_eq!(read(&ledger.state_path()), empty);
    }

    #[test]
    fn shares_avoid_gpus_held_whole() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let overlap = ok(ledger.record_whole(500, &[0])).value;
        assert!(overlap.is_empty());
        let placed: Vec<u32> = (1..=6).map(|job| place(&ledger, job, 50)).collect();
        assert_eq!(placed, vec![1, 2, 3, 1, 2, 3]);
        assert!(matches!(
            ledger.place(7, 1, "u", 10, 4, 100),
            Err(LedgerError::Placement {
                error: PlacementError::NoGpuHasRoom {
                    whole_gpus: 1,
                    shareable_gpus: 3,
                    ..
                },
                ..
            })
        ));
        // Once the whole holder ends, GPU 0 is the emptiest.
        let released = ok(ledger.release(500)).value;
        assert_eq!(
            released.iter().map(Record::job).collect::<Vec<_>>(),
            vec![500]
        );
        assert_eq!(place(&ledger, 7, 10), 0);
    }

    #[test]
    fn a_whole_holder_on_shared_gpus_is_reported_as_overlap() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        assert_eq!(place(&ledger, 1, 30), 0);
        assert_eq!(place(&ledger, 2, 30), 1);
        let overlap = ok(ledger.record_whole(9, &[1, 2])).value;
        assert_eq!(
            overlap.iter().map(|s| (s.job, s.gpu)).collect::<Vec<_>>(),
            vec![(2, 1)]
        );
        let gpus = ok(ledger.snapshot()).gpus(4, 100);
        let flags: Vec<(u32, bool, Vec<u32>)> = gpus
            .iter()
            .map(|g| (g.index, g.overlap, g.whole_jobs.clone()))
            .collect();
        assert_eq!(
            flags,
            vec![
                (0, false, vec![]),
                (1, true, vec![9]),
                (2, false, vec![9]),
                (3, false, vec![])
            ]
        );
        assert_eq!((gpus[1].used_units, gpus[1].free_units), (30, 70));
    }

    #[test]
    fn record_whole_is_idempotent_and_needs_gpus() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        ok(ledger.record_whole(7, &[2, 2, 1]));
        let first = read(&ledger.state_path());
        ok(ledger.record_whole(7, &[1, 2]));
        assert_eq!(read(&ledger.state_path()), first);
        let holder = ok(ledger.snapshot()).state.whole_holder(7).cloned();
        assert_eq!(holder.map(|w| w.gpus), Some(vec![1, 2]));
        let error = ledger.record_whole(8, &[]).err();
        assert!(
            matches!(error, Some(LedgerError::NoWholeGpus { job: 8 })),
            "{error:?}"
        );
    }

    #[test]
    fn release_removes_the_job_and_a_second_release_is_a_no_op() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let empty = read(&ledger.state_path());
        place(&ledger, 1, 40);
        place(&ledger, 2, 40);
        let released = ok(ledger.release(1)).value;
        assert!(matches!(
            released.as_slice(),
            [Record::Share(ShareRecord {
                job: 1,
                units: 40,
                ..
            })]
        ));
        assert!(ok(ledger.release(1)).value.is_empty());
        assert!(ok(ledger.release(77)).value.is_empty());
        assert_eq!(jobs(&ok(ledger.snapshot()).state), vec![2]);
        // A job with both kinds loses both.
        ok(ledger.record_whole(2, &[3]));
        assert_eq!(ok(ledger.release(2)).value.len(), 2);
        assert!(ok(ledger.snapshot()).state.is_empty());
        assert_eq!(read(&ledger.state_path()), empty);
    }

    #[test]
    fn reconcile_drops_the_records_of_jobs_no_longer_running() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        for job in 1..=4 {
            place(&ledger, job, 20);
        }
        ok(ledger.record_whole(10, &[3]));
        ok(ledger.record_whole(11, &[2]));
        let running = [2, 4, 11];
        let dropped = ok(ledger.reconcile(|job| running.contains(&job))).value;
        let mut dropped_jobs: Vec<u32> = dropped.iter().map(Record::job).collect();
        dropped_jobs.sort_unstable();
        assert_eq!(dropped_jobs, vec![1, 3, 10]);
        let state = ok(ledger.snapshot()).state;
        assert_eq!(jobs(&state), vec![2, 4]);
        assert_eq!(
            state.whole_holders().map(|w| w.job).collect::<Vec<_>>(),
            vec![11]
        );
        assert!(ok(ledger.reconcile(|job| running.contains(&job)))
            .value
            .is_empty());
        let lines: Vec<String> = dropped.iter().map(Record::to_string).collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("whole job=10 gpus=[3] since=")),
            "{lines:?}"
        );
    }

    #[test]
    fn a_deferred_release_is_made_by_the_next_transaction_whoever_runs_it() {
        let dir = TempDir::new();
        let ledger = dir.ledger();
        place(&ledger, 7, 60);
        let seen = ok(ledger.snapshot()).state;
        let marker = ok(ledger.defer_release(7, Some(&seen)));
        assert!(marker.ends_with("release.7"));
        // Not released yet: the lock-free view still holds it.
        assert!(ok(ledger.snapshot()).state.share(7).is_some());
        // Another job's placement releases it first: on one GPU, job 8's
        // 50 units fit only beside no share of 60.
        let out = ok(ledger.place(8, 1008, "user8", 50, 1, 100));
        assert_eq!(out.released.len(), 1);
        assert!(
            out.remarks()
                .iter()
                .any(|r| r.contains("released job 7's record")),
            "{:?}",
            out.remarks()
        );
        assert_eq!(out.value.share.gpu, 0);
        assert!(ok(ledger.snapshot()).state.share(7).is_none());
        assert!(
            !marker.exists(),
            "the marker goes once the state is written"
        );
        assert_eq!(ok(ledger.finish_deferred()), Vec::new());
    }

    #[test]
    fn a_later_record_of_the_same_job_is_never_released_by_an_old_marker() {
        let dir = TempDir::new();
        let ledger = dir.ledger();
        place(&ledger, 7, 10);
        let mut seen = ok(ledger.snapshot()).state;
        // The epilog saw a share made at another time than the one there now.
        if let Some(share) = seen.shares.get_mut(&7) {
            share.since = share.since.saturating_sub(100);
        }
        ok(ledger.defer_release(7, Some(&seen)));
        assert_eq!(ok(ledger.finish_deferred()), Vec::new());
        assert!(ok(ledger.snapshot()).state.share(7).is_some());
        // One that saw nothing releases every record of the job.
        ok(ledger.defer_release(7, None));
        let released = ok(ledger.finish_deferred());
        assert_eq!(
            released.iter().map(Record::job).collect::<Vec<_>>(),
            vec![7]
        );
    }

    #[test]
    fn a_refused_placement_still_writes_the_releases_it_made() {
        let dir = TempDir::new();
        let ledger = dir.ledger();
        place(&ledger, 7, 60);
        let seen = ok(ledger.snapshot()).state;
        let marker = ok(ledger.defer_release(7, Some(&seen)));
        // 120 units fit on no GPU of 100: refused, yet job 7 is released.
        assert!(ledger.place(8, 1008, "user8", 120, 1, 100).is_err());
        assert!(ok(ledger.snapshot()).state.share(7).is_none());
        assert!(!marker.exists());
    }
}
