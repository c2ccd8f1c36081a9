//! Every exit status of gpushare's commands and what it means: one table
//! per command and subcommand (`gpu-qos check`, `gpu-mps disable`,
//! `gpu-mps-prolog`, ...). The programs return these and no number of
//! their own; their help and man pages say each table's [`Table::sentence`],
//! and the docs' exit statuses are held to it (gpushare-admin's
//! `exit_docs` tests). slurmd drains a node whose prolog or epilog exits
//! non-zero, so theirs are the node's contract with Slurm.

use std::process::ExitCode;

/// One exit status: its number and what it means, in the words the help
/// and the docs use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: u8,
    pub meaning: &'static str,
}

impl Exit {
    const fn new(code: u8, meaning: &'static str) -> Self {
        Self { code, meaning }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code)
    }
}

/// The exit statuses of one command, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// The command as typed: `gpu-qos check`, `gpu-mps-prolog`.
    pub command: &'static str,
    pub statuses: &'static [Exit],
}

impl Table {
    /// The status `code` means in this command, if it has one.
    pub fn get(&self, code: u8) -> Option<Exit> {
        self.statuses.iter().copied().find(|e| e.code == code)
    }

    /// What its help says: `Exit status: 0 told, 2 could not read.`
    /// (items apart by `;` where a meaning holds a comma).
    pub fn sentence(&self) -> String {
        let comma = self.statuses.iter().any(|e| e.meaning.contains(','));
        let items: Vec<String> = self
            .statuses
            .iter()
            .map(|e| format!("{} {}", e.code, e.meaning))
            .collect();
        format!(
            "Exit status: {}.",
            items.join(if comma { "; " } else { ", " })
        )
    }
}

/// `gpu-qos` and its commands. Every command exits 2 on a misused command
/// line (clap's status), which each "could not" covers.
pub mod gpu_qos {
    use super::{Exit, Table};

    /// Told, printed: the command did what it was asked.
    pub const TOLD: Exit = Exit::new(0, "told");
    pub const UNREAD: Exit = Exit::new(2, "could not read");

    pub const CHECK_CONSISTENT: Exit = Exit::new(0, "consistent (warnings and notes allowed)");
    pub const CHECK_ERRORS: Exit = Exit::new(1, "at least one error");
    pub const CHECK_UNCHECKED: Exit = Exit::new(2, "could not check");
    pub const GENERATE_PRINTED: Exit = Exit::new(0, "printed");
    pub const AUDIT_CLEAN: Exit = Exit::new(0, "clean");
    pub const AUDIT_FOUND: Exit = Exit::new(1, "findings at or above --fail-on");
    pub const WHY_UNREAD: Exit = Exit::new(2, "could not read the job");
    pub const REPLAYED: Exit = Exit::new(0, "replayed");
    pub const METRICS_WRITTEN: Exit = Exit::new(0, "written");
    pub const METRICS_UNWRITTEN: Exit = Exit::new(2, "could not read or write");
    pub const METRICS_NOWHERE: Exit = Exit::new(
        3,
        "nowhere to write (--write without FILE: gpu_qos.conf names no MetricsFile=, or \
         its directory does not exist; one line says which)",
    );

    pub const GPU_QOS: Table = Table {
        command: "gpu-qos",
        statuses: &[
            Exit::new(0, "fine"),
            Exit::new(
                1,
                "check found an error, or audit a finding at or above --fail-on",
            ),
            Exit::new(
                2,
                "could not run (bad arguments, an invalid or unreadable gpu_qos.conf, a Slurm \
                 command missing or failing)",
            ),
            Exit::new(3, "metrics --write has nowhere to write"),
        ],
    };
    pub const CHECK: Table = Table {
        command: "gpu-qos check",
        statuses: &[CHECK_CONSISTENT, CHECK_ERRORS, CHECK_UNCHECKED],
    };
    pub const GENERATE: Table = Table {
        command: "gpu-qos generate",
        statuses: &[GENERATE_PRINTED, UNREAD],
    };
    pub const AUDIT: Table = Table {
        command: "gpu-qos audit",
        statuses: &[AUDIT_CLEAN, AUDIT_FOUND, UNREAD],
    };
    pub const USAGE: Table = Table {
        command: "gpu-qos usage",
        statuses: &[TOLD, UNREAD],
    };
    pub const WHY: Table = Table {
        command: "gpu-qos why",
        statuses: &[TOLD, WHY_UNREAD],
    };
    pub const REPLAY: Table = Table {
        command: "gpu-qos replay",
        statuses: &[REPLAYED, UNREAD],
    };
    pub const ADVISE: Table = Table {
        command: "gpu-qos advise",
        statuses: &[TOLD, UNREAD],
    };
    pub const METRICS: Table = Table {
        command: "gpu-qos metrics",
        statuses: &[METRICS_WRITTEN, METRICS_UNWRITTEN, METRICS_NOWHERE],
    };
}

/// `gpu-mps` and its commands: each exits 2 when it could not run (a
/// misused command line, not root, no gpu_mps.conf, one that does not
/// parse, a state that cannot be read).
pub mod gpu_mps {
    use super::{Exit, Table};

    pub const DONE: Exit = Exit::new(0, "done");
    pub const COULD_NOT_RUN: Exit = Exit::new(2, "could not run");

    pub const STATUS_FINE: Exit = Exit::new(0, "fine");
    pub const STATUS_PROBLEM: Exit = Exit::new(
        1,
        "a problem shown (OVERLAP, OVER, a lost or set-aside state, a ledger that cannot be \
         read)",
    );
    pub const METRICS_DONE: Exit = Exit::new(0, "printed or written");
    pub const NOTHING_HERE: Exit = Exit::new(3, "no gpu_mps.conf applies to this node");
    pub const GC_DONE: Exit = Exit::new(0, "every running share accounted for");
    pub const GC_UNKNOWN: Exit = Exit::new(
        1,
        "a lost state kept: some running share jobs are not in the ledger",
    );
    pub const DISABLE_DONE: Exit = Exit::new(0, "nothing of gpushare's left on this node");
    pub const DISABLE_LEFT: Exit = Exit::new(
        1,
        "shares still run, or something is left to do (run it again)",
    );
    pub const SELFTEST_PASSED: Exit = Exit::new(0, "every GPU tested passed");
    pub const SELFTEST_FAILED: Exit = Exit::new(1, "a GPU failed");
    pub const SELFTEST_UNRUN: Exit = Exit::new(2, "the test could not run");
    pub const SELFTEST_SKIPPED: Exit = Exit::new(
        3,
        "none failed but some were skipped (shares or a whole-GPU job run there)",
    );
    pub const CONFIG_PRINTED: Exit = Exit::new(0, "printed");
    pub const HEALTHY: Exit = Exit::new(0, "healthy (or no gpu_mps.conf applies here)");
    pub const UNHEALTHY: Exit = Exit::new(
        1,
        "a problem (--drain: the node drained, unless Slurm holds it unhealthy already)",
    );

    pub const GPU_MPS: Table = Table {
        command: "gpu-mps",
        statuses: &[
            Exit::new(0, "fine"),
            Exit::new(
                1,
                "a problem shown or work left (status, gc, disable, health), a GPU failed \
                 (selftest)",
            ),
            COULD_NOT_RUN,
            Exit::new(
                3,
                "nothing to do (metrics: no gpu_mps.conf applies to this node), GPUs skipped \
                 (selftest)",
            ),
        ],
    };
    pub const STATUS: Table = Table {
        command: "gpu-mps status",
        statuses: &[STATUS_FINE, STATUS_PROBLEM, COULD_NOT_RUN],
    };
    pub const METRICS: Table = Table {
        command: "gpu-mps metrics",
        statuses: &[METRICS_DONE, COULD_NOT_RUN, NOTHING_HERE],
    };
    pub const GC: Table = Table {
        command: "gpu-mps gc",
        statuses: &[GC_DONE, GC_UNKNOWN, COULD_NOT_RUN],
    };
    pub const DRAIN_GPU: Table = Table {
        command: "gpu-mps drain-gpu",
        statuses: &[DONE, COULD_NOT_RUN],
    };
    pub const RESUME_GPU: Table = Table {
        command: "gpu-mps resume-gpu",
        statuses: &[DONE, COULD_NOT_RUN],
    };
    pub const DISABLE: Table = Table {
        command: "gpu-mps disable",
        statuses: &[DISABLE_DONE, DISABLE_LEFT, COULD_NOT_RUN],
    };
    pub const ENABLE: Table = Table {
        command: "gpu-mps enable",
        statuses: &[DONE, COULD_NOT_RUN],
    };
    pub const SELFTEST: Table = Table {
        command: "gpu-mps selftest",
        statuses: &[
            SELFTEST_PASSED,
            SELFTEST_FAILED,
            SELFTEST_UNRUN,
            SELFTEST_SKIPPED,
        ],
    };
    pub const CONFIG: Table = Table {
        command: "gpu-mps config",
        statuses: &[CONFIG_PRINTED, COULD_NOT_RUN],
    };
    pub const HEALTH: Table = Table {
        command: "gpu-mps health",
        statuses: &[HEALTHY, UNHEALTHY, COULD_NOT_RUN],
    };
}

/// The programs slurmd runs: a non-zero status drains the node, so only
/// a node unfit for sharing exits 1.
pub mod node {
    use super::{Exit, Table};

    pub const PROLOG_START: Exit = Exit::new(
        0,
        "the job may start (a share refused for the job's own reasons exits 0 too: the job \
         fails, not the node)",
    );
    pub const PROLOG_UNFIT: Exit = Exit::new(
        1,
        "the node is unfit for GPU sharing (slurmd drains it; syslog says why)",
    );
    pub const EPILOG_DONE: Exit = Exit::new(
        0,
        "done (a share refused and never placed holds nothing to release)",
    );
    pub const EPILOG_UNRELEASED: Exit = Exit::new(
        1,
        "the node cannot release the share (slurmd drains it; syslog says why)",
    );
    pub const MISUSED: Exit = Exit::new(2, "run without a job's environment");

    pub const PROLOG: Table = Table {
        command: "gpu-mps-prolog",
        statuses: &[PROLOG_START, PROLOG_UNFIT, MISUSED],
    };
    pub const EPILOG: Table = Table {
        command: "gpu-mps-epilog",
        statuses: &[EPILOG_DONE, EPILOG_UNRELEASED, MISUSED],
    };
}

/// `gpushare-man`, which make install runs.
pub mod man {
    use super::{Exit, Table};

    pub const WRITTEN: Exit = Exit::new(0, "written");
    pub const UNWRITTEN: Exit = Exit::new(1, "could not write");
    pub const MISUSED: Exit = Exit::new(2, "bad arguments");

    pub const GPUSHARE_MAN: Table = Table {
        command: "gpushare-man",
        statuses: &[WRITTEN, UNWRITTEN, MISUSED],
    };
}

/// Every table, for the help's and the docs' tests.
pub const TABLES: &[Table] = &[
    gpu_qos::GPU_QOS,
    gpu_qos::CHECK,
    gpu_qos::GENERATE,
    gpu_qos::AUDIT,
    gpu_qos::USAGE,
    gpu_qos::WHY,
    gpu_qos::REPLAY,
    gpu_qos::ADVISE,
    gpu_qos::METRICS,
    gpu_mps::GPU_MPS,
    gpu_mps::STATUS,
    gpu_mps::METRICS,
    gpu_mps::GC,
    gpu_mps::DRAIN_GPU,
    gpu_mps::RESUME_GPU,
    gpu_mps::DISABLE,
    gpu_mps::ENABLE,
    gpu_mps::HEALTH,
    gpu_mps::SELFTEST,
    gpu_mps::CONFIG,
    node::PROLOG,
    node::EPILOG,
    man::GPUSHARE_MAN,
];

/// The table of `command` (`gpu-mps disable`), if it has one.
pub fn table(command: &str) -> Option<&'static Table> {
    TABLES.iter().find(|t| t.command == command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_table_is_in_order_starts_at_0_and_names_each_command_once() {
        for (i, t) in TABLES.iter().enumerate() {
            let codes: Vec<u8> = t.statuses.iter().map(|e| e.code).collect();
            assert_eq!(codes.first(), Some(&0), "{}", t.command);
            assert!(codes.windows(2).all(|w| w[0] < w[1]), "{}", t.command);
            assert!(
                TABLES[..i].iter().all(|u| u.command != t.command),
                "{}",
                t.command
            );
        }
    }

    #[test]
    fn the_sentence_lists_each_status() {
        assert_eq!(
            gpu_qos::USAGE.sentence(),
            "Exit status: 0 told, 2 could not read."
        );
        // A meaning with a comma: items apart by `;`.
        assert!(gpu_qos::GPU_QOS
            .sentence()
            .starts_with("Exit status: 0 fine; 1 check found an error, or audit"));
        assert_eq!(
            table("gpu-mps gc").map(|t| t.get(1)),
            Some(Some(gpu_mps::GC_UNKNOWN))
        );
    }
}
