//! GPU shares (mps/shard): only inside the shared-GPU reservations, and
//! no larger than `MaxMPSPerJob`.

use crate::qos::config::GpuQosConfig;
use crate::qos::gres::TresField;

use super::job::JobDescription;
use super::requests::FieldRequest;
use super::verdict::{reject, Rejection, RejectionKind};

/// Rule 10: GPU shares only inside the shared-GPU reservations. A job
/// naming several reservations may start in any, so all must qualify.
pub(super) fn judge_shared_reservation(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
) -> Result<(), Rejection> {
    let Some(globs) = cfg.shared_gpu_reservations() else {
        return Ok(());
    };
    let Some(share) = requests.iter().find(|r| r.request.is_shared_gpu()) else {
        return Ok(());
    };
    let mut names = job.reservation_names();
    let outside = names.clone().find(|n| !cfg.reservation_allows_shared(n));
    let asked = format!("{}:{}", share.request.name, share.request.count);
    let patterns = globs.join(", ");
    let message = match (names.next(), outside) {
        (Some(_), None) => return Ok(()),
        (None, _) => format!(
            "GPU shares ({asked}) are only available inside the shared-GPU reservations \
             matching {patterns}: add --reservation=<name> with the name of one of them \
             (scontrol show reservation lists them)."
        ),
        (Some(_), Some(outside)) => format!(
            "Reservation {outside} is not a shared-GPU reservation, and GPU shares ({asked}) \
             are only available inside reservations matching {patterns}: use \
             --reservation=<name> with the name of one of those."
        ),
    };
    Err(reject(RejectionKind::SharedOutsideReservation, message))
}

/// Rule 11: the mps units per node, checked against `MaxMPSPerJob`.
/// Returns the exact per-node count for the SPANK environment when the job
/// asked it per node (`--gres=mps:N`); other fields only give a lower
/// bound of one node's share, good enough to refuse but not to hand on.
/// The count comes also with a refusal: a share that is only warned of
/// (`Enforce=warn`) runs, and its node needs it.
pub(super) fn judge_mps_share(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
) -> (Option<u64>, Result<(), Rejection>) {
    let mut per_node: Option<u64> = None;
    let mut least_on_one_node: u64 = 0;
    for r in requests
        .iter()
        .filter(|r| r.request.name.eq_ignore_ascii_case("mps"))
    {
        let on_one_node = match r.field {
            TresField::PerNode => {
                let sum = per_node.unwrap_or(0).saturating_add(r.request.count);
                per_node = Some(sum);
                sum
            }
            TresField::PerSocket => r
                .request
                .count
                .saturating_mul(u64::from(job.sockets_per_node.unwrap_or(1).max(1))),
            TresField::PerTask => r.request.count,
            // Spread over nodes we cannot count: no per-node bound.
            TresField::PerJob => 0,
        };
        least_on_one_node = least_on_one_node.max(on_one_node);
    }
    if let Some(max) = cfg.max_mps_per_job() {
        if least_on_one_node > max {
            let refusal = reject(
                RejectionKind::ShareTooLarge,
                format!(
                    "This job asks for {least_on_one_node} mps units on one node, more than \
                     the largest GPU share allowed: at most {max} mps units per job. Ask for \
                     --gres=mps:{max} or less, or for whole GPUs with --gres=gpu:<type>:<count>."
                ),
            );
            return (per_node, Err(refusal));
        }
    }
    (per_node, Ok(()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
