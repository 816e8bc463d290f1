"""Every deployment file parses and says what the code needs: the right module, images that
exist in this repository's build files, versions that match the pins, settings that
prx_data.core.settings accepts, and (for the Helm values) only keys the official chart knows.

No Docker engine, Kubernetes or Helm here, so the checks are static; a broken deployment file
fails CI all the same. Each check returns its problems, so a mutated copy can prove it bites.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from pydantic import TypeAdapter

from prx_data.core.native_memory import ARENA_MAX
from prx_data.core.settings import load_settings
from prx_data.models.captioning.config import CaptionerConfig
from prx_data.models.labeling.config import ClassifierConfig
from prx_data_tests.deploy.conftest import DEPLOYMENTS, REPO


def _match(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    found = re.search(pattern, text, flags)
    assert found, f"{pattern!r} not found in {text[:200]!r}"
    return found


CODE_MODULE = "prx_data.definitions"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT_VERSION = PYPROJECT["project"]["version"]
RAY_VERSION = next(_match(r"==(.+)$", d).group(1) for d in PYPROJECT["project"]["dependencies"] if d.startswith("ray["))
DAGSTER_VERSION = version("dagster")
CODE_IMAGE = "prx-data/code-location"
GPU_IMAGE = "prx-data/gpu-worker"

# The official chart's schema (helm/dagster/schema in dagster-io/dagster, 1.13), for the parts
# these values set. The chart's own values.schema.json rejects unknown keys in most sections.
CHART_TOP = {
    "global", "generatePostgresqlPasswordSecret", "generateCeleryConfigSecret", "postgresql",
    "dagsterWebserver", "dagster-user-deployments", "runLauncher", "dagsterDaemon", "concurrency",
    "telemetry", "computeLogManager", "scheduler", "pythonLogs", "ingress", "imagePullSecrets",
    "rabbitmq", "redis", "flower", "busybox", "migrate", "serviceAccount", "retention",
    "additionalInstanceConfig",
}  # fmt: skip
CHART_GLOBAL = {"postgresqlSecretName", "dagsterHome", "serviceAccountName", "celeryConfigSecretName", "dagsterInstanceConfigMap"}
CHART_POSTGRESQL = {
    "postgresqlScheme", "image", "enabled", "postgresqlHost", "postgresqlUsername", "postgresqlPassword",
    "postgresqlDatabase", "postgresqlParams", "service",
}  # fmt: skip
CHART_USER_DEPLOYMENT = {
    "name", "image", "port", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "env",
    "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations",
    "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe", "startupProbe",
    "labels", "volumeMounts", "volumes", "schedulerName",
}  # fmt: skip
CHART_K8S_RUN_LAUNCHER = {
    "image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile", "envConfigMaps",
    "envSecrets", "envVars", "volumeMounts", "volumes", "labels", "failPodOnRunFailure", "resources",
    "schedulerName", "securityContext", "runK8sConfig",
}  # fmt: skip
CHART_RUN_K8S_CONFIG = {"containerConfig", "podSpecConfig", "podTemplateSpecMetadata", "jobSpecConfig", "jobMetadata"}
CHART_DAEMON = {
    "schedulerName", "volumeMounts", "volumes", "enabled", "image", "runCoordinator", "heartbeatTolerance",
    "env", "envConfigMaps", "envSecrets", "deploymentLabels", "labels", "nodeSelector", "affinity",
    "tolerations", "podSecurityContext", "securityContext", "resources", "livenessProbe", "readinessProbe",
    "startupProbe", "annotations", "runMonitoring", "runRetries", "sensors", "schedules",
}  # fmt: skip
CHART_QUEUED_COORDINATOR = {
    "maxConcurrentRuns",
    "tagConcurrencyLimits",
    "dequeueIntervalSeconds",
    "dequeueNumWorkers",
    "dequeueUseThreads",
    "blockOpConcurrencyLimitedRuns",
}
CHART_CONCURRENCY = {"enabled", "pools", "runs"}
CHART_CONCURRENCY_POOLS = {"defaultLimit", "granularity", "opGranularityRunBuffer"}
CHART_CONCURRENCY_RUNS = {"maxConcurrentRuns", "tagConcurrencyLimits"}


def load(rel: str) -> dict:
    return yaml.safe_load((DEPLOYMENTS / rel).read_text())


def load_all(rel: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((DEPLOYMENTS / rel).read_text()) if doc is not None]


def image_ref(image: dict) -> str:
    return f"{image['repository']}:{image['tag']}"


def _unknown(where: str, mapping: dict, known: set[str]) -> list[str]:
    return [f"{where}: unknown key {key!r}" for key in sorted(set(mapping) - known)]


# Every YAML parses ----------------------------------------------------------------------------
ALL_YAML = sorted(p.relative_to(DEPLOYMENTS).as_posix() for p in [*DEPLOYMENTS.rglob("*.yaml"), *DEPLOYMENTS.rglob("*.yml")])


def test_the_expected_deployment_files_exist():
    assert {
        "docker/docker-compose.yaml", "docker/dagster.yaml", "docker/workspace.yaml",
        "k8s/dagster-values.yaml", "k8s/raycluster.yaml", "k8s/prx-config.yaml", "k8s/rbac.yaml",
    } <= set(ALL_YAML)  # fmt: skip
    for rel in (
        "local/README.md",
        "docker/README.md",
        "k8s/README.md",
        "gpu-worker/README.md",
        "docker/Dockerfile",
        "gpu-worker/Dockerfile",
    ):
        assert (DEPLOYMENTS / rel).is_file(), rel


@pytest.mark.parametrize("rel", ALL_YAML)
def test_every_yaml_parses(rel):
    docs = load_all(rel)
    assert docs and all(isinstance(doc, dict) for doc in docs), rel


# Helm values ----------------------------------------------------------------------------------
def check_helm_values(values: dict, config_docs: list[dict], rbac_docs: list[dict]) -> list[str]:
    problems = _unknown("values", values, CHART_TOP)
    problems += _unknown("global", values.get("global", {}), CHART_GLOBAL)
    pg = values.get("postgresql", {})
    problems += _unknown("postgresql", pg, CHART_POSTGRESQL)
    if pg.get("enabled") is not False or not pg.get("postgresqlHost"):
        problems.append("postgresql: an external database (enabled: false, postgresqlHost) is expected")
    if not str(pg.get("postgresqlScheme", "")).endswith("+psycopg2"):
        problems.append("postgresql.postgresqlScheme must name the psycopg2 driver")

    secrets = {d["metadata"]["name"]: d for d in config_docs if d["kind"] == "Secret"}
    config_maps = {d["metadata"]["name"] for d in config_docs if d["kind"] == "ConfigMap"}
    pg_secret = values.get("global", {}).get("postgresqlSecretName")
    if values.get("generatePostgresqlPasswordSecret") is not False:
        problems.append("generatePostgresqlPasswordSecret must be false (the Secret is in prx-config.yaml)")
    if pg_secret not in secrets or "postgresql-password" not in secrets[pg_secret].get("stringData", {}):
        problems.append(f"global.postgresqlSecretName {pg_secret!r} is not a Secret with postgresql-password")

    def env_sources(where: str, spec: dict) -> list[str]:
        out = []
        for ref in spec.get("envConfigMaps", []):
            if ref["name"] not in config_maps:
                out.append(f"{where}: envConfigMaps names unknown ConfigMap {ref['name']!r}")
        for ref in spec.get("envSecrets", []):
            if ref["name"] not in secrets:
                out.append(f"{where}: envSecrets names unknown Secret {ref['name']!r}")
        if not spec.get("envConfigMaps") or not spec.get("envSecrets"):
            out.append(f"{where}: must read the prx settings (envConfigMaps and envSecrets)")
        return out

    user = values.get("dagster-user-deployments", {})
    deployments = user.get("deployments", [])
    if not user.get("enabled") or len(deployments) != 1:
        problems.append("dagster-user-deployments: exactly one enabled code location expected")
    for dep in deployments:
        problems += _unknown(f"deployment {dep.get('name')}", dep, CHART_USER_DEPLOYMENT)
        if dep.get("dagsterApiGrpcArgs") != ["-m", CODE_MODULE]:
            problems.append(f"deployment {dep.get('name')}: dagsterApiGrpcArgs must load -m {CODE_MODULE}")
        if not dep["image"]["repository"].endswith(CODE_IMAGE) or dep["image"]["tag"] != PROJECT_VERSION:
            problems.append(f"deployment image {image_ref(dep['image'])} is not {CODE_IMAGE}:{PROJECT_VERSION}")
        problems += env_sources(f"deployment {dep.get('name')}", dep)

    launcher = values.get("runLauncher", {})
    if launcher.get("type") != "K8sRunLauncher":
        problems.append("runLauncher.type must be K8sRunLauncher")
    k8s = launcher.get("config", {}).get("k8sRunLauncher", {})
    problems += _unknown("k8sRunLauncher", k8s, CHART_K8S_RUN_LAUNCHER)
    problems += _unknown("k8sRunLauncher.runK8sConfig", k8s.get("runK8sConfig", {}), CHART_RUN_K8S_CONFIG)
    for key in ("imagePullPolicy", "loadInclusterConfig", "envConfigMaps", "envSecrets", "envVars", "volumeMounts", "volumes"):
        if key not in k8s:
            problems.append(f"k8sRunLauncher: {key} is required by the chart")
    problems += env_sources("k8sRunLauncher", k8s)
    mounts = {m["name"] for m in k8s.get("volumeMounts", [])}
    if mounts - {v["name"] for v in k8s.get("volumes", [])}:
        problems.append(f"k8sRunLauncher: volumeMounts without a volume: {sorted(mounts)}")
    account = k8s.get("runK8sConfig", {}).get("podSpecConfig", {}).get("serviceAccountName")
    accounts = {d["metadata"]["name"] for d in rbac_docs if d["kind"] == "ServiceAccount"}
    if account and account not in accounts:
        problems.append(f"run pods use service account {account!r}, which rbac.yaml does not define")

    daemon = values.get("dagsterDaemon", {})
    problems += _unknown("dagsterDaemon", daemon, CHART_DAEMON)
    coordinator = daemon.get("runCoordinator", {})
    if coordinator.get("type") != "QueuedRunCoordinator":
        problems.append("dagsterDaemon.runCoordinator.type must be QueuedRunCoordinator")
    queued = coordinator.get("config", {}).get("queuedRunCoordinator") or {}
    problems += _unknown("queuedRunCoordinator", queued, CHART_QUEUED_COORDINATOR)
    concurrency = values.get("concurrency", {})
    problems += _unknown("concurrency", concurrency, CHART_CONCURRENCY)
    problems += _unknown("concurrency.pools", concurrency.get("pools", {}), CHART_CONCURRENCY_POOLS)
    problems += _unknown("concurrency.runs", concurrency.get("runs", {}), CHART_CONCURRENCY_RUNS)
    if queued.get("maxConcurrentRuns") is not None and concurrency.get("runs", {}).get("maxConcurrentRuns") is not None:
        problems.append("max concurrent runs set twice (Dagster refuses run_coordinator and concurrency limits together)")
    for name in ("dagsterWebserver", "dagsterDaemon"):
        image = values.get(name, {}).get("image")
        if image and image.get("tag") != DAGSTER_VERSION:
            problems.append(f"{name}.image tag {image.get('tag')} is not the pinned dagster {DAGSTER_VERSION}")
    return problems


def k8s_docs() -> tuple[dict, list[dict], list[dict], dict]:
    return load("k8s/dagster-values.yaml"), load_all("k8s/prx-config.yaml"), load_all("k8s/rbac.yaml"), load("k8s/raycluster.yaml")


def test_helm_values_fit_the_chart_and_the_code():
    values, config, rbac, _ = k8s_docs()
    assert check_helm_values(values, config, rbac) == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda v: v["runLauncher"]["config"]["k8sRunLauncher"].update(envSecret=[]),  # typo of envSecrets
        lambda v: v["dagster-user-deployments"]["deployments"][0].update(dagsterApiGrpcArgs=["-m", "prx_data.defs"]),
        lambda v: v["dagster-user-deployments"]["deployments"][0]["image"].update(tag="latest"),
        lambda v: v["postgresql"].update(enabled=True),
        lambda v: v["global"].update(postgresqlSecretName="nope"),
        lambda v: v["dagsterDaemon"]["runCoordinator"]["config"].update(queuedRunCoordinator={"maxConcurrentRuns": 4}),
        lambda v: v["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"].update(serviceAccountName="x"),
    ],
)
def test_helm_checks_catch_a_broken_file(mutate):
    values, config, rbac, _ = k8s_docs()
    broken = copy.deepcopy(values)
    mutate(broken)
    assert check_helm_values(broken, config, rbac)


# Kubernetes manifests and the RayCluster --------------------------------------------------------
def test_manifests_are_namespaced_objects():
    for rel in ("k8s/prx-config.yaml", "k8s/rbac.yaml", "k8s/raycluster.yaml"):
        for doc in load_all(rel):
            assert doc.get("apiVersion") and doc.get("kind"), rel
            assert doc["metadata"].get("name") and doc["metadata"].get("namespace") == "prx", (rel, doc["kind"])


def _group(raycluster: dict, name: str) -> dict:
    (group,) = [g for g in raycluster["spec"]["workerGroupSpecs"] if g["groupName"] == name]
    return group


def _container(spec: dict) -> dict:
    return spec["template"]["spec"]["containers"][0]


def test_raycluster_has_cpu_and_gpu_groups_with_the_right_images():
    values, _, _, ray = k8s_docs()
    assert ray["apiVersion"] == "ray.io/v1" and ray["kind"] == "RayCluster"
    assert ray["spec"]["rayVersion"] == RAY_VERSION
    code_image = image_ref(values["dagster-user-deployments"]["deployments"][0]["image"])
    # Ray client needs the driver's Python and Ray on the head and every worker: the head and
    # CPU workers run the code location's own image.
    assert _container(ray["spec"]["headGroupSpec"])["image"] == code_image
    assert ray["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    cpu = _group(ray, "cpu")
    assert _container(cpu)["image"] == code_image
    assert "nvidia.com/gpu" not in _container(cpu)["resources"]["limits"]
    gpu = _group(ray, "gpu")
    gpu_container = _container(gpu)
    assert gpu_container["image"] == code_image.replace(CODE_IMAGE, GPU_IMAGE)
    gpus = int(gpu_container["resources"]["limits"]["nvidia.com/gpu"])
    assert gpus >= 1 and int(gpu["rayStartParams"]["num-gpus"]) == gpus
    assert gpu["minReplicas"] == 0, "GPU nodes scale to zero between caption runs"
    assert {m["mountPath"] for m in gpu_container["volumeMounts"]} >= {"/models"}
    env = {e["name"]: e["value"] for e in gpu_container.get("env", [])}
    assert env.get("HF_HUB_OFFLINE") == "1"
    for group in (ray["spec"]["headGroupSpec"], cpu, gpu):
        refs = {next(iter(r.values()))["name"] for r in _container(group)["envFrom"]}
        assert refs == {"prx-config", "prx-secrets"}


def test_raycluster_spec_builds_the_per_run_kuberay_job():
    from dagster_ray.kuberay import KubeRayInteractiveJob

    from prx_data.defs.cluster import ClusterStartupError, build_kuberay_job, load_raycluster_manifest

    # The image names the manifest it copies (nothing is looked up beside an installed package).
    dockerfile = (DEPLOYMENTS / "docker" / "Dockerfile").read_text()
    named = re.search(r"^ENV PRX_KUBERAY_SPEC=/opt/prx-data/(\S+)$", dockerfile, re.M)
    assert named and "COPY deployments ./deployments" in dockerfile and "WORKDIR /opt/prx-data" in dockerfile
    assert (DEPLOYMENTS.parent / named.group(1)) == DEPLOYMENTS / "k8s" / "raycluster.yaml"
    with pytest.raises(ClusterStartupError, match="PRX_KUBERAY_SPEC is not set"):
        load_raycluster_manifest(None)
    job = build_kuberay_job(load_raycluster_manifest(DEPLOYMENTS / "k8s" / "raycluster.yaml"))
    assert isinstance(job, KubeRayInteractiveJob)
    assert job.ray_job.namespace == "prx"
    spec = job.ray_job.spec.ray_cluster_spec
    assert spec is not None
    assert [g["groupName"] for g in spec.worker_group_specs] == ["cpu", "gpu"]
    assert spec.enable_in_tree_autoscaling and spec.ray_version == RAY_VERSION


def _k8s_env() -> dict[str, str]:
    _, config, _, _ = k8s_docs()
    env: dict[str, str] = {}
    for doc in config:
        if doc["metadata"]["name"] in ("prx-config", "prx-secrets"):
            env.update(doc.get("data", {}) or {})
            env.update(doc.get("stringData", {}) or {})
    return env


def test_k8s_settings_are_a_valid_cluster_profile():
    _, _, _, ray = k8s_docs()
    env = _k8s_env()
    settings = load_settings(env)
    assert settings.env == "cluster"
    assert settings.lance_root.startswith("s3://") and settings.mds_root.startswith("s3://")
    # PRX_RAY_ADDRESS names the RayCluster's head service and Ray client port.
    head = ray["spec"]["headGroupSpec"]
    client_port = next(p["containerPort"] for p in _container(head)["ports"] if p["name"] == "client")
    meta = ray["metadata"]
    assert settings.ray_address == f"ray://{meta['name']}-head-svc.{meta['namespace']}.svc.cluster.local:{client_port}"
    # The GPU backends parse, and the GPU group can hold their replicas (one GPU each).
    captioner = TypeAdapter(CaptionerConfig).validate_python(json.loads(env["PRX_CAPTIONER"]))
    classifier = TypeAdapter(ClassifierConfig).validate_python(json.loads(env["PRX_CLASSIFIER"]))
    gpu = _group(ray, "gpu")
    capacity = gpu["maxReplicas"] * int(gpu["rayStartParams"]["num-gpus"])
    for config in (captioner, classifier):
        assert config.backend == "vllm" and config.worker_env.mode == "none"
        assert config.model_source.startswith("/models/") and config.replicas <= capacity


# Docker -------------------------------------------------------------------------------------
def _env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


def test_compose_runs_every_service_from_one_image_and_one_env_file():
    compose = load("docker/docker-compose.yaml")
    services = compose["services"]
    assert {"postgres", "code-location", "webserver", "daemon", "ray-head", "ray-worker", "minio"} <= set(services)
    python = ("code-location", "webserver", "daemon", "ray-head", "ray-worker")
    for name in python:
        assert services[name]["image"] == f"{CODE_IMAGE}:{PROJECT_VERSION}", name
        assert services[name]["env_file"] == "prx.env", name
    assert services["ray-head"]["build"] == {"context": "../..", "dockerfile": "deployments/docker/Dockerfile"}
    code = services["code-location"]["command"]
    assert code[:3] == ["dagster", "code-server", "start"] and code[code.index("-m") + 1] == CODE_MODULE
    port = int(code[code.index("-p") + 1])
    workspace = load("docker/workspace.yaml")["load_from"][0]["grpc_server"]
    assert (workspace["host"], workspace["port"]) == ("code-location", port)
    for name in ("webserver", "daemon"):
        command = services[name]["command"]
        path = command[command.index("-w") + 1]
        assert path == "/opt/prx-data/deployments/docker/workspace.yaml"
        assert services[name]["depends_on"]["code-location"]["condition"] == "service_healthy"
    assert services["postgres"]["image"].startswith("postgres:")


def test_docker_env_example_is_a_valid_cluster_profile():
    env = _env_file(DEPLOYMENTS / "docker" / "prx.env.example")
    settings = load_settings(env)
    assert settings.postgres_url is not None
    assert settings.env == "cluster" and settings.postgres_url.startswith("postgresql+psycopg2://")
    assert settings.storage_options["aws_endpoint"] == env["S3_ENDPOINT_URL"] == "http://minio:9000"
    assert settings.ray_address == "ray://ray-head:10001"
    assert (env["MINIO_ROOT_USER"], env["MINIO_ROOT_PASSWORD"]) == (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == tuple(
        _match(r"^postgresql\+psycopg2://([^:]+):([^@]+)@postgres:5432/(.+)$", env["PRX_POSTGRES_URL"]).groups()
    )


def test_docker_dagster_yaml_is_a_valid_postgres_instance(tmp_path, monkeypatch):
    from dagster._core.instance.config import dagster_instance_config

    config = load("docker/dagster.yaml")
    assert config["storage"]["postgres"]["postgres_url"] == {"env": "PRX_POSTGRES_URL"}
    (tmp_path / "dagster.yaml").write_text((DEPLOYMENTS / "docker" / "dagster.yaml").read_text())
    monkeypatch.setenv("PRX_POSTGRES_URL", "postgresql+psycopg2://u:p@localhost:5432/db")
    validated, _ = dagster_instance_config(str(tmp_path))
    assert validated["run_coordinator"]["class"] == "QueuedRunCoordinator"


def _copies(dockerfile: Path) -> list[tuple[list[str], str]]:
    out = []
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY "):
            parts = [p for p in line.split()[1:] if not p.startswith("--")]
            out.append((parts[:-1], parts[-1]))
    return out


@pytest.mark.parametrize("rel", ["docker/Dockerfile", "gpu-worker/Dockerfile"])
def test_dockerfiles_copy_files_that_exist(rel):
    for sources, _ in _copies(DEPLOYMENTS / rel):
        for source in sources:
            assert (REPO / source).exists(), f"{rel}: COPY {source} does not exist"


def test_code_location_image_runs_the_module_with_matching_python():
    text = (DEPLOYMENTS / "docker" / "Dockerfile").read_text()
    python = PYPROJECT["project"]["requires-python"]
    assert re.search(r"^FROM python:3\.11-", text, re.M) and ">=3.11" in python
    cmd = json.loads(_match(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert cmd[cmd.index("-m") + 1] == CODE_MODULE
    assert f"-t {CODE_IMAGE}:{PROJECT_VERSION}" in text
    assert "deployments/docker/dagster.yaml" in text  # the instance config the image carries
    # Run workers, the daemon and Ray nodes start without the CLI: the image caps the arenas.
    assert re.search(rf"^\s+MALLOC_ARENA_MAX={ARENA_MAX} \\$", text, re.M)
    nodeps = (DEPLOYMENTS / "docker" / "requirements-cluster-nodeps.txt").read_text()
    assert "dagster-postgres==" in nodeps and "dagster-k8s==" in nodeps


def test_gpu_worker_image_matches_ray_and_python_of_the_code_location():
    text = (DEPLOYMENTS / "gpu-worker" / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{RAY_VERSION}-py311-gpu" in text
    assert f"-t {GPU_IMAGE}:{PROJECT_VERSION}" in text
    requirements = (DEPLOYMENTS / "gpu-worker" / "requirements.txt").read_text()
    common = (DEPLOYMENTS / "gpu-worker" / "requirements-common.txt").read_text()
    assert "-r requirements-common.txt" in requirements and "vllm==0.29.0" in requirements
    # Ray Serve: the engine's metrics logger imports it (the engine actor dies without it).
    assert f"ray[data,serve]=={RAY_VERSION}" in common and "pylance==" in common
    assert "--no-deps" in text  # prx_data's own transformers<5 pin must not reach this image


def test_packaged_gpu_worker_requirements_equal_the_image_build_ones():
    """mode 'pip' reads the copy packaged with prx_data (an installed wheel has no deployments/);
    the image build reads deployments/gpu-worker/. Edit there and copy here."""
    from prx_data.models.inference.gpu_env import DEFAULT_REQUIREMENTS, read_requirements

    packaged = Path(str(DEFAULT_REQUIREMENTS)).parent
    for name in ("requirements.txt", "requirements-common.txt"):
        assert (packaged / name).read_text() == (DEPLOYMENTS / "gpu-worker" / name).read_text(), (
            f"cp deployments/gpu-worker/{name} prx_data/models/inference/gpu_worker/{name}"
        )
    assert read_requirements(DEFAULT_REQUIREMENTS) == read_requirements(DEPLOYMENTS / "gpu-worker" / "requirements.txt")
    assert "gpu_worker/*.txt" in PYPROJECT["tool"]["setuptools"]["package-data"]["prx_data.models.inference"]
