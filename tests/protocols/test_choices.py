"""The form a question asks its answer in: yes/no read from the question (English and German), options listed in
it, and options a caller gives."""

from __future__ import annotations

import pytest

from minions.protocols import InputError
from minions.protocols.choices import YES_NO, YES_NO_MAYBE, Choices, as_choices, closed_form, is_yes_no

YES_NO_QUESTIONS = [
    "Did revenue grow in 2025?",
    "Did Northwind's revenue grow in 2025 compared with 2024?",
    "Is there an association between sublingual varices and hypertension?",
    "Are the results of the two immunoassay systems comparable?",
    "Does the report mention a dividend?",
    "Has the company paid down its debt?",
    "Was the contrast agent given intravenously?",
    "Can the drug be taken with food?",
    "Should the patient continue the treatment?",
    "Doesn't the filing list any lawsuits?",
    "Is laparoscopic surgery safe in patients aged 80 or older?",
    "Does the treatment work, or not?",
    "Mr. Williams received a CT scan of his spine. Was a contrast agent used?",
    "Revenue, yes or no: did it grow?",
    "Hat der Umsatz 2025 zugenommen?",
    "Ist die Behandlung abgeschlossen?",
    "Gibt es im Bericht Angaben zur Dividende?",
    "Wurde der Patient operiert?",
    "Kann das Medikament mit Nahrung eingenommen werden?",
    "Enthält der Vertrag eine Kündigungsklausel?",
    "Sind die Ergebnisse vergleichbar?",
]
OPEN_QUESTIONS = [
    "What was Northwind's total revenue in 2025, and how did it change from 2024?",
    "Which antibiotic did Mrs. Marten receive?",
    "How many employees does the company have?",
    "Why did margins fall?",
    "Who signed the report?",
    "Did revenue grow or shrink in 2025?",
    "Is the tumour benign or malignant?",
    "Summarise the risks the report names.",
    "Revenue in 2025",
    "Wie hoch war der Umsatz 2025?",
    "Welches Antibiotikum erhielt die Patientin?",
    "Warum sank die Marge?",
    "Wer hat den Bericht unterschrieben?",
    "Ist der Tumor gutartig oder bösartig?",
    "Fassen Sie die Risiken zusammen.",
]


@pytest.mark.parametrize("question", YES_NO_QUESTIONS)
def test_a_yes_no_question_is_recognised(question: str) -> None:
    assert is_yes_no(question)
    assert closed_form(question) == (question, YES_NO)


@pytest.mark.parametrize("question", OPEN_QUESTIONS)
def test_an_open_question_or_one_that_offers_alternatives_is_not_yes_no(question: str) -> None:
    assert not is_yes_no(question)
    assert closed_form(question) is None


def test_options_listed_in_the_question_are_its_answers_and_the_question_is_what_precedes_them() -> None:
    task = Choices(("ChemProt, RCT", "SciERC", "ACL-ARC")).ask("Which datasets are used?")
    assert task.startswith("Which datasets are used?\n\nOptions:\nA. ChemProt, RCT\nB. SciERC\nC. ACL-ARC")
    assert closed_form(task) == ("Which datasets are used?", Choices(("ChemProt, RCT", "SciERC", "ACL-ARC")))
    listed = "Welche Dosis?\n(A) 5 mg\n(B) 10 mg\n(C) 20 mg"
    assert closed_form(listed) == ("Welche Dosis?", Choices(("5 mg", "10 mg", "20 mg")))
    # letters out of order, or one option alone, are not a list of options
    assert closed_form("What?\nA. one\nC. three") is None


def test_options_given_by_a_caller() -> None:
    assert as_choices(["yes", "no", "maybe"]) == YES_NO_MAYBE
    assert as_choices(["Yes", "No"]) == YES_NO
    lettered = as_choices(["5 mg", "10 mg"])
    assert lettered.lettered and lettered.names == ("A", "B") and lettered.answer(1) == "B: 10 mg"
    assert YES_NO_MAYBE.names == ("Yes", "No", "Maybe") and YES_NO_MAYBE.answer(0) == "Yes"
    assert YES_NO_MAYBE.ask("Is it?") == "Is it?\n\nAnswer yes, no or maybe."
    assert lettered.listing([1, 0]) == [("A", "10 mg"), ("B", "5 mg")]  # letters follow the order listed
    with pytest.raises(InputError, match="1 to 10 options"):
        as_choices([])
