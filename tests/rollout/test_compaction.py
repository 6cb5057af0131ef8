"""Compaction's pure parts: when it triggers, what the next sub-trajectory holds, when nothing fits."""

from rollout.compaction import (
    SUMMARY_HEADER,
    Turn,
    compacted,
    is_compaction_request,
    needs_compaction,
    request_ids,
)


def test_needs_compaction_counts_the_next_turn() -> None:
    assert not needs_compaction(context_len=3000, turn_reserve=1000, budget=4000)
    assert needs_compaction(context_len=3001, turn_reserve=1000, budget=4000)


def test_new_sub_trajectory_is_prefix_summary_and_recent_turns_as_context(chat_format) -> None:
    prefix = chat_format.prompt_ids("system", "the task", [])
    turns = [Turn(chat_format.encode(f"<|im_start|>assistant\nturn {i}<|im_end|>\n")) for i in range(3)]
    new = compacted(chat_format, prefix, "I fixed a.py", turns[-2:], index=1, policy_version="3",
                    trainable=True, budget=10_000, turn_reserve=100)  # fmt: skip
    assert new is not None and new.index == 1 and new.policy_version == "3"
    assert new.token_ids[: len(prefix)] == prefix
    text = chat_format.decode(new.token_ids)
    assert SUMMARY_HEADER + "I fixed a.py" in text and "turn 1" in text and "turn 2" in text
    assert "turn 0" not in text
    assert set(new.action_mask) == {0} and set(new.logprobs) == {0.0}  # carried over, not re-trained


def test_old_turns_are_dropped_to_fit_and_none_when_nothing_fits(chat_format) -> None:
    prefix = chat_format.prompt_ids("system", "the task", [])
    big = Turn(list(range(5, 505)))
    small = Turn(list(range(5, 25)))
    base_len = len(prefix) + len(chat_format.user_turn_ids(SUMMARY_HEADER + "s"))
    new = compacted(
        chat_format, prefix, "s", [big, small], 1, "0", True, budget=base_len + 120, turn_reserve=50
    )
    assert new is not None and len(new) == base_len + len(small.token_ids)
    assert (
        compacted(chat_format, prefix, "s", [small], 1, "0", True, budget=base_len + 10, turn_reserve=50)
        is None
    )


def test_the_summary_request_is_recognised_at_the_end_of_a_prompt(chat_format) -> None:
    prompt = chat_format.prompt_ids("system", "task", []) + request_ids(chat_format)
    assert is_compaction_request(chat_format, prompt)
    assert not is_compaction_request(chat_format, [*prompt, 5])
