//! What slurmctld decides for a job beyond what its client sent: the QOS
//! it falls back to, the partition it lands in, the accounts whose limits
//! it counts against. Read in process from slurmctld's association manager
//! (the functions job_submit/lua uses for `job_desc.default_qos`), under its
//! read locks, and copied out before they are released.
//!
//! Slurm applies typed GPU limits at each of these levels, and each is
//! escaped by an untyped request the same way; the policy can only close
//! the hole at a level it can see.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use gpushare::qos::policy::{LimitLevel, Resolved, TypedLimit};
use slurm_plugin::slurm_str::opt_str;
use slurm_sys::{
    assoc_mgr_fill_in_assoc, assoc_mgr_fill_in_qos, assoc_mgr_fill_in_user,
    assoc_mgr_get_default_qos_info, assoc_mgr_lock, assoc_mgr_unlock, gpushare_assoc_mgr_lock_t,
    job_desc_msg_t, slurm_list_count, slurmdb_assoc_rec_t, slurmdb_qos_rec_t, slurmdb_user_rec_t,
    GPUSHARE_NO_LOCK, GPUSHARE_READ_LOCK, NO_VAL, SLURM_SUCCESS,
};

/// Which facts the loaded policy needs, so a job is looked up no further.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub default_qos: bool,
    pub default_partition: bool,
    pub accounts: bool,
    /// The typed GPU limits of the levels that cover the job (for an
    /// update: the levels it moves the job to).
    pub typed_limits: bool,
    /// Whether any QOS or association limits a GPU type (an update
    /// whose landing QOS is unknown).
    pub anywhere: bool,
}

impl Needs {
    fn any(self) -> bool {
        self.default_qos || self.default_partition || self.accounts || self.typed_limits
    }
}

/// The owned facts a [`Resolved`] borrows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    default_qos: Vec<String>,
    default_partition: Option<String>,
    accounts: Vec<String>,
    user: Option<String>,
    typed_limits: Vec<TypedLimit>,
    typed_limits_anywhere: bool,
}

impl Resolution {
    pub fn view(&self) -> Resolved<'_> {
        Resolved {
            default_qos: &self.default_qos,
            default_partition: self.default_partition.as_deref(),
            accounts: &self.accounts,
            user: self.user.as_deref(),
            typed_limits: &self.typed_limits,
            typed_limits_anywhere: self.typed_limits_anywhere,
        }
    }
}

/// slurmctld's globals the association manager's calls take. They live in
/// the slurmctld binary, so they are found with dlsym: outside slurmctld
/// (tests, benchmarks) there are none, and nothing is resolved.
#[derive(Clone, Copy)]
struct Globals {
    acct_db_conn: *const *mut c_void,
    accounting_enforce: *const u16,
    default_part_name: *const *mut c_char,
}

// SAFETY: the pointers are addresses of slurmctld's globals, fixed for the
// life of the process; they are only read, under the locks slurmctld
// guards them with.
unsafe impl Send for Globals {}
// SAFETY: as above.
unsafe impl Sync for Globals {}

fn globals() -> Option<Globals> {
    static GLOBALS: OnceLock<Option<Globals>> = OnceLock::new();
    *GLOBALS.get_or_init(|| {
        let find = |name: &CStr| {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT
            // searches the process's global symbols (slurmctld exports its
            // own, as every plugin of it relies on).
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        Some(Globals {
            acct_db_conn: find(c"acct_db_conn")?.cast(),
            accounting_enforce: find(c"accounting_enforce")?.cast(),
            default_part_name: find(c"default_part_name")?.cast(),
        })
    })
}

/// Whether this process is a slurmctld whose association manager can be read.
pub fn available() -> bool {
    globals().is_some()
}

/// The association manager's read locks, released on drop (also when a
/// panic unwinds through the lookup).
struct ReadLocks(gpushare_assoc_mgr_lock_t);

impl ReadLocks {
    fn take() -> Self {
        let mut locks = ReadLocks(gpushare_assoc_mgr_lock_t {
            assoc: GPUSHARE_READ_LOCK,
            file: GPUSHARE_NO_LOCK,
            qos: GPUSHARE_READ_LOCK,
            res: GPUSHARE_NO_LOCK,
            tres: GPUSHARE_READ_LOCK,
            user: GPUSHARE_READ_LOCK,
            wckey: GPUSHARE_NO_LOCK,
        });
        // SAFETY: a valid lock request; slurmctld takes its own locks
        // before the association manager's, as job_submit's caller holds
        // its own now, so this order cannot deadlock with it.
        unsafe { assoc_mgr_lock(&mut locks.0) };
        locks
    }
}

impl Drop for ReadLocks {
    fn drop(&mut self) {
        // SAFETY: releases exactly the locks `take` acquired.
        unsafe { assoc_mgr_unlock(&mut self.0) };
    }
}

/// Copies a string the manager owns (valid while its locks are held).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn owned(p: *const c_char) -> Option<String> {
    // SAFETY: forwarded.
    unsafe { opt_str(p) }
        .map(|s| s.into_owned())
        .filter(|s| !s.is_empty())
}

/// The deepest account hierarchy followed: a cycle in a corrupt database
/// must not hold slurmctld's locks forever.
const MAX_ACCOUNT_DEPTH: usize = 64;

/// Looks up what `needs` asks for a job being submitted (or, with
/// `update`, for the levels an `scontrol update` moves a job to: the
/// account, QOS and partitions it names, and for a blank `QOS=` the
/// user's default QOS). `partition_qos` maps partitions to their QOS.
///
/// # Safety
/// Called only from slurmctld's job_submit/job_modify with `desc` valid for
/// the call; the caller holds no association manager lock.
pub unsafe fn resolve(
    desc: &job_desc_msg_t,
    needs: Needs,
    update: bool,
    partition_qos: &crate::partitions::PartitionQos,
) -> Resolution {
    let mut out = Resolution::default();
    let Some(g) = globals().filter(|_| needs.any() || needs.anywhere) else {
        return out;
    };
    // SAFETY: slurmctld's globals, read under the locks slurmctld's own
    // readers hold: the part read lock is held by job_submit's caller.
    let (db_conn, enforce) = unsafe { (*g.acct_db_conn, c_int::from(*g.accounting_enforce)) };
    // SAFETY: NULL or slurmctld's NUL-terminated partition name.
    let default_partition = unsafe { owned(*g.default_part_name) };
    // SAFETY: NULL or a NUL-terminated string of the description.
    let partition_text = unsafe { owned(desc.partition) };
    // SAFETY: as above.
    let account_text = unsafe { owned(desc.account) };
    // SAFETY: as above (Some("") is a blank QOS=).
    let qos_text = unsafe { opt_str(desc.qos) }.map(|q| q.into_owned());
    let named_qos: Vec<String> = qos_text
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(str::to_owned)
        .collect();
    let blank_qos = qos_text.is_some() && named_qos.is_empty();
    if !update && partition_text.is_none() && needs.default_partition {
        out.default_partition = default_partition.clone();
    }
    let partition_list = if update {
        partition_text
    } else {
        partition_text.or(default_partition)
    };
    let partitions: Vec<String> = partition_list
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let partition_names: Vec<CString> = partitions
        .iter()
        .filter_map(|p| CString::new(p.as_str()).ok())
        .collect();
    let account = account_text.as_deref().and_then(|a| CString::new(a).ok());

    // An update that names no level and no blank QOS has nothing to look up.
    let nothing_named = named_qos.is_empty() && partitions.is_empty() && account_text.is_none();
    if update && nothing_named && !blank_qos && !needs.anywhere {
        return out;
    }
    let _locks = ReadLocks::take();
    if needs.typed_limits {
        for q in &named_qos {
            // SAFETY: under the manager's read locks.
            let types = unsafe { qos_limit_types(db_conn, enforce, q) };
            out.push_limit(LimitLevel::Qos(q.clone()), types);
        }
        for p in &partitions {
            if let Some(q) = partition_qos.get(p) {
                // SAFETY: under the manager's read locks.
                let types = unsafe { qos_limit_types(db_conn, enforce, q) };
                let level = LimitLevel::Partition {
                    partition: p.clone(),
                    qos: q.clone(),
                };
                out.push_limit(level, types);
            }
        }
    }
    if needs.anywhere {
        // SAFETY: under the manager's QOS, association and TRES read locks.
        out.typed_limits_anywhere = unsafe { crate::typed::anywhere() };
    }
    if update {
        // An update moves the job to the account it names, if any.
        if let (true, Some(account)) = (needs.accounts || needs.typed_limits, &account_text) {
            // SAFETY: under the manager's read locks.
            let chain = unsafe { account_chain(db_conn, enforce, account) };
            out.take_chain(chain, needs);
        }
        if !blank_qos {
            return out;
        }
    }
    // SAFETY: a zeroed record is what Slurm's own callers start from
    // (memset 0); we set the uid; the call reads and fills it under our
    // user read lock.
    let mut user: slurmdb_user_rec_t = unsafe { std::mem::zeroed() };
    user.uid = desc.user_id;
    // SAFETY: as above; NULL user_pptr is allowed.
    let user_found =
        unsafe { assoc_mgr_fill_in_user(db_conn, &mut user, enforce, ptr::null_mut(), true) }
            == SLURM_SUCCESS as c_int;
    if user_found {
        // SAFETY: strings of the manager's record, valid under our locks.
        out.user = unsafe { owned(user.name) };
    }
    let account_ptr: *mut c_char = match &account {
        Some(a) => a.as_ptr().cast_mut(),
        // SAFETY-relevant: the manager's string, used only under our locks.
        None if user_found => user.default_acct,
        None => ptr::null_mut(),
    };
    // An update's default QOS is the association's without a partition:
    // the job's own partition is not visible here.
    let slots: Vec<*mut c_char> = if partition_names.is_empty() || update {
        vec![ptr::null_mut()]
    } else {
        partition_names
            .iter()
            .map(|p| p.as_ptr().cast_mut())
            .collect()
    };
    let wants_default_qos = needs.default_qos || (needs.typed_limits && named_qos.is_empty());
    let wants_accounts = !update && (needs.accounts || needs.typed_limits);
    for partition in slots {
        // SAFETY: as for the user record.
        let mut assoc: slurmdb_assoc_rec_t = unsafe { std::mem::zeroed() };
        assoc.uid = desc.user_id;
        assoc.acct = account_ptr;
        assoc.partition = partition;
        let mut record: *mut slurmdb_assoc_rec_t = ptr::null_mut();
        // SAFETY: the lookup reads the fields set above (strings we own or
        // the manager's, valid under our locks) and points `record` at the
        // manager's own record.
        let rc =
            unsafe { assoc_mgr_fill_in_assoc(db_conn, &mut assoc, enforce, &mut record, true) };
        if rc != SLURM_SUCCESS as c_int || record.is_null() {
            continue;
        }
        if !update && needs.typed_limits {
            // The user's own association (for this partition, where it
            // has one): its typed limit is escaped like any other.
            // SAFETY: the manager's record and strings, under our locks.
            let level = unsafe {
                let r = &*record;
                owned(r.user)
                    .zip(owned(r.acct))
                    .map(|(user, account)| LimitLevel::User {
                        user,
                        account,
                        partition: owned(r.partition),
                    })
            };
            if let Some(level) = level {
                // SAFETY: the manager's record, under our locks.
                let types = unsafe { crate::typed::assoc_types(&*record) };
                out.push_limit(level, types);
            }
        }
        if wants_default_qos {
            // SAFETY: as for the user record.
            let mut qos: slurmdb_qos_rec_t = unsafe { std::mem::zeroed() };
            let mut qos_ptr: *mut slurmdb_qos_rec_t = ptr::null_mut();
            // SAFETY: `record` is the manager's, read under our assoc lock;
            // the QOS is then looked up by the id or name it set, and
            // `qos_ptr` pointed at the manager's record.
            let found = unsafe {
                assoc_mgr_get_default_qos_info(record, &mut qos);
                assoc_mgr_fill_in_qos(db_conn, &mut qos, enforce, &mut qos_ptr, true)
                    == SLURM_SUCCESS as c_int
            };
            // SAFETY: the manager's record and string, under our locks.
            let name = found.then(|| unsafe { owned(qos.name) }).flatten();
            if let Some(name) = name {
                if !out.default_qos.contains(&name) {
                    if !update && needs.typed_limits {
                        // SAFETY: the manager's record, under our locks.
                        let types = unsafe { qos_ptr.as_ref() }
                            .map(|q| unsafe { crate::typed::qos_types(q) })
                            .unwrap_or_default();
                        out.push_limit(LimitLevel::Qos(name.clone()), types);
                    }
                    out.default_qos.push(name);
                }
            }
        }
        if wants_accounts && out.accounts.is_empty() {
            // SAFETY: the manager's record and string, under our locks.
            if let Some(acct) = unsafe { owned((*record).acct) } {
                // SAFETY: under the manager's read locks.
                let chain = unsafe { account_chain(db_conn, enforce, &acct) };
                out.take_chain(chain, needs);
            }
        }
    }
    out
}

/// `accounts` and every account above each, as slurmctld's association
/// manager has them (for a job's record read back after an update: an
/// `Account=` rule covers its sub-accounts). Without the manager, the
/// accounts themselves.
pub fn accounts_above(accounts: &[String]) -> Vec<String> {
    let mut out = accounts.to_vec();
    let Some(g) = globals() else {
        return out;
    };
    // SAFETY: slurmctld's globals, set before any plugin runs.
    let (db_conn, enforce) = unsafe { (*g.acct_db_conn, c_int::from(*g.accounting_enforce)) };
    // Taken with no lock of slurmctld's held (the read-back's thread), so
    // no order of locks to keep.
    let _locks = ReadLocks::take();
    for account in accounts {
        // SAFETY: under the manager's read locks.
        for (above, _) in unsafe { account_chain(db_conn, enforce, account) } {
            if !out.contains(&above) {
                out.push(above);
            }
        }
    }
    out
}

impl Resolution {
    fn push_limit(&mut self, level: LimitLevel, types: Vec<String>) {
        if !types.is_empty() && !self.typed_limits.iter().any(|l| l.level == level) {
            self.typed_limits.push(TypedLimit { level, types });
        }
    }

    fn take_chain(&mut self, chain: Vec<(String, Vec<String>)>, needs: Needs) {
        for (account, types) in chain {
            if needs.typed_limits {
                self.push_limit(LimitLevel::Account(account.clone()), types);
            }
            self.accounts.push(account);
        }
    }
}

/// The GPU types the QOS named `name` limits.
///
/// # Safety
/// The caller holds the association manager's read locks.
unsafe fn qos_limit_types(db_conn: *mut c_void, enforce: c_int, name: &str) -> Vec<String> {
    let Ok(c_name) = CString::new(name) else {
        return Vec::new();
    };
    // SAFETY: a zeroed record with the name set, as Slurm's callers do.
    let mut qos: slurmdb_qos_rec_t = unsafe { std::mem::zeroed() };
    qos.name = c_name.as_ptr().cast_mut();
    let mut qos_ptr: *mut slurmdb_qos_rec_t = ptr::null_mut();
    // SAFETY: under the caller's locks; reads the name we own, points
    // `qos_ptr` at the manager's record.
    let rc = unsafe { assoc_mgr_fill_in_qos(db_conn, &mut qos, enforce, &mut qos_ptr, true) };
    if rc != SLURM_SUCCESS as c_int {
        return Vec::new();
    }
    // SAFETY: NULL or the manager's record, under the caller's locks.
    unsafe { qos_ptr.as_ref() }
        .map(|q| unsafe { crate::typed::qos_types(q) })
        .unwrap_or_default()
}

/// `account` and its parents up to the root, nearest first, each with
/// the GPU types its own association limits.
///
/// # Safety
/// The caller holds the association manager's read locks.
unsafe fn account_chain(
    db_conn: *mut c_void,
    enforce: c_int,
    account: &str,
) -> Vec<(String, Vec<String>)> {
    let mut chain: Vec<(String, Vec<String>)> = Vec::new();
    let mut next = Some(account.to_owned());
    while let Some(current) = next.take() {
        if chain.len() >= MAX_ACCOUNT_DEPTH {
            break;
        }
        let Ok(c_current) = CString::new(current.as_str()) else {
            break;
        };
        // SAFETY: a zeroed record with acct set and no user (uid NO_VAL)
        // asks for the account's own association, as sacctmgr's tree has it.
        let mut assoc: slurmdb_assoc_rec_t = unsafe { std::mem::zeroed() };
        assoc.uid = NO_VAL;
        assoc.acct = c_current.as_ptr().cast_mut();
        let mut record: *mut slurmdb_assoc_rec_t = ptr::null_mut();
        // SAFETY: under the caller's locks; reads what we set.
        let rc =
            unsafe { assoc_mgr_fill_in_assoc(db_conn, &mut assoc, enforce, &mut record, true) };
        let found = if rc == SLURM_SUCCESS as c_int {
            // SAFETY: NULL or the manager's record, under the caller's locks.
            unsafe { record.as_ref() }
        } else {
            None
        };
        let Some(found) = found else {
            chain.push((current, Vec::new()));
            break;
        };
        // SAFETY: the manager's record, under the caller's locks.
        let types = unsafe { crate::typed::assoc_types(found) };
        // SAFETY: the manager's string, under the caller's locks.
        let parent = unsafe { owned(found.parent_acct) };
        chain.push((current, types));
        next = parent.filter(|p| !chain.iter().any(|(a, _)| a == p));
    }
    chain
}

/// `SLURMDB_ADMIN_OPERATOR` of `slurmdb_admin_level_t` (slurmdb.h): the
/// same value, and the same order below `SLURMDB_ADMIN_SUPER_USER`, in
/// every release from 22.05 to 26.05.
const ADMIN_OPERATOR: u16 = 2;

/// Who submits or updates, as slurmctld's association manager has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    pub name: Option<String>,
    /// AdminLevel Operator or Administrator in the database.
    pub operator: bool,
    /// A coordinator of at least one account.
    pub coordinator: bool,
}

/// The user record of `uid`: its name and admin level. Read with
/// `assoc_mgr_fill_in_user` under the manager's user read lock, as the
/// job's own user is: the level is copied from the same record
/// (`user->admin_level = found_user->admin_level`, every release).
/// `assoc_mgr_get_admin_level` is not used: it takes the user lock
/// itself (its `_locked` form exists only from 23.11) and gives no name.
///
/// # Safety
/// Called only from slurmctld's job_submit/job_modify; the caller holds
/// no association manager lock.
pub unsafe fn requester(uid: u32) -> Requester {
    let Some(g) = globals() else {
        return Requester::default();
    };
    // SAFETY: slurmctld's globals, as in `resolve`.
    let (db_conn, enforce) = unsafe { (*g.acct_db_conn, c_int::from(*g.accounting_enforce)) };
    let _locks = ReadLocks::take();
    // SAFETY: a zeroed record, the uid set, filled under our user lock.
    let mut user: slurmdb_user_rec_t = unsafe { std::mem::zeroed() };
    user.uid = uid;
    // SAFETY: as above; NULL user_pptr is allowed.
    let found =
        unsafe { assoc_mgr_fill_in_user(db_conn, &mut user, enforce, ptr::null_mut(), true) }
            == SLURM_SUCCESS as c_int;
    if !found {
        return Requester::default();
    }
    // The record's coordinator list is the manager's own (copied as a
    // pointer), read under the same lock.
    let coordinator = !user.coord_accts.is_null()
        // SAFETY: a live list of the manager's, under our user read lock.
        && unsafe { slurm_list_count(user.coord_accts) } > 0;
    Requester {
        // SAFETY: the manager's string, valid under our locks.
        name: unsafe { owned(user.name) },
        operator: user.admin_level >= ADMIN_OPERATOR,
        coordinator,
    }
}
