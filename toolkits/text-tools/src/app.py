"""text-tools: the component's implementation (componentize-py, world text-tools)."""

import re
import unicodedata
from collections import Counter

import wit_world
from wit_world import Counts, WordCount
from componentize_py_types import Err

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


class WitWorld(wit_world.WitWorld):
    def count(self, text: str) -> Counts:
        lines = 0 if not text else text.count("\n") + (0 if text.endswith("\n") else 1)
        return Counts(lines=lines, words=len(text.split()), chars=len(text))

    def top_words(self, text: str, n: int) -> list[WordCount]:
        words = Counter(w.casefold() for w in _WORD.findall(text))
        ranked = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [WordCount(word=w, count=c) for w, c in ranked]

    def slugify(self, text: str) -> str:
        ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
        return "-".join(re.findall(r"[a-z0-9]+", ascii_text.lower()))

    def wrap(self, text: str, width: int) -> str:
        # A `result<string, string>` export returns its ok value and raises Err(...) for err.
        if not 10 <= width <= 400:
            raise Err(f"width {width} is outside 10..400")
        out: list[str] = []
        for para in text.split("\n"):
            line = ""
            for word in para.split():
                while len(word) > width:
                    if line:
                        out.append(line)
                        line = ""
                    out.append(word[:width])
                    word = word[width:]
                if not line:
                    line = word
                elif len(line) + 1 + len(word) <= width:
                    line += " " + word
                else:
                    out.append(line)
                    line = word
            out.append(line)
        return "\n".join(out)
