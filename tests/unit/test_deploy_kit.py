"""The files that run recruiter elsewhere (compose.yaml, the Kubernetes manifests of
deploy/kubernetes/, the CI workflow on MongoDB replica sets) name only commands, options
and ``RECRUITER_*`` variables the CLI accepts.

None of them can run here (no container runtime), so each command they hold is parsed by
click itself, from the command tree of :mod:`recruiter.cli` (as the CLI reference is
written), with the variables they set in the environment: an unknown command or option, a
bad value (``--concurrency 0``, ``RECRUITER_LOG_FORMAT=yaml``) or a variable no option of that command
reads fails here, not on the first deploy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import click
import pytest
import yaml

from recruiter.cli.reference import envvars, roots
from recruiter.store import parse_target
from tests.conftest import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
WORKFLOW = REPO / ".github" / "workflows" / "mongodb.yml"
# Variables the files may set that are not options: the test suite's server (tests/conftest.py).
NOT_OPTIONS = {"RECRUITER_TEST_MONGODB_URI": REPO / "tests" / "conftest.py"}


@dataclass
class Use:
    """One command line of a file, with the variables its process gets (None: a secret or placeholder)."""

    where: str
    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)


def command_of(argv: list[str]) -> tuple[str, click.Command, list[str]]:
    """The click command ``argv`` runs (walking the groups), its full name and its own arguments."""
    programs = dict(roots())
    if not argv or argv[0] not in programs:
        raise click.UsageError(f"{argv[:1]} is not one of the programs {sorted(programs)}")
    command, path, rest = programs[argv[0]], [argv[0]], list(argv[1:])
    while isinstance(command, click.Group):
        if not rest or rest[0] not in command.commands:
            raise click.UsageError(f"{' '.join(path)} has no command {rest[:1]}")
        path.append(rest.pop(0))
        command = command.commands[path[-1]]
    return " ".join(path), command, rest


def problems(use: Use, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, Any]]:
    """What the CLI refuses in ``use`` (an empty list: nothing), and the parameters it parsed."""
    try:
        name, command, args = command_of(use.argv)
    except click.UsageError as exc:
        return [f"{use.where}: {exc.format_message()}"], {}
    accepted = {e for param in command.params for e in envvars(param)}
    found = [f"{use.where}: `{name}` reads no variable {var}" for var in use.env
             if (var.startswith("RECRUITER_") or var == "MONGODB_URI") and var not in accepted]
    with monkeypatch.context() as env:
        for var in [v for v in os.environ if v.startswith("RECRUITER_") or v == "MONGODB_URI"]:
            env.delenv(var)
        for var, value in use.env.items():
            if value is not None and var in accepted:
                env.setenv(var, value)
        try:
            ctx = command.make_context(name, list(args))
        except click.ClickException as exc:
            return [*found, f"{use.where}: `{' '.join(use.argv)}`: {exc.format_message()}"], {}
    return found, ctx.params


# -- reading the files --------------------------------------------------------------------


def compose_uses() -> Iterator[tuple[str, Use, Mapping[str, Any]]]:
    """Every service of compose.yaml that runs recruiter, with the service."""
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    for name, service in services.items():
        argv = service.get("command") or []
        if argv and argv[0] in dict(roots()):
            env = service.get("environment") or {}
            if isinstance(env, list):
                env = dict(item.partition("=")[::2] for item in env)
            yield name, Use(f"compose.yaml service {name}", list(argv),
                            {k: None if "${" in str(v) else str(v) for k, v in env.items()}), service


def kubernetes_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(KUBERNETES.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def kubernetes_uses() -> Iterator[tuple[str, Use, Mapping[str, Any]]]:
    """Every container of the Deployments, its variables read from the ConfigMaps and Secrets it names."""
    docs = kubernetes_documents()
    sources = {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs if doc["kind"] in ("ConfigMap", "Secret")}
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        for container in spec["containers"]:
            env: dict[str, str | None] = {}
            for ref in container.get("envFrom", []):
                kind, refname = ("ConfigMap", ref["configMapRef"]["name"]) if "configMapRef" in ref \
                    else ("Secret", ref["secretRef"]["name"])
                source = sources[(kind, refname)]
                secret = kind == "Secret"
                for var, value in {**source.get("data", {}), **source.get("stringData", {})}.items():
                    env[var] = None if secret else str(value)
            for item in container.get("env", []):
                env[item["name"]] = str(item["value"]) if "value" in item else None
            where = f"deploy/kubernetes Deployment {doc['metadata']['name']}, container {container['name']}"
            yield doc["metadata"]["name"], Use(where, [*container.get("command", []), *container.get("args", [])],
                                               env), spec


# -- the tests ----------------------------------------------------------------------------


def test_compose_runs_each_process_with_options_the_cli_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    uses = {name: (use, service) for name, use, service in compose_uses()}
    assert sorted(uses) == ["cleaner", "dashboard", "recruiter", "recruiter-standby", "worker"]
    found = []
    parsed = {}
    for name, (use, _) in uses.items():
        refused, parsed[name] = problems(use, monkeypatch)
        found += refused
    assert found == []
    assert uses["recruiter"][0].argv == uses["recruiter-standby"][0].argv  # a standby is the same command
    worker = uses["worker"][1]
    assert worker["deploy"]["replicas"] > 1
    assert duration(worker["stop_grace_period"]) > parsed["worker"]["grace_period"]
    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    mongodb = services["mongodb"]
    assert "--replSet" in mongodb["command"]
    assert "rs.initiate" in " ".join(mongodb["healthcheck"]["test"])
    for use, _ in uses.values():
        assert parse_target(use.env["RECRUITER_MONGODB_URI"]).database == "recruiter"
        assert "replicaSet=rs0" in str(use.env["RECRUITER_MONGODB_URI"])
    dashboard = parsed["dashboard"]
    assert dashboard["host"] == "0.0.0.0"
    assert "RECRUITER_DASHBOARD_TOKEN" in uses["dashboard"][0].env
    assert all(port.startswith("127.0.0.1:") for port in uses["dashboard"][1]["ports"])


def test_the_kubernetes_manifests_name_options_the_cli_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    uses = {name: (use, spec) for name, use, spec in kubernetes_uses()}
    assert sorted(uses) == ["cleaner", "recruiter", "recruiter-dashboard", "workers"]
    found = []
    parsed = {}
    for name, (use, _) in uses.items():
        refused, parsed[name] = problems(use, monkeypatch)
        found += refused
    assert found == []
    replicas = {doc["metadata"]["name"]: doc["spec"]["replicas"] for doc in kubernetes_documents()
                if doc["kind"] == "Deployment"}
    assert (replicas["recruiter"], replicas["cleaner"]) == (2, 2)  # one leads, one stands by
    grace = timedelta(seconds=uses["workers"][1]["terminationGracePeriodSeconds"])
    assert grace > parsed["workers"]["grace_period"]
    for use, _ in uses.values():
        assert "RECRUITER_MONGODB_URI" in use.env
    kinds = {doc["kind"] for doc in kubernetes_documents()}
    assert {"ScaledObject", "Service", "Secret", "ConfigMap"} <= kinds
    scaled = next(doc for doc in kubernetes_documents() if doc["kind"] == "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] in replicas
    kustomized = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    assert all((KUBERNETES / path).is_file() for path in kustomized)


def test_the_ci_workflow_runs_the_suite_on_mongodb_7_and_8_replica_sets() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["suite"]
    assert job["strategy"]["matrix"]["mongodb"] == ["7.0", "8.0"]
    steps = job["steps"]
    script = "\n".join(step.get("run", "") for step in steps)
    assert "--replSet rs0" in script
    assert "rs.initiate" in script
    (suite,) = [step for step in steps if "bin/test" in step.get("run", "")]
    for var, _value in suite["env"].items():
        if var.startswith("RECRUITER_"):
            assert var in NOT_OPTIONS, f"{var} is set for bin/test, and nothing reads it"
            assert var in NOT_OPTIONS[var].read_text(), f"{NOT_OPTIONS[var]} no longer reads {var}"
    uri = suite["env"]["RECRUITER_TEST_MONGODB_URI"]
    parse_target(uri)
    assert "replicaSet=rs0" in uri


def test_a_wrong_option_or_variable_in_a_file_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: what the CLI would refuse is reported, with where it is."""
    cases = [Use("a", ["recruiter", "worker", "start", "--grace", "30s"]),
             Use("b", ["recruiter", "worker", "start", "--concurrency", "0"]),
             Use("c", ["recruiter", "workers", "start"]),
             Use("d", ["worker", "start"], {"RECRUITER_DASHBOARD_TOKEN": None}),
             Use("e", ["recruiter", "start"], {"RECRUITER_LOG_FORMAT": "yaml"})]
    reports = [problems(use, monkeypatch)[0] for use in cases]
    assert all(len(found) == 1 and found[0].startswith(f"{use.where}: ") for found, use in zip(reports, cases,
                                                                                               strict=True)), reports
    assert "--grace" in reports[0][0]
    assert "RECRUITER_DASHBOARD_TOKEN" in reports[3][0]
    assert problems(Use("f", ["recruiter", "cleaner", "start", "--interval", "5s"],
                        {"RECRUITER_CLEANER_INTERVAL": "3s"}), monkeypatch)[0] == []


def duration(text: str) -> timedelta:
    """A compose duration (``40s``, ``1m30s``)."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([hms])", text)
    assert "".join(n + u for n, u in parts) == text, text
    return timedelta(seconds=sum(int(n) * units[u] for n, u in parts))
