//! The self-test's judgement (see the module's page).

use serde::{Deserialize, Serialize};

/// How far the SMs a client gets may stand from its percentage of the
/// GPU's: one TPC either way.
pub const SM_SLACK: u32 = 2;

/// The kernel, as PTX text the driver compiles itself (no toolkit on the
/// node): each block spins `spin` clock cycles, so that blocks spread over
/// every SM the client may use, then its first thread writes the SM it ran
/// on (`%smid`) to `out[block]`. `{VERSION}` and `{TARGET}` are filled from
/// [`PTX_TARGETS`].
pub const PTX_TEMPLATE: &str = r#".version {VERSION}
.target {TARGET}
.address_size 64

.visible .entry gpushare_smids(
    .param .u64 out,
    .param .u64 spin
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [spin];
    mov.u64 %rd3, %clock64;
WAIT:
    mov.u64 %rd4, %clock64;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.s64 %p1, %rd5, %rd2;
    @%p1 bra WAIT;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %smid;
    cvta.to.global.u64 %rd6, %rd1;
    mul.wide.u32 %rd7, %r2, 4;
    add.s64 %rd6, %rd6, %rd7;
    st.global.u32 [%rd6], %r3;
DONE:
    ret;
}
"#;

/// The kernel's entry point.
pub const KERNEL: &str = "gpushare_smids";

/// PTX versions and targets tried in turn: Volta's first (every GPU MPS
/// limits by thread percentage), then Maxwell's for older GPUs.
pub const PTX_TARGETS: [(&str, &str); 2] = [("6.3", "sm_70"), ("6.0", "sm_50")];

/// The kernel's PTX for one of [`PTX_TARGETS`], NUL-terminated as
/// `cuModuleLoadData` reads it.
pub fn ptx(version: &str, target: &str) -> String {
    let mut text = PTX_TEMPLATE
        .replace("{VERSION}", version)
        .replace("{TARGET}", target);
    text.push('\0');
    text
}

/// One allocation the share client tried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub mib: u64,
    /// The driver's error name; `None`: it succeeded.
    pub error: Option<String>,
}

/// What one probe client saw (the child's one JSON line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// `cuDriverGetVersion` (13000: CUDA 13.0).
    pub driver: Option<i32>,
    /// Where it stopped before a context, and why (`cuInit: ...`).
    pub init_error: Option<String>,
    /// Devices the client sees.
    pub devices: Option<i32>,
    /// SMs CUDA reports to the client (`MULTIPROCESSOR_COUNT`).
    pub sms: Option<u32>,
    /// `CU_DEVICE_ATTRIBUTE_MPS_ENABLED`: `None` where the driver has no
    /// such attribute (before CUDA 12.4).
    pub mps: Option<bool>,
    /// Device memory as `cuDeviceTotalMem` reports it, MiB.
    pub memory_mib: Option<u64>,
    /// Whether a context was tried.
    pub context_tried: bool,
    /// The context's error name; `None` with `context_tried`: it started.
    pub context_error: Option<String>,
    /// Milliseconds from the library's load to a context.
    pub context_ms: Option<u64>,
    /// `cuMemGetInfo` in the context: free and total, MiB.
    pub mem_info_mib: Option<(u64, u64)>,
    /// Distinct SMs the kernel's blocks ran on.
    pub kernel_sms: Option<u32>,
    pub kernel_error: Option<String>,
    /// The PTX target the driver took.
    pub ptx_target: Option<String>,
    pub allocations: Vec<Allocation>,
    /// The client was still running at its deadline and was killed.
    #[serde(default)]
    pub timed_out: bool,
}

/// What the share client should get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    pub thread_percentage: u32,
    /// The share's memory limit, MiB (`None`: `MemoryLimit=none`).
    pub memory_mib: Option<u64>,
    /// The GPU runs `EXCLUSIVE_PROCESS` while shared (`ComputeMode=exclusive`).
    pub exclusive: bool,
}

/// The allocations the share client tries for a limit of `limit_mib` on
/// a GPU of `gpu_mib`: half the limit (must succeed), then over it by half
/// again, at least 1 GiB (must fail), where that is still less than the
/// GPU's memory; `None` for the second where it is not (a GPU the share
/// has nearly whole: only the GPU's own size would refuse it).
pub fn allocations(limit_mib: u64, gpu_mib: Option<u64>) -> (u64, Option<u64>) {
    let under = (limit_mib / 2).max(1);
    let over = limit_mib + (limit_mib / 2).max(1024);
    let decisive = gpu_mib.is_some_and(|g| over < g);
    (under, decisive.then_some(over))
}

/// The result for one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Each check that failed, in words.
    pub failures: Vec<String>,
    /// What was seen and holds, or was not decisive, in words.
    pub notes: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Holds what the two clients saw against `expected`.
pub fn judge(expected: &Expected, bypass: &Seen, share: &Seen) -> Verdict {
    let mut v = Verdict {
        failures: Vec::new(),
        notes: Vec::new(),
    };
    if let Some(e) = &share.init_error {
        v.failures
            .push(format!("the share's client could not start CUDA: {e}"));
        return v;
    }
    if let Some(e) = &share.context_error {
        v.failures.push(format!(
            "the share's client got no CUDA context through the GPU's MPS daemon: {e}"
        ));
        return v;
    }
    match share.mps {
        Some(false) => v.failures.push(
            "the share's client runs without MPS (CUDA says its context is not shared)".into(),
        ),
        Some(true) => v.notes.push("the share's client is an MPS client".into()),
        None => v
            .notes
            .push("this driver cannot say whether a context goes through MPS".into()),
    }
    judge_sms(expected, bypass.sms, share, &mut v);
    judge_memory(expected, bypass.memory_mib, share, &mut v);
    judge_bypass(expected, bypass, &mut v);
    v
}

fn judge_sms(expected: &Expected, total: Option<u32>, share: &Seen, v: &mut Verdict) {
    let pct = expected.thread_percentage.min(100);
    let Some(total) = total else {
        v.notes
            .push("the GPU's SM count is not known: the SMs were not held against it".into());
        return;
    };
    let want = u64::from(total) * u64::from(pct) / 100;
    let low = want.saturating_sub(u64::from(SM_SLACK)).max(1);
    let high = (want + u64::from(SM_SLACK)).min(u64::from(total));
    let range = format!("{pct} % of {total} SMs is {want}");
    match share.sms {
        Some(got) if (low..=high).contains(&u64::from(got)) => v
            .notes
            .push(format!("CUDA gives the client {got} SMs ({range})")),
        Some(got) => v.failures.push(format!(
            "CUDA gives the share's client {got} SMs, where {range}: the thread \
             percentage does not hold"
        )),
        None => v
            .failures
            .push("CUDA did not tell the share's client its SM count".into()),
    }
    match (&share.kernel_error, share.kernel_sms) {
        (Some(e), _) => v
            .failures
            .push(format!("the share's client could not run its kernel: {e}")),
        (None, Some(ran)) if u64::from(ran) > high => v.failures.push(format!(
            "the share's kernel ran on {ran} SMs, where {range}: the thread percentage \
             does not hold"
        )),
        (None, Some(ran)) => v.notes.push(format!("its kernel ran on {ran} SMs")),
        (None, None) => v.failures.push("the share's kernel did not run".into()),
    }
}

fn judge_memory(expected: &Expected, gpu_mib: Option<u64>, share: &Seen, v: &mut Verdict) {
    let Some(limit) = expected.memory_mib else {
        v.notes.push(
            "no memory limit for this share (MemoryLimit=none, or proportional with the \
             GPU's memory unknown: no GPUMemory= and none from NVML): none checked"
                .into(),
        );
        return;
    };
    if let Some((free, total)) = share.mem_info_mib {
        v.notes.push(format!(
            "cuMemGetInfo tells the client {free} MiB free of {total} MiB"
        ));
    }
    let (under, over) = allocations(limit, gpu_mib);
    let tried = |mib: u64| share.allocations.iter().find(|a| a.mib == mib);
    match tried(under) {
        Some(Allocation { error: None, .. }) => v.notes.push(format!(
            "{under} MiB, half the share's {limit} MiB, could be allocated"
        )),
        Some(Allocation { error: Some(e), .. }) => v.failures.push(format!(
            "{under} MiB, half the share's {limit} MiB, could not be allocated: {e}"
        )),
        None => v
            .failures
            .push(format!("the allocation of {under} MiB was not tried")),
    }
    let Some(over) = over else {
        v.notes.push(format!(
            "the limit of {limit} MiB leaves too little of the GPU's memory to try an \
             allocation over it"
        ));
        return;
    };
    match tried(over) {
        Some(Allocation { error: Some(e), .. }) => v.notes.push(format!(
            "{over} MiB, over the share's {limit} MiB, was refused ({e})"
        )),
        Some(Allocation { error: None, .. }) => v.failures.push(format!(
            "{over} MiB, over the share's {limit} MiB, could be allocated: the memory \
             limit does not hold"
        )),
        None => v
            .failures
            .push(format!("the allocation of {over} MiB was not tried")),
    }
}

fn judge_bypass(expected: &Expected, bypass: &Seen, v: &mut Verdict) {
    if !expected.exclusive {
        v.notes.push(
            "ComputeMode=leave: a client without MPS is not refused, and was not tried".into(),
        );
        return;
    }
    match (
        &bypass.init_error,
        bypass.context_tried,
        &bypass.context_error,
    ) {
        (Some(e), ..) => v.notes.push(format!(
            "the client without MPS could not start CUDA ({e}): it cannot reach the GPU"
        )),
        (None, true, Some(e)) => v
            .notes
            .push(format!("a client without MPS is refused the GPU ({e})")),
        (None, true, None) => v.failures.push(
            "a client without the MPS variables got a context on the GPU while it is \
             shared: it would run beside the shares without their limits"
                .into(),
        ),
        (None, false, _) => v
            .failures
            .push("the client without MPS did not try a context".into()),
    }
}

/// One GPU's line of the Markdown report.
pub fn report_rows(gpu: u32, verdict: &Verdict) -> Vec<String> {
    let word = if verdict.passed() { "pass" } else { "FAIL" };
    let mut rows: Vec<String> = verdict
        .failures
        .iter()
        .map(|f| format!("| {gpu} | FAIL | {} |", f.replace('|', "/")))
        .collect();
    rows.extend(
        verdict
            .notes
            .iter()
            .map(|n| format!("| {gpu} | {word} | {} |", n.replace('|', "/"))),
    );
    rows
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
