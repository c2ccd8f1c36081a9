//! What `gpu-mps` shows: the per-GPU share table (text and JSON) and the
//! slurm.conf/gres.conf lines a node needs. Pure functions over the
//! ledger's per-GPU view, so the command itself only gathers inputs.

use std::fmt::Write as _;
use std::path::Path;

use crate::ledger::GpuView;
use crate::mps_conf::GpuMpsConfig;
use crate::qos_check::json_string;

/// Whether any GPU needs an admin's attention (the command exits 1).
pub fn has_problem(gpus: &[GpuView]) -> bool {
    gpus.iter()
        .any(|g| g.overlap || g.over_capacity || !g.configured)
}

fn flags(g: &GpuView) -> String {
    let mut f = Vec::new();
    if g.overlap {
        f.push("OVERLAP");
    }
    if g.over_capacity {
        f.push("OVER");
    }
    if !g.configured {
        f.push("UNCONFIGURED");
    }
    f.join(",")
}

fn jobs_text(g: &GpuView) -> String {
    let mut parts: Vec<String> = g
        .shares
        .iter()
        .map(|s| format!("{}({}:{})", s.job, s.user, s.units))
        .collect();
    parts.extend(g.whole_jobs.iter().map(|j| format!("{j}(whole)")));
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The aligned table `gpu-mps status` prints.
pub fn table(gpus: &[GpuView], devices: &[impl AsRef<Path>], units_per_gpu: u32) -> String {
    let rows: Vec<[String; 6]> = gpus
        .iter()
        .map(|g| {
            [
                g.index.to_string(),
                devices
                    .get(g.index as usize)
                    .map_or("-".into(), |d| d.as_ref().display().to_string()),
                format!("{}/{units_per_gpu}", g.used_units),
                g.shares.len().to_string(),
                jobs_text(g),
                flags(g),
            ]
        })
        .collect();
    let head = [
        "GPU",
        "DEVICE",
        "UNITS",
        "SHARES",
        "JOBS(user:units)",
        "FLAGS",
    ];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(head.map(String::from)).chain(rows) {
        let line: Vec<String> = r
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// `gpu-mps status --json`.
pub fn json(gpus: &[GpuView], units_per_gpu: u32, set_aside: &[impl AsRef<Path>]) -> String {
    let gpu_items: Vec<String> = gpus
        .iter()
        .map(|g| {
            let shares: Vec<String> = g
                .shares
                .iter()
                .map(|s| format!("{{\"job\":{},\"uid\":{},\"user\":{},\"units\":{},\"since\":{}}}", s.job, s.uid, json_string(&s.user), s.units, s.since))
                .collect();
            let whole: Vec<String> = g.whole_jobs.iter().map(u32::to_string).collect();
            format!(
                "{{\"gpu\":{},\"used_units\":{},\"free_units\":{},\"shares\":[{}],\"whole_jobs\":[{}],\"overlap\":{},\"over_capacity\":{},\"configured\":{}}}",
                g.index,
                g.used_units,
                g.free_units,
                shares.join(","),
                whole.join(","),
                g.overlap,
                g.over_capacity,
                g.configured
            )
        })
        .collect();
    let aside: Vec<String> = set_aside
        .iter()
        .map(|p| json_string(&p.as_ref().display().to_string()))
        .collect();
    format!(
        "{{\"units_per_gpu\":{units_per_gpu},\"gpus\":[{}],\"set_aside_files\":[{}]}}",
        gpu_items.join(","),
        aside.join(",")
    )
}

/// The lines a node of `gpus` GPUs of type `gpu_type` needs (Slurm 22.05).
pub fn node_config(
    cfg: &GpuMpsConfig,
    node: &str,
    gpu_type: &str,
    gpus: u32,
    libexec: &Path,
    plugin_dir: &Path,
    conf: &Path,
) -> String {
    let count = cfg.slurm_count_for(gpus);
    let last = gpus.saturating_sub(1);
    let files = if gpus == 1 {
        "/dev/nvidia0".to_owned()
    } else {
        format!("/dev/nvidia[0-{last}]")
    };
    let mut out = format!(
        "# Slurm 22.05 books every mps job of a node on GPU 0 and admits Count / GPUs\n\
         # units at once: {gpus} GPUs x {u} units each at once need Count = {gpus} x {gpus} x {u} = {count}.\n\
         \n# gres.conf\nName=gpu Type={gpu_type} File={files}\nName=mps Count={count}\n\
         \n# slurm.conf\nGresTypes=gpu,mps\nNodeName={node} Gres=gpu:{gpu_type}:{gpus},mps:{count}\n\
         Prolog={prolog}\nEpilog={epilog}\nTaskPlugin=task/cgroup\nProctrackType=proctrack/cgroup\n\
         \n# cgroup.conf\nCgroupPlugin=cgroup/v1\nConstrainDevices=yes\n\
         \n# plugstack.conf\nrequired {plugin}/spank_gpu_mps.so conf={conf}\n\
         \n# gpu_mps.conf\nSlurmMpsCount={count}\n",
        u = cfg.units_per_gpu,
        prolog = libexec.join("gpu-mps-prolog").display(),
        epilog = libexec.join("gpu-mps-epilog").display(),
        plugin = plugin_dir.display(),
        conf = conf.display(),
    );
    if let Some(set) = cfg.slurm_mps_count.filter(|&c| c != count) {
        let _ = writeln!(
            out,
            "\n# WARNING: gpu_mps.conf has SlurmMpsCount={set}, not {count}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{LedgerState, ShareRecord, WholeRecord};

    fn state() -> LedgerState {
        let mut s = LedgerState::new();
        s.insert_share(ShareRecord {
            job: 11,
            uid: 1000,
            user: "a-very-long-user-name".into(),
            gpu: 1,
            units: 50,
            since: 1,
        });
        s.insert_share(ShareRecord {
            job: 12,
            uid: 1001,
            user: "bo\"b".into(),
            gpu: 1,
            units: 25,
            since: 2,
        });
        s.insert_whole(WholeRecord {
            job: 20,
            gpus: vec![1, 2],
            since: 3,
        });
        s
    }

    #[test]
    fn table_is_aligned_and_flags_overlap() {
        let gpus = state().per_gpu(4, 100);
        let devs: Vec<String> = (0..4).map(|i| format!("/dev/nvidia{i}")).collect();
        let t = table(&gpus, &devs, 100);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        let col = lines[0].find("UNITS").unwrap_or(0);
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.get(col..col + 1).is_some_and(|c| c != " ")),
            "{t}"
        );
        assert!(
            lines[2].contains("75/100")
                && lines[2].contains("11(a-very-long-user-name:50)")
                && lines[2].contains("20(whole)")
                && lines[2].ends_with("OVERLAP"),
            "{t}"
        );
        assert!(
            lines[3].contains("20(whole)") && !lines[3].contains("OVERLAP"),
            "{t}"
        );
        assert!(
            lines[4].contains("0/100") && lines[4].ends_with(" -"),
            "{t}"
        );
        assert!(has_problem(&gpus));
        assert!(!has_problem(&LedgerState::new().per_gpu(4, 100)));
    }

    #[test]
    fn json_escapes_and_lists_everything() {
        let gpus = state().per_gpu(2, 100);
        let j = json(&gpus, 100, &["/run/gpu-mps/state.corrupt-1"]);
        assert!(j.contains("\"user\":\"bo\\\"b\""), "{j}");
        assert!(
            j.contains("\"gpu\":1,\"used_units\":75,\"free_units\":25"),
            "{j}"
        );
        assert!(
            j.contains("\"whole_jobs\":[20]") && j.contains("\"overlap\":true"),
            "{j}"
        );
        assert!(
            j.ends_with("\"set_aside_files\":[\"/run/gpu-mps/state.corrupt-1\"]}"),
            "{j}"
        );
    }

    #[test]
    fn node_config_has_the_count_arithmetic() {
        let cfg = GpuMpsConfig {
            slurm_mps_count: Some(400),
            ..GpuMpsConfig::default()
        };
        let t = node_config(
            &cfg,
            "gpu01",
            "a40",
            4,
            Path::new("/usr/libexec/gpushare"),
            Path::new("/usr/lib/slurm"),
            Path::new("/etc/slurm/gpu_mps.conf"),
        );
        for want in [
            "Name=mps Count=1600",
            "Gres=gpu:a40:4,mps:1600",
            "File=/dev/nvidia[0-3]",
            "Prolog=/usr/libexec/gpushare/gpu-mps-prolog",
            "SlurmMpsCount=1600",
            "WARNING: gpu_mps.conf has SlurmMpsCount=400",
        ] {
            assert!(t.contains(want), "{want}:\n{t}");
        }
    }
}
