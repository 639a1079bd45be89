"""A pod's volumes as directories under the pod's own directory, and each container's mounts.

`emptyDir` is an empty directory, `configMap`, `secret`, `downwardAPI` and `projected` (of those)
are directories of files written once when the pod starts (not refreshed when the object
changes), `hostPath` is the host's path itself. Any other source (a PersistentVolumeClaim, a
CSI driver) raises :class:`~trainop_core.node.podenv.ConfigError`: the pod waits, saying why.
Where a container sees them (its `volumeMounts`) is the launcher's business (see `_launch`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop_core.node.podenv import ConfigError, Obj, ObjectSource, read_source, resource_value

DEFAULT_MODE = 0o644
FILE_SOURCES = ("configMap", "secret", "downwardAPI", "projected")


@dataclass(frozen=True)
class Mount:
    """One bind mount: `source` on this machine seen at `target` in the container."""

    source: str
    target: str
    read_only: bool = False


def prepare_volumes(
    pod: Obj,
    root: Path,
    fields: Mapping[str, str],
    allocatable: Mapping[str, str],
    source: ObjectSource,
) -> dict[str, str]:
    """Write every volume of `pod` under `root` (made if needed); the directory of each by its
    name. Idempotent: an existing emptyDir keeps its content, file volumes are rewritten."""
    paths: dict[str, str] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = str(volume["name"])
        if "hostPath" in volume:
            paths[name] = str(volume["hostPath"].get("path", ""))
            continue
        where = root / name
        where.mkdir(parents=True, exist_ok=True)
        empty = "emptyDir" if "emptyDir" in volume else ""
        kind = next((k for k in FILE_SOURCES if k in volume), empty)
        if not kind:
            other = next((k for k in volume if k != "name"), "?")
            raise ConfigError(f"volume {name!r}: a process node cannot provide {other} volumes")
        if kind != "emptyDir":
            _write_files(pod, where, kind, volume[kind], fields, allocatable, source)
        paths[name] = str(where)
    return paths


def container_mounts(container: Mapping[str, Any], volumes: Mapping[str, str]) -> list[Mount]:
    """The container's `volumeMounts` as bind mounts (a `subPath` inside its volume)."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name = str(mount.get("name", ""))
        if name not in volumes:
            raise ConfigError(f"volumeMount {name!r} names no volume of the pod")
        source = volumes[name]
        if mount.get("subPath"):
            source = os.path.join(source, str(mount["subPath"]))
            if not os.path.exists(source):
                os.makedirs(source, exist_ok=True)
        mounts.append(Mount(source, str(mount["mountPath"]), bool(mount.get("readOnly"))))
    return mounts


def _write_files(
    pod: Obj,
    where: Path,
    kind: str,
    spec: Mapping[str, Any],
    fields: Mapping[str, str],
    allocatable: Mapping[str, str],
    source: ObjectSource,
) -> None:
    mode = int(spec.get("defaultMode", DEFAULT_MODE))
    if kind == "projected":
        for item in spec.get("sources") or []:
            inner = next((k for k in ("configMap", "secret", "downwardAPI") if k in item), "")
            if inner:
                _write_files(pod, where, inner, {"defaultMode": mode, **item[inner]}, fields,
                             allocatable, source)  # fmt: skip
        return
    files = (
        _downward_files(pod, spec, fields, allocatable)
        if kind == "downwardAPI"
        else _object_files(pod, kind, spec, source)
    )
    for relative, (data, item_mode) in files.items():
        path = _inside(where, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(item_mode if item_mode is not None else mode)


def _object_files(
    pod: Obj, kind: str, spec: Mapping[str, Any], source: ObjectSource
) -> dict[str, tuple[bytes, int | None]]:
    name = str(spec.get("name") or spec.get("secretName") or "")
    try:
        data = read_source(source, kind, pod["metadata"]["namespace"], name)
    except ConfigError:
        if spec.get("optional"):
            return {}
        raise
    items = spec.get("items")
    if not items:
        return {key: (value, None) for key, value in data.items()}
    files: dict[str, tuple[bytes, int | None]] = {}
    for item in items:
        if item["key"] not in data:
            if spec.get("optional"):
                continue
            raise ConfigError(f"couldn't find key {item['key']} in {kind} {name}")
        files[str(item["path"])] = (data[item["key"]], item.get("mode"))
    return files


def _downward_files(
    pod: Obj, spec: Mapping[str, Any], fields: Mapping[str, str], allocatable: Mapping[str, str]
) -> dict[str, tuple[bytes, int | None]]:
    files: dict[str, tuple[bytes, int | None]] = {}
    for item in spec.get("items") or []:
        if "fieldRef" in item:
            path = str(item["fieldRef"].get("fieldPath", ""))
            value = _field_file(pod, path, fields)
        else:
            ref = item.get("resourceFieldRef") or {}
            value = resource_value(pod, str(ref.get("containerName", "")), ref, allocatable)
        files[str(item["path"])] = (value.encode(), item.get("mode"))
    return files


def _field_file(pod: Obj, path: str, fields: Mapping[str, str]) -> str:
    meta = pod["metadata"]
    if path in ("metadata.labels", "metadata.annotations"):  # whole maps, one key=value a line
        values = meta.get(path.split(".")[1]) or {}
        return "".join(f'{k}="{v}"\n' for k, v in sorted(values.items()))
    if path not in fields:
        raise ConfigError(f"unsupported fieldPath {path!r} in a downwardAPI volume")
    return fields[path]


def _inside(root: Path, relative: str) -> Path:
    """`relative` under `root`, refusing absolute paths and `..` (the API server does too)."""
    path = (root / relative).resolve()
    if relative.startswith("/") or not path.is_relative_to(root.resolve()):
        raise ConfigError(f"volume item path {relative!r} leaves its volume")
    return path
