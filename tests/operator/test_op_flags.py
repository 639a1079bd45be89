"""Flags: upstream's names and defaults (secure endpoints where upstream's v1 leaves them open),
--enable-scheme checking, and cheap imports."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from opkit import ROOT

from trainop_core.kinds.table import build_registry
from trainop_core.operator import add_flags, options_from_args
from trainop_core.operator.options import DEFAULT_LEADER_ELECTION_ID, Options
from trainop_core.operator.run import main


def parse(*argv: str) -> Options:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return options_from_args(parser.parse_args(argv))


def test_defaults_are_upstreams_but_the_endpoints_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBEFLOW_NAMESPACE", raising=False)
    opts = parse()
    assert (opts.enable_schemes, opts.namespace, opts.gang_scheduler_name) == ((), "", "")
    assert (opts.controller_threads, opts.kube_api_qps, opts.kube_api_burst) == (1, 20.0, 30)
    # kubebuilder's: metrics over HTTPS behind the API server; probes on loopback.
    assert (opts.metrics_bind_address, opts.metrics_secure) == (":8443", True)
    assert (opts.metrics_cert_path, opts.metrics_cert_name, opts.metrics_cert_key) == (
        "",
        "tls.crt",
        "tls.key",
    )
    assert opts.health_probe_bind_address == "127.0.0.1:8081"
    assert (opts.leader_elect, opts.leader_election_id) == (False, DEFAULT_LEADER_ELECTION_ID)
    assert (opts.lease.lease_duration, opts.lease.renew_deadline, opts.lease.retry_period) == (
        15.0,
        10.0,
        2.0,
    )


@pytest.mark.parametrize(
    ("argv", "secure", "address"),
    [
        (["--metrics-secure=false"], False, ":8080"),
        (["--metrics-secure", "false"], False, ":8080"),
        (
            ["--metrics-secure=False", "--metrics-bind-address=127.0.0.1:9090"],
            False,
            "127.0.0.1:9090",
        ),
        (["--metrics-secure"], True, ":8443"),
        (["--metrics-secure=true", "--metrics-bind-address=0"], True, "0"),
    ],
    ids=[
        "plain http on 8080 when asked with =false",
        "plain http when asked with a separate false",
        "plain http on the address given",
        "a bare --metrics-secure is true",
        "metrics can be disabled",
    ],
)
def test_metrics_serve_plain_http_only_when_asked(
    argv: list[str], secure: bool, address: str
) -> None:
    opts = parse(*argv)
    assert (opts.metrics_secure, opts.metrics_bind_address) == (secure, address)


def test_a_metrics_secure_value_that_is_not_a_boolean_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse("--metrics-secure=maybe")
    assert "--metrics-secure" in capsys.readouterr().err


def test_a_metrics_certificate_with_plain_http_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--metrics-secure=false", "--metrics-cert-path=/certs"]) == 2
    assert "--metrics-cert-path" in capsys.readouterr().err


def test_help_says_how_metrics_and_probes_are_served(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "HTTPS" in text and "SubjectAccessReview" in text and "--metrics-secure=false" in text
    assert "default 127.0.0.1:8081" in text and "$(POD_IP):8081" in text


def test_namespace_defaults_to_kubeflow_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "kubeflow")
    assert parse().namespace == "kubeflow"
    assert parse("--namespace", "").namespace == ""


def test_enable_scheme_is_repeatable_and_case_insensitive() -> None:
    opts = parse(
        "--enable-scheme", "pytorchjob", "--enable-scheme", "TFJOB", "--enable-scheme", "MXNetJob"
    )
    assert build_registry().select(opts.enable_schemes).names == ("TFJob", "PyTorchJob", "MXJob")


def test_an_unknown_scheme_exits_2_listing_the_known_kinds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--enable-scheme", "LightGBMJob"]) == 2
    err = capsys.readouterr().err
    assert "LightGBMJob" in err and "PyTorchJob" in err and "MPIJob" in err and "PaddleJob" in err


def test_inconsistent_lease_timings_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--leader-election-renew-deadline", "20"]) == 2
    assert "renew deadline" in capsys.readouterr().err


def test_a_missing_kubeconfig_exits_1(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--kubeconfig",
                "/nonexistent/kubeconfig",
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                "0",
            ]
        )
        == 1
    )
    assert "cannot start" in capsys.readouterr().err


def test_the_trainop_cli_registers_the_same_flags() -> None:
    from trainop_core.cli import operator_cmd

    parser = argparse.ArgumentParser()
    operator_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["operator", "--enable-scheme", "tfjob", "--leader-elect"])
    assert options_from_args(args).enable_schemes == ("tfjob",) and args.leader_elect
    assert callable(args.func)


def test_python_dash_m_runs_and_importing_the_package_does_not_import_kubernetes() -> None:
    code = (
        "import sys, trainop_core.operator, trainop_core.cli.operator_cmd; "
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "trainop_core.operator", "--enable-scheme", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "known kinds" in done.stderr


def test_the_operator_process_keeps_its_startup_objects_out_of_the_cycle_collector() -> None:
    """In the process's main thread (`python -m trainop_core.operator`) everything alive at
    start is frozen; an operator run in a thread of another process (tests) freezes nothing."""
    code = (
        "import gc, threading\n"
        "from trainop_core.operator.run import _freeze_startup_objects\n"
        "t = threading.Thread(target=_freeze_startup_objects); t.start(); t.join()\n"
        "print(gc.get_freeze_count())\n"
        "_freeze_startup_objects()\n"
        "print(gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    in_thread, in_main = (int(n) for n in out.stdout.split())
    assert in_thread == 0 and in_main > 10_000
