"""The FastAPI and Django guides (docs/guide/fastapi.md, docs/guide/django.md) run as written:
their files, taken from the pages, enqueue through the framework's own test client into this
test's database, and the job is found queued. No worker runs: what a worker does with the job
is the README's test (tests/processes/test_readme.py).

Each framework is a dev dependency; where one cannot be installed its test skips, saying so.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recruiter import Recruiter
from tests.conftest import REPO
from tests.processes.test_readme import readme_files

DJANGO_PROJECT = {  # the guide's files, where the page says they live in the project
    "settings.py": "mysite/settings.py", "recruiting.py": "mysite/recruiting.py", "urls.py": "mysite/urls.py",
    "worker_setup.py": "mysite/worker_setup.py", "views.py": "billing/views.py", "jobs.py": "billing/jobs.py",
}
# What a project's settings.py holds besides the guide's lines (startproject writes them).
DJANGO_BASE_SETTINGS = """\
SECRET_KEY = "not-a-secret: a test"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "mysite.urls"
INSTALLED_APPS = ["billing"]
MIDDLEWARE: list[str] = []
DATABASES: dict[str, object] = {}
"""
# The request, as the project's tests would send it, after worker_setup.py set Django up.
DJANGO_CLIENT = """\
import json
import mysite.worker_setup
from django.test import Client
response = Client().post("/invoices/INV-D1/send")
print(json.dumps({"status": response.status_code, "body": json.loads(response.content)}))
"""


def test_the_fastapi_guide_enqueues_and_answers_for_the_result(db_uri: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install fastapi): the guide's app is not run")
    from fastapi.testclient import TestClient

    files = readme_files()
    for name in ("jobs.py", "fastapi_app.py"):
        (tmp_path / name).write_text(files[name])
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("jobs", "fastapi_app"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("RECRUITER_MONGODB_URI", db_uri)
    app = importlib.import_module("fastapi_app").app
    try:
        with TestClient(app) as client, Recruiter.connect(db_uri) as rec:
            sent = client.post("/invoices/INV-F1/send")
            assert sent.status_code == 202, sent.text
            job_id = sent.json()["job"]
            job = rec.job(job_id)
            assert (job.state, job.view.class_name) == ("queued", "jobs:SendInvoice")
            assert job.view.document["workable"]["parameters"] == {"invoice_id": "INV-F1"}

            waiting = client.get(f"/jobs/{job_id}/result", params={"wait": 0.2})
            assert (waiting.status_code, waiting.json()) == (202, {"job": job_id, "state": "queued"})
            assert client.get("/jobs/0123456789abcdef01234567/result").status_code == 404
            assert client.get("/jobs/not-an-id/result").status_code == 404

            rec.cancel(job_id, "the test")
            ended = client.get(f"/jobs/{job_id}/result", params={"wait": 5})
            assert ended.status_code == 409, ended.text
            assert ended.json()["why"] == "cancelled"
    finally:
        for name in ("jobs", "fastapi_app"):
            sys.modules.pop(name, None)


def test_the_django_guide_enqueues_from_a_view(db_uri: str, tmp_path: Path) -> None:
    pytest.importorskip("django", reason="Django is not installed (pip install django): the guide's project is not run")
    files = readme_files()
    for name, path in DJANGO_PROJECT.items():
        target = tmp_path / path
        target.parent.mkdir(exist_ok=True)
        (target.parent / "__init__.py").touch()
        text = files[name]
        target.write_text(DJANGO_BASE_SETTINGS + text if name == "settings.py" else text)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "RECRUITER_MONGODB_URI": db_uri}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    ran = subprocess.run([sys.executable, "-c", DJANGO_CLIENT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout.splitlines()[-1])
    assert answer["status"] == 202, answer
    with Recruiter.connect(db_uri) as rec:
        job = rec.job(answer["body"]["job"])
        assert (job.state, job.view.class_name) == ("queued", "billing.jobs:SendInvoice")
        assert job.view.document["workable"]["parameters"] == {"invoice_id": "INV-D1"}
