"""Search: how a question finds its passages, in memory or in a library's index. It imports neither the protocols
nor ``evidence``.

- ``rank``: a library question's ranking, top to bottom (route, words, meaning, repeats: ``search_library``);
- ``ranking``: its parts, and the ranking of chunks in memory (BM25 with the figure prior, pages spread, repeats
  after the others, fusion with the local model's scores);
- ``words``: how a text of any language becomes the terms words search ranks by;
- ``bm25``: BM25 over passages in memory (a few documents: the one-document ranking's idf);
- ``figures``: figures in text (a number and what says its size), behind the figure prior and the answers' checks;
- ``profiles``: domain knowledge as profiles (the filings profile, a user's glossary), applied only to its documents;
- ``glossary``: the filings profile's glossary of analysts' terms and the lines that hold them;
- ``routing``: which documents a question is about, from each document's profile read off its first page;
- ``index``: the library's SQLite index: documents, chunks, their terms (FTS5 for phrases);
- ``postings``: the index's terms as postings, BM25 for a library at numpy's speed (FTS5's score);
- ``vectors``: the chunks' meaning vectors, in the same index file;
- ``meaning``: chunks found by what they say (an embedding model), fused with words;
- ``sent``: what a library sent to an embedding model on another machine, as records.
"""
