//! `make bench`'s memory (`testcluster::bench_figures`): compares the
//! benchmarks just run with the figures kept in the repository, prints the
//! table with the change of each row, then keeps the new figures and
//! remakes docs/performance.md's table from them.
//!
//! `bench-figures --results target/bench --day 2026-11-28 --machine "2 cores, Slurm 22.05.8" BENCH...`
//! (each BENCH's output in RESULTS/BENCH.txt; the order is the file's);
//! `bench-figures --doc-only` remakes the page from the kept figures.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use testcluster::bench_figures::{
    comparison, doc_table, rows_of_output, with_doc_table, Figures, Run,
};

const FIGURES: &str = "tests/bench/figures.txt";
const DOC: &str = "docs/performance.md";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-figures: {e}");
            ExitCode::FAILURE
        }
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Replaces `path` whole (a temporary file beside it, then a rename).
fn write(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("bench-figures.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut results, mut day, mut machine) = (PathBuf::from("target/bench"), None, None);
    let mut benches = Vec::new();
    let mut doc_only = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--results" => results = args.next().ok_or("--results takes a folder")?.into(),
            "--day" => day = Some(args.next().ok_or("--day takes YYYY-MM-DD")?),
            "--machine" => machine = Some(args.next().ok_or("--machine takes words")?),
            "--doc-only" => doc_only = true,
            a if a.starts_with('-') => return Err(format!("unknown option {a}")),
            bench => benches.push(bench.to_owned()),
        }
    }
    let kept = Figures::parse(&read(Path::new(FIGURES))?)?;
    let figures = if doc_only {
        kept
    } else {
        let day = day.ok_or("--day is needed")?;
        let machine = machine.ok_or("--machine is needed")?;
        let mut new = Vec::new();
        for bench in &benches {
            let path = results.join(format!("{bench}.txt"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let rows = rows_of_output(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            if rows.is_empty() {
                return Err(format!("{}: no ROW| line", path.display()));
            }
            new.push((
                bench.clone(),
                Run {
                    day: day.clone(),
                    machine: machine.clone(),
                    rows,
                },
            ));
        }
        println!("{}", comparison(&kept, &new));
        let updated = kept.updated(&new);
        write(Path::new(FIGURES), &updated.text())?;
        println!("(kept in {FIGURES}; {DOC} made from it: commit both)");
        updated
    };
    let doc = read(Path::new(DOC))?;
    write(Path::new(DOC), &with_doc_table(&doc, &doc_table(&figures))?)
}
