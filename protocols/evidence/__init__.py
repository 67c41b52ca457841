"""Evidence: how the local model reads documents it cannot read whole, and answers from what it read.

- ``reading``: the local reading, one pipeline read top to bottom (``read_and_answer``): rank the chunks, keep the
  best within the reading budget, then the steps below, each returning to it: jobs, cite, quotes, answer;
- ``jobs``: local jobs, one instruction over one chunk, many at once through the backend's ``batch``; a chunk past
  the budget quoted by words;
- ``quotes``: evidence-first jobs: the local model picks a sentence of its chunk, it does not write one; the quotes
  ordered for the answer, and the answer that quotes the best;
- ``citations``: from job records to what is passed on (each citation checked against its chunk, the evidence shown)
  and to the digest the remote model reads;
- ``choosing``: a closed question (yes/no, options) answered with the choice the local model makes on its quotes;
- ``written``: a written answer from a capable local model, kept only where its quotes say what it says.
"""
