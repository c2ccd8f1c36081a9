//! The command line to type instead: the job's own (`SubmitLine`) with
//! its GPU request replaced, read as replay and the plugin read it
//! ([`crate::qos::submit_line`]); else the one option.

use serde::Serialize;

use crate::qos::submit_line::{parse, with_gpu_options_replaced, without_qos};

/// Where an advised line comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineFrom {
    /// The job's `SubmitLine`, its GPU options replaced by the advised
    /// one.
    SubmitLine,
    /// The job's `SubmitLine`, which asks for no GPU (the request is in
    /// the script's `#SBATCH` lines): the option added after the command;
    /// the script's own request must go.
    SubmitLineAdded,
    /// No `SubmitLine` recorded: `sbatch` and the option.
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
/// in place of what `submit_line` asked, without its `--qos` where
/// `drop_qos`. Other GRES the line's `--gres` named (`tmpdisk:10`) stay
/// beside the advised one.
pub fn advised_line(submit_line: Option<&str>, option: &str, drop_qos: bool) -> (String, LineFrom) {
    let Some(line) = submit_line.map(str::trim).filter(|l| !l.is_empty()) else {
        return (format!("sbatch {option}"), LineFrom::Minimal);
    };
    let kept;
    let line = if drop_qos {
        kept = without_qos(line, &parse(line));
        kept.as_str()
    } else {
        line
    };
    let found = parse(line);
    let others: Vec<&str> = found
        .per_node
        .iter()
        .filter_map(|i| i.strip_prefix("gres:"))
        .filter(|i| !is_gpu_item(i))
        .collect();
    let option = match option.strip_prefix("--gres=") {
        Some(value) if !others.is_empty() => format!("--gres={value},{}", others.join(",")),
        _ => option.to_owned(),
    };
    match with_gpu_options_replaced(line, &found, &option) {
        Some(fixed) => (fixed, LineFrom::SubmitLine),
        None => {
            let mut words = line.split_whitespace();
            let command = words.next().unwrap_or("sbatch");
            let rest: Vec<&str> = words.collect();
            let mut out = format!("{command} {option}");
            if !rest.is_empty() {
                out.push(' ');
                out.push_str(&rest.join(" "));
            }
            (out, LineFrom::SubmitLineAdded)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advised_option_takes_the_requests_place() {
        let (line, from) = advised_line(
            Some("sbatch -q normal --gres=gpu:a40:1 -t 10 train.sh --gres=gpu:2"),
            "--gres=mps:20",
            false,
        );
        assert_eq!(
            line,
            "sbatch -q normal --gres=mps:20 -t 10 train.sh --gres=gpu:2"
        );
        assert_eq!(from, LineFrom::SubmitLine);
        let (line, _) = advised_line(
            Some("sbatch --gres=gpu:a40:1,tmpdisk:10 --gpus-per-task=1 -q g x.sh"),
            "--gres=mps:20",
            true,
        );
        assert_eq!(line, "sbatch --gres=mps:20,tmpdisk:10 x.sh");
        let (line, _) = advised_line(
            Some("srun --gres mps:50 python a.py"),
            "--gres=mps:25",
            true,
        );
        assert_eq!(line, "srun --gres=mps:25 python a.py");
        let (line, from) = advised_line(Some("sbatch -t 5 job.sh"), "--gres=mps:25", false);
        assert_eq!(
            (line.as_str(), from),
            (
                "sbatch --gres=mps:25 -t 5 job.sh",
                LineFrom::SubmitLineAdded
            )
        );
        assert_eq!(
            advised_line(None, "--gres=gpu:a40:1", false),
            ("sbatch --gres=gpu:a40:1".to_owned(), LineFrom::Minimal)
        );
        assert_eq!(
            advised_line(Some("  "), "--gres=mps:5", true).1,
            LineFrom::Minimal
        );
    }
}
