use super::*;

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{e}"));
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
}

fn looked(path: &Path, start: Start) -> Look {
    look(path, start).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn xid_of(line: &str) -> Option<Xid> {
    record_xid(&parse_record(line)?)
}

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kernel-log/segfault-forged-xid.kmsg"
);

#[test]
fn driver_and_nvml_addresses_agree() {
    assert_eq!(parse_pci("0000:3b:00"), Some((0, 0x3b, 0)));
    assert_eq!(parse_pci("00000000:3B:00.0"), Some((0, 0x3b, 0)));
    assert_eq!(parse_pci("3b:00"), None);
    assert_eq!(parse_pci("0000:zz:00"), None);
    assert_eq!(parse_pci("0000:+3b:00"), None);
    assert_eq!(parse_pci("0000:3b:00.x"), None);
}

#[test]
fn the_drivers_xid_records_are_read_and_others_skipped() {
    let record = "3,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', \
                  name=<unknown>, GPU has fallen off the bus.\n SUBSYSTEM=pci\n";
    let xid = xid_of(record).unwrap_or_else(|| panic!("no xid in {record}"));
    assert_eq!((xid.sequence, xid.pci, xid.code), (1234, (0, 0x3b, 0), 79));
    assert!(xid.needs_reset());
    // The driver's lines as logged by its releases: without pid and name,
    // at any level, and with the caller field CONFIG_PRINTK_CALLER adds.
    for line in [
        "4,7,1,-;NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.",
        "6,7,1,-,caller=T0;NVRM: Xid (PCI:0000:44:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
        "0,7,1,c;NVRM: Xid (PCI:0000:44:00): 79",
    ] {
        let xid = xid_of(line).unwrap_or_else(|| panic!("no xid in {line}"));
        assert_eq!((xid.pci, xid.code), ((0, 0x44, 0), 79), "{line}");
    }
    let benign = xid_of(
        "4,1,1,-;NVRM: Xid (PCI:0000:af:00): 13, pid=4242, name=python, Graphics SM Warp Exception",
    );
    assert!(benign.is_some_and(|x| !x.needs_reset()));
    assert_eq!(xid_of("6,2,1,-;usb 1-1: new device"), None);
    assert_eq!(parse_record("no semicolon"), None);
    assert_eq!(parse_record(" SUBSYSTEM=pci;x,1"), None);
    assert_eq!(parse_record("# header, 1;"), None);
}

/// The words anywhere but at the start, or not followed by an address and
/// a code, are no XID of the driver's.
#[test]
fn only_a_text_that_starts_as_the_drivers_is_an_xid() {
    for text in [
        "a.out[1234]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:3b:00): 79, x.so[7f00+1000]",
        " NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:[1234]: segfault at 0 ip 0 sp 0 error 6 in NVRM: Xid (PCI:0000:3b:00): 79, x.so[1102,7f00+1000]",
        "NVRM: Xid (PCI:0000:3b:00) 79, no colon",
        "NVRM: Xid (PCI:0000:3b:00): 79x, a code run on",
        "NVRM: Xid (PCI:0000:3b:00): , no code",
    ] {
        assert_eq!(parse_xid(1, text), None, "{text}");
    }
}

/// A record of any facility but the kernel's is no XID: `/dev/kmsg`
/// writes get LOG_USER (priority 8 + level) or the facility they name,
/// never the kernel's.
#[test]
fn records_of_other_facilities_are_no_xid() {
    let text = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.";
    for priority in [8, 12, 14, 30, 191] {
        assert_eq!(
            xid_of(&format!("{priority},5,1,-;{text}")),
            None,
            "{priority}"
        );
    }
    for priority in 0..8 {
        assert!(
            xid_of(&format!("{priority},5,1,-;{text}")).is_some(),
            "{priority}"
        );
    }
}

/// The kernel's own segfault lines, recorded as a user's crashing program
/// made them: at the kernel's facility, one starting with the driver's
/// words. Neither is an XID, and both are counted as forged.
#[test]
fn the_recorded_segfault_lines_are_no_xid() {
    let text = std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| panic!("{FIXTURE}: {e}"));
    let records: Vec<Record<'_>> = text.lines().filter_map(parse_record).collect();
    assert_eq!(records.len(), 5);
    assert!(records.iter().all(Record::is_kernels));
    let starts = records.iter().filter(|r| r.text.starts_with(XID_PREFIX));
    assert_eq!(starts.map(|r| r.sequence).collect::<Vec<_>>(), vec![346]);
    assert!(records.iter().all(|r| record_xid(r).is_none()));
    let found = looked(Path::new(FIXTURE), Start::After(342));
    assert!(found.xids.is_empty(), "{found:?}");
    assert_eq!(found.forged.0, 2);
    assert!(found
        .forged
        .1
        .is_some_and(|t| t.starts_with("crash[25017]: segfault")));
    assert_eq!((found.last, found.lost, found.more), (Some(347), 0, false));
}

#[test]
fn a_look_keeps_only_records_after_the_cursor_and_counts_the_lost() {
    let dir = temp();
    let log = dir.path().join("kmsg");
    write(
        &log,
        "6,10,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
         6,11,2,-;eth0: link up\n\
         6,12,3,-;NVRM: Xid (PCI:0000:af:00): 48, pid=2, DBE (double bit error)\n",
    );
    let all = looked(&log, Start::Beginning);
    assert_eq!((all.xids.len(), all.last, all.lost), (2, Some(12), 0));
    let after = looked(&log, Start::After(10));
    assert_eq!(
        after.xids.iter().map(|x| x.code).collect::<Vec<_>>(),
        vec![48]
    );
    let none = looked(&log, Start::After(12));
    assert_eq!((none.xids.len(), none.last), (0, None));
    // The first look: nothing read for XIDs, the last record kept.
    let end = looked(&log, Start::End);
    assert_eq!((end.xids.len(), end.last, end.lost), (0, Some(12), 0));
    // Records 6 to 9 were overwritten before this look.
    let behind = looked(&log, Start::After(5));
    assert_eq!((behind.xids.len(), behind.lost), (2, 4));
}

/// A look stops after `MAX_RECORDS` records past the cursor; the next one
/// goes on from the last record read, and reaches the XID behind them.
#[test]
fn a_look_stopped_at_max_records_goes_on_from_there() {
    let dir = temp();
    let log = dir.path().join("kmsg");
    let mut text: String = (1..=MAX_RECORDS + 10)
        .map(|seq| format!("6,{seq},{seq},-;noise {seq}\n"))
        .collect();
    let xid_seq = MAX_RECORDS + 11;
    text.push_str(&format!(
        "3,{xid_seq},1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    ));
    write(&log, &text);
    let first = looked(&log, Start::After(0));
    assert!(first.more && first.xids.is_empty());
    assert_eq!(first.last, Some(MAX_RECORDS as u64));
    let mut cursor = first.last.unwrap_or_default();
    let mut found = Vec::new();
    for _ in 0..3 {
        let next = looked(&log, Start::After(cursor));
        found.extend(next.xids);
        match next.last {
            Some(last) => cursor = last,
            None => break,
        }
    }
    assert_eq!(
        found.iter().map(|x| x.sequence).collect::<Vec<_>>(),
        vec![xid_seq as u64]
    );
}

/// This boot's id in the tests (the kernel's is never read here).
const BOOT: &str = "boot-1";

/// Where the tests' node keeps what outlives a boot.
fn kept_root(node: &Node) -> std::path::PathBuf {
    node.cfg.state_dir.with_file_name("var-lib-gpushare")
}

fn kept_dir(node: &Node) -> std::path::PathBuf {
    crate::mps::kept::kept_dir(&kept_root(node), &node.cfg.state_dir)
}

/// One look of the node timer on boot `boot`.
fn fatal_at(
    node: &Node,
    log: &Path,
    boot: &str,
    last_seen: impl Fn(&Path) -> Vec<SeenGpu>,
) -> Vec<String> {
    let root = kept_root(node);
    set_aside_fatal_in(node, log, Keeping { root: &root, boot }, last_seen)
}

/// One look of the node timer on boot [`BOOT`].
fn fatal(node: &Node, log: &Path, last_seen: impl Fn(&Path) -> Vec<SeenGpu>) -> Vec<String> {
    fatal_at(node, log, BOOT, last_seen)
}

fn none_read(_: &Path) -> Vec<SeenGpu> {
    panic!("no fatal XID is read")
}

fn cursor(node: &Node) -> String {
    std::fs::read_to_string(kept_dir(node).join(CURSOR)).unwrap_or_default()
}

const FATAL_3B: &str = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.";

fn seen_3b(_: &Path) -> Vec<SeenGpu> {
    vec![SeenGpu {
        index: 0,
        minor: Some(0),
        pci: Some((0, 0x3b, 0)),
    }]
}

/// The first look (no cursor, or only the cursor of an earlier release)
/// reads no XID logged before it, and keeps the cursor: the next look
/// reads what came after. An empty log's first look reads it all next.
#[test]
fn a_first_look_reads_from_the_logs_end() {
    let dir = temp();
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0", "/dev/nvidia1"]);
    let state = &node.cfg.state_dir;
    let log = dir.path().join("kmsg");
    write(
        &log,
        &format!("3,20,1,-;{FATAL_3B}\n6,21,2,-;eth0: link up\n"),
    );
    write(&state.join(OLD_CURSOR), &format!("{BOOT} 5\n"));
    let said = fatal(&node, &log, none_read);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("first look"), "{said:?}");
    assert!(health::read(state).is_empty());
    assert_eq!(cursor(&node), format!("{BOOT} 21\n"));
    assert!(!state.join(OLD_CURSOR).exists());
    assert!(!state.join(CURSOR).exists());
    append(&log, &format!("3,22,3,-;{FATAL_3B}\n"));
    let said = fatal(&node, &log, seen_3b);
    assert_eq!(
        said,
        vec![format!(
            "GPU 0 set aside from sharing: XID 79 in the kernel log: {FATAL_3B}"
        )]
    );
    assert_eq!(cursor(&node), format!("{BOOT} 22\n"));

    let dir = temp();
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0"]);
    let log = dir.path().join("kmsg");
    write(&log, "");
    fatal(&node, &log, none_read);
    assert_eq!(cursor(&node), format!("{BOOT} -\n"));
    write(&log, &format!("3,0,1,-;{FATAL_3B}\n"));
    let said = fatal(&node, &log, seen_3b);
    assert!(said[0].starts_with("GPU 0 set aside"), "{said:?}");
}

/// A cursor of another boot: the ring is this boot's, read from its start
/// (its sequence numbers start again below the cursor's).
#[test]
fn after_a_reboot_the_new_ring_is_read_from_its_start() {
    assert_eq!(start_of(None, "b"), Start::End);
    assert_eq!(start_of(Some(("b".into(), Some(7))), "b"), Start::After(7));
    assert_eq!(start_of(Some(("a".into(), Some(7))), "b"), Start::Beginning);
    assert_eq!(start_of(Some(("b".into(), None)), "b"), Start::Beginning);
    let dir = temp();
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0"]);
    let log = dir.path().join("kmsg");
    write(
        &log,
        &format!("6,0,1,-;Linux version\n3,1,2,-;{FATAL_3B}\n"),
    );
    let kept = crate::mps::kept::ensure(&kept_root(&node), &node.cfg.state_dir, node.owner)
        .unwrap_or_else(|e| panic!("{e}"));
    write(&kept.join(CURSOR), "an-earlier-boot 900\n");
    let said = fatal(&node, &log, seen_3b);
    assert!(
        said.len() == 1 && said[0].starts_with("GPU 0 set aside"),
        "{said:?}"
    );
    assert_eq!(cursor(&node), format!("{BOOT} 1\n"));
}

/// The cursor outlives the state directory (tmpfs, emptied at each boot):
/// after a reboot the new boot's XID logged before the first look is
/// read, its GPU named by the figures kept from the boot before; without
/// a reboot, nothing is read twice. A cursor an earlier release kept in
/// the state directory is taken once, and moved.
#[test]
fn the_cursor_outlives_a_wiped_state_directory() {
    let dir = temp();
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0"]);
    let state = node.cfg.state_dir.clone();
    let log = dir.path().join("kmsg");
    write(&log, "6,0,1,-;Linux version\n6,1,2,-;eth0: link up\n");
    let facts = "0 0 81559 0 0 00000000:3B:00.0\n";
    write(&state.join(KEPT_FIGURES), facts);
    // An earlier release's cursor in the state directory, this boot's.
    write(&state.join(CURSOR), &format!("{BOOT} 0\n"));
    let said = fatal(&node, &log, none_read);
    assert!(said.is_empty(), "{said:?}");
    assert_eq!(cursor(&node), format!("{BOOT} 1\n"));
    assert!(!state.join(CURSOR).exists());
    let kept_facts = std::fs::read_to_string(kept_dir(&node).join(KEPT_FIGURES));
    assert_eq!(kept_facts.ok().as_deref(), Some(facts));

    // The state directory emptied within the boot: nothing read twice.
    std::fs::remove_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    append(&log, &format!("3,2,3,-;{FATAL_3B}\n"));
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0"]);
    let kept = kept_dir(&node);
    let figures_kept = |at: &Path| if at == kept { seen_3b(at) } else { Vec::new() };
    let said = fatal(&node, &log, figures_kept);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("GPU 0 set aside"), "{said:?}");
    assert!(fatal(&node, &log, none_read).is_empty());

    // A reboot: /run emptied, a new ring whose XID was logged before the
    // first look; no share has started (no figures in the state directory).
    std::fs::remove_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    write(
        &log,
        "6,0,1,-;Linux version\n\
         3,1,2,-;NVRM: Xid (PCI:0000:3b:00): 94, pid=1, Contained ECC error.\n",
    );
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0"]);
    let said = fatal_at(&node, &log, "boot-2", figures_kept);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("GPU 0 set aside from sharing: XID 94"),
        "{said:?}"
    );
    assert_eq!(cursor(&node), "boot-2 1\n");
}

/// The recorded segfault lines and a user-facility copy of the driver's
/// line set no GPU aside; the admin is told they were ignored.
#[test]
fn forged_records_set_no_gpu_aside() {
    let dir = temp();
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0"]);
    let log = dir.path().join("kmsg");
    write(&log, "6,342,1,-;Linux version\n");
    assert_eq!(fatal(&node, &log, none_read).len(), 1);
    let fixture = std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| panic!("{e}"));
    append(&log, &fixture);
    append(&log, &format!("12,348,1,-;{FATAL_3B}\n"));
    let said = fatal(&node, &log, none_read);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("3 record(s) name an XID but are not the driver's"),
        "{said:?}"
    );
    assert!(health::read(&node.cfg.state_dir).is_empty());
}

#[test]
fn fatal_xids_set_their_gpus_aside_once() {
    let dir = temp();
    let node = crate::mps::node::test_node(dir.path(), &["/dev/nvidia0", "/dev/nvidia1"]);
    let log = dir.path().join("kmsg");
    let kept = crate::mps::kept::ensure(&kept_root(&node), &node.cfg.state_dir, node.owner)
        .unwrap_or_else(|e| panic!("{e}"));
    write(&kept.join(CURSOR), &format!("{BOOT} 9\n"));
    write(
        &log,
        "6,10,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
         6,11,2,-;NVRM: Xid (PCI:0000:af:00): 48, pid=2, DBE (double bit error)\n\
         6,12,3,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2, Graphics SM Warp Exception\n",
    );
    // NVML's first GPU is /dev/nvidia1: the node's GPU 1.
    let seen = |_: &Path| {
        vec![SeenGpu {
            index: 0,
            minor: Some(1),
            pci: Some((0, 0x3b, 0)),
        }]
    };
    let said = fatal(&node, &log, seen);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].starts_with("GPU 1 set aside from sharing: XID 79 in the kernel log"),
        "{said:?}"
    );
    assert!(said[1].starts_with("XID 48 on PCI 0000:af:00, which NVML's last figures"));
    let failed = health::read(&node.cfg.state_dir);
    assert_eq!(failed.keys().copied().collect::<Vec<_>>(), vec![1]);
    // The cursor: the same records are not read twice.
    let again = fatal(&node, &log, none_read);
    assert!(again.is_empty(), "{again:?}");
}
