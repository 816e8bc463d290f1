"""Every manifest under deployments/k8s fits the schemas of what it will be applied to, checked
strictly (an unknown key fails, as ``kubectl apply --validate=strict`` refuses it), and a planted
mistake fails the check.

The schemas are data in the repository (``schemas/``), of the versions the deployment names:
- ``kuberay-1.7.0-ray.io_rayclusters.yaml``: the RayCluster CRD of KubeRay v1.7.0, as published
  in ray-project/kuberay at tag v1.7.0 (commit 59d663aeec13760646da3db9c1cf8cfe883e30b7),
  ``helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml``, unchanged;
- ``kubernetes-37.0.2.json``: ConfigMap, Secret, ServiceAccount, Role and RoleBinding, written by
  ``scripts/k8s_schemas.py`` from the API models of the Kubernetes Python client 37.0.2 (the
  client the code-location image installs, requirements-cluster.txt).

The Helm values (``dagster-values.yaml``) are not a Kubernetes object: test_deployment_files.py
checks them against the Dagster chart's keys.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deployments" / "k8s"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
KUBERAY_CRD = SCHEMAS / "kuberay-1.7.0-ray.io_rayclusters.yaml"
KUBERNETES = SCHEMAS / "kubernetes-37.0.2.json"
NOT_OBJECTS = {"dagster-values.yaml"}


def _strict(schema: dict) -> dict:
    """The CRD's structural schema with unknown keys refused wherever the schema lists the keys
    (Kubernetes prunes them silently unless strict field validation is asked for)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@pytest.fixture(scope="module")
def validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    crd = yaml.safe_load(KUBERAY_CRD.read_text())
    found = {}
    for version in crd["spec"]["versions"]:
        schema = _strict(version["schema"]["openAPIV3Schema"])
        schema["properties"]["metadata"] = {"type": "object"}  # the API server's ObjectMeta, checked below for the others
        found[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = jsonschema.Draft7Validator(schema)
    kube = json.loads(KUBERNETES.read_text())
    for kind, info in kube["kinds"].items():
        schema = {"$ref": f"#/definitions/{info['model']}", "definitions": kube["definitions"]}
        found[(info["apiVersion"], kind)] = jsonschema.Draft7Validator(schema)
    return found


def _documents() -> list[tuple[str, int, dict]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name in NOT_OBJECTS:
            continue
        for k, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                docs.append((path.name, k, doc))
    return docs


def _errors(validators, doc: dict) -> list[str]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in validators:
        return [f"no schema for apiVersion={key[0]!r} kind={key[1]!r}"]
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validators[key].iter_errors(doc)]


def test_every_k8s_yaml_is_an_object_with_a_schema_or_helm_values():
    names = {p.name for p in K8S.glob("*.y*ml")}
    assert NOT_OBJECTS <= names
    kinds = sorted({doc["kind"] for _name, _k, doc in _documents()})
    assert kinds == ["ConfigMap", "RayCluster", "Role", "RoleBinding", "Secret", "ServiceAccount"], kinds


@pytest.mark.parametrize("name,k,doc", _documents(), ids=lambda v: v if isinstance(v, str) else None)
def test_manifest_fits_its_schema(validators, name, k, doc):
    errors = _errors(validators, doc)
    assert errors == [], f"{name} document {k} ({doc.get('kind')}): {errors}"


def _raycluster() -> dict:
    return copy.deepcopy(next(doc for _n, _k, doc in _documents() if doc["kind"] == "RayCluster"))


def _first(kind: str) -> dict:
    return copy.deepcopy(next(doc for _n, _k, doc in _documents() if doc["kind"] == kind))


def _misspelt_head_field(doc):
    doc["spec"]["headGroupSpec"]["rayStartParam"] = doc["spec"]["headGroupSpec"].pop("rayStartParams")


def _replicas_as_text(doc):
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = "two"


def _misspelt_container_field(doc):
    container = doc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["imagePullPolicyy"] = container.pop("imagePullPolicy")


def _port_as_text(doc):
    doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "gcs"


def _auth_mode_unknown(doc):
    doc["spec"]["authOptions"]["mode"] = "tokens"


@pytest.mark.parametrize("plant", [_misspelt_head_field, _replicas_as_text, _misspelt_container_field, _port_as_text, _auth_mode_unknown])
def test_a_planted_mistake_in_the_raycluster_fails(validators, plant):
    doc = _raycluster()
    assert _errors(validators, doc) == []
    plant(doc)
    assert _errors(validators, doc), plant.__name__


def test_a_planted_mistake_in_a_core_object_fails(validators):
    config = _first("ConfigMap")
    config["datas"] = config.pop("data")
    assert _errors(validators, config)
    secret = _first("Secret")
    secret["stringData"] = {"KEY": 5}
    assert _errors(validators, secret)
    role = _first("Role")
    role["rules"][0]["verbs"] = "get"
    assert _errors(validators, role)
