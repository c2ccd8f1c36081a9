//! When the GPUs' facts a prolog kept from NVML (`<StateDir>/nvml-facts`)
//! may stand in for asking NVML again: the facts are kept with what makes
//! them stale ([`FactsKeys`], `<StateDir>/nvml-facts-keys`), and a share's
//! prolog asks NVML only where they are missing or a key changed
//! ([`freshness`]); `gpushare_node::gpu_facts` reads the keys and the files.
//!
//! The keys: the boot (`/proc/sys/kernel/random/boot_id`), the NVIDIA
//! driver's version (`/proc/driver/nvidia/version`, else
//! `/sys/module/nvidia/version`), each GPU the driver lists under
//! `/proc/driver/nvidia/gpus/` (its PCI address and a digest of its
//! `information` file: model, UUID, device minor, ...), and the MIG GPU
//! instances the driver lists under `/proc/driver/nvidia/capabilities/`
//! (`gpuN/mig/giM`). A reboot, a driver reload, a GPU added, removed,
//! unbound or replaced, or a MIG instance made or destroyed changes one.
//!
//! How fresh the MIG refusal's facts are: as fresh as the last NVML answer,
//! which the node timer (`gpu-mps metrics --write`, every minute) asks
//! for on each run, and any prolog asks for where a key changed. That is
//! safe: NVML switches a GPU's MIG mode only while the GPU is idle (it
//! answers `NVML_ERROR_IN_USE` otherwise, and the switch resets or
//! unbinds the GPU), so no share runs on a GPU whose mode changes; a GPU
//! in MIG mode runs CUDA work only in a GPU instance, whose making adds a
//! `gi` entry the next prolog sees; so a share placed from facts older
//! than a switch finds, at worst, a GPU that runs none of its work until
//! the timer's next run refuses the next shares there.

/// The file beside [`super::super::gpu_devices::KEPT_FACTS`] that holds the
/// keys the kept facts were asked under.
pub const KEPT_KEYS: &str = "nvml-facts-keys";

/// The first line of a [`keys_text`]: a text without it (none, or another
/// version's) keeps no keys, and the facts it goes with are stale.
const VERSION_LINE: &str = "gpushare-nvml-facts-keys 1";

/// What the node says now of what makes kept facts stale; `None`: that key
/// could not be read (facts are never fresh against it). A key of a
/// driver that is not loaded reads `none`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FactsKeys {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot: Option<String>,
    /// The driver's version ([`driver_word`]).
    pub driver: Option<String>,
    /// The driver's GPUs ([`gpus_key`]).
    pub gpus: Option<String>,
    /// The MIG GPU instances the driver lists ([`mig_key`]).
    pub mig: Option<String>,
}

/// What a key's absence reads (the driver not loaded, no GPU listed).
pub const NONE: &str = "none";

impl FactsKeys {
    /// Each key with its name and what it is, in the file's order.
    fn keys(&self) -> [(&'static str, &'static str, Option<&str>); 4] {
        [
            ("boot", "the boot id", self.boot.as_deref()),
            (
                "driver",
                "the NVIDIA driver's version",
                self.driver.as_deref(),
            ),
            (
                "gpus",
                "the GPUs under /proc/driver/nvidia/gpus",
                self.gpus.as_deref(),
            ),
            (
                "mig",
                "the MIG instances under /proc/driver/nvidia/capabilities",
                self.mig.as_deref(),
            ),
        ]
    }
}

/// Whether kept facts stand in for NVML, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Every key reads as it did when the facts were asked.
    Fresh,
    /// NVML is to be asked: why, in words for the log.
    Stale(String),
}

/// Whether facts kept with `kept` (the [`keys_text`] kept beside them;
/// `None`: none) are fresh for a node whose keys read `now`.
pub fn freshness(kept: Option<&str>, now: &FactsKeys) -> Freshness {
    let stale = |why: String| Freshness::Stale(why);
    let Some(text) = kept else {
        return stale("the facts kept carry no keys (kept by an earlier gpushare)".into());
    };
    let Some(kept) = parse_keys(text) else {
        return stale(format!("the facts' keys ({KEPT_KEYS}) are unreadable"));
    };
    for ((_, what, was), (_, _, is)) in kept.keys().into_iter().zip(now.keys()) {
        match (was, is) {
            (_, None) => return stale(format!("{what} cannot be read")),
            (None, Some(_)) => return stale(format!("{what} was not kept")),
            (Some(was), Some(is)) if was != word(is) => {
                return stale(format!("{what} changed (kept {was}, now {})", word(is)))
            }
            _ => {}
        }
    }
    Freshness::Fresh
}

/// `keys` as kept beside the facts: a version line, then one key a line,
/// `<name> <value>`; a key that could not be read is left out.
pub fn keys_text(keys: &FactsKeys) -> String {
    let mut text = format!("{VERSION_LINE}\n");
    for (name, _, value) in keys.keys() {
        if let Some(v) = value {
            text.push_str(&format!("{name} {}\n", word(v)));
        }
    }
    text
}

/// The keys of a [`keys_text`] (`None`: not such a text).
pub fn parse_keys(text: &str) -> Option<FactsKeys> {
    let mut lines = text.lines();
    if lines.next()? != VERSION_LINE || !text.ends_with('\n') {
        return None;
    }
    let mut keys = FactsKeys::default();
    for line in lines {
        let (name, value) = line.split_once(' ')?;
        let slot = match name {
            "boot" => &mut keys.boot,
            "driver" => &mut keys.driver,
            "gpus" => &mut keys.gpus,
            "mig" => &mut keys.mig,
            _ => return None,
        };
        *slot = Some(value.to_owned());
    }
    Some(keys)
}

/// `v` as one word of a line: whitespace and control characters made `_`.
fn word(v: &str) -> String {
    let w: String = v
        .trim()
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if w.is_empty() {
        NONE.to_owned()
    } else {
        w
    }
}

/// The driver's version in the first line of `/proc/driver/nvidia/version`
/// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue ...")
/// or in `/sys/module/nvidia/version` ("550.54.15"); the line itself
/// where no word looks like one.
pub fn driver_word(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default();
    let version = first
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'));
    word(version.unwrap_or(first))
}

/// The driver's GPUs: each `(PCI address, its information file's text)`,
/// in any order, as one word (`none` for none).
pub fn gpus_key(gpus: &[(String, String)]) -> String {
    let mut each: Vec<String> = gpus
        .iter()
        .map(|(pci, info)| format!("{}#{:016x}", word(pci), fnv1a(info.as_bytes())))
        .collect();
    each.sort();
    if each.is_empty() {
        NONE.to_owned()
    } else {
        each.join(",")
    }
}

/// The MIG GPU instances the driver lists (`gpu0/gi1`, ...), in any order,
/// as one word (`none` for none).
pub fn mig_key(instances: &[String]) -> String {
    let mut each: Vec<String> = instances.iter().map(|i| word(i)).collect();
    each.sort();
    if each.is_empty() {
        NONE.to_owned()
    } else {
        each.join(",")
    }
}

/// FNV-1a, 64 bits: a digest that tells two texts apart, never a secret.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> FactsKeys {
        FactsKeys {
            boot: Some("6c1e5f4a-0d7e-4b57-9a43-2f1d3e6b7a10".into()),
            driver: Some(driver_word(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 \
                 22:23:56 UTC 2024\nGCC version: gcc 12\n",
            )),
            gpus: Some(gpus_key(&[
                (
                    "0000:3b:00.0".into(),
                    "Model: NVIDIA H100\nDevice Minor: 0\n".into(),
                ),
                (
                    "0000:5e:00.0".into(),
                    "Model: NVIDIA H100\nDevice Minor: 1\n".into(),
                ),
            ])),
            mig: Some(mig_key(&[])),
        }
    }

    fn is_stale(f: &Freshness, words: &str) -> bool {
        matches!(f, Freshness::Stale(why) if why.contains(words))
    }

    #[test]
    fn the_same_keys_are_fresh_and_read_back() {
        let keys = node();
        assert_eq!(keys.driver.as_deref(), Some("550.54.15"));
        let text = keys_text(&keys);
        assert!(
            text.starts_with("gpushare-nvml-facts-keys 1\nboot 6c1e"),
            "{text}"
        );
        assert_eq!(parse_keys(&text), Some(keys.clone()));
        assert_eq!(freshness(Some(&text), &keys), Freshness::Fresh);
        // The GPUs in another order, the same GPUs.
        let mut turned = keys.clone();
        turned.gpus = Some(gpus_key(&[
            (
                "0000:5e:00.0".into(),
                "Model: NVIDIA H100\nDevice Minor: 1\n".into(),
            ),
            (
                "0000:3b:00.0".into(),
                "Model: NVIDIA H100\nDevice Minor: 0\n".into(),
            ),
        ]));
        assert_eq!(freshness(Some(&text), &turned), Freshness::Fresh);
        // A node without the driver: its keys read `none`, and are kept so.
        let bare = FactsKeys {
            driver: Some(NONE.into()),
            gpus: Some(gpus_key(&[])),
            mig: Some(mig_key(&[])),
            ..node()
        };
        assert_eq!(bare.gpus.as_deref(), Some("none"));
        let text = keys_text(&bare);
        assert_eq!(freshness(Some(&text), &bare), Freshness::Fresh);
    }

    #[test]
    fn each_key_changed_makes_the_facts_stale_and_says_which() {
        let kept = keys_text(&node());
        let changed = [
            (
                FactsKeys {
                    boot: Some("0f0f".into()),
                    ..node()
                },
                "the boot id changed (kept 6c1e",
            ),
            (
                FactsKeys {
                    driver: Some(driver_word("555.42.02\n")),
                    ..node()
                },
                "the NVIDIA driver's version changed (kept 550.54.15, now 555.42.02)",
            ),
            (
                FactsKeys {
                    driver: Some(NONE.into()),
                    ..node()
                },
                "driver's version changed (kept 550.54.15, now none)",
            ),
            (
                FactsKeys {
                    gpus: Some(gpus_key(&[(
                        "0000:3b:00.0".into(),
                        "Model: NVIDIA H100\nDevice Minor: 0\n".into(),
                    )])),
                    ..node()
                },
                "the GPUs under /proc/driver/nvidia/gpus changed",
            ),
            (
                // The same address, another GPU (its UUID or minor).
                FactsKeys {
                    gpus: Some(gpus_key(&[
                        ("0000:3b:00.0".into(), "Model: NVIDIA H100\nDevice Minor: 2\n".into()),
                        ("0000:5e:00.0".into(), "Model: NVIDIA H100\nDevice Minor: 1\n".into()),
                    ])),
                    ..node()
                },
                "the GPUs under /proc/driver/nvidia/gpus changed",
            ),
            (
                FactsKeys {
                    mig: Some(mig_key(&["gpu0/gi1".into()])),
                    ..node()
                },
                "MIG instances under /proc/driver/nvidia/capabilities changed (kept none, now gpu0/gi1)",
            ),
        ];
        for (now, why) in changed {
            let f = freshness(Some(&kept), &now);
            assert!(is_stale(&f, why), "{f:?}, not {why:?}");
        }
    }

    #[test]
    fn unreadable_or_missing_keys_are_stale() {
        let kept = keys_text(&node());
        // A key the node cannot read now.
        for (now, what) in [
            (
                FactsKeys {
                    boot: None,
                    ..node()
                },
                "the boot id cannot be read",
            ),
            (
                FactsKeys {
                    driver: None,
                    ..node()
                },
                "driver's version cannot be read",
            ),
            (
                FactsKeys {
                    gpus: None,
                    ..node()
                },
                "nvidia/gpus cannot be read",
            ),
            (
                FactsKeys {
                    mig: None,
                    ..node()
                },
                "capabilities cannot be read",
            ),
        ] {
            let f = freshness(Some(&kept), &now);
            assert!(is_stale(&f, what), "{f:?}, not {what:?}");
        }
        // One it could not read when the facts were kept.
        let partial = keys_text(&FactsKeys {
            mig: None,
            ..node()
        });
        let f = freshness(Some(&partial), &node());
        assert!(is_stale(&f, "capabilities was not kept"), "{f:?}");
        // No keys kept (facts of an earlier gpushare), or not such a text.
        assert!(is_stale(&freshness(None, &node()), "carry no keys"));
        for bad in [
            "",
            "boot 6c1e\n",
            "gpushare-nvml-facts-keys 2\nboot x\n",
            "gpushare-nvml-facts-keys 1\nboot x",
            "gpushare-nvml-facts-keys 1\nbogus x\n",
            "gpushare-nvml-facts-keys 1\nboot\n",
        ] {
            let f = freshness(Some(bad), &node());
            assert!(is_stale(&f, "unreadable"), "{bad:?}: {f:?}");
        }
    }

    #[test]
    fn values_are_one_word() {
        assert_eq!(word(" a b\tc\n"), "a_b_c");
        assert_eq!(word(""), "none");
        assert_eq!(driver_word("no version here\n"), "no_version_here");
        let text = keys_text(&FactsKeys {
            boot: Some("x y".into()),
            ..node()
        });
        assert_eq!(parse_keys(&text).and_then(|k| k.boot), Some("x_y".into()));
        let spaced = FactsKeys {
            boot: Some("x y".into()),
            ..node()
        };
        assert_eq!(freshness(Some(&text), &spaced), Freshness::Fresh);
    }
}
