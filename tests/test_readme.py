"""The README tells the truth about how to run things: CI runs exactly its test command, that
command's script runs the checks it names, its example commands name files that exist, and the
docs point at nothing outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# Repository paths a command may name (files or globs), e.g. examples/pytorch/ddp.yaml.
REPO_PATH = re.compile(r"(?<![\w/.-])((?:examples|operator|scripts|docs|benchmarks)/[\w./*-]+)")


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def block_after(text: str, words: str) -> str:
    """The first ```sh block after the sentence starting with `words`."""
    return sh_blocks(text[text.index(words) :])[0].strip()


def test_ci_runs_the_readmes_test_command_word_for_word() -> None:
    command = block_after(README, "Install everything and run every check")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    runs = [line for line in ci if line and not line.startswith(("#", "set ", "cd ", "export "))]
    assert command == "pip install -c constraints.txt -e '.[all]' && scripts/check"
    chromium = (  # the browser of tests/ui, from Debian's packages, only when missing
        "command -v chromium >/dev/null || { apt-get update && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }"
    )
    assert runs == [chromium, command]


def test_the_check_script_runs_lint_format_types_then_the_tests() -> None:
    script = ROOT / "scripts" / "check"
    lines = [line.strip() for line in script.read_text().splitlines()]
    steps = [line for line in lines if line.startswith(("ruff", "mypy", "python -m pytest"))]
    assert "set -euo pipefail" in lines  # any failing step fails the check
    assert steps == [
        "ruff check .",
        "ruff format --check .",
        "mypy",
        'python -m pytest --durations=15 "$@"',
    ]
    assert script.stat().st_mode & 0o111, "scripts/check must be executable"


def test_the_quick_start_installs_and_runs_an_example_that_exists() -> None:
    command = block_after(README, "Install and run a real distributed PyTorch job")
    install, run = command.split(" && ")
    assert install.startswith("pip install -c constraints.txt -e '.[")
    assert run.startswith("trainop run ")
    assert (ROOT / run.removeprefix("trainop run ")).is_file()


def test_every_repository_path_a_readme_command_names_exists() -> None:
    named = {path for block in sh_blocks(README) for path in REPO_PATH.findall(block)}
    assert named, "the README's commands name no file?"
    missing = sorted(path for path in named if not list(ROOT.glob(path.rstrip(".,"))))
    assert missing == []


def test_the_docs_name_no_path_outside_the_repository() -> None:
    outside = re.compile(r"(?<![\w.])/(?:work|home|root|Users|mnt|srv)/[\w./-]+")
    found = {
        str(doc.relative_to(ROOT)): outside.findall(doc.read_text())
        for doc in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md")]
    }
    assert {doc: paths for doc, paths in found.items() if paths} == {}


# Every section the README held before the documentation site (issue 34), and the page (and its
# heading) that holds it now: a link or a habit that looks for one of them finds its new home.
MOVED_FROM_THE_README = {
    "Quick start": ("README.md", "Quick start"),
    "Running jobs on this machine": ("docs/local.md", "Running jobs on this machine"),
    "MPIJob on this machine": ("docs/local.md", "MPIJob on this machine"),
    "Queues on this machine": ("docs/local-queue.md", "Queues on this machine"),
    "From Python": ("docs/client.md", "From Python: `TrainingClient`"),
    "The operator on Kubernetes": ("docs/kubernetes.md", "The operator on Kubernetes"),
    "Admission webhooks": ("docs/kubernetes.md", "Admission webhooks"),
    "Kueue": ("docs/kueue.md", "Kueue"),
    "TrainJob and training runtimes (Kubeflow Trainer v2)": (
        "docs/trainjob.md",
        "TrainJob and training runtimes (Kubeflow Trainer v2)",
    ),
    "Decorating pods without changing trainop": (
        "docs/decorators.md",
        "Decorating pods without changing trainop",
    ),
    "Jobs on a Ray cluster": ("docs/ray.md", "Jobs on a Ray cluster"),
    "Where trainop differs from upstream on purpose": (
        "docs/upstream-differences.md",
        "The two that matter most",
    ),
    "Integrations": ("README.md", "One example per place"),
    "Flyte": ("docs/flyte.md", "Flyte"),
    "Kubeflow Pipelines": ("docs/kfp.md", "Kubeflow Pipelines"),
    "Hyperparameter search": ("docs/tune.md", "Hyperparameter search"),
    "Testing and benchmarks": ("docs/contributing.md", "Testing and benchmarks"),
    "Try the operator with kubectl and no cluster": ("docs/process-node.md", "The try-it cluster"),
    "Performance against Kubeflow's operator": (
        "docs/benchmarks.md",
        "Performance against Kubeflow's operator",
    ),
    "Layout": ("docs/architecture.md", "Code layout"),
}


def test_every_section_the_readme_had_has_a_home() -> None:
    homeless = {}
    for section, (page, heading) in MOVED_FROM_THE_README.items():
        headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.M)
        if heading not in headings:
            homeless[section] = f"{page} has no heading {heading!r}"
    assert homeless == {}


def test_the_readme_stays_short_and_links_to_the_site() -> None:
    assert len(README.splitlines()) <= 200
    assert "docs/images/architecture.svg" in README  # the picture
    assert "docs/images/benchmarks/" in README  # one benchmark plot
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", README))
    assert {"docs/getting-started.md", "docs/cli.md", "docs/api.md"} <= linked
    assert all((ROOT / page).is_file() for page in linked)


def test_the_readme_and_the_contributing_guide_name_every_binary_the_project_builds() -> None:
    from dataclasses import fields

    from trainop_core.testing.binaries import KubeBinaries

    built = [field.name.replace("_", "-") for field in fields(KubeBinaries)]
    assert "kube-scheduler" in built  # the list really comes from the code
    for page in (ROOT / "README.md", ROOT / "docs" / "contributing.md"):
        text = page.read_text()
        assert [name for name in built if not re.search(rf"\b{name}\b", text)] == [], page.name
