"""The pure parts of how workers and the recruiter are woken: event filters and pacing."""

from __future__ import annotations

import itertools
import re

from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.store.doorbell import DOORBELL_PACE_CAP_S
from recruiter.store.wakeup import (
    MAX_IDS_PATTERN,
    QUICK_EMPTY_PACE_CAP_S,
    doorbell_pipeline,
    ids_condition,
    job_of,
    quick_empty_pause,
    watch_pipeline,
)


def test_job_of_reads_the_copy_from_updates_and_replaces() -> None:
    job = {"_id": ObjectId(), "lock_token": ObjectId()}
    assert job_of({"operationType": "update", "updateDescription": {"updatedFields": {"job": job}}}) == job
    assert job_of({"operationType": "replace", "fullDocument": {"job": job}}) == job
    assert job_of({"operationType": "delete"}) is None
    assert job_of({"operationType": "update", "updateDescription": {"updatedFields": {"stop_requested": True}}}) is None


def test_watch_pipeline_is_limited_to_the_slots_and_keeps_only_the_job_and_ahead() -> None:
    match, project = watch_pipeline(["a", "b"])
    assert next(iter(match["$match"])) == "documentKey._id", "the ids come first: most events are other processes'"
    assert match["$match"]["documentKey._id"] == ids_condition(["a", "b"])
    watched = {next(k for k in c if k.startswith("updateDescription")) for c in match["$match"]["$or"]
               if c.get("operationType") == "update"}
    assert watched == {"updateDescription.updatedFields.job", "updateDescription.updatedFields.stop_requested",
                       "updateDescription.updatedFields.session"}
    # The assigned_to map and the rest of the entry never travel in an event; ``ahead``
    # (recruiter.domain.lanes) travels with the job.
    assert set(project["$project"]) == {"operationType", "documentKey", "updateDescription.updatedFields.job",
                                        "fullDocument.job", "updateDescription.updatedFields.ahead",
                                        "fullDocument.ahead"}


def test_doorbell_rings_for_enqueues_outcomes_new_workers_and_job_changes() -> None:
    (match, _) = doorbell_pipeline()
    clauses = match["$match"]["$or"]
    assert {"ns.coll": "scheduled", "operationType": "insert"} in clauses
    assert {"ns.coll": "roster", "operationType": "insert"} in clauses
    assert any("updateDescription.updatedFields.outcome" in c for c in clauses)
    # Every change to a job but a lock (crash unlocks, returns, resubmits, retries, edits) rings.
    assert {"ns.coll": "scheduled", "operationType": "update",
            "updateDescription.updatedFields.locked": {"$ne": True}} in clauses
    assert {"ns.coll": "heartbeats", "operationType": {"$in": ["insert", "replace"]}} in clauses


def test_quick_empty_batches_are_paced_up_to_a_cap() -> None:
    pauses = [quick_empty_pause(n) for n in range(0, 12)]
    assert pauses[0] == pauses[1] == 0.0  # a single quick empty batch is asked again at once
    assert all(a <= b for a, b in itertools.pairwise(pauses))
    assert pauses[2] > 0
    assert pauses[-1] == QUICK_EMPTY_PACE_CAP_S


def test_the_leaders_doorbell_pauses_less_than_other_streams_after_quick_empty_batches() -> None:
    """A batch's quiet outcomes end the doorbell's getMores empty one after another: the ringing
    last outcome is then read at most DOORBELL_PACE_CAP_S later, not QUICK_EMPTY_PACE_CAP_S."""
    pauses = [quick_empty_pause(n, DOORBELL_PACE_CAP_S) for n in range(0, 12)]
    assert DOORBELL_PACE_CAP_S < QUICK_EMPTY_PACE_CAP_S
    assert pauses[:4] == [quick_empty_pause(n) for n in range(0, 4)]  # the same pace at first
    assert max(pauses) == pauses[-1] == DOORBELL_PACE_CAP_S


def _holds(condition: dict[str, object], value: str) -> bool:
    if "$in" in condition:
        return value in condition["$in"]  # type: ignore[operator]
    return re.search(str(condition["$regex"]), value) is not None


# Ids as workers make them (a worker id, "-<slot>", "~<lane>"), and any text at all: regex
# metacharacters, newlines, other scripts.
_worker_ids = st.builds(lambda base, slots, lanes: [f"{base}-{s}{f'~{k}' if k else ''}"
                                                     for s in range(slots) for k in range(lanes + 1)],
                        st.text(min_size=1, max_size=12), st.integers(1, 30), st.integers(0, 3))
_any_ids = st.lists(st.text(max_size=8), min_size=1, max_size=12)


@given(st.one_of(_worker_ids, _any_ids), st.lists(st.text(max_size=10), max_size=10))
def test_the_ids_condition_holds_for_exactly_the_ids(ids: list[str], others: list[str]) -> None:
    condition = ids_condition(ids)
    near = [i + tail for i in ids for tail in ("\n", "0", "~1", "-1", " ")] + [i[:-1] for i in ids]
    for value in [*ids, *near, *others]:
        assert _holds(condition, value) == (value in ids), (condition, value)


def test_the_ids_condition_is_a_pattern_of_the_common_prefix_and_a_list_when_too_long() -> None:
    condition = ids_condition(["w1-0", "w1-1", "w1-1~1"])
    assert condition == {"$regex": "^w1\\-(?:0|1|1\\~1)(?![\\s\\S])"}
    many = [f"w{'x' * 40}-{n}" for n in range(MAX_IDS_PATTERN)]
    assert ids_condition(many) == {"$in": many}
    # The bound is on bytes: MongoDB counts the pattern's UTF-8 bytes.
    wide = [f"w-{chr(0x4E00 + n) * 3}" for n in range(MAX_IDS_PATTERN // 9)]
    assert ids_condition(wide) == {"$in": wide}
    assert "$regex" in ids_condition(wide[:100])
    assert ids_condition([]) == {"$in": []}
