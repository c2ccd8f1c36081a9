# gpushare — build, test and install the Slurm plugins.
#
#   make demo      install dependencies, build, install into a staging tree,
#                  run the narrated demo cluster (KEEP=1: leave it running)
#   make check     for every change (~10 min here): lints, unit and property
#                  tests, the real-cluster suites on this machine's Slurm
#   make test      CI's command: check's suites, then every other release
#                  (Debian's, SchedMD's built from source and RPMs: the
#                  load check, the oracle, every suite's smoke) and the
#                  packages, in eight lanes side by side (~35 min)
#   make test-all  every release on both cgroup versions in full
#   make test-smd  (on request) gpushare's Debian packages built from the source
#                  release on SchedMD's slurm-smd packages, and tested there
#   make test-slurm-atf  (on request) SchedMD's own Python tests of GPUs,
#                  MPS, shards, job_submit, SPANK and namespaces, without and
#                  with gpushare (docs/atf.md)
#   make check-releases  build the plugins warnings-free against the headers
#                  of every other Slurm release (Debian's 24.11 and 26.05,
#                  SchedMD's 23.02 to 26.05 and the 26.11 pre-release built
#                  from source)
#   make build     release build of the plugins and tools
#   make install   install (DESTDIR, PREFIX, PLUGINDIR, NOBUILD=1)
#   make deps      (developers) install, on Debian, whatever the tests and
#                  the demo need that is missing (demo, test, check run it)
#
# build, install, deb, dist and rpm never install anything: they check what
# they need (packaging/need.sh) and name whatever is missing.
#   make uninstall remove exactly what install put there
#   make deb       Debian packages pinned to the Slurm they run (SUITE=host|trixie|sid)
#   make dist      the source release: every crate vendored, the RPM spec inside
#   make rpm       RPM packages for the Slurm whose slurm-devel is installed
#   make release   check that the version agrees everywhere, then make dist
#                  and its sha256; prints the tag command (release-check: a
#                  rehearsal on an uncommitted tree)
#   make bench     every benchmark side by side with what a site would use,
#                  then one table (figures and the command for each row)
#   make hw-check  (root, on an NVIDIA GPU node, no Slurm) the MPS half on the
#                  real GPU 0, written as Markdown for docs/hardware.md
#                  (HW_REPORT=path, NOBUILD=1 to run binaries built elsewhere)
#   make gpu-slurm-check (root; GPU node or not) slurmctld, slurmd and real
#                  share jobs on this machine's GPUs (GPU_SLURM_REPORT=path,
#                  NOBUILD=1 with a kit from make gpu-kit)
#   make bench-gpu (root, on an NVIDIA GPU node, no Slurm) 8 small CUDA jobs
#                  one after another, time-sliced, and in MPS shares, then
#                  the same through Slurm from the gpu-kit
#                  (BENCH_GPU_REPORT=path, NOBUILD=1)
#
# Everything needs root for the tests (they run real Slurm daemons).

CARGO ?= cargo
PROFILE ?= release
# gpushare's version: Cargo.toml's [workspace.package] (CHANGELOG.md).
VERSION := $(shell packaging/version.sh)

# A Slurm built from source into a prefix of its own (`./configure
# --prefix=/opt/slurm`): its headers for the build, its lib/slurm for
# install. Default: the prefix of the scontrol on PATH, where that is not
# the system's /usr and the prefix has Slurm's headers.
SLURM_PREFIX ?= $(shell p=$$(command -v scontrol 2>/dev/null) && p=$$(dirname "$$(dirname "$$p")") && \
	[ "$$p" != /usr ] && [ -f "$$p/include/slurm/slurm.h" ] && echo "$$p")
ifneq ($(SLURM_PREFIX),)
SLURM_INCLUDE_DIR ?= $(SLURM_PREFIX)/include
export SLURM_INCLUDE_DIR
endif

# Debian packages the tests, the demo and the test cluster need: the
# developers' `make deps` (demo, unit, check, test, bench) installs the
# missing ones. No site-facing target (build, install, deb, dist, rpm) runs
# it: those only check what they need (packaging/need.sh).
APT_PACKAGES = slurm-wlm slurmdbd slurm-wlm-basic-plugins libslurm-dev munge \
	mariadb-server mariadb-client libclang-dev pkg-config debootstrap iproute2 \
	prometheus prometheus-node-exporter \
	libmunge-dev libmariadb-dev libdbus-1-dev libjson-c-dev libyaml-dev
# (The last five: to build SchedMD's releases from source, tests/slurm_source.sh;
# json-c and libyaml for the GPU kit's, whose namespace/linux reads
# namespace.yaml through Slurm's serializers.)

.PHONY: all deps build check test test-all lint clean install uninstall demo check-releases test-releases test-monitoring

all: build

# Installs only what is missing, so a prepared machine does not touch apt.
deps:
	@if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then \
		echo "not a Debian-family system: the build needs cargo, clang (libclang) and Slurm's headers, installed yourself"; \
		exit 0; \
	fi; \
	missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
		echo "system packages: all present"; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first"; exit 1; }

# Checks, never installs, what the build needs: a developer's machine has
# it from make deps, a site's build host from its own packages.
build:
	@packaging/need.sh build
	$(CARGO) build --workspace --profile $(PROFILE)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 tests/doc_links.py
	tests/release_check_test.sh

# The tier for every change: lints, unit and property tests (the core, the
# plugins' exported functions, the harness), the alerting rules, then every
# real-cluster suite on this machine's Slurm, in two lanes side by side of
# about equal length (they need the plugin libraries built first; the
# harness refuses ones older than their sources).
check: unit
	tests/lanes.sh "host:v1:$(CHECK_LANE_1)" "host:v1:$(CHECK_LANE_2)"; rc=$$?; tests/leftovers.sh || rc=1; exit $$rc

CHECK_LANE_1 ?= multinode,mps_daemon,attack,gpu_mps,hw_check
CHECK_LANE_2 ?= -multinode,-mps_daemon,-attack,-gpu_mps,-hw_check

.PHONY: unit build-tests test-no-install
unit: deps lint build-tests
	$(MAKE) test-no-install
	$(CARGO) test --workspace --exclude gpushare-tests
	$(CARGO) test -p gpushare-tests --lib --bins
	$(MAKE) test-monitoring

build-tests:
	$(CARGO) build --workspace --all-targets

# The site-facing targets install nothing and name what is missing
# (tests/no_install.sh: apt-get, apt, dnf, yum shadowed by stubs).
test-no-install:
	tests/no_install.sh

# CI's command (the README's): the lints and unit tests, the plugins
# built for the other Debian releases, the GPU kit's check on the
# stand-ins, then the lanes (TEST_LANES, tests/lanes.sh): every suite on
# 22.05 and 26.05, the smoke of every suite on each other release, the
# RPMs and the Debian packages. The lanes never share a network namespace
# or a test directory. Each run's log is kept in target/test-logs/. Last,
# tests/leftovers.sh fails the run if any process a test cluster started
# (slurmstepd included) outlived its cluster.
test: roots-early sources-early unit
	$(MAKE) check-releases SOURCE_RELEASES=
	$(MAKE) test-gpu-slurm-check
	GPUSHARE_RPM_UPGRADE=0 tests/lanes.sh $(TEST_LANES); rc=$$?; tests/leftovers.sh || rc=1; exit $$rc

# make test's lanes, side by side (tests/lanes.sh; CONTRIBUTING.md's table
# gives each run's time). The processor is the limit (a cluster's start,
# Slurm's commands polled), so the lanes are cut to end together: 22.05's
# and 26.05's suites in two halves each (make check's), the smoke runs
# between them, the packages last in lanes of their own.
TEST_LANES ?= "host:v1:$(CHECK_LANE_1) $(RELEASE_RUNS_SMOKE)" \
	"host:v1:$(CHECK_LANE_2) $(SOURCE_RUNS_OLDER)" \
	"sid:v2:$(CHECK_LANE_1) host:v2:gpu_mps $(SOURCE_RUNS_LATEST) $(SOURCE_RUNS_NEWER)" \
	"$(SOURCE_RUNS_OWN_ABI) $(RELEASE_RUNS_V1)" \
	"$(SOURCE_RUNS_NEXT)" \
	"$(RPM_RUNS)" \
	"packages" \
	"sid:v2:$(CHECK_LANE_2) $(ORACLE_ALONE)"

# The oracle with Slurm alone (no job_submit plugin): it must find untyped
# GPUs under every typed scope, or its reading of Slurm's record is blind.
ORACLE_ALONE ?= sid:v2:gpu_oracle:with_slurm_alone_untyped_gpus_escape_every_typed_scope

# SchedMD's releases the lanes run, built from source in the background at
# the lowest priority from the start (tests/slurm_source.sh, a lock per
# prefix; the lanes' own builder then finds them built): they take the
# processor the unit tests, the GPU kit's check and the roots leave idle.
# The kit's release is built by the kit itself. Its log:
# target/test-logs/sources-early.log.
# SchedMD's RPMs and the RPM lane's root likewise (tests/rpm_test.sh
# --prepare), beside them.
EARLY_SOURCES = $(filter-out $(GPU_SLURM_RELEASE) $(RPM_RELEASE),$(SOURCE_OWN_ABI) $(SOURCE_NEXT) $(SOURCE_SMOKED) $(SOURCE_LATEST))
.PHONY: sources-early
sources-early: deps
	@mkdir -p target/test-logs
	@(for r in $(EARLY_SOURCES); do nice -n 19 tests/slurm_source.sh $$r; done) \
		>target/test-logs/sources-early.log 2>&1 </dev/null &
	@GPUSHARE_RPM_UPGRADE=0 tests/rpm_test.sh --prepare $(RPM_RELEASE) >target/test-logs/rpm-early.log 2>&1 </dev/null &

# The Debian roots the lanes run in (bookworm: the host's packages' test),
# debootstrapped in the background while
# the lints, the unit tests and the GPU kit run (mostly downloading and
# unpacking, where those are the processor's): the lanes then wait for
# each root only if it is not done (tests/release_root.sh holds a lock per
# root). Its log: target/test-logs/roots.log.
.PHONY: roots-early
roots-early: deps
	@mkdir -p target/test-logs
	@(for s in $(RELEASE_SUITES) bookworm; do tests/release_root.sh $$s $(CURDIR)/target/releases/$$s-root; done) \
		>target/test-logs/roots.log 2>&1 </dev/null &

# Every release on both cgroup versions in full (about five times make
# test), the RPMs' micro upgrade and second byte-for-byte build, and every
# suite on SchedMD's RPMs: before each release.
test-all: export RPM_AGAIN = 1
test-all: export GPUSHARE_RPM_SUITES = $(RPM_SUITES_ALL)
test-all: roots-early sources-early unit
	$(MAKE) check-releases SOURCE_RELEASES=
	tests/lanes.sh "native $(RELEASE_RUNS_ALL_V1)" "$(RELEASE_RUNS_ALL_V2)" "$(SOURCE_RUNS_ALL_V1)" "$(SOURCE_RUNS_ALL_V2)" "$(RPM_RUNS) packages"; rc=$$?; tests/leftovers.sh || rc=1; exit $$rc
# The suites tests/rpm_test.sh runs on the installed RPMs under make
# test-all (foundation's wrong-plugin case is not one: step 5 guards
# that installation).
RPM_SUITES_ALL = foundation:loaded_by_slurmctld/runs_through_the_plugin/srun_step_runs/preempts_lowprio,gpu_qos,gpu_oracle,gpu_mps,mps_daemon,smoke,-demo,-hw_check,-attack,-multinode

# The MPS half on a real NVIDIA GPU (tests/hw-check, docs/hardware.md "On real
# hardware"): the release node programs and a CUDA client as two throwaway
# users on GPU 0, and gpu-mps selftest's driver-API client beside it. Needs
# root and the driver; without nvcc the CUDA client's checks say "not run:
# no nvcc" and the self-test's still count. On a machine without a GPU it
# says so in one line and fails. The build is quiet so that is all
# it prints there. HW_ARGS=--usage-only runs only the per-share use check
# (NVML's figures per MPS client, `gpu-mps metrics --write` on two shares).
HW_REPORT ?= hw-check-report-$(shell date -u +%Y%m%dT%H%M%S).md
HW_ARGS ?=
HW_BUILD = [ -n "$(NOBUILD)" ] || $(CARGO) build -q --profile $(PROFILE) -p gpu-mps-prolog -p gpu-mps-epilog -p gpushare-admin -p gpushare-tests --bin gpu-mps-prolog --bin gpu-mps-epilog --bin gpu-mps --bin gpushare-hw-check
.PHONY: hw-check
hw-check:
	@$(HW_BUILD)
	@$(TARGET_DIR)/gpushare-hw-check --report $(HW_REPORT) $(HW_ARGS)

# The node half under Slurm itself (tests/gpu-slurm-check.sh, docs/hardware.md
# "Slurm on a GPU"): slurmctld and slurmd of the kit's Slurm for this
# machine's GPUs, real jobs of two throwaway users, gpu-mps selftest,
# SelfTest=daemon-start, a cancelled share's neighbour and a job's own
# MPS daemon (--gpu-mps=private). Root; nvcc
# optional; on a machine without a GPU it runs against the stand-ins.
# `make gpu-kit` builds the kit (target/gpu-kit, a Slurm release and
# gpushare for it) that a GPU machine without Slurm or network runs it
# from (NOBUILD=1 there).
GPU_SLURM_RELEASE ?= 25.11
GPU_SLURM_REPORT ?= gpu-slurm-check-report-$(shell date -u +%Y%m%dT%H%M%S).md
.PHONY: gpu-kit gpu-slurm-check
gpu-kit:
	tests/gpu_kit.sh $(GPU_SLURM_RELEASE)
gpu-slurm-check:
	@[ -n "$(NOBUILD)" ] || tests/gpu_kit.sh $(GPU_SLURM_RELEASE)
	@tests/gpu-slurm-check.sh --report $(GPU_SLURM_REPORT) $(if $(GPU_SLURM_LOGS),--logs $(GPU_SLURM_LOGS))
# The kit and the check against the stand-ins, as make test runs them
# (before the lanes: the check refuses to run beside another slurmd), so
# that both are known to work before a GPU is lent.
.PHONY: test-gpu-slurm-check
test-gpu-slurm-check:
	tests/gpu_kit.sh $(GPU_SLURM_RELEASE)
	mkdir -p target/test-logs && rm -rf target/test-logs/gpu-slurm-check.md target/test-logs/gpu-slurm-check
	tests/gpu-slurm-check.sh --report target/test-logs/gpu-slurm-check.md --logs target/test-logs/gpu-slurm-check

# What MPS sharing buys on a real GPU (docs/performance.md "On a GPU"): a
# batch of small CUDA jobs one after another, side by side without MPS,
# and side by side in gpushare's shares, by the same program and users.
BENCH_GPU_REPORT ?= bench-gpu-report-$(shell date -u +%Y%m%dT%H%M%S).md
.PHONY: bench-gpu
bench-gpu:
	@$(HW_BUILD)
	@$(TARGET_DIR)/gpushare-hw-check --bench --report $(BENCH_GPU_REPORT)
	@[ -n "$(NOBUILD)" ] || tests/gpu_kit.sh $(GPU_SLURM_RELEASE)
	@tests/gpu-slurm-check.sh --bench-only --report $(BENCH_GPU_REPORT:.md=-slurm.md)

# The alerting rules shipped for Prometheus: valid, and their unit tests
# (promtool's own format) pass.
test-monitoring:
	cd packaging/monitoring && promtool check rules gpushare-rules.yml && promtool test rules gpushare-rules.test.yml

# The plugins against each other release's own headers, linted and built
# (tests/release_plugins.sh; target/slurm-RELEASE): the Debian suites'
# (Debian suite: Slurm release; headers cached in target/releases/<suite>)
# and SchedMD's releases built from source (tests/slurm_source.sh, once
# per machine into /opt/slurm-X.Y.Z). Version differences are
# cfg(slurm_X_Y) gates.
RELEASE_SUITES ?= trixie sid
SOURCE_RELEASES ?= 23.02 23.11 24.05 25.05 25.11 26.05 26.11
check-releases:
	@set -e; for suite in $(RELEASE_SUITES); do \
		root=$(CURDIR)/target/releases/$$suite; \
		version=$$(tests/release_headers.sh $$suite $$root); \
		echo "== Slurm $$version (Debian $$suite): plugins build and lint clean"; \
		tests/release_plugins.sh --lint $$suite $$root/usr/include; \
	done; \
	for release in $(SOURCE_RELEASES); do \
		prefix=$$(tests/slurm_source.sh $$release); \
		echo "== Slurm $$($$prefix/sbin/slurmctld -V | cut -d' ' -f2) (SchedMD, $$prefix): plugins build and lint clean"; \
		tests/release_plugins.sh --lint $$release $$prefix/include; \
	done

# The integration suites on the other releases, each inside its cached
# Debian root (tests/release_suite.sh). A run is SUITE:CGROUP:BINARIES
# (all, or test binaries separated by commas, a test binary's filters
# after a colon, separated by slashes, -BINARY to leave one out, and the
# word smoke: every binary not named runs only the tests it marks as its
# smoke); host is this machine's own Slurm.
#
# make test covers every release: each one loads both plugins, refuses
# one built for another release (foundation, all of it in the smoke), runs
# the oracle of every GPU request form (gpu_oracle) and the smoke of every
# suite; every suite runs in full on this machine's 22.05 (cgroup v1,
# gpushare places shares), on 26.05 (Debian sid, cgroup v2, Slurm places
# shares), and the cgroup-sensitive ones (device confinement, MPS
# daemons, attacks, multi-node shares) on 26.05 with cgroup v1 too. The
# releases between run their smoke and the suites their own code paths
# touch: 23.02 (its job_modify ABI: gpu_qos), 26.11 (the next release:
# gpu_qos, gpu_mps, mps_daemon). make test-all runs every suite of every
# release on both cgroup versions (CONTRIBUTING.md's table says where each
# runs). Where gpushare places shares (host, 22.05, 23.02) only gpu_mps
# runs on v2: there every share is refused, and that is its test.
CGROUP_SUITES = gpu_mps,mps_daemon,attack,multinode:two_node/shares_on/no_room
RELEASE_RUNS_V1 ?= sid:v1:$(CGROUP_SUITES)
RELEASE_RUNS_SMOKE ?= trixie:v2:smoke
RELEASE_RUNS_ALL_V1 ?= trixie:v1:all sid:v1:all
RELEASE_RUNS_ALL_V2 ?= trixie:v2:all sid:v2:all host:v2:gpu_mps
# SchedMD's releases built from source (tests/slurm_source.sh, once per
# machine, beside the lanes): SOURCE_OWN_ABI (23.02: its own job_modify
# ABI; gpushare places shares there as on 22.05; cgroup v1, and its v2
# refusal) and SOURCE_NEXT (the next release, from SchedMD's pre-release
# tarball until it is tagged; cgroup v2) run the smoke and their suites;
# every other release its smoke on v1; SOURCE_LATEST (the newest release,
# which Debian's sid root runs in full) its own cases on cgroup v2:
# namespace/linux with 26.05's namespace.yaml dir_confs (audit),
# CgroupJobIdPaths=yes (mps_daemon), AutoDetect through fake_gpus.conf and
# Flags=env_uuid (gpu_mps). RPM_RELEASE is left to the RPM lane, which
# runs the smoke on SchedMD's RPMs of it: make test compiles that Slurm
# once. make test-all runs every suite of every one, on v1 and (23.11 and
# later) v2.
SOURCE_OWN_ABI ?= 23.02
SOURCE_NEXT ?= 26.11
SOURCE_LATEST ?= 26.05
SOURCE_RUNS_OWN_ABI ?= $(SOURCE_OWN_ABI):v1:smoke,gpu_qos $(SOURCE_OWN_ABI):v2:gpu_mps
SOURCE_SMOKED = $(filter-out $(SOURCE_OWN_ABI) $(SOURCE_NEXT) $(SOURCE_LATEST) $(RPM_RELEASE),$(SOURCE_RELEASES))
# The smoked releases in two halves, for two lanes (23.11 24.05 | 25.11).
SOURCE_RUNS_OLDER ?= $(foreach r,$(filter 23.% 24.%,$(SOURCE_SMOKED)),$(r):v1:smoke)
SOURCE_RUNS_NEWER ?= $(foreach r,$(filter-out 23.% 24.%,$(SOURCE_SMOKED)),$(r):v1:smoke)
SOURCE_RUNS_LATEST ?= $(SOURCE_LATEST):v2:gpu_mps:autodetected_gpus,audit:namespace_linux,mps_daemon:cgroup_job_id_paths
SOURCE_RUNS_NEXT ?= $(SOURCE_NEXT):v2:smoke,gpu_qos,gpu_mps,mps_daemon
SOURCE_RUNS ?= $(SOURCE_RUNS_OWN_ABI) $(SOURCE_RUNS_OLDER) $(SOURCE_RUNS_NEWER) $(SOURCE_RUNS_LATEST) $(SOURCE_RUNS_NEXT)
SOURCE_RUNS_ALL_V1 ?= $(foreach r,$(SOURCE_RELEASES),$(r):v1:all)
SOURCE_RUNS_ALL_V2 ?= $(foreach r,$(filter-out 23.02,$(SOURCE_RELEASES)),$(r):v2:all)
SOURCE_RUNS_ALL ?= $(SOURCE_RUNS_ALL_V1) $(SOURCE_RUNS_ALL_V2)
# gpushare's RPMs on SchedMD's RPMs of a release (tests/rpm_test.sh): a
# fourth lane, its builds at the lowest priority beside the others; make
# test leaves out its micro upgrade (a second build of SchedMD's RPMs and
# of gpushare's), make test-all and make test-rpm run it.
RPM_RUNS ?= rpm:$(RPM_RELEASE)
# One after another (RELEASE_RUNS=... to pick some).
RELEASE_RUNS ?= $(RELEASE_RUNS_ALL_V1) $(RELEASE_RUNS_ALL_V2) $(SOURCE_RUNS_ALL)
test-releases:
	tests/lanes.sh "$(RELEASE_RUNS)"

clean:
	$(CARGO) clean

# ---- benchmarks ----------------------------------------------------------
# Each bench prints its own table and `ROW|what|figure|command|keys` lines
# (testcluster::bench_figures). At the end the rows are compared with the
# figures of the last run kept in tests/bench/figures.txt (a row over 20 %
# worse is marked: a prompt to look, never a failure), kept there in their
# place, and docs/performance.md's table is made from them: commit both.
# Outputs in target/bench/. BENCHES picks benches (make bench
# BENCHES=placement); their arguments: SHARE_ARGS (serial burst rounds),
# SCALE_ARGS (pending running qos), SUBMIT_JOBS, PLACEMENT_RUNS, USAGE_RUNS,
# REPLAY_JOBS, BURST_ARGS (rounds, then burst sizes). No timing here is
# asserted anywhere.
SHARE_ARGS ?= 20 50 3
SCALE_ARGS ?= 20000 2000 200
SUBMIT_JOBS ?= 600
PLACEMENT_RUNS ?= 300
BURST_ARGS ?= 5 32 64
USAGE_RUNS ?= 200
REPLAY_JOBS ?= 100000
BENCHES ?= job_submit_call submit_throughput placement node_bursts share_usage share_latency user_commands replay replay_accounting
BENCH_ARGS_submit_throughput = $(SUBMIT_JOBS)
BENCH_ARGS_placement = $(PLACEMENT_RUNS)
BENCH_ARGS_node_bursts = $(BURST_ARGS)
BENCH_ARGS_share_usage = $(USAGE_RUNS)
BENCH_ARGS_share_latency = $(SHARE_ARGS)
BENCH_ARGS_user_commands = $(SCALE_ARGS)
BENCH_ARGS_replay = $(REPLAY_JOBS)
BENCH_ARGS_replay_accounting = $(REPLAY_JOBS)
bench_package = $(if $(filter job_submit_call,$(1)),job_submit_gpu_qos,gpushare-tests)

.PHONY: bench
bench: deps
	$(CARGO) build --release --workspace
	@mkdir -p target/bench
	@$(foreach b,$(BENCHES),bash -o pipefail -c '$(CARGO) bench -p $(call bench_package,$(b)) --bench $(b) -- $(BENCH_ARGS_$(b)) | tee target/bench/$(b).txt' && ) true
	@echo; echo "== gpushare benchmarks, $$(nproc) cores, $$(slurmctld -V), $$(date -u +%F), against the last figures kept"
	$(CARGO) run -q -p gpushare-tests --bin bench-figures -- --results target/bench \
		--day "$$(date -u +%F)" --machine "$$(nproc) cores, $$(slurmctld -V | sed -E "s/^slurm(-wlm)? /Slurm /")" $(BENCHES)

# docs/performance.md's table made again from tests/bench/figures.txt
# (make bench does it after each run).
.PHONY: bench-doc
bench-doc:
	$(CARGO) run -q -p gpushare-tests --bin bench-figures -- --doc-only

# ---- install -------------------------------------------------------------
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc/slurm
DESTDIR ?=
# Slurm's PluginDir: from the running configuration, else the prefix's
# (SLURM_PREFIX), else where the distribution put Slurm's own plugins.
# Override with PLUGINDIR=.
PLUGINDIR ?= $(shell { scontrol show config 2>/dev/null | awk '$$1 == "PluginDir" {print $$3}' | cut -d: -f1; \
	[ -z "$(SLURM_PREFIX)" ] || echo "$(SLURM_PREFIX)/lib/slurm"; \
	for d in $$(grep -v '^\#' slurm-sys/plugin-dirs); do \
	[ -e $$d/job_submit_defaults.so ] && echo $$d; done; } | head -n 1)
TARGET_DIR = target/$(PROFILE)
ifeq ($(PROFILE),dev)
TARGET_DIR = target/debug
endif
LIBEXECDIR = $(PREFIX)/libexec/gpushare
# gpu-qos is for every user (usage, why): bin; gpu-mps is the admin's: sbin.
BINDIR = $(PREFIX)/bin
SBINDIR = $(PREFIX)/sbin
DOCDIR = $(PREFIX)/share/doc/gpushare
MANDIR = $(PREFIX)/share/man
# Where each shell looks for completions (zsh: Debian's packages use
# /usr/share/zsh/vendor-completions, packaging/deb.sh sets it).
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The examples, installed with the paths of this install filled in
# (@PLUGINDIR@, @LIBEXECDIR@, @SYSCONFDIR@, @DOCDIR@, ...), only under
# DOCDIR/examples, never into SYSCONFDIR. gpu_qos.conf.example is the
# example site's policy: installed with every setting commented out. The
# GPU node setups (gpu-node.*.example) are made by gpushare-man with the
# function `gpu-mps config` prints with.
EXAMPLES = plugins/spank_gpu_mps/gpu_mps.conf.example \
	plugins/spank_gpu_mps/plugstack.conf.example
FILL_PATHS = -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
	-e 's|@LIBEXECDIR@|$(LIBEXECDIR)|g' -e 's|@PLUGINDIR@|$(PLUGINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g'
# The metrics timers (packaging/systemd; make install fills in SBINDIR and
# DOCDIR). $(PREFIX)/lib/systemd/system: /usr/lib/systemd/system, Debian's
# place for units, for PREFIX=/usr; systemd also reads /usr/local/lib/systemd/system.
UNITDIR ?= $(PREFIX)/lib/systemd/system
UNITS = gpushare-node-metrics.service gpushare-node-metrics.timer \
	gpushare-qos-metrics.service gpushare-qos-metrics.timer
# Prometheus alerting rules, their promtool tests, the Grafana dashboard:
# examples a site copies into its own monitoring configuration.
MONITORING = packaging/monitoring/gpushare-rules.yml \
	packaging/monitoring/gpushare-rules.test.yml \
	packaging/monitoring/gpushare-dashboard.json
MANIFEST = $(DESTDIR)$(DOCDIR)/installed-files

install:
	@[ -n "$(PLUGINDIR)" ] || { echo "Slurm's PluginDir not found: pass PLUGINDIR=/path/to/slurm/plugins"; exit 1; }
	@[ -n "$(NOBUILD)" ] || $(MAKE) build
	@set -e; files=""; \
	put() { install -D -m $$1 "$$2" "$(DESTDIR)$$3"; files="$$files $$3"; echo "  $$3"; }; \
	man=$$(mktemp -d); trap 'rm -rf "$$man"' EXIT; \
	$(TARGET_DIR)/gpushare-man "$$man" "$(LIBEXECDIR)" "$(PLUGINDIR)" "$(SYSCONFDIR)" >/dev/null; \
	echo "installing into $(DESTDIR)$(PREFIX) (plugins: $(DESTDIR)$(PLUGINDIR))"; \
	put 0755 $(TARGET_DIR)/libjob_submit_gpu_qos.so $(PLUGINDIR)/job_submit_gpu_qos.so; \
	put 0755 $(TARGET_DIR)/libspank_gpu_mps.so $(PLUGINDIR)/spank_gpu_mps.so; \
	put 0755 $(TARGET_DIR)/gpu-mps-prolog $(LIBEXECDIR)/gpu-mps-prolog; \
	put 0755 $(TARGET_DIR)/gpu-mps-epilog $(LIBEXECDIR)/gpu-mps-epilog; \
	put 0755 $(TARGET_DIR)/gpu-qos $(BINDIR)/gpu-qos; \
	put 0755 $(TARGET_DIR)/gpu-mps $(SBINDIR)/gpu-mps; \
	put 0644 plugins/job_submit_gpu_qos/slurm.conf.fragment $(DOCDIR)/examples/slurm.conf.controller.fragment; \
	put 0644 plugins/job_submit_gpu_qos/gpu_qos.conf.example $(DOCDIR)/examples/gpu_qos.conf.example; \
	sed -i 's/^\([A-Za-z]\)/#\1/' "$(DESTDIR)$(DOCDIR)/examples/gpu_qos.conf.example"; \
	for f in $(EXAMPLES); do put 0644 $$f $(DOCDIR)/examples/$$(basename $$f); done; \
	for f in "$$man"/examples/*; do put 0644 $$f $(DOCDIR)/examples/$$(basename $$f); done; \
	sed -i $(FILL_PATHS) "$(DESTDIR)$(DOCDIR)"/examples/*.example "$(DESTDIR)$(DOCDIR)"/examples/*.fragment; \
	for f in $(MONITORING); do put 0644 $$f $(DOCDIR)/examples/monitoring/$$(basename $$f); done; \
	for u in $(UNITS); do put 0644 packaging/systemd/$$u $(UNITDIR)/$$u; \
		sed -i $(FILL_PATHS) "$(DESTDIR)$(UNITDIR)/$$u"; done; \
	for f in "$$man"/man*/*; do put 0644 $$f $(MANDIR)/$$(basename $$(dirname $$f))/$$(basename $$f); done; \
	for f in "$$man"/completions/bash/*; do put 0644 $$f $(BASHCOMPDIR)/$$(basename $$f); done; \
	for f in "$$man"/completions/zsh/*; do put 0644 $$f $(ZSHCOMPDIR)/$$(basename $$f); done; \
	for f in "$$man"/completions/fish/*; do put 0644 $$f $(FISHCOMPDIR)/$$(basename $$f); done; \
	put 0644 README.md $(DOCDIR)/README.md; \
	for f in docs/*.md; do put 0644 $$f $(DOCDIR)/docs/$$(basename $$f); done; \
	put 0644 LICENSE $(DOCDIR)/LICENSE; \
	for f in $$files; do echo $$f; done > $(MANIFEST); \
	echo "  $(DOCDIR)/installed-files"
	@echo
	@echo "Next steps (configs are never written by make install):"
	@[ -e "$(DESTDIR)$(SYSCONFDIR)/gpu_qos.conf" ] || echo "  controller: gpu-qos generate > $(SYSCONFDIR)/gpu_qos.conf, gpu-qos check, then JobSubmitPlugins=gpu_qos (the keys: $(DOCDIR)/examples/gpu_qos.conf.example)"
	@[ -e "$(DESTDIR)$(SYSCONFDIR)/gpu_mps.conf" ] || echo "  GPU nodes:  gpu-mps config prints the slurm.conf, gres.conf, plugstack.conf and gpu_mps.conf lines (examples: $(DOCDIR)/examples/gpu-node.*.example)"
	@echo "  metrics:    systemctl enable --now gpushare-node-metrics.timer (GPU nodes, MetricsFile= set) or gpushare-qos-metrics.timer (controller, MetricsFile= set in gpu_qos.conf); alerts and dashboard: $(DOCDIR)/examples/monitoring"

uninstall:
	@set -e; \
	if [ -f "$(MANIFEST)" ]; then list=$$(cat "$(MANIFEST)"); else \
	list="$(PLUGINDIR)/job_submit_gpu_qos.so $(PLUGINDIR)/spank_gpu_mps.so $(LIBEXECDIR)/gpu-mps-prolog $(LIBEXECDIR)/gpu-mps-epilog $(BINDIR)/gpu-qos $(SBINDIR)/gpu-qos $(SBINDIR)/gpu-mps"; \
	for u in $(UNITS); do list="$$list $(UNITDIR)/$$u"; done; fi; \
	for f in $$list; do rm -f "$(DESTDIR)$$f" && echo "  removed $$f"; done; \
	for u in $(UNITS); do [ ! -L "$(DESTDIR)/etc/systemd/system/timers.target.wants/$$u" ] || \
		echo "  $$u is still enabled: systemctl disable $$u"; done; \
	rm -f "$(MANIFEST)"; \
	rm -rf "$(DESTDIR)$(DOCDIR)/examples" "$(DESTDIR)$(DOCDIR)/docs"; rm -f "$(DESTDIR)$(DOCDIR)/README.md" "$(DESTDIR)$(DOCDIR)/LICENSE"; \
	for d in "$(DESTDIR)$(DOCDIR)" "$(DESTDIR)$(LIBEXECDIR)"; do rmdir "$$d" 2>/dev/null || true; done

# ---- demo ----------------------------------------------------------------
DEMO_ROOT = $(CURDIR)/target/demo/install

demo: deps build
	rm -rf $(DEMO_ROOT)
	$(MAKE) install NOBUILD=1 DESTDIR=$(DEMO_ROOT) PREFIX=/usr PLUGINDIR=/usr/lib/gpushare
	$(TARGET_DIR)/gpushare-demo --root $(DEMO_ROOT) $(if $(KEEP),--keep)

# ---- Debian packages -----------------------------------------------------
#   make deb [SUITE=host|trixie|sid]  gpushare, gpushare-controller and gpushare-node
#                  for that release's Slurm, pinned to it, into target/deb/SUITE
#                  (packaging/deb.sh; host = this machine's Slurm)
#   make test-packages  build them for every release and test each in a fresh
#                  root of its release (tests/package_test.sh)
#   make test-smd  (on request, not in make test) SchedMD's slurm-smd packages
#                  of SMD_RELEASE built from the tarball's debian/ (once per
#                  machine), gpushare's source release unpacked in a root
#                  holding them, make deb there, the packages installed and
#                  run on slurm-smd's daemons (tests/smd_test.sh)
APT_PACKAGES += dpkg-dev lintian groff-base
SUITE ?= host
PACKAGE_SUITES ?= host trixie sid

.PHONY: deb test-packages

deb:
	@packaging/need.sh deb
	packaging/deb.sh $(SUITE)

# All packages first: each test also installs another release's packages
# to see them refused.
.PHONY: debs
debs: deps
	@set -e; for suite in $(PACKAGE_SUITES); do packaging/deb.sh $$suite; done
test-packages: deps
	PACKAGE_SUITES="$(PACKAGE_SUITES)" tests/lanes.sh packages

# Not in make test: its first run on a machine builds SchedMD's slurm-smd
# packages and a root for them (about 16 minutes on 2 cores) before the
# 4 to 11 minutes of a run with both cached (CONTRIBUTING.md).
# It ends with the micro upgrade (step 5; GPUSHARE_SMD_UPGRADE=0 leaves it
# out): slurm-smd built
# again as the next micro release, gpushare rebuilt on it, both installed
# in one apt-get install on a running cluster (a second Slurm build, about
# 12 minutes, on a first run; then about 2 minutes a run).
SMD_RELEASE ?= 24.05
.PHONY: test-smd
test-smd: deps
	tests/smd_test.sh $(SMD_RELEASE)

#   make test-slurm-atf  (on request, not in make test) SchedMD's own Python
#                  tests (the ATF) of GPUs, MPS, shards, job_submit, SPANK and
#                  namespaces on Slurm ATF_RELEASE built from source, without
#                  and with gpushare's lines, in namespaces of their own
#                  (tests/slurm_atf.sh, docs/atf.md); ATF_TESTS=test_121_1 ...
#                  picks tests of tests/atf/tests.txt. About 27 minutes for
#                  25.11's selection, both runs.
APT_PACKAGES += python3-venv rsync util-linux
ATF_RELEASE ?= 25.11
ATF_TESTS ?=
.PHONY: test-slurm-atf
test-slurm-atf: deps
	tests/slurm_atf.sh $(ATF_RELEASE) both $(ATF_TESTS)

# ---- source release and RPM packages -------------------------------------
#   make dist      target/dist/gpushare-VERSION.tar.gz: the tree at HEAD, every
#                  crate vendored, gpushare.spec inside (packaging/dist.sh);
#                  builds offline, `rpmbuild -ta` takes it as it is
#   make rpm       gpushare-slurmctld and gpushare-slurmd RPMs from it, for the
#                  Slurm whose slurm-devel is installed (RPMBUILD_ARGS: e.g.
#                  --define 'slurm_prefix /opt/slurm'), into target/rpm;
#                  rpmlint on them where it is installed
#   make test-rpm  SchedMD's Slurm RPM_RELEASE as RPMs, gpushare's RPMs built
#                  and installed on it in a root, its suites run there
#                  (tests/rpm_test.sh)
#   make release   the version agrees everywhere and the tree is committed,
#                  then make dist; prints the sha256 and the tag command
#                  (packaging/bump.sh VERSION writes a new version first)
#   make release-check  the same checks on an uncommitted tree, and the
#                  tarball of HEAD: a rehearsal, nothing to tag
APT_PACKAGES += rpm rpmlint
RPM_RELEASE ?= 25.05
RPMBUILD_ARGS ?=

.PHONY: dist rpm test-rpm release release-check

dist:
	packaging/dist.sh

rpm:
	@packaging/need.sh rpm
	$(MAKE) dist
	@mkdir -p target/rpm
	rpmbuild -ta $(RPMBUILD_ARGS) --define "_topdir $(CURDIR)/target/rpm/build" \
		--define "_rpmdir $(CURDIR)/target/rpm" target/dist/gpushare-$(VERSION).tar.gz
	@if command -v rpmlint >/dev/null; then \
		echo "rpmlint -c packaging/rpm/rpmlint.toml -r packaging/rpm/rpmlintrc target/rpm/*/gpushare-*.rpm"; \
		rpmlint -c packaging/rpm/rpmlint.toml -r packaging/rpm/rpmlintrc target/rpm/*/gpushare-*.rpm; \
	else echo "(rpmlint not installed: the packages are not linted)"; fi

test-rpm: deps
	RPM_AGAIN=1 tests/rpm_test.sh $(RPM_RELEASE)

release: deps build
	packaging/release_check.sh --tag
	packaging/dist.sh
	@cd target/dist && sha256sum -c --quiet gpushare-$(VERSION).tar.gz.sha256 && \
		echo "sha256: $$(cat gpushare-$(VERSION).tar.gz.sha256)"
	@echo "tag it:  git tag -a v$(VERSION) -m 'gpushare $(VERSION)' && git push origin v$(VERSION)"
	@echo "publish: target/dist/gpushare-$(VERSION).tar.gz and target/dist/gpushare-$(VERSION).tar.gz.sha256"

# The rehearsal: the same version checks on the tree as it is (uncommitted
# edits, an existing tag: not checked), the tarball of HEAD and its sha256;
# nothing to tag.
release-check:
	packaging/release_check.sh
	packaging/dist.sh
	@cat target/dist/gpushare-$(VERSION).tar.gz.sha256
