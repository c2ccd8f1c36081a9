//! gpu_qos beside a site's own job_submit/lua script
//! (`JobSubmitPlugins=lua,gpu_qos`): Slurm calls the plugins in the order
//! the line names them, each on the job as the one before left it, so
//! gpu_qos judges what the site's script made of the request.

use super::*;

/// A site's script that gives an untyped GPU request under `qos_lafferty`
/// the group's type, as sites write them (every field a GPU request can be
/// in; Slurm 22.05-23.02 write `gres:gpu:2`, 23.11 and later `gres/gpu:2`).
const SITE_LUA: &str = r#"-- The site's own job_submit.lua, run before gpu_qos.
local fields = { "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.qos ~= "qos_lafferty" then
      return slurm.SUCCESS
   end
   for _, field in ipairs(fields) do
      local value = job_desc[field]
      if value ~= nil then
         local typed = (string.gsub(value, "(gres[:/]gpu):(%d+)", "%1:a40:%2"))
         if typed ~= value then
            job_desc[field] = typed
            slurm.log_user("site lua: %s is now %s", field, typed)
         end
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end
"#;

/// The example site with the script above running first.
pub(super) fn lua_first_site() -> ClusterSpec {
    let mut spec = ClusterSpec::example_site();
    spec.job_submit_plugins = vec!["lua".into(), "gpu_qos".into()];
    spec.extra_conf_files
        .push(("job_submit.lua".into(), SITE_LUA.into()));
    spec
}

/// lua runs first and gpu_qos sees its change: an untyped request under
/// `qos_lafferty`, typed by the script, is accepted and booked as a40 (the
/// user reads the script's words, not a refusal); one under `qos_ying_rex`,
/// which the script leaves alone, is still refused by gpu_qos with its fix;
/// a request the script made typed but of too many GPUs still never fits.
pub(super) fn lua_runs_first(c: &mut Cluster) -> TestResult {
    let config = c.run_ok("scontrol", &["show", "config"])?;
    ensure(
        config
            .lines()
            .any(|l| l.starts_with("JobSubmitPlugins") && l.trim_end().ends_with("lua,gpu_qos")),
        format!(
            "slurmctld does not run lua then gpu_qos: {:?}",
            config.lines().find(|l| l.starts_with("JobSubmitPlugins"))
        ),
    )?;
    let out = c.run_ok(
        "sbatch",
        &[
            "--parsable",
            "-H",
            "--wrap=true",
            "--qos=qos_lafferty",
            "--gres=gpu:1",
        ],
    );
    let id: u32 = match out {
        Ok(text) => text
            .lines()
            .find_map(|l| l.trim().split(';').next()?.parse().ok())
            .ok_or_else(|| format!("no job id in {text:?}"))?,
        Err(e) => return Err(format!("the request lua typed was refused: {e}")),
    };
    let shown = c.run_ok("scontrol", &["show", "job", &id.to_string()])?;
    ensure(
        shown.contains("gpu:a40:1"),
        format!("job {id} is not booked as a40 after lua typed it:\n{shown}"),
    )?;
    let err = rejected(c, &["--qos=qos_ying_rex", "--gres=gpu:1"])?;
    contains_all(&err, &["qos_ying_rex", "--gres=gpu:a40:1"])?;
    ensure(
        !err.contains("site lua"),
        format!("lua changed a request it leaves alone: {err}"),
    )?;
    // Typed by lua, five a40 still never fit the group's four.
    let err = rejected(c, &["--qos=qos_lafferty", "--gres=gpu:5"])?;
    contains_all(&err, &["qos_lafferty", "5", "4"])
}
