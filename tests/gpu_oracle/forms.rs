//! Every way of asking Slurm for GPUs, generated: one option that names
//! GPUs (or none), typed or not, times what makes Slurm count or add GPUs
//! beside it, times the command that makes the job. Each form knows
//! whether Slurm will hold it with a type (`typed`), which the policy must
//! then let through, but never whether the policy refuses it: that is
//! read from Slurm's record.

/// One GPU option, in its untyped and typed spelling (`count` GPUs in all
/// on one node).
struct GpuOption {
    name: &'static str,
    untyped: &'static [&'static str],
    typed: &'static [&'static str],
    /// The types the typed spelling names.
    types: &'static [&'static str],
}

const A40: &[&str] = &["a40"];
const A40_H100: &[&str] = &["a40", "h100"];

// Every typed form names a40, which each scope of the suite permits (two
// of them fit every limit there), or a40 and h100 in one request, which
// the two-type scope and those without a rule permit.
const OPTIONS: &[GpuOption] = &[
    GpuOption {
        name: "--gres",
        untyped: &["--gres=gpu:2"],
        typed: &["--gres=gpu:a40:2"],
        types: A40,
    },
    GpuOption {
        name: "--gpus",
        untyped: &["--gpus=2"],
        typed: &["--gpus=a40:2"],
        types: A40,
    },
    GpuOption {
        name: "--gpus-per-node",
        untyped: &["--gpus-per-node=2"],
        typed: &["--gpus-per-node=a40:2"],
        types: A40,
    },
    GpuOption {
        name: "--gpus-per-task",
        untyped: &["-n", "2", "--gpus-per-task=1"],
        typed: &["-n", "2", "--gpus-per-task=a40:1"],
        types: A40,
    },
    // 23.11 and later; before, the client refuses the option.
    GpuOption {
        name: "--tres-per-task",
        untyped: &["-n", "2", "--tres-per-task=gres/gpu:1"],
        typed: &["-n", "2", "--tres-per-task=gres/gpu:a40:1"],
        types: A40,
    },
    // The count left out: one GPU.
    GpuOption {
        name: "--gres, no count",
        untyped: &["--gres=gpu"],
        typed: &["--gres=gpu:a40"],
        types: A40,
    },
    // Two entries in one option: a typed one and one without a type.
    GpuOption {
        name: "--gres, two entries",
        untyped: &["--gres=gpu:a40:1,gpu:1"],
        typed: &["--gres=gpu:a40:1,gpu:a40:1"],
        types: A40,
    },
    // Two types in one request, and one of them with an untyped entry.
    GpuOption {
        name: "--gres, two types",
        untyped: &["--gres=gpu:h100:1,gpu:1"],
        typed: &["--gres=gpu:a40:1,gpu:h100:1"],
        types: A40_H100,
    },
    GpuOption {
        name: "--gpus-per-node, two types",
        untyped: &["--gpus-per-node=h100:1,1"],
        typed: &["--gpus-per-node=a40:1,h100:1"],
        types: A40_H100,
    },
    GpuOption {
        name: "--gpus-per-socket",
        untyped: &["--sockets-per-node=1", "--gpus-per-socket=1"],
        typed: &["--sockets-per-node=1", "--gpus-per-socket=a40:1"],
        types: A40,
    },
];

/// What may sit beside the GPU option: options that make Slurm count or
/// add GPUs itself (`derives`: untyped GPUs where no option asks for one).
struct Beside {
    name: &'static str,
    args: &'static [&'static str],
    derives: bool,
    /// GPUs without a type of its own, beside whatever the GPU option asks.
    adds_untyped: bool,
}

const BESIDE: &[Beside] = &[
    Beside {
        name: "",
        args: &[],
        derives: false,
        adds_untyped: false,
    },
    Beside {
        name: "-n 2 --ntasks-per-gpu=1",
        args: &["-n", "2", "--ntasks-per-gpu=1"],
        derives: true,
        adds_untyped: false,
    },
    Beside {
        name: "-N 1 --ntasks-per-gpu=2",
        args: &["-N", "1", "--ntasks-per-gpu=2"],
        derives: true,
        adds_untyped: false,
    },
    Beside {
        name: "--cpus-per-gpu=1",
        args: &["--cpus-per-gpu=1"],
        derives: false,
        adds_untyped: false,
    },
    Beside {
        name: "--mem-per-gpu=64",
        args: &["--mem-per-gpu=64"],
        derives: false,
        adds_untyped: false,
    },
    // A second GPU option without a type beside the first: untyped GPUs
    // whatever the first one says.
    Beside {
        name: "--gpus=1",
        args: &["--gpus=1"],
        derives: false,
        adds_untyped: true,
    },
];

/// The command that makes the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `sbatch -H --wrap=true`: judged and held.
    Sbatch,
    /// `sbatch -H --array=0-1`.
    Array,
    /// `salloc --no-shell`: allocated, then cancelled.
    Salloc,
    /// `sbatch -H` of a heterogeneous job: a typed component, then this
    /// form as the second.
    Het,
    /// `sbatch -H` of a heterogeneous job: this form first, then a typed
    /// component.
    HetFirst,
}

impl Command {
    pub fn name(self) -> &'static str {
        match self {
            Command::Sbatch => "sbatch",
            Command::Array => "sbatch --array",
            Command::Salloc => "salloc --no-shell",
            Command::Het => "sbatch (het, 2nd component)",
            Command::HetFirst => "sbatch (het, 1st component)",
        }
    }
}

/// One request form.
#[derive(Debug, Clone)]
pub struct Form {
    pub command: Command,
    /// The options, as a user types them.
    pub args: Vec<String>,
    /// Whether Slurm will hold every GPU of it with its type: the form
    /// names a type, and nothing beside it adds untyped GPUs.
    pub typed: bool,
    /// Whether it asks for GPUs at all (named, or added by Slurm).
    pub gpus: bool,
    /// The GPU types a typed form names.
    pub types: &'static [&'static str],
    /// No GPU option and nothing beside it: a job without GPUs.
    pub plain: bool,
    pub label: String,
}

/// Every form on one node: each GPU option (typed and untyped, and none,
/// and a GPU share) with each thing beside it, by sbatch; arrays, salloc
/// and het jobs for each GPU option alone and for the forms Slurm adds
/// GPUs to.
pub fn all() -> Vec<Form> {
    generate(&[], OPTIONS, BESIDE)
}

/// The forms that span two nodes (a cluster of two): per-node counts
/// Slurm multiplies by the nodes, a node range, tasks spread one per
/// node.
pub fn across_nodes() -> Vec<Form> {
    generate(&["-N", "2"], NODE_OPTIONS, NODE_BESIDE)
}

const NODE_OPTIONS: &[GpuOption] = &[
    GpuOption {
        name: "-N 2 --gpus-per-node",
        untyped: &["-N", "2", "--gpus-per-node=1"],
        typed: &["-N", "2", "--gpus-per-node=a40:1"],
        types: A40,
    },
    GpuOption {
        name: "-N 2 --gres",
        untyped: &["-N", "2", "--gres=gpu:1"],
        typed: &["-N", "2", "--gres=gpu:a40:1"],
        types: A40,
    },
    GpuOption {
        name: "-N 2 --gres, no count",
        untyped: &["-N", "2", "--gres=gpu"],
        typed: &["-N", "2", "--gres=gpu:a40"],
        types: A40,
    },
    GpuOption {
        name: "-N 2 --gpus",
        untyped: &["-N", "2", "--gpus=2"],
        typed: &["-N", "2", "--gpus=a40:2"],
        types: A40,
    },
    GpuOption {
        name: "-N 2 --gpus-per-task",
        untyped: &["-N", "2", "--ntasks-per-node=1", "--gpus-per-task=1"],
        typed: &["-N", "2", "--ntasks-per-node=1", "--gpus-per-task=a40:1"],
        types: A40,
    },
    GpuOption {
        name: "-N 2 --gpus-per-socket",
        untyped: &["-N", "2", "--sockets-per-node=1", "--gpus-per-socket=1"],
        typed: &["-N", "2", "--sockets-per-node=1", "--gpus-per-socket=a40:1"],
        types: A40,
    },
    GpuOption {
        name: "-N 2 --gpus-per-node, two types",
        untyped: &["-N", "2", "--gpus-per-node=h100:1,1"],
        typed: &["-N", "2", "--gpus-per-node=a40:1,h100:1"],
        types: A40_H100,
    },
    GpuOption {
        name: "-N 1-2 --gpus-per-node",
        untyped: &["-N", "1-2", "--gpus-per-node=1"],
        typed: &["-N", "1-2", "--gpus-per-node=a40:1"],
        types: A40,
    },
];

const NODE_BESIDE: &[Beside] = &[
    Beside {
        name: "",
        args: &[],
        derives: false,
        adds_untyped: false,
    },
    // One task per node, one GPU per task: Slurm adds the GPUs where no
    // option names them.
    Beside {
        name: "-n 2 --ntasks-per-gpu=1",
        args: &["-n", "2", "--ntasks-per-gpu=1"],
        derives: true,
        adds_untyped: false,
    },
    Beside {
        name: "--cpus-per-gpu=1",
        args: &["--cpus-per-gpu=1"],
        derives: false,
        adds_untyped: false,
    },
    Beside {
        name: "--gpus=2",
        args: &["--gpus=2"],
        derives: false,
        adds_untyped: true,
    },
];

/// Each GPU option of `options` (and none, and a GPU share, both with
/// `base`) with each thing of `beside`.
fn generate(base: &[&'static str], options: &[GpuOption], beside: &[Beside]) -> Vec<Form> {
    let mut forms = Vec::new();
    type GpuArgs = (
        String,
        Vec<&'static str>,
        Option<bool>,
        &'static [&'static str],
    );
    let based = |name: &str| {
        if base.is_empty() {
            name.to_owned()
        } else {
            format!("{}, {name}", base.join(" "))
        }
    };
    let mut gpu_args: Vec<GpuArgs> = vec![(based("no GPU option"), base.to_vec(), None, &[])];
    gpu_args.push((
        based("--gres=mps:50"),
        [base, &["--gres=mps:50"]].concat(),
        None,
        &[],
    ));
    for o in options {
        gpu_args.push((
            format!("{} untyped", o.name),
            o.untyped.to_vec(),
            Some(false),
            &[],
        ));
        gpu_args.push((
            format!("{} typed", o.name),
            o.typed.to_vec(),
            Some(true),
            o.types,
        ));
    }
    for (gpu_name, gpu, typed, types) in &gpu_args {
        for beside in beside {
            let derives = beside.derives && typed.is_none();
            let commands: &[Command] = if beside.name.is_empty() || derives {
                &[
                    Command::Sbatch,
                    Command::Array,
                    Command::Salloc,
                    Command::Het,
                    Command::HetFirst,
                ]
            } else {
                &[Command::Sbatch]
            };
            for &command in commands {
                let args: Vec<String> = gpu
                    .iter()
                    .chain(beside.args)
                    .map(|a| (*a).to_owned())
                    .collect();
                forms.push(Form {
                    command,
                    args,
                    typed: *typed == Some(true) && !derives && !beside.adds_untyped,
                    gpus: typed.is_some() || derives || beside.adds_untyped,
                    types,
                    plain: typed.is_none() && gpu.len() == base.len() && beside.args.is_empty(),
                    label: format!(
                        "{}: {gpu_name}{}{}",
                        command.name(),
                        if beside.name.is_empty() { "" } else { " + " },
                        beside.name
                    ),
                });
            }
        }
    }
    forms
}
