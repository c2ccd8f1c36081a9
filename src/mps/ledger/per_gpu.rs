//! The state GPU by GPU: the loads a share is placed by, the view
//! `gpu-mps status` shows, and the state rebuilt from such a view (the
//! published status copy).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::records::{index, unix_now, LedgerState, Lost, ShareRecord, WholeRecord};
use crate::mps::placement::{GpuLoad, MAX_GPUS_PER_NODE};

impl LedgerState {
    /// The load of GPUs `0..gpu_count` (at most [`MAX_GPUS_PER_NODE`]) for
    /// [`placement::choose_gpu`](crate::mps::placement::choose_gpu). Records
    /// on GPUs beyond the count (the configuration shrank) are ignored: no
    /// share can be placed there anyway.
    pub fn gpu_loads(&self, gpu_count: u32) -> Vec<GpuLoad> {
        let mut loads = vec![GpuLoad::default(); index(gpu_count.min(MAX_GPUS_PER_NODE))];
        for share in self.shares.values() {
            if let Some(load) = loads.get_mut(index(share.gpu)) {
                load.used_units = load.used_units.saturating_add(share.units);
                load.share_jobs = load.share_jobs.saturating_add(1);
                load.clients = load.clients.saturating_add(share.client_count());
            }
        }
        for gpu in self.whole.values().flat_map(|whole| &whole.gpus) {
            if let Some(load) = loads.get_mut(index(*gpu)) {
                load.held_whole = true;
            }
        }
        loads
    }

    /// [`Self::gpu_loads`] as seen by a share of user `uid`: GPUs with
    /// another user's shares are marked (their MPS server is not `uid`'s).
    pub fn gpu_loads_for(&self, gpu_count: u32, uid: u32) -> Vec<GpuLoad> {
        let mut loads = self.gpu_loads(gpu_count);
        for share in self.shares.values().filter(|s| s.uid != uid) {
            if let Some(load) = loads.get_mut(index(share.gpu)) {
                load.other_user = true;
            }
        }
        loads
    }

    /// [`Self::gpu_loads_for`] as a share of `uid` is placed by: the GPUs
    /// `single_user` marked as serving one user at a time, those `failed`
    /// set aside ([`crate::mps::health`]).
    pub fn placing_loads(
        &self,
        gpu_count: u32,
        uid: u32,
        single_user: &[u32],
        failed: &[u32],
    ) -> Vec<GpuLoad> {
        let mut loads = self.gpu_loads_for(gpu_count, uid);
        for &gpu in single_user {
            if let Some(load) = loads.get_mut(index(gpu)) {
                load.single_user_server = true;
            }
        }
        for &gpu in failed {
            if let Some(load) = loads.get_mut(index(gpu)) {
                load.failed = true;
            }
        }
        loads
    }

    /// The users with shares on `gpu`, other than `uid`, by name.
    pub fn other_users_on(&self, gpu: u32, uid: u32) -> BTreeSet<String> {
        self.shares
            .values()
            .filter(|s| s.gpu == gpu && s.uid != uid)
            .map(|s| s.user.clone())
            .collect()
    }

    /// One entry per GPU for display: GPUs `0..gpu_count`, plus any GPU a
    /// record names beyond that (marked not configured), in index order.
    pub fn per_gpu(&self, gpu_count: u32, units_per_gpu: u32) -> Vec<GpuView> {
        let mut views: BTreeMap<u32, GpuView> = BTreeMap::new();
        // Capped so a bad count cannot build a huge table; GPUs that records
        // name are added below whatever the cap.
        for gpu in 0..gpu_count.min(MAX_GPUS_PER_NODE) {
            views.insert(gpu, GpuView::empty(gpu, true));
        }
        for share in self.shares.values() {
            let view = views
                .entry(share.gpu)
                .or_insert_with(|| GpuView::empty(share.gpu, false));
            view.used_units = view.used_units.saturating_add(share.units);
            view.shares.push(share.clone());
        }
        for whole in self.whole.values() {
            for gpu in &whole.gpus {
                views
                    .entry(*gpu)
                    .or_insert_with(|| GpuView::empty(*gpu, false))
                    .whole_jobs
                    .push(whole.job);
            }
        }
        views
            .into_values()
            .map(|mut view| {
                view.free_units = units_per_gpu.saturating_sub(view.used_units);
                view.over_capacity = view.used_units > units_per_gpu;
                view.overlap = !view.shares.is_empty() && !view.whole_jobs.is_empty();
                view
            })
            .collect()
    }

    /// The records a per-GPU view shows (how a state is rebuilt from the
    /// published status copy). Whole-GPU holders get the GPUs they are
    /// listed on, and the time of the rebuild.
    pub fn from_views(gpus: &[GpuView], lost: Option<Lost>) -> Self {
        let mut state = Self {
            lost,
            ..Self::default()
        };
        for view in gpus {
            for share in &view.shares {
                state.insert_share(share.clone());
            }
            for job in &view.whole_jobs {
                let record = state.whole.entry(*job).or_insert_with(|| WholeRecord {
                    job: *job,
                    gpus: Vec::new(),
                    since: unix_now(),
                });
                record.gpus.push(view.index);
            }
        }
        for record in state.whole.values_mut() {
            record.gpus.sort_unstable();
            record.gpus.dedup();
        }
        state
    }
}

/// One GPU as `gpu-mps status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuView {
    #[serde(rename = "gpu")]
    pub index: u32,
    pub used_units: u32,
    /// `UnitsPerGPU` minus used, never below 0.
    pub free_units: u32,
    /// Shares on this GPU, in job order.
    pub shares: Vec<ShareRecord>,
    /// Jobs holding this GPU whole.
    pub whole_jobs: Vec<u32>,
    /// Shares and a whole holder at once: Slurm 22.05's books put every
    /// share on GPU 0, so it can hand this GPU whole to a job anyway.
    pub overlap: bool,
    /// More units than `UnitsPerGPU` (it was lowered while jobs ran).
    pub over_capacity: bool,
    /// Within the configured GPU count; `false` for a GPU only a record
    /// names (the configuration shrank, or the state is from another setup).
    pub configured: bool,
}

impl GpuView {
    fn empty(index: u32, configured: bool) -> Self {
        Self {
            index,
            used_units: 0,
            free_units: 0,
            shares: Vec::new(),
            whole_jobs: Vec::new(),
            overlap: false,
            over_capacity: false,
            configured,
        }
    }
}

/// The state as a reader saw it, for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub state: LedgerState,
    /// Unreadable state files moved aside earlier, waiting for an admin.
    pub set_aside_files: Vec<PathBuf>,
}

impl Snapshot {
    /// The per-GPU view (see [`LedgerState::per_gpu`]).
    pub fn gpus(&self, gpu_count: u32, units_per_gpu: u32) -> Vec<GpuView> {
        self.state.per_gpu(gpu_count, units_per_gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_gpu_view_shows_unconfigured_and_over_capacity_gpus() {
        let mut state = LedgerState::new();
        for (job, gpu, units) in [(1, 0, 60), (2, 0, 60), (3, 6, 10)] {
            state.insert_share(ShareRecord {
                job,
                uid: 1,
                user: "u".into(),
                gpu,
                units,
                since: 0,
                placed_by_slurm: false,
                memory_mib: None,
                clients: None,
                sluid: None,
            });
        }
        state.insert_whole(WholeRecord {
            job: 9,
            gpus: vec![1, 5],
            since: 0,
        });
        let view = Snapshot {
            state,
            set_aside_files: Vec::new(),
        }
        .gpus(2, 100);
        let summary: Vec<(u32, u32, u32, bool, bool)> = view
            .iter()
            .map(|g| {
                (
                    g.index,
                    g.used_units,
                    g.free_units,
                    g.over_capacity,
                    g.configured,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (0, 120, 0, true, true),
                (1, 0, 100, false, true),
                (5, 0, 100, false, false),
                (6, 10, 90, false, false),
            ]
        );
        assert_eq!(
            view[0].shares.iter().map(|s| s.job).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn records_beyond_the_gpu_count_do_not_disturb_placement() {
        let mut state = LedgerState::new();
        state.insert_share(ShareRecord {
            job: 1,
            uid: 1,
            user: "u".into(),
            gpu: 7,
            units: 90,
            since: 0,
            placed_by_slurm: true,
            memory_mib: None,
            clients: None,
            sluid: None,
        });
        state.insert_whole(WholeRecord {
            job: 2,
            gpus: vec![4_000_000_000],
            since: 0,
        });
        assert_eq!(state.gpu_loads(2), vec![GpuLoad::default(); 2]);
        assert_eq!(state.gpu_loads(u32::MAX).len(), MAX_GPUS_PER_NODE as usize);
        assert_eq!(state.per_gpu(1, 100).len(), 3);
    }
}
