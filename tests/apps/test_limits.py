"""The body checks on their own: nesting depth on the bytes, and JSON text made valid."""

from __future__ import annotations

import json

from minions.apps.limits import json_too_deep, valid_json


def test_depth_is_counted_on_brackets_outside_strings():
    assert not json_too_deep(b'{"a": [1, {"b": [2]}]}', 4)
    assert json_too_deep(b'{"a": [1, {"b": [2]}]}', 3)
    assert not json_too_deep(json.dumps({"text": "[" * 1000 + '\\"{'}).encode(), 1)
    assert json_too_deep(b"[" * 50 + b"]" * 50, 49) and not json_too_deep(b"[" * 50 + b"]" * 50, 50)
    wide = b"[" + b",".join([b"[[]]"] * 10_000) + b"]"
    assert not json_too_deep(wide, 3) and json_too_deep(wide, 2)
    assert not json_too_deep(b"[[[", 3)  # unbalanced, no deeper than the limit: the parser says what is wrong


def test_strings_and_keys_are_made_valid_and_counted():
    value = json.loads('{"\\udfff": ["a\\ud800b", 1, null, {"k": "\\u0000"}], "ok": "\\ud83d\\ude00"}')
    fixed, replaced = valid_json(value)
    assert fixed == {"\ufffd": ["a\ufffdb", 1, None, {"k": "\ufffd"}], "ok": "\U0001f600"}
    assert replaced == 3
