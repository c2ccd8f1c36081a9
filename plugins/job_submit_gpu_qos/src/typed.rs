//! The typed GPU limits of the association manager's records: which
//! `gres/gpu:TYPE` TRES a QOS or an association limits in any of its
//! `GrpTRES*`/`MaxTRES*` settings.
//!
//! slurmctld keeps each limit broken out by TRES position in the records'
//! `*_ctld` arrays (`assoc_mgr_set_tres_cnt_array`: unset entries are
//! `INFINITE64`), in the order of `assoc_mgr_tres_name_array`, both
//! `g_tres_count` long and guarded by the manager's TRES lock. The arrays
//! and the name table live in libslurmfull; they are found with dlsym so
//! that the plugin still loads where there are none (its tests), and
//! there nothing is typed.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use slurm_plugin::slurm_str::opt_str;
use slurm_sys::{slurmdb_assoc_rec_t, slurmdb_qos_rec_t, INFINITE64, NO_VAL64};

/// The TRES table and the association manager's lists.
#[derive(Clone, Copy)]
struct Tables {
    names: *const *mut *mut c_char,
    count: *const u32,
    qos_list: *const *mut c_void,
    assoc_list: *const *mut c_void,
    for_each: Option<ForEach>,
}

/// `list_for_each(list, f, arg)`: calls `f` on each item until it returns
/// a negative number.
type ForEach = unsafe extern "C" fn(
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>,
    *mut c_void,
) -> c_int;

// SAFETY: addresses of libslurmfull's globals, fixed for the life of the
// process, read only under the manager's locks.
unsafe impl Send for Tables {}
// SAFETY: as above.
unsafe impl Sync for Tables {}

fn tables() -> Option<Tables> {
    static TABLES: OnceLock<Option<Tables>> = OnceLock::new();
    *TABLES.get_or_init(|| {
        let find = |name: &std::ffi::CStr| {
            // SAFETY: dlsym with a NUL-terminated name in the process's
            // global symbols.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        // Newer releases export it by its own name, older ones also (or
        // only) with the `slurm_` prefix of libslurm's exports.
        let for_each = find(c"list_for_each").or_else(|| find(c"slurm_list_for_each"));
        Some(Tables {
            names: find(c"assoc_mgr_tres_name_array")?.cast(),
            count: find(c"g_tres_count")?.cast(),
            qos_list: find(c"assoc_mgr_qos_list")?.cast(),
            assoc_list: find(c"assoc_mgr_assoc_list")?.cast(),
            // SAFETY: the symbol is list_for_each, of the signature above
            // in every release 22.05-26.05 (src/common/list.h).
            for_each: for_each.map(|p| unsafe { std::mem::transmute::<*mut c_void, ForEach>(p) }),
        })
    })
}

/// The GPU types a record's limit arrays set a value for.
///
/// # Safety
/// The caller holds the manager's TRES read lock and the lock of the
/// record the arrays belong to; each array is NULL or `g_tres_count` long.
unsafe fn types_in(arrays: &[*mut u64]) -> Vec<String> {
    let Some(t) = tables() else {
        return Vec::new();
    };
    // SAFETY: the globals, under the caller's TRES lock.
    let (names, count) = unsafe { (*t.names, *t.count) };
    if names.is_null() {
        return Vec::new();
    }
    let mut types = Vec::new();
    for i in 0..count as usize {
        // SAFETY: `names` holds `count` entries, each NULL or a string.
        let Some(name) = (unsafe { opt_str(*names.add(i)) }) else {
            continue;
        };
        let Some(ty) = name.strip_prefix("gres/gpu:").filter(|t| !t.is_empty()) else {
            continue;
        };
        let set = arrays.iter().any(|&a| {
            // SAFETY: a non-NULL array has `count` entries.
            !a.is_null() && !matches!(unsafe { *a.add(i) }, INFINITE64 | NO_VAL64)
        });
        if set && !types.iter().any(|t: &String| t == ty) {
            types.push(ty.to_owned());
        }
    }
    types
}

/// The GPU types a QOS limits.
///
/// # Safety
/// `qos` is the manager's record; the caller holds its QOS and TRES read locks.
pub unsafe fn qos_types(qos: &slurmdb_qos_rec_t) -> Vec<String> {
    // SAFETY: forwarded.
    unsafe {
        types_in(&[
            qos.grp_tres_ctld,
            qos.grp_tres_mins_ctld,
            qos.grp_tres_run_mins_ctld,
            qos.max_tres_pa_ctld,
            qos.max_tres_pj_ctld,
            qos.max_tres_pn_ctld,
            qos.max_tres_pu_ctld,
            qos.max_tres_mins_pj_ctld,
            qos.max_tres_run_mins_pa_ctld,
            qos.max_tres_run_mins_pu_ctld,
        ])
    }
}

/// The GPU types an association limits.
///
/// # Safety
/// `assoc` is the manager's record; the caller holds its association and
/// TRES read locks.
pub unsafe fn assoc_types(assoc: &slurmdb_assoc_rec_t) -> Vec<String> {
    // SAFETY: forwarded.
    unsafe {
        types_in(&[
            assoc.grp_tres_ctld,
            assoc.grp_tres_mins_ctld,
            assoc.grp_tres_run_mins_ctld,
            assoc.max_tres_ctld,
            assoc.max_tres_pn_ctld,
            assoc.max_tres_mins_ctld,
            assoc.max_tres_run_mins_ctld,
        ])
    }
}

/// A record of the manager whose limits may name GPU types.
trait Limited {
    /// # Safety
    /// As for [`qos_types`] and [`assoc_types`].
    unsafe fn types(&self) -> Vec<String>;
}

impl Limited for slurmdb_qos_rec_t {
    unsafe fn types(&self) -> Vec<String> {
        // SAFETY: forwarded.
        unsafe { qos_types(self) }
    }
}

impl Limited for slurmdb_assoc_rec_t {
    unsafe fn types(&self) -> Vec<String> {
        // SAFETY: forwarded.
        unsafe { assoc_types(self) }
    }
}

/// `list_for_each`'s callback over the manager's list of `R`: sets the
/// caller's flag and stops at the first record that limits a GPU type.
unsafe extern "C" fn typed<R: Limited>(x: *mut c_void, found: *mut c_void) -> c_int {
    // SAFETY: list_for_each over the manager's list of R hands each
    // record and our flag; the caller holds the list's and TRES read locks.
    let typed = unsafe { x.cast::<R>().as_ref() }.is_some_and(|r| !unsafe { r.types() }.is_empty());
    if typed {
        // SAFETY: `found` is the caller's bool.
        unsafe { *found.cast::<bool>() = true };
        return -1;
    }
    0
}

/// Whether any QOS or association limits a GPU type. Where the lists
/// cannot be walked, true: an update whose landing QOS is unknown is then
/// judged as protected (fail closed).
///
/// # Safety
/// The caller holds the manager's QOS, association and TRES read locks.
pub unsafe fn anywhere() -> bool {
    let Some(t) = tables() else {
        return false;
    };
    let Some(for_each) = t.for_each else {
        return true;
    };
    let mut found = false;
    for (list, f) in [
        (
            t.qos_list,
            typed::<slurmdb_qos_rec_t> as unsafe extern "C" fn(_, _) -> _,
        ),
        (t.assoc_list, typed::<slurmdb_assoc_rec_t>),
    ] {
        // SAFETY: the manager's list, under the caller's locks.
        let list = unsafe { *list };
        if list.is_null() || found {
            continue;
        }
        // SAFETY: walks the list with a callback that only reads.
        unsafe { for_each(list, Some(f), (&raw mut found).cast()) };
    }
    found
}
