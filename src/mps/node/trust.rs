//! The trust rules: what a job holds on this node, read only from what
//! slurmd sets itself (see "What a job holds, and who says so" in the
//! node's docs), and what Slurm's books say of a share's size and GPU.

use crate::mps::config::{GpuMpsConfig, Placement};
use crate::mps::private::{self, PrivateRequest};
use crate::shared::booking::MpsBooking;
use crate::shared::spank_env;

/// What the node knows about a job from its Prolog/Epilog environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    /// `SLURM_JOB_ID`: the job's own id. For an array task it is no
    /// name to give `scontrol` (the last-started task has the array's id,
    /// which names every task), and slurmd sets no `SLURM_ARRAY_*` for a
    /// Prolog or Epilog (22.05 to 26.05, `_build_env` in
    /// `prep_script_slurmd.c`): whatever acts on the job through `scontrol`
    /// asks slurmctld for the task this id is (`gpushare_node::requeue`).
    pub job: u32,
    pub uid: u32,
    pub user: String,
    /// Slurm's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: set for mps jobs only,
    /// from the credential. The one sign that the job holds a share.
    pub mps_percentage: Option<u32>,
    /// The units in the SPANK environment (from job_submit/gpu_qos, or
    /// whatever a client sent): a claim, checked against the percentage.
    pub units_claimed: Option<u32>,
    /// `SLURM_JOB_GPUS`: the GPU indices Slurm allocated.
    pub job_gpus: Vec<u32>,
    /// `SLURMD_NODENAME`: this node, as Slurm names it; a refusal names it,
    /// so a job spanning nodes says which one refused.
    pub node: String,
    /// `SLURM_JOB_SLUID` (26.05+): the name Slurm's cgroup/v2 gives the
    /// job's cgroup unless `CgroupJobIdPaths=yes`; kept only in the form
    /// Slurm prints it (`s` and 13 Crockford base32 digits).
    pub sluid: Option<String>,
    /// `--gpu-mps=private` and `--gpu-mps-threads` as the job gave them
    /// (the SPANK options, `mps::private`); `Err` for values that do not
    /// parse, said to the job by the prolog's refusal.
    pub private: Result<Option<PrivateRequest>, String>,
}

impl JobEnv {
    /// Reads the variables slurmd gives a Prolog/Epilog.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let num = |name: &str| -> Result<Option<u32>, String> {
            match get(name) {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?} is not a number")),
            }
        };
        let job = num("SLURM_JOB_ID")?
            .ok_or("SLURM_JOB_ID is not set: run me as slurmd's Prolog/Epilog")?;
        let uid = num("SLURM_JOB_UID")?.unwrap_or(0);
        let user = get("SLURM_JOB_USER").unwrap_or_else(|| uid.to_string());
        let job_gpus = match get("SLURM_JOB_GPUS") {
            Some(list) if !list.trim().is_empty() => list
                .split(',')
                .map(|g| {
                    g.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("SLURM_JOB_GPUS={list:?} is not a list of indices"))
                })
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        // A claim that is not a number is no claim: it cannot make the
        // prolog fail (and the node drain) for what a client sent.
        let units_claimed =
            get(&spank_env::in_prolog(spank_env::MPS_UNITS)).and_then(|v| v.trim().parse().ok());
        let node = get("SLURMD_NODENAME")
            .filter(|n| !n.trim().is_empty())
            .or_else(crate::shared::locations::short_hostname)
            .unwrap_or_else(|| "this node".to_owned());
        let sluid = get("SLURM_JOB_SLUID")
            .map(|v| v.trim().to_owned())
            .filter(|v| is_sluid(v));
        let private = private::request_in_prolog(&get);
        Ok(Self {
            private,
            sluid,
            job,
            uid,
            user,
            mps_percentage: num("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")?,
            units_claimed,
            job_gpus,
            node,
        })
    }

    /// Whether the job holds an MPS share on this node: Slurm gave it a
    /// thread percentage, which only an mps allocation gets.
    pub fn is_share(&self) -> bool {
        self.mps_percentage.is_some()
    }

    /// Whether the job asked for an MPS daemon of its own
    /// (`--gpu-mps=private`, read whole).
    pub fn asks_private(&self) -> bool {
        matches!(self.private, Ok(Some(_)))
    }
}

/// Whether `text` is a SLUID as Slurm prints one (`print_sluid`,
/// `src/common/sluid.c`): `s` then 13 digits of `0-9A-Z` less `I L O U`.
pub fn is_sluid(text: &str) -> bool {
    const DIGITS: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    text.len() == 14 && text.starts_with('s') && text[1..].chars().all(|c| DIGITS.contains(c))
}

/// Slurm's mps count of one GPU, which its percentage is relative to: the
/// `Count` of gres.conf's per-GPU mps lines where it has them, else the
/// node-wide count over the GPUs (see [`GpuMpsConfig::slurm_per_gpu_count`]).
pub fn slurm_per_gpu(cfg: &GpuMpsConfig, gpu_count: u32, booking: &MpsBooking) -> u64 {
    booking
        .per_gpu_count
        .unwrap_or_else(|| cfg.slurm_per_gpu_count(gpu_count))
}

/// Whether Slurm picks the GPU of this node's shares (else gpushare does).
pub fn slurm_places(cfg: &GpuMpsConfig, booking: &MpsBooking) -> bool {
    match cfg.placement {
        Placement::Slurm => true,
        Placement::Gpushare => false,
        Placement::Auto => booking.per_gpu,
    }
}

/// The units of a share job, from Slurm's percentage (units × 100 / the
/// per-GPU count, rounded down, at least 1) and the claimed units: the
/// claim where Slurm's rounding agrees with it, else what the
/// percentage alone says where it says it exactly. `Err`: why the size
/// cannot be known (the job is refused with this text).
pub fn share_units(per_gpu: u64, env: &JobEnv) -> Result<u32, String> {
    let Some(percent) = env.mps_percentage else {
        return Err("the job holds no MPS allocation".into());
    };
    // Slurm's figure: rounded down, but never below 1 %.
    let percent_of = |units: u32| (u64::from(units) * 100 / per_gpu.max(1)).max(1);
    if let Some(claimed) = env.units_claimed {
        if claimed > 0 && percent_of(claimed) == u64::from(percent) {
            return Ok(claimed);
        }
    }
    // Below 100 units per GPU every unit is at least 1 %, so the percentage
    // names exactly one unit count.
    let exact = per_gpu <= 100;
    let derived = u32::try_from((u64::from(percent) * per_gpu).div_ceil(100).max(1))
        .ok()
        .filter(|&u| percent_of(u) == u64::from(percent));
    match (exact, derived, env.units_claimed) {
        (true, Some(units), _) => Ok(units),
        (_, _, Some(claimed)) => Err(format!(
            "the size in the job's SPANK environment ({claimed} units) does not match what Slurm \
             allocated ({percent} % of a GPU of {per_gpu} mps units); the job is refused"
        )),
        _ => Err(format!(
            "Slurm gives the job {percent} % of a GPU of {per_gpu} mps units, which does not say \
             how many units it asked for, and its exact size did not reach the prolog: \
             slurm.conf needs PrologFlags=Alloc so that srun and salloc jobs carry the size \
             job_submit/gpu_qos recorded (see `gpu-mps config`)"
        )),
    }
}

/// The Slurm 22.05 Count check, one text for every place that reports it.
pub fn count_mismatch(cfg: &GpuMpsConfig, gpus: u32) -> Option<String> {
    let count = cfg.slurm_mps_count?;
    let wanted = cfg.slurm_count_for(gpus);
    (count != wanted).then(|| {
        format!(
            "gpu_mps.conf says SlurmMpsCount={count}, but {gpus} GPUs of {} units each need \
             Name=mps Count={wanted} in gres.conf on Slurm 22.05 (see gpu-mps config)",
            cfg.units_per_gpu
        )
    })
}

/// Where Slurm places shares, its per-GPU Count and gpushare's UnitsPerGPU
/// must agree, or the status view and memory limits are off.
pub fn units_mismatch(cfg: &GpuMpsConfig, booking: &MpsBooking) -> Option<String> {
    let count = booking.per_gpu_count?;
    (count != u64::from(cfg.units_per_gpu)).then(|| {
        format!(
            "gres.conf gives each GPU Count={count} mps, but gpu_mps.conf says UnitsPerGPU={}: \
             make them equal (see gpu-mps config)",
            cfg.units_per_gpu
        )
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// A share job as Slurm 22.05 sends it with Count=1600 on 4 GPUs
    /// (400 a GPU): the plugin's units and Slurm's rounded percentage.
    pub(crate) fn share_env(job: u32, units: u32) -> JobEnv {
        JobEnv {
            job,
            uid: 1000,
            user: "alice".into(),
            mps_percentage: Some(units / 4),
            units_claimed: Some(units),
            job_gpus: vec![0],
            node: "gpu01".to_owned(),
            sluid: None,
            private: Ok(None),
        }
    }

    #[test]
    fn only_a_sluid_as_slurm_prints_it_is_kept() {
        let env = |v: &str| {
            let v = v.to_owned();
            JobEnv::from_env(move |k| match k {
                "SLURM_JOB_ID" => Some("7".into()),
                "SLURM_JOB_SLUID" => Some(v.clone()),
                _ => None,
            })
            .map(|e| e.sluid)
        };
        assert_eq!(env("s0AB12CD34EF56"), Ok(Some("s0AB12CD34EF56".into())));
        for bad in [
            "",
            "s0AB12CD34EF5",
            "S0AB12CD34EF56",
            "s0AB12CD34EF5I",
            "s/../../job_1",
            "job_7",
        ] {
            assert_eq!(env(bad), Ok(None), "{bad:?}");
        }
    }

    #[test]
    fn prolog_environment_is_classified() {
        let e = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_UID", "1000"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_GPUS", "1,3"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (e.job, e.job_gpus.clone(), e.is_share()),
            (7, vec![1, 3], false)
        );
        let e = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "8"),
            ("SPANK_GPUSHARE_MPS_UNITS", "50"),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "12"),
            ("SLURM_JOB_GPUS", "0"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(e.is_share());
        assert_eq!(e.units_claimed, Some(50));
        // The claim alone makes no share, and a junk claim fails nothing.
        let forged = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "9"),
            ("SPANK_GPUSHARE_MPS_UNITS", "7"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!forged.is_share());
        let junk = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "9"),
            ("SPANK_GPUSHARE_MPS_UNITS", "x"),
        ]));
        assert_eq!(junk.map(|e| e.units_claimed), Ok(None));
        assert!(JobEnv::from_env(env_of(&[])).is_err());
        assert!(JobEnv::from_env(env_of(&[("SLURM_JOB_ID", "x")])).is_err());
    }

    #[test]
    fn units_are_the_claim_only_where_slurm_agrees() {
        let cfg22 = GpuMpsConfig {
            slurm_mps_count: Some(1600),
            ..GpuMpsConfig::default()
        };
        let env = |pct, claim| JobEnv {
            mps_percentage: Some(pct),
            units_claimed: claim,
            ..share_env(1, 0)
        };
        // 22.05, 400 units a GPU: 50 units are 12 %, and so are 48..=51;
        // 1 unit is 1 % (Slurm never says less), and so are 2..=7.
        assert_eq!(
            share_units(cfg22.slurm_per_gpu_count(4), &env(12, Some(50))),
            Ok(50)
        );
        assert_eq!(
            share_units(cfg22.slurm_per_gpu_count(4), &env(1, Some(1))),
            Ok(1)
        );
        assert!(share_units(cfg22.slurm_per_gpu_count(4), &env(1, Some(8))).is_err());
        assert_eq!(
            share_units(cfg22.slurm_per_gpu_count(4), &env(12, Some(51))),
            Ok(51)
        );
        let forged_big = share_units(cfg22.slurm_per_gpu_count(4), &env(12, Some(100)));
        assert!(
            forged_big
                .as_ref()
                .is_err_and(|e| e.contains("does not match")),
            "{forged_big:?}"
        );
        let forged_small = share_units(cfg22.slurm_per_gpu_count(4), &env(25, Some(1)));
        assert!(forged_small.is_err());
        let missing = share_units(cfg22.slurm_per_gpu_count(4), &env(12, None));
        assert!(
            missing
                .as_ref()
                .is_err_and(|e| e.contains("PrologFlags=Alloc")),
            "{missing:?}"
        );
        // 24.11 and later, 100 units a GPU: the percentage is the units.
        let cfg24 = GpuMpsConfig {
            slurm_mps_count: Some(400),
            ..GpuMpsConfig::default()
        };
        assert_eq!(
            share_units(cfg24.slurm_per_gpu_count(4), &env(25, None)),
            Ok(25)
        );
        assert_eq!(
            share_units(cfg24.slurm_per_gpu_count(4), &env(25, Some(25))),
            Ok(25)
        );
        assert_eq!(
            share_units(cfg24.slurm_per_gpu_count(4), &env(25, Some(90))),
            Ok(25)
        );
        // Without SlurmMpsCount the count gpu-mps config prescribes is assumed.
        assert_eq!(
            share_units(
                GpuMpsConfig::default().slurm_per_gpu_count(4),
                &env(12, Some(50))
            ),
            Ok(50)
        );
    }
}
