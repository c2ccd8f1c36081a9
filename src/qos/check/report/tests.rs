use super::*;
use crate::qos::check::fixtures::*;

#[test]
fn tally_and_exit_code() {
    let f = findings(
        "QOS=q GPUTypes=a40,h100 GPULimit=8\nQOS=r GPUTypes=a40",
        "q|gres/gpu:a40=4,gres/gpu:h100=8|\nr|gres/gpu:a40=1|",
    );
    let tally = Tally::of(&f);
    assert_eq!(
        tally,
        Tally {
            errors: 0,
            warnings: 1,
            notes: 1
        }
    );
    assert_eq!(tally.exit_code(), 0);
    let f = findings("", "q|gres/gpu:a40=4|");
    assert_eq!(Tally::of(&f).exit_code(), 1);
}

#[test]
fn summary_line_counts() {
    let cfg = conf(SITE_CONF);
    let records = db(SITE_DB);
    assert_eq!(
        summary_line(FILE, &cfg, &records, Tally::default()),
        "gpu_qos.conf: consistent: 0 errors, 0 warnings, 0 notes (4 rules checked \
         against 9 QOS in the accounting database)"
    );
    assert_eq!(
        summary_line(
            FILE,
            &conf("QOS=q GPUTypes=a"),
            &records[..1],
            Tally {
                errors: 1,
                warnings: 0,
                notes: 1
            }
        ),
        "gpu_qos.conf: DISCREPANCIES: 1 error, 0 warnings, 1 note (1 rule checked \
         against 1 QOS in the accounting database)"
    );
}

#[test]
fn json_report() {
    let f = findings("QOS=q GPUTypes=a40", "q|gres/gpu:a40=4|");
    let text = CheckJson::report("/etc/slurm/\"x\".conf", &f).to_json();
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back["conf"], "/etc/slurm/\"x\".conf");
    assert_eq!(
        (back["exit"].as_u64(), back["warnings"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(back["findings"][0]["kind"], "limit_check_off");
    assert_eq!(back["findings"][0]["qos"], "q");
    assert_eq!(back["findings"][0]["message"], f[0].to_string());
    assert_eq!(
        CheckJson::unchecked("sacctmgr: error").to_json(),
        "{\"exit\":2,\"error\":\"sacctmgr: error\",\"errors\":0,\"warnings\":0,\"notes\":0,\"findings\":[]}"
    );
}
