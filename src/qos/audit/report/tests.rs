use super::*;
use crate::qos::audit::audit;
use crate::qos::audit::fixtures::*;

#[test]
fn report_exit_codes_and_json() {
    let site = site_with(|c, _, _, _| {
        replace(
            c,
            "PriorityWeightQOS       = 10000",
            "PriorityWeightQOS = 0",
        )
    });
    let found = audit(&site);
    assert_eq!(
        AuditReport::new(found.clone(), FailOn::Error, vec![]).exit,
        0
    );
    assert_eq!(
        AuditReport::new(found.clone(), FailOn::Warning, vec![]).exit,
        1
    );
    assert_eq!(
        AuditReport::new(found.clone(), FailOn::Note, vec![]).exit,
        1
    );
    assert_eq!(AuditReport::new(vec![], FailOn::Note, vec![]).exit, 0);
    let report = AuditReport::new(found, FailOn::Warning, vec!["scontrol show config".into()]);
    let back: AuditReport = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(back, report);
    let value: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(value["findings"][0]["severity"], "warning");
    assert_eq!(value["fail_on"], "warning");
    let table = report.to_table();
    assert!(
        table.contains("warning  slurm.conf PriorityWeightQOS is 0 or unset"),
        "{table}"
    );
    assert!(table.contains("fix: PriorityWeightQOS=10000"));
    assert!(table.ends_with("audit FAILED (--fail-on warning): 0 errors, 1 warning, 0 notes; read scontrol show config\n"));
    let unread = AuditReport::unread("sacctmgr: error", FailOn::Error);
    assert_eq!(unread.exit, 2);
    assert!(unread.to_json().contains("\"error\":\"sacctmgr: error\""));
}
