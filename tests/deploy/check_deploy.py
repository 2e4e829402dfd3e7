#!/usr/bin/python3
"""check_deploy.py - the deployment files against the code, without a
container engine or a root filesystem (ctest label `integration`).

    check_deploy.py SOURCE_DIR COORDINATOR_BINARY

Checks, each printed as "ok: ..." or "FAIL: ...":
- deploy/Dockerfile: a build stage on debian:bookworm that runs
  deploy/install-deps.sh and a CMake preset that exists, whose binary the
  runtime stage (debian:bookworm-slim, the last stage) copies; the runtime
  stage installs exactly deploy/runtime-packages.txt (one apt-get install,
  fed only by the list, --no-install-recommends); user, volume, port,
  health check, stop signal and entry point agree with each other.
- deploy/runtime-packages.txt against the built coordinator: every library
  it is linked against (readelf NEEDED) belongs (dpkg -S) to a listed
  package, every library ldd loads belongs to a listed package or to one of
  their dependencies (dpkg's Depends, recursively), and every listed
  package is such a library's or a documented tool's.
- deploy/compose.yaml and deploy/k8s/*.yaml parse (python3-yaml) and refer
  to things that exist: STARLING_* names are options of
  `starling-coordinator --help`, probe and scrape paths are paths of
  api/openapi.yaml, ports agree with STARLING_LISTEN and EXPOSE, secret
  names and keys agree between the StatefulSet, the ServiceMonitor and the
  example Secrets, and the secret files the settings name are mounted.
Ends with "N passed, N failed"; exit status 1 when anything failed.
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dockerfile  # noqa: E402  (beside this file)

RESULTS = {"passed": 0, "failed": 0}


def check(ok, what, detail=""):
    if ok:
        RESULTS["passed"] += 1
        print("ok: " + what)
    else:
        RESULTS["failed"] += 1
        print("FAIL: " + what + (": " + detail if detail else ""))
    return ok


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def duration_s(text):
    """A coordinator duration ("10s", "500ms", "2m", "1h", bare ms) in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", str(text).strip())
    if m is None:
        return None
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 0.001}[m.group(2)]
    return float(m.group(1)) * scale


def listen_port(value):
    m = re.fullmatch(r"(.*):(\d+)", str(value))
    return int(m.group(2)) if m else None


# ---- what the code says ---------------------------------------------------------


def coordinator_options(binary):
    """STARLING_<KEY> names from --help (keys printed as --data-dir)."""
    p = run([binary, "--help"])
    keys = re.findall(r"^\s+--([a-z0-9-]+)\s", p.stdout + p.stderr, re.MULTILINE)
    check(p.returncode == 0 and len(keys) > 10, "starling-coordinator --help lists its options",
          "exit %d, %d keys" % (p.returncode, len(keys)))
    return {"STARLING_" + k.replace("-", "_").upper() for k in keys}


def openapi_paths(src):
    with open(os.path.join(src, "api/openapi.yaml"), encoding="utf-8") as f:
        return set(yaml.safe_load(f)["paths"])


def runtime_list(src):
    path = os.path.join(src, "deploy/runtime-packages.txt")
    with open(path, encoding="utf-8") as f:
        names = [line.split("#", 1)[0].strip() for line in f]
    names = [n for n in names if n]
    bad = [n for n in names if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", n)]
    check(names and not bad, "runtime-packages.txt holds package names, one a line", str(bad))
    check(len(names) == len(set(names)), "runtime-packages.txt has no duplicates")
    return names


# ---- Dockerfile -------------------------------------------------------------------


def instr(stage, keyword):
    return [v for _l, k, _f, v in stage["instructions"] if k == keyword]


def check_dockerfile(src, listed, options, paths):
    """Returns the facts the manifests are compared with."""
    stages = dockerfile.parse(os.path.join(src, "deploy/Dockerfile"))
    build = dockerfile.stage(stages, "build")
    rt = dockerfile.stage(stages, "runtime")
    check(build["image"] == "debian:bookworm", "Dockerfile: build stage FROM debian:bookworm",
          build["image"])
    check(rt["image"] == "debian:bookworm-slim" and stages[-1] is rt,
          "Dockerfile: runtime stage FROM debian:bookworm-slim, the last (default) stage")

    # build: the installer and a preset that exist, and the binary it makes
    runs = " ; ".join(instr(build, "RUN"))
    check("deploy/install-deps.sh" in runs and
          os.path.isfile(os.path.join(src, "deploy/install-deps.sh")),
          "Dockerfile: build stage runs deploy/install-deps.sh")
    m = re.search(r"cmake --preset (\S+)", runs)
    preset = m.group(1) if m else None
    with open(os.path.join(src, "CMakePresets.json"), encoding="utf-8") as f:
        presets = {p["name"]: p for p in json.load(f)["configurePresets"]}
    check(preset == "release" and preset in presets and
          "cmake --build --preset %s" % preset in runs,
          "Dockerfile: build stage configures and builds the release preset", str(preset))
    workdir = (instr(build, "WORKDIR") or ["/"])[-1]
    binary_in_build = "%s/build/%s/coordinator/starling-coordinator" % (workdir.rstrip("/"),
                                                                         preset)
    copies = [(f.get("from", ""), v) for _l, k, f, v in rt["instructions"] if k == "COPY"]
    from_build = [v for fr, v in copies if fr == "build"]
    check(len(from_build) == 1 and from_build[0][0] == binary_in_build,
          "Dockerfile: runtime copies the binary the build stage makes (%s)" % binary_in_build,
          str(from_build))
    entry = instr(rt, "ENTRYPOINT")
    check(entry and from_build and entry[-1][:1] == [from_build[0][1]],
          "Dockerfile: ENTRYPOINT is the copied coordinator", str(entry))

    # runtime: exactly the list
    list_copy = [v[1] for fr, v in copies if fr == "" and v[0] == "deploy/runtime-packages.txt"]
    check(len(list_copy) == 1, "Dockerfile: runtime stage copies deploy/runtime-packages.txt")
    rt_runs = instr(rt, "RUN")
    installs = [r for r in rt_runs if "apt-get install" in r]
    check(len(installs) == 1 and sum(r.count("apt-get install") for r in rt_runs) == 1,
          "Dockerfile: runtime stage has one apt-get install")
    other = re.findall(r"(?<![\w/-])(apt(?=\s)|aptitude|dpkg -i|dpkg --install|"
                       r"apt-get (?!update\b|install\b|clean\b)\S+)", " ".join(rt_runs))
    check(not other, "Dockerfile: no other package installs in the runtime stage", str(other))
    if len(installs) == 1 and len(list_copy) == 1:
        run_text = installs[0]
        cmd = re.search(r"apt-get install([^;&|]*)", run_text).group(1).split()
        options_used = [w for w in cmd if w.startswith("-")]
        args = [w for w in cmd if not w.startswith("-")]
        check("--no-install-recommends" in options_used and "-y" in options_used,
              "Dockerfile: apt-get install -y --no-install-recommends")
        var = args[0][1:] if len(args) == 1 and args[0].startswith("$") else None
        m = re.search(r"\b%s=\$\(([^)]*)\)" % re.escape(var or "-"), run_text)
        check(var is not None and m is not None and list_copy[0] in m.group(1),
              "Dockerfile: the packages installed are only those read from the list",
              "arguments %s" % args)
        if m is not None:
            # the Dockerfile's own reading of the list, run here on the real file
            cmdline = m.group(1).replace(list_copy[0], shlex.quote(
                os.path.join(src, "deploy/runtime-packages.txt")))
            p = run(["sh", "-c", cmdline])
            check(p.returncode == 0 and p.stdout.split() == listed,
                  "Dockerfile: its reading of the list gives exactly the list",
                  "%s vs %s" % (p.stdout.split(), listed))

    # user, data, port, signal, health, settings
    user = (instr(rt, "USER") or [""])[-1]
    m = re.fullmatch(r"(\d+):(\d+)", user)
    uid, gid = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    check(m is not None and uid != 0 and gid != 0,
          "Dockerfile: USER is a numeric non-root uid:gid (runAsNonRoot can verify it)", user)
    allrun = " ".join(rt_runs)
    check(uid is not None and "--uid %d" % uid in allrun and "--gid %d" % gid in allrun and
          "chown %d:%d /data" % (uid, gid) in allrun,
          "Dockerfile: the user exists in the image and owns /data")
    env = dict(p for pairs in instr(rt, "ENV") for p in pairs)
    unknown = sorted(k for k in env if k not in options)
    check(not unknown and env, "Dockerfile: every ENV is a coordinator option", str(unknown))
    data = env.get("STARLING_DATA_DIR")
    check(instr(rt, "VOLUME") == [[data]] and (instr(rt, "WORKDIR") or [None])[-1] == data,
          "Dockerfile: VOLUME and WORKDIR are STARLING_DATA_DIR (%s)" % data)
    port = listen_port(env.get("STARLING_LISTEN", ""))
    check(env.get("STARLING_LISTEN", "").startswith("0.0.0.0:"),
          "Dockerfile: STARLING_LISTEN listens on every interface")
    check(instr(rt, "EXPOSE") == ["%d/tcp" % port] if port else False,
          "Dockerfile: EXPOSE is the STARLING_LISTEN port", str(instr(rt, "EXPOSE")))
    check(instr(rt, "STOPSIGNAL") == ["SIGTERM"], "Dockerfile: STOPSIGNAL SIGTERM")
    hc = instr(rt, "HEALTHCHECK")
    hc_text = hc[-1] if hc and isinstance(hc[-1], str) else ""
    hc_paths = re.findall(r"://[^/\"]*(/[a-z]+)", hc_text)
    check(hc_paths == ["/healthz"] and "/healthz" in paths and "curl " in hc_text,
          "Dockerfile: HEALTHCHECK gets /healthz (a path of api/openapi.yaml) with curl")
    hc_vars = set(re.findall(r"\$\{?(STARLING_[A-Z_]+)", hc_text))
    check(hc_vars and hc_vars <= options, "Dockerfile: HEALTHCHECK reads coordinator options",
          str(hc_vars - options))
    secret_files = {k: v for k, v in env.items() if v.startswith("/run/secrets/")}
    check(set(secret_files) == {"STARLING_TLS_CERT", "STARLING_TLS_KEY",
                                "STARLING_ADMIN_TOKEN_FILE", "STARLING_ENROLMENT_TOKEN_FILE"},
          "Dockerfile: TLS files and tokens are read from /run/secrets/ (mounted, not baked in)")
    baked = [v for v in copies if "secret" in v[1][0] or v[1][0].endswith((".pem", ".key"))]
    check(not baked and not any(re.search(r"TOKEN(?!_FILE)|PASSWORD|SECRET", k) for k in env),
          "Dockerfile: no secret is copied or set", str(baked))
    return {"env": env, "uid": uid, "gid": gid, "port": port, "healthcheck": hc_text,
            "grace": duration_s(env.get("STARLING_GRACE", "10s"))}


# ---- runtime packages against the built binary ------------------------------------


def owner(path):
    """The package that owns @path (dpkg -S), trying the usrmerge twin too."""
    cands = [path, os.path.realpath(path)]
    for c in list(cands):
        if c.startswith("/usr/lib/"):
            cands.append(c[4:])
        elif c.startswith("/lib"):
            cands.append("/usr" + c)
    for c in cands:
        p = run(["dpkg", "-S", c])
        if p.returncode == 0:
            return p.stdout.split(":", 1)[0].split(",")[0].strip()
    return None


def installed_depends():
    """{package: [[alternative, ...], ...]} of installed packages, and virtual names."""
    p = run(["dpkg-query", "-W", "-f", "${Package}\t${Depends}, ${Pre-Depends}\t${Provides}\n"])
    deps, provides = {}, {}
    for line in p.stdout.splitlines():
        name, dep, prov = (line.split("\t") + ["", ""])[:3]
        deps[name] = [[re.sub(r"[\s(:].*", "", a.strip()) for a in group.split("|")]
                      for group in dep.split(",") if group.strip()]
        for v in prov.split(","):
            v = re.sub(r"[\s(].*", "", v.strip())
            if v:
                provides.setdefault(v, []).append(name)
    return deps, provides


def closure(roots, deps, provides):
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for group in deps.get(name, []):
            for alt in group:
                for real in ([alt] if alt in deps else provides.get(alt, [])):
                    todo.append(real)
    return seen


def check_libraries(binary, listed, facts, src):
    p = run(["readelf", "-d", binary])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout)
    check(p.returncode == 0 and needed, "readelf lists the coordinator's NEEDED libraries",
          p.stderr)
    p = run(["ldd", binary])
    loaded = {}
    for line in p.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line) or re.match(r"\s*(/\S+) \(", line)
        if m:
            loaded[m.group(1)] = m.group(m.lastindex)
    missing = [line for line in p.stdout.splitlines() if "not found" in line]
    check(p.returncode == 0 and not missing and loaded, "ldd resolves every library", str(missing))
    owners = {}
    for soname, path in loaded.items():
        owners[soname] = owner(path)
    unowned = sorted(s for s, o in owners.items() if o is None)
    check(not unowned, "dpkg -S finds the package of every loaded library", str(unowned))
    direct = {s: owners.get(s) for s in needed}
    outside = sorted("%s (%s)" % (s, o) for s, o in direct.items() if o not in listed)
    check(not outside, "every NEEDED library's package is in runtime-packages.txt", str(outside))
    deps, provides = installed_depends()
    reach = closure(listed, deps, provides)
    stray = sorted("%s (%s)" % (s, o) for s, o in owners.items() if o is not None and
                   o not in reach)
    check(not stray, "every loaded library comes with the list or its dependencies (%d libraries)"
          % len(owners), str(stray))
    # every listed package earns its place
    tools = {"curl": "curl " in facts["healthcheck"]}
    with open(os.path.join(src, "deploy/README.md"), encoding="utf-8") as f:
        readme = f.read()
    tools["sqlite3"] = re.search(r"sqlite3 /data/starling\.db \"VACUUM INTO ", readme) is not None
    libs = set(direct.values())
    for name in listed:
        if name in libs:
            continue
        check(tools.get(name, False), "listed package %s is a documented tool (HEALTHCHECK, "
              "README's backup)" % name, "neither a library of the coordinator nor a used tool")
    check(libs <= set(listed), "the list names each package of a NEEDED library")


# ---- compose ----------------------------------------------------------------------


def check_compose(src, facts, options, paths):
    base = os.path.join(src, "deploy")
    with open(os.path.join(base, "compose.yaml"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    svc = doc.get("services", {}).get("coordinator")
    check(isinstance(svc, dict), "compose.yaml: parses, with service `coordinator`")
    if not isinstance(svc, dict):
        return
    b = svc.get("build", {})
    df = os.path.normpath(os.path.join(base, b.get("context", "."), b.get("dockerfile", "")))
    check(df == os.path.normpath(os.path.join(src, "deploy/Dockerfile")),
          "compose.yaml: builds deploy/Dockerfile from the repository root", df)
    env = dict(facts["env"])
    env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
    unknown = sorted(k for k in (svc.get("environment") or {}) if k not in options)
    check(not unknown, "compose.yaml: every environment name is a coordinator option",
          str(unknown))
    port = listen_port(env.get("STARLING_LISTEN"))
    targets = [int(str(p).rsplit(":", 1)[-1].split("/")[0]) for p in svc.get("ports", [])]
    check(targets == [port] and port == facts["port"],
          "compose.yaml: the published port is STARLING_LISTEN's and EXPOSE's (%s)" % port,
          str(targets))
    vols = [v.split(":") for v in svc.get("volumes", []) if isinstance(v, str)]
    named = [v[0] for v in vols if len(v) >= 2 and v[1] == env.get("STARLING_DATA_DIR")]
    check(len(named) == 1 and named[0] in (doc.get("volumes") or {}),
          "compose.yaml: a named volume at STARLING_DATA_DIR (%s)" % env.get("STARLING_DATA_DIR"))
    declared = doc.get("secrets") or {}
    mounted = {}
    for s in svc.get("secrets", []):
        s = {"source": s, "target": s} if isinstance(s, str) else s
        ok = s["source"] in declared and "file" in declared[s["source"]]
        check(ok, "compose.yaml: secret %s is declared with a file" % s["source"])
        mounted["/run/secrets/" + s.get("target", s["source"])] = s["source"]
    wanted = {v for k, v in env.items() if v.startswith("/run/secrets/")}
    check(wanted and wanted == set(mounted),
          "compose.yaml: the secrets mounted are the files the settings name",
          "%s vs %s" % (sorted(wanted), sorted(mounted)))
    test = (svc.get("healthcheck") or {}).get("test", [])
    shell = test[1].replace("$$", "$") if len(test) == 2 and test[0] == "CMD-SHELL" else ""
    check(" ".join(shell.split()) == " ".join(facts["healthcheck"].split()),
          "compose.yaml: the health check is the image's HEALTHCHECK")
    grace = duration_s(env.get("STARLING_GRACE", "10s"))
    stop = duration_s(svc.get("stop_grace_period", "10s"))
    check(svc.get("stop_signal") == "SIGTERM" and stop is not None and grace is not None and
          stop > grace, "compose.yaml: SIGTERM, and stop_grace_period (%ss) > STARLING_GRACE "
          "(%ss)" % (stop, grace))
    check(svc.get("read_only") is True and "/tmp" in (svc.get("tmpfs") or []),
          "compose.yaml: read-only root with a tmpfs /tmp (as tests/deploy runs it)")


# ---- Kubernetes -------------------------------------------------------------------


def k8s_docs(src):
    docs = []
    for path in sorted(glob.glob(os.path.join(src, "deploy/k8s/*.yaml"))):
        with open(path, encoding="utf-8") as f:
            try:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                check(False, "k8s: %s parses" % os.path.basename(path), str(e))
                continue
        check(all("kind" in d for d in loaded), "k8s: %s parses (%s)" % (
            os.path.basename(path), ", ".join(d.get("kind", "?") for d in loaded)))
        for d in loaded:
            docs.append((os.path.basename(path), d))
    return docs


def port_of(container, ref):
    for p in container.get("ports", []):
        if ref in (p.get("name"), p.get("containerPort")):
            return p.get("containerPort")
    return None


def check_k8s(src, facts, options, paths):
    docs = k8s_docs(src)
    by_kind = {}
    for fname, d in docs:
        by_kind.setdefault(d["kind"], []).append((fname, d))
    kust = [d for _f, d in by_kind.get("Kustomization", [])]
    if check(len(kust) == 1, "k8s: one kustomization.yaml"):
        res = kust[0].get("resources", [])
        check(all(os.path.isfile(os.path.join(src, "deploy/k8s", r)) for r in res) and
              "statefulset.yaml" in res and "secrets.example.yaml" not in res,
              "k8s: kustomization lists existing files, not the example Secrets", str(res))
    sts = [d for _f, d in by_kind.get("StatefulSet", [])]
    if not check(len(sts) == 1, "k8s: one StatefulSet"):
        return
    st = sts[0]["spec"]
    pod = st["template"]["spec"]
    labels = st["template"]["metadata"].get("labels", {})
    check(st.get("replicas") == 1, "k8s: StatefulSet has exactly one replica")
    check(set(st["selector"]["matchLabels"].items()) <= set(labels.items()),
          "k8s: StatefulSet selector matches its pod labels")
    services = {d["metadata"]["name"]: d for _f, d in by_kind.get("Service", [])}
    gov = services.get(st.get("serviceName"))
    check(gov is not None and gov["spec"].get("clusterIP") == "None",
          "k8s: serviceName is a headless Service", str(st.get("serviceName")))
    cs = pod.get("containers", [])
    if not check(len(cs) == 1, "k8s: one container"):
        return
    c = cs[0]

    # environment: the image's defaults, then envFrom ConfigMaps, then env
    maps = {d["metadata"]["name"]: d for _f, d in by_kind.get("ConfigMap", [])}
    env = dict(facts["env"])
    for ef in c.get("envFrom", []):
        name = ef.get("configMapRef", {}).get("name")
        check(name in maps, "k8s: envFrom ConfigMap %s exists" % name)
        data = maps.get(name, {}).get("data", {})
        unknown = sorted(k for k in data if k not in options)
        check(not unknown, "k8s: ConfigMap %s keys are coordinator options" % name, str(unknown))
        check(all(isinstance(v, str) for v in data.values()),
              "k8s: ConfigMap %s values are strings" % name)
        env.update(data)
    for e in c.get("env", []):
        check(e["name"] in options, "k8s: env %s is a coordinator option" % e["name"])
        if "value" in e:
            env[e["name"]] = e["value"]
    check(pod.get("enableServiceLinks") is False,
          "k8s: enableServiceLinks is off (no STARLING_COORDINATOR_* variables)")

    # ports and probes
    port = listen_port(env.get("STARLING_LISTEN"))
    cports = [p.get("containerPort") for p in c.get("ports", [])]
    check(cports == [port] and port == facts["port"],
          "k8s: containerPort is STARLING_LISTEN's and EXPOSE's (%s)" % port, str(cports))
    insecure = str(env.get("STARLING_INSECURE_HTTP", "false")) in ("1", "true", "yes", "on")
    scheme = "HTTP" if insecure else "HTTPS"
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        g = (c.get(probe) or {}).get("httpGet", {})
        check(g.get("path") == path and path in paths and port_of(c, g.get("port")) == port and
              g.get("scheme", "HTTP") == scheme,
              "k8s: %s GETs %s (in api/openapi.yaml) on the container port over %s" %
              (probe, path, scheme), str(g))
    for name, svc in services.items():
        for sp in svc["spec"].get("ports", []):
            check(port_of(c, sp.get("targetPort")) == port,
                  "k8s: Service %s targetPort %s is the container port" % (
                      name, sp.get("targetPort")))
        check(set(svc["spec"].get("selector", {}).items()) <= set(labels.items()),
              "k8s: Service %s selects the coordinator pod" % name)
    ann = st["template"]["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") in paths and
          ann.get("prometheus.io/path") == "/metrics" and
          ann.get("prometheus.io/port") == str(port) and
          ann.get("prometheus.io/scheme") == scheme.lower(),
          "k8s: prometheus.io annotations scrape /metrics on the container port", str(ann))

    # user, resources, shutdown
    sc = pod.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == facts["uid"] and
          sc.get("runAsGroup") == facts["gid"] and sc.get("fsGroup") == facts["gid"],
          "k8s: runs as the image's user %s:%s, fsGroup %s" % (facts["uid"], facts["gid"],
                                                              facts["gid"]))
    res = c.get("resources", {})
    check(all(k in res.get(w, {}) for w in ("requests", "limits") for k in ("cpu", "memory")),
          "k8s: cpu and memory requests and limits", str(res))
    grace = duration_s(env.get("STARLING_GRACE", "10s"))
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    check(grace is not None and tgps > grace,
          "k8s: terminationGracePeriodSeconds (%s) > STARLING_GRACE (%ss)" % (tgps, grace))

    # volumes: /data from the claim template, /tmp writable, secrets mounted
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    claims = [t["metadata"]["name"] for t in st.get("volumeClaimTemplates", [])]
    check(mounts.get(env.get("STARLING_DATA_DIR")) in claims,
          "k8s: STARLING_DATA_DIR (%s) is a volumeClaimTemplate" % env.get("STARLING_DATA_DIR"))
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    ro = (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is True
    check(ro and "emptyDir" in vols.get(mounts.get("/tmp"), {}),
          "k8s: read-only root filesystem with an emptyDir /tmp")
    secrets = {d["metadata"]["name"]: d for _f, d in by_kind.get("Secret", [])}
    files = set()

    def secret_source(sname, items, mount):
        s = secrets.get(sname)
        keys = set((s or {}).get("data", {}) or {}) | set((s or {}).get("stringData", {}) or {})
        check(s is not None, "k8s: Secret %s has an example in secrets.example.yaml" % sname)
        for it in items or [{"key": k, "path": k} for k in sorted(keys)]:
            check(it["key"] in keys, "k8s: Secret %s has key %s" % (sname, it["key"]))
            files.add(mount.rstrip("/") + "/" + it["path"])

    for mpath, vname in mounts.items():
        v = vols.get(vname, {})
        if "secret" in v:
            secret_source(v["secret"]["secretName"], v["secret"].get("items"), mpath)
        for srcs in (v.get("projected") or {}).get("sources", []):
            if "secret" in srcs:
                secret_source(srcs["secret"]["name"], srcs["secret"].get("items"), mpath)
    wanted = {val for val in env.values() if str(val).startswith("/run/secrets/")}
    check(wanted and wanted <= files, "k8s: every secret file the settings name is mounted",
          "%s not in %s" % (sorted(wanted - files), sorted(files)))
    for name, s in secrets.items():
        if s.get("type") == "kubernetes.io/tls":
            keys = set(s.get("data") or {}) | set(s.get("stringData") or {})
            check(keys == {"tls.crt", "tls.key"},
                  "k8s: TLS Secret %s has the keys kubectl create secret tls makes" % name)

    # the optional ServiceMonitor
    for _f, sm in by_kind.get("ServiceMonitor", []):
        sel = set(sm["spec"]["selector"]["matchLabels"].items())
        hits = [n for n, svc in services.items() if sel <= set(svc["metadata"]["labels"].items())]
        check(len(hits) == 1, "k8s: ServiceMonitor selects one Service", str(hits))
        for ep in sm["spec"]["endpoints"]:
            sports = [p["name"] for h in hits for p in services[h]["spec"]["ports"]]
            check(ep.get("port") in sports and ep.get("path") == "/metrics" and
                  ep.get("path") in paths and ep.get("scheme") == scheme.lower(),
                  "k8s: ServiceMonitor scrapes /metrics on a named Service port")
            cred = (ep.get("authorization") or {}).get("credentials", {})
            s = secrets.get(cred.get("name"), {})
            keys = set(s.get("data") or {}) | set(s.get("stringData") or {})
            check(cred.get("key") in keys and cred.get("key") in (
                it["key"] for v in vols.values()
                for srcs in (v.get("projected") or {}).get("sources", [])
                if srcs.get("secret", {}).get("name") == cred.get("name")
                for it in srcs["secret"].get("items", [])) and
                any(str(val).endswith("/" + cred.get("key", "?")) and k ==
                    "STARLING_ADMIN_TOKEN_FILE" for k, val in env.items()),
                "k8s: ServiceMonitor's bearer token is the coordinator's admin token")


# ---- replicas on PostgreSQL (#21) ---------------------------------------------------------


def check_k8s_replicas(src, facts, options, paths):
    base = os.path.join(src, "deploy/k8s/replicas")
    docs = []
    for path in sorted(glob.glob(os.path.join(base, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            docs += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for fname, d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    kust = by_kind.get("Kustomization", [])
    if check(len(kust) == 1, "k8s replicas: one kustomization.yaml"):
        res = kust[0].get("resources", [])
        check(all(os.path.isfile(os.path.join(base, r)) for r in res) and
              {"deployment.yaml", "service.yaml", "pdb.yaml", "postgres-cluster.yaml"} <= set(res),
              "k8s replicas: kustomization lists the Deployment, Service, PDB and database",
              str(res))
    deps = by_kind.get("Deployment", [])
    if not check(len(deps) == 1, "k8s replicas: one Deployment"):
        return
    dep = deps[0]["spec"]
    pod = dep["template"]["spec"]
    labels = dep["template"]["metadata"].get("labels", {})
    replicas = dep.get("replicas", 1)
    check(replicas >= 2 and set(dep["selector"]["matchLabels"].items()) <= set(labels.items()),
          "k8s replicas: a Deployment of 2 or more replicas selecting its pods", str(replicas))
    c = pod["containers"][0]
    maps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    env = dict(facts["env"])
    for ef in c.get("envFrom", []):
        data = maps.get(ef.get("configMapRef", {}).get("name"), {}).get("data", {})
        check(data and not [k for k in data if k not in options],
              "k8s replicas: the ConfigMap's keys are coordinator options")
        env.update(data)
    refs = {}
    for e in c.get("env", []):
        check(e["name"] in options, "k8s replicas: env %s is a coordinator option" % e["name"])
        refs[e["name"]] = e.get("valueFrom", {})
    clusters = by_kind.get("Cluster", [])
    if check(len(clusters) == 1 and deps and
             clusters[0].get("apiVersion", "").startswith("postgresql.cnpg.io/"),
             "k8s replicas: one CloudNativePG Cluster"):
        cl = clusters[0]
        spec = cl["spec"]
        check(spec.get("instances", 1) >= 2 and spec.get("minSyncReplicas", 0) >= 1,
              "k8s replicas: the database has standbys and a synchronous one (an acknowledged "
              "update survives the primary)", str(spec.get("instances")))
        key = refs.get("STARLING_STORE", {}).get("secretKeyRef", {})
        check(key.get("name") == cl["metadata"]["name"] + "-app" and key.get("key") == "uri",
              "k8s replicas: STARLING_STORE is the URI of the Secret CloudNativePG makes for "
              "the Cluster (<name>-app, key uri)", str(key))
    check(refs.get("STARLING_REPLICA", {}).get("fieldRef", {}).get("fieldPath") ==
          "metadata.name", "k8s replicas: each replica is named after its pod")
    lease = duration_s(env.get("STARLING_LEADER_LEASE", "5s"))
    check(lease is not None and lease <= 10,
          "k8s replicas: the leader lease (%ss) is within the 10 s failover bound" % lease)
    port = listen_port(env.get("STARLING_LISTEN"))
    check([p.get("containerPort") for p in c.get("ports", [])] == [port] == [facts["port"]],
          "k8s replicas: containerPort is STARLING_LISTEN's and EXPOSE's")
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        g = (c.get(probe) or {}).get("httpGet", {})
        check(g.get("path") == path and path in paths and port_of(c, g.get("port")) == port,
              "k8s replicas: %s GETs %s on the container port" % (probe, path), str(g))
    svcs = by_kind.get("Service", [])
    check(len(svcs) == 1 and set(svcs[0]["spec"]["selector"].items()) <= set(labels.items()) and
          all(port_of(c, sp.get("targetPort")) == port for sp in svcs[0]["spec"]["ports"]),
          "k8s replicas: one Service over every replica's container port")
    pdbs = by_kind.get("PodDisruptionBudget", [])
    check(len(pdbs) == 1 and 1 <= pdbs[0]["spec"].get("minAvailable", 0) < replicas and
          set(pdbs[0]["spec"]["selector"]["matchLabels"].items()) <= set(labels.items()),
          "k8s replicas: a PodDisruptionBudget keeps some but not all replicas")
    sc = pod.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser") == facts["uid"] and
          (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is True,
          "k8s replicas: the image's non-root user, read-only root filesystem")
    grace = duration_s(env.get("STARLING_GRACE", "10s"))
    check(pod.get("terminationGracePeriodSeconds", 30) > grace,
          "k8s replicas: terminationGracePeriodSeconds > STARLING_GRACE")


def check_compose_replicas(src, facts, options):
    base = os.path.join(src, "deploy")
    with open(os.path.join(base, "compose-replicas.yaml"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    services = doc.get("services", {})
    coords = {n: s for n, s in services.items() if "STARLING_REPLICA" in
              (s.get("environment") or {})}
    check("postgres" in services and len(coords) >= 2,
          "compose-replicas.yaml: one PostgreSQL and two or more coordinator replicas",
          str(sorted(services)))
    names = []
    declared = doc.get("secrets") or {}
    for n, svc in coords.items():
        env = dict(facts["env"])
        env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
        unknown = sorted(k for k in (svc.get("environment") or {}) if k not in options)
        check(not unknown, "compose-replicas.yaml: %s's environment names are coordinator "
              "options" % n, str(unknown))
        names.append(env["STARLING_REPLICA"])
        mounted = set()
        for s in svc.get("secrets", []):
            check(s["source"] in declared and "file" in declared[s["source"]],
                  "compose-replicas.yaml: secret %s is declared with a file" % s["source"])
            mounted.add("/run/secrets/" + s.get("target", s["source"]))
        wanted = {v for v in env.values() if v.startswith("/run/secrets/")}
        check("STARLING_STORE_FILE" in env and wanted <= mounted,
              "compose-replicas.yaml: %s reads the store's URI and its secrets from mounted "
              "files" % n, "%s vs %s" % (sorted(wanted), sorted(mounted)))
    check(len(names) == len(set(names)), "compose-replicas.yaml: the replicas' names differ")
    with open(os.path.join(base, "haproxy-replicas.cfg"), encoding="utf-8") as f:
        cfg = f.read()
    servers = re.findall(r"^\s*server\s+\S+\s+([a-z0-9-]+):(\d+)", cfg, re.MULTILINE)
    check(sorted(h for h, _p in servers) == sorted(coords) and
          all(int(p) == facts["port"] for _h, p in servers) and "GET /readyz" in cfg,
          "haproxy-replicas.cfg: balances over every replica's port, checking /readyz",
          str(servers))


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: check_deploy.py SOURCE_DIR COORDINATOR_BINARY\n")
        return 2
    src, binary = argv[1], argv[2]
    try:
        options = coordinator_options(binary)
        paths = openapi_paths(src)
        check({"/healthz", "/readyz", "/metrics"} <= paths,
              "api/openapi.yaml has /healthz, /readyz and /metrics")
        listed = runtime_list(src)
        facts = check_dockerfile(src, listed, options, paths)
        check_libraries(binary, listed, facts, src)
        check_compose(src, facts, options, paths)
        check_k8s(src, facts, options, paths)
        check_k8s_replicas(src, facts, options, paths)
        check_compose_replicas(src, facts, options)
    except (OSError, KeyError, TypeError, AttributeError, ValueError, yaml.YAMLError,
            dockerfile.DockerfileError) as e:
        check(False, "the checks ran to the end", "%s: %s" % (type(e).__name__, e))
    print("%d passed, %d failed" % (RESULTS["passed"], RESULTS["failed"]))
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
