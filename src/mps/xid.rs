//! Fatal XID errors of the NVIDIA driver, read from the kernel log.
//!
//! The driver logs each XID as a kernel message `NVRM: Xid (PCI:0000:3b:00):
//! 79, pid=..., GPU has fallen off the bus.`. Those NVIDIA's XID catalog
//! says need a GPU reset or a node reboot ([`RESET_XIDS`]) set the GPU aside
//! ([`super::health`]): shares placed there would fail, or run on a GPU in
//! an unknown state. The node timer reads the log's records after the last
//! one it saw (a cursor in the state directory, with the boot it belongs
//! to), so each record is read once and a record written while no job
//! starts is still seen within a minute.
//!
//! `/dev/kmsg` gives one record per `read`: `PRIORITY,SEQUENCE,USEC,FLAGS;TEXT`
//! (then continuation lines, which start with a space and are skipped); a
//! record overwritten while being read gives `EPIPE`, and the end gives
//! `EAGAIN` on a non-blocking descriptor.

use std::io::Read;
use std::path::Path;

use super::node::Node;
use super::{health, state_dir};

/// XIDs after which NVIDIA's catalog asks for a GPU reset or a reboot
/// (double-bit ECC, row remapping failure, NVLink error, fallen off the
/// bus, ECC page retirement or row remapping at a high rate, contained and
/// uncontained ECC, GSP errors, unrecovered ECC).
pub const RESET_XIDS: [u32; 10] = [48, 64, 74, 79, 92, 94, 95, 119, 120, 140];

/// Records read at most per look: a log flooded with messages is read over
/// several looks rather than holding up the caller.
pub const MAX_RECORDS: usize = 100_000;

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
    let mut parts = text.trim().split(':');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let device = parts.next()?;
    let device = device.split('.').next()?;
    let device = u32::from_str_radix(device, 16).ok()?;
    parts.next().is_none().then_some((domain, bus, device))
}

/// The sequence number and text of one `/dev/kmsg` record.
pub fn parse_record(record: &str) -> Option<(u64, &str)> {
    let (head, text) = record.split_once(';')?;
    let sequence = head.split(',').nth(1)?.parse().ok()?;
    // Continuation lines (` KEY=value`) follow the first line.
    Some((sequence, text.lines().next().unwrap_or_default()))
}

/// The XID of a kernel message, if it is one.
pub fn parse_xid(sequence: u64, text: &str) -> Option<Xid> {
    let rest = &text[text.find("NVRM: Xid (PCI:")? + "NVRM: Xid (PCI:".len()..];
    let (pci, rest) = rest.split_once(')')?;
    let rest = rest.trim_start_matches(':').trim_start();
    let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(Xid {
        sequence,
        pci: parse_pci(pci)?,
        code: code.parse().ok()?,
        text: text.trim().to_owned(),
    })
}

/// What one look at the kernel log found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Look {
    pub xids: Vec<Xid>,
    /// The last record's sequence number (the next look starts after it).
    pub last: Option<u64>,
}

/// Reads `/dev/kmsg` (or a file of such records) from its start, keeping
/// the XIDs of records after `after`. Needs root (or `CAP_SYSLOG`) on the
/// real device.
pub fn look(path: &Path, after: Option<u64>) -> std::io::Result<Look> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut found = Look::default();
    let mut buf = vec![0u8; 8192];
    let mut pending = String::new();
    for _ in 0..MAX_RECORDS {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // /dev/kmsg: one record per read. A plain file (tests): lines.
                pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                if !pending.ends_with('\n') {
                    continue;
                }
                for line in std::mem::take(&mut pending).lines() {
                    take(line, after, &mut found);
                }
            }
            // A record overwritten while it was read: the next one follows.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    for line in pending.lines() {
        take(line, after, &mut found);
    }
    Ok(found)
}

fn take(line: &str, after: Option<u64>, found: &mut Look) {
    let Some((sequence, text)) = parse_record(line) else {
        return;
    };
    found.last = Some(found.last.map_or(sequence, |l| l.max(sequence)));
    if after.is_some_and(|a| sequence <= a) {
        return;
    }
    if let Some(xid) = parse_xid(sequence, text) {
        found.xids.push(xid);
    }
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

/// The cursor in the state directory: `<boot id> <last sequence read>`.
const CURSOR: &str = "kmsg-cursor";

/// Sets aside the GPUs of `node` that fatal XIDs logged in `kernel_log`
/// since the last look name (the cursor, for this boot); `last_seen` maps
/// their PCI addresses to GPUs, asked only where a fatal XID was found.
/// What happened, one line each, for the admin.
pub fn set_aside_fatal(
    node: &Node,
    kernel_log: &Path,
    last_seen: impl FnOnce() -> Vec<SeenGpu>,
) -> Vec<String> {
    let dir = &node.cfg.state_dir;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_owned();
    let after = std::fs::read_to_string(dir.join(CURSOR))
        .ok()
        .and_then(|t| {
            let (b, seq) = t.trim().split_once(' ')?;
            (b == boot).then(|| seq.parse::<u64>().ok())?
        });
    let look = match look(kernel_log, after) {
        Ok(look) => look,
        Err(e) => return vec![format!("{}: {e}; no XID read", kernel_log.display())],
    };
    let mut said = Vec::new();
    let fatal: Vec<&Xid> = look.xids.iter().filter(|x| x.needs_reset()).collect();
    if !fatal.is_empty() {
        let seen = last_seen();
        for x in fatal {
            let gpu = seen
                .iter()
                .find(|s| s.pci == Some(x.pci))
                .and_then(|s| match s.minor {
                    Some(minor) => node.gpus_of_minors(&[minor]).first().copied(),
                    None => Some(s.index),
                });
            match gpu {
                Some(gpu) => {
                    let reason = format!("XID {} in the kernel log: {}", x.code, x.text);
                    match health::set_aside(dir, gpu, &reason) {
                        Ok(_) => said.push(format!("GPU {gpu} set aside from sharing: {reason}")),
                        Err(e) => {
                            said.push(format!("GPU {gpu}: XID {}, not set aside: {e}", x.code))
                        }
                    }
                }
                None => said.push(format!(
                    "XID {} on PCI {:04x}:{:02x}:{:02x}, which NVML's last figures name no GPU \
                     of this node (none kept before a share started here): {}",
                    x.code, x.pci.0, x.pci.1, x.pci.2, x.text
                )),
            }
        }
    }
    if let Some(last) = look.last {
        if let Err(e) =
            state_dir::replace_file(dir, CURSOR, format!("{boot} {last}\n").as_bytes(), 0o600)
        {
            said.push(format!("the kernel log's cursor not kept: {e}"));
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_and_nvml_addresses_agree() {
        assert_eq!(parse_pci("0000:3b:00"), Some((0, 0x3b, 0)));
        assert_eq!(parse_pci("00000000:3B:00.0"), Some((0, 0x3b, 0)));
        assert_eq!(parse_pci("3b:00"), None);
        assert_eq!(parse_pci("0000:zz:00"), None);
    }

    #[test]
    fn xid_records_are_read_and_others_skipped() {
        let record = "3,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', \
                      name=<unknown>, GPU has fallen off the bus.\n SUBSYSTEM=pci\n";
        let (sequence, text) = parse_record(record).unwrap_or_default();
        assert_eq!(sequence, 1234);
        let xid = parse_xid(sequence, text).unwrap_or_else(|| panic!("no xid in {text}"));
        assert_eq!((xid.pci, xid.code), ((0, 0x3b, 0), 79));
        assert!(xid.needs_reset());
        let benign = parse_xid(
            1,
            "NVRM: Xid (PCI:0000:af:00): 13, pid=4242, name=python, Graphics SM Warp Exception",
        );
        assert!(benign.is_some_and(|x| !x.needs_reset()));
        assert_eq!(parse_xid(2, "usb 1-1: new device"), None);
        assert_eq!(parse_record("no semicolon"), None);
    }

    #[test]
    fn a_look_keeps_only_records_after_the_cursor() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join("kmsg");
        std::fs::write(
            &log,
            "6,10,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
             6,11,2,-;eth0: link up\n\
             6,12,3,-;NVRM: Xid (PCI:0000:af:00): 48, pid=2, DBE (double bit error)\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let all = look(&log, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.xids.len(), 2);
        assert_eq!(all.last, Some(12));
        let after = look(&log, Some(10)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            after.xids.iter().map(|x| x.code).collect::<Vec<_>>(),
            vec![48]
        );
        assert_eq!(look(&log, Some(12)).map(|l| l.xids.len()).ok(), Some(0));
    }

    #[test]
    fn fatal_xids_set_their_gpus_aside_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0", "/dev/nvidia1"]);
        let log = dir.path().join("kmsg");
        std::fs::write(
            &log,
            "6,10,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
             6,11,2,-;NVRM: Xid (PCI:0000:af:00): 48, pid=2, DBE (double bit error)\n\
             6,12,3,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2, Graphics SM Warp Exception\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // NVML's first GPU is /dev/nvidia1: the node's GPU 1.
        let seen = || {
            vec![SeenGpu {
                index: 0,
                minor: Some(1),
                pci: Some((0, 0x3b, 0)),
            }]
        };
        let said = set_aside_fatal(&node, &log, seen);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].starts_with("GPU 1 set aside from sharing: XID 79 in the kernel log"),
            "{said:?}"
        );
        assert!(said[1].starts_with("XID 48 on PCI 0000:af:00, which NVML's last figures"));
        let failed = health::read(&node.cfg.state_dir);
        assert_eq!(failed.keys().copied().collect::<Vec<_>>(), vec![1]);
        // The cursor: the same records are not read twice.
        let again = set_aside_fatal(&node, &log, || panic!("no fatal XID is new"));
        assert!(again.is_empty(), "{again:?}");
    }
}
