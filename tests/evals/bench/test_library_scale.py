"""``minions bench library-scale`` on a tiny FinanceBench-shaped checkout (two filings made here) and a folder of
filler text: each size's line, sizes that grow, and the synthetic vectors beside the model's."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from minions.backends.embeddings import normalized
from minions.evals.bench.library_scale import LibraryScaleConfig, build_library, filler_volumes, library_scale_bench
from minions.protocols.library import Library
from minions.protocols.search.meaning import VectorCache

from ...minions.doc_helpers import make_pdf

PAGES = {
    "ACME_2022_10K": [
        "ACME Corporation\nAnnual Report on Form 10-K\nFiscal year ended December 31, 2022",
        "Capital expenditures were $1,577 million in 2022.\nPurchases of property, plant and equipment.\n" * 12,
        "Risk factors: competition, supply chain disruption and interest rates.\n" * 14,
    ],
    "BOLT_2021_10K": [
        "Bolt Industries Inc.\nAnnual Report on Form 10-K\nFiscal year ended June 30, 2021",
        "Net revenue grew to $820 million in fiscal 2021 on higher volumes.\n" * 14,
        "The company had 4,200 employees at the end of the fiscal year.\n" * 14,
    ],
}
QUESTIONS = [
    ("q1", "ACME_2022_10K", "What were ACME's capital expenditures in 2022?", 1),
    ("q2", "BOLT_2021_10K", "What was Bolt's net revenue in fiscal 2021?", 1),
]


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))  # the PDFs' text cache: not the user's
    root = tmp_path / "financebench"
    (root / "data").mkdir(parents=True)
    (root / "pdfs").mkdir()
    for name, pages in PAGES.items():
        (root / "pdfs" / f"{name}.pdf").write_bytes(make_pdf(pages))
    rows = [
        {"financebench_id": i, "doc_name": doc, "question": q, "answer": "x",
         "evidence": [{"evidence_text": "", "doc_name": doc, "evidence_page_num": page}]}
        for i, doc, q, page in QUESTIONS
    ]  # fmt: skip
    (root / "data" / "financebench_open_source.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root


@pytest.fixture
def filler(tmp_path: Path) -> Path:
    folder = tmp_path / "filler"
    (folder / "pkg").mkdir(parents=True)
    for n in range(8):
        text = "".join(f"The tool {n} copies file {i} into the archive and prints its name.\n" for i in range(40))
        (folder / "pkg" / f"notes-{n}.txt").write_text(text)
    (folder / "pkg" / "changelog.gz").write_bytes(gzip.compress(b"Version 2.1: the parser reads tabs.\n" * 50))
    (folder / "pkg" / "library.so").write_bytes(b"\x7fELF\0\0\0" + bytes(range(256)) * 20)  # binary: left out
    (folder / ".hidden").write_text("never read")
    return folder


def test_each_size_holds_the_filings_and_filler_and_prints_its_build_disk_memory_search_and_recall(
    checkout: Path, filler: Path, tmp_path: Path
) -> None:
    config = LibraryScaleConfig(scales=(2, 1), filler=(str(filler),), vectors="none", volume_chars=3000,
                                work=str(tmp_path / "work"))  # fmt: skip
    head, *sizes = library_scale_bench(checkout, config)
    assert {"cpu", "cpu_count", "load"} <= head.keys() and head["vectors"] == "none" and head["questions"] == 2
    one, two = sizes
    assert [one["scale"], two["scale"]] == [1, 2] and one["filing_chunks"] == two["filing_chunks"] > 0
    assert one["filler_chunks"] == 0 and one["chunks"] == one["filing_chunks"] and one["documents"] == 2
    assert one["languages"] == {"en": 2} and one["routed_first"] in (0, 1, 2)  # two documents: no route needed
    assert two["chunks"] == two["filing_chunks"] + two["filler_chunks"] >= 2 * two["filing_chunks"]
    assert not two["filler_short"] and two["filler_files"] >= 1
    assert two["index_mb"] > one["index_mb"] > 0
    for line in sizes:
        assert line["words_s"] > 0 and line["build_rss_mb"] > 0 and line["search_rss_mb"] > 0
        assert line["search_ms"] > 0 and line["search_ms_again"] > 0 and line["first_search_ms"] > 0
        assert len(line["load"]) == 3
        assert list(line["recall"]) == ["@1", "@5", "@10", "@20"] and "recall_words" not in line
    assert one["recall"]["@20"] == two["recall"]["@20"] == 1.0  # filler about tools and archives wins no page
    assert (tmp_path / "work" / "library-2x" / "library.sqlite").is_file()  # --work keeps them
    assert (tmp_path / "work" / "library-2x" / "cache").is_dir()  # the search process's own, empty at its start


def test_filler_is_the_folders_text_in_name_order_gunzipped_binary_and_hidden_files_left_out(filler: Path) -> None:
    (volume, files), *rest = filler_volumes([filler], chars=10**9)
    assert not rest and files == 9 and volume.name == "filler-00001.txt"
    assert volume.text.index("changelog.gz") < volume.text.index("notes-0.txt") < volume.text.index("notes-7.txt")
    assert "the parser reads tabs" in volume.text and "ELF" not in volume.text and "never read" not in volume.text
    assert [files for _, files in filler_volumes([filler], chars=0)] == [1] * 9  # a document a file
    cut = list(filler_volumes([filler], chars=1000))  # a file of 2,700 characters is cut in three at line ends
    assert sum(files for _, files in cut) == 9 and max(len(d.text) for d, _ in cut) < 2 * (1000 + 100)
    assert all(d.text.endswith((".", "\n")) for d, _ in cut)


class HashedWords:
    """A stand-in model: each word adds one to one of 8 dimensions."""

    name = "test/hashed-words"
    address: str | None = None

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        rows = np.full((len(texts), 8), 1e-3, dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for word in text.lower().split():
                row[sum(map(ord, word)) % 8] += 1
        return normalized(rows)


def test_synthetic_vectors_fill_the_matrix_and_the_filings_are_embedded_once_a_run(
    checkout: Path, filler: Path, tmp_path: Path
) -> None:
    config = LibraryScaleConfig(filler=(str(filler),), vectors="synthetic", volume_chars=3000)
    cache = VectorCache(tmp_path / "vectors.sqlite")
    two = build_library(checkout, tmp_path / "2x", 2, config, HashedWords(), cache)
    assert two["synthetic"] == two["filler_chunks"] > 0 and two["embedded"] == two["filing_chunks"]
    assert two["cached"] == 0 and two["embed_per_s"] > 0
    three = build_library(checkout, tmp_path / "3x", 3, config, HashedWords(), cache)
    assert three["embedded"] == 0 and three["cached"] == three["filing_chunks"]  # read from the run's cache
    assert three["synthetic"] == three["filler_chunks"] > two["filler_chunks"]
    with Library(tmp_path / "3x", embeddings=HashedWords()) as library:
        assert library.index.vector_bytes() == (three["chunks"], three["chunks"] * 8 * 2)  # float16, every chunk
        assert library.index.vector_model() == HashedWords.name
        found = library.search("What were ACME's capital expenditures in 2022?")
        assert found.ranking.about["meaning"] == HashedWords.name


def test_with_sentences_the_search_process_embeds_every_chunks_sentences_before_it_asks(
    checkout: Path, filler: Path, tmp_path: Path
) -> None:
    config = LibraryScaleConfig(scales=(1,), filler=(str(filler),), vectors="real", sentences=True,
                                work=str(tmp_path / "work"))  # fmt: skip
    _, one = library_scale_bench(checkout, config)
    assert one["sentences_kept"] == one["chunks"] > 0 and one["sentences_s"] > 0  # all of them, in the search's cache
    assert one["search_ms"] > 0 and one["recall"]["@20"] == 1.0
