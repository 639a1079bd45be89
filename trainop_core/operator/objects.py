"""Write the objects a kind plans besides pods and services (`Kind.objects`: MPIJob's ConfigMap
and launcher RBAC): create what is missing, replace what differs from the plan.

They are planned every round while a job runs. What was written or found as planned is
remembered per job, so a round whose objects have not changed sends nothing; the memory of a job
goes when its controller forgets the job. An existing object of the same name that the job does
not control is an error (event ErrResourceExists, retried with backoff), except a ServiceAccount,
which pods only name: a user may bring their own (upstream uses it as it is). A create whose
answer was lost is never sent again: the object is looked up as if it had been there before.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from trainop_core.operator.kube import OBJECT_RESOURCES, ApiError, KubeClient, Obj, Resource
from trainop_core.operator.observe import controller_ref

Key = tuple[str, str, str, str]  # namespace, job, object kind, object name


class ObjectWriter:
    """Thread-safe for distinct jobs (the work queue never hands one job to two workers)."""

    def __init__(
        self, client: KubeClient, record: Callable[[Obj, str, str, str], None], owner_kind: str
    ) -> None:
        self.client, self.record, self.owner_kind = client, record, owner_kind
        self._applied: dict[Key, tuple[str, str]] = {}  # -> (job uid, content)

    def pending(self, job: Obj, objects: list[Obj]) -> list[Obj]:
        """The planned objects not known to be on the server as planned."""
        uid = job["metadata"].get("uid", "")
        return [o for o in objects if self._applied.get(_key(job, o)) != (uid, content(o))]

    def apply(self, job: Obj, objects: list[Obj], errors: list[str]) -> bool:
        """Make each object as planned; False (and why in `errors`) if one could not be."""
        return all([self._apply(job, obj, errors) for obj in objects])

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: drop what was remembered of its objects."""
        for key in [k for k in self._applied if k[:2] == (namespace, name)]:
            self._applied.pop(key, None)

    def _apply(self, job: Obj, obj: Obj, errors: list[str]) -> bool:
        res, name = OBJECT_RESOURCES[obj["kind"]], obj["metadata"]["name"]
        try:
            self.client.create(res, obj["metadata"]["namespace"], obj)
        except ApiError as exc:
            if not (exc.already_exists or exc.answer_lost):  # lost: it may be there, look
                errors.append(f"create {res.kind} {name}: {exc}")
                return False
            if not self._take_existing(job, obj, res, errors):
                return False
        self._applied[_key(job, obj)] = (job["metadata"].get("uid", ""), content(obj))
        return True

    def _take_existing(self, job: Obj, obj: Obj, res: Resource, errors: list[str]) -> bool:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            current = self.client.get(res, ns, name)
        except ApiError as exc:  # deleted meanwhile: the next round creates it
            errors.append(f"read {res.kind} {name}: {exc}")
            return False
        ours = (controller_ref(current) or {}).get("uid") == job["metadata"].get("uid")
        if not ours and res.kind != "ServiceAccount":
            message = (
                f'Resource "{name}" of kind "{res.kind}" already exists and is not managed by '
                f"{self.owner_kind} {job['metadata']['name']}"
            )
            self.record(job, "Warning", "ErrResourceExists", message)
            errors.append(message)
            return False
        if ours and content(current) != content(obj):
            version = current["metadata"].get("resourceVersion")
            try:
                self.client.replace(res, ns, name, dict(obj, metadata=dict(obj["metadata"],
                                    resourceVersion=version)))  # fmt: skip
            except ApiError as exc:
                errors.append(f"update {res.kind} {name}: {exc}")
                return False
        return True


def _key(job: Obj, obj: Obj) -> Key:
    meta = job["metadata"]
    return (meta.get("namespace", "default"), meta["name"], obj["kind"], obj["metadata"]["name"])


def content(obj: Obj) -> str:
    """What an object says besides its identity (ConfigMap data, Role rules, ...), as text."""
    fields = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))
