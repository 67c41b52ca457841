"""The ``minions`` command line, a module per command group:

- ``main``: the parser, ``ask``, and how errors print (one line, exit status 2);
- ``models``: ``minions models`` and ``models pull``, and the ``--local``/``--remote`` options;
- ``index``: ``minions index`` and ``minions cache`` (a library's documents, and what it takes on disk);
- ``serve``: ``minions app`` and ``minions serve``;
- ``evals``: ``minions eval run|report|datasets``;
- ``bench``: ``minions bench ...``, each benchmark of ``evals.bench``;
- ``render``: what the terminal shows (the answer, its citations, the usage table, live progress).

It is the top of the import graph: it imports backends, protocols and evals lazily, inside the commands.
"""
