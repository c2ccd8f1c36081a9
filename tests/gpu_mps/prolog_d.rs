//! gpushare's prolog and epilog beside a site's own, as sites run several:
//! `Prolog=/etc/slurm/prolog.d/*` (a glob: slurmd runs every match in
//! glob order, and stops at the first that fails), gpushare's programs
//! linked in under names that sort where they must: its prolog last (the
//! site's health checks first, the share placed only on a node they
//! passed), its epilog first (the share released even where a site's
//! epilog after it fails).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::*;

/// The cluster's prolog and epilog directories and what the site's own
/// scripts leave behind.
const PROLOG_D: &str = "prolog.d";
const EPILOG_D: &str = "epilog.d";
const RAN: &str = "site-scripts-ran";

/// The MPS node with `Prolog=`/`Epilog=` globs over directories the test
/// fills before its first job (slurmd expands the glob at each job).
pub(super) fn prolog_d_node() -> ClusterSpec {
    ClusterSpec {
        prolog: Some(format!("{{cluster}}/{PROLOG_D}/*").into()),
        epilog: Some(format!("{{cluster}}/{EPILOG_D}/*").into()),
        ..ClusterSpec::mps_node()
    }
}

/// A site script that appends `<what> <job>` to the record, in order.
fn site_script(c: &Cluster, what: &str) -> String {
    format!(
        "#!/bin/sh\necho \"{what} $SLURM_JOB_ID\" >> {}\nexit 0\n",
        c.dir.join(RAN).display()
    )
}

fn install_scripts(c: &Cluster) -> Result<(), String> {
    let build = c.expand("{build}");
    let prolog_d = c.dir.join(PROLOG_D);
    let epilog_d = c.dir.join(EPILOG_D);
    for d in [&prolog_d, &epilog_d] {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let write = |path: PathBuf, text: String| -> Result<(), String> {
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    write(prolog_d.join("10-site-health"), site_script(c, "prolog"))?;
    write(epilog_d.join("50-site-cleanup"), site_script(c, "epilog"))?;
    let link = |from: String, to: PathBuf| {
        std::os::unix::fs::symlink(&from, &to).map_err(|e| format!("{}: {e}", to.display()))
    };
    link(
        format!("{build}/gpu-mps-prolog"),
        prolog_d.join("90-gpushare"),
    )?;
    link(
        format!("{build}/gpu-mps-epilog"),
        epilog_d.join("00-gpushare"),
    )
}

/// Two shares on a node whose prolog and epilog are directories: each is
/// placed on its own GPU by gpushare's prolog (run as the link's name,
/// after the site's), the site's scripts ran for both jobs, and once the
/// jobs end gpushare's epilog has released both shares and the site's
/// epilog ran after it.
pub(super) fn beside_site_scripts(c: &mut Cluster) -> TestResult {
    install_scripts(c)?;
    let ids = start_shares(c, 2, 50)?;
    let gpus = gpus_of(c, &ids)?;
    ensure(
        gpus[0] != gpus[1] && ledger(c).shares().count() == 2,
        format!(
            "two shares through prolog.d: GPUs {gpus:?}, ledger {:?}",
            state_text(c)
        ),
    )?;
    for &id in &ids {
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    for &id in &ids {
        c.wait_job_done(id, JOB_END)?;
    }
    wait_for("gpushare's epilog in epilog.d", SHORT, || no_share_left(c))?;
    wait_for("the site's epilogs", SHORT, || {
        let ran = fs::read_to_string(c.dir.join(RAN)).unwrap_or_default();
        ids.iter()
            .all(|id| ran.contains(&format!("epilog {id}")))
            .then_some(())
    })?;
    let ran = fs::read_to_string(c.dir.join(RAN)).unwrap_or_default();
    ensure(
        ids.iter().all(|id| ran.contains(&format!("prolog {id}"))),
        format!("the site's prolog did not run for jobs {ids:?}: {ran:?}"),
    )
}
