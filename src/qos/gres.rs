//! Parsing of the GRES/TRES request strings a job carries in `tres_per_node`,
//! `tres_per_job`, `tres_per_socket` and `tres_per_task`, in every format
//! Slurm 22.05 to 25.x produces, plus rendering of the `sbatch` option a user
//! should type for a typed GPU request.
//!
//! The job_submit plugin sees these strings before Slurm applies defaults or
//! validates them, so the parser is lenient where Slurm is (no prefix, no
//! count, count suffixes) and strict where a wrong guess would let a GPU
//! request slip past the policy (a malformed count is an error, not a type).
//!
//! The GPUs a job holds or asks for as `squeue`, `scontrol` and `assoc_mgr`
//! show them (`cpu=1,gres/gpu=2,gres/gpu:a40=2`) are read here too, and put
//! in words, for `gpu-qos usage` and `gpu-qos why`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One GRES entry of a request string, borrowing from it.
///
/// Borrowing keeps the per-job decision free of string copies: the policy
/// only compares these against the configuration and throws them away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GresRequest<'a> {
    /// The GRES name as written: `gpu`, `mps`, `shard` or a site-defined one.
    pub name: &'a str,
    /// The type after the name (`a40`, `1g.10gb`), if the entry gives one.
    pub gres_type: Option<&'a str>,
    /// The count, with any K/M/G suffix applied; never zero.
    pub count: u64,
}

impl GresRequest<'_> {
    /// Whether this entry asks for whole GPUs. Slurm compares GRES names
    /// without regard to case, so `GPU:2` must not escape the policy.
    pub fn is_gpu(&self) -> bool {
        self.name.eq_ignore_ascii_case("gpu")
    }

    /// Whether this entry asks for a share of a GPU (`mps` or `shard`).
    pub fn is_shared_gpu(&self) -> bool {
        self.name.eq_ignore_ascii_case("mps") || self.name.eq_ignore_ascii_case("shard")
    }
}

/// Why an entry could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GresParseErrorReason {
    /// Nothing between the prefix and the first `:` or `=`.
    EmptyName,
    /// The GRES name holds a character Slurm never puts in one.
    BadName,
    /// An empty type, as in `gpu::2`.
    EmptyType,
    /// The type holds a character outside letters, digits, `_`, `-`, `.`.
    BadType,
    /// A count was required here but this is not a number.
    NotANumber(String),
    /// The count does not fit in 64 bits.
    Overflow(String),
    /// More fields than `name:type:count`.
    TooManyFields,
}

/// A request string holds an entry that is not a valid GRES request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresParseError {
    /// The offending entry, as it appeared in the request string.
    pub entry: String,
    pub reason: GresParseErrorReason,
}

impl fmt::Display for GresParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid GRES request \"{}\": ", self.entry)?;
        match &self.reason {
            GresParseErrorReason::EmptyName => f.write_str("the GRES name is empty"),
            GresParseErrorReason::BadName => {
                f.write_str("the GRES name may contain only letters, digits, '_', '-' and '.'")
            }
            GresParseErrorReason::EmptyType => f.write_str("the type is empty"),
            GresParseErrorReason::BadType => {
                f.write_str("the type may contain only letters, digits, '_', '-' and '.'")
            }
            GresParseErrorReason::NotANumber(count) => {
                write!(f, "count \"{count}\" is not a number")
            }
            GresParseErrorReason::Overflow(count) => write!(f, "count \"{count}\" is too large"),
            GresParseErrorReason::TooManyFields => {
                f.write_str("expected name[:type][:count], found more fields")
            }
        }
    }
}

impl std::error::Error for GresParseError {}

/// TRES names that may share a request string with GRES entries (24.05+ puts
/// `--cpus-per-task` into `tres_per_task` as `cpu=N`) but are not GRES.
const NON_GRES_TRES: [&str; 7] = ["cpu", "mem", "energy", "node", "billing", "vmem", "pages"];

/// Every GRES entry of a comma-separated request string, one at a time, so a
/// caller can judge entries without collecting them.
///
/// Entries with a zero count are skipped (Slurm ignores them), and so are
/// non-GRES TRES such as `cpu=4`, `mem=8G` or `license/foo=1`.
pub fn tres_entries(s: &str) -> impl Iterator<Item = Result<GresRequest<'_>, GresParseError>> {
    s.split(',')
        .filter_map(|entry| parse_entry(entry).transpose())
}

/// All GRES entries of a request string, or the first bad one.
pub fn parse_tres_list(s: &str) -> Result<Vec<GresRequest<'_>>, GresParseError> {
    tres_entries(s).collect()
}

/// `text` (a request field) with each GPU entry that names no type given
/// `gpu_type`, every other entry as written: `gres:gpu:2` becomes
/// `gres:gpu:a40:2`, `gres/gpu=2` `gres/gpu:a40=2`, `gpu` `gpu:a40`.
/// `None` where no entry changes, or one does not parse (the policy
/// refuses such a field before any rewrite).
pub fn with_gpu_type(text: &str, gpu_type: &str) -> Option<String> {
    let mut changed = false;
    let mut out = Vec::new();
    for raw in text.split(',') {
        let untyped_gpu = match parse_entry(raw) {
            Ok(Some(r)) => r.is_gpu() && r.gres_type.is_none(),
            Ok(None) => false,
            Err(_) => return None,
        };
        if !untyped_gpu {
            out.push(raw.to_owned());
            continue;
        }
        let entry = raw.trim();
        let body = strip_prefix_ignore_case(entry, "gres:")
            .or_else(|| strip_prefix_ignore_case(entry, "gres/"))
            .unwrap_or(entry);
        // The name ends at the first `:` or `=` (a count), or the entry's end.
        let name_len = body.find([':', '=']).unwrap_or(body.len());
        let at = entry.len() - body.len() + name_len;
        let (head, tail) = entry.split_at(at);
        out.push(format!("{head}:{gpu_type}{tail}"));
        changed = true;
    }
    changed.then(|| out.join(","))
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        s.get(prefix.len()..)
    } else {
        None
    }
}

fn is_word(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Digits with an optional K/M/G suffix: the shape Slurm reads as a count.
fn looks_like_count(s: &str) -> bool {
    let digits = match s.as_bytes().last() {
        Some(b'k' | b'K' | b'm' | b'M' | b'g' | b'G') => s.get(..s.len() - 1).unwrap_or(""),
        _ => s,
    };
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn parse_count(s: &str, entry: &str) -> Result<u64, GresParseError> {
    let error = |reason| GresParseError {
        entry: entry.to_owned(),
        reason,
    };
    if !looks_like_count(s) {
        return Err(error(GresParseErrorReason::NotANumber(s.to_owned())));
    }
    let (digits, multiplier) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (s.get(..s.len() - 1), 1u64 << 10),
        Some(b'm' | b'M') => (s.get(..s.len() - 1), 1u64 << 20),
        Some(b'g' | b'G') => (s.get(..s.len() - 1), 1u64 << 30),
        _ => (Some(s), 1),
    };
    digits
        .and_then(|d| d.parse::<u64>().ok())
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| error(GresParseErrorReason::Overflow(s.to_owned())))
}

fn parse_entry(raw: &str) -> Result<Option<GresRequest<'_>>, GresParseError> {
    let entry = raw.trim();
    if entry.is_empty() {
        return Ok(None);
    }
    let error = |reason| GresParseError {
        entry: entry.to_owned(),
        reason,
    };
    let body = match strip_prefix_ignore_case(entry, "gres:")
        .or_else(|| strip_prefix_ignore_case(entry, "gres/"))
    {
        Some(body) => body,
        None => {
            let head = entry.split([':', '=']).next().unwrap_or(entry);
            // `license/x`, `fs/disk`, `bb/x`: another TRES kind, not ours to judge.
            if head.contains('/') || NON_GRES_TRES.iter().any(|t| head.eq_ignore_ascii_case(t)) {
                return Ok(None);
            }
            entry
        }
    };

    // 24.05+ writes the count after `=` (`gpu:a40=1`); older ones after `:`.
    let (spec, count_after_eq) = match body.split_once('=') {
        Some((spec, count)) => (spec, Some(count)),
        None => (body, None),
    };
    let mut fields = spec.split(':');
    let name = fields.next().unwrap_or("");
    let second = fields.next();
    let third = fields.next();
    if fields.next().is_some() {
        return Err(error(GresParseErrorReason::TooManyFields));
    }
    if name.is_empty() {
        return Err(error(GresParseErrorReason::EmptyName));
    }
    if !is_word(name) {
        return Err(error(GresParseErrorReason::BadName));
    }

    let (gres_type, count) = match (second, third, count_after_eq) {
        (None, None, None) => (None, 1),
        (None, None, Some(count)) => (None, parse_count(count, entry)?),
        // A lone trailing word is a count only if it reads as one; Slurm
        // makes the same call, so `gpu:1g.10gb` is a MIG type and `gpu:2` a count.
        (Some(word), None, None) if looks_like_count(word) => (None, parse_count(word, entry)?),
        (Some(ty), None, None) => (Some(ty), 1),
        (Some(ty), None, Some(count)) | (Some(ty), Some(count), None) => {
            (Some(ty), parse_count(count, entry)?)
        }
        (Some(_), Some(_), Some(_)) | (None, Some(_), _) => {
            return Err(error(GresParseErrorReason::TooManyFields))
        }
    };
    if let Some(ty) = gres_type {
        if ty.is_empty() {
            return Err(error(GresParseErrorReason::EmptyType));
        }
        if !is_word(ty) {
            return Err(error(GresParseErrorReason::BadType));
        }
    }
    if count == 0 {
        return Ok(None);
    }
    Ok(Some(GresRequest {
        name,
        gres_type,
        count,
    }))
}

/// Which job field a request arrived in; each comes from its own option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TresField {
    /// `tres_per_node`: `--gres=` and `--gpus-per-node=`.
    PerNode,
    /// `tres_per_job`: `--gpus=`.
    PerJob,
    /// `tres_per_socket`: `--gpus-per-socket=`.
    PerSocket,
    /// `tres_per_task`: `--gpus-per-task=`.
    PerTask,
}

impl TresField {
    pub const ALL: [TresField; 4] = [
        TresField::PerNode,
        TresField::PerJob,
        TresField::PerSocket,
        TresField::PerTask,
    ];

    /// The start of the `sbatch` option asking GPUs through this field, up
    /// to where `type:count` follows; so every field renders the same tail.
    pub fn gpu_option_prefix(self) -> &'static str {
        match self {
            TresField::PerNode => "--gres=gpu:",
            TresField::PerJob => "--gpus=",
            TresField::PerSocket => "--gpus-per-socket=",
            TresField::PerTask => "--gpus-per-task=",
        }
    }

    /// The option(s) a user typed to fill this field, for error messages.
    pub fn option_names(self) -> &'static str {
        match self {
            TresField::PerNode => "--gres/--gpus-per-node",
            TresField::PerJob => "--gpus",
            TresField::PerSocket => "--gpus-per-socket",
            TresField::PerTask => "--gpus-per-task",
        }
    }

    /// The `scontrol update job=...` key that sets this field.
    pub fn scontrol_key(self) -> &'static str {
        match self {
            TresField::PerNode => "Gres",
            TresField::PerJob => "TresPerJob",
            TresField::PerSocket => "TresPerSocket",
            TresField::PerTask => "TresPerTask",
        }
    }
}

/// Which option a user typed for the GPUs in `tres_per_node`. `--gres=gpu:2`
/// and `--gpus-per-node=2` reach job_submit as the same text (every
/// release from 22.05 to 26.05: `slurm_opt_create_job_desc` in
/// slurm_opt.c writes `--gpus-per-node` as `gres/gpu:` items and `--gres`
/// through `gres_prepend_tres_type`, both into `tres_per_node`); only what
/// the user typed (the submission line, the script's `#SBATCH` lines:
/// [`crate::qos::submit_line::per_node_spelling`]) tells them apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PerNodeSpelling {
    /// Not known, or both were typed: a message quotes both spellings.
    #[default]
    Unknown,
    /// `--gres=gpu:...`.
    Gres,
    /// `--gpus-per-node=...`.
    GpusPerNode,
}

impl PerNodeSpelling {
    /// The start of the option for a GPU request in this spelling, up to
    /// where `type:count` follows (`Unknown`: `--gres`'s).
    pub fn prefix(self) -> &'static str {
        match self {
            PerNodeSpelling::GpusPerNode => "--gpus-per-node=",
            PerNodeSpelling::Gres | PerNodeSpelling::Unknown => "--gres=gpu:",
        }
    }

    /// The option(s) named in an error message.
    pub fn option_names(self) -> &'static str {
        match self {
            PerNodeSpelling::Unknown => "--gres/--gpus-per-node",
            PerNodeSpelling::Gres => "--gres",
            PerNodeSpelling::GpusPerNode => "--gpus-per-node",
        }
    }
}

/// A GPU request rendered as the `sbatch` option that makes it, e.g.
/// `--gres=gpu:a40:2` or `--gpus=a40:2`; untyped when `gpu_type` is `None`
/// (`--gres=gpu:2`), which is how messages quote what the user asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuOption<'a> {
    pub field: TresField,
    pub gpu_type: Option<&'a str>,
    pub count: u64,
    /// How a `tres_per_node` request is written: where it is not known,
    /// both spellings (`--gres=gpu:a40:2 (or --gpus-per-node=a40:2)`).
    pub spelling: PerNodeSpelling,
}

impl GpuOption<'_> {
    fn write_one(&self, f: &mut fmt::Formatter<'_>, prefix: &str) -> fmt::Result {
        f.write_str(prefix)?;
        if let Some(ty) = self.gpu_type {
            write!(f, "{ty}:")?;
        }
        write!(f, "{}", self.count)
    }
}

impl fmt::Display for GpuOption<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.field, self.spelling) {
            (TresField::PerNode, PerNodeSpelling::Unknown) => {
                self.write_one(f, PerNodeSpelling::Gres.prefix())?;
                f.write_str(" (or ")?;
                self.write_one(f, PerNodeSpelling::GpusPerNode.prefix())?;
                f.write_str(")")
            }
            (TresField::PerNode, spelling) => self.write_one(f, spelling.prefix()),
            (field, _) => self.write_one(f, field.gpu_option_prefix()),
        }
    }
}

// The GPUs a job holds or asks for, as `squeue`, `scontrol` and
// `assoc_mgr` show them in TRES strings, and the words for them.

/// The GPUs of `gpu_type` in a list [`gpus_of_tres`] made; every GPU for
/// `None`.
pub fn gpus_of_type(gpus: &[(Option<String>, u64)], gpu_type: Option<&str>) -> u64 {
    gpus.iter()
        .filter(|(t, _)| gpu_type.is_none() || t.as_deref() == gpu_type)
        .map(|&(_, n)| n)
        .sum()
}

/// The GPUs of a TRES string (`cpu=1,gres/gpu=2,gres/gpu:a40=2`): the
/// typed entries, or the untyped one when there is no typed entry.
pub fn gpus_of_tres(tres: &str) -> Vec<(Option<String>, u64)> {
    let mut typed = Vec::new();
    let mut untyped = None;
    for (name, value) in tres.split(',').filter_map(|e| e.split_once('=')) {
        let Ok(n) = value.trim().parse::<u64>() else {
            continue;
        };
        match name.trim().strip_prefix("gres/gpu") {
            Some("") => untyped = Some(n),
            Some(rest) => {
                if let Some(t) = rest.strip_prefix(':').filter(|t| !t.is_empty()) {
                    typed.push((Some(t.to_owned()), n));
                }
            }
            None => {}
        }
    }
    if typed.is_empty() {
        typed.extend(untyped.filter(|&n| n > 0).map(|n| (None, n)));
    }
    typed
}

/// `2 a40, 1 h100`; `1 GPU` for an untyped request; `no GPU`.
pub fn gpu_words(gpus: &[(Option<String>, u64)]) -> String {
    let parts: Vec<String> = gpus
        .iter()
        .map(|(t, n)| match t {
            Some(t) => format!("{n} {t}"),
            None => format!("{n} GPU"),
        })
        .collect();
    if parts.is_empty() {
        "no GPU".to_owned()
    } else {
        parts.join(", ")
    }
}

/// One GPU type of a group QOS: its limit and what the group holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeUse {
    pub gpu_type: String,
    pub limit: u64,
    pub held: u64,
}

/// The reason of a pending job, settled: Slurm clears a pending job's
/// reason (`None`) while its scheduler takes the job up again and gives it
/// back at the end of that pass, so a read can land in between (26.05:
/// a fifth of the time with a two-second pass). A job whose typed GPU
/// request does not fit what is left of its group limit (`fits` answers,
/// for a type and a count, whether that many more fit) waits for
/// `QOSGrpGRES`, the reason Slurm gives it again; any other reason is
/// Slurm's own.
pub fn settled_reason<'a>(
    reason: &'a str,
    asked: &[(Option<String>, u64)],
    fits: impl Fn(&str, u64) -> bool,
) -> &'a str {
    let over = asked
        .iter()
        .any(|(t, n)| t.as_deref().is_some_and(|t| !fits(t, *n)));
    match reason {
        "None" | "" if over => "QOSGrpGRES",
        other => other,
    }
}

/// `2 of 4 a40 held, 0 of 2 h100 held`.
pub fn held_words(types: &[TypeUse]) -> String {
    types
        .iter()
        .map(|t| format!("{} of {} {} held", t.held, t.limit, t.gpu_type))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An account above the user (theirs or a parent) with typed GPU limits:
/// what every job under it holds against them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountUse {
    pub account: String,
    pub types: Vec<TypeUse>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_untyped_gpu_entry_is_given_the_type_in_its_own_spelling() {
        let given = |text: &str| with_gpu_type(text, "a40");
        assert_eq!(given("gres:gpu:2").as_deref(), Some("gres:gpu:a40:2"));
        assert_eq!(given("gres/gpu:2").as_deref(), Some("gres/gpu:a40:2"));
        assert_eq!(given("gres/gpu=2").as_deref(), Some("gres/gpu:a40=2"));
        assert_eq!(given("gpu").as_deref(), Some("gpu:a40"));
        assert_eq!(given("GPU:4K").as_deref(), Some("GPU:a40:4K"));
        assert_eq!(
            given("gres:gpu:h100:1,gres:gpu:1,gres:mps:50").as_deref(),
            Some("gres:gpu:h100:1,gres:gpu:a40:1,gres:mps:50")
        );
        // 24.05's cpu entry beside it stays as it is.
        assert_eq!(
            given("cpu=4,gres/gpu=1").as_deref(),
            Some("cpu=4,gres/gpu:a40=1")
        );
        // Nothing untyped, a zero count, a field that does not parse.
        assert_eq!(given("gres:gpu:a40:2"), None);
        assert_eq!(given("gres:gpu:0"), None);
        assert_eq!(given("gres:mps:50"), None);
        assert_eq!(given("gres:gpu:x:y:z,gres:gpu:1"), None);
        // What it gives reads back typed, every entry.
        let typed = given("gres:gpu:2,gpu,gres/gpu=3").unwrap_or_default();
        let entries = parse_tres_list(&typed).unwrap_or_default();
        assert!(
            entries.iter().all(|e| e.gres_type == Some("a40")),
            "{typed}"
        );
        assert_eq!(entries.iter().map(|e| e.count).sum::<u64>(), 6);
    }
    use proptest::prelude::*;

    fn one(s: &str) -> (String, Option<String>, u64) {
        let list = parse_tres_list(s).unwrap();
        assert_eq!(list.len(), 1, "{s}: {list:?}");
        let r = list[0];
        (r.name.to_owned(), r.gres_type.map(str::to_owned), r.count)
    }

    fn gpu(ty: Option<&str>, n: u64) -> (String, Option<String>, u64) {
        ("gpu".to_owned(), ty.map(str::to_owned), n)
    }

    #[test]
    fn slurm_22_05_formats() {
        assert_eq!(one("gres:gpu:a40:2"), gpu(Some("a40"), 2));
        assert_eq!(one("gres:gpu:2"), gpu(None, 2));
        assert_eq!(one("gres:gpu"), gpu(None, 1));
        assert_eq!(one("gres:gpu:a40"), gpu(Some("a40"), 1));
    }

    #[test]
    fn slurm_23_11_and_24_05_formats() {
        assert_eq!(one("gres/gpu:a40:2"), gpu(Some("a40"), 2));
        assert_eq!(one("gres/gpu:a40=1"), gpu(Some("a40"), 1));
        assert_eq!(one("gres/gpu=3"), gpu(None, 3));
        assert_eq!(one("gres/gpu"), gpu(None, 1));
    }

    #[test]
    fn unprefixed_entries_are_accepted() {
        assert_eq!(one("gpu:a40:2"), gpu(Some("a40"), 2));
        assert_eq!(one("gpu"), gpu(None, 1));
        assert_eq!(one("gpu:4"), gpu(None, 4));
    }

    #[test]
    fn lists_mix_gres_and_other_tres() {
        let list = parse_tres_list("cpu=4,gres/gpu:a40=1,mem=8G,license/matlab=1").unwrap();
        assert_eq!(
            list,
            vec![GresRequest {
                name: "gpu",
                gres_type: Some("a40"),
                count: 1
            }]
        );
        let list = parse_tres_list("gres:gpu:a40:2,gres:mps:50").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1].name, "mps");
        assert_eq!(list[1].gres_type, None);
        assert_eq!(list[1].count, 50);
        assert!(list[1].is_shared_gpu());
        assert!(list[0].is_gpu());
    }

    #[test]
    fn suffixes_multiply_by_powers_of_1024() {
        assert_eq!(one("gres:mps:1k").2, 1024);
        assert_eq!(one("gres:mps:2M").2, 2 << 20);
        assert_eq!(one("gres/shard:1g").2, 1 << 30);
        assert_eq!(one("gres:gpu:a40:1K"), gpu(Some("a40"), 1024));
    }

    #[test]
    fn mig_and_odd_types_are_types() {
        assert_eq!(one("gres:gpu:1g.10gb"), gpu(Some("1g.10gb"), 1));
        assert_eq!(one("gres:gpu:1g.10gb:3"), gpu(Some("1g.10gb"), 3));
        assert_eq!(one("gres:gpu:tesla_v-100"), gpu(Some("tesla_v-100"), 1));
        assert_eq!(one("gres:gpu:2x"), gpu(Some("2x"), 1));
    }

    #[test]
    fn zero_counts_and_empty_entries_are_dropped() {
        assert_eq!(parse_tres_list("gres:gpu:0").unwrap(), vec![]);
        assert_eq!(parse_tres_list("gres:gpu:a40:0,,").unwrap(), vec![]);
        assert_eq!(parse_tres_list("").unwrap(), vec![]);
        assert_eq!(parse_tres_list("gres/gpu:a40=0").unwrap(), vec![]);
    }

    #[test]
    fn gres_names_other_than_gpu_parse() {
        assert_eq!(
            one("gres:fpga:xilinx:2"),
            ("fpga".to_owned(), Some("xilinx".to_owned()), 2)
        );
        assert_eq!(one("gres:shard:8").2, 8);
        assert!(one("GRES:GPU:2").0.eq_ignore_ascii_case("gpu"));
    }

    #[test]
    fn bad_counts_are_errors_naming_the_entry() {
        let err = parse_tres_list("gres:gpu:a40:two").unwrap_err();
        assert_eq!(err.reason, GresParseErrorReason::NotANumber("two".into()));
        assert_eq!(
            err.to_string(),
            "invalid GRES request \"gres:gpu:a40:two\": count \"two\" is not a number"
        );
        let err = parse_tres_list("gres/gpu:a40=x").unwrap_err();
        assert_eq!(err.entry, "gres/gpu:a40=x");
        let err = parse_tres_list("gres:gpu:99999999999999999999").unwrap_err();
        assert!(matches!(err.reason, GresParseErrorReason::Overflow(_)));
        let err = parse_tres_list("gres:gpu:a40:17179869184G").unwrap_err();
        assert!(matches!(err.reason, GresParseErrorReason::Overflow(_)));
        assert!(parse_tres_list("gres:gpu:a40:").is_err());
    }

    #[test]
    fn malformed_structure_is_an_error() {
        let reason = |s| parse_tres_list(s).unwrap_err().reason;
        assert_eq!(reason("gres:"), GresParseErrorReason::EmptyName);
        assert_eq!(reason("gres::2"), GresParseErrorReason::EmptyName);
        assert_eq!(reason("gres:gpu::2"), GresParseErrorReason::EmptyType);
        assert_eq!(reason("gres:gpu:a 40:2"), GresParseErrorReason::BadType);
        assert_eq!(reason("gres:g*u:2"), GresParseErrorReason::BadName);
        assert_eq!(
            reason("gres:gpu:a40:2:3"),
            GresParseErrorReason::TooManyFields
        );
        assert_eq!(
            reason("gres:gpu:a40:2=3"),
            GresParseErrorReason::TooManyFields
        );
    }

    #[test]
    fn one_bad_entry_fails_the_list() {
        assert!(parse_tres_list("gres:gpu:a40:2,gres:mps:x:lots").is_err());
    }

    #[test]
    fn options_render_per_field() {
        let typed = |field, spelling| {
            GpuOption {
                field,
                gpu_type: Some("a40"),
                count: 2,
                spelling,
            }
            .to_string()
        };
        use PerNodeSpelling::{GpusPerNode, Gres, Unknown};
        assert_eq!(typed(TresField::PerNode, Gres), "--gres=gpu:a40:2");
        assert_eq!(
            typed(TresField::PerNode, GpusPerNode),
            "--gpus-per-node=a40:2"
        );
        assert_eq!(
            typed(TresField::PerNode, Unknown),
            "--gres=gpu:a40:2 (or --gpus-per-node=a40:2)"
        );
        for spelling in [Gres, GpusPerNode, Unknown] {
            assert_eq!(typed(TresField::PerJob, spelling), "--gpus=a40:2");
            assert_eq!(
                typed(TresField::PerSocket, spelling),
                "--gpus-per-socket=a40:2"
            );
            assert_eq!(typed(TresField::PerTask, spelling), "--gpus-per-task=a40:2");
        }
        let untyped = GpuOption {
            field: TresField::PerNode,
            gpu_type: None,
            count: 2,
            spelling: GpusPerNode,
        };
        assert_eq!(untyped.to_string(), "--gpus-per-node=2");
    }

    fn field_strategy() -> impl Strategy<Value = TresField> {
        prop::sample::select(TresField::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in ".*") {
            let _ = parse_tres_list(&s);
        }

        #[test]
        fn parsing_gres_shaped_text_never_panics(
            s in "((gres[:/])?[a-z0-9.:=_kKmMgG/-]{0,12},?){0,4}"
        ) {
            if let Ok(list) = parse_tres_list(&s) {
                prop_assert!(list.iter().all(|r| r.count > 0));
            }
        }

        #[test]
        fn rendered_typed_option_round_trips(
            field in field_strategy(),
            ty in "[a-z][a-z0-9_.-]{0,10}",
            count in 1u64..1_000_000,
            slash in any::<bool>(),
        ) {
            let option = GpuOption {
                field, gpu_type: Some(&ty), count, spelling: PerNodeSpelling::Gres,
            }.to_string();
            let tail = option.strip_prefix(field.gpu_option_prefix()).unwrap();
            // Slurm stores every GPU option as a `gres` entry of its field.
            let stored = format!("gres{}gpu:{tail}", if slash { '/' } else { ':' });
            let list = parse_tres_list(&stored).unwrap();
            prop_assert_eq!(list, vec![GresRequest { name: "gpu", gres_type: Some(&ty), count }]);
        }
    }

    #[test]
    fn gpus_of_a_tres_string_by_type() {
        let typed = gpus_of_tres("cpu=4,mem=8G,gres/gpu=3,gres/gpu:a40=2,gres/gpu:h100=1");
        assert_eq!(
            typed,
            [(Some("a40".to_owned()), 2), (Some("h100".to_owned()), 1)]
        );
        assert_eq!(gpus_of_type(&typed, Some("a40")), 2);
        assert_eq!(gpus_of_type(&typed, Some("l40s")), 0);
        assert_eq!(gpus_of_type(&typed, None), 3);
        assert_eq!(gpus_of_tres("cpu=1,gres/gpu=1"), [(None, 1)]);
        assert_eq!(gpus_of_tres("cpu=1,gres/gpu=0,gres/gpu:=2,x"), []);
        assert_eq!(gpu_words(&typed), "2 a40, 1 h100");
        assert_eq!(gpu_words(&gpus_of_tres("gres/gpu=1")), "1 GPU");
        assert_eq!(gpu_words(&[]), "no GPU");
    }

    #[test]
    fn held_gpus_in_words() {
        let use_of = |gpu_type: &str, limit, held| TypeUse {
            gpu_type: gpu_type.to_owned(),
            limit,
            held,
        };
        assert_eq!(
            held_words(&[use_of("a40", 4, 2), use_of("h100", 2, 0)]),
            "2 of 4 a40 held, 0 of 2 h100 held"
        );
        assert_eq!(held_words(&[]), "");
    }
}
