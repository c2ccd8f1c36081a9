//! Generates the Slurm bindings from the headers of the Slurm being targeted.
//!
//! `job_desc_msg_t` changes layout in every Slurm release, so bindings are
//! never committed: they are made here, from the headers found (in order) in
//! `$SLURM_INCLUDE_DIR`, pkg-config's `slurm`, `/usr/include`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use bindgen::callbacks::{IntKind, ParseCallbacks};

// NEWEST_SUPPORTED, ALLOW_NEWER_ENV, check_supported.
include!("supported.rs");

/// Slurm's sentinel macros are written as bare hex literals, which bindgen
/// would type by value (`NO_VAL64` would not even fit an `i32` guess). Give
/// each the width of the field it is compared with.
#[derive(Debug)]
struct SentinelWidths;

impl ParseCallbacks for SentinelWidths {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        match name {
            "NO_VAL8" | "INFINITE8" => Some(IntKind::U8),
            "NO_VAL16" | "INFINITE16" => Some(IntKind::U16),
            "NO_VAL" | "INFINITE" | "SLURM_VERSION_NUMBER" => Some(IntKind::U32),
            "NO_VAL64" | "INFINITE64" => Some(IntKind::U64),
            _ => None,
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("\nslurm-sys: {msg}\n");
    std::process::exit(1);
}

/// Directory that contains `slurm/slurm.h`.
fn find_include_dir() -> PathBuf {
    println!("cargo::rerun-if-env-changed=SLURM_INCLUDE_DIR");
    if let Ok(dir) = env::var("SLURM_INCLUDE_DIR") {
        let dir = PathBuf::from(dir);
        if dir.join("slurm/slurm.h").is_file() {
            return dir;
        }
        fail(&format!(
            "SLURM_INCLUDE_DIR={} has no slurm/slurm.h",
            dir.display()
        ));
    }
    if let Ok(out) = Command::new("pkg-config")
        .args(["--variable=includedir", "slurm"])
        .output()
    {
        if out.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if dir.join("slurm/slurm.h").is_file() {
                return dir;
            }
        }
    }
    let system = PathBuf::from("/usr/include");
    if system.join("slurm/slurm.h").is_file() {
        return system;
    }
    fail(
        "Slurm headers not found. Install them (Debian/Ubuntu: `apt-get install libslurm-dev`), \
         or set SLURM_INCLUDE_DIR to the directory that contains slurm/slurm.h.",
    )
}

/// Reads `SLURM_VERSION_NUMBER` from slurm_version.h (a hex literal).
fn read_version(include: &Path) -> u32 {
    let header = include.join("slurm/slurm_version.h");
    let text = fs::read_to_string(&header)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", header.display())));
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .find_map(|v| u32::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            fail(&format!(
                "{} does not define SLURM_VERSION_NUMBER",
                header.display()
            ))
        })
}

/// Directory holding `libslurmfull.so`, for binaries that run Slurm code
/// outside a daemon (benchmarks). Plugins never link it.
fn find_lib_dir() -> Option<PathBuf> {
    println!("cargo::rerun-if-env-changed=SLURM_LIB_DIR");
    println!("cargo::rerun-if-changed=plugin-dirs");
    let candidates = env::var_os("SLURM_LIB_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            include_str!("plugin-dirs")
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .map(PathBuf::from),
        );
    candidates
        .into_iter()
        .find(|d| d.join("libslurmfull.so").is_file())
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let own_include = manifest.join("../include");
    let wrapper = own_include.join("gpushare_slurm.h");
    println!("cargo::rerun-if-changed={}", own_include.display());

    let include = find_include_dir();
    // The directory, not its headers alone: rpm and dpkg give a file the
    // mtime it had when Slurm was packaged, older than the last build, so
    // an upgraded slurm-devel or libslurm-dev leaves each header looking
    // unchanged; both unpack beside and rename into place, which stamps
    // the directory with the install's time. Cargo scans a directory
    // named here, itself included.
    println!(
        "cargo::rerun-if-changed={}",
        include.join("slurm").display()
    );
    let number = read_version(&include);
    // Headers newer than the newest release checked: refused, unless
    // whoever ports gpushare says otherwise.
    println!("cargo::rerun-if-env-changed={ALLOW_NEWER_ENV}");
    let allow_newer = env::var(ALLOW_NEWER_ENV).ok();
    match check_supported(
        number,
        &include.display().to_string(),
        allow_newer.as_deref(),
    ) {
        Ok(None) => {}
        Ok(Some(warning)) => println!("cargo::warning={warning}"),
        Err(refusal) => fail(&refusal),
    }
    let version = version_text(number);
    // Dependents read these as DEP_SLURM_VERSION_NUMBER / _VERSION / _INCLUDE.
    println!("cargo::metadata=version_number={number}");
    println!("cargo::metadata=version={version}");
    println!("cargo::metadata=include={}", include.display());
    if let Some(lib) = find_lib_dir() {
        println!("cargo::metadata=libdir={}", lib.display());
    }
    println!("cargo::rustc-env=SLURM_SYS_BUILT_FOR={version}");
    println!(
        "cargo::warning=building for Slurm {version} (headers in {})",
        include.display()
    );

    let bindings = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_arg(format!("-I{}", include.display()))
        .clang_arg(format!("-I{}", own_include.display()))
        .parse_callbacks(Box::new(SentinelWidths))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_debug(false)
        .derive_default(false)
        .layout_tests(true)
        .allowlist_type("job_desc_msg_t")
        .allowlist_type("slurmdb_(assoc|user|qos)_rec_t")
        .allowlist_type("gpushare_assoc_mgr_lock_t")
        .allowlist_var("GPUSHARE_(NO|READ|WRITE)_LOCK")
        .allowlist_function(
            "assoc_mgr_(lock|unlock|fill_in_assoc|fill_in_user|fill_in_qos|get_default_qos_info)",
        )
        .allowlist_type("spank_t")
        .allowlist_type("spank_item_t")
        .allowlist_type("spank_context_t")
        .allowlist_type("spank_err_t")
        .allowlist_type("spank_option")
        .allowlist_function("slurm_(info|error|verbose|debug|debug2|debug3|spank_log)")
        .allowlist_function("slurm_(xstrdup|xfree|xrecalloc)")
        .allowlist_function("slurm_init_job_desc_msg")
        .allowlist_function("slurm_list_count")
        .allowlist_function("spank_.*")
        .allowlist_var("slurm_conf")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("SLURM_(SUCCESS|ERROR)")
        .allowlist_var("ESLURM_.*")
        .allowlist_var("ESPANK_.*")
        .allowlist_var("S_CTX_.*")
        .allowlist_var("S_(JOB|TASK|STEP|SLURM)_.*")
        .allowlist_var("SPANK_.*")
        .allowlist_var("NO_VAL(8|16|64)?")
        .allowlist_var("INFINITE(8|16|64)?")
        .allowlist_var("OPEN_MODE_.*")
        .allowlist_var("JOB_SHARED_.*")
        .allowlist_var("MEM_PER_CPU")
        .generate()
        .unwrap_or_else(|e| {
            fail(&format!(
                "bindgen failed on {}: {e}. bindgen needs libclang \
                 (Debian/Ubuntu: `apt-get install libclang-dev`; or set LIBCLANG_PATH).",
                wrapper.display()
            ))
        });
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_default()).join("bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display())));
}
