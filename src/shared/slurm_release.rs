//! Facts of Slurm's releases both halves read: a release as its major
//! and minor numbers, and slurmd's connection manager (25.05 on), which
//! `gpu-mps config` and `gpu-qos audit` both size against a node's jobs.

/// `24.11` or `24.11.5` → (24, 11).
pub fn parse(text: &str) -> Result<(u32, u32), String> {
    let mut parts = text.trim().split('.');
    let number = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
    number(parts.next())
        .zip(number(parts.next()))
        .ok_or_else(|| format!("expected a release such as 24.11, got {text:?}"))
}

/// The first release whose slurmd has a connection manager, and with it
/// `SlurmdParameters=conmgr_max_connections` (slurm.conf(5)).
pub const SLURMD_CONNECTIONS_SINCE: (u32, u32) = (25, 5);

/// slurmd's connection manager serves this many connections at once
/// unless `SlurmdParameters=conmgr_max_connections` says more.
pub const SLURMD_CONNECTIONS: u64 = 512;

/// The `conmgr_max_connections` to give a node of up to `jobs` jobs at
/// once (slurm.conf(5) asks for at least as many): `jobs` rounded up to a
/// multiple of 64.
pub fn slurmd_connections_for(jobs: u64) -> u64 {
    jobs.div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_its_major_and_minor() {
        // The rest of mps::installed's tests of it: a pre-release's version.
        assert_eq!(parse("26.11.0-0rc1"), Ok((26, 11)));
        assert_eq!(slurmd_connections_for(513), 576);
        assert_eq!(slurmd_connections_for(512), 512);
    }
}
