//! Each node of a multi-node cluster as a host of its own, on one machine.
//!
//! A test process first moves into a network namespace of its own, the
//! *lab* ([`enter_lab`]): the controller side (munged, MariaDB, slurmdbd,
//! slurmctld) and every client command live there, on its loopback and on a
//! bridge the harness creates in it. Each node is a [`NodeHost`]: a process
//! holding a network, UTS and mount namespace of its own, with its own
//! hostname, its own address on the lab's bridge (a veth pair), its own
//! tmpfs `/run`, and its own view of the cluster's per-node directories (its
//! `run/`, `dev/` and `log/` are bound over the cluster's, so every node
//! reads the same paths in `gres.conf` and `gpu_mps.conf` and finds its own
//! files there, as on a real site), and its own `/etc/slurm` (local
//! configuration such as a node's `gpu_mps.conf`). Its slurmd, slurmstepds
//! and jobs run inside.
//!
//! No address is ever put outside these namespaces: the bridge lives in the
//! lab, which dies with the test process (or with the `unshare` of
//! tests/release_suite.sh); a node's namespaces die with its last process.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::cluster::wait_for;
use crate::process::Daemon;
use crate::time::SHORT;
use crate::Result;

/// Set to `own` when this process already runs in a network namespace made
/// for the tests (tests/release_suite.sh makes one per run, with the
/// MariaDB the clusters share in it): [`enter_lab`] then stays there.
pub const LAB_ENV: &str = "GPUSHARE_TEST_NETNS";

/// node_exporter's textfile directory of each host, under the cluster's
/// directory: the controller's in the lab, each node's bound over it in
/// the node's own mount namespace.
pub const TEXTFILE_DIR: &str = "textfile";

/// The lab's own interface (10.251.0.1): no node hangs on it.
const LAB_ANCHOR: &str = "gslab0";

/// Moves this process into a network namespace of its own (once; later
/// calls return the first outcome), with its loopback up. Call it from the
/// thread that starts clusters, before the first: namespaces belong to a
/// thread, and everything it spawns afterwards inherits them.
pub fn enter_lab() -> Result<()> {
    static ENTERED: OnceLock<Result<()>> = OnceLock::new();
    ENTERED
        .get_or_init(|| {
            if std::env::var(LAB_ENV).as_deref() != Ok("own") {
                // SAFETY: unshare(2) with a flag constant; it changes only
                // this thread's namespaces.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    return Err(format!(
                        "cannot make a network namespace for the test cluster: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                ip(&["link", "set", "lo", "up"])?;
                // Children (the demo binary started by a test) stay here.
                std::env::set_var(LAB_ENV, "own");
            }
            // slurmdbd and slurmctld resolve their listening address with
            // AI_ADDRCONFIG, which finds nothing where loopback is the only
            // address: give the lab one more, on a bridge of its own.
            if ip(&["link", "show", LAB_ANCHOR]).is_err() {
                ip(&["link", "add", LAB_ANCHOR, "type", "bridge"])?;
                ip(&["addr", "add", "10.251.0.1/24", "dev", LAB_ANCHOR])?;
                ip(&["link", "set", LAB_ANCHOR, "up"])?;
            }
            Ok(())
        })
        .clone()
}

/// Runs `ip ARGS` in the current (lab) namespace.
pub fn ip(args: &[&str]) -> Result<()> {
    run_checked(
        Command::new("ip").args(args),
        &format!("ip {}", args.join(" ")),
    )
}

fn run_checked(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The lab side of a multi-node cluster's network: one bridge, its
/// address (where nodes reach slurmctld and clients), deleted on drop.
#[derive(Debug)]
pub struct Fabric {
    pub bridge: String,
    pub subnet: u8,
}

impl Fabric {
    /// A fabric of its own for each cluster this process starts.
    pub fn create_next() -> Result<Self> {
        static NEXT: AtomicU8 = AtomicU8::new(1);
        Self::create(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// `gsb<subnet>` with 10.251.<subnet>.1/24, in the lab.
    pub fn create(subnet: u8) -> Result<Self> {
        let bridge = format!("gsb{subnet}");
        // A bridge of the same name left by a killed test run in this lab.
        let _ = ip(&["link", "del", &bridge]);
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        let fabric = Self { bridge, subnet };
        ip(&[
            "addr",
            "add",
            &format!("{}/24", fabric.controller_addr()),
            "dev",
            &fabric.bridge,
        ])?;
        ip(&["link", "set", &fabric.bridge, "up"])?;
        Ok(fabric)
    }

    /// slurmctld's address for the nodes (and the clients).
    pub fn controller_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 251, self.subnet, 1)
    }

    /// Address of node `index` (0-based).
    pub fn node_addr(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 251, self.subnet, 11 + index.min(200) as u8)
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// munged as the harness runs it, for the lab or for a node: its socket,
/// pid and seed files in `dir` (made traversable by every client), the
/// lab's `key`, its log at `log` (written by munged itself, as the munge
/// user `ids`).
pub fn munged_command(
    dir: &Path,
    key: &Path,
    log: &Path,
    (uid, gid): (u32, u32),
) -> Result<Command> {
    use std::os::unix::fs::{chown, PermissionsExt};
    use std::os::unix::process::CommandExt;
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    fs::write(log, "").map_err(|e| format!("{}: {e}", log.display()))?;
    fs::set_permissions(log, fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())?;
    for p in [dir, log] {
        chown(p, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", p.display()))?;
    }
    let mut cmd = Command::new("munged");
    cmd.arg("--foreground")
        .arg(format!("--socket={}", dir.join("munge.sock").display()))
        .arg(format!("--key-file={}", key.display()))
        .arg(format!("--log-file={}", log.display()))
        .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
        .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
        .uid(uid)
        .gid(gid);
    Ok(cmd)
}

/// A node's host: the process that holds its namespaces, and what tells
/// them apart.
#[derive(Debug)]
pub struct NodeHost {
    pub name: String,
    pub addr: Ipv4Addr,
    /// The node's directory in the cluster (`nodes/<name>`): its `run`,
    /// `dev`, `log` and `etc-slurm`, bound inside the node.
    pub dir: PathBuf,
    holder: Daemon,
    /// The lab end of the node's veth pair (its "cable").
    pub cable: String,
    /// The lab's munged socket path, which the node's default socket leads
    /// to; inside the node it is the node's own munged ([`Self::start_munged`]).
    munge_socket: PathBuf,
    /// The node's own munged.
    munged: Option<Daemon>,
}

impl NodeHost {
    /// Starts the holder of a new network, UTS and mount namespace, links
    /// it to `fabric`, and sets the node up: hostname, loopback, address,
    /// a tmpfs `/run`, its own `run/`, `dev/`, `log/` and `textfile/` (its
    /// node_exporter's textfile directory, `/var/lib/prometheus/node-exporter`
    /// on a real node, kept across reboots) over the cluster's, its own
    /// `/etc/slurm`, and its own `/var/lib/gpushare` (what gpushare keeps
    /// across reboots: [`Self::wipe_run`] leaves it).
    pub fn start(name: &str, index: usize, fabric: &Fabric, cluster_dir: &Path) -> Result<Self> {
        let dir = cluster_dir.join("nodes").join(name);
        for sub in [
            "run",
            "dev",
            "log",
            "textfile",
            "etc-slurm",
            "var-lib-gpushare",
        ] {
            fs::create_dir_all(dir.join(sub)).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let shared = cluster_dir.join(TEXTFILE_DIR);
        fs::create_dir_all(&shared).map_err(|e| format!("{}: {e}", shared.display()))?;
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--net",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sleep",
            "infinity",
        ]);
        let holder = Daemon::spawn(
            "node-host",
            cmd,
            cluster_dir,
            cluster_dir.join("log").join(format!("host-{name}.log")),
        )
        .map_err(|e| format!("cannot start node {name}'s namespaces: {e}"))?;
        let pid = holder.pid().ok_or("node holder has no pid")?;
        // unshare(1) makes the namespaces, then execs sleep: wait for them.
        let own = fs::read_link("/proc/self/ns/mnt").map_err(|e| e.to_string())?;
        wait_for(&format!("node {name}'s namespaces"), SHORT, || {
            let theirs = fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (theirs != own && comm.trim() == "sleep").then_some(())
        })?;
        let cable = format!("gsv{}n{index}", fabric.subnet);
        let host = Self {
            name: name.to_owned(),
            addr: fabric.node_addr(index),
            dir,
            holder,
            cable,
            munge_socket: cluster_dir.join("munge/munge.sock"),
            munged: None,
        };
        let _ = ip(&["link", "del", &host.cable]);
        ip(&[
            "link",
            "add",
            &host.cable,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid.to_string(),
        ])?;
        ip(&["link", "set", &host.cable, "master", &fabric.bridge, "up"])?;
        let d = cluster_dir.display();
        let n = host.dir.display();
        let setup = format!(
            "hostname {name}\n\
             ip link set lo up\n\
             ip addr add {addr}/24 dev eth0\n\
             ip link set eth0 up\n\
             mount -t tmpfs -o mode=0755 tmpfs /run\n\
             for sub in run dev log textfile; do mount --bind {n}/$sub {d}/$sub; done\n\
             mkdir -p /etc/slurm /var/lib/gpushare\n\
             mount --bind {n}/etc-slurm /etc/slurm\n\
             mount --bind {n}/var-lib-gpushare /var/lib/gpushare\n",
            addr = host.addr,
        );
        host.sh(&setup, "setting up")?;
        host.boot_run()?;
        Ok(host)
    }

    /// What a node's boot puts into its empty `/run`: munged's socket where
    /// Slurm looks by default (a configless slurmd asks slurmctld for its
    /// configuration before it reads any `AuthInfo=`), here the lab's
    /// munged. Each boot gets an id of its own, as the kernel gives one:
    /// a new one bound over `/proc/sys/kernel/random/boot_id` in the
    /// node's mount namespace (root's, read-only to the node's users).
    fn boot_run(&self) -> Result<()> {
        let boot_id = "/proc/sys/kernel/random/boot_id";
        let mut script = format!(
            "mkdir -p /run/munge\nln -sf {} /run/munge/munge.socket.2\n\
             cat /proc/sys/kernel/random/uuid > /run/.boot_id\n\
             chmod 0444 /run/.boot_id\n\
             umount {boot_id} 2>/dev/null || true\n\
             mount --bind /run/.boot_id {boot_id}\n",
            self.munge_socket.display()
        );
        // Every cgroup hierarchy a node's processes are in is mounted on a
        // real node: the harness's own too, where the lab's /run has it
        // (what moves a process into all of a task's cgroups, as
        // slurmstepd's MPS daemons and step guards are, needs each one).
        if crate::process::groups_mounted().is_some() {
            let (name, at) = (crate::process::GROUPS, crate::process::GROUPS_MOUNT);
            script.push_str(&format!(
                "mkdir -p {at}\nmount -t cgroup -o none,name={name} {name} {at} || true\n"
            ));
        }
        self.sh(&script, "booting")
    }

    /// Starts the node's own munged with the lab's `key`, as every real
    /// node runs one, and puts its socket where slurm.conf's `AuthInfo`
    /// names the lab's, inside the node. munged refuses a credential it
    /// has decoded before: one munged for every node makes Slurm 23.02's
    /// slurmds refuse each other's job credentials ("Credential
    /// replayed"). It runs in the lab's network namespace, so a crashed
    /// node's processes do not include it.
    pub fn start_munged(&mut self, key: &Path, ids: (u32, u32), cluster_dir: &Path) -> Result<()> {
        let dir = self.dir.join("munge");
        let socket = dir.join("munge.sock");
        let cmd = munged_command(&dir, key, &self.dir.join("log/munged.log"), ids)?;
        let daemon = Daemon::spawn(
            "munged",
            cmd,
            cluster_dir,
            self.dir.join("log/munged.stdio.log"),
        )
        .map_err(|e| format!("cannot start node {}'s munged: {e}", self.name))?;
        self.munged = Some(daemon);
        wait_for(&format!("node {}'s munged", self.name), SHORT, || {
            socket.exists().then_some(())
        })?;
        let lab = self
            .munge_socket
            .parent()
            .ok_or("the lab's munge socket has no directory")?;
        self.sh(
            &format!("mount --bind {} {}\n", dir.display(), lab.display()),
            "giving its own munged to",
        )
    }

    /// Runs a shell script on this node (as root), stopping at its first
    /// failing command; `what` names the step in the error.
    fn sh(&self, script: &str, what: &str) -> Result<()> {
        run_checked(
            self.command("sh").args(["-ec", script]),
            &format!("{what} node {}", self.name),
        )
    }

    /// Pid of the process holding the node's namespaces.
    pub fn pid(&self) -> Option<u32> {
        self.holder.pid()
    }

    /// `program` run on this node: in its namespaces, with the root of the
    /// holder (a release root when the suite runs chrooted in one).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid().unwrap_or(0).to_string()])
            .args(["--net", "--uts", "--mount", "--root", "--wd=/", "--"])
            .arg(program);
        cmd
    }

    /// Pids of the processes on this node (those in its network namespace),
    /// the holder left out.
    pub fn processes(&self) -> Vec<u32> {
        let Some(holder) = self.pid() else {
            return Vec::new();
        };
        let Ok(ns) = fs::read_link(format!("/proc/{holder}/ns/net")) else {
            return Vec::new();
        };
        let Ok(dir) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
            .filter(|&pid| pid != holder)
            .filter(|pid| fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == ns))
            .collect()
    }

    /// Unplugs (`false`) or plugs back (`true`) the node's cable.
    pub fn set_cable(&self, connected: bool) -> Result<()> {
        ip(&[
            "link",
            "set",
            &self.cable,
            if connected { "up" } else { "down" },
        ])
    }

    /// Empties what a reboot empties: its tmpfs `/run` and the node's own
    /// `run/` (gpushare's state directory lives there); then what boot puts
    /// back.
    pub fn wipe_run(&self) -> Result<()> {
        // What boot mounted under /run goes first, as at a shutdown.
        let script = format!(
            "umount {} 2>/dev/null || true\n\
             find /run -mindepth 1 -delete\nfind {} -mindepth 1 -delete\n",
            crate::process::GROUPS_MOUNT,
            self.dir.join("run").display()
        );
        self.sh(&script, "emptying /run of")?;
        self.boot_run()
    }
}
