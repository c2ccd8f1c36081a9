use super::*;
use crate::qos::check::fixtures::*;
use crate::qos::check::generate::generate_for_site;
use crate::qos::check::records::parse_sacctmgr_assoc;

#[test]
fn the_example_site_is_consistent() {
    assert_eq!(lines(SITE_CONF, SITE_DB), Vec::<String>::new());
}

#[test]
fn unknown_qos_is_an_error() {
    assert_eq!(
        lines(
            "QOS=qos_a,qos_gone GPUTypes=a40 GPULimit=4",
            "qos_a|gres/gpu:a40=4|"
        ),
        [
            "error: qos_gone: gpu_qos.conf:1 lists it, but the accounting database has no \
          such QOS (sacctmgr show qos); remove it from the rule or create it"
        ]
    );
}

#[test]
fn qos_names_compare_without_case() {
    assert_eq!(
        lines("QOS=QOS_A GPUTypes=a40 GPULimit=4", "qos_a|gres/gpu:a40=4|"),
        Vec::<String>::new()
    );
}

#[test]
fn limit_differs_says_both_sides() {
    assert_eq!(
        lines(
            "#\n#\n#\n#\n#\n#\n#\n#\n#\n#\n#\nQOS=qos_lafferty GPUTypes=a40 GPULimit=4",
            "qos_lafferty|gres/gpu:a40=8|"
        ),
        [
            "error: qos_lafferty: gpu_qos.conf:12 says a40 limit 4, GrpTRES says \
          gres/gpu:a40=8; set GPULimit=8"
        ]
    );
}

#[test]
fn the_untyped_limit_caps_every_type() {
    let db_text = "q|gres/gpu:a40=8,gres/gpu=4|";
    assert_eq!(
        lines("QOS=q GPUTypes=a40 GPULimit=8", db_text),
        ["error: q: gpu_qos.conf:1 says a40 limit 8, GrpTRES says \
          gres/gpu:a40=8,gres/gpu=4; set GPULimit=4"]
    );
    assert!(lines("QOS=q GPUTypes=a40 GPULimit=4", db_text).is_empty());
}

#[test]
fn types_differ_is_an_error() {
    assert_eq!(
        lines(
            "QOS=q GPUTypes=a40 GPULimit=4",
            "q|gres/gpu:a40=4,gres/gpu:h100=4|"
        ),
        ["error: q: gpu_qos.conf:1 says GPUTypes=a40, GrpTRES says \
          gres/gpu:a40=4,gres/gpu:h100=4; set GPUTypes=a40,h100"]
    );
    // A type the rule permits that accounting does not count per type.
    assert_eq!(
        findings("QOS=q GPUTypes=a40,a100 GPULimit=4", "q|gres/gpu:a40=4|")[0].kind(),
        "types_differ"
    );
    // Order in the file does not matter.
    assert!(lines(
        "QOS=q GPUTypes=h100,a40 GPULimit=4",
        "q|gres/gpu:a40=4,gres/gpu:h100=4|"
    )
    .is_empty());
}

#[test]
fn a_type_accounting_forbids_is_a_type_difference() {
    assert_eq!(
        lines("QOS=q GPUTypes=a40 GPULimit=4", "q|gres/gpu:a40=0|"),
        [
            "error: q: gpu_qos.conf:1 says GPUTypes=a40, GrpTRES says gres/gpu:a40=0; \
             it may use no GPU: remove it from the rule or raise its GrpTRES"
        ]
    );
    assert_eq!(
        findings("QOS=q GPUTypes=a40 GPULimit=4", "q|gres/gpu=0|")[0].kind(),
        "types_differ"
    );
    assert_eq!(
        findings(
            "QOS=q GPUTypes=a40 GPULimit=4",
            "q|gres/gpu:a40=4,gres/gpu=0|"
        )[0]
        .kind(),
        "types_differ"
    );
    assert_eq!(
        findings(
            "QOS=q GPUTypes=a40,h100 GPULimit=4",
            "q|gres/gpu:a40=4,gres/gpu:h100=0|"
        )[0]
        .kind(),
        "types_differ"
    );
}

#[test]
fn rule_without_limit_under_a_typed_limit_is_a_warning() {
    assert_eq!(
        lines("QOS=q GPUTypes=a40", "q|gres/gpu:a40=4|"),
        [
            "warning: q: gpu_qos.conf:1 has no GPULimit while GrpTRES says gres/gpu:a40=4, \
          so jobs asking for more GPUs than that are accepted and pend forever; add \
          GPULimit=4"
        ]
    );
}

#[test]
fn only_an_untyped_limit_caps_the_rule_types() {
    assert!(lines("QOS=q GPUTypes=a40,h100 GPULimit=8", "q|gres/gpu=8|").is_empty());
    assert_eq!(
        findings("QOS=q GPUTypes=a40 GPULimit=4", "q|gres/gpu=8|")[0].kind(),
        "limit_differs"
    );
    assert_eq!(
        findings("QOS=q GPUTypes=a40", "q|gres/gpu=8|")[0].kind(),
        "limit_check_off"
    );
}

#[test]
fn a_rule_for_a_qos_without_gpu_limits() {
    assert_eq!(
        lines("QOS=q GPUTypes=a40", "q|cpu=4|"),
        [
            "warning: q: gpu_qos.conf:1 restricts its GPU types, but GrpTRES limits no GPUs \
          for it, so no GPU count is enforced; give it GrpTRES=gres/gpu:<type>=N if it \
          should have one"
        ]
    );
    assert_eq!(
        lines("QOS=q GPUTypes=a40 GPULimit=2", "q||"),
        [
            "error: q: gpu_qos.conf:1 says a40 limit 2, GrpTRES has no GPU limit; remove \
          GPULimit or give the QOS a GrpTRES limit"
        ]
    );
}

#[test]
fn multi_type_limits_are_checked_per_type() {
    let db_text = "q|gres/gpu:a40=4,gres/gpu:h100=8|";
    assert_eq!(
        lines("QOS=q GPUTypes=a40,h100 GPULimit=8", db_text),
        [
            "note: q: gpu_qos.conf:1 has GPULimit=8, but a40 is limited to 4; larger \
          requests of those types pass submit and pend: set GPULimit=a40:4,h100:8"
        ]
    );
    // Per type, exactly: nothing to say.
    assert!(lines("QOS=q GPUTypes=a40,h100 GPULimit=h100:8,a40:4", db_text).is_empty());
    assert_eq!(
        lines("QOS=q GPUTypes=a40,h100 GPULimit=a40:4,h100:6", db_text),
        [
            "error: q: gpu_qos.conf:1 says a40,h100 limit a40:4,h100:6, GrpTRES says \
          gres/gpu:a40=4,gres/gpu:h100=8; set GPULimit=a40:4,h100:8"
        ]
    );
    // The smallest would refuse 5..8 h100, which accounting lets run.
    assert_eq!(
        lines("QOS=q GPUTypes=a40,h100 GPULimit=4", db_text),
        [
            "error: q: gpu_qos.conf:1 says a40,h100 limit 4, GrpTRES says \
          gres/gpu:a40=4,gres/gpu:h100=8; set GPULimit=a40:4,h100:8"
        ]
    );
    // The sum is no limit any job meets.
    assert_eq!(
        findings("QOS=q GPUTypes=a40,h100 GPULimit=12", db_text)[0].kind(),
        "limit_differs"
    );
}

#[test]
fn unlisted_typed_qos_is_the_hole() {
    assert_eq!(
        lines("", "normal|gres/gpu=16|\nqos_new|cpu=8,gres/gpu:h100=2|"),
        [
            "error: qos_new: GrpTRES says gres/gpu:h100=2, but gpu_qos.conf has no rule for \
          it, so untyped GPU requests under it escape that limit; add QOS=qos_new \
          GPUTypes=h100 GPULimit=2"
        ]
    );
}

#[test]
fn zero_typed_limits_without_an_untyped_zero_are_a_warning() {
    assert_eq!(
        lines("", "q|gres/gpu:a40=0|"),
        [
            "warning: q: GrpTRES says gres/gpu:a40=0, which untyped GPU requests are not \
          counted against, and gpu_qos.conf cannot list a QOS that may use no GPU type; \
          add gres/gpu=0 to its GrpTRES if it should get no GPUs"
        ]
    );
    assert!(lines("", "q|gres/gpu:a40=0,gres/gpu=0|").is_empty());
}

#[test]
fn low_priority_qos_checks() {
    let db_text = "lowprio||\nscavenger||\nhigh||lowprio\nselfish||selfish";
    assert!(lines("LowPriorityQOS=lowprio", db_text).is_empty());
    assert!(lines("LowPriorityQOS=LOWPRIO", db_text).is_empty());
    assert_eq!(
        lines("LowPriorityQOS=lowprio,scavenger,gone,selfish", db_text),
        [
            "warning: scavenger: LowPriorityQOS names it, but no other QOS has it in its \
             Preempt list, so its jobs are made requeueable yet never preempted \
             (sacctmgr modify qos <name> set Preempt+=scavenger)",
            "error: gone: LowPriorityQOS names it, but the accounting database has no such QOS",
            "warning: selfish: LowPriorityQOS names it, but no other QOS has it in its \
             Preempt list, so its jobs are made requeueable yet never preempted \
             (sacctmgr modify qos <name> set Preempt+=selfish)",
        ]
    );
}

const ASSOCS: &str = "root|||\n\
    lafferty|||gres/gpu:a40=4\n\
    lafferty|alice||gres/gpu:a40=2\n\
    research|bob||cpu=4\n";

#[test]
fn associations_with_typed_limits_need_their_rules() {
    let assocs = parse_sacctmgr_assoc(ASSOCS).unwrap();
    assert_eq!(assocs.len(), 2, "{assocs:?}");
    let findings = |conf_text: &str| -> Vec<String> {
        check_associations(&conf(conf_text), "gpu_qos.conf", &assocs)
            .iter()
            .map(|f| format!("{}: {f}", f.kind()))
            .collect()
    };
    assert_eq!(
        findings(""),
        [
            "unlisted_typed_association: account lafferty: GrpTRES says gres/gpu:a40=4, but \
             gpu_qos.conf has no rule for it, so untyped GPU requests of its jobs escape that \
             limit; add Account=lafferty GPUTypes=a40 GPULimit=4",
            "unlisted_typed_association: user alice in account lafferty: GrpTRES says \
             gres/gpu:a40=2, but gpu_qos.conf has no rule for it, so untyped GPU requests of \
             its jobs escape that limit; add User=alice Account=lafferty GPUTypes=a40 \
             GPULimit=2",
        ]
    );
    assert!(findings(
        "Account=lafferty GPUTypes=a40 GPULimit=4\nUser=alice GPUTypes=a40 GPULimit=2\n"
    )
    .is_empty());
    assert_eq!(
        findings("Account=lafferty GPUTypes=a40 GPULimit=8\nUser=alice GPUTypes=a40 GPULimit=2\n"),
        [
            "association_rule_differs: account lafferty: gpu_qos.conf:1 does not say what \
          GrpTRES says (gres/gpu:a40=4); write Account=lafferty GPUTypes=a40 GPULimit=4"
        ]
    );
    let text = generate_for_site(&[], &[], &assocs);
    let cfg = conf(&text);
    assert!(check_associations(&cfg, "x", &assocs).is_empty(), "{text}");
    assert!(parse_sacctmgr_assoc("a|b|c").is_err());
}

#[test]
fn rules_that_only_warn_are_said() {
    let found = lines(
        "QOS=qos_a GPUTypes=a40 GPULimit=4 Enforce=warn\nQOS=qos_b GPUTypes=a40 GPULimit=4",
        "qos_a|gres/gpu:a40=4|\nqos_b|gres/gpu:a40=4|",
    );
    assert_eq!(
        found,
        [
            "warning: QOS qos_a: gpu_qos.conf:1 says Enforce=warn, so jobs it would refuse are \
             accepted unchanged and their users only warned, and changes it would make are \
             only described; set Enforce=yes (or remove Enforce=warn) to enforce"
        ]
    );
    // The file's own: said once, and for each rule it leaves warning.
    let kinds: Vec<(&str, String)> = findings(
        "Enforce=warn\nQOS=qos_a GPUTypes=a40 GPULimit=4\n\
         Partition=gpu GPUTypes=a40 Enforce=yes",
        "qos_a|gres/gpu:a40=4|",
    )
    .iter()
    .map(|f| (f.kind(), f.object()))
    .collect();
    assert_eq!(
        kinds,
        [
            ("only_warns", "gpu_qos.conf as a whole".to_owned()),
            ("only_warns", "QOS qos_a".to_owned())
        ]
    );
}

#[test]
fn exempt_users_no_association_has_are_warned_of() {
    let users = crate::qos::check::records::parse_assoc_users(ASSOCS).unwrap();
    assert_eq!(users, ["alice", "bob"]);
    let cfg = conf("ExemptUsers=Alice,1234,carol,bob\nQOS=qos_a GPUTypes=a40\n");
    let found = check_exempt_users(&cfg, FILE, &users);
    let said: Vec<String> = found
        .iter()
        .map(|f| format!("{} {} ({}): {f}", f.severity(), f.kind(), f.object()))
        .collect();
    assert_eq!(
        said,
        [
            "warning unknown_exempt_user (user carol): carol: ExemptUsers= of gpu_qos.conf \
             names it, but no association of the accounting database has that user (sacctmgr \
             show assoc), so slurmctld never knows a requester by that name and the exemption \
             never applies; correct the name (or write the uid), or add the user to an account"
        ]
    );
    // Every name known, or none named: nothing to say.
    assert!(check_exempt_users(&conf("ExemptUsers=alice,0\n"), FILE, &users).is_empty());
    assert!(check_exempt_users(&conf(""), FILE, &[]).is_empty());
    assert!(crate::qos::check::records::parse_assoc_users("a|b").is_err());
}
