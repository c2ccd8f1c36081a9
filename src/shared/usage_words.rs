//! gpushare's words of what a job used of each GPU, in the job's
//! `AdminComment`: written by the node half at the job's end
//! ([`render_all`]), read by `gpu-qos advise` ([`parse`]).
//!
//! One clause per GPU the job used on a node, the clauses separated from
//! each other and from the site's own text by `; `:
//!
//! ```text
//! gpushare-usage: node=<name> gpu=<index> units=<U>/<UnitsPerGPU> mem_peak_mib=<N> mem_limit_mib=<N> sm_mean=<F> samples=<N>
//! gpushare-usage: node=<name> gpu=<index> units=whole mem_peak_mib=<N> mem_limit_mib=<N> sm_mean=<F> samples=<N>
//! ```
//!
//! `node=` names the node that wrote the clause (each node replaces only
//! its own); a clause without it reads as well.
//!
//! The first for a share of `U` units of a GPU of `UnitsPerGPU`, the
//! second for a GPU the job held whole. `mem_peak_mib`, `mem_limit_mib`
//! and `sm_mean` may be `-` (unknown). For a share, `mem_limit_mib` is its
//! MPS device-memory limit and `sm_mean` its mean SM use over its part of
//! the GPU (1.0: all of its part; more where MPS let it use idle SMs); for
//! a whole GPU, `mem_limit_mib` is the GPU's memory and `sm_mean` the mean
//! fraction of the GPU's SMs. `samples`: how many one-minute samples the
//! figures come from.
//!
//! Every word is lowercase: `sacctmgr modify job ... set AdminComment=`
//! lowercases what it sets on Slurm 22.05 (`strip_quotes` in sacctmgr).
//!
//! Only operators and root can write a job's `AdminComment`, so these
//! words are trusted where they stand there; the site's own text around
//! them is passed over, and nothing else of a job (its name, comment or
//! command line, which its user chose) is ever read as them.

/// What starts each clause.
pub const MARK: &str = "gpushare-usage: ";

/// Between two clauses, and between the site's text and a clause.
pub const SEPARATOR: &str = "; ";

/// The most units a GPU may be cut into (`UnitsPerGPU` of gpu_mps.conf).
const MAX_UNITS_PER_GPU: u32 = 1_000_000;

/// How the job held the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A share of `units` of the GPU's `per_gpu`.
    Share { units: u32, per_gpu: u32 },
    /// The whole GPU.
    Whole,
}

/// What a job used of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuUsage {
    /// The node that wrote it (`None`: not named).
    pub node: Option<String>,
    /// The GPU's index on its node.
    pub gpu: u32,
    pub held: Held,
    /// The highest device memory seen in use, MiB.
    pub mem_peak_mib: Option<u64>,
    /// A share's device-memory limit; a whole GPU's memory (MiB).
    pub mem_limit_mib: Option<u64>,
    /// Mean SM use: over a share's part of the GPU, or of the whole GPU.
    pub sm_mean: Option<f64>,
    /// One-minute samples the figures come from.
    pub samples: u64,
}

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// One clause, exactly as [`parse`] reads it. `sm_mean` is written with
/// three decimals; one that is not a finite number of at least 0 is
/// written `-`.
pub fn render(u: &GpuUsage) -> String {
    let units = match u.held {
        Held::Share { units, per_gpu } => format!("{units}/{per_gpu}"),
        Held::Whole => "whole".to_owned(),
    };
    let sm = u
        .sm_mean
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| format!("{v:.3}"));
    let node = u
        .node
        .as_deref()
        .filter(|n| node_name(n))
        .map(|n| format!("node={n} "))
        .unwrap_or_default();
    format!(
        "{MARK}{node}gpu={} units={units} mem_peak_mib={} mem_limit_mib={} sm_mean={} samples={}",
        u.gpu,
        or_dash(u.mem_peak_mib),
        or_dash(u.mem_limit_mib),
        or_dash(sm),
        u.samples
    )
}

/// The clauses of a job, joined by [`SEPARATOR`] (empty for none).
pub fn render_all(all: &[GpuUsage]) -> String {
    all.iter().map(render).collect::<Vec<_>>().join(SEPARATOR)
}

/// The clauses in a job's `AdminComment`, in order. Text that is not a
/// whole clause (the site's own, a clause cut or misspelt) is passed
/// over.
pub fn parse(comment: &str) -> Vec<GpuUsage> {
    comment
        .split(';')
        .filter_map(|part| clause(part.trim()))
        .collect()
}

fn digits(text: &str) -> Option<u64> {
    (!text.is_empty() && text.len() <= 19 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn optional<T>(text: &str, read: impl Fn(&str) -> Option<T>) -> Option<Option<T>> {
    if text == "-" {
        Some(None)
    } else {
        read(text).map(Some)
    }
}

fn fraction(text: &str) -> Option<f64> {
    let ok = !text.is_empty()
        && text.len() <= 24
        && text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && text.bytes().filter(|b| *b == b'.').count() <= 1
        && text.bytes().next().is_some_and(|b| b.is_ascii_digit());
    ok.then(|| text.parse::<f64>().ok())
        .flatten()
        .filter(|v| v.is_finite())
}

/// A node name as Slurm takes one: letters, digits, `-`, `_`, `.`.
fn node_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 255
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// One clause: the mark, the node's name where given, then the six words
/// in order, one space apart.
fn clause(text: &str) -> Option<GpuUsage> {
    let mut words: Vec<&str> = text.strip_prefix(MARK)?.split(' ').collect();
    let node = match words.first()?.strip_prefix("node=") {
        Some(n) if node_name(n) => {
            words.remove(0);
            Some(n.to_owned())
        }
        Some(_) => return None,
        None => None,
    };
    let [gpu, units, peak, limit, sm, samples] = words[..] else {
        return None;
    };
    let gpu = u32::try_from(digits(gpu.strip_prefix("gpu=")?)?).ok()?;
    let held = match units.strip_prefix("units=")? {
        "whole" => Held::Whole,
        share => {
            let (u, per) = share.split_once('/')?;
            let units = u32::try_from(digits(u)?).ok()?;
            let per_gpu = u32::try_from(digits(per)?).ok()?;
            if units == 0 || per_gpu == 0 || per_gpu > MAX_UNITS_PER_GPU || units > per_gpu {
                return None;
            }
            Held::Share { units, per_gpu }
        }
    };
    Some(GpuUsage {
        node,
        gpu,
        held,
        mem_peak_mib: optional(peak.strip_prefix("mem_peak_mib=")?, digits)?,
        mem_limit_mib: optional(limit.strip_prefix("mem_limit_mib=")?, digits)?,
        sm_mean: optional(sm.strip_prefix("sm_mean=")?, fraction)?,
        samples: digits(samples.strip_prefix("samples=")?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(gpu: u32, units: u32) -> GpuUsage {
        GpuUsage {
            node: None,
            gpu,
            held: Held::Share {
                units,
                per_gpu: 100,
            },
            mem_peak_mib: Some(2048),
            mem_limit_mib: Some(11_500),
            sm_mean: Some(0.25),
            samples: 30,
        }
    }

    #[test]
    fn render_writes_the_format_and_parse_reads_it_back() {
        let whole = GpuUsage {
            node: None,
            gpu: 3,
            held: Held::Whole,
            mem_peak_mib: None,
            mem_limit_mib: Some(46_068),
            sm_mean: None,
            samples: 0,
        };
        let all = vec![share(0, 25), whole.clone()];
        let text = render_all(&all);
        assert_eq!(
            text,
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=2048 mem_limit_mib=11500 \
             sm_mean=0.250 samples=30; gpushare-usage: gpu=3 units=whole mem_peak_mib=- \
             mem_limit_mib=46068 sm_mean=- samples=0"
        );
        assert_eq!(parse(&text), all);
        // The text of a parse, rendered again, is the same text.
        assert_eq!(render_all(&parse(&text)), text);
        // sacctmgr of 22.05 lowercases an AdminComment it sets.
        assert_eq!(parse(&text.to_lowercase()), all);
        assert_eq!(render_all(&[]), "");
        // Figures no number stands for are written unknown.
        for odd in [f64::NAN, f64::INFINITY, -0.5] {
            let u = GpuUsage {
                sm_mean: Some(odd),
                ..share(1, 50)
            };
            assert_eq!(parse(&render(&u))[0].sm_mean, None);
        }
        let over = GpuUsage {
            sm_mean: Some(1.5),
            ..share(1, 50)
        };
        assert_eq!(parse(&render(&over))[0].sm_mean, Some(1.5));
    }

    #[test]
    fn the_sites_text_around_the_words_is_passed_over() {
        let ours = render(&share(1, 50));
        let comment = format!("billing code X; checked; {ours}; ticket 42: see gpushare-usage");
        assert_eq!(parse(&comment), vec![share(1, 50)]);
        // Separated without a space, or with a newline, it still stands.
        assert_eq!(parse(&format!("site note;{ours}\n")), vec![share(1, 50)]);
        // The requeue words of the node half beside them.
        let comment =
            format!("gpushare: requeued from gpu01 (requeue 1 of 3), busy; kept off gpu01; {ours}");
        assert_eq!(parse(&comment).len(), 1);
        assert!(parse("").is_empty());
        assert!(parse("gpushare: requeues so far: 2").is_empty());
    }

    #[test]
    fn a_clause_not_whole_is_no_clause() {
        let good = "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 \
                    sm_mean=0.5 samples=3";
        assert_eq!(parse(good).len(), 1);
        for bad in [
            // cut, misspelt, reordered, extra words, odd values
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5",
            "gpushare-usage gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage:  gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: units=25/100 gpu=0 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3 x=1",
            "gpushare-usage: gpu=-1 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=0/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=101/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=25/0 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=25 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=half mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1.5 mem_limit_mib=2 sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=-0.5 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=1e3 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=NaN samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=.5 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.5 samples=-",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=99999999999999999999 mem_limit_mib=2 \
             sm_mean=0.5 samples=3",
            "gpushare-usage: gpu=0 units=25/100 mem_peak_mib=١ mem_limit_mib=2 sm_mean=0.5 samples=3",
        ] {
            assert!(parse(bad).is_empty(), "{bad}");
        }
    }

    /// The node's name is read and written where given, and a clause
    /// whose node name Slurm could not have written is not read.
    #[test]
    fn a_clause_may_name_its_node() {
        let mut u = share(2, 25);
        u.node = Some("gpu-07.a".into());
        let text = render(&u);
        assert!(
            text.starts_with("gpushare-usage: node=gpu-07.a gpu=2 "),
            "{text}"
        );
        assert_eq!(parse(&format!("site; {text}")), vec![u.clone()]);
        let forged = text.replace("node=gpu-07.a", "node=a$b");
        assert!(parse(&forged).is_empty());
        u.node = None;
        assert_eq!(parse(&render(&u)), vec![u]);
    }
}
