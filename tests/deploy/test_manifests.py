"""deploy/: the image, the compose stack, nginx and the Kubernetes manifests, checked without Docker or a
cluster: every manifest against the Kubernetes schemas (offline), the config with firsttoken's own loader,
nginx.conf with `nginx -t`, and the pieces against each other (ports, keys, limits, timeouts)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from firsttoken import config as config_module
from firsttoken.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
CONFIG = DEPLOY / "config.yaml"
PORT = 8787
K8S_VERSION = kubernetes_validate.utils.latest_version()  # the newest schemas the package ships

# Values for the ${…} the config needs, as an operator's environment would give them.
SECRETS = {
    "UPSTREAM_API_KEY": "sk-deploy-test-upstream-key",
    "FIRSTTOKEN_CLIENT_KEY": "client-key-for-the-deploy-tests",
    "FIRSTTOKEN_ADMIN_KEY": "admin-key-for-the-deploy-tests-0123",
}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc) for doc in _documents(path)]
    return found


def _by_kind(kind: str, name: str) -> dict[str, Any]:
    matches = [doc for _, doc in _manifests() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"one {kind} {name} in deploy/k8s, found {len(matches)}"
    return matches[0]


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _gateway_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items() if "serve" in svc.get("command", [])}


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return [node] if isinstance(node, str) else []


def _required_env(path: Path) -> set[str]:
    """Names the config takes from the environment with no default: start-up stops without them."""
    return {m.group(1) for text in _strings(yaml.safe_load(path.read_text()))
            for m in re.finditer(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}", text) if not m.group(2)}


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach the network fails the test."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"network access attempted: {args!r}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# --- Kubernetes --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "manifest"), _manifests(), ids=[name for name, _ in _manifests()])
def test_k8s_manifest_is_valid_for_the_newest_kubernetes(name: str, manifest: dict[str, Any], offline: None) -> None:
    # strict: unknown fields are errors too, as `kubectl apply --validate=strict` makes them
    validated = kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    assert validated == kubernetes_validate.utils.major_minor(K8S_VERSION)


def test_k8s_validation_catches_a_wrong_field(offline: None) -> None:
    broken = json.loads(json.dumps(_by_kind("Deployment", "firsttoken")))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert all((K8S / name).is_file() for name in listed)
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert listed == on_disk


def test_k8s_gateway_deployment() -> None:
    deployment = _by_kind("Deployment", "firsttoken")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert container["args"] == ["firsttoken", "serve", "--config", "/etc/firsttoken/config.yaml",
                                 "--host", "0.0.0.0", "--workers", "2"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": PORT}

    # non-root, read-only, no capabilities; the same user as the image's
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == _dockerfile_uid() != 0
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])

    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}

    # the config from the ConfigMap at /etc/firsttoken; writable state and /tmp on emptyDirs
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_volume = volumes[mounts["/etc/firsttoken"]["name"]]
    assert config_volume["configMap"]["name"] == _by_kind("ConfigMap", "firsttoken-config")["metadata"]["name"]
    assert mounts["/etc/firsttoken"]["readOnly"] is True
    for writable in ("/var/lib/firsttoken", "/tmp"):  # SQLite state; the workers' Unix sockets
        assert "emptyDir" in volumes[mounts[writable]["name"]]


def test_k8s_service_reaches_the_gateway_pods() -> None:
    service = _by_kind("Service", "firsttoken")
    pod_labels = _by_kind("Deployment", "firsttoken")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http" and port["port"] == PORT


def test_k8s_redis_is_the_one_the_gateway_uses() -> None:
    container = _by_kind("Deployment", "firsttoken")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    redis_service = _by_kind("Service", "firsttoken-redis")
    redis_pods = _by_kind("Deployment", "firsttoken-redis")["spec"]["template"]
    assert redis_service["spec"]["selector"].items() <= redis_pods["metadata"]["labels"].items()
    (port,) = redis_service["spec"]["ports"]
    assert env["REDIS_URL"]["value"] == f"redis://{redis_service['metadata']['name']}:{port['port']}/0"
    assert redis_pods["spec"]["securityContext"]["runAsNonRoot"] is True


def test_k8s_keys_come_from_the_secret_the_example_describes() -> None:
    container = _by_kind("Deployment", "firsttoken")["spec"]["template"]["spec"]["containers"][0]
    secret = _by_kind("Secret", "firsttoken-keys")
    from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert set(from_secret) == _required_env(CONFIG) == set(SECRETS)
    for ref in from_secret.values():
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]


def test_k8s_configmap_holds_the_deploy_config_verbatim() -> None:
    assert _by_kind("ConfigMap", "firsttoken-config")["data"]["config.yaml"] == CONFIG.read_text()


# --- the config --------------------------------------------------------------------------------------

def _k8s_environ() -> dict[str, str]:
    container = _by_kind("Deployment", "firsttoken")["spec"]["template"]["spec"]["containers"][0]
    return {**{e["name"]: e["value"] for e in container["env"] if "value" in e}, **SECRETS}


def _compose_environ(service: dict[str, Any]) -> dict[str, str]:
    environ = {}
    for name, value in service["environment"].items():  # ${NAME:-default} → default; ${NAME:?…} → a secret
        match = re.fullmatch(r"\$\{(\w+)(?::-([^}]*)|:\?[^}]*)?\}", str(value))
        environ[name] = (match.group(2) if match.group(2) is not None else SECRETS[match.group(1)]) if match else value
    return environ


def test_deploy_config_loads_as_compose_and_k8s_give_it(tmp_path: Path) -> None:
    compose = _compose()
    environs = {"k8s": _k8s_environ()} | {name: _compose_environ(svc) for name, svc in
                                          _gateway_services(compose).items()}
    for where, environ in environs.items():
        settings = config_module.load(CONFIG, environ=environ)
        assert settings.cache.backend == "redis", where
        assert settings.cache.url == settings.limits.redis == settings.journeys.redis == environ["REDIS_URL"], where
        assert settings.keys and settings.admin_key is not None, where
        assert settings.listen.port == PORT, where
        assert settings.journeys.log == "/var/lib/firsttoken/journeys.db", where
        assert settings.responses.store == "/var/lib/firsttoken/responses.db", where


def test_deploy_config_names_a_missing_secret() -> None:
    environ = {k: v for k, v in SECRETS.items() if k != "FIRSTTOKEN_ADMIN_KEY"}
    with pytest.raises(ConfigError, match="FIRSTTOKEN_ADMIN_KEY"):
        config_module.load(CONFIG, environ=environ)


# --- compose -----------------------------------------------------------------------------------------

def test_compose_has_two_gateways_one_redis_and_nginx() -> None:
    compose = _compose()
    services = compose["services"]
    gateways = _gateway_services(compose)
    assert set(gateways) == {"gateway-1", "gateway-2"}
    assert {"redis", "nginx"} <= set(services)
    assert {name for name, svc in services.items() if "profiles" not in svc} == {*gateways, "redis", "nginx"}

    redis_url = _compose_environ(gateways["gateway-1"])["REDIS_URL"]
    assert redis_url == "redis://redis:6379/0"
    state_volumes = set()
    for name, svc in gateways.items():
        assert svc["command"] == ["firsttoken", "serve", "--config", "/etc/firsttoken/config.yaml",
                                  "--host", "0.0.0.0", "--workers", "2"], name
        assert "./config.yaml:/etc/firsttoken/config.yaml:ro" in svc["volumes"], name
        state = [v for v in svc["volumes"] if v.endswith(":/var/lib/firsttoken")]
        assert len(state) == 1, name
        state_volumes.add(state[0].split(":")[0])
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy", name
        assert "/readyz" in " ".join(svc["healthcheck"]["test"]), name
        assert set(svc["environment"]) >= _required_env(CONFIG), name
        assert svc["read_only"] is True and "/tmp" in svc["tmpfs"], name
    assert len(state_volumes) == 2 and state_volumes <= set(compose["volumes"])  # one each

    nginx = services["nginx"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in nginx["volumes"]
    assert {name: dep["condition"] for name, dep in nginx["depends_on"].items()} == \
        dict.fromkeys(gateways, "service_healthy")
    assert any(str(p).endswith(":8080") for p in nginx["ports"])
    assert "healthcheck" in services["redis"] and "healthcheck" in nginx
    assert (DEPLOY / "Dockerfile").is_file()
    assert {svc["build"]["dockerfile"] for svc in gateways.values()} == {"deploy/Dockerfile"}
    assert {(DEPLOY / svc["build"]["context"]).resolve() for svc in gateways.values()} == {ROOT}


# --- nginx -------------------------------------------------------------------------------------------

NGINX_CONF = DEPLOY / "nginx.conf"


def _nginx_directive(name: str) -> list[str]:
    return re.findall(rf"^[ \t]*{name}[ \t]+([^;{{}}\n]+);", NGINX_CONF.read_text(), re.MULTILINE)


def _seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)?", value.strip()).groups()
    return int(number) * {"ms": 0.001, None: 1, "s": 1, "m": 60, "h": 3600}[unit]


def _bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG])?", value.strip()).groups()
    return int(number) * {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3}[(unit or "").lower() or None]


def test_nginx_balances_both_gateways_and_streams_unbuffered() -> None:
    servers = {s.split()[0] for s in _nginx_directive("server")}
    assert servers == {f"{name}:{PORT}" for name in _gateway_services(_compose())}
    assert _nginx_directive("proxy_buffering") == ["off"]
    assert _nginx_directive("proxy_http_version") == ["1.1"]
    assert _nginx_directive("proxy_set_header Connection") == ['""']
    assert int(_nginx_directive("keepalive")[0]) > 0
    assert _nginx_directive("listen") == ["8080"]


def test_nginx_bounds_match_the_gateway_limits() -> None:
    settings = config_module.load(CONFIG, environ=_k8s_environ())
    assert _bytes(_nginx_directive("client_max_body_size")[0]) == settings.limits.max_body_bytes
    count, size = _nginx_directive("large_client_header_buffers")[0].split()
    assert _bytes(size) >= settings.limits.max_header_bytes
    assert _seconds(_nginx_directive("client_header_timeout")[0]) >= settings.limits.header_timeout_s
    assert _seconds(_nginx_directive("client_body_timeout")[0]) >= settings.limits.body_timeout_s
    # nginx must outwait the gateway's own waits on its upstreams, or it cuts answers the gateway would give
    timeouts = settings.upstreams["primary"].timeouts
    longest = max(timeouts.first_byte, timeouts.idle, timeouts.total)
    assert _seconds(_nginx_directive("proxy_read_timeout")[0]) > longest
    assert _seconds(_nginx_directive("proxy_read_timeout")[0]) > settings.streaming.heartbeat_s


NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_nginx_conf_passes_nginx_t(tmp_path: Path) -> None:
    text = NGINX_CONF.read_text()
    text = re.sub(r"\bgateway-\d+:", "127.0.0.1:", text)  # compose's names do not resolve here
    text = text.replace("/tmp/", f"{tmp_path}/")
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    done = subprocess.run([NGINX, "-t", "-q", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
                          capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr


# --- the Dockerfile ----------------------------------------------------------------------------------

DOCKERFILE = DEPLOY / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines, pending = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in lines]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _final(name: str) -> list[str]:
    return [args for instruction, args in _stages()[-1] if instruction == name]


def _dockerfile_uid() -> int:
    (user,) = _final("USER")
    return int(user.split(":")[0])


def test_dockerfile_is_multi_stage_on_python_slim() -> None:
    args = dict(a.split("=", 1) for i, a in _instructions() if i == "ARG" and "=" in a)
    stages = _stages()
    assert len(stages) >= 2
    for stage in stages:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], stage[0][1].split()[0])
        assert re.fullmatch(r"python:3\.1[12]-slim(-\w+)?", image), image
    # the final stage installs the wheels built before it, from no index, and nothing to compile with
    final_runs = " ".join(_final("RUN"))
    assert "--mount=type=bind,from=build" in final_runs and "--no-index" in final_runs
    assert not re.search(r"apt-get|build-essential|\bgcc\b|\bcc\b|python3-dev", final_runs)
    text = DOCKERFILE.read_text()
    assert "[test]" not in text and "pytest" not in text


def test_dockerfile_final_stage_runs_the_deploy_config_as_non_root() -> None:
    assert _dockerfile_uid() >= 1000
    (cmd,) = _final("CMD")
    assert json.loads(cmd) == ["firsttoken", "serve", "--config", "/etc/firsttoken/config.yaml",
                               "--host", "0.0.0.0", "--workers", "2"]
    assert _final("EXPOSE") == [str(PORT)]
    (healthcheck,) = _final("HEALTHCHECK")
    assert "/healthz" in healthcheck and '"python"' in healthcheck and "curl" not in healthcheck
    assert any("/var/lib/firsttoken" in v for v in _final("VOLUME"))
    runs = " ".join(_final("RUN"))
    assert f"--uid {_dockerfile_uid()}" in runs and f"-o {_dockerfile_uid()}" in runs  # state owned by that user
    assert "deploy/config.yaml /etc/firsttoken/config.yaml" in _final("COPY")


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, pattern[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes)
        if hit:
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_build_context_small_but_complete() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for heavy in (".venv", "node_modules", "tests", ".git", "test-artifacts"):
        assert _ignored(heavy, patterns), heavy
    assert _ignored("src/firsttoken/__pycache__/x.pyc", patterns)
    # everything the Dockerfile copies from the context is in it
    sources = []
    for instruction, args in _instructions():
        if instruction == "COPY" and "--from" not in args:
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            sources += words[:-1]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not _ignored(source, patterns), source
    assert not _ignored("src/firsttoken/config.py", patterns)


HADOLINT = shutil.which("hadolint")


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed")
def test_hadolint_finds_no_error() -> None:
    done = subprocess.run([HADOLINT, "--failure-threshold", "error", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
