"""The tiny model directory loads with the stock HF auto classes and speaks the Qwen chat format."""

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollout.tinymodel import ensure_tiny_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def test_tiny_model_loads_with_auto_classes_and_runs(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert 2000 <= len(tokenizer) <= 4096
    assert tokenizer.eos_token == "<|im_end|>"
    ids = tokenizer.encode("def add(a, b):\n    return a + b\n", add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), model.config.vocab_size)
    assert model.config.vocab_size >= len(tokenizer)


def test_tool_markup_tokens_are_single_and_survive_decoding(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for marker in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>"):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1, marker
    text = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert "<tool_call>" in tokenizer.decode(ids, skip_special_tokens=True)


def test_chat_template_renders_tools_and_tool_turns(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
    messages = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix utils.py"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call],
        },
        {"role": "tool", "content": "utils.py"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools")
    assert json.dumps(TOOLS[0]) in text
    assert '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\nutils.py\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_build_is_cached_and_deterministic(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = ensure_tiny_model(tiny_model_dir)
    assert again == tiny_model_dir
    other = ensure_tiny_model(tmp_path / "tiny")
    assert (other / "tokenizer.json").read_text() == (tiny_model_dir / "tokenizer.json").read_text()
    assert (other / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
