use super::fixtures::*;
use super::*;

#[test]
fn the_correct_site_has_no_finding() {
    assert_eq!(audit(&site_with(|_, _, _, _| {})), []);
}

/// Changes the show-config text, QOS, partitions and gpu_qos.conf.
type Edit = dyn Fn(&mut String, &mut String, &mut String, &mut String);

#[test]
fn each_broken_link_is_one_finding() {
    use Severity::*;
    let cases: Vec<(Box<Edit>, Severity, &str)> = vec![
        (
            Box::new(|c, _, _, _| replace(c, "associations,limits,qos,safe", "associations")),
            Error,
            "enforce_incomplete",
        ),
        (
            Box::new(|c, _, _, _| replace(c, ",gres/gpu:h100", "")),
            Error,
            "tres_untracked",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "= gpu_qos", "= lua")),
            Error,
            "plugin_not_loaded",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "preempt/qos", "preempt/none")),
            Error,
            "preempt_type",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "JobRequeue              = 1", "JobRequeue = 0")),
            Note,
            "job_requeue_off",
        ),
        (
            Box::new(|c, _, _, _| {
                replace(
                    c,
                    "PriorityWeightQOS       = 10000",
                    "PriorityWeightQOS = 0",
                )
            }),
            Warning,
            "priority_weight_qos_zero",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "PriorityWeightFairShare = 1000", "")),
            Warning,
            "priority_weight_fairshare_zero",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "priority/multifactor", "priority/basic")),
            Warning,
            "priority_not_multifactor",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "gpu-mps-prolog", "site-prolog")),
            Error,
            "mps_prolog_missing",
        ),
        (
            Box::new(|_, q, _, _| {
                replace(
                    q,
                    "|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                    "||cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                )
            }),
            Error,
            "group_cannot_preempt",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "requeue|00:02:00", "requeue|00:00:00")),
            Warning,
            "no_grace_time",
        ),
        (
            Box::new(|_, q, _, _| {
                replace(q, "requeue|00:02:00|0.000000", "cancel|00:02:00|0.000000")
            }),
            Note,
            "preempt_cancels",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "requeue|00:02:00|0.000000", "off|00:02:00|0.000000")),
            Error,
            "preempt_mode_off",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "00:02:00|0.000000", "00:02:00|1.000000")),
            Note,
            "low_priority_usage_factor",
        ),
        (
            Box::new(|_, q, _, _| {
                replace(
                    q,
                    "1.000000|DenyOnLimit|100\nqos_dijk",
                    "1.000000||100\nqos_dijk",
                )
            }),
            Note,
            "no_deny_on_limit",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "gres/gpu:a40=4", "gres/gpu:a40=8")),
            Error,
            "limit_differs",
        ),
        (
            Box::new(|_, _, p, _| replace(p, ",GRES/gpu:h100=2.0", "")),
            Note,
            "billing_types_alike",
        ),
        (
            Box::new(|c, _, _, _| c.push_str("PriorityWeightAge = 100\n")),
            Note,
            "max_age_default",
        ),
        (
            Box::new(|_, _, p, _| replace(p, "GRES/gpu=1.0,", "")),
            Warning,
            "billing_typed_only",
        ),
        (
            Box::new(|_, _, p, _| {
                replace(
                    p,
                    " TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:h100=2.0",
                    "",
                )
            }),
            Note,
            "billing_ignores_gpus",
        ),
        (
            Box::new(|_, _, _, f| replace(f, "QOS=qos_dijk GPUTypes=h100 GPULimit=2\n", "")),
            Error,
            "unlisted_typed_qos",
        ),
        (
            Box::new(|_, _, p, _| replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_dijk ")),
            Error,
            "partition_qos_unenforced",
        ),
        (
            Box::new(|_, _, _, f| f.push_str("MaxCPUsPerGPU=a4O:16\n")),
            Warning,
            "cap_type_on_no_node",
        ),
        (
            Box::new(|_, _, _, f| f.push_str("Account=lafferty GPUTypes=a4O\n")),
            Warning,
            "rule_type_on_no_node",
        ),
        (
            Box::new(|c, q, _, _| {
                replace(c, ",gres/gpu:h100", ",gres/gpu:h100,gres/gpu:a100");
                replace(q, "gres/gpu:h100=2|", "gres/gpu:h100=2,gres/gpu:a100=0|");
            }),
            Warning,
            "grp_tres_type_on_no_node",
        ),
        (
            Box::new(|_, _, _, f| replace(f, "GPULimit=2\n", "GPULimit=2 Enforce=warn\n")),
            Warning,
            "only_warns",
        ),
    ];
    for (edit, severity, kind) in cases {
        let site = site_with(|c, q, p, f| edit(c, q, p, f));
        assert_eq!(kinds(&site), [(severity, kind.to_owned())], "{kind}");
    }
}

#[test]
fn fixes_are_exact() {
    let site = site_with(|c, q, _, _| {
        replace(c, "associations,limits,qos,safe", "associations");
        replace(c, ",gres/gpu:h100", "");
        replace(
            q,
            "|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
            "||cluster|00:00:00|1.000000||100\nqos_dijk",
        );
    });
    let fixes: Vec<String> = audit(&site).into_iter().map(|f| f.fix).collect();
    assert_eq!(
        fixes,
        [
            "AccountingStorageEnforce=associations,limits,qos (then restart slurmctld)",
            "AccountingStorageTRES=cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,\
             gres/gpu:a40,gres/mps,gres/gpu:h100 (then restart slurmctld)",
            "sacctmgr -i modify qos qos_lafferty set Preempt+=lowprio",
            "sacctmgr -i modify qos qos_lafferty set Flags+=DenyOnLimit",
        ]
    );
}

#[test]
fn unreadable_parts_become_notes() {
    let site = site_with(|_, q, _, _| q.push_str("broken|line\n"));
    let found = audit(&site);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].severity, found[0].kind.as_str()),
        (Severity::Note, "unread")
    );
    assert!(found[0].what.contains("2 fields"));
}

#[test]
fn job_namespaces_that_hide_the_mps_pipes_are_an_error() {
    const KIND: &str = "mps_pipes_hidden_by_job_namespaces";
    const TMPFS: &str = "JobContainerType        = job_container/tmpfs\n";
    let hidden = |site: &Site| -> Vec<AuditFinding> {
        let found = audit(site);
        assert!(
            found.iter().all(|f| f.kind == KIND),
            "only this check speaks: {found:?}"
        );
        found
    };
    // No plugin (show config's `(null)`): nothing, whatever the files say.
    let site = site_under_namespaces(
        "JobContainerType        = (null)\n",
        Some("Dirs=/run\n"),
        None,
        Some("StateDir=/tmp/x\n"),
    );
    assert_eq!(audit(&site), []);
    // tmpfs, Slurm's default Dirs (/tmp,/dev/shm), gpushare's StateDir.
    assert_eq!(audit(&site_under_namespaces(TMPFS, None, None, None)), []);
    let site = site_under_namespaces(TMPFS, Some("BasePath=/var/ns\n"), None, None);
    assert_eq!(audit(&site), []);

    // Dirs= that lists /run: the default StateDir's pipes are in it.
    let site = site_under_namespaces(
        TMPFS,
        Some("AutoBasePath=true BasePath=/var/ns Dirs=/tmp,/dev/shm,/run\n"),
        None,
        None,
    );
    let found = hidden(&site);
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(
        (f.severity, f.object.as_str(), f.doc.as_str()),
        (
            Severity::Error,
            "job_container.conf",
            "https://slurm.schedmd.com/job_container.conf.html"
        )
    );
    assert_eq!(
        f.what,
        "node node1 offers mps under job namespaces (job_container/tmpfs): its \
         job_container.conf gives each job its own /run, which holds the MPS pipes under \
         /run/gpu-mps-mps (gpushare's default StateDir (no gpu_mps.conf beside slurm.conf \
         sets one))"
    );
    assert!(
        f.why.contains("cannot reach its GPU's MPS server"),
        "{}",
        f.why
    );
    assert_eq!(
        f.fix,
        "StateDir= in gpu_mps.conf outside /tmp, /dev/shm, /run, or take /run out of Dirs= \
         in job_container.conf"
    );

    // namespace/linux (25.11): namespace.yaml's dirs:, not job_container.conf.
    let linux = "NamespaceType           = namespace/linux\n";
    let yaml =
        "defaults:\n  auto_base_path: true\n  base_path: \"/var/ns\"\n  dirs: \"/tmp,/run\"\n";
    let site = site_under_namespaces(linux, Some("Dirs=/tmp\n"), Some(yaml), None);
    let found = hidden(&site);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].object.as_str(), found[0].doc.as_str()),
        (
            "namespace.yaml",
            "https://slurm.schedmd.com/namespace.yaml.html"
        )
    );
    assert!(
        found[0]
            .what
            .contains("(namespace/linux): its namespace.yaml gives each job its own /run"),
        "{}",
        found[0].what
    );
    assert!(found[0]
        .fix
        .ends_with("take /run out of dirs: in namespace.yaml"));
    let yaml = "defaults:\n  base_path: \"/var/ns\"\n  dirs: \"/tmp,/dev/shm\"\n";
    let site = site_under_namespaces(linux, Some("Dirs=/run\n"), Some(yaml), None);
    assert_eq!(audit(&site), []);
    // 26.05's dir_confs: supersedes dirs:, and the fix names it.
    let yaml = "defaults:\n  dirs: /tmp\n  dir_confs:\n    - path: /run\n      tmpfs: true\n";
    let site = site_under_namespaces(linux, None, Some(yaml), None);
    let found = hidden(&site);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .fix
            .ends_with("take /run out of dir_confs: in namespace.yaml"),
        "{}",
        found[0].fix
    );

    // gpu_mps.conf on the controller: its StateDir under Slurm's default Dirs.
    let site = site_under_namespaces(TMPFS, None, None, Some("StateDir=/tmp/x\n"));
    let found = hidden(&site);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].what,
        "node node1 offers mps under job namespaces (job_container/tmpfs): Slurm's default \
         Dirs= (no job_container.conf beside slurm.conf) gives each job its own /tmp, which \
         holds the MPS pipes under /tmp/x-mps (StateDir= of the gpu_mps.conf beside slurm.conf)"
    );
    assert_eq!(
        found[0].fix,
        "StateDir=/run/gpu-mps in gpu_mps.conf (gpushare's default, which no job gets its own \
         copy of), or take /tmp out of Dirs= in job_container.conf"
    );
    // The plugin in slurm.conf's text where show config does not say.
    let mut site = site_under_namespaces("", None, None, Some("StateDir=/tmp/x\n"));
    assert_eq!(audit(&site), []);
    site.slurm_conf = Some(format!(
        "{SLURM_CONF}JobContainerType=job_container/tmpfs\n"
    ));
    assert_eq!(hidden(&site).len(), 1);
    // No node offers mps: nothing to reach.
    site.nodes = crate::qos::site::parse_nodes(
        "NodeName=node1 Gres=gpu:a40:4,gpu:h100:2 Partitions=gpu State=IDLE\n",
    )
    .0;
    assert!(audit(&site).iter().all(|f| f.kind != KIND));
}

/// `scontrol show node -o` of Slurm 26.05 (tests/fixtures/slurm/26.05) for
/// a node of 8 A100 under `AutoDetect=nvml`, two of them in MIG mode with
/// two 3g.40gb slices each, slurm.conf naming the types as detected.
const MIG_NODE: &str = "NodeName=node1 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 \
    CPUTot=64 CPULoad=0.12 AvailableFeatures=(null) ActiveFeatures=(null) \
    Gres=gpu:nvidia_a100-sxm4-80gb:6(S:0-1),gpu:nvidia_a100_3g.40gb:4(S:1) NodeAddr=gpu17 \
    NodeHostName=gpu17 Version=26.05.5 OS=Linux 6.12.0-55.el10.x86_64 #1 SMP PREEMPT_DYNAMIC  \
    RealMemory=1000000 AllocMem=0 FreeMem=990000 Sockets=2 Boards=1 State=IDLE \
    ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  \
    CfgTRES=cpu=64,mem=1000000M,billing=64,gres/gpu=10,gres/gpu:nvidia_a100-sxm4-80gb=6,\
    gres/gpu:nvidia_a100_3g.40gb=4 AllocTRES= CurrentWatts=0 AveWatts=0\n";

#[test]
fn mig_types_spelled_as_older_drivers_named_them_match_no_node() {
    let mut site = site_with(|c, q, _, f| {
        replace(
            c,
            "gres/gpu:h100,",
            "gres/gpu:h100,gres/gpu:nvidia_a100-sxm4-80gb,gres/gpu:nvidia_a100_3g.40gb,\
             gres/gpu:a100_3g.40gb,",
        );
        replace(
            q,
            "qos_dijk|gres/gpu:h100=2",
            "qos_dijk|gres/gpu:a100_3g.40gb=2",
        );
        replace(
            f,
            "QOS=qos_dijk GPUTypes=h100",
            "QOS=qos_dijk GPUTypes=a100_*",
        );
        // The other group on the whole GPUs, by their detected type.
        let whole = "gres/gpu:nvidia_a100-sxm4-80gb";
        replace(q, "gres/gpu:a40=4", &format!("{whole}=4"));
        replace(f, "GPUTypes=a40 ", "GPUTypes=nvidia_a100-sxm4-80gb ");
    });
    let (nodes, unread) = crate::qos::site::parse_nodes(MIG_NODE);
    assert!(unread.is_empty(), "{unread:?}");
    site.nodes = nodes;
    let found = audit(&site);
    let of =
        |kind: &str| -> Vec<&AuditFinding> { found.iter().filter(|f| f.kind == kind).collect() };
    let grp = of("grp_tres_type_on_no_node");
    assert_eq!(grp.len(), 1, "{found:#?}");
    assert_eq!(
        (
            grp[0].severity,
            grp[0].object.as_str(),
            grp[0].what.as_str()
        ),
        (
            Severity::Warning,
            "QOS qos_dijk",
            "QOS qos_dijk limits gres/gpu:a100_3g.40gb, a type no node's Gres carries (nodes \
             have nvidia_a100-sxm4-80gb, nvidia_a100_3g.40gb)"
        )
    );
    assert_eq!(
        grp[0].fix,
        "sacctmgr -i modify qos qos_dijk set \
         GrpTRES=gres/gpu:a100_3g.40gb=-1,gres/gpu:nvidia_a100_3g.40gb=2"
    );
    let rule = of("rule_type_on_no_node");
    assert_eq!(rule.len(), 1, "{found:#?}");
    assert_eq!(
        rule[0].what,
        "GPUTypes entry a100_* matches no node's GPU type (nodes have nvidia_a100-sxm4-80gb, \
         nvidia_a100_3g.40gb)"
    );
    // The same QOS as the partition's, and an account's limit.
    let mut site = site_with(|_, q, p, _| {
        replace(
            q,
            "qos_dijk|gres/gpu:h100=2",
            "qos_dijk|gres/gpu:h100=2,gres/gpu:a100=1",
        );
        replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_dijk ");
    });
    site.associations = vec![crate::qos::check::AssocRecord {
        account: "lafferty".into(),
        user: Some("alice".into()),
        partition: Some("gpu".into()),
        gpu_limits: vec![crate::qos::check::GpuTresLimit {
            gpu_type: Some("H100".into()),
            count: 1,
        }],
    }];
    let texts: Vec<(String, String)> = audit(&site)
        .into_iter()
        .filter(|f| f.kind == "grp_tres_type_on_no_node")
        .map(|f| (f.what, f.fix))
        .collect();
    assert_eq!(
        texts,
        [(
            "QOS qos_dijk (of partition gpu) limits gres/gpu:a100, a type no node's Gres \
             carries (nodes have a40, h100)"
                .to_owned(),
            "sacctmgr -i modify qos qos_dijk set GrpTRES=gres/gpu:a100=-1, and a limit on a \
             type the nodes have (a40, h100)"
                .to_owned()
        )],
        "a type in another case is the node's own"
    );
}

/// The controller's slurm.conf lines shipped with gpushare
/// (`slurm.conf.fragment`), and the shipped plugstack.conf line, put into
/// the correct site, leave nothing for the audit to find: every key the
/// fragment sets is one the audit reads as it must be.
#[test]
fn the_shipped_slurm_conf_fragment_and_plugstack_line_pass_the_audit() {
    let fragment = include_str!("../../../plugins/job_submit_gpu_qos/slurm.conf.fragment");
    let plugstack = include_str!("../../../plugins/spank_gpu_mps/plugstack.conf.example")
        .replace("@PLUGINDIR@", "/usr/lib64/slurm")
        .replace("@SYSCONFDIR@", "/etc/slurm");
    let set: Vec<(&str, &str)> = fragment
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect();
    assert!(set.len() >= 10, "{set:?}");
    let mut site = site_with(|config, _, _, _| {
        let kept: Vec<&str> = config
            .lines()
            .filter(|l| {
                let key = l.split('=').next().unwrap_or("").trim();
                !set.iter().any(|(k, _)| k.eq_ignore_ascii_case(key))
            })
            .collect();
        let mut text = kept.join("\n") + "\n";
        for (key, value) in &set {
            text.push_str(&format!("{key} = {value}\n"));
        }
        *config = text;
    });
    site.plugstack = Some(plugstack);
    // What the site set on purpose: the fragment is slurm.conf's text.
    site.slurm_conf = Some(fragment.into());
    assert_eq!(audit(&site), []);
}

#[test]
fn running_jobs_with_a_qos_list_are_a_warning_where_a_restart_moves_them() {
    use crate::qos::slurm::qos_lists::ListedJob;
    let listed = |job: &str| ListedJob {
        job: job.into(),
        qos: "qos_lafferty".into(),
        requested: vec!["qos_lafferty".into(), "lowprio".into()],
    };
    let site = Site {
        qos_lists: Some(vec![listed("101"), listed("102")]),
        ..site_with(|config, _, _, _| config.push_str("SLURM_VERSION = 25.05.8\n"))
    };
    let found: Vec<AuditFinding> = audit(&site)
        .into_iter()
        .filter(|f| f.kind == "qos_list_moved_on_restart")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.object, "QOS lowprio,qos_lafferty");
    assert!(
        f.what
            .contains("2 running jobs asked for a list of QOS: 101 (qos_lafferty,lowprio, started under qos_lafferty)"),
        "{}",
        f.what
    );
    assert!(
        f.why.contains("slurmctld 25.05.8") && f.why.contains("23033"),
        "{}",
        f.why
    );
    // None running, or not read (another release): nothing to say.
    for lists in [Some(Vec::new()), None] {
        let site = Site {
            qos_lists: lists,
            ..site_with(|_, _, _, _| {})
        };
        assert!(audit(&site)
            .iter()
            .all(|f| f.kind != "qos_list_moved_on_restart"));
    }
}

#[test]
fn an_mps_node_with_more_jobs_than_slurmds_connections_is_a_warning() {
    const KIND: &str = "slurmd_connections_short";
    let on = |release: &str, params: &str, cpus: Option<u64>| -> Vec<AuditFinding> {
        let mut site = site_with(|config, _, _, _| {
            config.push_str(&format!(
                "SLURM_VERSION = {release}\nSlurmdParameters = {params}\n"
            ));
        });
        site.nodes.iter_mut().for_each(|n| n.cpus = cpus);
        audit(&site)
            .into_iter()
            .filter(|f| f.kind == KIND)
            .collect()
    };
    // mps:600, no CPU count: up to 600 shares, over slurmd's 512.
    let found = on("25.05.8", "(null)", None);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].severity, Severity::Warning);
    assert!(
        found[0].what.contains("node1 may run 600 jobs at once"),
        "{}",
        found[0].what
    );
    assert_eq!(found[0].fix, "SlurmdParameters=conmgr_max_connections=640");
    // The site's other parameters kept in the line to write.
    let found = on(
        "26.05.3",
        "l3cache_as_socket,conmgr_max_connections=256",
        Some(2048),
    );
    assert_eq!(
        found.first().map(|f| f.fix.as_str()),
        Some("SlurmdParameters=conmgr_max_connections=640,l3cache_as_socket")
    );
    // Fewer CPUs than connections, a limit raised, or a release without
    // slurmd's connection manager (before 25.05): nothing to say.
    assert!(on("25.05.8", "(null)", Some(256)).is_empty());
    assert!(on("25.05.8", "conmgr_max_connections=1024", None).is_empty());
    assert!(on("24.05.8", "(null)", None).is_empty());
}
