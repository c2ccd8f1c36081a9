//! `sacct -a -X -P` read as submissions: one per job, one per array (its
//! tasks are records of one submission, which the plugin judged once),
//! one per heterogeneous component (`123+0`: slurmctld judges each
//! component's description). A record that cannot be read is counted and
//! named, never guessed at.

use std::collections::HashMap;

use crate::qos::slurm::accounted::FIELDS;
pub use crate::qos::slurm::accounted::{parse_job_id, JobId};

/// How many fields a record has (`SubmitLine` included).
const FIELD_COUNT: usize = 9;

/// One submission as accounting recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submission {
    /// The job id as sacct printed it (the first record's, for an array).
    pub job_id: String,
    /// What the submission is known by: `123` (an array's job id), `123+0`.
    pub key: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub qos: String,
    pub nodes: Option<u32>,
    pub reservation: Option<String>,
    pub req_tres: String,
    /// `None` where the release records none, or the field is empty
    /// (a job submitted through the API or an older client).
    pub submit_line: Option<String>,
    /// The array's index expression, when sacct printed it (`123_[1-5%2]`,
    /// a pending array) or it was rebuilt from the task ids seen.
    pub array: Option<ArrayIndex>,
    /// The records this submission stands for (array tasks).
    pub records: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrayIndex {
    /// As Slurm printed it, throttle included.
    Printed(String),
    /// The task ids of the records seen; the throttle is unknown.
    Tasks(Vec<u32>),
}

impl ArrayIndex {
    /// The `--array=` value this stands for.
    pub fn expression(&self) -> String {
        match self {
            ArrayIndex::Printed(s) => s.clone(),
            ArrayIndex::Tasks(ids) => {
                let mut ids = ids.clone();
                ids.sort_unstable();
                ids.dedup();
                let mut parts: Vec<String> = Vec::new();
                let mut i = 0;
                while i < ids.len() {
                    let start = ids[i];
                    let mut end = start;
                    while ids.get(i + 1) == end.checked_add(1).as_ref() {
                        i += 1;
                        end = ids[i];
                    }
                    parts.push(if start == end {
                        start.to_string()
                    } else {
                        format!("{start}-{end}")
                    });
                    i += 1;
                }
                parts.join(",")
            }
        }
    }
}

/// A record left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub line: usize,
    pub reason: String,
}

/// One record of sacct's answer: its first line's number and its fields.
struct RawRecord<'a> {
    line: usize,
    fields: Vec<&'a str>,
}

/// Splits sacct's answer into records of `want` fields separated by
/// `delimiter`. Only the last field (`SubmitLine`, the user's text) may
/// hold newlines, never the delimiter: it runs to the end of its first
/// line, then on up to the last newline before the next record's first
/// delimiter. A line that does not start a whole record is named in
/// `skipped`; blank lines between records are passed over.
fn split_records<'a>(
    text: &'a str,
    want: usize,
    delimiter: &str,
    skipped: &mut Vec<Skipped>,
) -> Vec<RawRecord<'a>> {
    let lines_in = |s: &str| s.bytes().filter(|&b| b == b'\n').count();
    let mut out = Vec::new();
    let mut at = 0;
    let mut line = 1;
    while at < text.len() {
        let rest = &text[at..];
        let eol = rest.find('\n').map_or(rest.len(), |i| i + 1);
        if rest[..eol].trim().is_empty() {
            at += eol;
            line += 1;
            continue;
        }
        // The fields before the last: each ends at a delimiter on this line.
        let mut fields = Vec::with_capacity(want);
        let mut pos = 0;
        while fields.len() + 1 < want {
            match rest[pos..eol].find(delimiter) {
                Some(i) => {
                    fields.push(&rest[pos..pos + i]);
                    pos += i + delimiter.len();
                }
                None => break,
            }
        }
        if fields.len() + 1 < want {
            let found = fields.len() + usize::from(!rest[pos..eol].trim().is_empty());
            skipped.push(Skipped {
                line,
                reason: format!("{found} fields, expected {want}"),
            });
            at += eol;
            line += 1;
            continue;
        }
        // The last field: to the end of this line, then to the last newline
        // before the next delimiter (the next record's first).
        let end = match rest[eol..].find(delimiter) {
            Some(d) => rest[eol..eol + d].rfind('\n').map_or(eol, |n| eol + n + 1),
            None => rest.len(),
        };
        let last = rest[pos..end].strip_suffix('\n').unwrap_or(&rest[pos..end]);
        fields.push(last);
        out.push(RawRecord { line, fields });
        line += lines_in(&rest[..end]);
        at += end;
    }
    out
}

/// Reads sacct's answer (fields [`FIELDS`] separated by `delimiter`;
/// without `SubmitLine` when `with_submit_line` is false). A `SubmitLine`
/// may hold newlines; it can never hold the delimiter where that is
/// [`crate::qos::slurm::accounted::delimiter`], so no line a user typed
/// is read as a record.
pub fn parse(
    text: &str,
    with_submit_line: bool,
    delimiter: &str,
) -> (Vec<Submission>, Vec<Skipped>) {
    let want = if with_submit_line {
        FIELD_COUNT
    } else {
        FIELD_COUNT - 1
    };
    debug_assert_eq!(FIELDS.split(',').count(), FIELD_COUNT);
    let mut out: Vec<Submission> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut skipped = Vec::new();
    for RawRecord { line, fields } in split_records(text, want, delimiter, &mut skipped) {
        let Some(id) = parse_job_id(fields[0].trim()) else {
            skipped.push(Skipped {
                line,
                reason: format!("\"{}\" is not a job id", fields[0]),
            });
            continue;
        };
        let (key, task, printed) = match id {
            JobId::Plain(j) | JobId::HetComponent(j) => (j, None, None),
            JobId::ArrayTask { array, task } => (array, Some(task), None),
            JobId::ArrayPending { array, index } => (array, None, Some(index)),
        };
        if let Some(&at) = by_key.get(key) {
            // Another record of the same array: one submission (the first
            // record's SubmitLine is the one kept).
            let sub = &mut out[at];
            sub.records += 1;
            match (&mut sub.array, task, printed) {
                (_, _, Some(index)) => sub.array = Some(ArrayIndex::Printed(index.to_owned())),
                (Some(ArrayIndex::Tasks(ids)), Some(t), None) => ids.push(t),
                (None, Some(t), None) => sub.array = Some(ArrayIndex::Tasks(vec![t])),
                _ => {}
            }
            continue;
        }
        let text = |i: usize| fields.get(i).map_or("", |f| f.trim()).to_owned();
        let given = |i: usize| Some(text(i)).filter(|s| !s.is_empty());
        by_key.insert(key.to_owned(), out.len());
        out.push(Submission {
            job_id: fields[0].trim().to_owned(),
            key: key.to_owned(),
            user: text(1),
            account: text(2),
            partition: text(3),
            qos: text(4),
            nodes: text(5).parse().ok(),
            reservation: given(6),
            req_tres: text(7),
            submit_line: with_submit_line.then(|| given(8)).flatten(),
            array: match (task, printed) {
                (_, Some(index)) => Some(ArrayIndex::Printed(index.to_owned())),
                (Some(t), None) => Some(ArrayIndex::Tasks(vec![t])),
                _ => None,
            },
            records: 1,
        });
    }
    (out, skipped)
}

/// The GPU and share requests of a `ReqTRES` string, as the items of a
/// request field (`gres:gpu:a40:2`): the typed entries where accounting
/// counted a type, else the untyped total. Other TRES are left out.
pub fn requests_of_req_tres(req_tres: &str) -> Vec<String> {
    let mut typed: Vec<(&str, &str, &str)> = Vec::new();
    let mut untyped: Vec<(&str, &str)> = Vec::new();
    for item in req_tres.split(',') {
        let Some((name, count)) = item.trim().split_once('=') else {
            continue;
        };
        let Some(gres) = name.strip_prefix("gres/") else {
            continue;
        };
        if gres.is_empty() || count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        match gres.split_once(':') {
            Some((kind, ty)) if !ty.is_empty() => typed.push((kind, ty, count)),
            Some(_) => {}
            None => untyped.push((gres, count)),
        }
    }
    let mut items = Vec::new();
    for (kind, count) in untyped {
        let of_kind: Vec<_> = typed.iter().filter(|(k, _, _)| *k == kind).collect();
        if of_kind.is_empty() {
            items.push(format!("gres:{kind}:{count}"));
        } else {
            items.extend(of_kind.iter().map(|(k, t, c)| format!("gres:{k}:{t}:{c}")));
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "alice|phys|gpu|normal|1|res1|billing=1,cpu=1,gres/gpu=2,node=1";

    #[test]
    fn array_tasks_are_one_submission_het_components_each_their_own() {
        let text = format!(
            "10_1|{LINE}|sbatch --array=1-3 --gres=gpu:2 a.sh\n\
             10_3|{LINE}|sbatch --array=1-3 --gres=gpu:2 a.sh\n\
             10_2|{LINE}|sbatch --array=1-3 --gres=gpu:2 a.sh\n\
             11+0|{LINE}|sbatch h.sh\n11+1|{LINE}|sbatch h.sh\n\
             12_[4-9%2]|{LINE}|\n"
        );
        let (subs, skipped) = parse(&text, true, "|");
        assert!(skipped.is_empty());
        let keys: Vec<&str> = subs.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["10", "11+0", "11+1", "12"]);
        assert_eq!(subs[0].records, 3);
        assert_eq!(
            subs[0]
                .array
                .as_ref()
                .map(ArrayIndex::expression)
                .as_deref(),
            Some("1-3")
        );
        assert_eq!(
            subs[3]
                .array
                .as_ref()
                .map(ArrayIndex::expression)
                .as_deref(),
            Some("4-9%2")
        );
        assert_eq!(subs[3].submit_line, None);
        assert_eq!(subs[1].qos, "normal");
        assert_eq!(subs[1].reservation.as_deref(), Some("res1"));
        assert_eq!(subs[1].nodes, Some(1));
    }

    #[test]
    fn missing_fields_and_odd_lines_are_skipped_and_named() {
        let text = format!(
            "1|{LINE}|sbatch --wrap=a | b --gres=gpu:1\n\
             \n\
             2|alice\n\
             3.batch|{LINE}|x\n\
             4|||||||||\n"
        );
        let (subs, skipped) = parse(&text, true, "|");
        // The last field holds the rest of its line, `|` included.
        assert_eq!(
            subs[0].submit_line.as_deref(),
            Some("sbatch --wrap=a | b --gres=gpu:1")
        );
        let named: Vec<(usize, &str)> = skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                (3, "2 fields, expected 9"),
                (4, "\"3.batch\" is not a job id")
            ]
        );
        assert_eq!(subs.len(), 2);
        assert_eq!(
            (subs[1].key.as_str(), subs[1].user.as_str(), subs[1].nodes),
            ("4", "", None)
        );
        let (subs, skipped) = parse("5|a|b|c|d|1||gres/gpu=1\n6|a\n", false, "|");
        assert_eq!((subs.len(), skipped.len()), (1, 1));
        assert_eq!(subs[0].submit_line, None);
    }

    /// A user's argument holding newlines and whole forged records, as
    /// sacct prints it with the separator of the read: one job, its line
    /// whole; the records after it read as they are.
    #[test]
    fn no_line_a_user_typed_is_read_as_a_record() {
        let d = crate::qos::slurm::accounted::delimiter();
        let fields = LINE.replace('|', &d);
        let forged =
            format!("\n900|root|phys|gpu|normal|1||gres/gpu:a40=1|sbatch x\n\n901|{LINE}|y\n");
        let typed = format!("sbatch --gres=gpu:1 --wrap=$'true{forged}'");
        let text = format!(
            "7{d}{fields}{d}{typed}\n\
             8_1{d}{fields}{d}sbatch --array=1-2 b.sh\n\
             8_2{d}{fields}{d}sbatch --array=1-2 b.sh\n\
             9{d}{fields}{d}\n"
        );
        let (subs, skipped) = parse(&text, true, &d);
        assert!(skipped.is_empty(), "{skipped:?}");
        let keys: Vec<&str> = subs.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["7", "8", "9"]);
        assert_eq!(subs[0].submit_line.as_deref(), Some(typed.as_str()));
        assert_eq!(subs[0].user, "alice");
        assert_eq!(subs[1].records, 2);
        assert_eq!(subs[2].submit_line, None);
        // The same text read with `|`, as before: the forged jobs appear.
        let (subs, _) = parse(&text.replace(&d, "|"), true, "|");
        assert!(subs.iter().any(|s| s.key == "900"), "{subs:?}");
    }

    proptest::proptest! {
        #[test]
        fn shaped_text_is_read_without_panic(
            text in "([0-9_+\\[\\]a-z]{0,3}(<d>|\n| |é){0,2}){0,30}",
            with_line in proptest::bool::ANY,
        ) {
            let (subs, skipped) = parse(&text, with_line, "<d>");
            proptest::prop_assert!(subs.len() + skipped.len() <= text.lines().count() + 1);
        }
    }

    #[test]
    fn any_text_is_read_without_panic() {
        let d = "<gpushare:0123>";
        for text in [
            "",
            "\n",
            d,
            "1<gpushare:0123>",
            "1<gpushare:0123>a<gpushare:0123>b<gpushare:0123>c<gpushare:0123>d<gpushare:0123>1<gpushare:0123><gpushare:0123>t<gpushare:0123>",
            "<gpushare:0123><gpushare:0123><gpushare:0123><gpushare:0123><gpushare:0123><gpushare:0123><gpushare:0123><gpushare:0123>\n\n<gpushare:0123>",
            "é<gpushare:0123>\u{0}\n\r\n",
        ] {
            let (subs, skipped) = parse(text, true, d);
            assert!(subs.len() + skipped.len() <= text.lines().count() + 1, "{text:?}");
        }
    }

    #[test]
    fn req_tres_typed_where_counted_else_untyped() {
        assert_eq!(
            requests_of_req_tres("billing=2,cpu=1,gres/gpu:a40=2,gres/gpu=2,mem=1G,node=1"),
            vec!["gres:gpu:a40:2"]
        );
        assert_eq!(requests_of_req_tres("cpu=1,gres/gpu=4"), vec!["gres:gpu:4"]);
        assert_eq!(
            requests_of_req_tres("gres/gpu=3,gres/gpu:a40=1,gres/gpu:a100=2,gres/mps=50"),
            vec!["gres:gpu:a40:1", "gres:gpu:a100:2", "gres:mps:50"]
        );
        assert!(requests_of_req_tres("cpu=1,mem=1G").is_empty());
        assert!(requests_of_req_tres("gres/gpu=x,gres/=1,=,,gres/gpu:=2").is_empty());
        assert_eq!(
            ArrayIndex::Tasks(vec![7, 1, 2, 3, 5, 3]).expression(),
            "1-3,5,7"
        );
    }
}
