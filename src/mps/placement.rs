//! Which GPU of a node an MPS share goes to: the pure choice, with no I/O.
//!
//! The ledger ([`super::ledger`]) calls [`choose_gpu`] under its lock when the
//! prolog or the SPANK plugin in slurmstepd places a job, so concurrent job
//! starts see each other's choices. The `gpu-mps` admin command uses the same
//! errors to explain a refusal. Slurm 22.05 admits MPS shares by the node's
//! total, so a job can arrive when no single GPU has room for it; the policy
//! is to refuse that job with [`PlacementError::NoGpuHasRoom`], never to
//! over-fill a GPU.

use std::fmt;

/// More GPUs than any real node has: a count above this is a configuration
/// mistake, and refusing it keeps a bad count from sizing huge tables.
pub const MAX_GPUS_PER_NODE: u32 = 1024;

/// What one GPU of the node carries now, as the node's ledger knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuLoad {
    /// MPS units held by share jobs on this GPU.
    pub used_units: u32,
    /// How many share jobs hold those units.
    pub share_jobs: u32,
    /// MPS clients of those jobs (tasks of their largest steps).
    pub clients: u32,
    /// A running job holds this GPU whole (gpu GRES): shares never go here,
    /// whatever its units say.
    pub held_whole: bool,
    /// A share of another user than the one being placed is on this GPU
    /// (set by [`super::ledger::LedgerState::gpu_loads_for`] only).
    pub other_user: bool,
    /// The GPU's MPS daemon serves one user at a time, whatever the rule
    /// says (started before `MultiUser=yes`, until its shares end).
    pub single_user_server: bool,
    /// Set aside from sharing (lost, or marked failed: see
    /// [`super::health`]): no new share goes here.
    pub failed: bool,
}

impl GpuLoad {
    /// Units still free. Saturates because a GPU can be over its capacity
    /// when `UnitsPerGPU` was lowered while jobs held shares.
    pub fn free_units(&self, units_per_gpu: u32) -> u32 {
        units_per_gpu.saturating_sub(self.used_units)
    }
}

/// Why a share could not be placed. `Display` is written for the user whose
/// job is refused and for the admin reading the slurmd log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementError {
    /// The job asked for a share of nothing.
    ZeroUnits,
    /// A share never spans GPUs, so it cannot be larger than one GPU.
    MoreThanOneGpu { units: u32, units_per_gpu: u32 },
    /// The node has no GPU to put a share on.
    NoGpus,
    /// The configured GPU count is beyond [`MAX_GPUS_PER_NODE`].
    TooManyGpus { gpu_count: u32 },
    /// Every GPU is either held whole or has fewer free units than asked.
    NoGpuHasRoom {
        units: u32,
        units_per_gpu: u32,
        /// The most free units on any one GPU not held whole (0 if none).
        most_free_on_one_gpu: u32,
        /// Free units summed over the GPUs not held whole.
        free_in_total: u64,
        /// GPUs not held whole.
        shareable_gpus: usize,
        /// GPUs held whole by gpu jobs.
        whole_gpus: usize,
    },
    /// The node's ledger was lost and could not be rebuilt: the load of its
    /// GPUs is unknown, so no share is placed until an admin rebuilds it.
    LoadsUnknown { reason: String },
    /// Slurm chose a GPU the node's GPUDevices do not list.
    SlurmGpuUnknown { gpu: u32, gpu_count: u32 },
    /// Every GPU with room already serves as many MPS clients as one
    /// server takes.
    TooManyClients { max_clients: u32 },
    /// Only GPUs whose MPS server serves another user have room, and the
    /// node refuses to make the job wait for that user (`OtherUsers=refuse`).
    OnlyBesideOtherUsers { units: u32 },
    /// Only GPUs set aside as failed would have room; or Slurm chose one.
    GpuFailed { gpus: Vec<u32>, reasons: String },
}

impl PlacementError {
    /// The refusal's reason as the metrics count it
    /// (`gpushare_refusals_total{reason}`).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ZeroUnits | Self::MoreThanOneGpu { .. } => "size",
            Self::NoGpus | Self::TooManyGpus { .. } => "node_config",
            Self::NoGpuHasRoom { .. } => "no_room",
            Self::LoadsUnknown { .. } => "ledger_lost",
            Self::SlurmGpuUnknown { .. } => "slurm_gpu",
            Self::TooManyClients { .. } => "client_limit",
            Self::OnlyBesideOtherUsers { .. } => "other_users",
            Self::GpuFailed { .. } => "gpu_failed",
        }
    }
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GpuFailed { gpus, reasons } => write!(
                f,
                "the only GPUs of this node with room for the share are set aside as failed \
                 (GPU {}: {reasons}); the share is refused here, and a batch job is requeued \
                 to run elsewhere",
                gpus.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::TooManyClients { max_clients } => write!(
                f,
                "every GPU with room for the share already has {max_clients} MPS clients, the \
                 most one MPS server takes (MaxClientsPerGPU in gpu_mps.conf); the job is \
                 refused: resubmit it later"
            ),
            Self::OnlyBesideOtherUsers { units } => write!(
                f,
                "the only GPUs with room for {units} MPS units run another user's MPS server; \
                 MPS serves one user per GPU at a time, so this job's CUDA work could not start \
                 until that user's jobs there end, and this node refuses such a share rather \
                 than leave it waiting (OtherUsers=refuse in gpu_mps.conf, the default): \
                 resubmit it later"
            ),
            Self::SlurmGpuUnknown { gpu, gpu_count } => write!(
                f,
                "Slurm chose GPU {gpu} for the share, but gpu_mps.conf lists only {gpu_count} \
                 GPU devices (GPUDevices= must list the node's GPUs in gres.conf order)"
            ),
            Self::LoadsUnknown { reason } => write!(
                f,
                "the GPU loads of this node are unknown ({reason}); no share is placed \
                 here until an admin runs `gpu-mps gc` on the node"
            ),
            Self::ZeroUnits => write!(
                f,
                "the job asks for an MPS share of 0 units; a share needs at least 1 unit"
            ),
            Self::MoreThanOneGpu {
                units,
                units_per_gpu,
            } => write!(
                f,
                "the job asks for {units} MPS units but one GPU holds only {units_per_gpu}: \
                 a share never spans GPUs, so ask for at most {units_per_gpu} units, \
                 or for whole GPUs"
            ),
            Self::NoGpus => write!(
                f,
                "this node has no GPUs to place an MPS share on (check GPUDevices in gpu_mps.conf)"
            ),
            Self::TooManyGpus { gpu_count } => write!(
                f,
                "this node is configured with {gpu_count} GPUs, more than gpushare supports \
                 ({MAX_GPUS_PER_NODE}); check GPUDevices in gpu_mps.conf"
            ),
            Self::NoGpuHasRoom {
                units,
                units_per_gpu,
                most_free_on_one_gpu,
                free_in_total,
                shareable_gpus,
                whole_gpus,
            } => {
                write!(
                    f,
                    "no single GPU on this node has room for {units} MPS units: the most free \
                     on one GPU is {most_free_on_one_gpu} of {units_per_gpu} \
                     ({free_in_total} free in total on {shareable_gpus} shareable GPU(s)"
                )?;
                if *whole_gpus > 0 {
                    write!(f, "; {whole_gpus} GPU(s) held whole by gpu jobs")?;
                }
                write!(
                    f,
                    "). Slurm admits shares by the node's total, but a share must fit on one \
                     GPU and gpushare never over-fills one, so the job is refused; \
                     resubmit it, or ask for fewer units"
                )
            }
        }
    }
}

impl std::error::Error for PlacementError {}

/// The GPU (its position in `gpus`, which is its index on the node) for a
/// job asking `units`: the one with the most free units, ties broken by fewer
/// share jobs, then by the lowest index. A GPU held whole or without room for
/// the whole share is never chosen.
pub fn choose_gpu(
    gpus: &[GpuLoad],
    units_per_gpu: u32,
    units: u32,
) -> Result<usize, PlacementError> {
    if units == 0 {
        return Err(PlacementError::ZeroUnits);
    }
    if units > units_per_gpu {
        return Err(PlacementError::MoreThanOneGpu {
            units,
            units_per_gpu,
        });
    }
    if gpus.is_empty() {
        return Err(PlacementError::NoGpus);
    }
    let best = gpus
        .iter()
        .enumerate()
        .filter(|(_, gpu)| !gpu.held_whole && !gpu.failed && gpu.free_units(units_per_gpu) >= units)
        // `max_by_key` keeps the last of equal keys, so the index goes in
        // reversed to make the lowest index win a full tie.
        .max_by_key(|(index, gpu)| {
            (
                gpu.free_units(units_per_gpu),
                std::cmp::Reverse(gpu.share_jobs),
                std::cmp::Reverse(*index),
            )
        });
    match best {
        Some((index, _)) => Ok(index),
        None => {
            // Room only where a GPU failed: that, not the load, refuses it.
            let failed_with_room: Vec<u32> = gpus
                .iter()
                .enumerate()
                .filter(|(_, g)| g.failed && !g.held_whole && g.free_units(units_per_gpu) >= units)
                .filter_map(|(i, _)| u32::try_from(i).ok())
                .collect();
            if !failed_with_room.is_empty() {
                return Err(PlacementError::GpuFailed {
                    gpus: failed_with_room,
                    reasons: "see `gpu-mps status` on the node".to_owned(),
                });
            }
            let shareable = gpus.iter().filter(|gpu| !gpu.held_whole && !gpu.failed);
            Err(PlacementError::NoGpuHasRoom {
                units,
                units_per_gpu,
                most_free_on_one_gpu: shareable
                    .clone()
                    .map(|gpu| gpu.free_units(units_per_gpu))
                    .max()
                    .unwrap_or(0),
                free_in_total: shareable
                    .clone()
                    .map(|gpu| u64::from(gpu.free_units(units_per_gpu)))
                    .sum(),
                shareable_gpus: shareable.count(),
                whole_gpus: gpus.iter().filter(|gpu| gpu.held_whole).count(),
            })
        }
    }
}

/// How a share meets MPS's servers: one user per server unless the
/// daemons run multi-user servers, and a bound on clients per server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerRule {
    /// Daemons run one multi-user server per GPU (`MultiUser=yes`): users
    /// never wait for each other, so they are not kept apart.
    pub multi_user: bool,
    /// Refuse a share that fits only beside another user's server
    /// (`OtherUsers=refuse`) instead of placing it there to wait.
    pub refuse_other_users: bool,
    /// MPS clients one GPU takes (`MaxClientsPerGPU`).
    pub max_clients: u32,
}

impl ServerRule {
    /// No rule at all: the plain least-loaded choice.
    pub const NONE: ServerRule = ServerRule {
        multi_user: true,
        refuse_other_users: false,
        max_clients: u32::MAX,
    };
}

/// [`choose_gpu`] under `rule`: among the GPUs with room and fewer than
/// `max_clients` share jobs, those without another user's shares first;
/// where only such GPUs have room, the least-loaded of them (the job's
/// clients wait there for the other user's) or, with `refuse_other_users`,
/// an error.
pub fn choose_gpu_for_user(
    gpus: &[GpuLoad],
    units_per_gpu: u32,
    units: u32,
    rule: ServerRule,
) -> Result<usize, PlacementError> {
    choose_gpu(gpus, units_per_gpu, units)?;
    // The same choice over a subset: GPUs outside it count as held whole.
    let among = |keep: &dyn Fn(&GpuLoad) -> bool| {
        let masked: Vec<GpuLoad> = gpus
            .iter()
            .map(|g| GpuLoad {
                held_whole: g.held_whole || !keep(g),
                ..*g
            })
            .collect();
        choose_gpu(&masked, units_per_gpu, units).ok()
    };
    let open = |g: &GpuLoad| g.clients < rule.max_clients;
    if among(&open).is_none() {
        return Err(PlacementError::TooManyClients {
            max_clients: rule.max_clients,
        });
    }
    if rule.multi_user {
        // A daemon still in one-user mode takes no second user while any
        // other GPU can; where none can, the one-user rule below decides.
        let serves = |g: &GpuLoad| open(g) && !(g.other_user && g.single_user_server);
        if let Some(gpu) = among(&serves) {
            return Ok(gpu);
        }
    }
    if let Some(gpu) = among(&|g: &GpuLoad| open(g) && !g.other_user) {
        return Ok(gpu);
    }
    if rule.refuse_other_users {
        return Err(PlacementError::OnlyBesideOtherUsers { units });
    }
    among(&open).ok_or(PlacementError::NoGpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn empty_gpus(count: usize) -> Vec<GpuLoad> {
        vec![GpuLoad::default(); count]
    }

    /// A shared GPU carrying `used_units` of `share_jobs` shares.
    fn load(used_units: u32, share_jobs: u32) -> GpuLoad {
        GpuLoad {
            used_units,
            share_jobs,
            ..GpuLoad::default()
        }
    }

    /// Places `jobs` shares of `units` one by one, as the ledger does, and
    /// returns the GPU each went to (or the first refusal).
    fn place_all(
        gpus: &mut [GpuLoad],
        units_per_gpu: u32,
        units: u32,
        jobs: usize,
    ) -> Result<Vec<usize>, PlacementError> {
        let mut chosen = Vec::new();
        for _ in 0..jobs {
            let index = choose_gpu(gpus, units_per_gpu, units)?;
            let gpu = &mut gpus[index];
            gpu.used_units += units;
            gpu.share_jobs += 1;
            chosen.push(index);
        }
        Ok(chosen)
    }

    fn used(gpus: &[GpuLoad]) -> Vec<u32> {
        gpus.iter().map(|gpu| gpu.used_units).collect()
    }

    #[test]
    fn thirty_two_jobs_of_ten_fill_four_gpus_evenly() {
        let mut gpus = empty_gpus(4);
        let placed = place_all(&mut gpus, 100, 10, 32).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(placed.len(), 32);
        assert_eq!(used(&gpus), vec![80, 80, 80, 80]);
        assert!(gpus.iter().all(|gpu| gpu.share_jobs == 8));
    }

    #[test]
    fn four_halves_go_one_per_gpu_and_eight_two_per_gpu() {
        let mut gpus = empty_gpus(4);
        let first = place_all(&mut gpus, 100, 50, 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first, vec![0, 1, 2, 3]);
        let second = place_all(&mut gpus, 100, 50, 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(second, vec![0, 1, 2, 3]);
        assert_eq!(used(&gpus), vec![100, 100, 100, 100]);
        assert!(matches!(
            choose_gpu(&gpus, 100, 50),
            Err(PlacementError::NoGpuHasRoom { .. })
        ));
    }

    #[test]
    fn ties_go_to_fewer_jobs_then_lowest_index() {
        let gpus = [load(40, 4), load(40, 1), load(40, 1), load(60, 1)];
        assert_eq!(choose_gpu(&gpus, 100, 10), Ok(1));
    }

    fn rule(multi_user: bool, refuse: bool, max_clients: u32) -> ServerRule {
        ServerRule {
            multi_user,
            refuse_other_users: refuse,
            max_clients,
        }
    }

    /// GPU 0 empty-ish but another user's; GPU 1 fuller, the job's user's.
    fn one_foreign_one_own() -> [GpuLoad; 2] {
        [
            GpuLoad {
                used_units: 10,
                share_jobs: 1,
                other_user: true,
                ..GpuLoad::default()
            },
            GpuLoad {
                used_units: 50,
                share_jobs: 1,
                ..GpuLoad::default()
            },
        ]
    }

    #[test]
    fn a_daemon_still_serving_one_user_gets_no_second_one_under_multi_user() {
        let mut gpus = one_foreign_one_own();
        let multi = rule(true, false, 48);
        assert_eq!(choose_gpu_for_user(&gpus, 100, 25, multi), Ok(0));
        gpus[0].single_user_server = true;
        assert_eq!(choose_gpu_for_user(&gpus, 100, 25, multi), Ok(1));
        // Where no other GPU has room, the one-user rule decides: wait
        // beside the other user, or be refused with OtherUsers=refuse.
        gpus[1].used_units = 90;
        assert_eq!(choose_gpu_for_user(&gpus, 100, 25, multi), Ok(0));
        assert_eq!(
            choose_gpu_for_user(&gpus, 100, 25, rule(true, true, 48)),
            Err(PlacementError::OnlyBesideOtherUsers { units: 25 })
        );
        // The same user's share is welcome on it.
        gpus[0].other_user = false;
        assert_eq!(choose_gpu_for_user(&gpus, 100, 25, multi), Ok(0));
    }

    #[test]
    fn a_gpu_of_the_same_user_beats_a_less_loaded_one_of_another_user() {
        let gpus = one_foreign_one_own();
        assert_eq!(choose_gpu(&gpus, 100, 25), Ok(0));
        assert_eq!(
            choose_gpu_for_user(&gpus, 100, 25, rule(false, false, 48)),
            Ok(1)
        );
        // With multi-user servers users are not kept apart.
        assert_eq!(
            choose_gpu_for_user(&gpus, 100, 25, rule(true, false, 48)),
            Ok(0)
        );
    }

    #[test]
    fn only_another_users_gpu_has_room_queue_or_refuse() {
        let gpus = one_foreign_one_own();
        // 60 units fit only on GPU 0, another user's.
        assert_eq!(
            choose_gpu_for_user(&gpus, 100, 60, rule(false, false, 48)),
            Ok(0)
        );
        assert_eq!(
            choose_gpu_for_user(&gpus, 100, 60, rule(false, true, 48)),
            Err(PlacementError::OnlyBesideOtherUsers { units: 60 })
        );
        // What fits nowhere is still NoGpuHasRoom.
        assert!(matches!(
            choose_gpu_for_user(&gpus, 100, 95, rule(false, true, 48)),
            Err(PlacementError::NoGpuHasRoom { .. })
        ));
    }

    #[test]
    fn a_gpu_at_its_client_limit_takes_no_more_shares() {
        let mut gpus = empty_gpus(2);
        let placed: Vec<usize> = (0..4)
            .map(|_| {
                let g = choose_gpu_for_user(&gpus, 100, 1, rule(true, false, 2))
                    .unwrap_or_else(|e| panic!("{e}"));
                gpus[g].used_units += 1;
                gpus[g].share_jobs += 1;
                gpus[g].clients += 1;
                g
            })
            .collect();
        assert_eq!(placed, vec![0, 1, 0, 1]);
        let e = choose_gpu_for_user(&gpus, 100, 1, rule(true, false, 2));
        assert_eq!(e, Err(PlacementError::TooManyClients { max_clients: 2 }));
        assert!(e
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default()
            .contains("MaxClientsPerGPU"));
    }

    #[test]
    fn most_free_units_beats_fewer_jobs() {
        let gpus = [load(50, 1), load(30, 3)];
        assert_eq!(choose_gpu(&gpus, 100, 10), Ok(1));
    }

    #[test]
    fn a_gpu_held_whole_is_never_chosen_even_when_emptiest() {
        let mut gpus = empty_gpus(4);
        gpus[0].held_whole = true;
        let placed = place_all(&mut gpus, 100, 50, 6).unwrap_or_else(|e| panic!("{e}"));
        assert!(!placed.contains(&0), "{placed:?}");
        assert_eq!(used(&gpus), vec![0, 100, 100, 100]);
        match choose_gpu(&gpus, 100, 50) {
            Err(PlacementError::NoGpuHasRoom {
                shareable_gpus: 3,
                whole_gpus: 1,
                most_free_on_one_gpu: 0,
                free_in_total: 0,
                ..
            }) => {}
            other => panic!("expected NoGpuHasRoom, got {other:?}"),
        }
    }

    #[test]
    fn every_gpu_held_whole_refuses_with_no_shareable_gpu() {
        let gpus = [GpuLoad {
            held_whole: true,
            ..GpuLoad::default()
        }; 2];
        assert_eq!(
            choose_gpu(&gpus, 100, 10),
            Err(PlacementError::NoGpuHasRoom {
                units: 10,
                units_per_gpu: 100,
                most_free_on_one_gpu: 0,
                free_in_total: 0,
                shareable_gpus: 0,
                whole_gpus: 2,
            })
        );
    }

    #[test]
    fn node_total_with_room_but_no_single_gpu_is_refused_with_the_numbers() {
        let gpus = [load(50, 1), load(60, 2)];
        let error = choose_gpu(&gpus, 100, 60);
        assert_eq!(
            error,
            Err(PlacementError::NoGpuHasRoom {
                units: 60,
                units_per_gpu: 100,
                most_free_on_one_gpu: 50,
                free_in_total: 90,
                shareable_gpus: 2,
                whole_gpus: 0,
            })
        );
        let text = error.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.starts_with("no single GPU on this node has room for 60 MPS units: the most free on one GPU is 50 of 100 (90 free in total on 2 shareable GPU(s))"), "{text}");
        assert!(text.contains("the job is refused"), "{text}");
    }

    #[test]
    fn over_capacity_gpu_counts_as_full() {
        let gpus = [load(150, 3), load(95, 1)];
        assert_eq!(choose_gpu(&gpus, 100, 5), Ok(1));
        assert!(matches!(
            choose_gpu(&gpus, 100, 6),
            Err(PlacementError::NoGpuHasRoom {
                most_free_on_one_gpu: 5,
                free_in_total: 5,
                ..
            })
        ));
    }

    #[test]
    fn bad_requests_are_typed_errors_with_clear_text() {
        let gpus = empty_gpus(2);
        assert_eq!(choose_gpu(&gpus, 100, 0), Err(PlacementError::ZeroUnits));
        assert_eq!(
            choose_gpu(&gpus, 100, 101),
            Err(PlacementError::MoreThanOneGpu {
                units: 101,
                units_per_gpu: 100
            })
        );
        assert_eq!(choose_gpu(&[], 100, 10), Err(PlacementError::NoGpus));
        assert_eq!(choose_gpu(&gpus, 100, 100), Ok(0));
        let text = PlacementError::MoreThanOneGpu {
            units: 101,
            units_per_gpu: 100,
        }
        .to_string();
        assert!(
            text.contains("101 MPS units")
                && text.contains("at most 100 units")
                && text.ends_with("or for whole GPUs")
                && !text.contains("--gres=gpu:"),
            "{text}"
        );
        assert!(PlacementError::TooManyGpus { gpu_count: 5000 }
            .to_string()
            .contains("5000 GPUs"));
    }

    fn any_gpu(units_per_gpu: u32) -> impl Strategy<Value = GpuLoad> {
        (
            0..=units_per_gpu + 20,
            0u32..10,
            proptest::bool::weighted(0.2),
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(used_units, share_jobs, held_whole, failed)| GpuLoad {
                used_units,
                share_jobs,
                held_whole,
                clients: share_jobs,
                other_user: false,
                single_user_server: false,
                failed,
            })
    }

    fn any_node() -> impl Strategy<Value = (u32, Vec<GpuLoad>)> {
        (1u32..=200).prop_flat_map(|units_per_gpu| {
            (
                Just(units_per_gpu),
                proptest::collection::vec(any_gpu(units_per_gpu), 1..12),
            )
        })
    }

    proptest! {
        #[test]
        fn the_chosen_gpu_has_room_is_shareable_and_is_the_best(
            (units_per_gpu, gpus) in any_node(),
            units in 1u32..=220,
        ) {
            match choose_gpu(&gpus, units_per_gpu, units) {
                Ok(index) => {
                    let gpu = gpus[index];
                    prop_assert!(!gpu.held_whole && !gpu.failed);
                    prop_assert!(gpu.used_units + units <= units_per_gpu);
                    for (other_index, other) in gpus.iter().enumerate() {
                        if other.held_whole || other.failed || other.free_units(units_per_gpu) < units {
                            continue;
                        }
                        let better = (other.free_units(units_per_gpu), std::cmp::Reverse(other.share_jobs), std::cmp::Reverse(other_index))
                            > (gpu.free_units(units_per_gpu), std::cmp::Reverse(gpu.share_jobs), std::cmp::Reverse(index));
                        prop_assert!(!better, "GPU {other_index} beats the chosen {index}");
                    }
                }
                Err(PlacementError::MoreThanOneGpu { .. }) => prop_assert!(units > units_per_gpu),
                Err(PlacementError::NoGpuHasRoom { most_free_on_one_gpu, .. }) => {
                    prop_assert!(units <= units_per_gpu);
                    prop_assert!(most_free_on_one_gpu < units);
                    prop_assert!(gpus.iter().all(|g| g.held_whole || g.free_units(units_per_gpu) < units));
                }
                Err(PlacementError::GpuFailed { gpus: failed, .. }) => {
                    // Room only on failed GPUs, and they are named.
                    prop_assert!(units <= units_per_gpu && !failed.is_empty());
                    prop_assert!(gpus.iter().all(|g| g.held_whole || g.failed || g.free_units(units_per_gpu) < units));
                    prop_assert!(failed.iter().all(|&i| gpus[i as usize].failed && gpus[i as usize].free_units(units_per_gpu) >= units));
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }

        #[test]
        fn equal_jobs_placed_one_by_one_stay_balanced_within_one_job(
            gpu_count in 1usize..9,
            whole in proptest::collection::vec(any::<bool>(), 9),
            units_per_gpu in 1u32..=200,
            units_seed in 1u32..=200,
            jobs in 0usize..120,
        ) {
            let units = 1 + units_seed % units_per_gpu;
            let mut gpus = empty_gpus(gpu_count);
            for (gpu, held) in gpus.iter_mut().zip(&whole) {
                gpu.held_whole = *held;
            }
            for _ in 0..jobs {
                let Ok(index) = choose_gpu(&gpus, units_per_gpu, units) else {
                    // Refused only when every shareable GPU is full for this size.
                    let per_gpu = units_per_gpu / units * units;
                    prop_assert!(gpus.iter().all(|g| g.held_whole || g.used_units == per_gpu));
                    break;
                };
                prop_assert!(!gpus[index].held_whole);
                gpus[index].used_units += units;
                gpus[index].share_jobs += 1;
                prop_assert!(gpus[index].used_units <= units_per_gpu);
                let shareable: Vec<u32> = gpus.iter().filter(|g| !g.held_whole).map(|g| g.used_units).collect();
                let most = shareable.iter().max().copied().unwrap_or(0);
                let least = shareable.iter().min().copied().unwrap_or(0);
                prop_assert!(most - least <= units, "unbalanced: {shareable:?}");
            }
            prop_assert!(gpus.iter().filter(|g| g.held_whole).all(|g| g.used_units == 0));
        }
    }
}
