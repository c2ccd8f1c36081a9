//! Fatal XID errors of the NVIDIA driver, read from the kernel log.
//!
//! The driver logs each XID as a kernel message `NVRM: Xid (PCI:0000:3b:00):
//! 79, pid=..., GPU has fallen off the bus.` (older drivers leave out the
//! `pid=..., name=...` words). Those NVIDIA's XID catalog says need a GPU
//! reset or a node reboot ([`RESET_XIDS`]) set the GPU aside
//! ([`super::health`]): shares placed there would fail, or run on a GPU in
//! an unknown state. The node timer reads the log's records after the last
//! one it saw (a cursor, with the boot it belongs to, kept where it
//! outlives a reboot: `/var/lib/gpushare/kept-of-<StateDir>`,
//! [`super::kept`]), so each record is read once and a record written
//! while no job starts is still seen within a minute.
//!
//! `/dev/kmsg` gives one record per `read`: `PRIORITY,SEQUENCE,USEC,FLAGS
//! [,MORE];TEXT` (then continuation lines, which start with a space and
//! are skipped); a record overwritten while being read gives `EPIPE`, and
//! the end gives `EAGAIN` on a non-blocking descriptor. The kernel escapes
//! a control character of a record's text as `\xNN`, so a text never
//! holds a second record.
//!
//! **Whose text a record is.** The kernel's text is not the kernel's alone:
//! its segfault line (`show_signal_msg` in `arch/x86/mm/fault.c`, on by
//! default with `debug.exception-trace=1`) starts with the crashing
//! program's name (`comm`, up to 15 characters, any a user chooses) and
//! ends with the file name of the mapping the fault was in, both unescaped:
//! a user's library named `NVRM: Xid (PCI:0000:3b:00): 79, x.so` that
//! crashes writes the driver's words into the log at the kernel's facility,
//! and a program named `NVRM: Xid (PCI:0000:3b:00): 79` (comm `NVRM: Xid
//! (PCI:`) makes the record's text *start* with them
//! (`tests/fixtures/kernel-log/segfault-forged-xid.kmsg`, recorded so). So
//! an XID is the driver's only where
//! - the record's facility is the kernel's (0): PRIORITY is
//!   `facility * 8 + level`, so PRIORITY < 8. A write to `/dev/kmsg` (root's only: the
//!   device is 0644) never gets facility 0: `devkmsg_write` in
//!   `kernel/printk/printk.c` starts from LOG_USER (1) and takes a `<N>`
//!   prefix's facility only where it is not 0, "to be able to reliably
//!   distinguish kernel-generated messages from userspace-injected ones";
//! - the text starts with `NVRM: Xid (PCI:`, where the driver's message
//!   starts, and an address follows it at once, closed by `)`, then `: `
//!   and the code: what a name of 15 characters can start is followed by
//!   the kernel's `[pid]`, never by an address.
//!
//! **Where a look starts.** The first look ever (no cursor: after an
//! install, an upgrade from a release that kept a `kmsg-cursor`, or a new
//! `StateDir`) starts at the log's end: it reads no XID logged before it
//! (this boot's, perhaps long ago and dealt with since), and keeps the
//! cursor. A cursor an earlier release kept in the state directory is taken
//! once and moved to the kept directory. After a reboot (a cursor of
//! another boot) the ring is new and all of its records are this boot's:
//! the look reads it from its start, so an XID logged while the node came
//! up, before the timer's first run, is seen. Otherwise a look reads the
//! records after the cursor. `/dev/kmsg` cannot seek to a sequence number
//! (`SEEK_SET` is the ring's first record, `SEEK_END` after its last,
//! `SEEK_DATA` after the last `syslog` clear:
//! `Documentation/ABI/testing/dev-kmsg`), so a look reads the ring from its
//! start and passes over the records up to the cursor; the ring's size
//! bounds that. A look reads at most [`MAX_RECORDS`] records past the
//! cursor, and the next look goes on from the last one it read. Records
//! overwritten before a look reached them (the cursor older than the ring's
//! first record) are counted and said: an XID among them was missed.
//!
//! **Which GPU.** An XID names a PCI address; NVML's figures the prolog
//! keeps (`<StateDir>/nvml-facts`) name the GPU there. The timer keeps a
//! copy beside the cursor: after a reboot, before any share started, the
//! figures of the boot before name it (a GPU's PCI address is its slot's).

use std::io::Read;
use std::path::Path;

use super::node::Node;
use super::{health, state_dir};

/// XIDs after which NVIDIA's catalog asks for a GPU reset or a reboot
/// (double-bit ECC, row remapping failure, NVLink error, fallen off the
/// bus, ECC page retirement or row remapping at a high rate, contained and
/// uncontained ECC, GSP errors, unrecovered ECC).
pub const RESET_XIDS: [u32; 10] = [48, 64, 74, 79, 92, 94, 95, 119, 120, 140];

/// Records read past the cursor at most per look: a log flooded with
/// messages is read over several looks rather than holding up the caller;
/// the next look goes on after the last record read.
pub const MAX_RECORDS: usize = 100_000;

/// Records up to the cursor passed over at most per look. The kernel's
/// ring bounds them (its largest, 32 MiB, holds about a million records);
/// this bounds a plain file too.
pub const MAX_PASSED: usize = 4 * 1024 * 1024;

/// Where the driver's XID message starts.
pub const XID_PREFIX: &str = "NVRM: Xid (PCI:";

/// A PCI address as the driver and NVML name a GPU: domain, bus, device.
pub type PciAddress = (u32, u32, u32);

/// One XID the driver logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    pub sequence: u64,
    pub pci: PciAddress,
    pub code: u32,
    /// The message, for the reason a GPU is set aside.
    pub text: String,
}

impl Xid {
    /// Whether NVIDIA asks for a reset or reboot after it.
    pub fn needs_reset(&self) -> bool {
        RESET_XIDS.contains(&self.code)
    }
}

/// `0000:3b:00` (the driver's) or `00000000:3B:00.0` (NVML's bus id).
pub fn parse_pci(text: &str) -> Option<PciAddress> {
    let hex = |t: &str| {
        (!t.is_empty() && t.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(t, 16).ok())?
    };
    let mut parts = text.trim().split(':');
    let domain = hex(parts.next()?)?;
    let bus = hex(parts.next()?)?;
    let device = parts.next()?;
    let device = match device.split_once('.') {
        Some((device, function)) => hex(function).and(hex(device))?,
        None => hex(device)?,
    };
    parts.next().is_none().then_some((domain, bus, device))
}

/// One `/dev/kmsg` record's first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The syslog facility: 0 for the kernel's own messages.
    pub facility: u32,
    pub sequence: u64,
    pub text: &'a str,
}

impl Record<'_> {
    /// Whether the kernel logged it (see the module's comment).
    pub fn is_kernels(&self) -> bool {
        self.facility == 0
    }
}

/// A `/dev/kmsg` record: `PRIORITY,SEQUENCE,USEC,FLAGS[,...];TEXT`. A
/// continuation line (` KEY=value`) or a line of no record is `None`.
pub fn parse_record(record: &str) -> Option<Record<'_>> {
    if record.starts_with(' ') {
        return None;
    }
    let (head, text) = record.split_once(';')?;
    let mut fields = head.split(',');
    let priority: u32 = fields.next()?.parse().ok()?;
    let sequence = fields.next()?.parse().ok()?;
    Some(Record {
        facility: priority / 8,
        sequence,
        text: text.lines().next().unwrap_or_default(),
    })
}

/// The XID of a message's text, if it is the driver's XID message: the
/// text starts with [`XID_PREFIX`], a PCI address, `): ` and the code.
pub fn parse_xid(sequence: u64, text: &str) -> Option<Xid> {
    let rest = text.strip_prefix(XID_PREFIX)?;
    let (pci, rest) = rest.split_once(')')?;
    let rest = rest.strip_prefix(':')?.trim_start_matches(' ');
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (code, after) = rest.split_at(digits);
    if !(after.is_empty() || after.starts_with(',')) {
        return None;
    }
    Some(Xid {
        sequence,
        pci: parse_pci(pci)?,
        code: code.parse().ok()?,
        text: text.trim().to_owned(),
    })
}

/// The driver's XID in a record: the kernel's record whose text is the
/// driver's XID message ([`parse_xid`]).
pub fn record_xid(record: &Record<'_>) -> Option<Xid> {
    record
        .is_kernels()
        .then(|| parse_xid(record.sequence, record.text))?
}

/// Whether a record names an XID without being the driver's: a user's
/// text (a crashing program's or library's name, a write to `/dev/kmsg`).
fn forged(record: &Record<'_>) -> bool {
    record.text.contains(XID_PREFIX) && record_xid(record).is_none()
}

/// Where a look starts reading XIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The first look: after the log's last record (none is read for XIDs).
    End,
    /// The ring's first record (a new boot's log).
    Beginning,
    /// The record after this sequence number (the cursor).
    After(u64),
}

/// What one look at the kernel log found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Look {
    pub xids: Vec<Xid>,
    /// The last record read (the next look starts after it).
    pub last: Option<u64>,
    /// Records overwritten before the look reached them.
    pub lost: u64,
    /// Records naming an XID that are not the driver's: how many, and
    /// the first one's text.
    pub forged: (u64, Option<String>),
    /// The look stopped at [`MAX_RECORDS`] (or [`MAX_PASSED`]): more is
    /// left for the next look.
    pub more: bool,
}

impl Look {
    /// Takes one line of the log; `false`: the look is full.
    fn take(&mut self, line: &str, start: Start, counts: &mut (usize, usize)) -> bool {
        let Some(record) = parse_record(line) else {
            return true;
        };
        let seq = record.sequence;
        let passed = match start {
            Start::End => true,
            Start::Beginning => false,
            Start::After(cursor) => seq <= cursor,
        };
        if passed {
            if start == Start::End {
                self.last = Some(seq);
            }
            counts.0 += 1;
            self.more = counts.0 >= MAX_PASSED;
            return !self.more;
        }
        // Each record after the one before it; a gap was overwritten
        // before it could be read.
        let expected = match (self.last, start) {
            (Some(last), _) => last.saturating_add(1),
            (None, Start::After(cursor)) => cursor.saturating_add(1),
            // A new boot's ring: its first record is where it starts.
            (None, _) => seq,
        };
        self.lost += seq.saturating_sub(expected);
        self.last = Some(seq);
        if let Some(xid) = record_xid(&record) {
            self.xids.push(xid);
        } else if forged(&record) {
            self.forged.0 += 1;
            self.forged.1.get_or_insert_with(|| record.text.to_owned());
        }
        counts.1 += 1;
        self.more = counts.1 >= MAX_RECORDS;
        !self.more
    }
}

/// Reads `/dev/kmsg` (or a file of such records) from `start`. Needs root
/// (or `CAP_SYSLOG`) on the real device.
pub fn look(path: &Path, start: Start) -> std::io::Result<Look> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut found = Look::default();
    // Records passed over, records read past the cursor.
    let mut counts = (0, 0);
    let mut buf = vec![0u8; 8192];
    let mut pending = String::new();
    'reading: loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // /dev/kmsg: one record per read. A plain file: lines, the
                // last one perhaps cut by the buffer (kept for the next read).
                pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                let Some(end) = pending.rfind('\n') else {
                    continue;
                };
                let rest = pending.split_off(end + 1);
                for line in std::mem::replace(&mut pending, rest).lines() {
                    if !found.take(line, start, &mut counts) {
                        break 'reading;
                    }
                }
            }
            // A record overwritten while it was read: the next one follows
            // (the gap in sequence numbers counts it lost).
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    if !found.more {
        for line in pending.lines() {
            if !found.take(line, start, &mut counts) {
                break;
            }
        }
    }
    Ok(found)
}

/// Where NVML last saw one of the node's GPUs (the prolog keeps those
/// figures: NVML itself may hang on a GPU in trouble).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenGpu {
    /// NVML's index.
    pub index: u32,
    /// The N of `/dev/nvidiaN`.
    pub minor: Option<u32>,
    pub pci: Option<PciAddress>,
}

/// The cursor, in the kept directory: `<boot id> <last sequence read>`,
/// or `<boot id> -` where a first look found the log empty (the next look
/// reads it from its start).
pub const CURSOR: &str = "xid-cursor";

/// The cursor of releases that read every record holding the driver's
/// words as an XID, and could stop at [`MAX_RECORDS`] for good: not
/// trusted (the first look after the upgrade starts at the log's end),
/// and removed once the new one is kept.
const OLD_CURSOR: &str = "kmsg-cursor";

/// The copy of NVML's figures kept beside the cursor (the prolog's
/// `<StateDir>/nvml-facts`, [`super::gpu_devices::KEPT_FACTS`]): what
/// names an XID's GPU after a reboot, before a share started.
pub const KEPT_FIGURES: &str = super::gpu_devices::KEPT_FACTS;

/// A cursor: its boot, and the last record read (`None`: none yet).
pub type Cursor = (String, Option<u64>);

/// The cursor kept in `dir` (`None`: none, or none that reads).
fn read_cursor(dir: &Path) -> Option<Cursor> {
    let text = std::fs::read_to_string(dir.join(CURSOR)).ok()?;
    let (boot, seq) = text.trim().split_once(' ')?;
    let seq = match seq {
        "-" => None,
        seq => Some(seq.parse().ok()?),
    };
    Some((boot.to_owned(), seq))
}

/// Where this boot's look starts, from the cursor kept.
pub fn start_of(cursor: Option<Cursor>, boot: &str) -> Start {
    match cursor {
        None => Start::End,
        Some((b, Some(seq))) if b == boot => Start::After(seq),
        Some(_) => Start::Beginning,
    }
}

/// Where a look keeps what outlives a boot ([`super::kept::KEPT_ROOT`] on
/// a node), and which boot this is.
#[derive(Debug, Clone, Copy)]
pub struct Keeping<'a> {
    pub root: &'a Path,
    pub boot: &'a str,
}

/// Sets aside the GPUs of `node` that fatal XIDs logged in `kernel_log`
/// since the last look name (see the module's comment for where a look
/// starts), the cursor kept under [`super::kept::KEPT_ROOT`];
/// `last_seen(dir)` reads the NVML figures kept in `dir` to map their PCI
/// addresses to GPUs, asked only where a fatal XID was found. What
/// happened, one line each, for the admin.
pub fn set_aside_fatal(
    node: &Node,
    kernel_log: &Path,
    last_seen: impl Fn(&Path) -> Vec<SeenGpu>,
) -> Vec<String> {
    let boot = super::kept::this_boot();
    let root = Path::new(super::kept::KEPT_ROOT);
    set_aside_fatal_in(node, kernel_log, Keeping { root, boot: &boot }, last_seen)
}

/// [`set_aside_fatal`], what outlives a boot kept as `keeping` says.
pub fn set_aside_fatal_in(
    node: &Node,
    kernel_log: &Path,
    keeping: Keeping<'_>,
    last_seen: impl Fn(&Path) -> Vec<SeenGpu>,
) -> Vec<String> {
    let state = &node.cfg.state_dir;
    let kept = super::kept::ensure(keeping.root, state, node.owner);
    // The kept cursor; else one an earlier release kept in the state
    // directory (taken once), or the one kept there where the kept
    // directory could not be made.
    let cursor = kept
        .as_ref()
        .ok()
        .and_then(|k| read_cursor(k))
        .or_else(|| read_cursor(state));
    let boot = keeping.boot;
    let start = start_of(cursor, boot);
    let look = match look(kernel_log, start) {
        Ok(look) => look,
        Err(e) => return vec![format!("{}: {e}; no XID read", kernel_log.display())],
    };
    let mut said = Vec::new();
    let log = kernel_log.display();
    if start == Start::End {
        let place = kept.as_ref().unwrap_or(state);
        said.push(format!(
            "{log}: first look (no cursor in {}): read from the log's end, no XID logged \
             before now is read",
            place.display()
        ));
    }
    said.extend(look_notes(&log.to_string(), &look));
    let fatal: Vec<&Xid> = look.xids.iter().filter(|x| x.needs_reset()).collect();
    if !fatal.is_empty() {
        let seen = match last_seen(state) {
            seen if !seen.is_empty() => seen,
            _ => kept.as_ref().map(|k| last_seen(k)).unwrap_or_default(),
        };
        said.extend(fatal.iter().map(|x| set_aside_one(node, &seen, x)));
    }
    if let Ok(k) = &kept {
        if let Err(e) = keep_figures(state, k) {
            said.push(format!("NVML's figures not kept for after a reboot: {e}"));
        }
    }
    // The cursor moves where a record was read; a first look at an empty
    // log keeps one that reads the log from its start next time.
    let seq = match (look.last, start) {
        (Some(last), _) => last.to_string(),
        (None, Start::End) => "-".to_owned(),
        (None, _) => return said,
    };
    let text = format!("{boot} {seq}\n");
    let kept_cursor = kept.and_then(|k| {
        state_dir::replace_file(&k, CURSOR, text.as_bytes(), 0o600)
            .map_err(|e| format!("{}: {e}", k.display()))
    });
    match kept_cursor {
        Ok(()) => {
            for old in [CURSOR, OLD_CURSOR] {
                let _ = std::fs::remove_file(state.join(old));
            }
        }
        // Kept in the state directory rather than not at all: the next
        // look of this boot goes on from it.
        Err(e) => match state_dir::replace_file(state, CURSOR, text.as_bytes(), 0o600) {
            Ok(()) => said.push(format!(
                "the kernel log's cursor kept in {} (lost at a reboot, when an XID logged \
                 before the timer's first run is missed): {e}",
                state.display()
            )),
            Err(e2) => said.push(format!("the kernel log's cursor not kept: {e}; {e2}")),
        },
    }
    said
}

/// What a look says of itself: records lost, forged, more to read.
fn look_notes(log: &str, look: &Look) -> Vec<String> {
    let mut said = Vec::new();
    if look.lost > 0 {
        said.push(format!(
            "{log}: {} records were overwritten before they could be read: an XID among \
             them was missed (check `dmesg` or the journal)",
            look.lost
        ));
    }
    if let (n, Some(first)) = &look.forged {
        said.push(format!(
            "{log}: {n} record(s) name an XID but are not the driver's (a user's text: a \
             crashing program's or library's name, or a write to /dev/kmsg), ignored; the \
             first: {first}"
        ));
    }
    if look.more {
        said.push(format!(
            "{log}: more records than one look reads; the next look goes on from here"
        ));
    }
    said
}

/// Sets aside the GPU that NVML's figures `seen` name at fatal XID `x`'s
/// address: what happened, in a line.
fn set_aside_one(node: &Node, seen: &[SeenGpu], x: &Xid) -> String {
    let gpu = seen
        .iter()
        .find(|s| s.pci == Some(x.pci))
        .and_then(|s| match s.minor {
            Some(minor) => node.gpus_of_minors(&[minor]).first().copied(),
            None => Some(s.index),
        });
    let Some(gpu) = gpu else {
        return format!(
            "XID {} on PCI {:04x}:{:02x}:{:02x}, which NVML's last figures name no GPU of \
             this node (none kept before a share started here): {}",
            x.code, x.pci.0, x.pci.1, x.pci.2, x.text
        );
    };
    let reason = format!("XID {} in the kernel log: {}", x.code, x.text);
    match health::set_aside(&node.cfg.state_dir, gpu, &reason, Default::default()) {
        Ok(_) => format!("GPU {gpu} set aside from sharing: {reason}"),
        Err(e) => format!("GPU {gpu}: XID {}, not set aside: {e}", x.code),
    }
}

/// Copies NVML's figures the prolog kept in `state` into `kept`, where
/// they differ.
fn keep_figures(state: &Path, kept: &Path) -> Result<(), String> {
    let Ok(figures) = std::fs::read(state.join(KEPT_FIGURES)) else {
        return Ok(());
    };
    if std::fs::read(kept.join(KEPT_FIGURES)).ok().as_ref() == Some(&figures) {
        return Ok(());
    }
    state_dir::replace_file(kept, KEPT_FIGURES, &figures, 0o600).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
