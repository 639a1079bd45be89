"""What a successful run of each example under examples/ must print.

For integration tests of `trainop run` (or any launcher): run the YAML, collect the
combined logs of all replicas, and check that every regex in ``must_match`` is found
(``re.search`` with re.MULTILINE). ``timeout_s`` is generous on a 2-core machine; the
measured wall time there is in ``measured_s``.

Usage from a test (no package needed):
    import importlib.util, pathlib
    spec = importlib.util.spec_from_file_location(
        "expectations", pathlib.Path(__file__).parent / "examples_support" / "expectations.py")
"""

# What examples/jax/logreg.py prints when 2 processes really train together, as a JAXJob or a
# TrainJob: the collective works, each has half the data, the loss fell, the parameters agree.
JAX_LOGREG_LINES = (
    r"rank=1 world_size=2",
    r"rank=1 psum\(rank\+1\)=3 expected=3 OK",
    r"rank=0 train_shard=2000 of 4000",
    r"rank=1 train_shard=2000 of 4000",
    r"rank=0 loss_first=0\.69\d+ loss_last=0\.\d+ loss_fell=True",
    r"rank=1 loss_first=0\.69\d+ loss_last=0\.\d+ loss_fell=True",
    r"rank=0 params_sha=\w+ params_identical=True",
    r"rank=1 params_sha=\w+ params_identical=True",
    r"final: world_size=2",
    r"^accuracy=0\.(8|9)\d+",
)

EXAMPLES = {
    "examples/pytorch/ddp.yaml": {
        "replicas": {"Master": 1, "Worker": 2},
        "must_match": [
            r"rank=0 world_size=3",
            r"rank=2 world_size=3",
            r"all_reduce\(rank\+1\)=6 expected=6 OK",
            r"train_shard=479 of 1437",
            r"replicas_in_sync=True",
            r"^accuracy=0\.(8|9)\d+",
            r"^loss=\d+\.\d+",
        ],
        "progress": 100,  # its progressPercentage when it ends, as the job carries it
        "timeout_s": 120,
        "measured_s": 7.3,
    },
    "examples/pytorch/ddp-trainjob.yaml": {
        # The same training as a Kubeflow Trainer v2 TrainJob: torchrun on 2 nodes, PET_* env.
        "replicas": {"Node": 2},
        "must_match": [
            r"rank=1 world_size=2",
            r"all_reduce\(rank\+1\)=3 expected=3 OK",
            r"train_shard=719 of 1437",
            r"replicas_in_sync=True",
            r"^accuracy=0\.(8|9)\d+",
        ],
        "progress": 100,
        "timeout_s": 120,
        "measured_s": 10.9,
    },
    "examples/tensorflow/mwms.yaml": {
        "replicas": {"Worker": 2},
        "must_match": [
            r"num_replicas_in_sync=2 task_type=worker task_id=0 is_chief=True",
            r"num_replicas_in_sync=2 task_type=worker task_id=1 is_chief=False",
            r"local_examples=192 global_examples=384",
            r"final: num_replicas_in_sync=2",
            r"^loss=\d+\.\d+",
        ],
        "timeout_s": 240,
        "measured_s": 5.5,
    },
    "examples/xgboost/dist.yaml": {
        "replicas": {"Master": 1, "Worker": 2},
        "must_match": [
            r"rank=0 started RabitTracker",
            r"collective_world_size=3",
            r"all_reduce\(train_shard\)=24000 all_reduce\(rank\+1\)=6 expected=6 OK",
            r"models_identical=True",
            r"final: world_size=3",
            r"^accuracy=0\.\d+",
        ],
        "timeout_s": 120,
        "measured_s": 2.8,
    },
    "examples/xgboost/dist-trainjob.yaml": {
        # The same training as a TrainJob: the xgboost ML policy's DMLC_* contract.
        "replicas": {"Node": 3},
        "must_match": [
            r"rank=0 started RabitTracker",
            r"collective_world_size=3",
            r"all_reduce\(train_shard\)=24000 all_reduce\(rank\+1\)=6 expected=6 OK",
            r"models_identical=True",
            r"final: world_size=3",
            r"^accuracy=0\.\d+",
        ],
        "timeout_s": 120,
        "measured_s": 3.0,
    },
    "examples/jax/logreg.yaml": {
        # JAXJob: 2 processes, gradients pmean-ed over gloo every step.
        "replicas": {"Worker": 2},
        "must_match": JAX_LOGREG_LINES,
        "timeout_s": 120,
        "measured_s": 4.5,
    },
    "examples/jax/logreg-trainjob.yaml": {
        # The same training as a TrainJob: the jax ML policy's JAX_* contract.
        "replicas": {"Node": 2},
        "must_match": JAX_LOGREG_LINES,
        "timeout_s": 120,
        "measured_s": 3.5,
    },
    "examples/mxnet/ps.yaml": {
        "replicas": {"Scheduler": 1, "Server": 1, "Worker": 2},
        "needs": "bash examples/mxnet/setup_venv.sh",
        "must_match": [
            r"role=scheduler .* serving",
            r"role=server .* serving",
            r"num_workers=2 kvstore=dist_sync",
            r"push\(rank\+1\)->pull=3 expected=3 OK",
            r"final: num_workers=2 num_servers=1",
            r"^accuracy=0\.\d+",
        ],
        "timeout_s": 120,
        "measured_s": 2.1,
    },
    "examples/paddle/collective.yaml": {
        "replicas": {"Worker": 2},
        "must_match": [
            r"rank=0 world_size=2",
            r"rank=1 world_size=2",
            r"all_reduce\(rank\+1\)=3 expected=3 OK",
            r"train_shard=719 of 1437",
            r"rank=1 weights_identical=True",
            r"final: world_size=2",
            r"^accuracy=0\.(8|9)\d+",
        ],
        "timeout_s": 240,
        "measured_s": 12.9,
    },
    "examples/mpi/logreg.yaml": {
        "replicas": {"Launcher": 1, "Worker": 2},
        "must_match": [
            r"rank=0 world_size=2 replica=mpi-logreg-worker-0",
            r"rank=1 world_size=2 replica=mpi-logreg-worker-1",
            r"allreduce\(rank\+1\)=3 expected=3 OK",
            r"train_shard=213 of 426",
            r"rank=1 weights_identical=True",
            r"^accuracy=0\.9\d+",
        ],
        "timeout_s": 240,
        "measured_s": 4.8,
    },
    "examples/mpi/logreg-trainjob.yaml": {
        # The same training as a TrainJob on mpi-distributed: the launcher's mpirun starts one
        # rank in each node (each prints the node pod it runs in).
        "replicas": {"Launcher": 1, "Node": 2},
        "must_match": [
            r"rank=0 world_size=2 replica=mpi-logreg-trainjob-node-0",
            r"rank=1 world_size=2 replica=mpi-logreg-trainjob-node-1",
            r"allreduce\(rank\+1\)=3 expected=3 OK",
            r"train_shard=213 of 426",
            r"rank=1 weights_identical=True",
            r"^accuracy=0\.9\d+",
        ],
        "timeout_s": 240,
        "measured_s": 3.5,
    },
    "examples/exitcode/retry.yaml": {
        "replicas": {"Master": 1, "Worker": 1},
        "must_match": [
            r"rank=1 failing once with exit code 137",
            r"rank=1 .*restarted=True",
            r"all_reduce\(rank\+1\)=3 expected=3 OK",
            r"rank=1 succeeded after restart",
        ],
        "timeout_s": 120,
        "measured_s": 1.7,
    },
    "examples/pytorch/allreduce_bench.yaml": {
        "replicas": {"Master": 1, "Worker": 3},
        "must_match": [r"allreduce_bench launcher=\S+ world_size=4 .* check=OK"],
        "timeout_s": 120,
        "measured_s": 3.5,
    },
}
