//! gpushare's manual pages and shell completions, made from the same `clap`
//! definitions the programs parse their arguments with, so that a page
//! never describes an option the program lacks: a page per command and
//! per subcommand (`gpu-qos(1)`, `gpu-qos-why(1)`, `gpu-mps(8)`,
//! `gpu-mps-status(8)`, ...), the two configuration files' pages written by
//! hand (`docs/man/*.5`), and bash, zsh and fish completions for `gpu-qos`
//! and `gpu-mps`. `gpushare-man DIR` writes them; `make build` runs it.

use std::io;
use std::path::Path;

use clap::{Command, CommandFactory};
use clap_complete::Shell;

use gpushare::mps::config::GpuMpsConfig;
use gpushare::mps::setup_lines::{self, Installed, SlurmSetup};

use crate::{mps_cli, qos_cli};
use gpushare_node::node_program;

/// One file to write, by its path under the output directory
/// (`man1/gpu-qos-why.1`, `completions/zsh/_gpu-qos`).
#[derive(Debug)]
pub struct Output {
    pub path: String,
    pub text: Vec<u8>,
}

/// The configuration files' pages, written by hand.
const CONF_PAGES: [(&str, &str); 2] = [
    (
        "man5/gpu_qos.conf.5",
        include_str!("../../docs/man/gpu_qos.conf.5"),
    ),
    (
        "man5/gpu_mps.conf.5",
        include_str!("../../docs/man/gpu_mps.conf.5"),
    ),
];

/// Each command with its manual section (`gpu-qos` is for every user, 1;
/// `gpu-mps` and the programs slurmd runs are the admin's, 8) and whether
/// a person types it at a shell (then it has completions; slurmd runs the
/// prolog and epilog).
fn commands() -> [(Command, &'static str, bool); 4] {
    [
        (qos_cli::Cli::command(), "1", true),
        (mps_cli::Cli::command(), "8", true),
        (node_program::PrologCli::command(), "8", false),
        (node_program::EpilogCli::command(), "8", false),
    ]
}

/// Where an install puts the node's programs, Slurm's plugins and
/// configuration: what the example setups name.
#[derive(Debug, Clone, Copy)]
pub struct InstalledPaths<'a> {
    pub libexec: &'a Path,
    pub plugin_dir: &'a Path,
    pub sysconf_dir: &'a Path,
}

/// The example GPU node the setups are written for.
const EXAMPLE_NODE: (&str, &str, u32) = ("gpu01", "a40", 8);

/// The two example setups of a GPU node that shares its GPUs
/// (`examples/gpu-node.23.11.example`, `gpu-node.22.05.example`): what
/// `gpu-mps config` prints for an 8-GPU a40 node on Slurm 23.11 and later
/// (Slurm places the shares) and on 22.05 and 23.02 (gpushare places them),
/// with `paths` filled in, made by the same function, so that the two
/// cannot disagree.
pub fn examples(paths: InstalledPaths<'_>) -> Vec<Output> {
    let (node, gpu_type, gpus) = EXAMPLE_NODE;
    let conf = paths.sysconf_dir.join("gpu_mps.conf");
    let installed = Installed {
        libexec: paths.libexec,
        plugin_dir: paths.plugin_dir,
        conf: &conf,
    };
    [
        ("23.11", "23.11 and later", SlurmSetup::PerGpu),
        ("22.05", "22.05 and 23.02", SlurmSetup::NodeCount),
    ]
    .into_iter()
    .map(|(file, releases, setup)| {
        let lines = setup_lines::node_config(
            &GpuMpsConfig::default(),
            setup,
            node,
            (gpu_type, gpus),
            &[],
            installed,
        );
        let text = format!(
            "# A GPU node that shares its GPUs in MPS slices, on Slurm {releases}:\n\
             # node {node}, {gpus} {gpu_type} GPUs, gpu_mps.conf's defaults. This is what\n\
             # `gpu-mps config --release {file} --gpus {gpus} --type {gpu_type}` prints there; run it\n\
             # on each kind of node for its own lines (--whole TYPE:N for GPUs held whole).\n\
             # Each part goes into the file its heading names; slurm.conf, gres.conf,\n\
             # cgroup.conf and plugstack.conf are the cluster's, gpu_mps.conf the node's.\n\n{lines}"
        );
        Output {
            path: format!("examples/gpu-node.{file}.example"),
            text: text.into_bytes(),
        }
    })
    .collect()
}

/// Every manual page: each command's, each subcommand's, the two
/// configuration files'.
pub fn pages() -> io::Result<Vec<Output>> {
    let mut out = Vec::new();
    for (mut cmd, section, _) in commands() {
        // Globals (gpu-mps's --conf) reach the subcommands.
        cmd.build();
        out.push(page(&cmd, section)?);
        // clap's own `help` subcommand needs no page.
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = format!("{}-{}", cmd.get_name(), sub.get_name());
            let sub =
                sub.clone()
                    .name(name)
                    .bin_name(format!("{} {}", cmd.get_name(), sub.get_name()));
            out.push(page(&sub, section)?);
        }
    }
    for (path, text) in CONF_PAGES {
        out.push(Output {
            path: path.to_owned(),
            text: text.as_bytes().to_vec(),
        });
    }
    Ok(out)
}

fn page(cmd: &Command, section: &str) -> io::Result<Output> {
    let mut text = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section(section)
        .source(format!("gpushare {}", env!("CARGO_PKG_VERSION")))
        .manual("gpushare")
        .render(&mut text)?;
    Ok(Output {
        path: format!("man{section}/{}.{section}", cmd.get_name()),
        text,
    })
}

/// The completions of `gpu-qos` and `gpu-mps` for bash, zsh and fish, as
/// each shell names its files (`completions/bash/gpu-qos`,
/// `completions/zsh/_gpu-qos`, `completions/fish/gpu-qos.fish`); the
/// installers put each directory where that shell looks.
pub fn completions() -> Vec<Output> {
    let mut out = Vec::new();
    for (cmd, ..) in commands().into_iter().filter(|(.., typed)| *typed) {
        let name = cmd.get_name().to_owned();
        for (shell, dir, file) in [
            (Shell::Bash, "bash", name.clone()),
            (Shell::Zsh, "zsh", format!("_{name}")),
            (Shell::Fish, "fish", format!("{name}.fish")),
        ] {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd.clone(), &name, &mut text);
            out.push(Output {
                path: format!("completions/{dir}/{file}"),
                text,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command as Process;

    fn names(pages: &[Output]) -> Vec<&str> {
        pages.iter().map(|p| p.path.as_str()).collect()
    }

    fn rendered() -> Vec<Output> {
        pages().unwrap_or_else(|e| panic!("{e}"))
    }

    fn text(files: &[Output], path: &str) -> String {
        files
            .iter()
            .find(|f| f.path == path)
            .map(|f| String::from_utf8_lossy(&f.text).into_owned())
            .unwrap_or_else(|| panic!("no {path}"))
    }

    #[test]
    fn every_command_and_subcommand_has_its_page() {
        let pages = rendered();
        let names = names(&pages);
        for want in [
            "man1/gpu-qos.1",
            "man1/gpu-qos-check.1",
            "man1/gpu-qos-generate.1",
            "man1/gpu-qos-audit.1",
            "man1/gpu-qos-usage.1",
            "man1/gpu-qos-why.1",
            "man1/gpu-qos-metrics.1",
            "man1/gpu-qos-replay.1",
            "man1/gpu-qos-advise.1",
            "man8/gpu-mps.8",
            "man8/gpu-mps-status.8",
            "man8/gpu-mps-metrics.8",
            "man8/gpu-mps-gc.8",
            "man8/gpu-mps-drain-gpu.8",
            "man8/gpu-mps-resume-gpu.8",
            "man8/gpu-mps-config.8",
            "man8/gpu-mps-prolog.8",
            "man8/gpu-mps-epilog.8",
            "man5/gpu_qos.conf.5",
            "man5/gpu_mps.conf.5",
        ] {
            assert!(names.contains(&want), "no {want} in {names:?}");
        }
        // A subcommand added later gets its page without a change here:
        // one per command and per subcommand (clap's help has none).
        let subcommands: usize = commands()
            .iter()
            .map(|(c, ..)| {
                let mut c = c.clone();
                c.build();
                c.get_subcommands()
                    .filter(|s| s.get_name() != "help")
                    .count()
                    + 1
            })
            .sum();
        assert!(!names.iter().any(|n| n.contains("-help.")), "{names:?}");
        assert_eq!(pages.len(), subcommands + CONF_PAGES.len(), "{names:?}");
    }

    #[test]
    fn a_subcommand_page_names_the_command_line_and_the_version() {
        let pages = rendered();
        let why = text(&pages, "man1/gpu-qos-why.1");
        assert!(why.contains(".TH gpu-qos-why 1"), "{why}");
        assert!(why.contains(&format!("gpushare {}", env!("CARGO_PKG_VERSION"))));
        assert!(why.contains("gpu\\-qos why"), "{why}");
        // gpu-mps's global --conf reaches its subcommands' pages.
        let status = text(&pages, "man8/gpu-mps-status.8");
        assert!(status.contains("\\-\\-conf"), "{status}");
    }

    /// What `man` runs: groff with every warning on. A page that makes it
    /// say anything fails (groff is in make deps: groff-base).
    #[test]
    fn every_page_renders_without_a_warning() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for page in rendered() {
            let file = dir.path().join("page");
            std::fs::write(&file, &page.text).unwrap_or_else(|e| panic!("{e}"));
            let out = Process::new("groff")
                .args(["-ww", "-man", "-Tutf8", "-z"])
                .arg(&file)
                .output()
                .unwrap_or_else(|e| panic!("groff (install groff-base: make deps): {e}"));
            assert!(
                out.status.success() && out.stderr.is_empty(),
                "{}: {}",
                page.path,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn completions_for_each_shell() {
        let all = completions();
        let names = names(&all);
        for want in [
            "completions/bash/gpu-qos",
            "completions/zsh/_gpu-qos",
            "completions/fish/gpu-qos.fish",
            "completions/bash/gpu-mps",
            "completions/zsh/_gpu-mps",
            "completions/fish/gpu-mps.fish",
        ] {
            assert!(names.contains(&want), "no {want} in {names:?}");
        }
        let bash = text(&all, "completions/bash/gpu-qos");
        // The subcommands and their options complete.
        assert!(bash.contains("why") && bash.contains("--fail-on"), "{bash}");
    }
}
