"""Test data for the apps: a real PDF written by hand, scripted models that answer with a citation."""

from __future__ import annotations

import json
import textwrap

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.types import Message, SamplingParams

from ..protocols.helpers import job_reply

FACT = "Revenue in fiscal 2023 was $4.2 billion, up 12 percent."
QUOTE = FACT  # the sentence an evidence-first job quotes whole
ANSWER = "Revenue in fiscal 2023 was $4.2 billion."
FILLER = (
    "The company designs, manufactures and sells industrial equipment to customers in many countries. "
    "Operations are organized in three segments with separate management teams. "
)


def report_pages() -> list[str]:
    """Three pages of an annual report; the revenue fact is on page 2."""
    return [
        "Annual report 2023\n\n" + FILLER * 3,
        "Results of operations\n\n" + FILLER + FACT + " " + FILLER,
        "Outlook\n\n" + FILLER * 2,
    ]


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one Helvetica text stream per page (what pypdf extracts is the text, line by line)."""

    def escape(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    n = len(pages)
    font_id = 3 + 2 * n
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>".encode(),
    ]
    for i, text in enumerate(pages):
        lines = [w for para in text.split("\n") for w in (textwrap.wrap(para, 85) or [""])]
        ops = "BT /F1 11 Tf 14 TL 60 740 Td " + " ".join(f"({escape(line)}) Tj T*" for line in lines) + " ET"
        stream = ops.encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 "
            f"{font_id} 0 R >> >> /Contents {4 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def local_reply(messages: list[Message], params: SamplingParams) -> str:
    """A local model that quotes the revenue fact when its chunk has it."""
    return job_reply(messages, params)


def remote_reply(messages: list[Message], params: SamplingParams) -> str:
    """A remote model for every protocol: plans one job, then answers from the findings (or the context)."""
    prompt = messages[0].content + "\n" + messages[-1].content
    if "Plan jobs" in prompt:
        return json.dumps(
            {"jobs": [{"instruction": "Find the revenue for fiscal 2023."}], "chunk_size": 600, "samples": 1}
        )
    if "This is round" in prompt:
        return json.dumps({"decision": "final", "answer": ANSWER, "evidence": []})
    if '"decision": "ask"' in prompt:
        return json.dumps({"decision": "final", "answer": ANSWER})
    return json.dumps({"answer": ANSWER, "citations": [QUOTE]})


def scripted_models() -> tuple[ScriptedBackend, ScriptedBackend]:
    """(local, remote): the remote one is priced as gpt-4o-mini and does not run on this device."""
    local = ScriptedBackend("scripted/local", responder=local_reply)
    remote = ScriptedBackend(
        "scripted/gpt-4o-mini",
        responder=remote_reply,
        capabilities=Capabilities(json_schema=True, local=False, context_window=128_000),
    )
    return local, remote
