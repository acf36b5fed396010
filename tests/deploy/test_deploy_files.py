"""
test_deploy_files.py — the deployment files in deploy/, checked without a
network or a cluster:

  - systemd: `systemd-analyze verify` accepts the unit (with and without the
    CUDA drop-in), `systemd-analyze security --offline` rates it well, and
    the hardening the operations guide promises is there; serve.json is a
    config `loragate serve --config` accepts;
  - containers: both Containerfiles build the binary in one stage and run it
    as a non-root numeric user in another, from the right base images, and
    every Debian package the CPU image installs exists (apt-cache);
  - Kubernetes: every manifest parses, `kubectl kustomize` renders the set
    when kubectl is there, and the objects agree with each other (selectors
    and labels, probe and service ports, the PVC and Secret they name, one
    GPU, one replica with Recreate for the single-writer database);
  - the InferencePool example (deploy/k8s/inference-pool): each replica has
    its own volume (a StatefulSet's claim template, never a shared claim);
    the pool selects the pods and targets the bridge's port; the bridge
    forwards to loragate's TLS port on loopback; the endpoint picker is
    bound to the pool, may read pods and pools, scrapes /metrics, scores
    LoRA affinity; the HTTPRoute sends the pool exactly the inference
    routes the bridge passes, and neither passes the operator API, adapter
    uploads, stored responses, usage or (the route) /metrics.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

yaml = pytest.importorskip("yaml")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
UNIT = os.path.join(DEPLOY, "systemd", "loragate.service")
CUDA_DROPIN = os.path.join(DEPLOY, "systemd", "loragate-cuda.conf")
K8S = os.path.join(DEPLOY, "k8s")
LORAGATE = os.environ.get("LG_BIN", os.path.join(ROOT, "build", "loragate"))


# ---- systemd ----------------------------------------------------------------------

def unit_settings(path):
    out = {}
    section = None
    for line in open(path):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, v = line.split("=", 1)
        out.setdefault((section, k.strip()), []).append(v.strip())
    return out


def test_unit_is_hardened():
    s = unit_settings(UNIT)
    one = {k: v[-1] for k, v in s.items()}
    assert one[("Service", "DynamicUser")] == "yes" or ("Service", "User") in one
    assert one[("Service", "ProtectSystem")] == "strict"
    assert one[("Service", "StateDirectory")] == "loragate"
    assert "/var/lib/loragate" in one[("Service", "ExecStart")]
    for k, v in {"NoNewPrivileges": "yes", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
                 "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes", "UMask": "0077",
                 "SystemCallArchitectures": "native", "KillSignal": "SIGTERM"}.items():
        assert one.get(("Service", k)) == v, k
    assert "@system-service" in s[("Service", "SystemCallFilter")]
    # the drain (30 s) and the ledger flush fit before SIGKILL
    assert int(one[("Service", "TimeoutStopSec")]) >= 60
    assert one[("Install", "WantedBy")] == "multi-user.target"
    cuda = unit_settings(CUDA_DROPIN)
    assert cuda[("Service", "PrivateDevices")] == ["no"]
    assert any("nvidia" in v for v in cuda[("Service", "DeviceAllow")])


def verify(tmp_path, text, name="loragate.service"):
    p = tmp_path / name
    p.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", str(p)], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_analyze_verify(tmp_path):
    # verify checks that ExecStart's binary exists: point it at the build (or /bin/true)
    binary = LORAGATE if os.access(LORAGATE, os.X_OK) else "/bin/true"
    text = open(UNIT).read().replace("/usr/local/bin/loragate", binary)
    rc, out = verify(tmp_path, text)
    assert rc == 0 and "Unknown" not in out and "Failed" not in out, out
    # with the CUDA drop-in's settings merged in
    extra = "".join(l for l in open(CUDA_DROPIN) if not l.startswith(("#", "[")))
    merged = text.replace("[Install]", extra + "\n[Install]")
    (tmp_path / "cuda").mkdir()
    rc, out = verify(tmp_path / "cuda", merged)
    assert rc == 0 and "Unknown" not in out, out
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", str(tmp_path / "loragate.service")],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= 2.5, r.stdout[-3000:]


@pytest.mark.skipif(not os.access(LORAGATE, os.X_OK), reason="build/loragate not built")
def test_serve_json_is_a_valid_config(tmp_path):
    cfg = json.load(open(os.path.join(DEPLOY, "systemd", "serve.json")))
    cfg["model"] = str(tmp_path / "no-model.gguf")
    p = tmp_path / "serve.json"
    p.write_text(json.dumps(cfg))
    r = subprocess.run([LORAGATE, "serve", "--config", str(p), "--data-dir", str(tmp_path / "data")],
                       capture_output=True, text=True, timeout=60)
    # every key accepted (a bad one exits 2); it stops only at the missing model
    assert r.returncode == 1 and "no-model.gguf" in r.stderr, r.stderr


# ---- containers -------------------------------------------------------------------------

def stages(path):
    """[(base image, [(instruction, args)])] of a Containerfile (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", open(path).read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        ins, _, args = line.partition(" ")
        ins = ins.upper()
        if ins == "FROM":
            out.append((args.split()[0], []))
        elif out:
            out[-1][1].append((ins, args.strip()))
    return out


@pytest.mark.parametrize("name,base", [("Containerfile", "debian:12"), ("Containerfile.cuda", "nvidia/cuda:")])
def test_containerfiles(name, base):
    st = stages(os.path.join(DEPLOY, name))
    assert len(st) == 2, "a build stage and a runtime stage"
    (build_img, build), (run_img, run) = st
    assert base in build_img and base in run_img
    if "cuda" in name:
        assert "devel" in build_img and "runtime" in run_img
    build_cmds = " ".join(a for i, a in build if i == "RUN")
    assert "cmake --build" in build_cmds and "--target loragate" in build_cmds
    assert "-DLG_NATIVE=OFF" in build_cmds
    assert ("-DLG_CUDA=ON" if "cuda" in name else "-DLG_CUDA=OFF") in build_cmds
    users = [a for i, a in run if i == "USER"]
    assert users, "the runtime stage must switch to a non-root user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root USER (runAsNonRoot can check it)"
    copies = [a for i, a in run if i == "COPY"]
    assert any("--from=build" in c and "/usr/local/bin/loragate" in c for c in copies)
    entry = json.loads([a for i, a in run if i == "ENTRYPOINT"][-1])
    assert entry[:2] == ["/usr/local/bin/loragate", "serve"] and "/data" in entry
    assert ("EXPOSE", "8443") in run and ("STOPSIGNAL", "SIGTERM") in run
    assert "cuda" not in name or "--backend" in entry and entry[entry.index("--backend") + 1] == "cuda"


@pytest.mark.skipif(not shutil.which("apt-cache"), reason="apt-cache not available")
def test_cpu_image_packages_exist():
    pkgs = []
    for _, instr in stages(os.path.join(DEPLOY, "Containerfile")):
        for i, a in instr:
            if i == "RUN" and "apt-get install" in a:
                seg = a.split("apt-get install", 1)[1].split("&&")[0]
                pkgs += [w for w in seg.split() if not w.startswith("-")]
    assert "libh2o-evloop-dev" in pkgs and "libh2o-evloop0.13" in pkgs
    r = subprocess.run(["apt-cache", "show", "--no-all-versions", *pkgs], capture_output=True, text=True, timeout=60)
    found = set(re.findall(r"^Package: (\S+)$", r.stdout, re.M))
    missing = set(pkgs) - found
    if missing and "No packages found" in r.stderr and not found:
        pytest.skip("apt lists are empty here (apt-get update never ran)")
    assert not missing, f"packages apt does not know: {missing}"


def test_dockerignore_keeps_the_context_small():
    lines = {l.strip() for l in open(os.path.join(ROOT, ".dockerignore")) if l.strip() and not l.startswith("#")}
    for p in (".git", ".models", ".venv"):
        assert p in lines
    assert any(l.startswith("build") for l in lines)


# ---- Kubernetes ----------------------------------------------------------------------------

def manifests():
    objs = {}
    for f in sorted(os.listdir(K8S)):
        if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml":
            for doc in yaml.safe_load_all(open(os.path.join(K8S, f))):
                if doc:
                    assert {"apiVersion", "kind", "metadata"} <= set(doc), f
                    objs[(doc["kind"], doc["metadata"]["name"])] = doc
    return objs


API = {"Deployment": "apps/v1", "Service": "v1", "PersistentVolumeClaim": "v1", "Secret": "v1"}


def test_manifests_parse_and_agree():
    objs = manifests()
    kinds = {k for k, _ in objs}
    assert kinds == set(API), kinds
    for (kind, name), o in objs.items():
        assert o["apiVersion"] == API[kind], (kind, o["apiVersion"])
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)

    (dep,) = [o for (k, _), o in objs.items() if k == "Deployment"]
    spec = dep["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]
    labels = pod["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    ps = pod["spec"]
    assert ps["securityContext"]["runAsNonRoot"] is True and ps["securityContext"]["runAsUser"] != 0
    assert ps["terminationGracePeriodSeconds"] >= 60
    (c,) = ps["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"https": 8443}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    csc = c["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False and csc["readOnlyRootFilesystem"] is True
    assert csc["capabilities"]["drop"] == ["ALL"]

    def probe(name, path):
        h = c[name]["httpGet"]
        assert h["path"] == path and h["scheme"] == "HTTPS"
        assert h["port"] in ports or h["port"] in ports.values()

    probe("readinessProbe", "/readyz")
    probe("livenessProbe", "/healthz")
    probe("startupProbe", "/healthz")

    # the data volume is the PVC; the mount is the --data-dir the image uses
    vols = {v["name"]: v for v in ps["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    claim = vols[mounts["/data"]]["persistentVolumeClaim"]["claimName"]
    pvc = objs[("PersistentVolumeClaim", claim)]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert re.fullmatch(r"\d+(Gi|Ti)", pvc["spec"]["resources"]["requests"]["storage"])
    assert any(a.startswith("/data/") for a in c["args"])  # the model lives on the volume

    # the admin key comes from the Secret, under the variable loragate reads
    env = {e["name"]: e for e in c["env"]}
    ref = env["LORAGATE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]
    secret = objs[("Secret", ref["name"])]
    assert ref["key"] in secret.get("stringData", {}) or ref["key"] in secret.get("data", {})
    assert not any("value" in e and "KEY" in e["name"] for e in c["env"]), "no key in plain env values"

    (svc,) = [o for (k, _), o in objs.items() if k == "Service"]
    assert svc["spec"]["selector"].items() <= labels.items()
    for p in svc["spec"]["ports"]:
        assert p["targetPort"] in ports or p["targetPort"] in ports.values()


def test_kustomization_lists_the_manifests():
    k = yaml.safe_load(open(os.path.join(K8S, "kustomization.yaml")))
    assert k["kind"] == "Kustomization"
    for r in k["resources"]:
        assert os.path.exists(os.path.join(K8S, r)), r
    assert "secret.yaml" not in k["resources"], "the Secret is created by the operator, not applied from git"


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl not installed")
def test_kubectl_kustomize_renders(tmp_path):
    r = subprocess.run(["kubectl", "kustomize", K8S], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, KUBECONFIG=str(tmp_path / "none")))
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert {d["kind"] for d in docs} == {"Deployment", "Service", "PersistentVolumeClaim"}
    for d in docs:
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "loragate"


# ---- the InferencePool example (Gateway API Inference Extension) ----------------------------

POOL = os.path.join(K8S, "inference-pool")
POOL_API = {"StatefulSet": "apps/v1", "Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1",
            "ServiceAccount": "v1", "Role": "rbac.authorization.k8s.io/v1",
            "RoleBinding": "rbac.authorization.k8s.io/v1",
            "InferencePool": "inference.networking.k8s.io/v1", "HTTPRoute": "gateway.networking.k8s.io/v1"}

# what clients may reach through the Gateway, and what stays per replica (loragate's route patterns)
THROUGH = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/t/acme/v1/chat/completions",
           "/t/acme/v1/completions", "/t/a-1/v1/models"]
PER_REPLICA = ["/admin/v1/tenants", "/admin/v1/usage", "/v1/adapters", "/v1/adapters/x", "/t/acme/v1/adapters",
               "/v1/responses", "/v1/responses/r1", "/t/acme/v1/responses", "/v1/usage", "/t/acme/v1/usage",
               "/usage", "/healthz", "/tokenize", "/t/-x/v1/models", "/t/acme/v1/chat/completions/x"]


def pool_manifests():
    objs = {}
    for f in sorted(os.listdir(POOL)):
        if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml":
            for doc in yaml.safe_load_all(open(os.path.join(POOL, f))):
                if doc:
                    assert {"apiVersion", "kind", "metadata"} <= set(doc), f
                    objs[(doc["kind"], doc["metadata"]["name"])] = doc
    return objs


def one(objs, kind):
    (o,) = [o for (k, _), o in objs.items() if k == kind]
    return o


def route_passes(route, path):
    for rule in route["spec"]["rules"]:
        for m in rule["matches"]:
            t, v = m["path"]["type"], m["path"]["value"]
            if (t == "Exact" and path == v) or (t == "PathPrefix" and (path == v or path.startswith(v.rstrip("/") + "/"))) \
                    or (t == "RegularExpression" and re.fullmatch(v, path)):
                return True
    return False


def bridge_locations(conf):
    """nginx `location [=|~|^~] X` blocks that proxy (a `return` block is a refusal)."""
    out = []
    for op, arg, body in re.findall(r"location\s+(?:(=|~|\^~)\s+)?(\S+)\s*\{([^}]*)\}", conf):
        if "proxy_pass" in body:
            out.append((op, arg))
    return out


def bridge_passes(locs, path):
    return any((op == "=" and path == a) or (op == "~" and re.search(a, path))
               or (op in ("", "^~") and path.startswith(a)) for op, a in locs)


def test_inference_pool_manifests_agree():
    objs = pool_manifests()
    assert {k for k, _ in objs} == set(POOL_API)
    for (kind, name), o in objs.items():
        assert o["apiVersion"] == POOL_API[kind], (kind, o["apiVersion"])
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)

    # N replicas, each with its own store: a claim template, never a claim shared by the pods
    sts = one(objs, "StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] >= 2
    pod = spec["template"]
    labels = pod["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    ps = pod["spec"]
    assert not any("persistentVolumeClaim" in v for v in ps["volumes"]), "a claim shared by every replica"
    (tmpl,) = [t for t in spec["volumeClaimTemplates"] if t["metadata"]["name"] == "data"]
    assert tmpl["spec"]["accessModes"] == ["ReadWriteOnce"]
    headless = objs[("Service", spec["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["selector"].items() <= labels.items()
    assert ps["securityContext"]["runAsNonRoot"] is True and ps["terminationGracePeriodSeconds"] >= 60
    cs = {c["name"]: c for c in ps["containers"]}
    lg, bridge = cs["loragate"], cs["bridge"]
    lg_ports = {p["name"]: p["containerPort"] for p in lg["ports"]}
    assert {m["mountPath"]: m["name"] for m in lg["volumeMounts"]}["/data"] == "data"
    assert lg["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "on" not in [b for a, b in zip(lg["args"], lg["args"][1:]) if a == "--metrics-auth"], \
        "the endpoint picker scrapes /metrics without a token"
    for name, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/healthz")):
        h = lg[name]["httpGet"]
        assert h["path"] == path and h["scheme"] == "HTTPS" and h["port"] in lg_ports
    env = {e["name"]: e for e in lg["env"]}
    assert env["LORAGATE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "loragate-admin"
    for c in (lg, bridge):
        csc = c["securityContext"]
        assert csc["allowPrivilegeEscalation"] is False and csc["readOnlyRootFilesystem"] is True
        assert csc["capabilities"]["drop"] == ["ALL"]

    # the bridge: plain HTTP on the pool's port, to loragate's TLS port on loopback, the routes below only
    bridge_ports = {p["containerPort"] for p in bridge["ports"]}
    vols = {v["name"]: v for v in ps["volumes"]}
    (conf_mount,) = [m for m in bridge["volumeMounts"] if m["mountPath"] == "/etc/nginx/conf.d"]
    cm = objs[("ConfigMap", vols[conf_mount["name"]]["configMap"]["name"])]
    conf = cm["data"]["default.conf"]
    assert [int(p) for p in re.findall(r"^\s*listen\s+(\d+);", conf, re.M)] == sorted(bridge_ports)
    assert re.search(r"server\s+127\.0\.0\.1:%d;" % lg_ports["https"], conf)
    assert all(re.search(r"proxy_pass\s+https://", b) for b in re.findall(r"location[^{]*\{([^}]*)\}", conf)
               if "proxy_pass" in b)
    assert "proxy_buffering off;" in conf  # server-sent events as they come
    locs = bridge_locations(conf)

    # the pool: these pods, the bridge's port, this picker
    pool = one(objs, "InferencePool")
    assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {p["number"] for p in pool["spec"]["targetPorts"]} <= bridge_ports
    assert pool["spec"].get("appProtocol", "http") == "http"
    ref = pool["spec"]["endpointPickerRef"]
    epp_svc = objs[("Service", ref["name"])]
    assert ref["port"]["number"] in {p["port"] for p in epp_svc["spec"]["ports"]}

    # the picker: bound to the pool, allowed to watch it and the pods, configured to scrape and score LoRA
    epp = one(objs, "Deployment")
    eps = epp["spec"]["template"]["spec"]
    assert epp_svc["spec"]["selector"].items() <= epp["spec"]["template"]["metadata"]["labels"].items()
    (ec,) = eps["containers"]
    epp_ports = {p["name"]: p["containerPort"] for p in ec["ports"]}
    for p in epp_svc["spec"]["ports"]:
        assert p["targetPort"] in epp_ports or p["targetPort"] in epp_ports.values()
    svc_port = [p for p in epp_svc["spec"]["ports"] if p["port"] == ref["port"]["number"]][0]
    assert epp_ports.get(svc_port["targetPort"], svc_port["targetPort"]) == 9002  # ext-proc
    args = dict(zip(ec["args"], ec["args"][1:]))
    assert args["--pool-name"] == pool["metadata"]["name"]
    assert args["--pool-group"] == "inference.networking.k8s.io"
    cfg_dir, cfg_file = os.path.split(args["--config-file"])
    evols = {v["name"]: v for v in eps["volumes"]}
    (cmount,) = [m for m in ec["volumeMounts"] if m["mountPath"] == cfg_dir]
    epc = yaml.safe_load(objs[("ConfigMap", evols[cmount["name"]]["configMap"]["name"])]["data"][cfg_file])
    assert epc["kind"] == "EndpointPickerConfig"
    plugins = {p.get("name", p["type"]): p for p in epc["plugins"]}
    src = [p for p in epc["plugins"] if p["type"] == "metrics-data-source"][0].get("parameters", {})
    assert src.get("scheme", "http") == "http" and src.get("path", "/metrics") == "/metrics"
    assert bridge_passes(locs, src.get("path", "/metrics")), "the picker scrapes through the bridge"
    (prof,) = epc["schedulingProfiles"]
    refs = [r["pluginRef"] for r in prof["plugins"]]
    assert set(refs) <= set(plugins) and "lora-affinity-scorer" in refs and "queue-scorer" in refs
    sa = eps["serviceAccountName"]
    assert ("ServiceAccount", sa) in objs
    (rb,) = [o for (k, _), o in objs.items() if k == "RoleBinding" and any(s["name"] == sa for s in o["subjects"])]
    rules = objs[("Role", rb["roleRef"]["name"])]["rules"]

    def allowed(group, resource):
        return any(group in r["apiGroups"] and resource in r["resources"] and {"get", "list", "watch"} <= set(r["verbs"])
                   for r in rules)

    assert allowed("", "pods") and allowed("inference.networking.k8s.io", "inferencepools")

    # the route: the pool behind exactly what the bridge passes, nothing that lives in one replica
    route = one(objs, "HTTPRoute")
    for rule in route["spec"]["rules"]:
        for b in rule["backendRefs"]:
            assert (b["group"], b["kind"], b["name"]) == ("inference.networking.k8s.io", "InferencePool",
                                                          pool["metadata"]["name"])
    for path in THROUGH:
        assert route_passes(route, path) and bridge_passes(locs, path), path
    for path in PER_REPLICA + ["/metrics"]:
        assert not route_passes(route, path), path
    for path in PER_REPLICA:
        assert not bridge_passes(locs, path), path


def test_inference_pool_kustomization_lists_the_manifests():
    k = yaml.safe_load(open(os.path.join(POOL, "kustomization.yaml")))
    listed = set(k["resources"])
    on_disk = {f for f in os.listdir(POOL) if f.endswith(".yaml") and f != "kustomization.yaml"}
    assert listed == on_disk, (listed, on_disk)


@pytest.mark.skipif(not shutil.which("kubectl"), reason="kubectl not installed")
def test_kubectl_kustomize_renders_the_pool(tmp_path):
    r = subprocess.run(["kubectl", "kustomize", POOL], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, KUBECONFIG=str(tmp_path / "none")))
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert {d["kind"] for d in docs} == set(POOL_API)
    for d in docs:
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "loragate"
