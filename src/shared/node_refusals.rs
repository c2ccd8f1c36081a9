//! What a user meets from a GPU node after Slurm started a share there:
//! each refusal (and the wait beside another user's MPS server), in the
//! users' words: what the job's output says, what happened, what to do.
//! One table for the users' guide (`docs/users-guide.md` holds it as
//! [`markdown_table`] writes it) and the users' page (`gpu-qos audit
//! --explain --markdown`, on a site with mps nodes); the node's own texts
//! are checked against it (`mps::node::guide_words`), and so is the
//! guide's copy.

/// One thing a share meets on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeRefusal {
    /// Words of the node's message, in order, as the job's output shows
    /// them (what lies between them differs from job to job).
    pub says: &'static [&'static str],
    pub happened: &'static str,
    pub todo: &'static str,
}

/// What a batch job sent off a node meets; the guide says it once, below
/// the table.
const REQUEUED: &str = "nothing for a batch job: gpushare requeues it and keeps it off that \
                        node a while (below); an interactive one (`srun`, `salloc`) fails: \
                        run it again, elsewhere with `--exclude=NODE`";

/// A whole GPU, always typed: an untyped request is refused under a
/// group QOS.
const WHOLE_OR_ELSEWHERE: &str = "ask for a whole GPU of the node's type, as the message writes \
                                  it (`--gres=gpu:TYPE:1`), or resubmit with \
                                  `--exclude=NODE`; the node's admins can change it";

pub const NODE_REFUSALS: &[NodeRefusal] = &[
    NodeRefusal {
        says: &[
            "run another user's MPS server",
            "(OtherUsers=refuse in gpu_mps.conf",
        ],
        happened: "the only GPUs with room serve another user's MPS server, and MPS serves one \
                   user per GPU at a time",
        todo: REQUEUED,
    },
    NodeRefusal {
        says: &[
            "MPS serves one user at a time: your job's CUDA work will wait until",
            "on this GPU end",
        ],
        happened: "not a refusal: the site lets a share wait beside another user's MPS server \
                   (`OtherUsers=queue`); this line starts the job's output (unless the site \
                   turned it off with `Banner=`)",
        todo: "nothing: its CUDA work starts when that user's jobs on the GPU end, within \
               its time limit; or cancel it and resubmit with `--exclude=NODE`",
    },
    NodeRefusal {
        says: &["GPU sharing is disabled on this node by its admin (gpu-mps disable"],
        happened: "the node's admin took it off sharing (maintenance, a move to MIG)",
        todo: REQUEUED,
    },
    NodeRefusal {
        says: &["MPS daemon", "(gpu_mps.conf MPSFailure=refuse)"],
        happened: "the MPS daemon of the GPU chosen for the share could not be started",
        todo: REQUEUED,
    },
    NodeRefusal {
        says: &[
            "stayed held by another process for the",
            "so the job is refused rather than started without the node's share records",
        ],
        happened: "a program on the node held a lock gpushare's prolog needed for all the \
                   time the prolog waits for one: the job was neither placed nor recorded",
        todo: REQUEUED,
    },
    NodeRefusal {
        says: &["set aside as failed"],
        happened: "the only GPUs with room were set aside by the node (an XID error, a GPU \
                   NVML lost, or `gpu-mps drain-gpu`)",
        todo: REQUEUED,
    },
    NodeRefusal {
        says: &[
            "MIG enabled (NVML)",
            "This job can run here as a whole GPU instead",
        ],
        happened: "a GPU of the node has MIG on, and shares are not placed beside MIG GPUs: \
                   the job fails (it is not requeued)",
        todo: WHOLE_OR_ELSEWHERE,
    },
    NodeRefusal {
        says: &[
            "this node runs cgroup v2",
            "This job can run here as a whole GPU instead",
        ],
        happened: "where gpushare places shares (always on Slurm 22.05 and 23.02), cgroup v2 \
                   cannot keep a share to the GPU gpushare chose, so every share is refused \
                   there: the job fails",
        todo: WHOLE_OR_ELSEWHERE,
    },
    NodeRefusal {
        says: &["gpushare has no configuration here (no gpu_mps.conf at"],
        happened: "the node lacks gpushare's `gpu_mps.conf`: the job fails",
        todo: "tell your sysadmins the node's name; meanwhile resubmit with `--exclude=NODE`, \
               or ask for a whole GPU by type (`--gres=gpu:TYPE:1`)",
    },
    NodeRefusal {
        says: &[
            "MPS units but one GPU holds only",
            "of this node's type instead: --gres=gpu:",
        ],
        happened: "a share never spans GPUs",
        todo: "ask for at most the units one GPU holds, or for the whole GPUs the message \
               names, typed (`--gres=gpu:TYPE:N`)",
    },
    NodeRefusal {
        says: &["no single GPU on this node has room for"],
        happened: "Slurm admits shares by the node's total, but a share must fit on one GPU",
        todo: "resubmit it (shares end and free room), or ask for fewer units",
    },
];

/// The table, as the users' guide and the users' page show it.
pub fn markdown_table() -> String {
    let mut out =
        String::from("| the job's output says | what happened | what to do |\n|---|---|---|\n");
    for r in NODE_REFUSALS {
        out.push_str(&format!(
            "| `... {} ...` | {} | {} |\n",
            r.says.join(" ... "),
            r.happened,
            r.todo
        ));
    }
    out
}

/// What follows the table on the users' page: where a requeued batch job
/// shows it (the users' guide says it at length).
pub const AFTER_TABLE: &str = "`NODE` is the node the message names. A batch job gpushare \
requeues off a node is pending again, and `scontrol show job` shows `ExcNodeList=NODE` and, in \
its `AdminComment`, `gpushare: requeued from NODE ...` with why, until the node may take it \
again.";
