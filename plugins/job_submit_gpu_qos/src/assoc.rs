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

use gpushare::qos::policy::Resolved;
use slurm_plugin::slurm_str::opt_str;
use slurm_sys::{
    assoc_mgr_fill_in_assoc, assoc_mgr_fill_in_qos, assoc_mgr_fill_in_user,
    assoc_mgr_get_default_qos_info, assoc_mgr_lock, assoc_mgr_unlock, gpushare_assoc_mgr_lock_t,
    job_desc_msg_t, slurmdb_assoc_rec_t, slurmdb_qos_rec_t, slurmdb_user_rec_t, GPUSHARE_NO_LOCK,
    GPUSHARE_READ_LOCK, NO_VAL, SLURM_SUCCESS,
};

/// Which facts the loaded policy needs, so a job is looked up no further.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub default_qos: bool,
    pub default_partition: bool,
    pub accounts: bool,
}

impl Needs {
    fn any(self) -> bool {
        self.default_qos || self.default_partition || self.accounts
    }
}

/// The owned facts a [`Resolved`] borrows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    default_qos: Vec<String>,
    default_partition: Option<String>,
    accounts: Vec<String>,
    user: Option<String>,
}

impl Resolution {
    pub fn view(&self) -> Resolved<'_> {
        Resolved {
            default_qos: &self.default_qos,
            default_partition: self.default_partition.as_deref(),
            accounts: &self.accounts,
            user: self.user.as_deref(),
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
            tres: GPUSHARE_NO_LOCK,
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
/// `update`, for the account an `scontrol update` moves a job to).
///
/// # Safety
/// Called only from slurmctld's job_submit/job_modify with `desc` valid for
/// the call; the caller holds no association manager lock.
pub unsafe fn resolve(desc: &job_desc_msg_t, needs: Needs, update: bool) -> Resolution {
    let mut out = Resolution::default();
    let Some(g) = globals().filter(|_| needs.any()) else {
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
    if update {
        // An update only moves the job to the account it names, if any.
        if let (true, Some(account)) = (needs.accounts, account_text) {
            let _locks = ReadLocks::take();
            // SAFETY: under the manager's read locks.
            out.accounts = unsafe { account_chain(db_conn, enforce, &account) };
        }
        return out;
    }
    if partition_text.is_none() && needs.default_partition {
        out.default_partition = default_partition.clone();
    }
    let partitions: Vec<CString> = partition_text
        .or(default_partition)
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .filter_map(|p| CString::new(p).ok())
                .collect()
        })
        .unwrap_or_default();
    let account = account_text.and_then(|a| CString::new(a).ok());

    let _locks = ReadLocks::take();
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
    let slots: Vec<*mut c_char> = if partitions.is_empty() {
        vec![ptr::null_mut()]
    } else {
        partitions.iter().map(|p| p.as_ptr().cast_mut()).collect()
    };
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
        if needs.default_qos {
            // SAFETY: as for the user record.
            let mut qos: slurmdb_qos_rec_t = unsafe { std::mem::zeroed() };
            // SAFETY: `record` is the manager's, read under our assoc lock;
            // the QOS is then looked up by the id or name it set.
            let name = unsafe {
                assoc_mgr_get_default_qos_info(record, &mut qos);
                if assoc_mgr_fill_in_qos(db_conn, &mut qos, enforce, ptr::null_mut(), true)
                    == SLURM_SUCCESS as c_int
                {
                    owned(qos.name)
                } else {
                    None
                }
            };
            if let Some(name) = name {
                if !out.default_qos.contains(&name) {
                    out.default_qos.push(name);
                }
            }
        }
        if needs.accounts && out.accounts.is_empty() {
            // SAFETY: the manager's record and string, under our locks.
            if let Some(acct) = unsafe { owned((*record).acct) } {
                // SAFETY: under the manager's read locks.
                out.accounts = unsafe { account_chain(db_conn, enforce, &acct) };
            }
        }
    }
    out
}

/// `account` and its parents up to the root, nearest first.
///
/// # Safety
/// The caller holds the association manager's read locks.
unsafe fn account_chain(db_conn: *mut c_void, enforce: c_int, account: &str) -> Vec<String> {
    let mut chain = vec![account.to_owned()];
    while chain.len() < MAX_ACCOUNT_DEPTH {
        let Some(current) = chain.last().and_then(|a| CString::new(a.as_str()).ok()) else {
            break;
        };
        // SAFETY: a zeroed record with acct set and no user (uid NO_VAL)
        // asks for the account's own association, as sacctmgr's tree has it.
        let mut assoc: slurmdb_assoc_rec_t = unsafe { std::mem::zeroed() };
        assoc.uid = NO_VAL;
        assoc.acct = current.as_ptr().cast_mut();
        let mut record: *mut slurmdb_assoc_rec_t = ptr::null_mut();
        // SAFETY: under the caller's locks; reads what we set.
        let rc =
            unsafe { assoc_mgr_fill_in_assoc(db_conn, &mut assoc, enforce, &mut record, true) };
        if rc != SLURM_SUCCESS as c_int || record.is_null() {
            break;
        }
        // SAFETY: the manager's record, under the caller's locks.
        let Some(parent) = (unsafe { owned((*record).parent_acct) }) else {
            break;
        };
        if chain.iter().any(|a| a == &parent) {
            break;
        }
        chain.push(parent);
    }
    chain
}
