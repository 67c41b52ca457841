"""Evidence: how the local model reads documents it cannot read whole, and answers from what it read.

- ``reading``: rank the chunks, read the best within the reading budget, keep the evidence;
- ``jobs``: local jobs, one instruction over one chunk, many at once through the backend's ``batch``;
- ``quotes``: evidence-first jobs: the local model picks a sentence of its chunk, it does not write one;
- ``citations``: from job records to the digest the remote model reads, each citation checked against its chunk;
- ``choosing``: a closed question (yes/no, options) answered with the choice the local model makes on its quotes;
- ``written``: a written answer from a capable local model, kept only where its quotes say what it says.
"""
