"""The generated LongHealth stand-in: the official layout, read by the real loader; each right option is in the
place its ``answer_location`` marks, the wrong ones nowhere in the patient's letters; the same seed, the same file."""

from __future__ import annotations

import json
from collections import Counter

from minions.evals import load_dataset
from minions.evals.synthetic.longhealth import longhealth_standin, main


def test_the_stand_in_loads_as_longhealth_and_its_gold_evidence_holds_the_right_option(tmp_path, capsys) -> None:
    out = tmp_path / "benchmark_v5.json"
    assert main([str(out), "--patients", "6", "--questions", "4", "--seed", "3"]) == 0
    assert "6 patients, 24 questions" in capsys.readouterr().out
    dataset = load_dataset("longhealth", tmp_path)
    assert len(dataset) == 24 and not dataset.skipped
    for item in dataset:
        right = item.options["ABCDE".index(item.gold[0])]
        ((place,),) = item.evidence
        assert right in place.text and len(set(item.options)) == 5
        own = "\n".join(d.text for d in item.documents())
        assert [o for o in item.options if o in own] == [right]
    assert len(Counter(i.gold[0] for i in dataset)) > 1  # the right option's place is drawn


def test_the_same_seed_gives_the_same_stand_in() -> None:
    assert json.dumps(longhealth_standin(3, seed=1)) == json.dumps(longhealth_standin(3, seed=1))
    assert json.dumps(longhealth_standin(3, seed=1)) != json.dumps(longhealth_standin(3, seed=2))
