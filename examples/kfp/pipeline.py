"""A Kubeflow pipeline that trains with PyTorch DDP (1 Master + 2 Workers) through trainop.

    python examples/kfp/pipeline.py                    # compile to ddp_pipeline.yaml
    python examples/kfp/pipeline.py --local --epochs 3 # run it here under kfp.local

The training step is `job_component(ddp_params.yaml)`: the job file's `${trialParameters.*}`
become the inputs `epochs` and `lr`. The task's CPU, memory and env settings pass through to every
replica's pod on a cluster (kfp.local ignores them). Locally the replicas are processes on this
machine, run from `examples/pytorch` (the job's `python ddp.py` is relative), and the step's
`metrics` artifact holds the `accuracy`/`loss` the Master printed.
"""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as types.
import argparse
from pathlib import Path

from kfp import compiler, dsl, local
from kfp.dsl import Metrics
from trainop_kfp import job_component

HERE = Path(__file__).resolve().parent
ddp_train = job_component(HERE / "ddp_params.yaml")


@dsl.pipeline(name="pytorch-ddp-digits", description="PyTorch DDP on digits, run by trainop")
def ddp_pipeline(
    epochs: int = 10, lr: float = 0.05, backend: str = "kubernetes", workdir: str = ""
) -> Metrics:
    train = ddp_train(epochs=epochs, lr=lr, backend=backend, workdir=workdir)
    train.set_cpu_request("1").set_cpu_limit("2").set_memory_limit("4Gi")
    train.set_env_variable("OMP_NUM_THREADS", "1")
    return train.outputs["metrics"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", action="store_true", help="run under kfp.local, here")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--output", default=str(HERE / "ddp_pipeline.yaml"))
    parser.add_argument("--pipeline-root", default="./local_outputs", help="kfp.local's outputs")
    args = parser.parse_args()
    if not args.local:
        compiler.Compiler().compile(ddp_pipeline, package_path=args.output)
        print(f"compiled {args.output}")
        return
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=args.pipeline_root)
    workdir = str(HERE.parent / "pytorch")
    run = ddp_pipeline(epochs=args.epochs, lr=args.lr, backend="local", workdir=workdir)
    for name, value in sorted(run.output.metadata.items()):
        print(f"{name}={value}")


if __name__ == "__main__":
    main()
