use super::*;

/// What node gpu01 takes from `text`, a file for every node.
fn parse(text: &str, file: &str) -> Result<GpuMpsConfig, ConfigError> {
    super::parse(text, file, "gpu01").map(|c| c.unwrap_or_else(|| panic!("no GPUs: {text:?}")))
}

#[test]
fn private_data_follows_slurm_unless_set() {
    let hides = "ClusterName=x\nPrivateData=usage,Jobs # who runs what\n";
    let shows = "ClusterName=x\nPrivateData=usage,accounts\n#PrivateData=jobs\n";
    assert!(slurm_hides_users(hides));
    assert!(slurm_hides_users("privatedata = users\n"));
    assert!(slurm_hides_users("PrivateData=all\n"));
    // As slurmctld reads it: a substring, in any case, quoted or not.
    assert!(slurm_hides_users("PrivateData=job\n"));
    assert!(slurm_hides_users("PrivateData=\"usage,USER\"\n"));
    assert!(!slurm_hides_users("PrivateData=usage,nodes,events\n"));
    assert!(!slurm_hides_users(shows));
    assert!(!slurm_hides_users(""));
    let auto = GpuMpsConfig::default();
    assert_eq!(auto.hides_users(Some(hides)), Some(true));
    assert_eq!(auto.hides_users(Some(shows)), Some(false));
    assert_eq!(auto.hides_users(None), None);
    let yes = parse("PrivateData=yes\n", "gpu_mps.conf").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(yes.hides_users(None), Some(true));
    assert_eq!(yes.hides_users(Some(shows)), Some(true));
    let no = parse("PrivateData=no\n", "gpu_mps.conf").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(no.hides_users(Some(hides)), Some(false));
    let bad = parse("PrivateData=maybe\n", "gpu_mps.conf")
        .err()
        .map(|e| e.to_string());
    assert!(bad.is_some_and(|e| e.contains("gpu_mps.conf:1") && e.contains("auto, yes or no")));
}

#[test]
fn full_file_parses() {
    let text = "UnitsPerGPU=50 # half GPUs\nGPUDevices=/dev/nvidia[0-1],/dev/nvidia3\nStateDir=/run/x\nSlurmMpsCount=1600\nGPUMemory=48G\nMPSControl=none\nplacement=Slurm\n";
    let cfg = parse(text, "gpu_mps.conf").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.units_per_gpu, 50);
    assert_eq!(
        cfg.gpu_devices,
        Some(vec![
            PathBuf::from("/dev/nvidia0"),
            PathBuf::from("/dev/nvidia1"),
            PathBuf::from("/dev/nvidia3")
        ])
    );
    assert_eq!(cfg.state_dir, PathBuf::from("/run/x"));
    assert_eq!(cfg.gpu_memory_mib, Some(48 * 1024));
    assert_eq!(cfg.mps_control, MpsControl::Disabled);
    assert_eq!(cfg.placement, Placement::Slurm);
    assert_eq!(cfg.memory_limit_mib(25, None), Some(24576));
    // NVML's figure wins over GPUMemory=.
    assert_eq!(cfg.memory_limit_mib(25, Some(40960)), Some(20480));
    assert_eq!(cfg.thread_percentage(25), 50);
    assert_eq!(cfg.thread_percentage(0), 1);
    assert!(!cfg.multi_user);
    assert_eq!(cfg.max_clients_per_gpu, 48);
}

#[test]
fn mps_keys_parse() {
    let text =
        "MPSControl=auto\nMultiUser=yes\nMemoryLimit=8G\nOtherUsers=queue\nMaxClientsPerGPU=16\n";
    let cfg = parse(text, "f").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.mps_control, MpsControl::FromPath);
    assert!(cfg.multi_user);
    assert_eq!(cfg.memory_limit, MemoryLimit::Fixed(8192));
    assert_eq!(cfg.memory_limit_mib(10, Some(1 << 20)), Some(8192));
    assert_eq!(cfg.other_users, OtherUsers::Queue);
    // A client of a second user waits for the first's to exit: a job
    // is refused rather than left waiting unless the site chose so.
    assert_eq!(GpuMpsConfig::default().other_users, OtherUsers::Refuse);
    assert_eq!(cfg.max_clients_per_gpu, 16);
    // No share runs without its MPS limits unless the site says so.
    assert_eq!(cfg.mps_failure, MpsFailure::Refuse);
    // Nothing but the MPS server holds a context on a shared GPU
    // unless the site says so.
    assert!(cfg.exclusive_while_shared);
    let chosen =
        parse("MPSFailure=run\nComputeMode=leave\n", "f").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(chosen.mps_failure, MpsFailure::Run);
    assert!(!chosen.exclusive_while_shared);
    assert!(parse("MPSFailure=maybe\n", "f")
        .is_err_and(|e| e.to_string().contains("MPSFailure must be refuse or run")));
    let none = parse("MemoryLimit=none\nGPUMemory=48G\n", "f").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(none.memory_limit_mib(50, Some(1000)), None);
    // Proportional without any figure for the GPU's memory: no limit.
    assert_eq!(GpuMpsConfig::default().memory_limit_mib(50, None), None);
}

#[test]
fn banner_goes_where_the_site_says() {
    // Where it went before the key existed: a site upgrading keeps it.
    assert_eq!(GpuMpsConfig::default().banner, Banner::Stderr);
    for (text, want) in [
        ("Banner=stderr\n", Banner::Stderr),
        ("banner=LOG # slurmd's log only\n", Banner::Log),
        ("Banner=off\n", Banner::Off),
        ("Banner=none\n", Banner::Off),
    ] {
        let cfg = parse(text, "f").unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(cfg.banner, want, "{text:?}");
    }
    let bad = parse(
        "UnitsPerGPU=100\nBanner=syslog\n",
        "/etc/slurm/gpu_mps.conf",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        bad.starts_with(
            "/etc/slurm/gpu_mps.conf:2: Banner must be stderr, log or off, got \"syslog\""
        ),
        "{bad}"
    );
    assert!(parse("Banner=log\nBanner=off\n", "f").is_err_and(|e| e
        .to_string()
        .starts_with("f:2: Banner already set on line 1")));
    assert!(parse("Banner=\n", "f")
        .is_err_and(|e| e.to_string().starts_with("f:1: Banner has an empty value")));
}

#[test]
fn empty_file_gives_defaults() {
    assert_eq!(parse("# nothing\n", "f"), Ok(GpuMpsConfig::default()));
}

#[test]
fn errors_name_file_and_line() {
    let cases = [
        (
            "UnitsPerGPU=0\n",
            "f:1: UnitsPerGPU must be an integer from 1 to 1000000, got \"0\"",
        ),
        ("\nColour=red\n", "f:2: unknown key \"Colour\""),
        ("StateDir=run\n", "f:1: StateDir must be an absolute path"),
        (
            "UnitsPerGPU=1\nunitspergpu=2\n",
            "f:2: UnitsPerGPU already set on line 1",
        ),
        ("GPUDevices=/dev/nvidia[3-1]\n", "f:1: bad range \"3-1\""),
        ("GPUDevices=/dev/nvidia[0-1\n", "f:1: bad brackets"),
        ("GPUMemory=lots\n", "f:1: GPUMemory must be a size"),
        (
            "Placement=mine\n",
            "f:1: Placement must be auto, slurm or gpushare, got \"mine\"",
        ),
        ("StateDir\n", "f:1: expected Key=Value, got \"StateDir\""),
        ("statedir=\n", "f:1: StateDir has an empty value"),
        ("MultiUser=maybe\n", "f:1: MultiUser must be yes or no"),
        (
            "MemoryLimit=half\n",
            "f:1: MemoryLimit must be proportional, none or a size",
        ),
        (
            "OtherUsers=mix\n",
            "f:1: OtherUsers must be queue or refuse",
        ),
        (
            "MaxClientsPerGPU=0\n",
            "f:1: MaxClientsPerGPU must be an integer from 1 to 1024",
        ),
        (
            "MPSControl=nvidia\n",
            "f:1: MPSControl must be auto, none or an absolute path",
        ),
    ];
    for (text, want) in cases {
        let e = parse(text, "f")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
}

#[test]
fn count_arithmetic_matches_slurm_22_05() {
    let cfg = GpuMpsConfig {
        slurm_mps_count: Some(1600),
        ..GpuMpsConfig::default()
    };
    assert_eq!(cfg.slurm_count_for(4), 1600);
    // mps:50 on a 4-GPU node with Count=1600: Slurm says 12 % (of 400).
    assert_eq!(cfg.slurm_per_gpu_count(4), 400);
    assert_eq!(GpuMpsConfig::default().slurm_per_gpu_count(4), 400);
    assert_eq!(GpuMpsConfig::default().slurm_per_gpu_count(0), 0);
}

/// What `node` takes from `text` (the file `f`), or the error.
fn settings(text: &str, node: &str) -> Result<NodeSettings, String> {
    parse_for(text, "f", node).map_err(|e| e.to_string())
}

fn taken(s: &NodeSettings) -> Vec<(&str, &str, usize, Option<&str>)> {
    s.taken
        .iter()
        .map(|t| (t.key, t.value.as_str(), t.line, t.node_name.as_deref()))
        .collect()
}

const SHARED: &str = "# one file for every node of a shared /etc/slurm\n\
                      UnitsPerGPU=100\n\
                      StateDir=/run/gpu-mps\n\
                      NodeName=gpu[01-04] GPUDevices=/dev/nvidia[0-3]\n\
                      NodeName=gpu[05-06] GPUDevices=/dev/nvidia[0-1] UnitsPerGPU=50\n\
                      NodeName=gpu06 MemoryLimit=none\n";

#[test]
fn one_file_gives_each_node_its_own_settings() {
    let s = settings(SHARED, "gpu02").unwrap_or_else(|e| panic!("{e}"));
    let cfg = s.cfg.clone().unwrap_or_else(|| panic!("gpu02 has GPUs"));
    assert_eq!(cfg.units_per_gpu, 100);
    assert_eq!(cfg.gpu_devices.map(|d| d.len()), Some(4));
    assert_eq!(s.node_lines, [(4, "gpu[01-04]".to_owned())]);
    assert!(s.scoped && s.no_gpus.is_none());
    assert_eq!(
        taken(&s),
        [
            ("UnitsPerGPU", "100", 2, None),
            ("StateDir", "/run/gpu-mps", 3, None),
            ("GPUDevices", "/dev/nvidia[0-3]", 4, Some("gpu[01-04]")),
        ]
    );
    // gpu06: two lines of its own, each key from one of them; its
    // UnitsPerGPU from its line, over the one for every node.
    let s = settings(SHARED, "gpu06").unwrap_or_else(|e| panic!("{e}"));
    let cfg = s.cfg.clone().unwrap_or_else(|| panic!("gpu06 has GPUs"));
    assert_eq!(cfg.units_per_gpu, 50);
    assert_eq!(cfg.gpu_devices.map(|d| d.len()), Some(2));
    assert_eq!(cfg.memory_limit, MemoryLimit::Unlimited);
    assert_eq!(
        s.node_lines,
        [(5, "gpu[05-06]".to_owned()), (6, "gpu06".to_owned())]
    );
    assert_eq!(
        taken(&s),
        [
            ("StateDir", "/run/gpu-mps", 3, None),
            ("GPUDevices", "/dev/nvidia[0-1]", 5, Some("gpu[05-06]")),
            ("UnitsPerGPU", "50", 5, Some("gpu[05-06]")),
            ("MemoryLimit", "none", 6, Some("gpu06")),
        ]
    );
    assert_eq!(
        super::parse(SHARED, "f", "gpu05")
            .ok()
            .flatten()
            .map(|c| (c.units_per_gpu, c.memory_limit)),
        Some((50, MemoryLimit::Proportional))
    );
}

#[test]
fn a_node_line_wins_wherever_it_stands() {
    let text = "NodeName=gpu01 UnitsPerGPU=50\nUnitsPerGPU=100\nGPUDevices=/dev/nvidia0\n";
    let units = |node: &str| {
        super::parse(text, "f", node)
            .ok()
            .flatten()
            .map(|c| c.units_per_gpu)
    };
    assert_eq!(units("gpu01"), Some(50));
    assert_eq!(units("gpu02"), Some(100));
}

#[test]
fn two_node_lines_for_one_node_may_not_set_one_key() {
    let clash = "UnitsPerGPU=100\n\
                 NodeName=gpu[01-04] UnitsPerGPU=50\n\
                 NodeName=gpu[04-08] UnitsPerGPU=50\n";
    // An error whichever node reads it, naming both lines and the node.
    for node in ["gpu01", "gpu04", "cpu01"] {
        let e = settings(clash, node).err().unwrap_or_default();
        assert_eq!(
            e,
            "f:3: UnitsPerGPU for node gpu04 already set on line 2: two NodeName= lines that \
             name one node may not set the same key",
            "{node}"
        );
    }
    // Apart, or on other keys: fine.
    for fine in [
        "NodeName=gpu[01-03] UnitsPerGPU=50\nNodeName=gpu[04-08] UnitsPerGPU=25\n",
        "NodeName=gpu[01-04] UnitsPerGPU=50\nNodeName=gpu04 Banner=log\n",
        "NodeName=gpu1 UnitsPerGPU=50\nNodeName=gpu01 UnitsPerGPU=25\n",
    ] {
        assert!(settings(fine, "gpu04").is_ok(), "{fine}");
    }
    // Twice on one line, as on a line for every node.
    let e = settings("NodeName=gpu01 Banner=log Banner=off\n", "gpu01");
    assert!(e
        .as_ref()
        .is_err_and(|e| e.starts_with("f:1: Banner already set on line 1")));
    let e = settings(
        "GPUDevices=/dev/nvidia0\nNodeName=x UnitsPerGPU=1\nGPUDevices=/dev/nvidia1\n",
        "x",
    );
    assert!(e
        .as_ref()
        .is_err_and(|e| e.starts_with("f:3: GPUDevices already set on line 1")));
}

#[test]
fn a_node_no_gpu_devices_reach_shares_nothing() {
    // A CPU node of the shared /etc/slurm: no line gives it GPUs.
    let s = settings(SHARED, "cpu01").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.cfg, None);
    assert!(s.node_lines.is_empty());
    let why = s.no_gpus.unwrap_or_default();
    assert!(
        why.starts_with("f gives node cpu01 no GPUs: it has NodeName= lines"),
        "{why}"
    );
    let told = no_gpus_refusal(7, &why);
    assert!(told.starts_with("gpu_mps: job 7: Slurm gave this job an MPS share"));
    assert!(told.contains("so it is refused") && told.contains("GPUDevices="));
    // Settings but no GPUDevices= for it: still none.
    let text = "GPUDevices=/dev/nvidia0\n".to_owned();
    assert!(
        super::parse("NodeName=gpu01 UnitsPerGPU=50\n", "f", "gpu01").is_ok_and(|c| c.is_none())
    );
    // GPUDevices= on a line for every node: every node shares.
    let both = format!("{text}NodeName=gpu01 UnitsPerGPU=50\n");
    assert!(super::parse(&both, "f", "cpu01").is_ok_and(|c| c.is_some()));
    // No NodeName= line: every node's file, as before (devices found).
    let s = settings("UnitsPerGPU=50\n", "cpu01").unwrap_or_else(|e| panic!("{e}"));
    assert!(!s.scoped && s.cfg.is_some_and(|c| c.gpu_devices.is_none()));
}

#[test]
fn every_line_is_checked_whichever_node_it_is_for() {
    let text = format!("{SHARED}NodeName=gpu09 UnitsPerGPU=0\n");
    for node in ["gpu01", "gpu09", "cpu01"] {
        let e = settings(&text, node).err().unwrap_or_default();
        assert!(
            e.starts_with("f:7: UnitsPerGPU must be an integer from 1 to 1000000"),
            "{node}: {e}"
        );
    }
    for (text, want) in [
        (
            "NodeName=gpu[1-99999999] UnitsPerGPU=1\n",
            "f:1: NodeName=gpu[1-99999999]: \"gpu[1-99999999]\" names more than 65536 nodes",
        ),
        (
            "NodeName=n[0-18446744073709551615] UnitsPerGPU=1\n",
            "f:1: NodeName=n[0-18446744073709551615]: \"n[0-18446744073709551615]\" names more \
             than 65536 nodes",
        ),
        (
            &*format!(
                "UnitsPerGPU=1\nNodeName=n[{0}1-{0}65536] UnitsPerGPU=1\n",
                "0".repeat(99_999)
            ),
            "f:2: NodeName=\"n[000000000",
        ),
        (
            "NodeName=gpu01 Colour=red\n",
            "f:1: unknown key \"Colour\" (known: NodeName, UnitsPerGPU",
        ),
        (
            "NodeName=gpu01\nUnitsPerGPU=1\n",
            "f:1: NodeName=gpu01 sets nothing",
        ),
        (
            "UnitsPerGPU=1 NodeName=gpu01\n",
            "f:1: NodeName=gpu01 must be the first word",
        ),
    ] {
        let e = settings(text, "gpu01").err().unwrap_or_default();
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
}

#[test]
fn share_usage_is_nvml_none_or_a_program() {
    assert_eq!(GpuMpsConfig::default().share_usage, ShareUsage::Nvml);
    for (text, want) in [
        ("ShareUsage=NVML\n", ShareUsage::Nvml),
        ("ShareUsage=none\n", ShareUsage::Off),
        (
            "ShareUsage=/opt/x/usage\n",
            ShareUsage::Program(PathBuf::from("/opt/x/usage")),
        ),
    ] {
        let cfg = parse(text, "f").unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(cfg.share_usage, want, "{text:?}");
    }
    assert!(
        parse("UnitsPerGPU=100\nShareUsage=dcgm\n", "f").is_err_and(|e| e
            .to_string()
            .starts_with("f:2: ShareUsage must be nvml, none or an absolute path"))
    );
}

#[test]
fn usage_record_is_admincomment_or_none() {
    assert!(GpuMpsConfig::default().usage_record);
    for (text, want) in [
        ("UsageRecord=AdminComment\n", true),
        ("UsageRecord=none\n", false),
    ] {
        let cfg = parse(text, "f").unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(cfg.usage_record, want, "{text:?}");
    }
    assert!(
        parse("UnitsPerGPU=100\nUsageRecord=comment\n", "f").is_err_and(|e| e
            .to_string()
            .starts_with("f:2: UsageRecord must be admincomment or none"))
    );
}

#[test]
fn self_test_keys_take_names_paths_and_users() {
    let cfg = GpuMpsConfig::default();
    assert_eq!(cfg.self_test, SelfTest::Off);
    assert_eq!(cfg.cuda_library, PathBuf::from("libcuda.so.1"));
    assert_eq!(cfg.self_test_user, "nobody");
    let cfg = parse(
        "SelfTest=daemon-start\nCudaLibrary=/usr/lib64/libcuda.so.1\nSelfTestUser=gpu-probe\n",
        "f",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.self_test, SelfTest::DaemonStart);
    assert_eq!(cfg.cuda_library, PathBuf::from("/usr/lib64/libcuda.so.1"));
    assert_eq!(cfg.self_test_user, "gpu-probe");
    for (line, named) in [
        ("CudaLibrary=lib/libcuda.so.1", "CudaLibrary"),
        ("SelfTest=always", "SelfTest"),
        ("SelfTestUser=-x", "SelfTestUser"),
        ("SelfTestUser=a;b", "SelfTestUser"),
    ] {
        let e = parse(line, "f").map(|_| ()).map_err(|e| e.to_string());
        assert!(
            e.as_ref()
                .is_err_and(|e| e.starts_with(&format!("f:1: {named} must"))),
            "{line}: {e:?}"
        );
    }
}

#[test]
fn private_mps_is_refused_unless_the_site_allows_it() {
    assert!(!GpuMpsConfig::default().private_mps);
    let allowed = parse("PrivateMPS=allow\n", "f").unwrap_or_else(|e| panic!("{e}"));
    assert!(allowed.private_mps);
    let refused = parse("PrivateMPS=no\n", "f").unwrap_or_else(|e| panic!("{e}"));
    assert!(!refused.private_mps);
    let e = parse("UnitsPerGPU=100\nPrivateMPS=maybe\n", "f").map(|_| ());
    assert!(
        e.as_ref().is_err_and(|e| e
            .to_string()
            .starts_with("f:2: PrivateMPS must be allow or no")),
        "{e:?}"
    );
}

/// The manual page, the docs and the shipped example, held to the parser.
mod docs {
    use super::*;
    use crate::shared::doc_keys;

    const MAN: &str = include_str!("../../../docs/man/gpu_mps.conf.5");
    const EXAMPLE: &str = include_str!("../../../plugins/spank_gpu_mps/gpu_mps.conf.example");

    fn code_keys() -> Vec<(&'static str, Option<&'static str>)> {
        keys().collect()
    }

    /// `cfg` with the values that mean "unset" as unset.
    fn as_unset(mut cfg: GpuMpsConfig) -> GpuMpsConfig {
        if cfg.syslog_socket.as_deref() == Some(std::path::Path::new(DEFAULT_SYSLOG_SOCKET)) {
            cfg.syslog_socket = None;
        }
        cfg
    }

    #[test]
    fn each_keys_default_text_is_what_the_parser_takes_without_it() {
        for (key, default) in keys() {
            let Some(value) = default else { continue };
            let text = format!("{key}={value}\n");
            let cfg = parse(&text, "f").unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(as_unset(cfg), GpuMpsConfig::default(), "{text:?}");
        }
    }

    #[test]
    fn the_manual_page_and_the_configuration_table_name_every_key_and_its_default() {
        let heading = "## `gpu_mps.conf` (GPU nodes)";
        doc_keys::assert_docs_agree("gpu_mps.conf", MAN, heading, &code_keys());
    }

    /// Checks that every commented-out single-key line of `text` shows
    /// the key's default: added to the active lines, it changes nothing.
    fn commented_lines_show_defaults(name: &str, text: &str) {
        let (active, defaults) = doc_keys::default_lines(text, &code_keys());
        let base = parse(&active, name).unwrap_or_else(|e| panic!("{e}"));
        for (line, setting) in &defaults {
            let with = format!("{active}{setting}\n");
            let cfg = parse(&with, name).unwrap_or_else(|e| panic!("{name}:{line}: {e}"));
            assert_eq!(
                as_unset(cfg),
                as_unset(base.clone()),
                "{name}:{line}: `{setting}` is not the default"
            );
        }
    }

    #[test]
    fn the_shipped_example_parses_and_each_commented_line_is_the_default() {
        let name = "plugins/spank_gpu_mps/gpu_mps.conf.example";
        let all = doc_keys::settings_text(EXAMPLE);
        for node in ["gpu01", "gpu05", "cpu01"] {
            if let Err(e) = super::super::parse(&all, name, node) {
                panic!("{name}, every setting taken in, for {node}: {e}");
            }
        }
        commented_lines_show_defaults(name, EXAMPLE);
        doc_keys::assert_shows_every_key(name, EXAMPLE, &code_keys());
    }

    #[test]
    fn the_manual_pages_examples_parse_and_show_the_shipped_defaults() {
        let blocks = doc_keys::man_examples(MAN);
        // The first: a node's file, beside the lines elsewhere on the node
        // (the second); then the files of several nodes and of a site
        // that runs MPS itself.
        let files: Vec<&String> = blocks
            .iter()
            .filter(|b| !b.contains("# gres.conf"))
            .collect();
        assert!(files.len() >= 3, "{blocks:?}");
        for (i, text) in files.iter().enumerate() {
            let name = format!("gpu_mps.conf(5) EXAMPLES, file {}", i + 1);
            for node in ["gpu01", "gpu06", "cpu01"] {
                if let Err(e) = super::super::parse(&doc_keys::settings_text(text), &name, node) {
                    panic!("{name} for {node}: {e}");
                }
            }
            commented_lines_show_defaults(&name, text);
        }
        // The first shows every key, as the shipped example does.
        let first = files.first().map_or("", |f| f.as_str());
        doc_keys::assert_shows_every_key("gpu_mps.conf(5)'s first example", first, &code_keys());
        // The page's plugstack.conf line is the shipped one but for its
        // directory (a bare name: each host's PluginDir).
        let plugstack = include_str!("../../../plugins/spank_gpu_mps/plugstack.conf.example");
        let shipped = plugstack
            .lines()
            .find(|l| l.starts_with("required "))
            .unwrap_or_default()
            .replace("@PLUGINDIR@/", "")
            .replace("@SYSCONFDIR@", "/etc/slurm");
        assert!(
            blocks.iter().any(|b| b.lines().any(|l| l == shipped)),
            "gpu_mps.conf(5) EXAMPLES lacks the shipped plugstack.conf line `{shipped}`"
        );
    }
}

#[test]
fn the_step_guard_is_auto_none_or_an_absolute_path() {
    let guard = |text: &str| parse(text, "gpu_mps.conf").map(|c| c.step_guard);
    assert_eq!(guard(""), Ok(StepGuard::Auto));
    assert_eq!(guard("StepGuard=none\n"), Ok(StepGuard::Disabled));
    assert_eq!(guard("StepGuard=auto\n"), Ok(StepGuard::Auto));
    assert_eq!(
        guard("StepGuard=/opt/gpushare/libexec/gpushare/gpu-mps-epilog\n"),
        Ok(StepGuard::Program(PathBuf::from(
            "/opt/gpushare/libexec/gpushare/gpu-mps-epilog"
        )))
    );
    let bad = guard("\nStepGuard=gpu-mps-epilog\n")
        .err()
        .map(|e| e.to_string());
    assert!(
        bad.as_deref().is_some_and(
            |e| e.contains("gpu_mps.conf:2") && e.contains("auto, none or an absolute path")
        ),
        "{bad:?}"
    );
    assert_eq!(StepGuard::Disabled.program(), None);
    let named = PathBuf::from("/opt/x/gpu-mps-epilog");
    assert_eq!(StepGuard::Program(named.clone()).program(), Some(named));
}
