"""Write the strict JSON schemas of the Kubernetes objects deployments/k8s uses (ConfigMap,
Secret, ServiceAccount, Role, RoleBinding) from the API models of the official Kubernetes
Python client, into prx_data_tests/deploy/schemas/kubernetes-<client version>.json.

Run with a Python that has the client the code-location image pins (requirements-cluster.txt):
    "$(bash scripts/ray_node_env.sh)" scripts/k8s_schemas.py

Strict: every object refuses keys its model does not have (what `kubectl apply --validate=strict`
refuses); a field is typed as the model types it (IntOrString and free-form fields accept any).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import kubernetes
from kubernetes import client

ROOTS = {"ConfigMap": ("v1", "V1ConfigMap"), "Secret": ("v1", "V1Secret"), "ServiceAccount": ("v1", "V1ServiceAccount"),
         "Role": ("rbac.authorization.k8s.io/v1", "V1Role"), "RoleBinding": ("rbac.authorization.k8s.io/v1", "V1RoleBinding")}  # fmt: skip
PRIMITIVE = {"str": {"type": "string"}, "int": {"type": "integer"}, "float": {"type": "number"}, "bool": {"type": "boolean"},
             "bytes": {"type": "string"}, "datetime": {"type": "string"}, "date": {"type": "string"}, "object": {}}  # fmt: skip


def schema_of(kind: str, definitions: dict) -> dict:
    if kind in PRIMITIVE:
        return dict(PRIMITIVE[kind])
    if m := re.fullmatch(r"[Ll]ist\[(.+)\]", kind):
        return {"type": "array", "items": schema_of(m.group(1), definitions)}
    if m := re.fullmatch(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])", kind):
        return {"type": "object", "additionalProperties": schema_of(m.group(1) or m.group(2), definitions)}
    model = getattr(client, kind)
    if kind not in definitions:
        definitions[kind] = {}  # placeholder: recursive models
        props = {model.attribute_map[attr]: schema_of(t, definitions) for attr, t in model.openapi_types.items()}
        definitions[kind] = {"type": "object", "properties": props, "additionalProperties": False}
    return {"$ref": f"#/definitions/{kind}"}


def main() -> int:
    definitions: dict = {}
    kinds = {}
    for kind, (api_version, model) in ROOTS.items():
        schema_of(model, definitions)
        kinds[kind] = {"apiVersion": api_version, "model": model}
    doc = {
        "source": f"kubernetes Python client {kubernetes.__version__} API models (scripts/k8s_schemas.py)",
        "kinds": kinds,
        "definitions": definitions,
    }
    out = Path(__file__).resolve().parents[1] / "prx_data_tests" / "deploy" / "schemas" / f"kubernetes-{kubernetes.__version__}.json"
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(out, len(definitions), "models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
