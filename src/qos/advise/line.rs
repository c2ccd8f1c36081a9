//! The command line to type instead, rebuilt from what Slurm parsed:
//! the advised GPU option, the job's partition (and its QOS and
//! reservation where its line named them) from its record, each word
//! quoted ([`crate::qos::submit_line::Retyped`]); never the words of its
//! `SubmitLine`, which Slurm keeps unquoted and which may hold anything
//! its user typed. The rest of the job is said in words.

use serde::Serialize;

use crate::qos::slurm::used::UsedJob;
use crate::qos::submit_line::{command_of, parse, Retyped};
use crate::shared::user_text::is_control;

/// Where an advised line comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineFrom {
    /// The job's `SubmitLine` asks for GPUs: the advised option takes
    /// the place of every GPU option it had.
    SubmitLine,
    /// The job's `SubmitLine`, which asks for no GPU (the request is in
    /// the script's `#SBATCH` lines): the script's own request must go.
    SubmitLineAdded,
    /// No `SubmitLine` recorded: `sbatch`, the option and the partition.
    Minimal,
}

/// Whether a `--gres` item (`gpu:a40:1`, `mps:50`) asks for a GPU or a
/// share of one.
fn is_gpu_item(item: &str) -> bool {
    let name = item.split([':', '=']).next().unwrap_or("");
    ["gpu", "mps", "shard"]
        .iter()
        .any(|k| name.eq_ignore_ascii_case(k))
}

/// The line that asks for `option` (`--gres=mps:20`, `--gres=gpu:a40:1`)
/// for `job`, whose line as accounting recorded it is `submit_line`:
/// its command, the option, its partition, and the QOS (unless
/// `drop_qos`) and reservation its line named, as its record holds
/// them. Other GRES the line's `--gres` named (`tmpdisk:10`) stay beside
/// the advised one.
pub fn advised_line(
    job: &UsedJob,
    submit_line: Option<&str>,
    option: &str,
    drop_qos: bool,
) -> (String, LineFrom) {
    let line = submit_line.map(str::trim).filter(|l| !l.is_empty());
    let found = line.map(parse).unwrap_or_default();
    let others: Vec<&str> = found
        .per_node
        .iter()
        .filter_map(|i| i.strip_prefix("gres:"))
        .filter(|i| !is_gpu_item(i) && !i.chars().any(is_control))
        .collect();
    let option = match option.strip_prefix("--gres=") {
        Some(value) if !others.is_empty() => format!("--gres={value},{}", others.join(",")),
        _ => option.to_owned(),
    };
    // The record's value, else the line's (an older record without it).
    let recorded = |record: &'_ str, typed: Option<&'_ str>| -> Option<String> {
        typed?;
        Some(record)
            .filter(|r| !r.is_empty())
            .or(typed)
            .map(str::to_owned)
    };
    let mut retyped = Retyped::new(line.map_or("sbatch", command_of));
    retyped
        .word(&option)
        .option("partition", Some(job.partition.as_str()))
        .option(
            "qos",
            recorded(&job.qos, found.qos.as_deref())
                .filter(|_| !drop_qos)
                .as_deref(),
        )
        .option(
            "reservation",
            recorded(
                job.reservation.as_deref().unwrap_or(""),
                found.reservation.as_deref(),
            )
            .as_deref(),
        );
    let from = match line {
        None => LineFrom::Minimal,
        Some(_) if found.asks_gres() => LineFrom::SubmitLine,
        Some(_) => LineFrom::SubmitLineAdded,
    };
    (retyped.line(), from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(qos: &str, partition: &str, reservation: Option<&str>) -> UsedJob {
        UsedJob {
            qos: qos.into(),
            partition: partition.into(),
            reservation: reservation.map(str::to_owned),
            ..UsedJob::default()
        }
    }

    #[test]
    fn the_line_is_rebuilt_from_the_record_and_the_advised_option() {
        let j = job("normal", "gpu", None);
        let (line, from) = advised_line(
            &j,
            Some("sbatch -q normal --gres=gpu:a40:1 -t 10 train.sh --gres=gpu:2"),
            "--gres=mps:20",
            false,
        );
        assert_eq!(line, "sbatch --gres=mps:20 --partition=gpu --qos=normal");
        assert_eq!(from, LineFrom::SubmitLine);
        let (line, _) = advised_line(
            &job("g", "gpu", Some("shared")),
            Some("sbatch --gres=gpu:a40:1,tmpdisk:10 --gpus-per-task=1 -q g x.sh"),
            "--gres=mps:20",
            true,
        );
        assert_eq!(line, "sbatch --gres=mps:20,tmpdisk:10 --partition=gpu");
        let (line, _) = advised_line(
            &job("normal", "gpu", Some("shared")),
            Some("/usr/bin/srun --gres mps:50 --reservation=shared python a.py"),
            "--gres=mps:25",
            true,
        );
        assert_eq!(
            line,
            "srun --gres=mps:25 --partition=gpu --reservation=shared"
        );
        let (line, from) = advised_line(&j, Some("sbatch -t 5 job.sh"), "--gres=mps:25", false);
        assert_eq!(
            (line.as_str(), from),
            (
                "sbatch --gres=mps:25 --partition=gpu",
                LineFrom::SubmitLineAdded
            )
        );
        assert_eq!(
            advised_line(&job("", "", None), None, "--gres=gpu:a40:1", false),
            ("sbatch --gres=gpu:a40:1".to_owned(), LineFrom::Minimal)
        );
        assert_eq!(
            advised_line(&j, Some("  "), "--gres=mps:5", true).1,
            LineFrom::Minimal
        );
        // A record without the QOS the line named: the line's, quoted.
        let (line, _) = advised_line(
            &job("", "gpu", None),
            Some("sbatch --qos=a&&b --gres=gpu:1,x\u{1b}y:1 j.sh"),
            "--gres=mps:5",
            false,
        );
        assert_eq!(line, "sbatch --gres=mps:5 --partition=gpu '--qos=a&&b'");
    }
}
