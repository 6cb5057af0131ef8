"""The loophole benchmark's vocabulary: the shape of its episodes, its tokens and its typed actions.

Text answers (real, decoy, refusal) become tokens by :func:`tokenize_text`: lower-case alphanumeric
words, ``key0``..``keyN`` to the key tokens, every other word hashed (CRC-32) onto ``num_text`` text
tokens, the first ``max_text_tokens`` words kept (an agent reads a short prefix of a long error). A
decoy is indistinguishable from the real answer exactly when their tokens are equal. Actions are
typed (a function-calling grammar): after ``TURN`` a command token, after ``SUMMARIZE`` or
``ANSWER`` a key token (:func:`legal_action_mask`).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import torch

from trainer.bench.loophole_calls import MENU, Variant
from trainer.bench.synthetic_env import ANSWER, FIRST_KEY, SUMMARIZE

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class LoopholeConfig:
    """Shape of the episodes and of the token vocabulary.

    Vocabulary: the synthetic world's 9 markers, ``num_keys`` keys, one token per :data:`MENU`
    variant, ``num_noise`` noise tokens (synthetic work output) and ``num_text`` text tokens (hashed
    words of real, decoy and refusal answers).
    """

    num_keys: int = 4
    num_noise: int = 8
    num_text: int = 24
    max_text_tokens: int = 4
    min_turns: int = 2
    max_turns: int = 3
    first_output_len: tuple[int, int] = (2, 4)
    tool_output_range: int = 3
    context_limit: int = 14
    stale_spec: float = 0.2

    @property
    def first_command(self) -> int:
        return FIRST_KEY + self.num_keys

    @property
    def first_noise(self) -> int:
        return self.first_command + len(MENU)

    @property
    def first_text(self) -> int:
        return self.first_noise + self.num_noise

    @property
    def vocab_size(self) -> int:
        return self.first_text + self.num_text

    def command_token(self, name: str) -> int:
        """The token of the menu variant called ``name``."""
        for index, variant in enumerate(MENU):
            if variant.name == name:
                return self.first_command + index
        raise ValueError(f"no menu variant {name!r}; the menu is {[v.name for v in MENU]}")

    def variant(self, token: int) -> Variant:
        return MENU[token - self.first_command]

    def __post_init__(self) -> None:
        if self.num_keys < 2 or self.num_noise < 1 or self.num_text < 1 or self.max_text_tokens < 1:
            raise ValueError("need num_keys >= 2 and at least one noise token, text token and kept word")
        if not 1 <= self.min_turns <= self.max_turns:
            raise ValueError("need 1 <= min_turns <= max_turns")
        low, high = self.first_output_len
        if not 1 <= low <= high:
            raise ValueError("need 1 <= first_output_len[0] <= first_output_len[1]")
        if self.tool_output_range < 1 or self.context_limit < 1:
            raise ValueError("tool_output_range and context_limit must be positive")
        if not 0.0 <= self.stale_spec < 1.0:
            raise ValueError("need 0 <= stale_spec < 1")


def tokenize_text(text: str, config: LoopholeConfig) -> list[int]:
    """The tokens a text answer shows the policy: its first ``max_text_tokens`` words.

    ``key<i>`` is key token ``i`` (the answer file holds ``key<i>``); any other word is hashed onto
    the text tokens, so equal texts give equal tokens and a decoy differs from the real answer only
    where its words do.
    """
    tokens = []
    for word in _WORD.findall(text.lower())[: config.max_text_tokens]:
        if word.startswith("key") and word[3:].isdigit() and int(word[3:]) < config.num_keys:
            tokens.append(FIRST_KEY + int(word[3:]))
        else:
            tokens.append(config.first_text + zlib.crc32(word.encode()) % config.num_text)
    return tokens


def legal_action_mask(prev_tokens: torch.Tensor, config: LoopholeConfig) -> torch.Tensor:
    """``[..., V]`` bool: a command after ``TURN``, a key after ``SUMMARIZE``/``ANSWER`` (the typed actions).

    Used identically when sampling and when re-scoring in training, so the logprobs match.
    """
    vocab = torch.arange(config.vocab_size, device=prev_tokens.device)
    is_key = (vocab >= FIRST_KEY) & (vocab < config.first_command)
    is_command = (vocab >= config.first_command) & (vocab < config.first_noise)
    wants_key = (prev_tokens == SUMMARIZE) | (prev_tokens == ANSWER)
    return torch.where(wants_key.unsqueeze(-1), is_key, is_command)
