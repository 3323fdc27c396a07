"""The examples' tests use the suite's server: a database of their own per test (tests/conftest.py)."""

from tests.conftest import db, db_uri, server_uri

__all__ = ["db", "db_uri", "server_uri"]
