"""A pod's volumes as directories under the pod's own directory, and each container's mounts.

`emptyDir` is an empty directory, `configMap`, `secret`, `downwardAPI` and `projected` (of those
and of `serviceAccountToken`) are directories of files written when a container starts (not
refreshed when the object changes), `hostPath` is the host's path itself. A projected token is
the one exception: the node rewrites it before it expires (:func:`write_tokens`), atomically, and
it is readable by its owner only (mode 0600, whatever `defaultMode` says: every container of a
process node runs as the node's user, the only one that needs to read it). Any other source (a
PersistentVolumeClaim, a CSI driver) raises :class:`~trainop_core.node.podenv.ConfigError`: the
pod waits, saying why. Where a container sees them (its `volumeMounts`) is the launcher's
business (see `_launch`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop_core.node.podenv import ConfigError, Obj, ObjectSource, read_source, resource_value
from trainop_core.node.tokens import TokenRequest, TokenSource, check_expiration

DEFAULT_MODE = 0o644
TOKEN_MODE = 0o600
FILE_SOURCES = ("configMap", "secret", "downwardAPI", "projected")
TOKEN = "serviceAccountToken"
PROJECTED_SOURCES = ("configMap", "secret", "downwardAPI", TOKEN)
Files = list[tuple[str, bytes, "int | None", str]]  # (relative path, data, mode, its field)


class _NoTokens:
    def token(self, request: TokenRequest) -> bytes:
        raise ConfigError("this node gives no ServiceAccount tokens")


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
    tokens: TokenSource | None = None,
) -> dict[str, str]:
    """Write every volume of `pod` under `root` (made if needed); the directory of each by its
    name. Idempotent: an existing emptyDir keeps its content, file volumes are rewritten. A
    ConfigError names the field at fault."""
    paths: dict[str, str] = {}
    for index, volume in enumerate(pod["spec"].get("volumes") or []):
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
            writer = _Writer(pod, fields, allocatable, source, tokens or _NoTokens())
            writer.write(where, kind, volume[kind], f"spec.volumes[{index}].{kind}")
        paths[name] = str(where)
    return paths


def write_tokens(pod: Obj, root: Path, tokens: TokenSource) -> None:
    """Rewrite the pod's projected tokens under `root` (as :func:`prepare_volumes` placed them)
    with what `tokens` gives now: refreshed ones once due. May do I/O."""
    writer = _Writer(pod, {}, {}, _NoObjects(), tokens)
    for index, volume in enumerate(pod["spec"].get("volumes") or []):
        where = root / str(volume["name"])
        for number, item in enumerate((volume.get("projected") or {}).get("sources") or []):
            if TOKEN in item and where.is_dir():
                field = f"spec.volumes[{index}].projected.sources[{number}].{TOKEN}"
                writer.place(where, writer.token_files(item[TOKEN], field), TOKEN_MODE)


class _NoObjects:
    def configmap(self, namespace: str, name: str) -> Obj | None:
        return None

    def secret(self, namespace: str, name: str) -> Obj | None:
        return None


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


@dataclass(frozen=True)
class _Writer:
    """Writes one pod's file volumes (configMap, secret, downwardAPI, projected)."""

    pod: Obj
    fields: Mapping[str, str]
    allocatable: Mapping[str, str]
    source: ObjectSource
    tokens: TokenSource

    def write(self, where: Path, kind: str, spec: Mapping[str, Any], field: str) -> None:
        mode = int(spec.get("defaultMode", DEFAULT_MODE))
        if kind != "projected":
            self.place(where, self._files(kind, spec, field), mode)
            return
        for number, item in enumerate(spec.get("sources") or []):
            inner = next(
                (k for k in ("configMap", "secret", "downwardAPI", TOKEN) if k in item), ""
            )
            at = f"{field}.sources[{number}].{inner}"
            if inner == TOKEN:
                self.place(where, self.token_files(item[TOKEN], at), TOKEN_MODE)
            elif inner:
                self.place(where, self._files(inner, item[inner], at), mode)

    def _files(self, kind: str, spec: Mapping[str, Any], field: str) -> Files:
        if kind == "downwardAPI":
            return _downward_files(self.pod, spec, self.fields, self.allocatable, field)
        return _object_files(self.pod, kind, spec, self.source, field)

    def token_files(self, spec: Mapping[str, Any], field: str) -> Files:
        meta = self.pod["metadata"]
        request = TokenRequest(
            namespace=str(meta["namespace"]),
            service_account=str(self.pod["spec"].get("serviceAccountName") or "default"),
            audience=str(spec.get("audience") or ""),
            expiration_seconds=check_expiration(
                spec.get("expirationSeconds"), f"{field}.expirationSeconds"
            ),
            pod_name=str(meta["name"]),
            pod_uid=str(meta["uid"]),
        )
        path = str(spec.get("path") or "")
        if not path:
            raise ConfigError(f"{field}.path: required")
        _inside(Path("/"), path, f"{field}.path")  # refused before asking for a token
        return [(path, self.tokens.token(request), TOKEN_MODE, f"{field}.path")]

    @staticmethod
    def place(where: Path, files: Files, mode: int) -> None:
        for relative, data, item_mode, field in files:
            path = _inside(where, relative, field)
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, data, item_mode if item_mode is not None else mode)


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """`data` at `path` with `mode` from its first byte (a reader never sees half of it, nor a
    token with a looser mode), replacing what was there."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)  # the umask may have taken bits off
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _object_files(
    pod: Obj, kind: str, spec: Mapping[str, Any], source: ObjectSource, field: str
) -> Files:
    name = str(spec.get("name") or spec.get("secretName") or "")
    try:
        data = read_source(source, kind, pod["metadata"]["namespace"], name)
    except ConfigError:
        if spec.get("optional"):
            return []
        raise
    items = spec.get("items")
    if not items:
        return [(key, value, None, f"{field}: key {key!r}") for key, value in data.items()]
    files: Files = []
    for number, item in enumerate(items):
        if item["key"] not in data:
            if spec.get("optional"):
                continue
            raise ConfigError(f"couldn't find key {item['key']} in {kind} {name}")
        files.append((str(item["path"]), data[item["key"]], item.get("mode"),
                      f"{field}.items[{number}].path"))  # fmt: skip
    return files


def _downward_files(
    pod: Obj,
    spec: Mapping[str, Any],
    fields: Mapping[str, str],
    allocatable: Mapping[str, str],
    field: str,
) -> Files:
    files: Files = []
    for number, item in enumerate(spec.get("items") or []):
        if "fieldRef" in item:
            path = str(item["fieldRef"].get("fieldPath", ""))
            value = _field_file(pod, path, fields)
        else:
            ref = item.get("resourceFieldRef") or {}
            value = resource_value(pod, str(ref.get("containerName", "")), ref, allocatable)
        files.append((str(item["path"]), value.encode(), item.get("mode"),
                      f"{field}.items[{number}].path"))  # fmt: skip
    return files


def _field_file(pod: Obj, path: str, fields: Mapping[str, str]) -> str:
    meta = pod["metadata"]
    if path in ("metadata.labels", "metadata.annotations"):  # whole maps, one key=value a line
        values = meta.get(path.split(".")[1]) or {}
        return "".join(f'{k}="{v}"\n' for k, v in sorted(values.items()))
    if path not in fields:
        raise ConfigError(f"unsupported fieldPath {path!r} in a downwardAPI volume")
    return fields[path]


def _inside(root: Path, relative: str, field: str) -> Path:
    """`relative` under `root`, refusing absolute paths and `..` (the API server does too)."""
    path = (root / relative).resolve()
    if relative.startswith("/") or ".." in Path(relative).parts:
        raise ConfigError(f"{field}: {relative!r} must be a relative path without '..'")
    if not path.is_relative_to(root.resolve()):
        raise ConfigError(f"{field}: {relative!r} leaves its volume")
    return path
