//! Strings crossing the boundary with Slurm.
//!
//! Reading: Slurm's `char *` fields are NULL when unset; they are usually
//! UTF-8 but nothing guarantees it, so invalid bytes are replaced, never
//! trusted. Writing: whatever Slurm will `xfree` later must be allocated by
//! Slurm (`slurm_xstrdup`, `slurm_xrecalloc`): Slurm's allocator keeps a
//! header in front of each block, and freeing a malloc'ed or Rust block with
//! `xfree` corrupts the daemon's heap.

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::mem::size_of;
use std::os::raw::{c_char, c_void};

/// A string literal (which must end in NUL) as a `c_char` array, for the
/// loader's `plugin_name`/`plugin_type` symbols.
pub const fn c_chars<const N: usize>(s: &str) -> [c_char; N] {
    let bytes = s.as_bytes();
    assert!(bytes.len() == N, "length mismatch");
    assert!(bytes[N - 1] == 0, "must end in NUL");
    let mut out = [0 as c_char; N];
    let mut i = 0;
    while i < N {
        out[i] = bytes[i] as c_char;
        i += 1;
    }
    out
}

/// Reads an optional C string from Slurm.
///
/// # Safety
/// `ptr` must be NULL or point to a NUL-terminated string that stays valid
/// and unchanged for `'a`.
pub unsafe fn opt_str<'a>(ptr: *const c_char) -> Option<Cow<'a, str>> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-NULL, and the caller promises NUL termination and lifetime.
    let c = unsafe { CStr::from_ptr(ptr) };
    Some(c.to_string_lossy())
}

/// Reads at most `limit` bytes of an optional C string from Slurm: the
/// start of a text that may be large (a batch script), never read past.
///
/// # Safety
/// `ptr` must be NULL or point to a NUL-terminated string that stays valid
/// and unchanged during the call.
pub unsafe fn opt_str_head(ptr: *const c_char, limit: usize) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        // SAFETY: every byte up to and including the NUL is part of the
        // string (the caller's promise), and the loop stops at the NUL.
        let b = unsafe { *ptr.add(bytes.len()) } as u8;
        if b == 0 {
            break;
        }
        bytes.push(b);
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A copy of `text` in Slurm's allocator, for Slurm to own and `xfree`.
/// Interior NULs are replaced so the text is never silently cut.
pub fn xstrdup(text: &str) -> *mut c_char {
    let c = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
    // SAFETY: `c` is a valid NUL-terminated string; slurm_xstrdup copies it
    // into a block Slurm owns (it aborts the daemon on OOM like all of Slurm).
    unsafe { slurm_sys::slurm_xstrdup(c.as_ptr()) }
}

/// Sets a Slurm-owned message slot such as job_submit's `*err_msg`.
///
/// If an earlier plugin in the chain already left a message, ours is
/// appended on a new line instead of leaking or hiding it.
///
/// # Safety
/// `slot` must be NULL or point to a `char *` that is NULL or was allocated
/// by Slurm's allocator, and nothing else may access it during the call.
pub unsafe fn set_message(slot: *mut *mut c_char, text: &str) {
    if slot.is_null() {
        return;
    }
    // SAFETY: caller guarantees `slot` is valid and exclusively ours.
    let old = unsafe { *slot };
    // SAFETY: `old` is NULL or a live NUL-terminated Slurm string.
    let merged = match unsafe { opt_str(old) } {
        Some(prev) if !prev.is_empty() => format!("{prev}\n{text}"),
        _ => text.to_owned(),
    };
    if !old.is_null() {
        // SAFETY: `old` came from Slurm's allocator (caller's contract);
        // slurm_xfree frees it and NULLs the slot.
        unsafe { slurm_sys::slurm_xfree(slot.cast::<*mut c_void>()) };
    }
    // SAFETY: `slot` is valid (checked non-NULL, caller's contract).
    unsafe { *slot = xstrdup(&merged) };
}

/// Sets `NAME=value` in a Slurm environment array such as
/// `job_desc->spank_job_env`, replacing an existing `NAME=` entry.
///
/// # Safety
/// `env` must point to the array pointer (NULL or allocated by Slurm's
/// allocator, with at least `*size` valid entries) and `size` to its length;
/// nothing else may access either during the call.
pub unsafe fn set_env(env: *mut *mut *mut c_char, size: *mut u32, name: &str, value: &str) {
    if env.is_null() || size.is_null() {
        return;
    }
    let entry = format!("{name}={value}");
    let prefix = format!("{name}=");
    // SAFETY: both pointers valid and exclusively ours (caller's contract).
    let (array, len) = unsafe { (*env, *size) };
    if !array.is_null() {
        for i in 0..len as usize {
            // SAFETY: `i < len` entries are valid (caller's contract).
            let slot = unsafe { array.add(i) };
            // SAFETY: each entry is NULL or a NUL-terminated Slurm string.
            let matches = unsafe { opt_str(*slot) }.is_some_and(|e| e.starts_with(&prefix));
            if matches {
                // SAFETY: the entry is Slurm-allocated; xfree NULLs it, then
                // we store a fresh Slurm-allocated string in its place.
                unsafe {
                    slurm_sys::slurm_xfree(slot.cast::<*mut c_void>());
                    *slot = xstrdup(&entry);
                }
                return;
            }
        }
    }
    let new_len = len.saturating_add(1);
    // SAFETY: `*env` is NULL or Slurm-allocated; xrecalloc grows it to
    // new_len + 1 pointers (zeroing the new ones) and updates `*env`. Slurm
    // reads the array by its size, but some of its env helpers also walk to
    // a NULL, so a zeroed slot is kept after the last entry.
    unsafe {
        slurm_sys::slurm_xrecalloc(
            env.cast::<*mut c_void>(),
            new_len as usize + 1,
            size_of::<*mut c_char>(),
            true,
            false,
            c"gpushare".as_ptr(),
            line!() as i32,
            c"set_env".as_ptr(),
        );
        *(*env).add(len as usize) = xstrdup(&entry);
        *size = new_len;
    }
}

/// Removes every entry of a Slurm environment array (such as
/// `job_desc->spank_job_env`) for which `doomed` says yes, freeing each with
/// Slurm's allocator and closing the gaps; the array keeps a NULL after its
/// last entry. Returns how many were removed.
///
/// # Safety
/// As for [`set_env`].
pub unsafe fn remove_env(
    env: *mut *mut *mut c_char,
    size: *mut u32,
    mut doomed: impl FnMut(&str) -> bool,
) -> usize {
    if env.is_null() || size.is_null() {
        return 0;
    }
    // SAFETY: both pointers valid and exclusively ours (caller's contract).
    let (array, len) = unsafe { (*env, *size) };
    if array.is_null() {
        return 0;
    }
    let mut kept = 0usize;
    for i in 0..len as usize {
        // SAFETY: `i < len` entries are valid (caller's contract).
        let slot = unsafe { array.add(i) };
        // SAFETY: each entry is NULL or a NUL-terminated Slurm string.
        let remove = unsafe { opt_str(*slot) }.is_some_and(|e| doomed(&e));
        if remove {
            // SAFETY: the entry is Slurm-allocated; xfree frees it and NULLs the slot.
            unsafe { slurm_sys::slurm_xfree(slot.cast::<*mut c_void>()) };
        } else {
            // SAFETY: kept <= i < len: both slots are within the array.
            unsafe { *array.add(kept) = *slot };
            kept += 1;
        }
    }
    for i in kept..len as usize {
        // SAFETY: within the array; the entries moved down, so these are stale.
        unsafe { *array.add(i) = std::ptr::null_mut() };
    }
    // SAFETY: `size` valid (caller's contract); kept <= len fits u32.
    unsafe { *size = kept as u32 };
    len as usize - kept
}
