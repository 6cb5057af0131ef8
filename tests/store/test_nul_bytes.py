"""Every call is recorded whatever bytes it carries: NUL (which PostgreSQL's text cannot hold) and
the escape character itself round-trip exactly, on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.models import EpisodeStatus
from store.repository import InterceptFilter, Store
from store.types import NUL_ESCAPE, escape_nul, unescape_nul
from tests.store.test_repository import _episode
from tests.support.store_rows import tool_call

NASTY = f"x\0y {NUL_ESCAPE}0 {NUL_ESCAPE}e {NUL_ESCAPE} \0\0 end"


def test_nul_output_arguments_and_details_are_recorded_exactly(store: Store) -> None:
    _episode(store, "nul")
    row = tool_call("nul", 0, action="decoy", category="test_tampering")
    row.arguments = {"path": "f.bin", "content": NASTY, f"k{NUL_ESCAPE}\0": [NASTY, 1]}
    row.normalized = NASTY
    row.reason = NASTY
    row.answer_output = "printf 'x\\0y' gave: " + NASTY
    store.record_calls([row])
    store.end_episode("nul", EpisodeStatus.FINISHED, reward=0.0, details={"grader": NASTY})

    episode = store.episode("nul", with_children=True)
    assert episode is not None and episode.details["grader"] == NASTY
    (call,) = episode.tool_calls
    assert call.arguments == {"path": "f.bin", "content": NASTY, f"k{NUL_ESCAPE}\0": [NASTY, 1]}
    assert (call.normalized, call.reason) == (NASTY, NASTY)
    assert call.answer_output == "printf 'x\\0y' gave: " + NASTY
    (item,) = store.intercepts(InterceptFilter(episode_id="nul"), limit=10)
    assert item.call.answer_output.endswith(NASTY)


@given(st.text(alphabet=st.sampled_from(["\0", NUL_ESCAPE, "0", "e", "a", "\\"]), max_size=40))
def test_escaping_is_exact_and_leaves_no_nul(text: str) -> None:
    escaped = escape_nul(text)
    assert "\0" not in escaped
    assert unescape_nul(escaped) == text
