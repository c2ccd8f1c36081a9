# gpushare — build, test and install the Slurm plugins.
#
#   make test      install build dependencies (apt), build, run every test
#   make build     release build of the plugins and tools
#
# Everything needs root for the tests (they run real Slurm daemons).

CARGO ?= cargo
PROFILE ?= release

# Debian/Ubuntu packages the build and the test cluster need.
APT_PACKAGES = slurm-wlm slurmdbd slurm-wlm-basic-plugins libslurm-dev munge \
	mariadb-server mariadb-client libclang-dev pkg-config

.PHONY: all deps build test lint unit-test cluster-test clean

all: build

# Installs only what is missing, so a prepared machine does not touch apt.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
		echo "system packages: all present"; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first"; exit 1; }

build: deps
	$(CARGO) build --workspace --profile $(PROFILE)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Lints, unit and property tests of the pure core, then the real-cluster
# tests (which need the plugin libraries built first).
test: deps lint
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace --exclude gpushare-tests
	$(CARGO) test -p gpushare-tests --tests

clean:
	$(CARGO) clean
