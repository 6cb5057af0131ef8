"""``rlguard export`` / ``GET /v1/export``: ended episodes as one row per sub-trajectory, in the
fields RL and SFT trainers read (the mapping to verl's and TRL's names is in docs/gateway.md).

A row holds the sub-trajectory whole (``token_ids``, ``action_mask``, ``logprobs``: one per token)
and split the way agent-RL trainers split a multi-turn sample: ``prompt_ids`` (everything before
the first generated token), ``response_ids`` (the rest: generated turns *and* the tool results
between them), ``response_mask`` = ``loss_mask`` (1 on generated tokens only) and
``response_logprobs`` (the engine's logprobs, 0.0 where the mask is 0). Episode facts ride along:
``reward`` (on every row; ``is_last`` marks the row an outcome reward belongs to), ``end_reason``,
``status``, ``intercepts`` (calls decoyed or flagged), ``decoyed_calls`` (answered with a decoy:
what ``--intercept-penalty`` charges), ``trainable``, the proxy's ``drift`` count, ``policy_version`` and
``version_spans`` (which weights generated each span ``[start, end)``; null for one version), and the
chat ``messages`` (rows the model proxy recorded). The Parquet file's metadata names the model and
tokenizer (``rlguard.export``), a JSON-lines file has them beside it in ``PATH.meta.json``; rows
are written to ``PATH.partial`` and renamed at the end.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from store.repository import Store

EXPORT_FORMAT_VERSION = 3
_TOOL_CALL = pa.struct(
    [("id", pa.string()), ("type", pa.string()),
     ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))]
)  # fmt: skip
_MESSAGE = pa.struct(
    [("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(_TOOL_CALL)),
     ("tool_call_id", pa.string())]
)  # fmt: skip
EXPORT_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("sub_index", pa.int32()),
        ("is_last", pa.bool_()),
        ("task", pa.string()),
        ("status", pa.string()),
        ("end_reason", pa.string()),
        ("trainable", pa.bool_()),
        ("reward", pa.float64()),
        ("intercepts", pa.int32()),
        ("decoyed_calls", pa.int32()),
        ("drift", pa.int32()),
        ("policy_version", pa.string()),
        (
            "version_spans",
            pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()), ("version", pa.string())])),
        ),
        ("token_ids", pa.list_(pa.int32())),
        ("action_mask", pa.list_(pa.uint8())),
        ("logprobs", pa.list_(pa.float32())),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("response_mask", pa.list_(pa.uint8())),
        ("loss_mask", pa.list_(pa.uint8())),
        ("response_logprobs", pa.list_(pa.float32())),
        ("messages", pa.list_(_MESSAGE)),
    ]
)
BATCH_ROWS = 512


@dataclass
class ExportResult:
    """What a run of the export wrote, and the ended episodes it could not (with why)."""

    rows: int = 0
    episodes: int = 0
    models: set[str] = field(default_factory=set)
    tokenizers: set[str] = field(default_factory=set)
    without_rows: list[tuple[str, str]] = field(default_factory=list)

    def why_missing(self) -> Counter[str]:
        """How many ended episodes have no row, by reason."""
        default = "no sub-trajectory was uploaded or recorded"
        return Counter(reason or default for _, reason in self.without_rows)

    def metadata(self) -> dict[str, Any]:
        return {
            "format_version": EXPORT_FORMAT_VERSION,
            "models": sorted(self.models),
            "tokenizers": sorted(self.tokenizers),
        }


def trainer_row(row: dict[str, Any]) -> dict[str, Any]:
    """A store row (``Store.iter_export_rows``) in the export's fields: the prompt/response split."""
    mask = row["action_mask"]
    first = next((i for i, bit in enumerate(mask) if bit), len(mask))
    response_mask = mask[first:]
    out = {k: v for k, v in row.items() if k not in ("model", "tokenizer", "messages")}
    out.update(
        prompt_ids=row["token_ids"][:first],
        response_ids=row["token_ids"][first:],
        response_mask=response_mask,
        loss_mask=response_mask,
        response_logprobs=row["logprobs"][first:],
        messages=_messages(row.get("messages")),
    )
    return out


def _messages(messages: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Messages as OpenAI sends them (tool-call arguments as JSON text), in one fixed shape."""
    if messages is None:
        return None
    out = []
    for message in messages:
        calls = [
            {
                "id": call.get("id") or "",
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False)
                    if not isinstance(call["function"]["arguments"], str)
                    else call["function"]["arguments"],
                },
            }
            for call in message.get("tool_calls") or []
        ]
        out.append(
            {
                "role": message["role"],
                "content": message.get("content") or "",
                "tool_calls": calls or None,
                "tool_call_id": message.get("tool_call_id"),
            }
        )
    return out


def _rows(store: Store, statuses: tuple[str, ...], result: ExportResult) -> Iterator[dict[str, Any]]:
    episodes: set[str] = set()
    for row in store.iter_export_rows(statuses):
        episodes.add(row["episode_id"])
        if row.get("model"):
            result.models.add(str(row["model"]))
        if row.get("tokenizer"):
            result.tokenizers.add(str(row["tokenizer"]))
        result.rows += 1
        yield trainer_row(row)
    result.episodes = len(episodes)


def _batches(rows: Iterable[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


def iter_rows(store: Store, statuses: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """The export's rows, one by one (the streaming JSON-lines answer of ``GET /v1/export``)."""
    return _rows(store, statuses, ExportResult())


def export(
    store: Store,
    out: Path,
    fmt: Literal["jsonl", "parquet"],
    statuses: tuple[str, ...],
    *,
    model: str | None = None,
    tokenizer: str | None = None,
) -> ExportResult:
    """Write the rows to ``out`` (via ``out.partial``, renamed at the end). ``model`` / ``tokenizer``
    name what made rows the proxy did not record (rlguard's runner knows its model; the store not)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    result = ExportResult()
    rows = _rows(store, statuses, result)
    if fmt == "jsonl":
        with tmp.open("w") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
        result.models.update([model] if model else [])
        result.tokenizers.update([tokenizer] if tokenizer else [])
        meta = out.with_name(out.name + ".meta.json")  # JSON lines have no file metadata of their own
        meta.write_text(json.dumps({"rlguard.export": result.metadata()}, indent=2) + "\n")
    else:
        with pq.ParquetWriter(tmp, EXPORT_SCHEMA) as writer:
            for batch in _batches(rows):
                writer.write_table(pa.Table.from_pylist(batch, schema=EXPORT_SCHEMA))
            if result.rows == 0:
                writer.write_table(EXPORT_SCHEMA.empty_table())
            result.models.update([model] if model else [])
            result.tokenizers.update([tokenizer] if tokenizer else [])
            # the footer is written at close: the models seen in the rows can still be named there
            writer.add_key_value_metadata({"rlguard.export": json.dumps(result.metadata())})
    result.without_rows = store.ended_without_rows(statuses)
    tmp.replace(out)
    return result
