"""A replica that fails once with a *retryable* exit code, then succeeds.

Demonstrates ``restartPolicy: ExitCode`` (Kubeflow v1): exit codes 1-127 are
permanent failures, 128-255 (e.g. 137 = SIGKILL/OOM-kill, 143 = SIGTERM) are
retryable, so the operator restarts the replica.

A restarted replica is a brand-new process, so the "I already failed" state lives in
a marker file ``<marker-dir>/<MASTER_ADDR>-<MASTER_PORT>-rank-<RANK>.failed``. Keying it by the
master's address/port keeps concurrent local runs apart (each local run gets its own free
port, kept across replica restarts). With ``restartPolicy: ExitCode`` the operator
re-creates the *pod*, so on Kubernetes the marker dir must be on a volume that outlives
the pod (e.g. a PVC); locally it is just a directory on this machine. The marker dir is, in order:
``--marker-dir``, env ``FLAKY_MARKER_DIR`` (retry.yaml sets it), or
``$TMPDIR/trainop-flaky-<TRAINOP_JOB_UID|JOB_NAME|default>``. The marker is removed
on success so the job behaves the same every time it is run.

Only ``--fail-rank`` (default 1 = the first Worker) fails; it dies *before*
joining the process group, so the Master simply waits in init_process_group for the
restarted Worker, and the final all_reduce proves the restarted replica rejoined.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time


def marker_dir(cli):
    if cli:
        return cli
    if os.environ.get("FLAKY_MARKER_DIR"):
        return os.environ["FLAKY_MARKER_DIR"]
    key = os.environ.get("TRAINOP_JOB_UID") or os.environ.get("JOB_NAME") or "default"
    return os.path.join(tempfile.gettempdir(), f"trainop-flaky-{key}")


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
    job_key = f"{os.environ.get('MASTER_ADDR', 'local')}-{os.environ.get('MASTER_PORT', '0')}"
    marker = os.path.join(mdir, f"{job_key}-rank-{rank}.failed")
    restarted = os.path.exists(marker)
    print(
        f"flaky: rank={rank} world_size={world} pid={os.getpid()} marker={marker} "
        f"restarted={restarted}",
        flush=True,
    )

    if rank == args.fail_rank and not restarted:
        os.makedirs(mdir, exist_ok=True)
        with open(marker, "w") as f:
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
