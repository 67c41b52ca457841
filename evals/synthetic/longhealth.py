"""A generated stand-in for LongHealth (kbressem/LongHealth, not in this checkout's data): fictional patients'
letters and five-option questions in its official layout (``evals.longhealth``), so that the harness runs its
multiple-choice path end to end, and the local protocol's choice is measured against chance and the majority class.

    python -m minions.evals.synthetic.longhealth longhealth-standin.json --patients 10
    minions eval run longhealth --data longhealth-standin.json --protocol local --out lh.jsonl

Each patient has three letters: sentences of routine care around the facts the questions ask for (a drug of a
class, an examination, a dose), one fact a sentence, placed where ``answer_location`` says (fractions of the
letter, as LongHealth marks them). The wrong options are other drugs of the same class, some of them named in
other patients' letters; the right one's place among the five is drawn by the seed. Its figures measure the
harness, not clinical reading: the real benchmark's letters are long and its questions harder.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

__all__ = ["longhealth_standin", "main", "write_longhealth_standin"]

FIRST = ("Anna", "Maria", "Ursula", "Helga", "Petra", "Klaus", "Jürgen", "Thomas", "Stefan", "Michael", "Sabine",
         "Monika", "Peter", "Wolfgang", "Karin", "Andreas")  # fmt: skip
LAST = ("Marten", "Keller", "Brandt", "Vogel", "Hofmann", "Schulz", "Wagner", "Becker", "Richter", "Krüger",
        "Lorenz", "Hartmann", "Franke", "Winter", "Busch", "Albrecht")  # fmt: skip
DIAGNOSES = ("community-acquired pneumonia", "non-small cell lung cancer", "atrial fibrillation",
             "diffuse large B-cell lymphoma", "type 2 diabetes mellitus", "chronic kidney disease stage 3")  # fmt: skip
FACTS: dict[str, tuple[tuple[str, ...], str, str]] = {
    # kind: (the options, the sentence that states one, the question)
    "antibiotic": (
        (
            "Ceftriaxone",
            "Ampicillin/sulbactam",
            "Clarithromycin",
            "Levofloxacin",
            "Piperacillin/tazobactam",
            "Meropenem",
            "Doxycycline",
        ),
        "Antibiotic therapy with {x} was given intravenously for seven days.",
        "Which antibiotic did {p} receive intravenously?",
    ),
    "anticoagulant": (
        ("Apixaban", "Rivaroxaban", "Phenprocoumon", "Enoxaparin", "Dabigatran", "Edoxaban"),
        "For anticoagulation, {x} was started and continued at discharge.",
        "Which anticoagulant was {p} discharged on?",
    ),
    "imaging": (
        (
            "CT of the chest",
            "MRI of the spine",
            "PET-CT",
            "abdominal ultrasound",
            "echocardiography",
            "bone scintigraphy",
        ),
        "To stage the disease, {x} was performed and showed no new lesions.",
        "Which examination was performed to stage the disease of {p}?",
    ),
    "chemotherapy": (
        ("R-CHOP", "Carboplatin/pemetrexed", "FOLFOX", "Cisplatin/etoposide", "Bendamustine/rituximab", "Docetaxel"),
        "Chemotherapy with {x} was started in the first cycle without complications.",
        "Which chemotherapy regimen did {p} start?",
    ),
    "dose": (
        ("2.5 mg", "5 mg", "10 mg", "20 mg", "40 mg", "80 mg"),
        "The dose of the antihypertensive medication was raised to {x} once daily.",
        "To what daily dose was the antihypertensive medication of {p} raised?",
    ),
}
ROUTINE = (
    "The patient was admitted in stable general condition.",
    "Vital signs were within normal limits on admission.",
    "Laboratory tests showed a mild elevation of inflammatory markers.",
    "The patient was mobilised on the second day and tolerated it well.",
    "Nutrition was continued orally without restrictions.",
    "Pain was controlled with oral analgesics as needed.",
    "A follow-up appointment in our outpatient clinic was arranged.",
    "The family was informed about the further course of treatment.",
    "Physiotherapy was continued daily during the stay.",
    "No allergies are known.",
)
OPTIONS = 5
LETTERS = 3


def _letter(rng: random.Random, facts: list[str], name: str, diagnosis: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """A letter holding ``facts`` among routine sentences, and where each fact is in it (start, end)."""
    head = f"Dear colleague,\n\nWe report on {name}, treated for {diagnosis}.\n\n"
    sentences = [*rng.sample(ROUTINE, 5)]
    for fact in facts:
        sentences.insert(rng.randrange(1, len(sentences) + 1), fact)
    text, places = head, {}
    for sentence in sentences:
        if sentence in facts:
            places[sentence] = (len(text), len(text) + len(sentence))
        text += sentence + " "
    return text + "\n\nKind regards,\nthe ward team", places


def _patient(rng: random.Random, number: int, questions: int) -> dict[str, Any]:
    title = rng.choice(("Mrs.", "Mr."))
    last = LAST[number % len(LAST)]
    name = f"{rng.choice(FIRST)} {last}"
    diagnosis = rng.choice(DIAGNOSES)
    kinds = rng.sample(sorted(FACTS), min(questions, len(FACTS)))
    chosen = {kind: rng.choice(FACTS[kind][0]) for kind in kinds}
    by_letter: list[list[str]] = [[] for _ in range(LETTERS)]
    for kind in kinds:
        by_letter[rng.randrange(LETTERS)].append(kind)
    texts, located = {}, {}
    for k, letter_kinds in enumerate(by_letter):
        facts = [FACTS[kind][1].format(x=chosen[kind]) for kind in letter_kinds]
        text, places = _letter(rng, facts, f"{title} {name}", diagnosis)
        texts[f"text_{k}"] = text
        for kind, fact in zip(letter_kinds, facts, strict=True):
            start, end = places[fact]
            located[kind] = {f"text_{k}": {"start": [start / len(text)], "end": [end / len(text)]}}
    items = []
    for n, kind in enumerate(kinds, start=1):
        wrong = rng.sample([o for o in FACTS[kind][0] if o != chosen[kind]], OPTIONS - 1)
        options = [*wrong]
        options.insert(rng.randrange(OPTIONS), chosen[kind])
        question = {"No": n, "question": FACTS[kind][2].format(p=f"{title} {last}")}
        question.update({f"answer_{'abcde'[i]}": o for i, o in enumerate(options)})
        question.update(correct=chosen[kind], answer_location=located[kind])
        items.append(question)
    return {"name": name, "birthday": f"19{rng.randrange(30, 80)}-0{rng.randrange(1, 10)}-1{rng.randrange(10)}",
            "diagnosis": diagnosis, "texts": texts, "questions": items}  # fmt: skip


def longhealth_standin(patients: int = 10, questions: int = 5, seed: int = 0) -> dict[str, Any]:
    """The stand-in's data, in LongHealth's layout: ``patients`` patients with ``questions`` questions each (at
    most one per kind of fact), the same for the same ``seed``."""
    rng = random.Random(f"longhealth-standin:{seed}")
    return {f"patient_{n + 1:02d}": _patient(rng, n, questions) for n in range(patients)}


def write_longhealth_standin(path: str | Path, patients: int = 10, questions: int = 5, seed: int = 0) -> Path:
    out = Path(path)
    out.write_text(json.dumps(longhealth_standin(patients, questions, seed), indent=1, ensure_ascii=False))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a generated stand-in for LongHealth's benchmark_v5.json")
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--patients", type=int, default=10)
    parser.add_argument("--questions", type=int, default=5, help=f"per patient, at most {len(FACTS)}")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = write_longhealth_standin(args.out, args.patients, args.questions, args.seed)
    print(f"wrote {out}: {args.patients} patients, {args.patients * min(args.questions, len(FACTS))} questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
