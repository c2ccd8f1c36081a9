//! A job's `SubmitLine`: the command line its user typed, as Slurm
//! recorded it (sbatch, srun and salloc join their arguments with spaces,
//! unquoted). User text: read by position and option name, never trusted
//! to be well formed, never a panic. `#SBATCH` lines inside a batch
//! script are not in it: [`parse_script`] reads those, for
//! [`per_node_spelling`] (which option the user typed for the GPUs
//! Slurm hands job_submit in `tres_per_node`). Never a command to paste:
//! [`Retyped`] rebuilds one from what was parsed.

use crate::qos::gres::PerNodeSpelling;
use crate::shared::user_text::shell_word;

/// What a submission line says about the options the policy reads. Each
/// string is the option's value as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmittedOptions {
    /// `--gres`, `--gpus-per-node` (Slurm's `tres_per_node`), items as
    /// `gres:NAME[:TYPE]:N`.
    pub per_node: Vec<String>,
    /// `--gpus`/`-G` (`tres_per_job`).
    pub per_job: Vec<String>,
    /// `--gpus-per-task` (`tres_per_task`).
    pub per_task: Vec<String>,
    /// `--gpus-per-socket` (`tres_per_socket`).
    pub per_socket: Vec<String>,
    pub qos: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub array: Option<String>,
    pub ntasks: Option<u32>,
    /// `--ntasks-per-gpu` (or `--ntasks-per-tres`): untyped GPUs Slurm
    /// adds where no GPU is asked for.
    pub ntasks_per_gpu: Option<u16>,
    /// `--nodes`/`-N`: the fewest and most nodes (`-N 2` or `-N 2-4`).
    pub nodes: Option<(u32, u32)>,
    pub reservation: Option<String>,
    /// `--requeue` (true) or `--no-requeue` (false), the last given.
    pub requeue: Option<bool>,
    pub open_mode_set: bool,
    pub exclusive_user: bool,
    /// The token range (start, end exclusive) of the first GPU option, so
    /// that the suggestion can take its place in the line.
    pub gpu_tokens: Option<(usize, usize)>,
    /// The token range of every GPU option, in order.
    pub gpu_spans: Vec<(usize, usize)>,
    /// The token range of every `--qos`/`-q`, in order.
    pub qos_spans: Vec<(usize, usize)>,
    /// The last `--gres` given: whether it asks for `gpu` (`None`: no
    /// `--gres`). A later `--gres` replaces an earlier one, in sbatch as
    /// here.
    pub gres_gpu: Option<bool>,
    /// A `--gpus-per-node` was given.
    pub gpus_per_node: bool,
}

impl SubmittedOptions {
    /// Which option these options use for the GPUs of `tres_per_node`.
    pub fn per_node_spelling(&self) -> PerNodeSpelling {
        match (self.gres_gpu.unwrap_or(false), self.gpus_per_node) {
            (true, false) => PerNodeSpelling::Gres,
            (false, true) => PerNodeSpelling::GpusPerNode,
            _ => PerNodeSpelling::Unknown,
        }
    }

    /// Whether the line asks for GPUs (or shares) in any field.
    pub fn asks_gres(&self) -> bool {
        !(self.per_node.is_empty()
            && self.per_job.is_empty()
            && self.per_task.is_empty()
            && self.per_socket.is_empty())
    }
}

/// The options of `sbatch`/`srun`/`salloc` that take a value in the next
/// word when written without `=` (the rest are flags or take theirs only
/// after `=`, as getopt reads an optional argument: `--nice`,
/// `--propagate`, `--get-user-env`). An unknown option is taken as a flag.
/// Every `required_argument` option of `src/common/slurm_opt.c`, 22.05 to
/// 26.11 (`--container-type` became `--runtime` in 26.11), but `--wait`:
/// a flag of sbatch, a number of seconds for srun ([`takes_value`]).
const LONG_WITH_VALUE: &[&str] = &[
    "accel-bind",
    "account",
    "acctg-freq",
    "argv",
    "array",
    "autocomplete",
    "batch",
    "bb",
    "bbf",
    "bcast-exclude",
    "begin",
    "chdir",
    "cluster",
    "cluster-constraint",
    "clusters",
    "comment",
    "constraint",
    "container",
    "container-id",
    "container-type",
    "context",
    "core-spec",
    "cores-per-socket",
    "cpu-bind",
    "cpu-freq",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "environment",
    "epilog",
    "error",
    "exclude",
    "export",
    "export-file",
    "extra",
    "extra-node-info",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "het-group",
    "hint",
    "ignore-signals",
    "input",
    "job-name",
    "jobid",
    "kill-on-invalid-dep",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mem-update",
    "mincpus",
    "mpi",
    "msg-timeout",
    "network",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "ntasks-per-tres",
    "open-mode",
    "output",
    "pack-group",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "prolog",
    "qos",
    "relative",
    "reservation",
    "resources",
    "runtime",
    "segment",
    "signal",
    "slurmd-debug",
    "sockets-per-node",
    "switches",
    "task-epilog",
    "task-prolog",
    "tasks-per-node",
    "thread-spec",
    "threads",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "treewidth",
    "tres-bind",
    "tres-per-task",
    "uid",
    "wait-all-nodes",
    "wckey",
    "wrap",
];

/// Short options taking a value (attached, `-pgpu`, or in the next word).
const SHORT_WITH_VALUE: &[u8] = b"AabCcDdeFGiJLMmNnopqSTtwx";

/// Reads a submission line. The first word is the command (`sbatch`,
/// `srun`, `salloc`, or a path to one); options end at the first word
/// that is not one (the script or program) or at `--`.
pub fn parse(line: &str) -> SubmittedOptions {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut found = SubmittedOptions::default();
    let command = words.first().copied().unwrap_or("");
    let mut i = 1;
    while i < words.len() {
        let word = words[i];
        let start = i;
        i += 1;
        if word == "--" {
            break;
        }
        let (name, value) = if let Some(long) = word.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None if takes_value(command, long) => {
                    let v = words.get(i).copied();
                    i += usize::from(v.is_some());
                    (long, v)
                }
                None => (long, None),
            }
        } else if let Some(short) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            let Some(letter) = short.bytes().next() else {
                continue;
            };
            if !SHORT_WITH_VALUE.contains(&letter) {
                // Flags, possibly bundled (`-Hk`): none of ours but -s.
                continue;
            }
            let rest = short.get(1..).unwrap_or("");
            let rest = rest.strip_prefix('=').unwrap_or(rest);
            let value = if rest.is_empty() {
                let v = words.get(i).copied();
                i += usize::from(v.is_some());
                v
            } else {
                Some(rest)
            };
            (short_name(letter), value)
        } else {
            // The script or program: what follows is its own.
            break;
        };
        record(&mut found, name, value, (start, i));
    }
    found
}

/// Whether `--long` of `command` (the line's first word) takes the next
/// word as its value.
fn takes_value(command: &str, long: &str) -> bool {
    LONG_WITH_VALUE.contains(&long)
        || (long == "wait" && command.rsplit('/').next() == Some("srun"))
}

fn short_name(letter: u8) -> &'static str {
    match letter {
        b'A' => "account",
        b'a' => "array",
        b'G' => "gpus",
        b'N' => "nodes",
        b'n' => "ntasks",
        b'p' => "partition",
        b'q' => "qos",
        _ => "",
    }
}

fn record(found: &mut SubmittedOptions, name: &str, value: Option<&str>, span: (usize, usize)) {
    let text = || value.map(str::to_owned);
    let gres_items = |prefix: &str| -> Vec<String> {
        value
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none"))
            .map(|s| format!("{prefix}{s}"))
            .collect()
    };
    let gpu_list = match name {
        "gres" => Some(("gres:", &mut found.per_node)),
        "gpus-per-node" => Some(("gres:gpu:", &mut found.per_node)),
        "gpus" => Some(("gres:gpu:", &mut found.per_job)),
        "gpus-per-task" => Some(("gres:gpu:", &mut found.per_task)),
        "gpus-per-socket" => Some(("gres:gpu:", &mut found.per_socket)),
        _ => None,
    };
    if let Some((prefix, list)) = gpu_list {
        let items = gres_items(prefix);
        match name {
            "gres" => found.gres_gpu = Some(items.iter().any(|i| names_gpu(i))),
            "gpus-per-node" => found.gpus_per_node = true,
            _ => {}
        }
        list.extend(items);
        if found.gpu_tokens.is_none() {
            found.gpu_tokens = Some(span);
        }
        found.gpu_spans.push(span);
        return;
    }
    if name == "qos" {
        found.qos_spans.push(span);
    }
    match name {
        "qos" => found.qos = text(),
        "partition" => found.partition = text(),
        "account" => found.account = text(),
        "array" => found.array = text(),
        "reservation" => found.reservation = text(),
        "ntasks" => found.ntasks = value.and_then(|v| v.trim().parse().ok()),
        "ntasks-per-gpu" | "ntasks-per-tres" => {
            found.ntasks_per_gpu = value.and_then(|v| v.trim().parse().ok());
        }
        "nodes" => found.nodes = value.and_then(node_range),
        "requeue" => found.requeue = Some(true),
        "no-requeue" => found.requeue = Some(false),
        "open-mode" => found.open_mode_set = true,
        "exclusive" => found.exclusive_user = value.is_some_and(|v| v.eq_ignore_ascii_case("user")),
        _ => {}
    }
}

/// `-N 2` or `-N 2-4` as (fewest, most).
fn node_range(value: &str) -> Option<(u32, u32)> {
    let value = value.trim();
    match value.split_once('-') {
        Some((min, max)) => Some((min.trim().parse().ok()?, max.trim().parse().ok()?)),
        None => value.parse().ok().map(|n| (n, n)),
    }
}

/// Whether a `gres:NAME[:TYPE][:N]` item asks for `gpu` (Slurm compares
/// GRES names without regard to case).
fn names_gpu(item: &str) -> bool {
    let body = item.get(5..).unwrap_or("");
    let name = body.split([':', '=']).next().unwrap_or("");
    name.eq_ignore_ascii_case("gpu")
}

/// The options of a batch script's directives, as sbatch reads them
/// (`_opt_batch_script` in sbatch/opt.c, 22.05 to 26.05): the lines that
/// start with `#SBATCH` (or the old `#SLURM`), all taken as one command
/// line, up to the first line that is neither blank nor a comment.
pub fn parse_script(script: &str) -> SubmittedOptions {
    let mut line = String::from("sbatch");
    for text in script.lines() {
        let directive = text
            .strip_prefix("#SBATCH")
            .or_else(|| text.strip_prefix("#SLURM"));
        match directive {
            Some(options) => {
                line.push(' ');
                line.push_str(options);
            }
            None if text.trim_start().is_empty() || text.trim_start().starts_with('#') => {}
            None => break,
        }
    }
    parse(&line)
}

/// Which option the user typed for the GPUs of `tres_per_node`, from the
/// submission line and the batch script: an option on the line replaces
/// the script's. `Unknown` where neither says, or both options ask for
/// GPUs (the clients refuse that themselves from 26.05:
/// `_validate_gres_vs_gpus_per_node` in slurm_opt.c), or the request came another
/// way (`SBATCH_GRES`, `SBATCH_GPUS_PER_NODE`, slurmrestd).
pub fn per_node_spelling(line: Option<&str>, script: Option<&str>) -> PerNodeSpelling {
    let line = line.map(parse).unwrap_or_default();
    let script = script.map(parse_script).unwrap_or_default();
    SubmittedOptions {
        gres_gpu: line.gres_gpu.or(script.gres_gpu),
        gpus_per_node: line.gpus_per_node || script.gpus_per_node,
        ..SubmittedOptions::default()
    }
    .per_node_spelling()
}

/// The line with the first GPU option's words replaced by `instead`
/// (`None` when the line has no GPU option to replace).
pub fn with_replaced_gpu_option(
    line: &str,
    found: &SubmittedOptions,
    instead: &str,
) -> Option<String> {
    let (start, end) = found.gpu_tokens?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let before = words.get(..start)?;
    let after = words.get(end..)?;
    let mut out: Vec<&str> = before.to_vec();
    out.push(instead);
    out.extend(after);
    Some(out.join(" "))
}

/// The command a line ran: `sbatch`, `srun` or `salloc` (a path to one
/// is named by its name), else `sbatch`.
pub fn command_of(line: &str) -> &'static str {
    let first = line.split_whitespace().next().unwrap_or("");
    let name = first.rsplit('/').next().unwrap_or(first);
    ["srun", "salloc"]
        .into_iter()
        .find(|c| *c == name)
        .unwrap_or("sbatch")
}

/// What a [`Retyped`] line leaves to its reader, in words.
pub const REST_OF_THE_JOB: &str =
    "with the job's other options and its script, as its user gave them (not repeated here)";

/// A command line to offer for pasting, rebuilt from what Slurm parsed
/// (a job's record, the options of its line), never from the line's own
/// words: Slurm joins a command's arguments with spaces, unquoted, so
/// its `SubmitLine` is not the command the job ran. Each word is quoted
/// for a POSIX shell ([`shell_word`]); a value holding a control
/// character is left out, as the rest of the job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retyped {
    words: Vec<String>,
}

impl Retyped {
    /// A line of `command` ([`command_of`]).
    pub fn new(command: &str) -> Self {
        Self {
            words: vec![command.to_owned()],
        }
    }

    /// `word` as it is (an option the caller wrote whole).
    pub fn word(&mut self, word: &str) -> &mut Self {
        self.words.push(word.to_owned());
        self
    }

    /// `--name=value`, where `value` is given and not blank.
    pub fn option(&mut self, name: &str, value: Option<&str>) -> &mut Self {
        if let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) {
            self.words.push(format!("--{name}={v}"));
        }
        self
    }

    /// The line, each word quoted; the words that cannot be offered left
    /// out.
    pub fn line(&self) -> String {
        let words: Vec<String> = self.words.iter().filter_map(|w| shell_word(w)).collect();
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_with_a_value_in_the_next_word_and_without() {
        // Optional arguments are only ever attached: the next word is the
        // next option, whose GPUs must not be lost.
        for flag in ["--nice", "--propagate", "--get-user-env", "--stepmgr"] {
            let o = parse(&format!("sbatch {flag} --gres=gpu:2 job.sh"));
            assert_eq!(o.per_node, vec!["gres:gpu:2"], "{flag}");
        }
        let o = parse("sbatch --wait --gpus-per-node=2 job.sh");
        assert_eq!(o.per_node, vec!["gres:gpu:2"]);
        // Required ones take the next word, whichever release named them.
        let o = parse(
            "srun --wait 30 --mpi pmix --runtime oci --container-type oci \
             --cpu-bind cores --gres gpu:a40:1 prog",
        );
        assert_eq!(o.per_node, vec!["gres:gpu:a40:1"]);
        let o = parse("/usr/bin/srun --tres-bind gres/gpu:single:1 --gpus 2 prog");
        assert_eq!(o.per_job, vec!["gres:gpu:2"]);
    }

    #[test]
    fn both_forms_of_each_option() {
        let o = parse("sbatch --gres=gpu:2 -q lowprio --partition gpu -A phys --array=1-4 job.sh");
        assert_eq!(o.per_node, vec!["gres:gpu:2"]);
        assert_eq!(o.qos.as_deref(), Some("lowprio"));
        assert_eq!(o.partition.as_deref(), Some("gpu"));
        assert_eq!(o.account.as_deref(), Some("phys"));
        assert_eq!(o.array.as_deref(), Some("1-4"));
        let o =
            parse("sbatch --gres gpu:a40:1,mps:50 --qos=g -pdebug -G a100:2 --gpus-per-task=1 x");
        assert_eq!(o.per_node, vec!["gres:gpu:a40:1", "gres:mps:50"]);
        assert_eq!(o.per_job, vec!["gres:gpu:a100:2"]);
        assert_eq!(o.per_task, vec!["gres:gpu:1"]);
        assert_eq!(o.partition.as_deref(), Some("debug"));
        assert_eq!(o.gpu_tokens, Some((1, 3)));
        let o =
            parse("srun --gpus-per-node=a40:2 -G2 -a 0-9%2 --exclusive=user --no-requeue hostname");
        assert_eq!(o.per_node, vec!["gres:gpu:a40:2"]);
        assert_eq!(o.per_job, vec!["gres:gpu:2"]);
        assert_eq!(o.array.as_deref(), Some("0-9%2"));
        assert!(o.exclusive_user);
        assert_eq!(o.requeue, Some(false));
    }

    #[test]
    fn script_arguments_are_not_options() {
        let o = parse("sbatch -t 10 --exclusive job.sh --gres=gpu:4 -q other");
        assert!(!o.asks_gres());
        assert_eq!(o.qos, None);
        assert!(!o.exclusive_user);
        let o = parse("sbatch --wrap=python train.py --gres=gpu:2");
        assert!(!o.asks_gres());
        let o = parse("sbatch -- --gres=gpu:2");
        assert!(!o.asks_gres());
    }

    #[test]
    fn odd_text_never_panics() {
        for line in [
            "",
            " ",
            "sbatch",
            "sbatch -",
            "sbatch --",
            "sbatch --gres",
            "sbatch --gres=",
            "sbatch -G",
            "sbatch -q",
            "sbatch --=",
            "sbatch -é --gres=gpu:é:2 ünï",
            "sbatch --gres=,,, --gpus=none",
            "sbatch -pé",
            "sbatch --ntasks=9999999999999",
            "sbatch \u{0}\u{1} --qos=\u{7f}",
        ] {
            let o = parse(line);
            let _ = with_replaced_gpu_option(line, &o, "--gres=gpu:a40:2");
        }
        assert!(!parse("sbatch --gres=,,, --gpus=none").asks_gres());
        assert_eq!(parse("sbatch --ntasks=9999999999999").ntasks, None);
        assert_eq!(parse("sbatch -q").qos, None);
    }

    #[test]
    fn the_spelling_is_what_the_user_typed_on_the_line_or_in_the_script() {
        use PerNodeSpelling::{GpusPerNode, Gres, Unknown};
        let spelling = per_node_spelling;
        assert_eq!(spelling(Some("sbatch --gres=gpu:2 job.sh"), None), Gres);
        assert_eq!(spelling(Some("sbatch --gres GPU job.sh"), None), Gres);
        assert_eq!(
            spelling(Some("srun --gpus-per-node=2 hostname"), None),
            GpusPerNode
        );
        assert_eq!(
            spelling(Some("salloc --gpus-per-node 2"), None),
            GpusPerNode
        );
        // A --gres of shares only is not the GPUs' spelling.
        assert_eq!(
            spelling(Some("sbatch --gres=mps:50 --gpus-per-node=1 x"), None),
            GpusPerNode
        );
        assert_eq!(
            spelling(Some("sbatch --gres=gpu:1 --gpus-per-node=1 x"), None),
            Unknown
        );
        assert_eq!(spelling(Some("sbatch job.sh --gres=gpu:2"), None), Unknown);
        assert_eq!(spelling(None, None), Unknown);
        let script = "#!/bin/bash\n#SBATCH -t 5\n\n  # note\n#SBATCH --gpus-per-node=2\n\
                      hostname\n#SBATCH --gres=gpu:1\n";
        assert_eq!(spelling(Some("sbatch job.sh"), Some(script)), GpusPerNode);
        assert_eq!(spelling(None, Some("#SLURM --gres=gpu:a40:1\n")), Gres);
        // The line's --gres replaces the script's.
        let script = "#!/bin/sh\n#SBATCH --gres=gpu:2 --gpus-per-node=2\n";
        assert_eq!(spelling(None, Some(script)), Unknown);
        assert_eq!(
            spelling(Some("sbatch --gres=mps:10 job.sh"), Some(script)),
            GpusPerNode
        );
        // Text that only looks like a directive.
        assert_eq!(spelling(None, Some(" #SBATCH --gres=gpu:2\n")), Unknown);
        for odd in [
            "",
            "#SBATCH",
            "#SBATCH --gres",
            "#SBATCH --gres=\u{0}é",
            "\n\n#SLURM -",
        ] {
            let _ = spelling(Some(odd), Some(odd));
        }
        // A user's script of a million bytes of directives (the plugin
        // reads its first 64 KiB, and only for a refusal or a warning).
        let huge = "#SBATCH --gpus-per-node=1\n".repeat(40_000);
        assert_eq!(spelling(None, Some(&huge)), GpusPerNode);
    }

    #[test]
    fn the_suggestion_takes_the_options_place() {
        let line = "sbatch -q g --gres gpu:2 -t 5 job.sh";
        let o = parse(line);
        assert_eq!(
            with_replaced_gpu_option(line, &o, "--gres=gpu:a40:2").as_deref(),
            Some("sbatch -q g --gres=gpu:a40:2 -t 5 job.sh")
        );
        let line = "sbatch -q g job.sh";
        assert_eq!(with_replaced_gpu_option(line, &parse(line), "x"), None);
    }

    #[test]
    fn a_retyped_line_is_quoted_and_leaves_control_characters_out() {
        assert_eq!(command_of("/usr/bin/srun -n 2 x"), "srun");
        assert_eq!(command_of("salloc"), "salloc");
        assert_eq!(command_of("sbatch x"), "sbatch");
        assert_eq!(command_of("rm -rf /"), "sbatch");
        assert_eq!(command_of(""), "sbatch");
        let mut r = Retyped::new("sbatch");
        r.word("--gres=gpu:a40:1")
            .option("partition", Some("gpu"))
            .option("qos", Some(" "))
            .option("account", None)
            .option("reservation", Some("x;$(id)"))
            .option("array", Some("1-4\x1b"))
            .option("comment", Some("a\u{1b}[2J"));
        assert_eq!(
            r.line(),
            "sbatch --gres=gpu:a40:1 --partition=gpu '--reservation=x;$(id)'"
        );
    }
}
