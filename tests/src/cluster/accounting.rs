//! The accounting database's cluster, account, user and QOS.

use super::{wait_for, Cluster, Qos, CLUSTER_NAME};
use crate::time::SHORT;
use crate::Result;

impl Cluster {
    /// The accounting database: one per cluster, so that clusters can share
    /// a server (`GPUSHARE_TEST_MYSQL_PORT`).
    pub(super) fn database_name(&self) -> String {
        let tag: String = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("slurm_acct_{tag}")
    }

    pub(super) fn setup_accounting(&mut self) -> Result<()> {
        self.run_ok(
            "sacctmgr",
            &[
                "-i",
                "add",
                "account",
                "research",
                &format!("cluster={CLUSTER_NAME}"),
            ],
        )?;
        let qos_names: Vec<&str> = self.spec.qos.iter().map(|q| q.name.as_str()).collect();
        // Create every QOS first: Preempt= may name a later one.
        for q in &qos_names {
            self.run_ok("sacctmgr", &["-i", "add", "qos", q])?;
        }
        for q in self.spec.qos.clone() {
            self.set_qos(&q)?;
        }
        let mut qos_list = vec!["normal".to_owned()];
        qos_list.extend(qos_names.iter().map(|s| (*s).to_owned()));
        self.run_ok(
            "sacctmgr",
            &[
                "-i",
                "add",
                "user",
                "root",
                "account=research",
                &format!("cluster={CLUSTER_NAME}"),
            ],
        )?;
        // root also has the `root` account from the cluster's creation: make
        // research its default and give every association of root the QOS.
        self.run_ok(
            "sacctmgr",
            &[
                "-i",
                "modify",
                "user",
                "where",
                "name=root",
                "set",
                "defaultaccount=research",
                &format!("qos={}", qos_list.join(",")),
            ],
        )?;
        // slurmctld learns association changes from slurmdbd asynchronously.
        wait_for("slurmctld to see the new associations", SHORT, || {
            self.run(
                "scontrol",
                &["show", "assoc_mgr", "users=root", "flags=assoc"],
            )
            .ok()
            .filter(|o| String::from_utf8_lossy(&o.stdout).contains("Account=research"))
        })?;
        Ok(())
    }
}

impl Cluster {
    /// Gives a QOS the settings `q` names (those it leaves out are not
    /// touched), as an admin would with `sacctmgr modify qos`.
    pub fn set_qos(&self, q: &Qos) -> Result<()> {
        let set = qos_settings(q);
        if set.is_empty() {
            return Ok(());
        }
        let mut args = vec!["-i", "modify", "qos", q.name.as_str(), "set"];
        args.extend(set.iter().map(String::as_str));
        self.run_ok("sacctmgr", &args).map(drop)
    }
}

/// `sacctmgr` `Key=Value` settings for what a QOS spec names.
fn qos_settings(q: &Qos) -> Vec<String> {
    let mut set = Vec::new();
    if let Some(t) = &q.grp_tres {
        set.push(format!("GrpTRES={t}"));
    }
    if !q.preempt.is_empty() {
        set.push(format!("Preempt={}", q.preempt.join(",")));
    }
    if let Some(m) = &q.preempt_mode {
        set.push(format!("PreemptMode={m}"));
    }
    if let Some(g) = q.grace_time {
        set.push(format!("GraceTime={g}"));
    }
    if let Some(p) = q.priority {
        set.push(format!("Priority={p}"));
    }
    if let Some(u) = q.usage_factor {
        set.push(format!("UsageFactor={u}"));
    }
    if let Some(f) = &q.flags {
        set.push(format!("Flags={f}"));
    }
    set
}
