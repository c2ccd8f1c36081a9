//! The node's MPS half: small GPU shares spread over every GPU of a node,
//! each job confined to its GPU, with an MPS control daemon behind it.
//!
//! - [`config`]: `gpu_mps.conf`, how the node shares its GPUs.
//! - [`scoped`]: its lines by the nodes they are for (`NodeName=`), one
//!   file for every node of a shared `/etc/slurm`.
//! - [`in_force`]: the configuration the node programs run with (never a
//!   half-written file), and the ledger it was made with.
//! - [`ledger`]: the node's sharing state on disk (flock + atomic rename).
//! - [`lock_wait`]: every lock wait of the node programs ends by a deadline.
//! - [`placement`]: the least-loaded choice of a GPU for a share.
//! - [`node`]: what the prolog, the SPANK plugin and the epilog do for a job.
//! - [`daemon`]: starting and stopping a GPU's MPS control daemon.
//! - [`programs`]: where the MPS control program is.
//! - [`compute_mode`]: a shared GPU in EXCLUSIVE_PROCESS mode while its
//!   daemon runs.
//! - [`gpu_devices`]: the node's GPU device files, their minors and PCI
//!   bus ids.
//! - [`devices`]: confining a task to its GPU's device file.
//! - [`status`]: the per-GPU view `gpu-mps status` prints.
//! - [`dcgm`]: dcgm-exporter's job mapping, one file per GPU.
//! - [`metrics`]: the node's metrics for Prometheus, and its counters.
//! - [`state_dir`]: state directories no user can turn against root.
//! - [`health`]: GPUs set aside from sharing (lost, or marked failed);
//!   [`node_health`]: the node's sharing in one line for a health check,
//!   and the drain or resume it asks of Slurm.
//! - [`retire`]: what a ledger's identity leaves behind (idle daemons,
//!   compute modes) once the node takes another.
//! - [`disabled`]: a node taken off sharing by `gpu-mps disable`.
//! - [`located`]: where the node programs found `gpu_mps.conf`, for the
//!   node timer and an admin's `gpu-mps`.
//! - [`gc`]: the ledger brought back in line with what slurmctld runs.
//! - [`installed`]: the Slurm and gpushare installed here (`gpu-mps config`).
//! - [`booking`]: how Slurm books the node's mps (who places a share).
//! - [`usage`]: what each share really uses of its GPU (NVML, per job).

pub mod compute_mode;
pub mod config;
pub mod daemon;
pub mod dcgm;
pub mod detected_lines;
pub mod devices;
pub mod disabled;
pub mod gc;
pub mod gpu_devices;
pub mod health;
pub mod in_force;
pub mod installed;
pub mod kept;
pub mod ledger;
pub mod located;
pub mod lock_wait;
pub mod metrics;
pub mod namespaces;
pub mod node;
pub mod node_health;
pub mod placement;
pub mod private;
pub mod programs;
pub mod retire;
pub mod scoped;
pub mod selftest;
pub mod setup_lines;
pub mod state_dir;
pub mod status;
pub mod under_test;
pub mod usage;
pub mod xid;
