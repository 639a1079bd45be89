"""The env contract per kind (reference §3), read off the pods the planner creates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders import JobBuilder, make_job
from tests.core._kind_builders import REGISTRY, T0, kind_of
from trainop_core.api.load import load_job
from trainop_core.planner import KubernetesAddressing, Observed, Plan, PlanOptions, plan


class LocalAddressing:
    """What a process backend answers: loopback hosts, one port per replica, no DNS to wait for."""

    def host(self, rtype: str, index: int, *, fqdn: bool = False) -> str:
        return "127.0.0.1"

    def port(self, rtype: str, index: int) -> int:
        return 30000 + 100 * len(rtype) + index

    @property
    def waits_for_dns(self) -> bool:
        return False


def first_plan(b: JobBuilder, addressing: Any = None, **options: Any) -> Plan:
    job = load_job(b.build(), registry=REGISTRY)
    kind = kind_of(job.kind)
    where = addressing or KubernetesAddressing(job, kind, options.get("cluster_domain", ""))
    return plan(job, kind, Observed(), T0, where, PlanOptions(**options))


def pod(p: Plan, name: str) -> dict[str, Any]:
    return next(m for m in p.create_pods if m["metadata"]["name"] == name)


def env(p: Plan, name: str, container: int = 0) -> dict[str, str]:
    entries = pod(p, name)["spec"]["containers"][container].get("env") or []
    return {e["name"]: e["value"] for e in entries}


# --- PyTorch --------------------------------------------------------------------------------

MNIST_COMMON = {
    "PYTHONUNBUFFERED": "1",
    "MASTER_PORT": "23456",
    "PET_MASTER_PORT": "23456",
    "MASTER_ADDR": "mnist-master-0",
    "PET_MASTER_ADDR": "mnist-master-0",
    "WORLD_SIZE": "3",
    "PET_NPROC_PER_NODE": "auto",
    "PET_NNODES": "3",
}


@pytest.mark.parametrize(
    ("name", "rank"),
    [("mnist-master-0", "0"), ("mnist-worker-0", "1"), ("mnist-worker-1", "2")],
    ids=["the master is node rank 0", "worker 0 is node rank 1", "worker 1 is node rank 2"],
)
def test_pytorch_master_and_workers_get_upstreams_env(name: str, rank: str) -> None:
    p = first_plan(make_job("PyTorchJob", "mnist").master().workers(2))
    assert env(p, name) == {**MNIST_COMMON, "RANK": rank, "PET_NODE_RANK": rank}


def test_pytorch_world_size_multiplies_by_integer_nproc_but_rank_stays_the_node_rank() -> None:
    p = first_plan(make_job("PyTorchJob", "mnist").master().workers(2).spec(nprocPerNode="4"))
    ranks = [env(p, n)["RANK"] for n in ("mnist-master-0", "mnist-worker-0", "mnist-worker-1")]
    assert ranks == ["0", "1", "2"]
    assert {env(p, n)["WORLD_SIZE"] for n in ("mnist-master-0", "mnist-worker-1")} == {"12"}
    assert env(p, "mnist-worker-0")["PET_NPROC_PER_NODE"] == "4"


def test_pytorch_worker_only_jobs_get_no_master_address_rank_or_world_size() -> None:
    p = first_plan(make_job("PyTorchJob", "w").workers(2))
    assert env(p, "w-worker-1") == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_NNODES": "2",
    }
    assert "initContainers" not in pod(p, "w-worker-1")["spec"]


def test_pytorch_elastic_jobs_get_the_rendezvous_env() -> None:
    elastic = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "maxRestarts": 5,
        "rdzvId": "run-1",
        "rdzvConf": [{"key": "timeout", "value": "60"}, {"key": "join", "value": "1"}],
        "standalone": True,
    }
    p = first_plan(make_job("PyTorchJob", "el").workers(2).spec(elasticPolicy=elastic))
    assert env(p, "el-worker-1") == {
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "el-worker-0:23456",
        "PET_NNODES": "1:3",
        "PET_RDZV_ID": "run-1",
        "PET_RDZV_CONF": "timeout=60,join=1",
        "PET_MAX_RESTARTS": "5",
        "PET_STANDALONE": "",
    }


def test_pytorch_deprecated_elastic_nproc_is_passed_to_torchrun() -> None:
    spec = {"elasticPolicy": {"nProcPerNode": 2, "rdzvHost": "etcd", "rdzvPort": 2379}}
    p = first_plan(make_job("PyTorchJob", "el").workers(2).spec(**spec))
    found = env(p, "el-worker-0")
    assert (found["PET_NPROC_PER_NODE"], found["PET_RDZV_ENDPOINT"]) == ("2", "etcd:2379")


def test_pytorch_workers_wait_for_the_masters_dns_only_on_kubernetes() -> None:
    job = make_job("PyTorchJob", "mnist").master().workers(1)
    on_k8s = first_plan(job)
    init = pod(on_k8s, "mnist-worker-0")["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["init-pytorch"]
    assert init[0]["image"] == "alpine:3.10"
    assert "nslookup mnist-master-0" in init[0]["command"][-1]
    assert init[0]["resources"]["limits"] == {"cpu": "100m", "memory": "20Mi"}
    assert "initContainers" not in pod(on_k8s, "mnist-master-0")["spec"]
    local = first_plan(job, LocalAddressing())
    assert "initContainers" not in pod(local, "mnist-worker-0")["spec"]


def test_the_pytorch_init_container_image_and_tries_come_from_the_options() -> None:
    options = {"pytorch.init_container_image": "busybox:1", "pytorch.init_container_max_tries": 7}
    p = first_plan(make_job("PyTorchJob", "j").master().workers(1), kind_options=options)
    init = pod(p, "j-worker-0")["spec"]["initContainers"][0]
    assert init["image"] == "busybox:1" and "seq 7" in init["command"][-1]


def test_addresses_come_from_the_backend_not_from_the_kind() -> None:
    p = first_plan(make_job("PyTorchJob", "mnist").master().workers(1), LocalAddressing())
    found = env(p, "mnist-worker-0")
    assert (found["MASTER_ADDR"], found["MASTER_PORT"]) == ("127.0.0.1", "30600")


def test_a_custom_port_is_what_peers_are_told_and_what_the_service_exposes() -> None:
    b = make_job("PyTorchJob", "cp").master().workers(1)
    b.container("Master", ports=[{"name": "pytorchjob-port", "containerPort": 29500}])
    p = first_plan(b)
    assert env(p, "cp-worker-0")["MASTER_PORT"] == "29500"
    svc = next(s for s in p.create_services if s["metadata"]["name"] == "cp-master-0")
    assert svc["spec"]["ports"] == [{"name": "pytorchjob-port", "port": 29500}]


def test_the_contract_replaces_a_user_set_variable_and_keeps_the_others() -> None:
    b = make_job("PyTorchJob", "u").master().workers(1).env("Worker", WORLD_SIZE="99", MINE="x")
    found = env(first_plan(b), "u-worker-0")
    assert (found["WORLD_SIZE"], found["MINE"]) == ("2", "x")


# --- TensorFlow -----------------------------------------------------------------------------


def tf_config(p: Plan, name: str) -> str:
    return env(p, name)["TF_CONFIG"]


def test_tf_config_matches_upstream_byte_for_byte() -> None:
    p = first_plan(make_job("TFJob", "dist").chief().workers(2))
    cluster = (
        '{"chief":["dist-chief-0.default.svc:2222"],'
        '"worker":["dist-worker-0.default.svc:2222","dist-worker-1.default.svc:2222"]}'
    )
    assert tf_config(p, "dist-worker-1") == (
        f'{{"cluster":{cluster},"task":{{"type":"worker","index":1}},"environment":"cloud"}}'
    )
    assert json.loads(tf_config(p, "dist-chief-0"))["task"] == {"type": "chief", "index": 0}


def test_tf_config_goes_only_into_the_tensorflow_container() -> None:
    b = make_job("TFJob", "dist").ps().workers(2)
    b.add_container("Worker", name="sidecar", image="busybox")
    p = first_plan(b)
    assert "TF_CONFIG" in env(p, "dist-worker-0", 0)
    assert env(p, "dist-worker-0", 1) == {}


def test_a_single_replica_tf_job_gets_no_tf_config() -> None:
    p = first_plan(make_job("TFJob", "solo").workers(1))
    assert env(p, "solo-worker-0") == {}


def test_tf_config_lists_every_type_alphabetically_including_the_evaluator() -> None:
    p = first_plan(make_job("TFJob", "t").workers(1).ps(1).chief().evaluator())
    assert list(json.loads(tf_config(p, "t-ps-0"))["cluster"]) == [
        "chief",
        "evaluator",
        "ps",
        "worker",
    ]


def test_the_cluster_domain_is_appended_to_tf_config_hosts() -> None:
    p = first_plan(make_job("TFJob", "d").workers(2), cluster_domain="cluster.local")
    hosts = json.loads(tf_config(p, "d-worker-0"))["cluster"]["worker"]
    assert hosts == [
        "d-worker-0.default.svc.cluster.local:2222",
        "d-worker-1.default.svc.cluster.local:2222",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "dist-worker-1",
            '{"cluster":{"worker":{"1":"dist-worker-1.default.svc:2222"},'
            '"ps":["dist-ps-0.default.svc:2222"]},"task":{"type":"worker","index":1}}',
        ),
        (
            "dist-ps-0",
            '{"cluster":{"worker":{},"ps":["dist-ps-0.default.svc:2222"]},'
            '"task":{"type":"ps","index":0}}',
        ),
    ],
    ids=["a dynamic worker sees itself and every PS", "a PS sees only itself"],
)
def test_dynamic_workers_get_the_sparse_cluster_spec(name: str, expected: str) -> None:
    b = make_job("TFJob", "dist").ps(1).workers(2).spec(enableDynamicWorker=True)
    assert tf_config(first_plan(b), name) == expected


# --- MXNet, XGBoost -------------------------------------------------------------------------


def test_mxnet_workers_get_the_dmlc_env_and_mx_config() -> None:
    p = first_plan(make_job("MXJob", "mx").scheduler().servers(1).workers(2))
    found = env(p, "mx-worker-1")
    config = json.loads(found.pop("MX_CONFIG"))
    assert found == {
        "DMLC_PS_ROOT_URI": "mx-scheduler-0",
        "DMLC_PS_ROOT_PORT": "9091",
        "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": "2",
        "DMLC_ROLE": "worker",
        "DMLC_USE_KUBERNETES": "1",
        "DMLC_WORKER_ID": "1",
    }
    assert config["cluster"]["worker"][1] == {"url": "mx-worker-1", "port": 9091}
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["labels"] == {"scheduler": "", "server": "", "worker": ""}
    assert "DMLC_WORKER_ID" not in env(p, "mx-server-0")


@pytest.mark.parametrize(
    ("name", "rank"),
    [("xgb-master-0", "0"), ("xgb-worker-0", "1"), ("xgb-worker-1", "2")],
    ids=["the master is rank 0", "worker 0 is rank 1", "worker 1 is rank 2"],
)
def test_xgboost_pods_get_upstreams_env(name: str, rank: str) -> None:
    p = first_plan(make_job("XGBoostJob", "xgb").master().workers(2))
    assert env(p, name) == {
        "MASTER_PORT": "9999",
        "MASTER_ADDR": "xgb-master-0",
        "WORLD_SIZE": "3",
        "RANK": rank,
        "PYTHONUNBUFFERED": "1",
        "WORKER_PORT": "9999",
        "WORKER_ADDRS": "xgb-worker-0,xgb-worker-1",
    }


@pytest.mark.parametrize(
    ("kind", "build"),
    [
        ("PyTorchJob", lambda: make_job("PyTorchJob", "a").master().workers(1)),
        ("XGBoostJob", lambda: make_job("XGBoostJob", "a").master().workers(1)),
        ("MXJob", lambda: make_job("MXJob", "a").scheduler().workers(1)),
    ],
    ids=["PyTorch", "XGBoost", "MXNet"],
)
def test_non_tf_kinds_inject_into_every_container(kind: str, build: Any) -> None:
    b = build()
    b.add_container("Worker", name="sidecar", image="busybox")
    p = first_plan(b)
    assert env(p, "a-worker-0", 0) == env(p, "a-worker-0", 1) != {}
