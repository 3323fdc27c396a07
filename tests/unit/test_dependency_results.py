"""The results a job reads of the jobs it waited for (recruiter.domain.dependency_results), from
``archived`` documents as read: untrusted, and a dropped result says so."""

from __future__ import annotations

import pickle

import pytest
from bson import ObjectId

from recruiter import DependencyResults, JobContext, ResultUnavailable
from recruiter.domain.dependency_results import results_of

A, B, C, D = ObjectId(), ObjectId(), ObjectId(), ObjectId()


def test_results_by_id_and_by_step_and_why_there_is_none() -> None:
    results = results_of([A, B, C, D], {
        A: {"why": "done", "result": {"rows": 3}, "workflow": {"step": "fetch"}},
        B: {"why": "done", "result_dropped": {"reason": "over the size limit", "size_bytes": 9}},
        C: {"why": "cancelled", "result": "kept by hand"},
    })
    assert list(results) == [str(A), str(B), str(C), str(D)]
    assert results["fetch"] is results[str(A)]
    assert results.value("fetch") == {"rows": 3}
    assert results.steps() == {"fetch": results[str(A)]}
    assert results[str(B)].dropped == "over the size limit"
    assert not results[str(B)].ok
    with pytest.raises(ResultUnavailable, match="ended done, but its result was dropped: over the size limit"):
        results.value(str(B))
    assert results[str(C)].result is None  # only a done job's result is one
    with pytest.raises(ResultUnavailable, match="ended cancelled: it has no result"):
        results.value(str(C))
    assert results[str(D)].why == "gone"
    with pytest.raises(KeyError, match="neither the id nor the step name"):
        results["nope"]


def test_a_hostile_archived_document_reads_as_what_is_known() -> None:
    results = results_of([A, B], {A: {"why": 7, "workflow": "x", "result_dropped": "big"},
                                  B: {"why": "done", "result_dropped": {"reason": ""}, "workflow": {"step": 3}}})
    assert results[str(A)].why == "?"
    assert results[str(A)].step is None
    assert results[str(B)].dropped == "no reason recorded"
    assert results[str(B)].step is None


def test_the_context_carries_them_into_a_child_process_and_is_empty_without() -> None:
    ctx = JobContext("j", 1, "w", "g", dependencies=results_of([A], {A: {"why": "done", "result": 5}}))
    assert pickle.loads(pickle.dumps(ctx)).dependency_results().value(str(A)) == 5
    assert JobContext("j", 1, "w", "g").dependency_results() == DependencyResults()
