//! `gpushare-man DIR [LIBEXECDIR PLUGINDIR SYSCONFDIR]`: writes gpushare's
//! manual pages (`DIR/man1`, `man5`, `man8`) and shell completions
//! (`DIR/completions/{bash,zsh,fish}`), made from the commands' own
//! definitions (`gpushare_admin::manual`); given the install's paths, also
//! the example GPU node setups (`DIR/examples`), made by the function
//! `gpu-mps config` prints with. `make build` runs it into the build's
//! `man/` directory; `make install` runs it with the paths it installs to.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use gpushare::shared::exit_status::man as exit;
use gpushare_admin::manual::{self, InstalledPaths};

const USAGE: &str = "usage: gpushare-man DIR [LIBEXECDIR PLUGINDIR SYSCONFDIR]";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (dir, paths) = match args.as_slice() {
        [dir] => (dir, None),
        [dir, libexec, plugin_dir, sysconf_dir] => (
            dir,
            Some(InstalledPaths {
                libexec: Path::new(libexec),
                plugin_dir: Path::new(plugin_dir),
                sysconf_dir: Path::new(sysconf_dir),
            }),
        ),
        _ => {
            eprintln!("{USAGE}");
            return exit::MISUSED.into();
        }
    };
    if let Some(p) = paths {
        let relative = [p.libexec, p.plugin_dir, p.sysconf_dir]
            .into_iter()
            .find(|d| !d.is_absolute());
        if let Some(d) = relative {
            eprintln!(
                "gpushare-man: {} is not an absolute path\n{USAGE}",
                d.display()
            );
            return exit::MISUSED.into();
        }
    }
    match write(Path::new(dir), paths) {
        Ok(n) => {
            println!("gpushare-man: {n} files in {}", Path::new(dir).display());
            exit::WRITTEN.into()
        }
        Err(e) => {
            eprintln!("gpushare-man: {e}");
            exit::UNWRITTEN.into()
        }
    }
}

fn write(dir: &Path, paths: Option<InstalledPaths<'_>>) -> std::io::Result<usize> {
    let mut files = manual::pages()?;
    files.extend(manual::completions());
    if let Some(paths) = paths {
        files.extend(manual::examples(paths));
    }
    for f in &files {
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.text)?;
    }
    Ok(files.len())
}
