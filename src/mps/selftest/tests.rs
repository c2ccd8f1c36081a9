use super::*;

fn expected() -> Expected {
    Expected {
        thread_percentage: 25,
        memory_mib: Some(20_000),
        exclusive: true,
    }
}

/// The GPU as the client without MPS reads it, refused a context.
fn bypass() -> Seen {
    Seen {
        sms: Some(132),
        memory_mib: Some(81_559),
        context_tried: true,
        context_error: Some("CUDA_ERROR_DEVICE_UNAVAILABLE".into()),
        ..Seen::default()
    }
}

/// A 25 % share client as a 132-SM GPU gives it (seen on an H200).
fn share() -> Seen {
    Seen {
        sms: Some(32),
        mps: Some(true),
        context_tried: true,
        kernel_sms: Some(32),
        allocations: vec![
            Allocation {
                mib: 10_000,
                error: None,
            },
            Allocation {
                mib: 30_000,
                error: Some("CUDA_ERROR_OUT_OF_MEMORY".into()),
            },
        ],
        ..Seen::default()
    }
}

#[test]
fn a_share_that_gets_its_share_passes() {
    let v = judge(&expected(), &bypass(), &share());
    assert!(v.passed(), "{v:?}");
    assert!(v.notes.iter().any(|n| n.contains("32 SMs")), "{v:?}");
}

#[test]
fn a_dropped_thread_percentage_fails_by_attribute_and_by_kernel() {
    let mut s = share();
    s.sms = Some(132);
    let v = judge(&expected(), &bypass(), &s);
    assert!(v.failures.iter().any(|f| f.contains("132 SMs")), "{v:?}");
    let mut s = share();
    s.kernel_sms = Some(131);
    let v = judge(&expected(), &bypass(), &s);
    assert!(
        v.failures
            .iter()
            .any(|f| f.contains("kernel ran on 131 SMs")),
        "{v:?}"
    );
    // Fewer SMs than the blocks could reach is no failure.
    let mut s = share();
    s.kernel_sms = Some(20);
    assert!(judge(&expected(), &bypass(), &s).passed());
}

#[test]
fn a_dropped_memory_limit_fails() {
    let mut s = share();
    s.allocations[1].error = None;
    let v = judge(&expected(), &bypass(), &s);
    assert!(
        v.failures
            .iter()
            .any(|f| f.contains("30000 MiB") && f.contains("does not hold")),
        "{v:?}"
    );
    let mut s = share();
    s.allocations[0].error = Some("CUDA_ERROR_OUT_OF_MEMORY".into());
    assert!(!judge(&expected(), &bypass(), &s).passed());
    // Allocations never tried are failures, not passes.
    let mut s = share();
    s.allocations.clear();
    assert_eq!(judge(&expected(), &bypass(), &s).failures.len(), 2);
}

#[test]
fn a_client_without_mps_that_gets_the_gpu_fails_where_it_is_exclusive() {
    let mut b = bypass();
    b.context_error = None;
    let v = judge(&expected(), &b, &share());
    assert!(
        v.failures.iter().any(|f| f.contains("without the MPS")),
        "{v:?}"
    );
    let leave = Expected {
        exclusive: false,
        ..expected()
    };
    assert!(judge(&leave, &b, &share()).passed());
}

#[test]
fn a_share_client_without_a_context_or_mps_fails() {
    let mut s = share();
    s.context_error = Some("CUDA_ERROR_MPS_CONNECTION_FAILED".into());
    let v = judge(&expected(), &bypass(), &s);
    assert_eq!(v.failures.len(), 1, "{v:?}");
    assert!(v.failures[0].contains("MPS_CONNECTION_FAILED"));
    let mut s = share();
    s.mps = Some(false);
    assert!(!judge(&expected(), &bypass(), &s).passed());
    let mut s = share();
    s.init_error = Some("cuInit: CUDA_ERROR_NO_DEVICE".into());
    assert!(!judge(&expected(), &bypass(), &s).passed());
}

#[test]
fn allocations_are_decisive_only_below_the_gpus_memory() {
    assert_eq!(allocations(20_000, Some(81_559)), (10_000, Some(30_000)));
    // A small limit still tries 1 GiB over it.
    assert_eq!(allocations(1_000, Some(81_559)), (500, Some(2_024)));
    // Nearly the whole GPU: nothing over the limit can tell.
    assert_eq!(allocations(70_000, Some(81_559)), (35_000, None));
    assert_eq!(allocations(20_000, None), (10_000, None));
}

#[test]
fn the_ptx_names_its_target_and_ends_in_nul() {
    let text = ptx("6.3", "sm_70");
    assert!(text.starts_with(".version 6.3\n.target sm_70\n"));
    assert!(text.contains(&format!(".entry {KERNEL}(")));
    assert!(text.ends_with("}\n\0"));
    assert!(!text.contains("{VERSION}") && !text.contains("{TARGET}"));
}

#[test]
fn seen_reads_back_from_its_json_line() {
    let s = share();
    let line = serde_json::to_string(&s).unwrap_or_default();
    assert_eq!(serde_json::from_str::<Seen>(&line).ok(), Some(s));
}
