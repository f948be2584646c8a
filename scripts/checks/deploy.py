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
#   scripts/checks/deploy.sh --write-prometheusrule
# Do not edit by hand: edit the plain rules file and regenerate.
# scripts/checks/deploy.sh fails when the two differ.
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
             f"scripts/checks/deploy.sh --write-prometheusrule\n{diff}")


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
