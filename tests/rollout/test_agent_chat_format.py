"""Appending token pieces reproduces the chat template; ``<tool_call>`` parsing and its errors."""

from pathlib import Path

from transformers import AutoTokenizer

from rollout.chat_format import ChatFormat, ParsedCall, ParseError, parse_tool_calls, tool_call_text

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def test_appended_pieces_equal_the_template_rendering(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    fmt = ChatFormat(tokenizer)
    call = tool_call_text("bash", {"command": "ls -la"})
    generated = fmt.encode(f"Let me look.\n{call}<|im_end|>")
    ids = fmt.prompt_ids("You fix bugs.", "Fix utils.py", TOOLS) + fmt.generation_prompt_ids + generated
    ids += fmt.close_turn_ids(generated) + fmt.tool_responses_ids(["a.py\nb.py"]) + fmt.generation_prompt_ids
    messages = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix utils.py"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls -la"}}}
            ],
        },
        {"role": "tool", "content": "a.py\nb.py"},
    ]
    expected = tokenizer.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert fmt.decode(ids) == expected


def test_close_turn_adds_im_end_only_when_missing(tiny_model_dir: Path) -> None:
    fmt = ChatFormat(AutoTokenizer.from_pretrained(tiny_model_dir))
    with_end = fmt.encode("done<|im_end|>")
    assert fmt.decode(fmt.close_turn_ids(with_end)) == "\n"
    assert fmt.decode(fmt.close_turn_ids(fmt.encode("cut off mid"))) == "<|im_end|>\n"
    assert fmt.assistant_text(with_end) == "done"


def test_parse_well_formed_and_several_calls() -> None:
    text = (
        "I will run the tests.\n"
        + tool_call_text("bash", {"command": "pytest -q"})
        + "\n"
        + '<tool_call>\n{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}\n</tool_call>'
    )
    assert parse_tool_calls(text) == [
        ParsedCall("bash", {"command": "pytest -q"}),
        ParsedCall("read_file", {"path": "a.py"}),
    ]
    assert parse_tool_calls("no call here") == []


def test_malformed_calls_become_messages_for_the_model() -> None:
    results = parse_tool_calls('<tool_call>{"name": "bash", "arguments": {"command": }</tool_call>')
    assert len(results) == 1 and isinstance(results[0], ParseError) and "not valid JSON" in results[0].message
    assert isinstance(parse_tool_calls('<tool_call>["bash"]</tool_call>')[0], ParseError)
    assert isinstance(
        parse_tool_calls('<tool_call>{"name": "bash", "arguments": 3}</tool_call>')[0], ParseError
    )
    unclosed = parse_tool_calls('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"')
    assert len(unclosed) == 1 and "not closed" in unclosed[0].message
