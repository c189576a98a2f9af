"""``wbx toolkit search`` snippets are cut on word boundaries and keep the match."""

from __future__ import annotations

import json



TEXT = ("The quick brown fox jumps over the lazy dog while the zebrafish swims in circles "
        "around the pond every single morning of the year.")


def test_search_cli_snippet_has_no_partial_words(make_toolkit, wbx) -> None:
    long = " ".join(f"word{i:02d}" for i in range(40))
    make_toolkit("alpha",
                 skills={"overview": "#+TITLE: o\n", "deep": f"#+TITLE: Deep\n{long} zebra {long}\n"})
    hits = json.loads(wbx("toolkit", "search", "zebra", "--json").stdout)
    snip = hits[0]["snippet"]
    assert "zebra" in snip and snip.startswith("…") and snip.endswith("…")
    assert all(w == "zebra" or (len(w) == 6 and w.startswith("word")) for w in snip.strip("…").split()), snip
