"""A tiny causal LM built locally: a Qwen2-style config, seeded random weights, a home-made tokenizer.

Tests, the demo and the closed loop need a real HF model directory (``AutoTokenizer`` /
``AutoModelForCausalLM`` load it, the trainer updates it, the policy server serves it) but must never
touch the hub. So the tokenizer is a byte-level BPE trained here on a small embedded corpus (code,
English and the Hermes/Qwen tool-call markup), and the chat template is the Qwen2.5 one with tools.
The build is deterministic and cached: one directory per ``TINY_MODEL_VERSION``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from contract.tools import openai_tools

TINY_MODEL_VERSION = "tiny-qwen2-v2"
#: The name that stands for the tiny model wherever a model or tokenizer is named.
TINY = "tiny"
SEED = 1234
VOCAB_SIZE = 4096

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
TOOL_MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

# The Qwen2.5 chat template (tools in the system prompt, <tool_call> JSON in assistant turns, tool
# answers as <tool_response> blocks inside a user turn), trimmed of the multi-system-prompt cases.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, '
    '\\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_CORPUS = r'''
You are a coding agent working in a repository under /workspace. Read the task, run the tests,
find the bug, fix it with a small change, run the tests again and submit when they pass.
The function returns the wrong value when the list is empty. The parser fails on quoted strings.
Add a command line flag that prints the version. Make the cache evict the least recently used entry.
Do not edit the tests. The hidden tests check the behaviour described in the instructions.
I will look at the project layout first, then read the failing test and the module it imports.
The test fails because the loop stops one element early; the range should include the last index.
All tests pass now. I am submitting the fix. Summary of the work so far: I read the code, found the
off-by-one error in utils.py, fixed it and the visible tests pass.

import os
import sys
import json
from pathlib import Path
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float = 0.0
    tags: list[str] = field(default_factory=list)


def total(items: list[Item]) -> float:
    """Sum the prices of all items."""
    result = 0.0
    for item in items:
        result += item.price
    return result


class LRUCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.data: dict[str, object] = {}

    def get(self, key: str) -> object | None:
        if key not in self.data:
            return None
        value = self.data.pop(key)
        self.data[key] = value
        return value

    def put(self, key: str, value: object) -> None:
        if key in self.data:
            self.data.pop(key)
        elif len(self.data) >= self.capacity:
            oldest = next(iter(self.data))
            del self.data[oldest]
        self.data[key] = value


def test_total_empty():
    assert total([]) == 0.0


def test_lru_evicts_oldest():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert cache.get("a") is None
    assert cache.get("c") == 3


if __name__ == "__main__":
    sys.exit(main())

$ ls -la /workspace
$ cat src/app/utils.py
$ python -m pytest -q tests/
$ git status && git diff
$ grep -rn "def parse" src/
============================= test session starts ==============================
collected 12 items
tests/test_utils.py ....F.......                                         [100%]
FAILED tests/test_utils.py::test_parse_quoted - AssertionError: assert 'a b' == 'a'
1 failed, 11 passed in 0.12s
Traceback (most recent call last):
  File "/workspace/src/app/cli.py", line 42, in main
    raise ValueError(f"unknown option: {name}")
ValueError: unknown option: --verbose

<tool_call>
{"name": "bash", "arguments": {"command": "python -m pytest -q tests/"}}
</tool_call>
<tool_call>
{"name": "read_file", "arguments": {"path": "src/app/utils.py"}}
</tool_call>
<tool_call>
{"name": "write_file", "arguments": {"path": "app/utils.py", "content": "def add(a, b):\n    return a + b"}}
</tool_call>
<tool_call>
{"name": "edit_file", "arguments": {"path": "src/app/parser.py", "old": "range(n - 1)", "new": "range(n)"}}
</tool_call>
<tool_call>
{"name": "list_dir", "arguments": {"path": "."}}
</tool_call>
<tool_call>
{"name": "submit", "arguments": {}}
</tool_call>
<tool_response>
{"output": "3 passed in 0.05s\n", "exit_code": 0, "truncated": false}
</tool_response>
<tool_response>
{"output": "No such file or directory", "exit_code": 1, "truncated": false}
</tool_response>
'''


_VERBS = [
    "get",
    "set",
    "add",
    "remove",
    "parse",
    "load",
    "save",
    "read",
    "write",
    "open",
    "close",
    "check",
    "run",
    "build",
    "make",
    "find",
    "update",
    "delete",
    "create",
    "list",
    "count",
    "sort",
    "split",
    "join",
    "format",
    "print",
    "compute",
    "fetch",
    "send",
    "handle",
    "apply",
    "merge",
    "reset",
]
_NOUNS = [
    "item",
    "items",
    "user",
    "users",
    "value",
    "values",
    "key",
    "keys",
    "file",
    "files",
    "path",
    "name",
    "line",
    "lines",
    "token",
    "tokens",
    "config",
    "cache",
    "result",
    "results",
    "data",
    "text",
    "error",
    "errors",
    "test",
    "tests",
    "node",
    "tree",
    "list",
    "table",
    "record",
    "row",
    "column",
]


def _generated_corpus() -> str:
    """Identifier-like words and numbers, so BPE has enough distinct words to reach its vocabulary."""
    words = []
    for verb in _VERBS:
        for noun in _NOUNS:
            words.append(f"{verb}_{noun}({noun}) {verb.capitalize()}{noun.capitalize()} {verb}s the {noun}.")
    words.extend(str(n) for n in range(0, 2000, 7))
    return "\n".join(words)


def _tools_corpus() -> str:
    """The system prompt's tools header: every prompt starts with it, so the tokenizer merges it into
    few tokens, which shortens every sequence the trainer sees."""
    schemas = "\n".join(json.dumps(tool) for tool in openai_tools())
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{schemas}\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n"
        "You are a software engineering agent. You work in a repository at /workspace through the tools "
        "below. Make the change the task asks for, check it with the tests, then call submit.\n"
    )


def _tools_hash() -> str:
    return hashlib.sha256(json.dumps(openai_tools(), sort_keys=True).encode()).hexdigest()[:8]


def default_tiny_model_dir(state_dir: Path) -> Path:
    """Where the tiny model is cached: ``<state_dir>/models/<version>-<tools hash>``.

    The tokenizer is trained on the tool schemas the gateway serves, so a change of tools builds a new
    model instead of reusing one whose tokenizer was made for other schemas.
    """
    return Path(state_dir) / "models" / f"{TINY_MODEL_VERSION}-{_tools_hash()}"


def resolve_model_name(model: str | Path, state_dir: Path) -> Path:
    """``tiny`` -> the locally built tiny model under ``state_dir`` (built on first use); anything
    else is a HF directory."""
    return ensure_tiny_model(default_tiny_model_dir(state_dir)) if str(model) == TINY else Path(model)


def ensure_tiny_model(path: Path) -> Path:
    """Build the tiny model directory once (atomically) and return it; later calls reuse it.

    Safe under concurrent callers: each builds in a private temporary directory and renames it into
    place; the loser of the race discards its copy.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target = Path(path)
    if (target / "tiny_model.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "tiny_model.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    """Train the byte-level BPE on the embedded corpus and wrap it with the chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    special = [END_OF_TEXT, IM_START, IM_END]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator([_CORPUS, _tools_corpus(), _generated_corpus()] * 2, trainer=trainer)
    # Tool markup: single tokens (as in Qwen) but not "special", so decoding keeps them in the text.
    raw.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_MARKUP])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _build(directory: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=True)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    (directory / "tiny_model.json").write_text(
        json.dumps({"version": TINY_MODEL_VERSION, "seed": SEED, "vocab_size": len(tokenizer)}) + "\n"
    )
