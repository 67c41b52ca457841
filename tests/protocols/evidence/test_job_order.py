"""The order a batch's jobs go out in, by the local backend's declared ``batching``: a backend that runs jobs one
after another gets the jobs over one chunk next to each other (a server that keeps its last prompt then computes
the chunk once); a batching backend gets them as planned. Either way the records come back as planned."""

from __future__ import annotations

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.protocols import Minions

from ..helpers import final, job_reply, plan

INSTRUCTIONS = ("Find the revenue for fiscal 2023.", "Find the number of segments.")


def excerpt(prompt: str) -> str:
    """The chunk a job's prompt reads (its labelled lines, before the question)."""
    return prompt.split("Question:")[0]


@pytest.mark.parametrize("batching", [False, True])
def test_jobs_over_one_chunk_go_out_together_where_the_backend_runs_them_one_by_one(batching, remote, doc):
    local = ScriptedBackend(
        "scripted/local", responder=job_reply, capabilities=Capabilities(json_schema=True, batching=batching)
    )
    remote.enqueue(plan(*({"instruction": i} for i in INSTRUCTIONS), chunk_size=1000), final())
    result = Minions(local, remote).run("What was revenue in fiscal 2023?", [doc])

    sent = [excerpt(call.messages[-1].content) for call in local.history]
    chunks = list(dict.fromkeys(sent))
    assert len(chunks) > 2 and len(sent) == 2 * len(chunks)  # every chunk read once per instruction
    grouped = [chunk for chunk in chunks for _ in INSTRUCTIONS]
    assert (sent == grouped) is not batching
    assert [j.instruction for j in result.jobs] == [i for i in INSTRUCTIONS for _ in chunks]  # as planned
    assert all(j.ok for j in result.jobs) and result.complete
