//! What the stand-in reads and writes beside itself: the node's GPUs, each
//! GPU's compute mode and daemon, the fault files, `cuda.log`.

use std::ffi::{CStr, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::model::{self, Gpu, Mode};
use crate::mps_world;

/// The directory the library was loaded from (where the harness installed
/// it, beside the stand-in `nvidia-smi` and control program).
pub fn here() -> &'static Path {
    static HERE: OnceLock<PathBuf> = OnceLock::new();
    HERE.get_or_init(|| {
        own_path()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("."))
    })
}

fn own_path() -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data (pointers and nulls), all-zero is a
    // valid value of it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let address = here as fn() -> &'static Path as *const libc::c_void;
    // SAFETY: dladdr only reads the address and fills `info`, which lives
    // across the call.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr answered a NUL-terminated name the loader keeps for
    // as long as the library stays loaded (longer than this copy).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

/// Whether the fault file `name` is there.
pub fn fault(name: &str) -> bool {
    here().join(name).exists()
}

/// The GPUs `cuda-gpus` lists (empty: no such file).
pub fn listed_gpus() -> std::collections::BTreeMap<u32, Gpu> {
    model::gpus(&fs::read_to_string(here().join("cuda-gpus")).unwrap_or_default())
}

/// GPU `index`: as `cuda-gpus` lists it; `None` where the file lists others
/// only; [`model::DEFAULT_GPU`] where there is no such file.
pub fn gpu(index: u32) -> Option<Gpu> {
    let listed = listed_gpus();
    if listed.is_empty() {
        return Some(model::DEFAULT_GPU);
    }
    listed.get(&index).copied()
}

/// GPU `index`'s compute mode file, as the stand-in `nvidia-smi` writes it.
fn mode_file(index: u32) -> PathBuf {
    here().join(format!("compute-mode-{index}"))
}

pub fn mode(index: u32) -> Mode {
    model::mode(fs::read_to_string(mode_file(index)).ok().as_deref())
}

/// Whether the pid in the file `path` is a live process.
pub fn names_live_process(path: &Path) -> bool {
    fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .is_some_and(mps_world::alive)
}

/// Whether GPU `index` has a live MPS server (see [`mps_world`]).
pub fn server_runs(index: u32) -> bool {
    mps_world::server_on(here(), index).is_some()
}

/// The directory MPS clients register in ([`mps_world::CLIENTS`]).
pub fn clients_dir() -> PathBuf {
    here().join(mps_world::CLIENTS)
}

/// The stand-in control program beside the library, which also serves as
/// a server's process; `None` where it is not there.
pub fn control_program() -> Option<PathBuf> {
    let path = here().join("nvidia-cuda-mps-control");
    path.exists().then_some(path)
}

/// GPU `index`'s lock in the clients' directory, held while a client
/// looks for its server and starts one (`None` where it cannot be had:
/// no directory).
pub fn clients_lock(index: u32) -> Option<File> {
    let path = clients_dir().join(format!("{index}.lock"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .or_else(|_| File::open(&path))
        .ok()?;
    // SAFETY: flock on a descriptor `file` keeps open across the call.
    (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0).then_some(file)
}

/// The GPU held by this process outside MPS, as the stand-in
/// `cuda-client` holds it: an exclusive lock on its `compute-mode-N` file.
/// `Err(())` where another process holds it; `Ok(None)` where there is no
/// such file (a GPU in Default mode, never held).
pub fn hold(index: u32) -> Result<Option<File>, ()> {
    let Ok(file) = File::open(mode_file(index)) else {
        return Ok(None);
    };
    // SAFETY: flock on a descriptor `file` keeps open across the call.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked == 0 {
        Ok(Some(file))
    } else {
        Err(())
    }
}

/// One line appended to `cuda.log` (one write: lines of processes side by
/// side never mix). The harness makes the file writable for the
/// unprivileged probe; where it cannot be written the line is lost.
pub fn log(line: &str) {
    if let Ok(mut f) = OpenOptions::new()
        .append(true)
        .create(true)
        .open(here().join("cuda.log"))
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The caller's real uid, for the log.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}
