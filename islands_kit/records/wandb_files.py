"""wandb's offline run files read back (wandb ships no reader for them): every record decoded, and a wait until a
run's file is whole."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def wait_for_offline_run(path: str | Path, timeout_s: float = 30.0) -> bool:
    """Wait until an offline run's file holds its exit record: ``run.finish()`` can return while wandb's service
    process is still writing it, and whoever reads or syncs the run next (a test, ``wandb sync`` in the same script)
    should find it whole. True once complete; False after ``timeout_s`` (the run is then left as it is)."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if any("exit" in r for r in offline_run_records(path)):
                return True
        except (OSError, ValueError, DecodeError):
            pass  # not created, or a record's bytes not all flushed yet
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def offline_run_records(path: str | Path) -> list[dict[str, Any]]:
    """Every record of an offline wandb run, decoded (wandb ships no reader for them): ``path`` is the run's
    ``run-<id>.wandb`` file or its ``offline-run-*`` folder. Each record is a dict (protobuf JSON names) with one
    record-type key such as ``run``, ``history``, ``summary``, ``artifact``, ``metric``, ``exit``.

    The file is wandb's LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks of chunks,
    each a 7-byte header (CRC-32, length, type: full / first / middle / last) and its bytes; a block's tail shorter
    than a chunk header is zero padding. The chunks of one record, joined, are one ``wandb_internal_pb2.Record``. A
    file still being written ends in a chunk shorter than its header says: reading stops there (and a record whose
    last chunk is not written yet is left out), so a live run reads as the records written so far."""
    import struct

    from google.protobuf.json_format import MessageToDict
    from wandb.proto import wandb_internal_pb2

    p = Path(path)
    if p.is_dir():
        found = sorted(p.glob("*.wandb"))
        if not found:
            raise FileNotFoundError(f"offline_run_records: no .wandb file in {p}")
        p = found[0]
    data = p.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"offline_run_records: {p} is not a wandb run file (header {data[:7]!r})")
    block, head = 32768, 7
    pos, buf, out = head, b"", []
    while pos + head <= len(data):
        left = block - pos % block
        if left < head:  # zero padding at the end of a block
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + head])
        if kind == 0 and length == 0:  # the rest of this block was never written
            pos += left
            continue
        if pos + head + length > len(data):  # the writer is mid-record: every record before it is whole
            break
        chunk = data[pos + head:pos + head + length]
        pos += head + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            rec.ParseFromString(buf)
            out.append(MessageToDict(rec))
            buf = b""
    return out
