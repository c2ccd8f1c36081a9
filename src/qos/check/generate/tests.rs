use super::*;
use crate::qos::check::compare::check;
use crate::qos::check::fixtures::*;
use crate::qos::check::report::Tally;
use crate::qos::config as qos_conf;
use proptest::prelude::*;

#[test]
fn generate_groups_qos_with_identical_limits() {
    let text = generate(&db(SITE_DB));
    let rules: Vec<&str> = text.lines().filter(|l| l.starts_with("QOS=")).collect();
    assert_eq!(
        rules,
        [
            "QOS=qos_dijk,qos_ma_zongming,qos_zhuoran_yang GPUTypes=h100 GPULimit=4",
            "QOS=qos_lafferty,qos_ying_rex GPUTypes=a40 GPULimit=4",
            "QOS=qos_saxena GPUTypes=a100 GPULimit=20",
            "QOS=qos_yildirim GPUTypes=a40 GPULimit=12",
        ]
    );
    assert!(text.contains("\nLowPriorityQOS=lowprio\n"));
    assert!(text.contains("\nRequireGPUType=qos\n"));
    let cfg = conf(&text);
    assert_eq!(cfg.low_priority_qos(), ["lowprio"]);
    assert_eq!(cfg.max_mps_per_job(), None);
}

#[test]
fn generate_writes_partition_rules_for_partition_qos() {
    let text = generate_for_site(
        &db("part_a40|gres/gpu:a40=8|\nnormal||"),
        &[
            ("a40only".into(), "part_a40".into()),
            ("cpu".into(), "normal".into()),
        ],
        &[],
    );
    assert!(text.contains(
        "# Partition a40only: its QOS part_a40 says gres/gpu:a40=8.\n\
         Partition=a40only GPUTypes=a40 GPULimit=8\n"
    ));
    assert!(!text.contains("Partition=cpu"));
    let cfg = conf(&text);
    assert!(cfg.partition_rule("a40only").is_some());
}

#[test]
fn generate_multi_type_writes_each_types_limit() {
    let text = generate(&db("q|gres/gpu:h100=8,gres/gpu:a40=4|\nr|gres/gpu:a40=0|"));
    assert!(text.contains(
        "# Per type: a40=4, h100=8\n\
         QOS=q GPUTypes=a40,h100 GPULimit=a40:4,h100:8\n"
    ));
    assert!(text.contains("# r: GrpTRES gres/gpu:a40=0 allows no GPU type"));
    assert!(text.contains("# (No QOS preempts another.)\n# LowPriorityQOS=lowprio\n"));
}

#[test]
fn generate_for_an_empty_database_parses_and_enforces_nothing() {
    let cfg = conf(&generate(&[]));
    assert!(cfg.rules().is_empty());
    assert!(cfg.low_priority_qos().is_empty());
}

#[test]
fn generated_site_file_checks_clean() {
    let records = db(SITE_DB);
    let cfg = conf(&generate(&records));
    assert_eq!(check(&cfg, FILE, &records), []);
}

/// A small database in sacctmgr's format: QOS named q0…, each with some
/// typed and an optional untyped limit (0 included), preempting others.
fn any_database() -> impl Strategy<Value = String> {
    let qos = (
        prop::collection::vec((0usize..3, 0u64..5), 0..3),
        prop::option::of(0u64..6),
        prop::collection::vec(0usize..6, 0..3),
    );
    prop::collection::vec(qos, 0..6).prop_map(|all| {
        let types = ["a40", "h100", "a100"];
        let mut out = String::new();
        for (i, (typed, untyped, preempt)) in all.iter().enumerate() {
            let mut tres: Vec<String> = vec!["cpu=8".into()];
            let mut seen = Vec::new();
            for &(t, n) in typed {
                if !seen.contains(&t) {
                    seen.push(t);
                    tres.push(format!("gres/gpu:{}={n}", types[t]));
                }
            }
            if let Some(n) = untyped {
                tres.push(format!("gres/gpu={n}"));
            }
            let preempt: Vec<String> = preempt
                .iter()
                .filter(|&&p| p < all.len())
                .map(|p| format!("q{p}"))
                .collect();
            out.push_str(&format!("q{i}|{}|{}\n", tres.join(","), preempt.join(",")));
        }
        out
    })
}

proptest! {
    #[test]
    fn generated_files_parse_and_check_without_errors(db_text in any_database()) {
        let records = db(&db_text);
        let text = generate(&records);
        let cfg = qos_conf::parse(&text, FILE).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let found = check(&cfg, FILE, &records);
        prop_assert_eq!(Tally::of(&found).errors, 0, "{:?}\n{}", found, text);
        // Every QOS with a usable typed limit got a rule.
        for r in &records {
            prop_assert_eq!(cfg.rule_for(&r.name).is_some(), r.expected_gpu_limit().is_some());
        }
    }
}
