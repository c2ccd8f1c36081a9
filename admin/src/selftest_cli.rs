//! `gpu-mps selftest`: each idle GPU's MPS limits proven by a CUDA
//! client (`gpushare::mps::node::on_idle_gpu`), printed as a table or
//! JSON, and written as a Markdown report where asked.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use gpushare::mps::node::{keep_selftest, on_idle_gpu, Node, SelfTestOutcome};
use gpushare::mps::selftest::{self, report_rows, GpuCheck};
use gpushare::shared::exit_status::{gpu_mps as exit, Exit};
use serde::Serialize;

/// One GPU's line of the JSON answer.
#[derive(Debug, Serialize)]
struct GpuResult {
    gpu: u32,
    /// `pass`, `fail` or `skipped`.
    result: &'static str,
    /// Why it failed or was skipped, in words.
    why: Vec<String>,
    /// What the clients saw, where they ran.
    check: Option<GpuCheck>,
    /// A set-aside taken or given back.
    changed: Option<String>,
}

#[derive(Debug, Serialize)]
struct Answer {
    library: String,
    user: String,
    units: u32,
    gpus: Vec<GpuResult>,
}

/// What the admin asked to test.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// The GPUs (every GPU of the node where empty).
    pub gpus: &'a [u32],
    /// The share the client stands for (default a quarter of a GPU).
    pub units: Option<u32>,
    /// Each client's deadline.
    pub timeout: std::time::Duration,
}

/// Runs the test as `asked` on `node` (opened by root), the MPS pipes
/// guarded as the prolog keeps them (the test's user is let through
/// while it runs).
pub fn run(mut node: Node, asked: &Asked<'_>, json: bool, report: Option<&Path>) -> Result<Exit> {
    node.pipe_guard = Some(gpushare_node::acl::allow_traverse);
    // The GPUs' memory, as a share's prolog takes it (kept facts, else
    // NVML): a proportional memory limit needs it to be tested at all.
    if let Some(ask) = gpushare::mps::node::mains::nvml_ask(&node.cfg, true).filter(|a| a.memory) {
        if let Ok(facts) = gpushare_node::gpu_facts::read(&node.cfg.state_dir) {
            let seen =
                gpushare_node::gpu_facts::seen(&facts.gpus, ask, |m| node.gpus_of_minors(&[m]));
            if let Some(mib) = seen.memory_mib {
                node.set_gpu_memory(mib);
            }
        }
    }
    let node = &node;
    let Asked {
        gpus,
        units,
        timeout,
    } = *asked;
    let cfg = &node.cfg;
    let units = units.unwrap_or((cfg.units_per_gpu / 4).max(1));
    if units == 0 || units > cfg.units_per_gpu {
        anyhow::bail!(
            "--units must be from 1 to UnitsPerGPU ({})",
            cfg.units_per_gpu
        );
    }
    if let Some(bad) = gpus.iter().find(|&&g| g >= node.gpu_count) {
        anyhow::bail!(
            "GPU {bad}: the node lists {} GPUs (0 to {}) in GPUDevices",
            node.gpu_count,
            node.gpu_count.saturating_sub(1)
        );
    }
    let user = selftest::user(&cfg.self_test_user).map_err(anyhow::Error::msg)?;
    let exe = std::env::current_exe().context("this program's own path")?;
    let chosen: Vec<u32> = if gpus.is_empty() {
        (0..node.gpu_count).collect()
    } else {
        gpus.to_vec()
    };
    let mut results = Vec::new();
    for gpu in chosen {
        let outcome = on_idle_gpu(node, gpu, &exe, &user, units, timeout);
        results.push(result_of(node, gpu, outcome));
    }
    let answer = Answer {
        library: cfg.cuda_library.display().to_string(),
        user: user.name.clone(),
        units,
        gpus: results,
    };
    if json {
        println!("{}", serde_json::to_string(&answer)?);
    } else {
        print!("{}", table(&answer));
    }
    if let Some(path) = report {
        std::fs::write(path, markdown(&answer)).with_context(|| format!("{}", path.display()))?;
    }
    let any = |word: &str| answer.gpus.iter().any(|g| g.result == word);
    Ok(if any("fail") {
        exit::SELFTEST_FAILED
    } else if any("skipped") {
        exit::SELFTEST_SKIPPED
    } else {
        exit::SELFTEST_PASSED
    })
}

fn result_of(node: &Node, gpu: u32, outcome: SelfTestOutcome) -> GpuResult {
    let (result, why, check) = match outcome {
        SelfTestOutcome::Checked(check) => {
            let word = if check.verdict.passed() {
                "pass"
            } else {
                "fail"
            };
            (word, check.verdict.failures.clone(), Some(*check))
        }
        SelfTestOutcome::Skipped(why) => ("skipped", vec![why], None),
        SelfTestOutcome::DaemonFailed(why) => ("fail", vec![why], None),
    };
    // A skipped GPU keeps its last result; a tested one gets this one.
    let changed = (result != "skipped")
        .then(|| {
            let verdict = selftest::Verdict {
                failures: why.clone(),
                notes: Vec::new(),
            };
            keep_selftest(node, gpu, &verdict).unwrap_or_else(Some)
        })
        .flatten();
    GpuResult {
        gpu,
        result,
        why,
        check,
        changed,
    }
}

/// The answer for a terminal: a line per GPU, then its failures and notes.
fn table(answer: &Answer) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "MPS self-test: a share of {} units, as user {}, with {}",
        answer.units, answer.user, answer.library
    );
    for g in &answer.gpus {
        let ms = g.check.as_ref().map(|c| format!(" ({} ms)", c.ms));
        let _ = writeln!(
            out,
            "GPU {}: {}{}",
            g.gpu,
            g.result.to_uppercase(),
            ms.unwrap_or_default()
        );
        for why in &g.why {
            let _ = writeln!(out, "  {why}");
        }
        if let Some(check) = &g.check {
            for note in &check.verdict.notes {
                let _ = writeln!(out, "  ok: {note}");
            }
        }
        if let Some(changed) = &g.changed {
            let _ = writeln!(out, "  {changed}");
        }
    }
    out
}

/// The answer as a Markdown report, as `make hw-check` writes its own.
fn markdown(answer: &Answer) -> String {
    let mut out = String::from("# gpu-mps selftest\n\n");
    let _ = writeln!(
        out,
        "A share of {} units, client run as `{}`, driver library `{}`.\n",
        answer.units, answer.user, answer.library
    );
    if let Some(driver) = answer.gpus.iter().find_map(|g| {
        g.check
            .as_ref()
            .and_then(|c| c.share.driver.or(c.bypass.driver))
    }) {
        let _ = writeln!(
            out,
            "CUDA driver version {}.{}.\n",
            driver / 1000,
            (driver % 1000) / 10
        );
    }
    out.push_str("| GPU | result | what |\n|---|---|---|\n");
    for g in &answer.gpus {
        match &g.check {
            Some(check) => {
                for row in report_rows(g.gpu, &check.verdict) {
                    let _ = writeln!(out, "{row}");
                }
            }
            None => {
                for why in &g.why {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} |",
                        g.gpu,
                        g.result,
                        why.replace('|', "/")
                    );
                }
            }
        }
    }
    out
}
