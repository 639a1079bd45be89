"""Regenerate trainop_core/api/k8s_openapi.json from Kubernetes' published OpenAPI v3 documents.

Trainer's CRDs embed k8s.io/api types (a runtime's batch/v1 JobSpec and pod template, env,
resources, PVC templates); trainop_core/runtimes/k8s_schema.py types them in trainop's Trainer
CRDs from this table. It keeps, for every type reachable from the roots, the keywords that type
or constrain a field (type, format, default, required, x-kubernetes list/map types and `ref`
to another type): no descriptions. Source: kubernetes/kubernetes at the version of k8s.io/api
Trainer v2.3.0 builds with (v0.36), api/openapi-spec/v3/{api__v1,apis__batch__v1}_openapi.json.
Those documents also give every non-pointer field its zero value as a default; controller-gen
writes only the `+default=` markers of k8s.io/api's Go types, so the script reads those from
k8s.io/api's source (same version) and keeps a default only where a marker sets it:

    python scripts/gen_k8s_openapi.py kubernetes/api/openapi-spec/v3 k8s.io/api@v0.36.2

tests/core/test_trainer_crd_facts.py compares the CRDs built from it with Trainer's.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "trainop_core" / "api" / "k8s_openapi.json"
DOCUMENTS = ("api__v1_openapi.json", "apis__batch__v1_openapi.json")
ROOTS = (
    "io.k8s.api.batch.v1.JobTemplateSpec",
    "io.k8s.api.core.v1.PersistentVolumeClaim",
    "io.k8s.api.core.v1.EnvVar",
    "io.k8s.api.core.v1.ResourceRequirements",
)
KEEP = (
    "type", "format", "default", "required", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
)  # fmt: skip
PREFIXES = ("io.k8s.api.", "io.k8s.apimachinery.pkg.apis.", "io.k8s.apimachinery.pkg.")


GO_SOURCES = ("core/v1/types.go", "batch/v1/types.go")


class Markers:
    """What controller-gen reads from k8s.io/api's Go source beyond the OpenAPI documents: the
    fields a literal `+default=` marks (`+default=ref(...)` names a Go constant controller-gen
    cannot read), and which structs inline another (their fields' markers come with them)."""

    def __init__(self, api_dir: Path) -> None:
        self.defaults: set[tuple[str, str]] = set()
        self.inlined: dict[str, str] = {}
        for source in GO_SOURCES:
            self._read(".".join(source.split("/")[:2]), (api_dir / source).read_text())

    def _read(self, package: str, text: str) -> None:
        kind, pending = "", False
        for line in text.splitlines():
            if found := re.match(r"type (\w+) struct \{", line):
                kind, pending = f"{package}.{found[1]}", False
            elif line.strip().startswith("// +default=") and "=ref(" not in line:
                pending = True
            elif found := re.match(r'\s+(\w+) `json:",inline"', line):
                self.inlined[kind] = f"{package}.{found[1]}"
            elif found := re.search(r'json:"(\w+)', line):
                if pending:
                    self.defaults.add((kind, found[1]))
                pending = False

    def has_default(self, kind: str, field: str) -> bool:
        inlined = self.inlined.get(kind)
        return (kind, field) in self.defaults or bool(inlined and self.has_default(inlined, field))


def short(ref: str) -> str:
    """`#/components/schemas/io.k8s.api.core.v1.Pod` -> `core.v1.Pod`."""
    name = ref.rsplit("/", 1)[-1]
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def node(schema: dict[str, Any], refs: list[str]) -> dict[str, Any]:
    """The kept keywords of one schema node, its sub-nodes, and `ref` for a named type."""
    schema = dict(schema)
    for wrapper in ("allOf", "oneOf"):  # `allOf: [$ref]` is how v3 attaches a default to a ref
        if wrapper in schema and len(schema[wrapper]) == 1 and "$ref" in schema[wrapper][0]:
            schema["$ref"] = schema.pop(wrapper)[0]["$ref"]
    kept = {k: schema[k] for k in KEEP if k in schema}
    if "$ref" in schema:
        refs.append(schema["$ref"].rsplit("/", 1)[-1])
        kept["ref"] = short(schema["$ref"])
    if "items" in schema:
        kept["items"] = node(schema["items"], refs)
    if isinstance(schema.get("additionalProperties"), dict):
        kept["additionalProperties"] = node(schema["additionalProperties"], refs)
    if "properties" in schema:
        kept["properties"] = {k: node(v, refs) for k, v in sorted(schema["properties"].items())}
    if "oneOf" in schema:  # Quantity, IntOrString: a scalar of either type
        kept["oneOf"] = sorted(alt["type"] for alt in schema["oneOf"])
    return kept


def controller_gen_markers(name: str, kept: dict[str, Any], markers: Markers, table: Any) -> None:
    """Keep only marked defaults; a struct inlining an atomic one is atomic too."""
    for field, sub in kept.get("properties", {}).items():
        if not markers.has_default(name, field):
            for each in (sub, sub.get("items", {}), sub.get("additionalProperties", {})):
                each.pop("default", None)
    inlined = markers.inlined.get(name)
    if inlined and inlined in table and "x-kubernetes-map-type" in table[inlined]:
        kept.setdefault("x-kubernetes-map-type", table[inlined]["x-kubernetes-map-type"])


def collect(schemas: dict[str, dict[str, Any]], markers: Markers) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if short(name) in table:
            continue
        refs: list[str] = []
        table[short(name)] = node(schemas[name], refs)
        todo.extend(refs)
    raw = {short(k): v for k, v in schemas.items()}
    for name, kept in table.items():
        controller_gen_markers(name, kept, markers, raw)
    return dict(sorted(table.items()))


def main(argv: list[str]) -> int:
    spec_dir, api_dir = argv
    schemas: dict[str, Any] = {}
    for document in DOCUMENTS:
        schemas |= json.loads((Path(spec_dir) / document).read_text())["components"]["schemas"]
    OUT.write_text(
        json.dumps(collect(schemas, Markers(Path(api_dir))), indent=0, sort_keys=True) + "\n"
    )
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
