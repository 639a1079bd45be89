"""A replica that fails once with a *retryable* exit code, then succeeds.

Demonstrates ``restartPolicy: ExitCode`` (Kubeflow v1): exit codes 1-127 are
permanent failures, 128-255 (e.g. 137 = SIGKILL/OOM-kill, 143 = SIGTERM) are
retryable, so the operator restarts the replica.

A restarted replica is a brand-new process, so the "I already failed" state lives in
a marker file ``<marker-dir>/<MASTER_ADDR>-<MASTER_PORT>-rank-<RANK>.failed``. The marker dir
belongs to one run of the job, never a fixed path every run shares (a marker left by another
run, or planted by another user, would change the outcome). It is, in order:

- ``--marker-dir``, or env ``FLAKY_MARKER_DIR``: with ``restartPolicy: ExitCode`` the operator
  re-creates the *pod*, so on Kubernetes this must be a volume that outlives the pod and
  belongs to this job (e.g. a PVC mounted there);
- env ``TRAINOP_JOB_DIR``, which ``trainop run`` gives every replica: the job's own private
  state directory, made for this run and removed with the job.

Without any of them the script stops with a message saying what to set. The marker is removed
on success, so the job behaves the same every time it is run.

Only ``--fail-rank`` (default 1 = the first Worker) fails; it dies *before*
joining the process group, so the Master simply waits in init_process_group for the
restarted Worker, and the final all_reduce proves the restarted replica rejoined.
"""

import argparse
import contextlib
import os
import sys
import time


def marker_dir(cli):
    """This run's marker directory (see the module docstring); None if nothing names one."""
    if cli:
        return cli
    if os.environ.get("FLAKY_MARKER_DIR"):
        return os.environ["FLAKY_MARKER_DIR"]
    if os.environ.get("TRAINOP_JOB_DIR"):
        return os.path.join(os.environ["TRAINOP_JOB_DIR"], "flaky-markers")
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--marker-dir", default=None)
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--exit-code", type=int, default=137)
    p.add_argument(
        "--via-signal",
        action="store_true",
        help="die by signal (exit-code - 128, e.g. SIGKILL for 137) instead of exit(); "
        "a local launcher must map signal N to exit code 128+N like Kubernetes does",
    )
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    mdir = marker_dir(args.marker_dir)
    if mdir is None:
        sys.exit(
            "flaky: no marker directory for this run: set FLAKY_MARKER_DIR (on Kubernetes, a "
            "volume that outlives the pod, e.g. a PVC) or pass --marker-dir"
        )
    job_key = f"{os.environ.get('MASTER_ADDR', 'local')}-{os.environ.get('MASTER_PORT', '0')}"
    marker = os.path.join(mdir, f"{job_key}-rank-{rank}.failed")
    restarted = os.path.exists(marker)
    print(
        f"flaky: rank={rank} world_size={world} pid={os.getpid()} marker={marker} "
        f"restarted={restarted}",
        flush=True,
    )

    if rank == args.fail_rank and not restarted:
        os.makedirs(mdir, mode=0o700, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"failed at {time.time()} pid {os.getpid()}\n")
        print(f"flaky: rank={rank} failing once with exit code {args.exit_code}", flush=True)
        sys.stdout.flush()
        if args.via_signal and args.exit_code > 128:
            os.kill(os.getpid(), args.exit_code - 128)
            time.sleep(5)  # not reached for SIGKILL/SIGTERM
        os._exit(args.exit_code)

    if world > 1:
        import torch
        import torch.distributed as dist

        dist.init_process_group(backend="gloo")
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        print(
            f"flaky: rank={rank} all_reduce(rank+1)={t.item():.0f} expected={expected:.0f} "
            f"{'OK' if t.item() == expected else 'MISMATCH'}",
            flush=True,
        )
        dist.barrier()
        dist.destroy_process_group()

    if restarted:
        os.remove(marker)
        with contextlib.suppress(OSError):
            os.rmdir(mdir)  # only if empty
        print(f"flaky: rank={rank} succeeded after restart", flush=True)
    else:
        print(f"flaky: rank={rank} succeeded", flush=True)


if __name__ == "__main__":
    main()
