//! `gpushare-man DIR`: writes gpushare's manual pages (`DIR/man1`, `man5`,
//! `man8`) and shell completions (`DIR/completions/{bash,zsh,fish}`), made
//! from the commands' own definitions (`gpushare_admin::manual`).
//! `make build` runs it into the build's `man/` directory, which
//! `make install` and the packages install from.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;

use gpushare_admin::manual;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: gpushare-man DIR");
        return ExitCode::from(2);
    };
    match write(Path::new(&dir)) {
        Ok(n) => {
            println!("gpushare-man: {n} files in {}", Path::new(&dir).display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpushare-man: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(dir: &Path) -> std::io::Result<usize> {
    let mut files = manual::pages()?;
    files.extend(manual::completions());
    for f in &files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.text)?;
    }
    Ok(files.len())
}
