//! The decisions of `gpu-qos advise`, on jobs as accounting lists them.

use super::*;
use crate::qos::config as qos_conf;
use crate::qos::slurm::used::UsedJob;
use crate::shared::usage_words::{render_all, GpuUsage, Held as WordsHeld};

fn share_words(units: u32, peak: Option<u64>, limit: Option<u64>, sm: Option<f64>) -> GpuUsage {
    GpuUsage {
        node: None,
        gpu: 0,
        held: WordsHeld::Share {
            units,
            per_gpu: 100,
        },
        mem_peak_mib: peak,
        mem_limit_mib: limit,
        sm_mean: sm,
        samples: 30,
    }
}

fn whole_words(peak: Option<u64>, total: Option<u64>, sm: Option<f64>) -> GpuUsage {
    GpuUsage {
        node: None,
        gpu: 1,
        held: WordsHeld::Whole,
        mem_peak_mib: peak,
        mem_limit_mib: total,
        sm_mean: sm,
        samples: 30,
    }
}

/// An ended job holding `alloc` with `words` in its AdminComment.
fn job(alloc: &str, words: &[GpuUsage]) -> UsedJob {
    UsedJob {
        id: "7".into(),
        user: "alice".into(),
        qos: "normal".into(),
        partition: "gpu".into(),
        nodes: Some("node1".into()),
        alloc_tres: alloc.into(),
        state: "COMPLETED".into(),
        elapsed_s: Some(1800),
        admin_comment: render_all(words),
        ..UsedJob::default()
    }
}

const A40: &str = "billing=1,cpu=1,gres/gpu:a40=1,gres/gpu=1,mem=1000M,node=1";
const MPS: &str = "billing=1,cpu=1,gres/mps=50,mem=1000M,node=1";

fn site() -> Site {
    Site {
        units_per_gpu: 100,
        max_mps_per_job: None,
        gpu_memory_mib: Vec::new(),
    }
}

fn advice(j: &UsedJob, s: &Site) -> Result<(Kind, Option<u32>), NotAdvised> {
    decide(j, s).map(|d| (d.kind, d.units))
}

#[test]
fn a_lightly_used_whole_gpu_would_fit_a_share_of_the_size_its_use_needs() {
    // Memory: 4096 × 1.25 / 46068 of 100 units = 11.1 → 12; SM: 12 % ×
    // 1.25 = 15 → 15.
    let j = job(A40, &[whole_words(Some(4096), Some(46_068), Some(0.12))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(15))));
    // Memory the larger need: 16 GiB × 1.25 of 45 GiB = 44.4 → 45.
    let j = job(A40, &[whole_words(Some(16_384), Some(46_080), Some(0.1))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(45))));
    // More than half a GPU: it uses its GPU.
    let j = job(A40, &[whole_words(Some(1024), Some(46_068), Some(0.41))]);
    assert_eq!(advice(&j, &site()), Err(NotAdvised::UsesItsGpu));
    let j = job(A40, &[whole_words(Some(20_000), Some(46_068), Some(0.1))]);
    assert_eq!(advice(&j, &site()), Err(NotAdvised::UsesItsGpu));
    // At exactly half it fits: 40 % × 1.25 = 50 units.
    let j = job(A40, &[whole_words(Some(1024), Some(46_068), Some(0.4))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(50))));
    // Never below one unit.
    let j = job(A40, &[whole_words(Some(0), Some(46_068), Some(0.0))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(1))));
    // A share larger than MaxMPSPerJob is no share to advise.
    let capped = Site {
        max_mps_per_job: Some(10),
        ..site()
    };
    let j = job(A40, &[whole_words(Some(4096), Some(46_068), Some(0.12))]);
    assert_eq!(advice(&j, &capped), Err(NotAdvised::UsesItsGpu));
    // A GPU of 50 units (UnitsPerGPU=50 in the words of the site's shares).
    let halves = Site {
        units_per_gpu: 50,
        ..site()
    };
    assert_eq!(advice(&j, &halves), Ok((Kind::ShareInstead, Some(8))));
}

#[test]
fn a_share_that_used_at_most_half_is_told_the_smaller_size() {
    // Memory: 2048 × 1.25 × 50 / 23034 = 5.6 → 6; SM: 20 % of its 50
    // units × 1.25 = 12.5 → 13.
    let j = job(MPS, &[share_words(50, Some(2048), Some(23_034), Some(0.2))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::Smaller, Some(13))));
    // 26 of 50 needed: more than half, it fits.
    let j = job(
        MPS,
        &[share_words(50, Some(2048), Some(23_034), Some(0.416))],
    );
    assert_eq!(advice(&j, &site()), Err(NotAdvised::Fits));
    // 25 of 50: exactly half, smaller.
    let j = job(MPS, &[share_words(50, Some(2048), Some(23_034), Some(0.4))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::Smaller, Some(25))));
    // More SMs than its part (MPS lent idle ones): counted as used.
    let j = job(MPS, &[share_words(50, Some(2048), Some(23_034), Some(1.3))]);
    assert_eq!(advice(&j, &site()), Err(NotAdvised::Fits));
}

#[test]
fn a_share_at_its_memory_limit_is_told_a_larger_size_or_a_whole_gpu() {
    // 11000 of 11517 MiB (95.5 %): 11000 × 1.25 × 25 / 11517 = 29.8 → 30.
    let j = job(
        MPS,
        &[share_words(25, Some(11_000), Some(11_517), Some(0.5))],
    );
    assert_eq!(advice(&j, &site()), Ok((Kind::Larger, Some(30))));
    // Below 95 % it did not hit it.
    let j = job(
        MPS,
        &[share_words(25, Some(10_900), Some(11_517), Some(0.9))],
    );
    assert_eq!(advice(&j, &site()), Err(NotAdvised::Fits));
    // SM use unknown: the memory alone says larger (never smaller).
    let j = job(MPS, &[share_words(25, Some(11_517), Some(11_517), None)]);
    assert_eq!(advice(&j, &site()), Ok((Kind::Larger, Some(32))));
    // At least one unit more, whatever the rounding.
    let j = job(MPS, &[share_words(1, Some(460), Some(460), Some(0.1))]);
    assert_eq!(advice(&j, &site()), Ok((Kind::Larger, Some(2))));
    // Up to the largest share, then a whole GPU.
    let capped = Site {
        max_mps_per_job: Some(40),
        ..site()
    };
    let j = job(
        MPS,
        &[share_words(35, Some(16_000), Some(16_000), Some(0.5))],
    );
    assert_eq!(advice(&j, &capped), Ok((Kind::Larger, Some(40))));
    let j = job(
        MPS,
        &[share_words(40, Some(18_000), Some(18_000), Some(0.5))],
    );
    assert_eq!(advice(&j, &capped), Ok((Kind::WholeInstead, None)));
    let j = job(MPS, &[share_words(100, Some(46_000), Some(46_068), None)]);
    assert_eq!(advice(&j, &site()), Ok((Kind::WholeInstead, None)));
}

#[test]
fn unknown_figures_and_too_few_samples_get_no_advice() {
    let unknown = [
        share_words(50, None, Some(23_034), Some(0.1)),
        share_words(50, Some(100), None, Some(0.1)),
    ];
    for w in unknown {
        let j = job(MPS, std::slice::from_ref(&w));
        assert_eq!(advice(&j, &site()), Err(NotAdvised::NoFigures), "{w:?}");
    }
    // A share's SM use is never measured (MPS): its memory alone never
    // shrinks it, and grows it where it needs more.
    let j = job(MPS, &[share_words(50, Some(100), Some(23_034), None)]);
    assert_eq!(advice(&j, &site()), Err(NotAdvised::Fits));
    let j = job(MPS, &[share_words(25, Some(11_000), Some(11_517), None)]);
    assert!(
        matches!(advice(&j, &site()), Ok((Kind::Larger, Some(u))) if u > 25),
        "{:?}",
        advice(&j, &site())
    );
    let j = job(A40, &[whole_words(Some(100), None, Some(0.1))]);
    assert_eq!(advice(&j, &site()), Err(NotAdvised::NoFigures));
    let few = GpuUsage {
        samples: 1,
        ..share_words(50, Some(100), Some(23_034), Some(0.1))
    };
    assert_eq!(
        advice(&job(MPS, std::slice::from_ref(&few)), &site()),
        Err(NotAdvised::TooFewSamples)
    );
    // One GPU of a job with too few samples makes all too few.
    let two = [share_words(50, Some(100), Some(23_034), Some(0.1)), few];
    assert_eq!(
        advice(&job(MPS, &two), &site()),
        Err(NotAdvised::TooFewSamples)
    );
    // No words and no Slurm figures.
    assert_eq!(advice(&job(A40, &[]), &site()), Err(NotAdvised::NoFigures));
}

#[test]
fn several_gpus_take_the_largest_use_and_mixed_holdings_none() {
    let mut second = share_words(50, Some(9000), Some(23_034), Some(0.1));
    second.gpu = 1;
    let two = [share_words(50, Some(100), Some(23_034), Some(0.05)), second];
    // The larger peak of the two: 9000 × 1.25 × 50 / 23034 = 24.4 → 25.
    assert_eq!(
        advice(&job(MPS, &two), &site()),
        Ok((Kind::Smaller, Some(25)))
    );
    let other_size = GpuUsage {
        held: WordsHeld::Share {
            units: 25,
            per_gpu: 100,
        },
        ..share_words(25, Some(100), Some(11_517), Some(0.1))
    };
    let mixed = [
        share_words(50, Some(100), Some(23_034), Some(0.1)),
        other_size,
    ];
    assert_eq!(advice(&job(MPS, &mixed), &site()), Err(NotAdvised::Mixed));
    let mixed = [
        share_words(50, Some(100), Some(23_034), Some(0.1)),
        whole_words(Some(1), Some(46_068), Some(0.1)),
    ];
    assert_eq!(advice(&job(MPS, &mixed), &site()), Err(NotAdvised::Mixed));
    let wholes = [
        whole_words(Some(1), Some(46_068), Some(0.1)),
        whole_words(Some(1), Some(46_068), Some(0.1)),
    ];
    assert_eq!(
        advice(&job("gres/gpu:a40=2,gres/gpu=2", &wholes), &site()),
        Err(NotAdvised::SeveralGpus)
    );
}

#[test]
fn only_gpushares_words_in_the_admin_comment_count() {
    let ours = render_all(&[whole_words(Some(4096), Some(46_068), Some(0.12))]);
    let mut j = job(A40, &[]);
    j.admin_comment = format!("billing: project 12; {ours}; reviewed by ops");
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(15))));
    // Words that are not whole, inside the site's text, are the site's.
    j.admin_comment = format!("note \"{ours}\" was here");
    assert_eq!(advice(&j, &site()), Err(NotAdvised::NoFigures));
}

/// A job with Slurm's figures only: `max` and `ave` of one step.
fn slurm_job(alloc: &str, max: &str, ave: &str, elapsed: u64) -> UsedJob {
    UsedJob {
        steps_max: vec![String::new(), max.into()],
        steps_ave: vec![String::new(), ave.into()],
        elapsed_s: Some(elapsed),
        ..job(alloc, &[])
    }
}

#[test]
fn slurms_figures_advise_whole_gpus_whose_memory_is_known() {
    let gib = 1u64 << 30;
    let max = format!("cpu=00:01:00,gres/gpumem={},gres/gpuutil=30", 4 * gib);
    let j = slurm_job(A40, &max, "gres/gpumem=1,gres/gpuutil=12", 600);
    // An a40's memory: not in its name, not in any words read.
    assert_eq!(advice(&j, &site()), Err(NotAdvised::GpuMemoryUnknown));
    // Learnt from gpushare's words of another job on an a40.
    let other = job(A40, &[whole_words(Some(1), Some(46_068), Some(0.5))]);
    let learnt = Site::of(&[other], None);
    assert_eq!(learnt.gpu_memory_mib, vec![("a40".to_owned(), 46_068)]);
    assert_eq!(advice(&j, &learnt), Ok((Kind::ShareInstead, Some(15))));
    let d = decide(&j, &learnt).unwrap();
    assert_eq!(d.used.source, Source::Slurm);
    assert_eq!(d.used.mem_peak_mib, Some(4096));
    // A type that names its memory: 20 GB = 19073 MiB.
    let mig = "gres/gpu:nvidia_a100_3g.20gb=1,gres/gpu=1";
    let j = slurm_job(mig, &max, "gres/gpuutil=12", 600);
    // 4096 × 1.25 / 19073 = 26.8 → 27.
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(27))));
    // Too short a job.
    let j = slurm_job(mig, &max, "gres/gpuutil=12", 90);
    assert_eq!(advice(&j, &site()), Err(NotAdvised::TooFewSamples));
    // Several steps: the largest of them.
    let mut j = slurm_job(mig, &max, "gres/gpuutil=12", 600);
    j.steps_max.push(format!("gres/gpumem={}", 8 * gib));
    j.steps_ave.push("gres/gpuutil=5".into());
    // 8192 × 1.25 / 19073 = 53.7: more than half.
    assert_eq!(advice(&j, &site()), Err(NotAdvised::UsesItsGpu));
}

#[test]
fn slurms_zero_under_mps_is_unknown_never_unused() {
    let j = slurm_job(MPS, "gres/gpumem=0,gres/gpuutil=0", "gres/gpuutil=0", 600);
    let (held, used) = held_and_used(&j, &site()).unwrap();
    assert_eq!(
        held,
        Held::Share {
            units: 50,
            units_per_gpu: 100
        }
    );
    assert_eq!((used.mem_peak_mib, used.sm_mean), (None, None));
    assert_eq!(advice(&j, &site()), Err(NotAdvised::NoFigures));
    // A whole GPU's 0 is a figure: it used nothing.
    let j = slurm_job(
        "gres/gpu:nvidia_a100_3g.20gb=1,gres/gpu=1",
        "gres/gpumem=0",
        "gres/gpuutil=0",
        600,
    );
    assert_eq!(advice(&j, &site()), Ok((Kind::ShareInstead, Some(1))));
}

#[test]
fn the_site_is_read_from_the_words_and_gpu_qos_conf() {
    let mut w50 = share_words(10, Some(1), Some(2), Some(0.1));
    w50.held = WordsHeld::Share {
        units: 10,
        per_gpu: 50,
    };
    let jobs = [
        job(MPS, &[w50.clone()]),
        job(MPS, &[w50]),
        job(MPS, &[share_words(10, Some(1), Some(2), Some(0.1))]),
    ];
    let cfg = qos_conf::parse("MaxMPSPerJob=40\n", "gpu_qos.conf").unwrap();
    let s = Site::of(&jobs, Some(&cfg));
    assert_eq!(s.units_per_gpu, 50);
    assert_eq!(s.largest_share(50), 40);
    assert_eq!(s.largest_share(20), 20);
    assert_eq!(Site::of(&[], None).units_per_gpu, DEFAULT_UNITS_PER_GPU);
    assert_eq!(memory_named("nvidia_a100_3g.20gb"), Some(19_073));
    assert_eq!(memory_named("A100-80GB"), Some(76_293));
    for none in ["a40", "gb", "40gb", "a100_gb", "h100_x", "a_9999999gb"] {
        assert_eq!(memory_named(none), None, "{none}");
    }
}

#[test]
fn only_ended_jobs_with_gpus_are_weighed() {
    let mut running = job(A40, &[whole_words(Some(1), Some(46_068), Some(0.1))]);
    running.state = "RUNNING".into();
    let cpu = job("billing=1,cpu=1,node=1", &[]);
    let few = job(
        MPS,
        &[GpuUsage {
            samples: 0,
            ..share_words(50, Some(1), Some(2), Some(0.1))
        }],
    );
    let fits = job(
        MPS,
        &[share_words(50, Some(20_000), Some(23_034), Some(0.6))],
    );
    let light = job(A40, &[whole_words(Some(4096), Some(46_068), Some(0.12))]);
    let jobs = [running, cpu, few, fits, light];
    let (advised, report) = decisions(&jobs, &site());
    assert_eq!(advised.len(), 1);
    assert_eq!((report.jobs, report.gpu_jobs, report.not_ended), (5, 3, 1));
    let counts: Vec<(NotAdvised, usize)> = report
        .not_advised
        .iter()
        .map(|c| (c.reason, c.jobs))
        .collect();
    assert_eq!(
        counts,
        vec![(NotAdvised::Fits, 1), (NotAdvised::TooFewSamples, 1)]
    );
    assert!(ended("OUT_OF_MEMORY") && !ended("PENDING") && !ended(""));
}

#[test]
fn each_entry_has_its_line_and_what_else_to_know() {
    let cfg = qos_conf::parse(
        "SharedGPUReservations=course_*\nMaxMPSPerJob=100\n",
        "gpu_qos.conf",
    )
    .unwrap();
    let light = job(A40, &[whole_words(Some(4096), Some(46_068), Some(0.12))]);
    let d = decide(&light, &site()).unwrap();
    let e = entry(
        &light,
        d.clone(),
        Some("sbatch --qos=normal --gres=gpu:a40:1 -t 30 train.sh"),
        None,
        Some(&cfg),
    );
    assert_eq!(e.option, "--gres=mps:15");
    assert_eq!(
        e.command,
        "sbatch --gres=mps:15 --partition=gpu --qos=normal"
    );
    assert_eq!(e.command_from, LineFrom::SubmitLine);
    assert_eq!(e.notes.len(), 1, "{:?}", e.notes);
    assert!(e.notes[0].contains("course_*"));
    let mut inside = light.clone();
    inside.reservation = Some("course_ml".into());
    let e = entry(&inside, d.clone(), None, None, Some(&cfg));
    assert_eq!(e.command, "sbatch --gres=mps:15 --partition=gpu");
    assert_eq!(e.command_from, LineFrom::Minimal);
    assert_eq!((e.command_rest, e.submitted), (None, None));
    assert_eq!(e.notes.len(), 1, "{:?}", e.notes);
    let e = entry(&light, d, Some("sbatch job.sh"), None, None);
    assert_eq!(e.command, "sbatch --gres=mps:15 --partition=gpu");
    assert_eq!(e.command_from, LineFrom::SubmitLineAdded);
    // A whole GPU of the nodes' type.
    let full = job(MPS, &[share_words(100, Some(46_000), Some(46_068), None)]);
    let d = decide(&full, &site()).unwrap();
    let e = entry(
        &full,
        d.clone(),
        Some("srun --gres=mps:100 python x.py"),
        Some("a40"),
        Some(&cfg),
    );
    assert_eq!(e.command, "srun --gres=gpu:a40:1 --partition=gpu");
    assert!(e.notes.is_empty(), "{:?}", e.notes);
    let e = entry(
        &full,
        d,
        Some("srun --gres=mps:100 python x.py"),
        None,
        None,
    );
    assert_eq!(e.option, "--gres=gpu:1");
    assert_eq!(e.notes.len(), 1);
    let text = AdviseReport {
        advice: vec![e],
        ..AdviseReport::default()
    }
    .to_text();
    assert!(text.contains("ask for a whole GPU, --gres=gpu:1"), "{text}");
    assert!(
        text.contains("at most 44.9 GiB of its limit 45.0 GiB"),
        "{text}"
    );
}

/// What a user may put in their command line to fool root reading the
/// advice: escape sequences (an OSC 52 clipboard write, cursor moves, a
/// C1 CSI), a newline and a record of its own, a bidi override, and
/// shell words that would run something if pasted.
const HOSTILE: &str = "sbatch --qos=normal --gres=gpu:a40:1 --wrap=cd /scratch && ./run; \
     echo $(id) `id` 'q'\x1b]52;c;cm0gLXJm\x07\x1b[2A\n\
     job 9 (root, QOS normal): held nothing\u{202e}hs.exe\u{9b}2J\x7f";

#[test]
fn a_hostile_line_is_shown_as_text_and_never_offered_to_paste() {
    let light = job(A40, &[whole_words(Some(4096), Some(46_068), Some(0.12))]);
    let d = decide(&light, &site()).unwrap();
    let e = entry(&light, d, Some(HOSTILE), None, None);
    assert_eq!(
        e.command,
        "sbatch --gres=mps:15 --partition=gpu --qos=normal"
    );
    let report = AdviseReport {
        whose: "every user".into(),
        since: "now-7days".into(),
        until: "now".into(),
        jobs: 1,
        gpu_jobs: 1,
        advice: vec![e],
        ..AdviseReport::default()
    };
    let shown_line = concat!(
        r"sbatch --qos=normal --gres=gpu:a40:1 --wrap=cd /scratch && ./run; echo $(id) `id` ",
        r"'q'\x1b]52;c;cm0gLXJm\x07\x1b[2A\njob 9 (root, QOS normal): held nothing",
        r"\u{202e}hs.exe\u{9b}2J\x7f",
    );
    assert_eq!(
        report.to_text(),
        format!(
            "Jobs of every user that ran between now-7days and now: 1 listed, 1 ended with GPUs, \
             1 advised.\n\
             \n\
             job 7 (alice, QOS normal): held 1 a40 whole; used at most 4.0 GiB of the GPU's 45.0 \
             GiB, 12 % of its SMs on average (gpushare's figures, 30 samples).\n  \
             Would fit a share: ask for --gres=mps:15 (15 of 100 units per GPU).\n  \
             type: sbatch --gres=mps:15 --partition=gpu --qos=normal\n        \
             with the job's other options and its script, as its user gave them (not repeated \
             here)\n  \
             its SubmitLine, as Slurm recorded it (not a command): {shown_line}\n"
        )
    );
    // JSON: serde's escapes, and the written-out controls kept as text.
    let json = report.to_json();
    let bad = |c: char| c != '\n' && crate::shared::user_text::is_control(c);
    assert!(!json.chars().any(bad), "{json:?}");
    let in_json = shown_line.replace('\\', "\\\\");
    assert!(
        json.contains(&format!("\"submitted\": \"{in_json}\"")),
        "{json}"
    );
    assert!(json.contains("\"command\": \"sbatch --gres=mps:15 --partition=gpu --qos=normal\""));
    let back: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(back["advice"][0]["submitted"], shown_line);
}

/// gpushare's words in SystemComment, the AdminComment jobstats' blob
/// (the node timer left it whole): the job is advised on them.
#[test]
fn words_in_system_comment_count_beside_a_site_tools_admin_comment() {
    let ours = share_words(50, Some(1024), Some(24_000), Some(0.1));
    let mut j = job(MPS, &[]);
    j.admin_comment = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTgUA+/Wu5BIAAAA=".into();
    j.system_comment = render_all(std::slice::from_ref(&ours));
    assert_eq!(words_of(&j), vec![ours.clone()]);
    assert!(advice(&j, &site()).is_ok());
    j.admin_comment = render_all(std::slice::from_ref(&ours));
    assert_eq!(words_of(&j), vec![ours], "each clause once");
}
