//! Who may reach a GPU's MPS pipes: a POSIX access ACL on its directory.
//!
//! An MPS server runs outside the job's cgroup, so the device rules that
//! keep a job off other GPUs do not stop a client from asking another
//! GPU's daemon for a server, by pointing `CUDA_MPS_PIPE_DIRECTORY` at that
//! GPU's pipes. Each `<StateDir>-mps/gpu<N>` is therefore traversable only
//! by root and the users with a share on GPU N: owner `rwx`, one `--x`
//! entry per such user, nothing for group and others (mode 0710 with the
//! mask). The prolog and epilog rewrite it under the GPU's daemon lock
//! whenever the GPU's users change.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const ACL_XATTR: &[u8] = b"system.posix_acl_access\0";
const VERSION: u32 = 2;
const UNDEFINED: u32 = u32::MAX;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// The xattr value (Linux's `posix_acl_xattr` layout, little-endian):
/// entries in tag order, named users by uid.
pub fn encode(uids: &[u32]) -> Vec<u8> {
    let mut sorted = uids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = VERSION.to_le_bytes().to_vec();
    let mut entry = |tag: u16, perm: u16, id: u32| {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    };
    entry(USER_OBJ, 7, UNDEFINED);
    for &uid in &sorted {
        entry(USER, 1, uid);
    }
    entry(GROUP_OBJ, 0, UNDEFINED);
    if !sorted.is_empty() {
        entry(MASK, 1, UNDEFINED);
    }
    entry(OTHER, 0, UNDEFINED);
    out
}

/// Lets root and `uids` (and nobody else) traverse `dir`.
pub fn allow_traverse(dir: &Path, uids: &[u32]) -> io::Result<()> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let value = encode(uids);
    // SAFETY: path and the attribute name are NUL-terminated; value is a
    // live buffer of value.len() bytes; setxattr only reads them.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            ACL_XATTR.as_ptr().cast(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_acl_names_each_user_once_in_order() {
        let acl = encode(&[1002, 1001, 1002]);
        // header + user_obj + 2 users + group_obj + mask + other
        assert_eq!(acl.len(), 4 + 6 * 8);
        let ids: Vec<u32> = acl[4..]
            .chunks(8)
            .map(|e| u32::from_le_bytes([e[4], e[5], e[6], e[7]]))
            .collect();
        assert_eq!(
            ids,
            vec![UNDEFINED, 1001, 1002, UNDEFINED, UNDEFINED, UNDEFINED]
        );
        // No named user: the three base entries, no mask.
        assert_eq!(encode(&[]).len(), 4 + 3 * 8);
    }

    #[test]
    fn the_directory_mode_follows_the_acl() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        match allow_traverse(dir.path(), &[65534]) {
            Ok(()) => {
                let mode = std::fs::metadata(dir.path())
                    .map(|m| m.permissions().mode() & 0o777)
                    .unwrap_or(0);
                assert_eq!(mode, 0o710);
                allow_traverse(dir.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
                let mode = std::fs::metadata(dir.path())
                    .map(|m| m.permissions().mode() & 0o777)
                    .unwrap_or(0);
                assert_eq!(mode, 0o700);
            }
            // A filesystem without POSIX ACLs: nothing to check here.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => panic!("{e}"),
        }
    }
}
