//! The decision for one job: what it held and used, and the size it
//! should have asked for ([`decide`]), or why there is none
//! ([`NotAdvised`]).

use serde::Serialize;

use crate::qos::config::GpuQosConfig;
use crate::qos::gres::gpus_of_tres;
use crate::qos::slurm::used::{largest, UsedJob};
use crate::shared::usage_words::{self, GpuUsage};

/// How much more than it used a size covers: 25 %.
pub const HEADROOM_PERCENT: u64 = 25;

/// The fewest one-minute samples gpushare's figures of a job must come
/// from; Slurm's figures count as enough from [`MIN_SLURM_ELAPSED_S`] of
/// the job's time.
pub const MIN_SAMPLES: u64 = 2;

/// The shortest job whose Slurm figures are read (two minutes: two of
/// gpushare's samples).
pub const MIN_SLURM_ELAPSED_S: u64 = 120;

/// A share hit its memory limit when its peak reached this percentage
/// of the limit.
pub const LIMIT_HIT_PERCENT: u64 = 95;

/// `UnitsPerGPU` where no word of gpushare names it (gpu_mps.conf's
/// default).
pub const DEFAULT_UNITS_PER_GPU: u32 = 100;

/// What a job is told to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A share instead of the GPU it held whole.
    ShareInstead,
    /// A smaller share.
    Smaller,
    /// A larger share.
    Larger,
    /// A whole GPU instead of a share: the largest share is not larger.
    WholeInstead,
}

/// Where a job's figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// gpushare's words in the job's `AdminComment`.
    Gpushare,
    /// Slurm's `gres/gpumem` and `gres/gpuutil` of the job's steps.
    Slurm,
}

/// What a job held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// A share of `units` of a GPU's `units_per_gpu` (on each node).
    Share { units: u32, units_per_gpu: u32 },
    /// `gpus` GPUs whole (of `gpu_type` where accounting names one).
    Whole { gpus: u64, gpu_type: Option<String> },
}

/// What a job used: of its share, or of the GPU it held whole. Where the
/// job used several GPUs, the largest peak and SM use and the smallest
/// limit of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Used {
    pub source: Source,
    pub mem_peak_mib: Option<u64>,
    /// A share's memory limit; the memory of a GPU held whole.
    pub mem_limit_mib: Option<u64>,
    /// Mean SM use: of a share's part of the GPU, or of a whole GPU.
    pub sm_mean: Option<f64>,
    /// gpushare's one-minute samples (the fewest of its GPUs); `None`
    /// for Slurm's figures.
    pub samples: Option<u64>,
}

/// Why a job that ended with GPUs got no advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotAdvised {
    /// Its size fits what it used.
    Fits,
    /// It used more than half of the GPU it held whole.
    UsesItsGpu,
    /// Figures from fewer than [`MIN_SAMPLES`] samples (or a job shorter
    /// than [`MIN_SLURM_ELAPSED_S`] for Slurm's).
    TooFewSamples,
    /// Neither gpushare's words nor Slurm's figures, or not the ones the
    /// decision needs (an unknown is never taken for unused).
    NoFigures,
    /// The GPU's memory is not known (Slurm's figures only).
    GpuMemoryUnknown,
    /// It held several GPUs whole on a node, or on several nodes.
    SeveralGpus,
    /// Shares of different sizes, or shares and whole GPUs at once.
    Mixed,
}

impl NotAdvised {
    pub fn words(self) -> &'static str {
        match self {
            NotAdvised::Fits => "its share fits what it used",
            NotAdvised::UsesItsGpu => "it used more than half of the GPU it held",
            NotAdvised::TooFewSamples => "too few samples (fewer than 2, or under 2 minutes)",
            NotAdvised::NoFigures => "no usage figures",
            NotAdvised::GpuMemoryUnknown => "its GPU's memory is not known",
            NotAdvised::SeveralGpus => "it held several GPUs",
            NotAdvised::Mixed => "shares of different sizes, or shares and whole GPUs",
        }
    }
}

/// What is known of the site beside the jobs.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// The units of one GPU for a job held whole: the most frequent
    /// `UnitsPerGPU` in gpushare's words of the jobs read, else
    /// [`DEFAULT_UNITS_PER_GPU`].
    pub units_per_gpu: u32,
    /// `MaxMPSPerJob` of gpu_qos.conf.
    pub max_mps_per_job: Option<u64>,
    /// The memory of each GPU type (MiB) gpushare's words of GPUs held
    /// whole report (the smallest per type).
    pub gpu_memory_mib: Vec<(String, u64)>,
}

impl Site {
    /// What the jobs read say of the site, and gpu_qos.conf.
    pub fn of(jobs: &[UsedJob], cfg: Option<&GpuQosConfig>) -> Self {
        let mut per_gpu: Vec<(u32, usize)> = Vec::new();
        let mut memory: Vec<(String, u64)> = Vec::new();
        for job in jobs {
            let words = words_of(job);
            for w in &words {
                match w.held {
                    usage_words::Held::Share { per_gpu: p, .. } => {
                        match per_gpu.iter_mut().find(|(x, _)| *x == p) {
                            Some((_, n)) => *n += 1,
                            None => per_gpu.push((p, 1)),
                        }
                    }
                    usage_words::Held::Whole => {
                        let types = gpus_of_tres(&job.alloc_tres);
                        if let ([(Some(t), _)], Some(mib)) = (&types[..], w.mem_limit_mib) {
                            match memory.iter_mut().find(|(x, _)| x == t) {
                                Some((_, m)) => *m = (*m).min(mib),
                                None => memory.push((t.clone(), mib)),
                            }
                        }
                    }
                }
            }
        }
        // The most frequent; of two as frequent, the smaller.
        per_gpu.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Site {
            units_per_gpu: per_gpu.first().map_or(DEFAULT_UNITS_PER_GPU, |p| p.0),
            max_mps_per_job: cfg.and_then(GpuQosConfig::max_mps_per_job),
            gpu_memory_mib: memory,
        }
    }

    /// The largest share the site allows of a GPU of `per_gpu` units.
    pub fn largest_share(&self, per_gpu: u32) -> u32 {
        self.max_mps_per_job
            .map_or(per_gpu, |m| {
                u32::try_from(m).unwrap_or(u32::MAX).min(per_gpu)
            })
            .max(1)
    }

    /// The memory of a GPU of `gpu_type` (MiB): what its name says
    /// (`..._40gb`, `3g.20gb`: decimal GB, so never more than the GPU
    /// has), else what gpushare's words of another job report.
    pub fn gpu_memory(&self, gpu_type: &str) -> Option<u64> {
        memory_named(gpu_type).or_else(|| {
            self.gpu_memory_mib
                .iter()
                .find(|(t, _)| t.eq_ignore_ascii_case(gpu_type))
                .map(|(_, m)| *m)
        })
    }
}

/// The memory a GPU type's name states: digits then `gb` at its end
/// (`nvidia_a100_3g.20gb`, `a100_80gb`, `h100-94gb`), as decimal GB in
/// MiB, rounded down.
pub fn memory_named(gpu_type: &str) -> Option<u64> {
    let lower = gpu_type.to_ascii_lowercase();
    let body = lower.strip_suffix("gb")?;
    let start = body
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    let digits = &body[start..];
    if digits.is_empty() || digits.len() > 6 || start == 0 {
        return None;
    }
    let gb: u64 = digits.parse().ok().filter(|&g| g > 0)?;
    Some(gb * 1_000_000_000 / (1 << 20))
}

/// `ceil(numerator / denominator)` of integers; `None` for a zero
/// denominator.
fn ceil_div(numerator: u128, denominator: u128) -> Option<u64> {
    if denominator == 0 {
        return None;
    }
    u64::try_from(numerator.div_ceil(denominator)).ok()
}

/// Thousandths of a fraction (3 decimals, as gpushare writes them).
fn milli(fraction: f64) -> Option<u128> {
    (fraction.is_finite() && (0.0..=1e6).contains(&fraction))
        .then(|| (fraction * 1000.0).round() as u128)
}

/// The units of a GPU of `per_gpu` that cover `used` with
/// [`HEADROOM_PERCENT`] more, for a share of `held_units` (`None`: a GPU
/// held whole): the larger of what its peak memory and its mean SM use
/// need, at least 1. `None` where either is unknown, but a share's
/// unknown SM use, taken as its units (never shrunk for it).
///
/// Memory: of a share, its limit is taken as its units' part of the
/// GPU's (`MemoryLimit=proportional`), so a unit holds `limit / units`;
/// of a whole GPU, `limit` is the GPU's memory. SM use: of a share, over
/// its part (`held_units / per_gpu` of the GPU); of a whole GPU, over the
/// GPU.
pub fn needed_units(used: &Used, held_units: Option<u32>, per_gpu: u32) -> Option<u64> {
    let of = held_units.unwrap_or(per_gpu);
    let memory = memory_units(used, of)?;
    // A share's SM use is not measured (NVML charges MPS clients' work to
    // their server): its SMs are never taken as unused, so the advice
    // never shrinks it, and grows it only for memory.
    let sm = match (sm_units(used, of), held_units) {
        (Some(sm), _) => sm,
        (None, Some(held)) => u64::from(held),
        (None, None) => return None,
    };
    Some(memory.max(sm).max(1))
}

/// The units that hold the peak memory with the headroom, `of` units
/// holding `mem_limit_mib`.
fn memory_units(used: &Used, of: u32) -> Option<u64> {
    let grow = 100 + u128::from(HEADROOM_PERCENT);
    ceil_div(
        u128::from(used.mem_peak_mib?) * grow * u128::from(of),
        100 * u128::from(used.mem_limit_mib?),
    )
}

/// The units whose SMs cover the mean SM use with the headroom, the use
/// being over `of` units.
fn sm_units(used: &Used, of: u32) -> Option<u64> {
    let grow = 100 + u128::from(HEADROOM_PERCENT);
    ceil_div(milli(used.sm_mean?)? * u128::from(of) * grow, 1000 * 100)
}

/// A job's advice before its command line is known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub kind: Kind,
    /// The share to ask for (`None`: a whole GPU).
    pub units: Option<u32>,
    pub units_per_gpu: u32,
    pub held: Held,
    pub used: Used,
}

/// The figures of gpushare's words: several GPUs' reduced to the largest
/// peak and SM use, the smallest limit, the fewest samples.
fn from_words(words: &[GpuUsage]) -> Used {
    let all = |f: &dyn Fn(&GpuUsage) -> Option<u64>| -> Option<Vec<u64>> {
        words.iter().map(f).collect()
    };
    Used {
        source: Source::Gpushare,
        mem_peak_mib: all(&|w| w.mem_peak_mib).and_then(|v| v.into_iter().max()),
        mem_limit_mib: all(&|w| w.mem_limit_mib).and_then(|v| v.into_iter().min()),
        sm_mean: words
            .iter()
            .map(|w| w.sm_mean)
            .collect::<Option<Vec<f64>>>()
            .and_then(|v| v.into_iter().reduce(f64::max)),
        samples: words.iter().map(|w| w.samples).min(),
    }
}

/// gpushare's words of `job`: in its `AdminComment`, and in its
/// `SystemComment` where the node timer left a site tool's
/// `AdminComment` whole (each clause once).
pub fn words_of(job: &UsedJob) -> Vec<GpuUsage> {
    let mut words = usage_words::parse(&job.admin_comment);
    for w in usage_words::parse(&job.system_comment) {
        if !words.contains(&w) {
            words.push(w);
        }
    }
    words
}

/// What `job` held and used; or why that is not enough to advise on.
pub fn held_and_used(job: &UsedJob, site: &Site) -> Result<(Held, Used), NotAdvised> {
    let words = words_of(job);
    if let Some(first) = words.first() {
        let used = from_words(&words);
        if used.samples.unwrap_or(0) < MIN_SAMPLES {
            return Err(NotAdvised::TooFewSamples);
        }
        return match first.held {
            usage_words::Held::Share { units, per_gpu } => {
                if words.iter().any(|w| w.held != first.held) {
                    return Err(NotAdvised::Mixed);
                }
                Ok((
                    Held::Share {
                        units,
                        units_per_gpu: per_gpu,
                    },
                    used,
                ))
            }
            usage_words::Held::Whole => {
                if words.iter().any(|w| w.held != first.held) {
                    return Err(NotAdvised::Mixed);
                }
                let types = gpus_of_tres(&job.alloc_tres);
                let gpu_type = match &types[..] {
                    [(t, _)] => t.clone(),
                    _ => None,
                };
                let gpus = u64::try_from(words.len()).unwrap_or(u64::MAX);
                Ok((Held::Whole { gpus, gpu_type }, used))
            }
        };
    }
    // Slurm's figures: the largest of the job's steps.
    let shares = largest(std::slice::from_ref(&job.alloc_tres), "gres/mps").unwrap_or(0);
    let gpus = gpus_of_tres(&job.alloc_tres);
    let whole: u64 = gpus.iter().map(|(_, n)| n).sum();
    let peak_bytes = largest(&job.steps_max, "gres/gpumem");
    let util = largest(&job.steps_ave, "gres/gpuutil");
    if peak_bytes.is_none() && util.is_none() {
        return Err(NotAdvised::NoFigures);
    }
    if job.elapsed_s.unwrap_or(0) < MIN_SLURM_ELAPSED_S {
        return Err(NotAdvised::TooFewSamples);
    }
    let mib = |bytes: u64| bytes.div_ceil(1 << 20);
    if shares > 0 {
        if whole > 0 {
            return Err(NotAdvised::Mixed);
        }
        // Under MPS Slurm's figures are 0 where NVML did not see the
        // job's processes: unknown, never unused. Slurm knows no limit
        // of a share: no decision can be made of these figures.
        let per_gpu = site.units_per_gpu;
        let units = u32::try_from(shares).unwrap_or(u32::MAX).min(per_gpu);
        let used = Used {
            source: Source::Slurm,
            mem_peak_mib: peak_bytes.filter(|&b| b > 0).map(mib),
            mem_limit_mib: None,
            sm_mean: util
                .filter(|&u| u > 0)
                .map(|u| u as f64 / 100.0 * f64::from(per_gpu) / f64::from(units.max(1))),
            samples: None,
        };
        return Ok((
            Held::Share {
                units,
                units_per_gpu: per_gpu,
            },
            used,
        ));
    }
    if whole == 0 {
        return Err(NotAdvised::NoFigures);
    }
    let gpu_type = match &gpus[..] {
        [(t, _)] => t.clone(),
        _ => None,
    };
    let total = gpu_type.as_deref().and_then(|t| site.gpu_memory(t));
    let used = Used {
        source: Source::Slurm,
        mem_peak_mib: peak_bytes.map(mib),
        mem_limit_mib: total,
        sm_mean: util.map(|u| u as f64 / 100.0),
        samples: None,
    };
    if whole == 1 && total.is_none() && used.mem_peak_mib.is_some() {
        return Err(NotAdvised::GpuMemoryUnknown);
    }
    Ok((
        Held::Whole {
            gpus: whole,
            gpu_type,
        },
        used,
    ))
}

/// The advice for `job`, or why there is none.
pub fn decide(job: &UsedJob, site: &Site) -> Result<Decision, NotAdvised> {
    let (held, used) = held_and_used(job, site)?;
    let size = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    match held {
        Held::Whole { gpus, .. } => {
            if gpus != 1 {
                return Err(NotAdvised::SeveralGpus);
            }
            let per_gpu = site.units_per_gpu;
            let need = needed_units(&used, None, per_gpu).ok_or(NotAdvised::NoFigures)?;
            let largest = u64::from(site.largest_share(per_gpu));
            if need * 2 > u64::from(per_gpu) || need > largest {
                return Err(NotAdvised::UsesItsGpu);
            }
            Ok(Decision {
                kind: Kind::ShareInstead,
                units: Some(size(need)),
                units_per_gpu: per_gpu,
                held,
                used,
            })
        }
        Held::Share {
            units,
            units_per_gpu,
        } => {
            let largest = site.largest_share(units_per_gpu);
            let hit = match (used.mem_peak_mib, used.mem_limit_mib) {
                (Some(peak), Some(limit)) => {
                    u128::from(peak) * 100 >= u128::from(limit) * u128::from(LIMIT_HIT_PERCENT)
                }
                _ => false,
            };
            let need = needed_units(&used, Some(units), units_per_gpu);
            let decision = |kind: Kind, units: Option<u32>| Decision {
                kind,
                units,
                units_per_gpu,
                held: held.clone(),
                used: used.clone(),
            };
            if hit {
                // Its true need is above its limit: at least a unit more,
                // and the headroom over what it reached.
                let want = memory_units(&used, units)
                    .unwrap_or(0)
                    .max(sm_units(&used, units).unwrap_or(0))
                    .max(u64::from(units) + 1);
                return Ok(if want <= u64::from(largest) {
                    decision(Kind::Larger, Some(size(want)))
                } else if units < largest {
                    decision(Kind::Larger, Some(largest))
                } else {
                    decision(Kind::WholeInstead, None)
                });
            }
            let need = need.ok_or(NotAdvised::NoFigures)?;
            if need * 2 <= u64::from(units) {
                Ok(decision(Kind::Smaller, Some(size(need))))
            } else {
                Err(NotAdvised::Fits)
            }
        }
    }
}

/// Whether a job's state says it ended (its figures are whole).
pub fn ended(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "TIMEOUT"
            | "CANCELLED"
            | "OUT_OF_MEMORY"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "DEADLINE"
            | "BOOT_FAIL"
    )
}

/// Whether a job held any GPU or share, by its `AllocTRES` or gpushare's
/// words.
pub fn held_gpus(job: &UsedJob) -> bool {
    !gpus_of_tres(&job.alloc_tres).is_empty()
        || largest(std::slice::from_ref(&job.alloc_tres), "gres/mps").unwrap_or(0) > 0
        || !words_of(job).is_empty()
}
