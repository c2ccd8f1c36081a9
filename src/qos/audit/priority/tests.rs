use super::*;
use crate::qos::audit::audit;
use crate::qos::audit::fixtures::*;

#[test]
fn priority_periods_left_at_their_default_are_noted_only_where_they_weigh() {
    let mut site = site_with(|c, _, _, _| {
        c.push_str("PriorityDecayHalfLife   = 7-00:00:00\nPriorityWeightAge = 10\n");
    });
    site.slurm_conf = Some("PriorityType=priority/multifactor\n# PriorityMaxAge=1-0\n".into());
    let found = audit(&site);
    let kinds: Vec<&str> = found.iter().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["decay_half_life_default", "max_age_default"]);
    assert_eq!(
        found[0].what,
        "PriorityDecayHalfLife is not set in slurm.conf: Slurm's default 7-00:00:00 applies"
    );
    assert_eq!(found[1].severity, Severity::Note);
    // Set on purpose (any case, through an Include read into the text):
    // nothing to say.
    site.slurm_conf = Some("prioritydecayhalflife=7-0\nPriorityMaxAge=7-0\n".into());
    assert!(audit(&site).is_empty());
    // A weight of 0: the period changes nothing users see.
    let mut site = site_with(|c, _, _, _| replace(c, "FairShare = 1000", "FairShare = 0"));
    site.slurm_conf = Some(String::new());
    assert_eq!(
        kinds_of(&site),
        ["priority_weight_fairshare_zero".to_owned()]
    );
    // slurm.conf unreadable: the audit cannot tell, and says nothing.
    let mut site = site_with(|_, _, _, _| {});
    site.slurm_conf = None;
    assert!(audit(&site).is_empty());
}

#[test]
fn gpu_types_billed_alike_name_the_dearer_type_to_weigh() {
    let site = site_with(|_, _, p, _| replace(p, "GRES/gpu:h100=2.0", "GRES/gpu:a40=0"));
    let found = audit(&site);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].what,
        "gpu bills its GPU types a40, h100 alike (1 per GPU; no GRES/gpu:TYPE weight tells them apart)"
    );
    assert!(found[0]
        .fix
        .starts_with("PartitionName=gpu ... TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:a40=0,GRES/gpu:h100=W"));
    let p = &site.partitions[0];
    assert_eq!((gpu_cost(p, "a40"), gpu_cost(p, "h100")), (1.0, 1.0));
    let priced = site_with(|_, _, _, _| {});
    assert_eq!(gpu_cost(&priced.partitions[0], "h100"), 3.0);
    // An untracked type cannot be weighed (slurmctld refuses the
    // weight): only tres_untracked is said.
    let untracked = site_with(|c, _, p, _| {
        replace(p, "GRES/gpu:h100=2.0", "GRES/gpu:a40=0");
        replace(c, ",gres/gpu:h100", "");
    });
    assert_eq!(kinds_of(&untracked), ["tres_untracked".to_owned()]);
}
