"""A run whose local jobs failed in the backend says so: not complete, a note that counts them, and an error (the
CLI's exit status) when none succeeded. Unusable replies are the model's answers, not failures of the backend."""

from __future__ import annotations

from minions.backends.scripted import ScriptedBackend
from minions.errors import BackendConnectionError, BackendError
from minions.protocols import LocalOnly, Minions

from ..helpers import FACT, final, job_reply, plan


def _flaky(messages, params):
    """Answers the jobs over the chunk with the fact; fails the others, as llama.cpp did on a model whose memory
    it could not roll back."""
    if FACT in messages[-1].content:
        return job_reply(messages, params)
    return BackendConnectionError("llama_decode failed (-1)")


def test_minions_with_some_failed_jobs_goes_on_but_is_incomplete_and_says_so(remote, doc):
    remote.enqueue(plan(), final("Done."))
    result = Minions(ScriptedBackend("scripted/local", responder=_flaky), remote).run("Revenue in 2023?", [doc])

    failed = [j for j in result.jobs if j.failed_in_backend]
    assert failed and len(failed) < len(result.jobs) and result.answer == "Done."
    assert not result.complete and result.error is None
    assert result.notes == (
        f"{len(failed)} of {len(result.jobs)} local jobs failed in scripted/local (BackendConnectionError: "
        "llama_decode failed (-1)); the answer rests on the others.",
    )


def test_local_only_whose_jobs_all_fail_says_the_model_failed_not_that_nothing_answers(doc):
    local = ScriptedBackend("scripted/local", responder=lambda m, p: BackendError("llama_decode failed (-1)"))
    result = LocalOnly(local, read_chunks=3).run("Who founded the company?", [doc])

    assert not result.complete and result.error is not None and result.notes == (result.error,)
    assert result.error.startswith("3 of 3 local jobs failed") and "llama_decode failed (-1)" in result.error
    assert result.answer.startswith("The local model failed on 3 of the 3 passages")


def test_local_only_with_some_failed_jobs_is_incomplete_and_still_answers(doc):
    local = ScriptedBackend("scripted/local", responder=_flaky)
    result = LocalOnly(local, read_chunks=3).run("What was revenue in fiscal 2023?", [doc])

    assert FACT in result.answer and result.error is None and not result.complete
    assert len(result.notes) == 1 and result.notes[0].startswith("2 of 3 local jobs failed")
