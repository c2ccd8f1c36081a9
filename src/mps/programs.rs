//! Where the node's MPS control program is: `MPSControl=` in
//! `gpu_mps.conf` names it, or `auto` finds it on PATH and then in the
//! usual places. The daemon runs it, `nvidia-smi` is looked for beside it
//! and the status view tells whether there is one.

use std::path::PathBuf;

use super::config::{GpuMpsConfig, MpsControl};

/// The control program's name.
pub const CONTROL_PROGRAM: &str = "nvidia-cuda-mps-control";
/// Where `MPSControl=auto` looks after PATH: slurmd runs the Prolog with
/// no PATH at all (seen on 22.05), so PATH alone never finds it there.
pub const SEARCH_DIRS: [&str; 6] = [
    "/usr/bin",
    "/usr/local/bin",
    "/usr/local/cuda/bin",
    "/usr/sbin",
    "/opt/nvidia/bin",
    // Where a driver mounted into a container image keeps its programs
    // (seen on a GPU node: nvidia-smi and the MPS programs only there).
    "/usr/local/nvidia/bin",
];

/// The control program this node uses, if any.
pub fn program(cfg: &GpuMpsConfig) -> Option<PathBuf> {
    match &cfg.mps_control {
        MpsControl::Disabled => None,
        MpsControl::Program(p) => Some(p.clone()),
        MpsControl::FromPath => find_in(std::env::var_os("PATH").as_deref()),
    }
}

/// `nvidia-cuda-mps-control` in `path` (a PATH value), else in
/// [`SEARCH_DIRS`].
pub fn find_in(path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    path.map(|p| std::env::split_paths(p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(SEARCH_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(CONTROL_PROGRAM))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn auto_finds_the_program_without_path_in_the_usual_dirs() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fake = dir.path().join(CONTROL_PROGRAM);
        fs::write(&fake, "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(find_in(Some(dir.path().as_os_str())), Some(fake));
        // No PATH (slurmd's Prolog): the usual dirs, which hold none here.
        let none = find_in(None);
        assert!(none.is_none_or(|p| SEARCH_DIRS.iter().any(|d| p.starts_with(d))));
    }

    /// The directories `text` lists after `anchor`: every path from the
    /// first `/usr/bin` to the end of the list (`;` or `(slurmd`).
    fn listed_after(text: &str, anchor: &str) -> Vec<String> {
        let after = text.split_once(anchor).map_or("", |(_, a)| a);
        let list = after.split_once("/usr/bin").map_or("", |(_, a)| a);
        let end = [";", "(slurmd"]
            .iter()
            .filter_map(|t| list.find(t))
            .min()
            .unwrap_or(list.len());
        let words = list.get(..end).unwrap_or(list).split_whitespace();
        std::iter::once("/usr/bin".to_owned())
            .chain(
                words
                    .map(|w| w.trim_matches(|c: char| "`,.()".contains(c)))
                    .filter(|w| w.starts_with('/'))
                    .map(str::to_owned),
            )
            .collect()
    }

    #[test]
    fn the_docs_list_the_dirs_auto_looks_in() {
        let man = crate::shared::doc_keys::man_text(include_str!("../../docs/man/gpu_mps.conf.5"));
        let docs = [
            (
                "plugins/spank_gpu_mps/gpu_mps.conf.example",
                include_str!("../../plugins/spank_gpu_mps/gpu_mps.conf.example"),
                "MPS control program",
            ),
            ("docs/man/gpu_mps.conf.5", man.as_str(), "MPSControl={"),
            (
                "docs/configuration.md",
                include_str!("../../docs/configuration.md"),
                "| `MPSControl` |",
            ),
        ];
        for (name, text, anchor) in docs {
            assert_eq!(listed_after(text, anchor), SEARCH_DIRS, "{name}");
        }
    }
}
