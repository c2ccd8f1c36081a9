use super::*;

fn row(what: &str, keys: &[Key]) -> Row {
    Row {
        what: what.to_owned(),
        figure: format!("{what} figure"),
        command: "cargo bench -p gpushare-tests --bench placement -- 300".to_owned(),
        keys: keys.to_vec(),
    }
}

fn run(rows: Vec<Row>) -> Run {
    Run {
        day: "2026-11-28".to_owned(),
        machine: "2 cores, Slurm 22.05.8".to_owned(),
        rows,
    }
}

#[test]
fn a_row_line_is_read_back_as_printed() {
    let r = row(
        "prolog + epilog",
        &[
            Key::lower("pair", 7.7312, "ms"),
            Key::higher("rate", 27.04, "jobs/s"),
        ],
    );
    let line = r.line();
    assert_eq!(
        line,
        "ROW|prolog + epilog|prolog + epilog figure|cargo bench -p gpushare-tests --bench placement -- 300|pair=7.731 ms lower; rate=27.04 jobs/s higher"
    );
    let back = Row::parse_line(&line).expect("a row").expect("read");
    assert_eq!(back.keys[0].value, 7.731);
    assert_eq!(back.keys[1].better, Better::Higher);
    assert!(Row::parse_line("prolog + epilog = 6.33x").is_none());
}

#[test]
fn significant_digits() {
    assert_eq!(significant(7.7312), "7.731");
    assert_eq!(significant(1234.56), "1235");
    assert_eq!(significant(0.15812), "0.1581");
    assert_eq!(significant(50.0), "50");
    assert_eq!(significant(0.0), "0");
}

#[test]
fn rows_without_keys_or_with_bad_ones_are_errors() {
    for bad in [
        "ROW|a|b|c",
        "ROW|a|b|c|",
        "ROW|a|b|c|pair=7 ms",
        "ROW|a|b|c|pair=x ms lower",
        "ROW|a|b|c|pair=inf ms lower",
        "ROW|a|b|c|=7 ms lower",
        "ROW|a|b|c|pair=7 ms sideways",
    ] {
        assert!(
            matches!(Row::parse_line(bad), Some(Err(_))),
            "{bad} was taken"
        );
    }
}

#[test]
fn over_a_fifth_worse_is_marked_either_way_of_better() {
    let old = row(
        "r",
        &[
            Key::lower("ms", 10.0, "ms"),
            Key::higher("rate", 40.0, "jobs/s"),
        ],
    );
    let same = change(Some(&old), &old);
    assert_eq!(same, "ms +0 %, rate +0 %");
    let slower = row(
        "r",
        &[
            Key::lower("ms", 12.5, "ms"),
            Key::higher("rate", 40.0, "jobs/s"),
        ],
    );
    assert!(change(Some(&old), &slower).contains("over 20 % worse"));
    let fewer = row(
        "r",
        &[
            Key::lower("ms", 10.0, "ms"),
            Key::higher("rate", 32.0, "jobs/s"),
        ],
    );
    assert_eq!(
        change(Some(&old), &fewer),
        "ms +0 %, rate -20 %",
        "a fifth fewer jobs/s is not over 20 % worse"
    );
    let fewer = row(
        "r",
        &[
            Key::lower("ms", 10.0, "ms"),
            Key::higher("rate", 31.0, "jobs/s"),
        ],
    );
    assert!(change(Some(&old), &fewer).contains("over 20 % worse"));
    let better = row(
        "r",
        &[
            Key::lower("ms", 5.0, "ms"),
            Key::higher("rate", 80.0, "jobs/s"),
        ],
    );
    assert_eq!(change(Some(&old), &better), "ms -50 %, rate +100 %");
    assert_eq!(change(None, &better), "new");
}

#[test]
fn a_fall_to_nothing_is_marked_and_a_rise_from_nothing_is_not_a_ratio() {
    let old = row("r", &[Key::higher("rate", 40.0, "jobs/s")]);
    let none = row("r", &[Key::higher("rate", 0.0, "jobs/s")]);
    assert!(change(Some(&old), &none).contains("over 20 % worse"));
    let from_zero = row("r", &[Key::lower("wait", 0.0, "ms")]);
    let to_some = row("r", &[Key::lower("wait", 2.0, "ms")]);
    assert_eq!(change(Some(&from_zero), &to_some), "wait 0 → 2");
}

#[test]
fn the_file_is_read_back_as_written_and_a_run_replaces_its_benchmark_only() {
    let kept = Figures {
        runs: vec![
            (
                "placement".to_owned(),
                run(vec![row("a", &[Key::lower("x", 1.0, "ms")])]),
            ),
            (
                "replay".to_owned(),
                run(vec![row("b", &[Key::lower("y", 2.0, "s")])]),
            ),
        ],
    };
    let text = kept.text();
    assert_eq!(Figures::parse(&text), Ok(kept.clone()));
    let new = vec![(
        "replay".to_owned(),
        Run {
            day: "2026-12-01".to_owned(),
            ..run(vec![row("c", &[Key::lower("y", 3.0, "s")])])
        },
    )];
    let updated = kept.updated(&new);
    assert_eq!(updated.runs[0], kept.runs[0]);
    assert_eq!(updated.runs[1], new[0]);
    let first = vec![("job_submit_call".to_owned(), run(Vec::new()))];
    let updated = updated.updated(&first);
    assert_eq!(
        updated.runs[2].0, "job_submit_call",
        "a new benchmark comes last"
    );
    let table = comparison(&kept, &new);
    assert!(table.contains("| c | c figure | new |"), "{table}");
    assert!(
        table.contains("| b | (no longer measured; was b figure) | gone |"),
        "{table}"
    );
}

#[test]
fn a_bad_file_line_is_named_by_its_number() {
    let err = Figures::parse("# head\n@placement|2026-11-28|2 cores\na|b|c|x=1 ms up\n");
    assert!(
        err.as_ref()
            .is_err_and(|e| e.starts_with("tests/bench/figures.txt:3: ")),
        "{err:?}"
    );
    let err = Figures::parse("a|b|c|x=1 ms lower\n");
    assert!(err.is_err_and(|e| e.contains("before any @bench")));
}

#[test]
fn the_doc_table_says_same_for_a_repeated_command_and_when_each_ran() {
    let figures = Figures {
        runs: vec![(
            "placement".to_owned(),
            run(vec![
                row("a", &[Key::lower("x", 1.0, "ms")]),
                row("b", &[Key::lower("x", 1.0, "ms")]),
            ]),
        )],
    };
    let table = doc_table(&figures);
    assert!(table.contains("| a | a figure | `cargo bench"), "{table}");
    assert!(table.contains("| b | b figure | same |"), "{table}");
    assert!(table.contains("Measured: placement on 2026-11-28, 2 cores, Slurm 22.05.8."));
    let doc = format!("# Performance\n\nintro\n\n{DOC_BEGIN}\nold\n{DOC_END}\n\nprose\n");
    let new = with_doc_table(&doc, &table).expect("markers");
    assert!(new.starts_with("# Performance\n\nintro\n\n"));
    assert!(new.ends_with(&format!("{DOC_END}\n\nprose\n")));
    assert!(!new.contains("old"));
    assert!(with_doc_table("no markers", &table).is_err());
}

/// docs/performance.md quotes exactly the kept figures: a number the
/// benchmarks no longer give cannot stay in its table.
#[test]
fn the_performance_page_is_made_from_the_kept_figures() {
    let figures = Figures::parse(include_str!("../../bench/figures.txt")).expect("figures.txt");
    assert!(!figures.runs.is_empty());
    let doc = include_str!("../../../docs/performance.md");
    let made = with_doc_table(doc, &doc_table(&figures)).expect("markers");
    assert!(
        made == doc,
        "docs/performance.md's table is not what tests/bench/figures.txt makes: run \
         `make bench-doc` (or make bench) and commit both"
    );
}
