//! Just enough ELF64 reading to find and rewrite an exported data symbol.
//!
//! Used to make a copy of a built plugin whose `plugin_version` differs from
//! the installed Slurm, proving that slurmctld refuses it loudly.

use crate::Result;

fn u16_at(b: &[u8], off: usize) -> Result<u16> {
    b.get(off..off + 2)
        .and_then(|s| s.try_into().ok())
        .map(u16::from_le_bytes)
        .ok_or_else(|| format!("ELF truncated at {off}"))
}

fn u32_at(b: &[u8], off: usize) -> Result<u32> {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| format!("ELF truncated at {off}"))
}

fn u64_at(b: &[u8], off: usize) -> Result<usize> {
    b.get(off..off + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| format!("ELF truncated at {off}"))
}

struct Section {
    kind: u32,
    addr: usize,
    offset: usize,
    size: usize,
    link: usize,
}

fn sections(b: &[u8]) -> Result<Vec<Section>> {
    if b.get(0..4) != Some(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file".into());
    }
    let shoff = u64_at(b, 0x28)?;
    let shentsize = usize::from(u16_at(b, 0x3a)?);
    let shnum = usize::from(u16_at(b, 0x3c)?);
    (0..shnum)
        .map(|i| {
            let h = shoff + i * shentsize;
            Ok(Section {
                kind: u32_at(b, h + 4)?,
                addr: u64_at(b, h + 16)?,
                offset: u64_at(b, h + 24)?,
                size: u64_at(b, h + 32)?,
                link: u32_at(b, h + 40)? as usize,
            })
        })
        .collect()
}

/// File offset of the data of dynamic symbol `name`.
pub fn symbol_file_offset(b: &[u8], name: &str) -> Result<usize> {
    const SHT_DYNSYM: u32 = 11;
    let secs = sections(b)?;
    let dynsym = secs
        .iter()
        .find(|s| s.kind == SHT_DYNSYM)
        .ok_or("no .dynsym")?;
    let strtab = secs.get(dynsym.link).ok_or("bad .dynsym link")?;
    for i in 0..dynsym.size / 24 {
        let e = dynsym.offset + i * 24;
        let name_off = strtab.offset + u32_at(b, e)? as usize;
        let end = b
            .get(name_off..)
            .and_then(|s| s.iter().position(|&c| c == 0))
            .ok_or("bad symbol name")?;
        if &b[name_off..name_off + end] != name.as_bytes() {
            continue;
        }
        let shndx = usize::from(u16_at(b, e + 6)?);
        let value = u64_at(b, e + 8)?;
        let sec = secs.get(shndx).ok_or("symbol in a bad section")?;
        return Ok(value - sec.addr + sec.offset);
    }
    Err(format!("no dynamic symbol {name}"))
}

/// Rewrites the `u32` value of exported symbol `name` in an ELF image.
pub fn patch_u32(b: &mut [u8], name: &str, value: u32) -> Result<u32> {
    let off = symbol_file_offset(b, name)?;
    let old = u32_at(b, off)?;
    b[off..off + 4].copy_from_slice(&value.to_le_bytes());
    Ok(old)
}
