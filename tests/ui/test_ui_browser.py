"""`trainop ui` in a real browser: the job list, a job's live log and metric curves from real
training, a `trainop tune` study, deleting a job, the token, and hostile names shown as text.

Every wait is on something the page shows (Playwright's expect polls the document until its
deadline); nothing sleeps a fixed time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ui_support import HOSTILE, REPO, Server, Watched, script_job, status, ticking_job, ui_env

from trainop_core.client import TrainingClient
from trainop_core.errors import NotFoundError
from trainop_core.ui.security import Access
from trainop_core.ui.views import MAX_METRICS

expect = pytest.importorskip("playwright.sync_api").expect


def tick_of(text: str) -> int:
    ticks = [int(part.split()[1]) for part in text.splitlines() if part.startswith("tick ")]
    return max(ticks, default=0)


def test_the_list_shows_a_running_job_and_its_page_follows_the_log(
    server: Server, client: TrainingClient, page: Watched, name: str
) -> None:
    client.create(ticking_job(name, {"team": "vision"}))
    page.page.goto(server.url)
    row = page.page.locator(f'tr[data-job="default/{name}"]')
    expect(row.locator("td.state")).to_have_text("Running")
    expect(row).to_contain_text("team=vision")
    page.page.fill("#filter", "no-such-job")
    expect(row).to_have_count(0)
    page.page.fill("#filter", f"{name} running")
    expect(row).to_have_count(1)
    page.screenshot("jobs")

    row.locator("a.job-link").click()
    expect(page.page.locator("#job-name")).to_have_text(name)
    expect(page.page.locator("#pods")).to_contain_text("master-0")
    expect(page.page.locator("#conditions")).to_contain_text("Running")
    log = page.page.locator("#log")
    expect(log).to_contain_text("tick ")
    seen = tick_of(log.inner_text())
    # Followed live: a later line arrives without any reload.
    expect(log).to_contain_text(f"tick {seen + 3} ")
    page.page.select_option("#replica", "master-0")
    expect(log.locator(".line").first).to_be_visible()
    page.screenshot("job")
    assert page.dialogs == []


@pytest.mark.slow
def test_metric_curves_are_drawn_from_real_distributed_training(
    server: Server, client: TrainingClient, page: Watched, name: str
) -> None:
    job = yaml.safe_load((REPO / "examples" / "pytorch" / "ddp.yaml").read_text())
    job["metadata"] = {"name": name, "namespace": "default"}
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] = ["--epochs", "3", "--lr", "0.05"]
    client.create(job, workdir=REPO / "examples" / "pytorch")
    page.page.goto(server.url)  # the token sets the cookie, then the job's page:
    page.page.goto(f"{server.base}/#/job/default/{name}")
    chart = page.page.locator('.chart[data-metric="global_train_loss"]')
    expect(chart.locator("canvas")).to_have_count(1, timeout=300_000)
    # One series per replica, each named in the legend, once every rank printed an epoch.
    for replica in ("master-0", "worker-0", "worker-1"):
        expect(chart.locator(".u-legend")).to_contain_text(replica, timeout=300_000)
    expect(page.page.locator("#log")).to_contain_text("end of log", timeout=600_000)
    expect(page.page.locator('.chart[data-metric="accuracy"]')).to_have_count(1)
    expect(page.page.locator("#job-state")).to_have_text("Succeeded")
    page.screenshot("metrics")


@pytest.mark.slow
def test_a_study_of_trainop_tune_shows_its_trials_and_the_best(
    server: Server, home: Path, studies: Path, page: Watched
) -> None:
    command = [sys.executable, "-m", "trainop_core.cli.main", "tune"]
    command += [str(REPO / "examples" / "hpo" / "quadratic.yaml"), "--param"]
    command += ["lr=grid:0.001,0.01,0.1", "--metric", "loss", "--cpus-per-trial", "0.5"]
    command += ["-n", "tuned", "--storage-path", str(studies)]
    done = subprocess.run(
        command, env=ui_env(home), capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page.page.goto(server.url)
    page.page.goto(f"{server.base}/#/studies")
    page.page.locator("a.study-link").first.click()
    trials = page.page.locator("#trials tbody tr")
    expect(trials).to_have_count(3)
    best = page.page.locator("#trials tbody tr", has=page.page.locator(".best"))
    expect(best).to_have_count(1)
    expect(best).to_contain_text("lr=0.01")
    expect(best).to_contain_text("Succeeded")
    expect(page.page.locator("#scatter canvas")).to_have_count(1)
    expect(page.page.locator("#trial-curves canvas")).to_have_count(1)
    expect(page.page.locator("#live")).to_have_text("finished")
    page.screenshot("study")


def test_a_job_is_deleted_from_its_page(
    server: Server, client: TrainingClient, page: Watched, name: str
) -> None:
    client.create(ticking_job(name))
    page.page.goto(server.url)
    page.page.goto(f"{server.base}/#/job/default/{name}")
    expect(page.page.locator("#job-state")).to_have_text("Running")
    page.page.click("#show-yaml")
    expect(page.page.locator("#yaml")).to_contain_text(f"name: {name}")
    delete = page.page.locator("#delete")
    delete.click()
    expect(delete).to_have_text(f"Really delete {name}?")
    delete.click()
    expect(page.page).to_have_url(f"{server.base}/#/")
    expect(page.page.locator("#jobs")).not_to_contain_text(name)
    with pytest.raises(NotFoundError):
        client.get(name)
    assert page.dialogs == []


def test_a_request_without_the_token_gets_401(server: Server, page: Watched) -> None:
    answer = page.page.goto(server.base + "/")
    assert answer is not None and answer.status == 401
    expect(page.page.locator("body")).to_contain_text("401")
    page.screenshot("no-token")
    assert page.page.request.get(server.base + "/api/jobs").status == 401
    assert page.page.request.get(server.base + "/static/app.js").status == 401
    assert page.page.request.get(server.base + "/?token=wrong").status == 401


def test_hostile_labels_log_lines_and_names_show_as_text(
    server: Server, client: TrainingClient, page: Watched, name: str
) -> None:
    labels = {"note": HOSTILE[1], "why": HOSTILE[0]}
    client.create(ticking_job(name, labels))
    page.page.goto(server.url)
    row = page.page.locator(f'tr[data-job="default/{name}"]')
    expect(row).to_contain_text(f"note={HOSTILE[1]}")
    expect(row).to_contain_text(f"why={HOSTILE[0]}")
    row.locator("a.job-link").click()
    log = page.page.locator("#log")
    expect(log).to_contain_text(f"{HOSTILE[0]} {HOSTILE[1]}")
    expect(page.page.locator("#job-head")).to_contain_text(f"note={HOSTILE[1]}")
    page.screenshot("hostile")
    # A name no job can have, in the page's address: shown in the error, as text.
    page.page.goto(f"{server.base}/#/job/default/{HOSTILE[1]}")
    expect(page.page.locator("#main")).to_contain_text(HOSTILE[1])
    assert page.page.locator("img").count() == 0
    assert page.page.locator("main script").count() == 0
    assert page.dialogs == []


def test_a_change_needs_the_page_origin_and_its_csrf_header(
    server: Server, client: TrainingClient, name: str
) -> None:
    client.create(ticking_job(name, lines=50))
    cookie = {"Cookie": f"trainop-ui-{server.port}={server.token}"}
    origin = {"Origin": f"http://127.0.0.1:{server.port}"}
    csrf = {"X-Trainop-CSRF": Access(server.token, server.port, frozenset()).csrf}
    path = f"/api/jobs/default/{name}/delete"
    assert status(server, "GET", "/api/jobs") == 401
    assert status(server, "GET", "/api/jobs", Cookie=f"trainop-ui-{server.port}=wrong") == 401
    assert status(server, "GET", "/api/jobs", **cookie) == 200
    assert status(server, "POST", path, **cookie, **origin) == 403  # no CSRF header
    assert status(server, "POST", path, **cookie, **csrf) == 403  # no Origin
    assert status(server, "POST", path, **cookie, **csrf, Origin="http://evil.example") == 403
    assert status(server, "POST", path, **csrf, **origin) == 401  # no token
    assert client.get(name).name == name  # none of them deleted it
    rebound = {"Host": "evil.example", **cookie}
    assert status(server, "GET", "/api/jobs", **rebound) == 403  # DNS rebinding
    assert status(server, "POST", path, **cookie, **csrf, **origin) == 200
    with pytest.raises(NotFoundError):
        client.get(name)


def test_a_job_created_after_the_page_loaded_appears_without_reload(
    server: Server, client: TrainingClient, page: Watched, name: str
) -> None:
    page.page.goto(server.url)
    expect(page.page.locator("#live")).to_have_text("live")
    page.page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded
    row = page.page.locator(f'tr[data-job="default/{name}"]')
    expect(row).to_have_count(0)
    client.create(ticking_job(name, lines=50))
    expect(row).to_have_count(1)
    assert page.page.evaluate("window.loadedOnce") is True


def test_a_replica_printing_thousands_of_metric_names_gets_a_bounded_number_of_charts(
    server: Server, client: TrainingClient, page: Watched, name: str
) -> None:
    code = (
        "import time\n"
        "for step in range(3):\n"
        "    for base in range(0, 3000, 500):\n"
        "        names = ' '.join(f'm{i}={step}' for i in range(base, base + 500))\n"
        "        print(f'{names} step={step}', flush=True)\n"
        "print('done', flush=True)\n"
        "time.sleep(600)\n"
    )
    client.create(script_job(name, code))
    page.page.goto(server.url)
    page.page.goto(f"{server.base}/#/job/default/{name}")
    expect(page.page.locator("#log")).to_contain_text("done")
    charts = page.page.locator("#charts .chart")
    expect(charts).to_have_count(MAX_METRICS)
    expect(page.page.locator('.chart[data-metric="m0"] canvas')).to_have_count(1)
    expect(page.page.locator('.chart[data-metric="m24"]')).to_have_count(0)
    client.delete(name)
