"""The collection prefix (issue 41, "its own names"): what is accepted at the boundary, the names
it gives, and the warning's words. The prefix at work on a server: tests/integration/test_prefixed_queue.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from recruiter.cli.main import main
from recruiter.store import ConnectionProblem, parse_target
from recruiter.store.layout import NAMES
from recruiter.store.names import (
    PREFIX_ENVVAR,
    bare_name,
    foreign_collections,
    foreign_warning,
    in_namespace,
    prefix_problem,
    sync_database,
)


@pytest.mark.parametrize("prefix", ["", "recruiter_", "app.recruiter.", "q-1_", "_jobs_", "2024_", "a" * 63 + "_"])
def test_a_collection_prefix_is_letters_digits_and_separators_ending_with_its_separator(prefix: str) -> None:
    assert prefix_problem(prefix) is None


@pytest.mark.parametrize(("prefix", "why"), [
    ("recruiter", "end with the separator"),
    ("a$b_", "'$'"),
    ("$cmd_", "'$'"),
    ("system.jobs_", "'system.'"),
    ("a" * 64 + "_", "longer than 64"),
    ("app..q_", "empty part"),
    (".q_", "start with"),
    ("-q_", "start with"),
    ("my jobs_", "use letters"),
    ("jobs\x00_", "NUL"),
    ("é_", "use letters"),
])
def test_a_prefix_that_cannot_name_collections_is_refused_in_one_line(prefix: str, why: str) -> None:
    problem = prefix_problem(prefix)
    assert problem is not None
    assert why in problem
    with pytest.raises(ConnectionProblem) as refused:
        parse_target("mongodb://localhost/app", prefix)
    assert str(refused.value).startswith(f"invalid collection prefix {prefix!r}: ")
    assert "\n" not in str(refused.value)


def test_the_prefix_comes_from_the_argument_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PREFIX_ENVVAR, raising=False)
    assert parse_target("mongodb://localhost/app").prefix == ""
    monkeypatch.setenv(PREFIX_ENVVAR, "q_")
    assert parse_target("mongodb://localhost/app").prefix == "q_"
    assert parse_target("mongodb://localhost/app", "other_").prefix == "other_"
    assert parse_target("mongodb://localhost/app", "").prefix == "", "an explicit empty prefix is none"
    monkeypatch.setenv(PREFIX_ENVVAR, "bad")
    with pytest.raises(ConnectionProblem, match="invalid collection prefix 'bad'"):
        parse_target("mongodb://localhost/app")


def test_a_prefixed_database_names_recruiters_collections_only() -> None:
    from pymongo import MongoClient
    client: MongoClient[dict[str, object]] = MongoClient("mongodb://localhost:1/app", connect=False)
    db = sync_database(client, "app", "q_")
    assert {db[name].name for name in NAMES} == {f"q_{name}" for name in NAMES}
    assert db.scheduled.name == "q_scheduled"
    assert db["users"].name == "users", "a name that is not recruiter's is left as is"
    assert db["q_scheduled"].name == "q_scheduled", "a full name (a cursor's namespace) is not prefixed twice"
    inside = db.with_options()
    assert inside["roster"].name == "q_roster"
    assert inside["roster"].database.name == "app"
    assert db["archived"].database["timeline"].name == "q_timeline", "a collection's database keeps the prefix"
    assert sync_database(client, "app")["scheduled"].name == "scheduled"
    assert bare_name(db, "q_roster") == "roster"
    assert bare_name(db, "roster") == ""
    assert bare_name(db, "q_users") == ""
    with pytest.raises(ValueError, match="invalid collection prefix"):
        sync_database(client, "app", "q")


def test_a_change_streams_filters_get_the_prefix() -> None:
    pipeline = [{"$match": {"$or": [{"ns.coll": "scheduled", "operationType": "insert"},
                                    {"ns.coll": "roster", "x": {"$in": ["scheduled"]}}]}},
                {"$project": {"f": {"$cond": [{"$eq": ["$ns.coll", "scheduled"]}, 1, 0]}}}]
    assert in_namespace(pipeline, "") is pipeline
    assert in_namespace(pipeline, "q_") == [
        {"$match": {"$or": [{"ns.coll": "q_scheduled", "operationType": "insert"},
                            {"ns.coll": "q_roster", "x": {"$in": ["scheduled"]}}]}},
        {"$project": {"f": {"$cond": [{"$eq": ["$ns.coll", "q_scheduled"]}, 1, 0]}}}]


def test_the_collections_that_are_not_recruiters_are_named_in_the_warning() -> None:
    ours = sorted(NAMES)
    assert foreign_collections([*ours, "system.views"], "") == []
    assert foreign_collections(["users", *ours, "orders"], "") == ["orders", "users"]
    assert foreign_collections(["q_scheduled", "scheduled", "users"], "q_") == ["scheduled", "users"]
    assert foreign_warning([], "") is None
    line = foreign_warning(["a", "b", "c", "d", "e"], "")
    assert line is not None
    assert "\n" not in line
    assert "5 collection(s)" in line
    assert "a, b, c and 2 more" in line
    assert "no collection prefix" in line
    assert "its own database" in line
    assert "--collection-prefix" in line
    assert PREFIX_ENVVAR in line
    assert "prefix 'q_'" in (foreign_warning(["users"], "q_") or "")


def test_the_cli_refuses_a_bad_prefix_in_one_line_before_connecting() -> None:
    result = CliRunner().invoke(main, ["status", "--target", "mongodb://localhost:1/app",
                                       "--collection-prefix", "jobs"])
    assert result.exit_code == 2
    assert "Invalid value for '--collection-prefix'" in result.output
    assert "'jobs': use letters" in result.output
    assert "Traceback" not in result.output
    env = CliRunner().invoke(main, ["worker", "start", "--target", "mongodb://localhost:1/app"],
                             env={PREFIX_ENVVAR: "a$_"})
    assert env.exit_code == 2
    assert "'$' and NUL cannot be in a collection name" in env.output


def test_the_start_up_listing_needs_no_privilege_and_any_other_listing_does() -> None:
    from recruiter.store.privileges import actions
    names_only = {"listCollections": 1, "nameOnly": True, "authorizedCollections": True}
    assert list(actions("listCollections", names_only)) == []
    assert list(actions("listCollections", {"listCollections": 1, "nameOnly": True})) == [("", "listCollections")]
