use crate::qos::audit::audit;
use crate::qos::audit::fixtures::*;
use crate::qos::check::Severity;

#[test]
fn mps_nodes_need_the_node_half() {
    let mut site = site_with(|c, _, _, _| {
        replace(
            c,
            "Epilog                  = /usr/libexec/gpushare/gpu-mps-epilog\n",
            "",
        );
    });
    site.plugstack = Some("# nothing\n".into());
    site.cgroup_conf = None;
    let k: Vec<String> = audit(&site).into_iter().map(|f| f.kind).collect();
    assert_eq!(
        k,
        [
            "mps_epilog_missing",
            "spank_gpu_mps_missing",
            "devices_unconstrained"
        ]
    );
    let site = site_with(|c, _, _, _| replace(c, "task/cgroup,task/affinity", "task/none"));
    let found = audit(&site);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].object.as_str(), found[0].what.as_str()),
        (
            "slurm.conf",
            "node node1 offers mps, but TaskPlugin lacks task/cgroup"
        )
    );
}

#[test]
fn nodes_whose_mps_slurm_stacks_are_named_with_the_lines_to_add() {
    let gres = "Name=gpu Type=a40 File=/dev/nvidia[0-3]\n\
                Name=gpu Type=h100 File=/dev/nvidia[4-5]\n\
                Name=mps Count=400 File=/dev/nvidia[0-3] Flags=all_sharing\n";
    let mut site = site_with(|c, _, _, _| {
        c.push_str("SelectTypeParameters    = CR_CORE,LL_SHARED_GRES\n");
    });
    site.gres_conf = Some(gres.into());
    let found: Vec<_> = audit(&site)
        .into_iter()
        .filter(|f| f.kind == "mps_shares_stack")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].what.starts_with("node node1 books mps per GPU"),
        "{:?}",
        found[0].what
    );
    assert!(
        found[0]
            .fix
            .contains("Name=mps Count=0 File=/dev/nvidia4 Flags=all_sharing"),
        "{:?}",
        found[0].fix
    );
    // With the h100s' Count=0 lines first: nothing to say.
    site.gres_conf = Some(format!(
        "Name=mps Count=0 File=/dev/nvidia[4-5] Flags=all_sharing\n{gres}"
    ));
    assert!(audit(&site).iter().all(|f| f.kind != "mps_shares_stack"));
    // LL_SHARED_GRES in slurm.conf but not in show config (23.11): read.
    let mut site = site_with(|_, _, _, _| {});
    site.slurm_conf = Some("SelectTypeParameters=CR_Core,LL_SHARED_GRES\n".into());
    site.gres_conf = Some(format!(
        "Name=mps Count=0 File=/dev/nvidia[4-5] Flags=all_sharing\n{gres}"
    ));
    assert!(audit(&site).iter().all(|f| f.kind != "mps_shares_stack"));
    // No gres.conf beside slurm.conf (nodes keep their own): no finding.
    site.gres_conf = None;
    assert!(audit(&site).iter().all(|f| f.kind != "mps_shares_stack"));
}

/// The fixture's site under `AutoDetect=nvml`, gres.conf holding
/// `extra` and an mps line for each of GPUs 0 to `shared - 1`, Slurm
/// spreading; the `mps_shares_stack` findings of its audit.
fn autodetected(
    shared: u32,
    extra: &str,
    nodes: Option<&str>,
) -> Vec<crate::qos::audit::AuditFinding> {
    let lines: String = (0..shared)
        .map(|i| format!("Name=mps Count=100 File=/dev/nvidia{i} Flags=all_sharing\n"))
        .collect();
    let mut site = site_with(|c, _, _, _| {
        c.push_str("SelectTypeParameters    = CR_CORE,LL_SHARED_GRES\n");
    });
    site.gres_conf = Some(format!("AutoDetect=nvml\n{extra}{lines}"));
    if let Some(nodes) = nodes {
        site.nodes = crate::qos::site::parse_nodes(nodes).0;
    }
    audit(&site)
        .into_iter()
        .filter(|f| f.kind == "mps_shares_stack")
        .collect()
}

#[test]
fn under_autodetect_the_nodes_gres_counts_the_gpus_gres_conf_does_not_list() {
    // The fixture's node has Gres=gpu:a40:4,gpu:h100:2: six GPUs, four
    // with mps lines.
    let found = autodetected(4, "", None);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .fix
            .contains("(2 of the GPUs Slurm detects here have none: `slurmd -G` on the node"),
        "{}",
        found[0].fix
    );
    let zeros = "Name=mps Count=0 File=/dev/nvidia[4-5] Flags=all_sharing\n";
    assert_eq!(autodetected(4, zeros, None), []);
}

#[test]
fn mig_slices_in_the_nodes_gres_make_its_shares_stack_whatever_gres_conf_says() {
    // The 8-GPU node of docs/configuration.md (MIG sites): six A100 that
    // share, two with MIG on, two 3g.40gb slices each.
    let node = "NodeName=node1 Arch=x86_64 \
                Gres=gpu:a100:6(S:0-1),gpu:a100_3g.40gb:4(S:1),mps:600(S:0-1) \
                Partitions=gpu State=IDLE\n";
    let found = autodetected(6, "", Some(node));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].fix,
        "4 MIG slices of the node's Gres= show GPUs with MIG on, and slurmd gives each MIG \
         slice an mps record of Count 0 with Slurm's default for mps (one GPU at a time, for \
         the whole node), which no gres.conf line can replace: keep GPUs with MIG on nodes \
         that do not share"
    );
}

#[test]
fn a_batch_start_timeout_below_the_prologs_worst_case_is_a_warning() {
    // node1 has 6 GPUs: a whole-GPU job's prolog there may take 62 s +
    // 32 s per GPU, more than a share's 179 s.
    let short = |c: &mut String, to: &str| {
        replace(
            c,
            "BatchStartTimeout       = 260 sec\n",
            &format!("BatchStartTimeout       = {to}\n"),
        );
    };
    let site = site_with(|c, _, _, _| short(c, "10 sec"));
    let found = audit(&site);
    assert_eq!(
        found
            .iter()
            .map(|f| (f.severity, f.kind.as_str()))
            .collect::<Vec<_>>(),
        [(Severity::Warning, "batch_start_timeout_short")]
    );
    let f = &found[0];
    assert!(
        f.what.starts_with(
            "node node1 offers mps, but BatchStartTimeout is 10 s (Slurm's default), below the \
             260 s gpu-mps-prolog may run"
        ),
        "{}",
        f.what
    );
    assert!(
        f.why.contains("not found BatchStartTime after startup"),
        "{}",
        f.why
    );
    assert!(f.fix.starts_with("BatchStartTimeout=260 "), "{}", f.fix);
    // Enough, and not reported (nothing to judge): no finding.
    for to in ["260 sec", "3600 sec"] {
        assert!(
            kinds_of(&site_with(|c, _, _, _| short(c, to))).is_empty(),
            "{to}"
        );
    }
    let site = site_with(|c, _, _, _| replace(c, "BatchStartTimeout       = 260 sec\n", ""));
    assert!(kinds_of(&site).is_empty());
    // A slurm.conf read as such: unset is Slurm's default.
    let mut site = site_with(|c, _, _, _| replace(c, "BatchStartTimeout       = 260 sec\n", ""));
    site.settings.from_file = true;
    assert!(kinds_of(&site).contains(&"batch_start_timeout_short".to_owned()));
}
