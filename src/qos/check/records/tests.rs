use super::*;
use crate::qos::check::fixtures::*;
use proptest::prelude::*;

#[test]
fn parses_sacctmgr_output() {
    let records = db("\
normal||
qos_x|cpu=10,gres/gpu:a40=4,gres/gpu=8,gres/gpumem=100,gres/mps=200|lowprio,scavenger
lowprio||
");
    assert_eq!(records.len(), 3);
    let x = &records[1];
    assert_eq!(x.name, "qos_x");
    assert_eq!(
        x.gpu_limits,
        [
            GpuTresLimit {
                gpu_type: Some("a40".into()),
                count: 4
            },
            GpuTresLimit {
                gpu_type: None,
                count: 8
            }
        ]
    );
    assert_eq!(x.gpu_tres_text(), "gres/gpu:a40=4,gres/gpu=8");
    assert_eq!(x.untyped_limit(), Some(8));
    assert_eq!(x.preempt, ["lowprio", "scavenger"]);
    assert!(records[0].gpu_limits.is_empty() && records[0].preempt.is_empty());
}

#[test]
fn empty_output_is_an_empty_database() {
    assert_eq!(db(""), []);
    assert_eq!(db("\n  \n"), []);
}

#[test]
fn malformed_sacctmgr_output_is_a_clear_error() {
    let err = |text: &str| parse_sacctmgr(text).unwrap_err().to_string();
    const TAIL: &str =
        "(expected Name|GrpTRES|Preempt from `sacctmgr -nP show qos format=Name,GrpTRES,Preempt`)";
    assert_eq!(
        err("normal||\nqos_x|gres/gpu:a40=4"),
        format!("sacctmgr output line 2: 2 fields in \"qos_x|gres/gpu:a40=4\", expected 3 {TAIL}")
    );
    assert_eq!(
        err("  Name  GrpTRES  Preempt"),
        format!(
            "sacctmgr output line 1: 1 fields in \"  Name  GrpTRES  Preempt\", expected 3 {TAIL}"
        )
    );
    assert_eq!(
        err("|gres/gpu=1|"),
        format!("sacctmgr output line 1: no QOS name in \"|gres/gpu=1|\" {TAIL}")
    );
    assert_eq!(
        err("q|gres/gpu:a40=four|"),
        format!(
            "sacctmgr output line 1: GrpTRES \"gres/gpu:a40=four\" of QOS q: \
             \"gres/gpu:a40=four\" is not a whole number of GPUs {TAIL}"
        )
    );
    assert!(err("q|gres/gpu:a40|").contains("entry \"gres/gpu:a40\" has no '='"));
    assert!(err("q|gres/gpu:=3|").contains("has an empty GPU type"));
    assert!(err("q|gres/gpu:a40=1,gres/gpu:a40=2|").contains("\"gres/gpu:a40\" appears twice"));
    assert!(err("q||\nQ||").contains("line 2: QOS Q listed twice"));
    assert!(err("q|gres/gpu=-1|").contains("not a whole number"));
}

proptest! {

    #[test]
    fn parse_sacctmgr_never_panics(text in ".*") {
        let _ = parse_sacctmgr(&text);
    }

    #[test]
    fn parse_sacctmgr_never_panics_on_shaped_text(
        text in "([a-z]{0,3}\\|((gres/gpu(:[a-z0-9]{0,3})?|cpu)=?[0-9a-z-]{0,3},?){0,3}\\|[a-z,]{0,5}\n){0,4}"
    ) {
        let _ = parse_sacctmgr(&text);
    }
}
