//! The cluster's configuration files (slurm.conf, gres.conf, cgroup.conf,
//! plugstack.conf, slurmdbd.conf, the plugins' own), its plugins and its
//! fake GPUs.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use super::{
    build_dir, cgroup_v2, slurm_plugin_dir, write, Cluster, NodeSpec, CLUSTER_NAME, PARTITION,
};
use crate::Result;

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its full length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end])
        .split('.')
        .next()
        .unwrap_or("localhost")
        .to_owned()
}

/// `text` (slurm.conf) with each `Key=` line of `overrides` replaced by
/// `Key=Value`, and the keys it lacks added before the first node line.
fn override_settings(text: &str, overrides: &[(String, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (key, value) in overrides {
        let line = format!("{key}={value}");
        let found = lines.iter().position(|l| {
            l.split_once('=')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        });
        match found {
            // An empty value removes the setting: Slurm's default applies.
            Some(i) if value.is_empty() => {
                lines.remove(i);
            }
            None if value.is_empty() => {}
            Some(i) => lines[i] = line,
            None => {
                let at = lines
                    .iter()
                    .position(|l| l.starts_with("NodeName="))
                    .unwrap_or(lines.len());
                lines.insert(at, line);
            }
        }
    }
    lines.join("\n") + "\n"
}

/// A node's lines of gres.conf, its GPUs at `dev/nvidia<N>`.
fn gres_lines(n: &NodeSpec, dev: &Path) -> String {
    let mut gres = String::new();
    let node = &n.name;
    let dev = dev.display();
    let mut first = 0;
    for g in &n.gpus {
        let last = first + g.count - 1;
        let files = if g.count == 1 {
            format!("{dev}/nvidia{first}")
        } else {
            format!("{dev}/nvidia[{first}-{last}]")
        };
        let _ = writeln!(
            gres,
            "NodeName={node} Name=gpu Type={} File={files}",
            g.gpu_type
        );
        first = last + 1;
    }
    match n.mps_count {
        Some(c) if n.mps_per_gpu => {
            // The GPUs of the first type are the MPS pool.
            let pool = n.gpus.first().map_or(0, |g| g.count);
            let per_gpu = c / pool.max(1);
            if n.unshared_mps_lines {
                // Before the pool's lines: slurmd drops lines past the
                // node's mps count.
                for i in pool..n.gpu_count() {
                    let _ = writeln!(
                        gres,
                        "NodeName={node} Name=mps Count=0 File={dev}/nvidia{i} Flags=all_sharing"
                    );
                }
            }
            for i in 0..pool {
                let _ = writeln!(
                    gres,
                    "NodeName={node} Name=mps Count={per_gpu} File={dev}/nvidia{i} Flags=all_sharing"
                );
            }
        }
        Some(c) => {
            let _ = writeln!(gres, "NodeName={node} Name=mps Count={c}");
        }
        None => {}
    }
    gres
}

/// What slurmd's GPU plugin finds in `fake_gpus.conf` (read beside
/// slurm.conf under any `AutoDetect=`, Slurm 22.05 to 26.05): one record a
/// GPU, `<type>|<cpus>|<cpu range>|<links>|<device file>|<uuid>|<flags>`,
/// the GPUs of the first node (every node reads the same file).
fn fake_gpus_conf(nodes: &[NodeSpec], dev: &Path, cpus: u32) -> String {
    let mut text = String::new();
    let mut index = 0;
    for g in nodes.first().map(|n| n.gpus.as_slice()).unwrap_or_default() {
        for _ in 0..g.count {
            let _ = writeln!(
                text,
                "{t}|{cpus}|0-{last}|(null)|{dev}/nvidia{index}|{uuid}|nvidia_gpu_env",
                t = g.gpu_type,
                last = cpus.saturating_sub(1),
                dev = dev.display(),
                uuid = super::fake_gpu_uuid(index),
            );
            index += 1;
        }
    }
    text
}

/// A fake GPU: the char device `c 195 minor` at `path`.
fn mknod_gpu(path: &Path, minor: u32) -> Result<()> {
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: valid path; makedev/mknod have no memory preconditions.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(195, minor)) };
    if rc != 0 {
        return Err(format!(
            "mknod {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

impl Cluster {
    /// The first job id of this cluster. Slurm's cgroup v1 paths
    /// (`slurm/uid_U/job_J/...`) are the machine's, not the cluster's: two
    /// clusters running at once (a suite's cluster beside a test's own,
    /// two test processes side by side) must never number jobs alike.
    /// Each gets 1,000 ids from its test process's pid (unique among
    /// running processes up to pid 32,767; Slurm's ids end at 67,043,328)
    /// and whether it is the process's first cluster (the suite's, which
    /// stays up while each test's own cluster comes and goes).
    fn first_job_id(&self) -> u32 {
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let pid = crate::process::owner_pid(&name).unwrap_or(0) % 32_768;
        let first = name.rsplit('-').next() == Some("0");
        1 + pid * 2_000 + if first { 0 } else { 1_000 }
    }

    pub(super) fn make_gpu_devices(&self) -> Result<()> {
        for node in &self.nodes {
            let dev = self.node_dir(&node.name).join("dev");
            for i in 0..node.gpu_count() {
                mknod_gpu(&dev.join(format!("nvidia{i}")), i)?;
            }
        }
        Ok(())
    }

    /// Copies our plugin libraries into `plugins/` under Slurm's names
    /// (`libjob_submit_gpu_qos.so` → `job_submit_gpu_qos.so`).
    pub(super) fn install_plugins(&self) -> Result<()> {
        if self.spec.installed_plugin_dir.is_some() {
            return Ok(());
        }
        let built = build_dir()?;
        for entry in fs::read_dir(&built).map_err(|e| format!("{}: {e}", built.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(slurm_name) = name.strip_prefix("lib").filter(|n| n.ends_with(".so")) else {
                continue;
            };
            if slurm_name.starts_with("job_submit_") || slurm_name.starts_with("spank_") {
                crate::freshness::ensure_current(&path)?;
                let to = self.plugin_dir.join(slurm_name);
                // A harness of installed packages (tests/overlay_root.sh)
                // links their files: linked again, so that what a package
                // upgrade puts in their place is what the daemons load next.
                let copied = match fs::read_link(&path) {
                    Ok(installed) => std::os::unix::fs::symlink(installed, &to),
                    Err(_) => fs::copy(&path, &to).map(|_| ()),
                };
                copied.map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        // The node programs and admin commands the clusters run.
        for program in ["gpu-mps-prolog", "gpu-mps-epilog", "gpu-mps", "gpu-qos"] {
            let path = built.join(program);
            if path.exists() {
                crate::freshness::ensure_current(&path)?;
            }
        }
        for p in &self.spec.job_submit_plugins {
            let ours = self.plugin_dir.join(format!("job_submit_{p}.so"));
            let slurms = Path::new(&slurm_plugin_dir()).join(format!("job_submit_{p}.so"));
            if !ours.exists() && !slurms.exists() {
                return Err(format!(
                    "job_submit plugin {p:?} not found in {} nor {}: run `cargo build --workspace` first (`make test` does)",
                    built.display(),
                    slurm_plugin_dir()
                ));
            }
        }
        Ok(())
    }

    /// Replaces `{cluster}`, `{plugins}` and `{build}` in spec strings,
    /// which cannot know the cluster's directory in advance.
    pub fn expand(&self, text: &str) -> String {
        text.replace("{cluster}", &self.dir.to_string_lossy())
            .replace("{plugins}", &self.plugin_dir.to_string_lossy())
            .replace(
                "{build}",
                &build_dir()
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            )
    }

    pub(super) fn write_configs(&self) -> Result<()> {
        let etc = self.etc();
        let d = &self.dir;
        let p = self.ports;
        let host = hostname();
        let munge_sock = d.join("munge/munge.sock");
        let nodes = &self.nodes;
        let any_mps = nodes.iter().any(|n| n.mps_count.is_some());
        let mut gres_types = vec!["gpu"];
        if any_mps {
            gres_types.push("mps");
        }
        let mut tres = vec!["gres/gpu".to_owned()];
        for t in nodes
            .iter()
            .flat_map(|n| n.gpus.iter().map(|g| &g.gpu_type))
            .chain(&self.spec.extra_gpu_types)
        {
            let t = format!("gres/gpu:{t}");
            if !tres.contains(&t) {
                tres.push(t);
            }
        }
        if any_mps {
            tres.push("gres/mps".into());
        }
        let ctl_addr = self.controller_addr();
        let (proctrack, task) = if self.spec.cgroup_devices {
            ("proctrack/cgroup", "task/cgroup")
        } else {
            ("proctrack/linuxproc", "task/none")
        };
        let mut conf = format!(
            "# Generated by gpushare's test harness.\n\
             ClusterName={CLUSTER_NAME}\n\
             FirstJobId={first_job}\n\
             SlurmctldHost={host}({ctl_addr})\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={munge},cred_expire=10\n\
             CredType=cred/munge\n\
             SlurmUser={slurm_user}\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/slurmd-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             SlurmctldDebug=verbose\n\
             SlurmdDebug=verbose\n\
             PluginDir={plugins}:{slurm_plugins}\n\
             PlugStackConfig={etc}/plugstack.conf\n\
             ProctrackType={proctrack}\n\
             TaskPlugin={task}\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core{ll}\n\
             SchedulerType=sched/backfill\n\
             SchedulerParameters=sched_interval=2,bf_interval=2\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             MinJobAge=600\n\
             KillWait=2\n\
             InactiveLimit=0\n\
             SlurmctldTimeout=30\n\
             SlurmdTimeout=300\n\
             JobAcctGatherType=jobacct_gather/none\n\
             GresTypes={gres_types}\n\
             PreemptType=preempt/qos\n\
             PreemptMode=REQUEUE\n\
             PriorityType=priority/multifactor\n\
             PriorityWeightQOS=10000\n\
             PriorityWeightAge=100\n\
             PriorityWeightFairshare=1000\n\
             PriorityDecayHalfLife=7-0\n\
             PriorityMaxAge=7-0\n",
            first_job = self.first_job_id(),
            ctld = p.slurmctld,
            slurmd = p.slurmd,
            slurm_user = self.slurm_user_name(),
            munge = munge_sock.display(),
            d = d.display(),
            plugins = self.plugin_dir.display(),
            slurm_plugins = slurm_plugin_dir(),
            etc = etc.display(),
            gres_types = gres_types.join(","),
            ll = if nodes.iter().any(|n| n.mps_per_gpu) {
                ",LL_SHARED_GRES"
            } else {
                ""
            },
        );
        if self.spec.accounting {
            let _ = write!(
                conf,
                "AccountingStorageType=accounting_storage/slurmdbd\n\
                 AccountingStorageHost={ctl_addr}\n\
                 AccountingStoragePort={dbd}\n\
                 AccountingStoragePass={munge}\n\
                 AccountingStorageEnforce=associations,limits,qos,safe\n\
                 AccountingStorageTRES={tres}\n",
                dbd = p.dbd,
                tres = tres.join(","),
                munge = munge_sock.display(),
            );
        } else {
            conf.push_str("AccountingStorageType=accounting_storage/none\n");
        }
        if !self.spec.job_submit_plugins.is_empty() {
            let _ = writeln!(
                conf,
                "JobSubmitPlugins={}",
                self.spec.job_submit_plugins.join(",")
            );
        }
        if let Some(p) = &self.spec.prolog {
            let _ = writeln!(conf, "Prolog={}", self.expand(&p.to_string_lossy()));
        }
        if let Some(p) = &self.spec.epilog {
            let _ = writeln!(conf, "Epilog={}", self.expand(&p.to_string_lossy()));
        }
        for l in &self.spec.extra_slurm_conf {
            let _ = writeln!(conf, "{}", self.expand(l));
        }
        if nodes.iter().any(|n| n.configless) {
            conf.push_str("SlurmctldParameters=enable_configless\n");
        }
        for (i, n) in nodes.iter().enumerate() {
            let mut node_gres: Vec<String> = n
                .gpus
                .iter()
                .map(|g| format!("gpu:{}:{}", g.gpu_type, g.count))
                .collect();
            if let Some(c) = n.mps_count {
                node_gres.push(format!("mps:{c}"));
            }
            let (addr, hostname) = match &self.fabric {
                Some(f) => (f.node_addr(i).to_string(), n.name.clone()),
                None => ("127.0.0.1".to_owned(), host.clone()),
            };
            let _ = writeln!(
                conf,
                "NodeName={name} NodeAddr={addr} NodeHostname={hostname} CPUs={cpus} RealMemory=16000 Gres={gres} State=UNKNOWN",
                name = n.name,
                cpus = self.spec.cpus,
                gres = node_gres.join(","),
            );
        }
        let _ = writeln!(
            conf,
            "PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP{options}",
            nodes = self.node_names().join(","),
            options = self
                .spec
                .partition_options
                .iter()
                .map(|o| format!(" {o}"))
                .collect::<String>(),
        );
        let conf = override_settings(&conf, &self.spec.conf_overrides);
        write(&etc.join("slurm.conf"), &conf, 0o644)?;

        let gres = match &self.spec.detected_gres_conf {
            Some(text) => {
                write(
                    &etc.join("fake_gpus.conf"),
                    &fake_gpus_conf(nodes, &d.join("dev"), self.spec.cpus),
                    0o644,
                )?;
                self.expand(text)
            }
            None => {
                let mut gres = String::from("AutoDetect=off\n");
                for n in nodes {
                    gres.push_str(&gres_lines(n, &d.join("dev")));
                }
                gres
            }
        };
        write(&etc.join("gres.conf"), &gres, 0o644)?;

        write(&etc.join("cgroup.conf"), &cgroup_conf(&[]), 0o644)?;
        let mut plugstack = self.expand(&self.spec.plugstack.join("\n"));
        plugstack.push('\n');
        write(&etc.join("plugstack.conf"), &plugstack, 0o644)?;
        if any_mps {
            // The stand-in driver library, where the suites put the
            // stand-in control program: what CudaLibrary= names.
            crate::standin::install_libcuda(&d.join("mps-bin"))?;
        }
        for (name, text) in &self.spec.extra_conf_files {
            let mut text = self.expand(text);
            if name == "gpu_mps.conf" && !text.contains("CudaLibrary=") {
                let library = d.join("mps-bin").join(crate::standin::LIBCUDA);
                text.push_str(&format!("CudaLibrary={}\n", library.display()));
            }
            // A GPU's daemon stopped by its last share's epilog, as the
            // suites expect of it; a test of DaemonLinger= sets its own.
            if name == "gpu_mps.conf" && !text.contains("DaemonLinger=") {
                text.push_str("DaemonLinger=0\n");
            }
            // The step guard is the epilog the cluster runs (StepGuard=auto
            // looks where the packages put it).
            if name == "gpu_mps.conf" && !text.contains("StepGuard=") {
                text.push_str(&self.expand("StepGuard={build}/gpu-mps-epilog\n"));
            }
            write(&etc.join(name), &text, 0o644)?;
        }
        if self.spec.accounting {
            let dbd = format!(
                "AuthType=auth/munge\n\
                 AuthInfo=socket={munge}\n\
                 DbdHost=localhost\n\
                 DbdAddr=127.0.0.1\n\
                 DbdPort={dbd}\n\
                 SlurmUser={slurm_user}\n\
                 DebugLevel=info\n\
                 LogFile={d}/log/slurmdbd.log\n\
                 PidFile={d}/slurmdbd.pid\n\
                 PluginDir={slurm_plugins}\n\
                 StorageType=accounting_storage/mysql\n\
                 StorageHost=127.0.0.1\n\
                 StoragePort={mysql}\n\
                 StorageUser=root\n\
                 StorageLoc={db}\n",
                munge = munge_sock.display(),
                dbd = p.dbd,
                d = d.display(),
                mysql = p.mysql,
                db = self.database_name(),
                slurm_user = self.slurm_user_name(),
                slurm_plugins = slurm_plugin_dir(),
            );
            write(&etc.join("slurmdbd.conf"), &dbd, 0o600)?;
            // slurmdbd reads only a file its SlurmUser owns.
            if let Some((uid, gid)) = self.slurm_user_ids()? {
                std::os::unix::fs::chown(etc.join("slurmdbd.conf"), Some(uid), Some(gid))
                    .map_err(|e| format!("chown slurmdbd.conf: {e}"))?;
            }
        }
        Ok(())
    }

    /// `SlurmUser=` of slurmctld and slurmdbd.
    fn slurm_user_name(&self) -> &str {
        self.spec.slurm_user.as_deref().unwrap_or("root")
    }

    /// The (uid, gid) slurmctld and slurmdbd run as where it is not root
    /// ([`ClusterSpec::slurm_user`]; the account is created if missing).
    pub fn slurm_user_ids(&self) -> Result<Option<(u32, u32)>> {
        self.spec
            .slurm_user
            .as_deref()
            .map(crate::users::system_account)
            .transpose()
    }
}

/// cgroup.conf as the harness writes it, with `extra` lines after its own
/// ([`ClusterSpec::with_cgroup_conf_lines`]). cgroup v2: slurmd starts no
/// systemd scope here (there is no systemd); it makes its own below its
/// cgroup.
pub(crate) fn cgroup_conf(extra: &[&str]) -> String {
    let cgroup_plugin = if cgroup_v2() {
        "cgroup/v2\nIgnoreSystemd=yes"
    } else {
        "cgroup/v1"
    };
    let mut text = format!(
        "CgroupPlugin={cgroup_plugin}\nCgroupMountpoint=/sys/fs/cgroup\nConstrainDevices=yes\n\
         ConstrainCores=no\nConstrainRAMSpace=no\n"
    );
    for line in extra {
        text.push_str(line);
        text.push('\n');
    }
    text
}
