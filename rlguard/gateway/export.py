"""``rlguard export``: finished episodes as one row per sub-trajectory (JSONL or Parquet).

The layout (flat rows of token ids, action mask, logprobs and an episode-level reward) is what
verl, slime and OpenRLHF data loaders take after a column rename at most. ``version_spans`` (null
when one policy version made the whole row) says which weights generated each token span
``[start, end)`` of a partial rollout, so an off-policy trainer can correct per token.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from store.repository import Store

EXPORT_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("sub_index", pa.int32()),
        ("task", pa.string()),
        ("policy_version", pa.string()),
        ("token_ids", pa.list_(pa.int32())),
        ("action_mask", pa.list_(pa.uint8())),
        ("logprobs", pa.list_(pa.float32())),
        ("reward", pa.float64()),
        ("intercepts", pa.int32()),
        ("status", pa.string()),
        (
            "version_spans",
            pa.list_(pa.struct([("start", pa.int32()), ("end", pa.int32()), ("version", pa.string())])),
        ),
    ]
)
BATCH_ROWS = 512


def _batches(rows: Iterable[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


def export(store: Store, out: Path, fmt: Literal["jsonl", "parquet"], statuses: tuple[str, ...]) -> int:
    """Write the rows to ``out`` (via a temporary file, renamed at the end); return the row count."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    count = 0
    rows = store.iter_export_rows(statuses)
    if fmt == "jsonl":
        with tmp.open("w") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
                count += 1
    else:
        with pq.ParquetWriter(tmp, EXPORT_SCHEMA) as writer:
            for batch in _batches(rows):
                writer.write_table(pa.Table.from_pylist(batch, schema=EXPORT_SCHEMA))
                count += len(batch)
            if count == 0:
                writer.write_table(EXPORT_SCHEMA.empty_table())
    tmp.replace(out)
    return count
