// Shared by the build scripts of every crate that gates code on the Slurm
// version (included with `include!`, so it must stay free of `use` clashes).
//
// slurm-sys's build script publishes the detected version through its
// `links = "slurm"` metadata; a direct dependent sees it as
// DEP_SLURM_VERSION_NUMBER and turns it into `cfg(slurm_X_Y)` flags meaning
// "built against Slurm X.Y or later". Every flag is declared with
// rustc-check-cfg, so a misspelt gate is a compile error, not dead code.

/// Slurm releases whose ABI differences the code may need to gate on.
const SLURM_RELEASES: &[(u32, u32)] = &[
    (22, 5),
    (23, 2),
    (23, 11),
    (24, 5),
    (24, 11),
    (25, 5),
    (25, 11),
    (26, 5),
    (26, 11),
];

/// Emits `cfg(slurm_X_Y)` for every release at or below the version slurm-sys
/// built against, and declares all of them. Returns the version number.
fn emit_slurm_version_cfgs() -> u32 {
    for (major, minor) in SLURM_RELEASES {
        println!("cargo::rustc-check-cfg=cfg(slurm_{major}_{minor:02})");
    }
    println!("cargo::rerun-if-env-changed=DEP_SLURM_VERSION_NUMBER");
    let raw = std::env::var("DEP_SLURM_VERSION_NUMBER").unwrap_or_else(|_| {
        panic!("DEP_SLURM_VERSION_NUMBER is not set: this crate must depend on slurm-sys directly")
    });
    let number: u32 = raw
        .parse()
        .unwrap_or_else(|_| panic!("slurm-sys published a bad version number {raw:?}"));
    let (major, minor) = (number >> 16, (number >> 8) & 0xff);
    for (m, n) in SLURM_RELEASES {
        if (major, minor) >= (*m, *n) {
            println!("cargo::rustc-cfg=slurm_{m}_{n:02}");
        }
    }
    number
}
