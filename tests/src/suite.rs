//! The runner of each integration test binary (`harness = false`).
//!
//! One cluster per binary, started only if some test passes the filter;
//! tests run in order against it (a test added with `test_on` gets a
//! cluster of its own instead); the suite's `reset` (if it has one) runs
//! before each test on the shared cluster but the first, so that every
//! test starts from the state the suite defines; a failing test prints the tail of every
//! daemon log; the binary ends with `N passed, N failed` and a non-zero exit
//! status on any failure. A test needing something this machine lacks fails:
//! nothing is skipped silently. A test added with `test_on_request` needs
//! what only another script sets up (`tests/package_test.sh`): it runs only
//! where a filter names it in full, and then fails if that is missing.
//! A test marked with `smoke` is part of the suite's smoke: with
//! `GPUSHARE_TEST_SMOKE=1` (`tests/release_suite.sh`'s `smoke` word, how
//! `make test` covers a release without running every test there) only
//! those run, and a suite with none fails rather than pass on nothing.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::Instant;

use crate::cluster::{Cluster, ClusterSpec};
use crate::guard_message;

/// What a test returns: `Err(message)` fails it (so do panics).
pub type TestResult = crate::Result<()>;

type TestFn = Box<dyn FnOnce(&mut Cluster) -> TestResult>;
type ResetFn = Box<dyn Fn(&mut Cluster) -> TestResult>;

/// Tests sharing one cluster, and tests with a cluster of their own.
pub struct Suite {
    spec: ClusterSpec,
    /// A test with a spec of its own gets a fresh cluster from it.
    tests: Vec<(&'static str, Option<ClusterSpec>, TestFn)>,
    /// Tests run only where a filter names them in full.
    on_request: Vec<&'static str>,
    /// The suite's smoke: what runs under `GPUSHARE_TEST_SMOKE=1`.
    smoke: Vec<&'static str>,
    /// Brings the shared cluster back to the suite's starting state.
    reset: Option<ResetFn>,
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("tests", &self.tests.iter().map(|t| t.0).collect::<Vec<_>>())
            .finish()
    }
}

impl Suite {
    pub fn new(spec: ClusterSpec) -> Self {
        Self {
            spec,
            tests: Vec::new(),
            on_request: Vec::new(),
            smoke: Vec::new(),
            reset: None,
        }
    }

    /// What runs before every test on the suite's shared cluster but the
    /// first (which finds it fresh): cancel what earlier tests left
    /// running, wait for their epilogs. A failing reset fails the test it
    /// came before. Without one, nothing runs between tests. Tests with a
    /// cluster of their own (`test_on`) start fresh and are not reset.
    pub fn reset(mut self, f: impl Fn(&mut Cluster) -> TestResult + 'static) -> Self {
        self.reset = Some(Box::new(f));
        self
    }

    /// Adds a test; tests run in the order added.
    pub fn test(
        mut self,
        name: &'static str,
        f: impl FnOnce(&mut Cluster) -> TestResult + 'static,
    ) -> Self {
        self.tests.push((name, None, Box::new(f)));
        self
    }

    /// Adds a test that runs on a cluster of its own, started from `spec`
    /// (a site that differs from the suite's from the start) and stopped
    /// after it.
    pub fn test_on(
        mut self,
        name: &'static str,
        spec: ClusterSpec,
        f: impl FnOnce(&mut Cluster) -> TestResult + 'static,
    ) -> Self {
        self.tests.push((name, Some(spec), Box::new(f)));
        self
    }

    /// [`Self::test_on`], run only where a filter names it in full (as
    /// [`Self::test_on_request`]): its doc says why.
    pub fn test_on_on_request(
        mut self,
        name: &'static str,
        spec: ClusterSpec,
        f: impl FnOnce(&mut Cluster) -> TestResult + 'static,
    ) -> Self {
        self.on_request.push(name);
        self.test_on(name, spec, f)
    }

    /// Adds a test on the suite's cluster that runs only where a filter
    /// names it in full: it needs what another script prepares (its doc
    /// says which) and fails where that is missing.
    pub fn test_on_request(
        mut self,
        name: &'static str,
        f: impl FnOnce(&mut Cluster) -> TestResult + 'static,
    ) -> Self {
        self.on_request.push(name);
        self.test(name, f)
    }

    /// Marks the test added last as part of the suite's smoke: the few
    /// tests that show, on a release `make test` does not run in full,
    /// that the suite's ground holds there (its cluster starts with the
    /// plugins, its main path works).
    pub fn smoke(mut self) -> Self {
        if let Some((name, _, _)) = self.tests.last() {
            self.smoke.push(name);
        }
        self
    }

    /// Runs the selected tests (each non-flag argument a name substring,
    /// like libtest's filter) and reports.
    pub fn run(self) -> ExitCode {
        // A bad time scale stops the run here, before any cluster starts.
        crate::time::scale();
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--list") {
            for (name, _, _) in &self.tests {
                if self.on_request.contains(name) {
                    println!("{name}: test (on request: named in full)");
                } else if self.smoke.contains(name) {
                    println!("{name}: test (smoke)");
                } else {
                    println!("{name}: test");
                }
            }
            return ExitCode::SUCCESS;
        }
        // Every non-flag argument is a filter; a test runs if its name
        // contains any of them.
        let filters: Vec<&str> = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .map(String::as_str)
            .collect();
        let smoke_only = std::env::var("GPUSHARE_TEST_SMOKE").as_deref() == Ok("1");
        if smoke_only && self.smoke.is_empty() {
            println!("GPUSHARE_TEST_SMOKE=1, but this suite marks no test as its smoke");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
        let on_request = self.on_request;
        let smoke = self.smoke;
        let reset = self.reset;
        let selected: Vec<_> = self
            .tests
            .into_iter()
            .filter(|(name, _, _)| {
                selects(
                    name,
                    &filters,
                    on_request.contains(name),
                    smoke_only.then_some(smoke.contains(name)),
                )
            })
            .collect();
        if selected.is_empty() {
            // A smoke that runs nothing on this release proves nothing.
            if smoke_only {
                println!("GPUSHARE_TEST_SMOKE=1, but no test of this suite's smoke runs here");
                println!("0 passed, 1 failed");
                return ExitCode::FAILURE;
            }
            println!("0 passed, 0 failed");
            return ExitCode::SUCCESS;
        }
        let shared = selected.iter().filter(|t| t.1.is_none()).count();
        let own = selected.len() - shared;
        if own == 0 {
            println!("\nstarting a Slurm test cluster for {shared} tests");
        } else {
            println!("\nstarting a Slurm test cluster for {shared} tests, and one for each of {own} more");
        }
        let mut cluster = if shared == 0 {
            None
        } else {
            match self.spec.start() {
                Ok(c) => Some(c),
                Err(e) => {
                    println!("cluster did not start:\n{e}");
                    println!("0 passed, {} failed", selected.len());
                    return ExitCode::FAILURE;
                }
            }
        };
        let (mut passed, mut failed) = (0, Vec::new());
        // Whether a test has run on the shared cluster (the next one is reset).
        let mut shared_used = false;
        for (name, own_spec, test) in selected {
            let started = Instant::now();
            let mut own = None;
            if let Some(spec) = own_spec {
                match spec.start() {
                    Ok(c) => own = Some(c),
                    Err(e) => {
                        println!("test {name} ... FAILED: its cluster did not start:\n{e}");
                        failed.push(name);
                        continue;
                    }
                }
            }
            let on_shared = own.is_none();
            let Some(c) = own.as_mut().or(cluster.as_mut()) else {
                failed.push(name);
                continue;
            };
            let reset_first = reset.as_ref().filter(|_| on_shared && shared_used);
            shared_used |= on_shared;
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                if let Some(r) = reset_first {
                    r(c).map_err(|e| format!("the suite's reset before it failed: {e}"))?;
                }
                test(c)
            }))
            .unwrap_or_else(|p| Err(format!("panicked: {}", guard_message(p.as_ref()))));
            let secs = started.elapsed().as_secs_f64();
            match outcome {
                Ok(()) => {
                    println!("test {name} ... ok ({secs:.1}s)");
                    passed += 1;
                }
                Err(e) => {
                    println!(
                        "test {name} ... FAILED ({secs:.1}s)\n{e}\n{}",
                        c.log_tails(40)
                    );
                    failed.push(name);
                    // A node the failure left drained would fail every
                    // test after it on the shared cluster: resumed, said.
                    if on_shared {
                        match c.resume_drained() {
                            Ok(nodes) if nodes.is_empty() => {}
                            Ok(nodes) => println!(
                                "(it left {} drained: resumed for the tests after it)",
                                nodes.join(", ")
                            ),
                            Err(e) => println!("(drained nodes not resumed: {e})"),
                        }
                    }
                }
            }
        }
        drop(cluster);
        if !failed.is_empty() {
            println!("\nfailures: {}", failed.join(", "));
        }
        println!("{passed} passed, {} failed", failed.len());
        if failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

/// Whether a test named `name` runs: it passes the filters (a name
/// substring each; none: every test) or, on request only, is named by one
/// in full; under a smoke run (`smoke` is `Some(marked)`) it must also be
/// marked as the suite's smoke.
fn selects(name: &str, filters: &[&str], on_request: bool, smoke: Option<bool>) -> bool {
    let filtered = if on_request {
        filters.contains(&name)
    } else {
        filters.is_empty() || filters.iter().any(|f| name.contains(f))
    };
    filtered && smoke.unwrap_or(true)
}

/// Fails with `msg` unless `cond`.
pub fn ensure(cond: bool, msg: impl Into<String>) -> TestResult {
    if cond {
        Ok(())
    } else {
        Err(msg.into())
    }
}

#[cfg(test)]
mod tests {
    use super::selects;

    #[test]
    fn a_smoke_run_takes_only_marked_tests_that_pass_the_filter() {
        assert!(selects("a_test", &[], false, None));
        assert!(selects("a_test", &[], false, Some(true)));
        assert!(!selects("a_test", &[], false, Some(false)));
        assert!(selects("a_test", &["test"], false, Some(true)));
        assert!(!selects("a_test", &["other"], false, Some(true)));
        // On request: only where a filter names it in full, smoke or not.
        assert!(!selects("upgrade", &[], true, None));
        assert!(!selects("upgrade", &[], true, Some(true)));
        assert!(!selects("upgrade", &["upgr"], true, None));
        assert!(selects("upgrade", &["upgrade"], true, Some(true)));
        assert!(!selects("upgrade", &["upgrade"], true, Some(false)));
    }
}
