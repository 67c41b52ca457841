"""Benchmarks: a module for each ``minions bench`` command, each printing one JSON line per setting, its speeds
as ratios against a baseline run in the same process.

- ``evidence``: does the local side find the evidence (page and passage recall, one filing or a whole library);
- ``cache``: the same questions asked twice, cold then warm, with saved chunk states;
- ``cost``: the remote input tokens Minions spends against sending the whole filing;
- ``engine``: jobs one at a time against the batching engine;
- ``speculative``: plain against speculative decoding in the llama.cpp engine; ``deep``: its ~1B-cost target;
- ``tree``: plain, chain and tree speculation in the PyTorch backend;
- ``fleet``: the same local jobs on one server and on a fleet;
- ``pdf``: pages a second ``load_document`` reads a second, against pypdf;
- ``embed``: the library's meaning vectors by each way this machine runs the embedding model;
- ``vectors``: a question's nearest chunks, every vector scored against the HNSW graph, by library size;
- ``library_scale``: a library of the FinanceBench filings grown to 3x and 10x: build, disk, memory, search, recall;
- ``options``: a config field that is a ``minions bench`` option (``option``): the CLI derives the option from it.

``written/``: question sets written once and frozen, that ``evidence --questions FILE`` asks (its README says how
they were made and which are held out).
"""
