"""Code-generation problems on text and lists (see ``bench.codegen_problems``)."""

from __future__ import annotations

from bench.codegen_problems import Problem, code


def _family_vowels(k: int) -> Problem:
    vowels = "aeiou" + "y" * (k % 2)
    text = ["Hello World", "AEIOU", "rhythm", "", "Chalk Queue scores agents"]
    count = lambda s: sum(c in vowels for c in s.lower())  # noqa: E731
    return Problem(
        f"count_vowels_{k}",
        f"def count_vowels_{k}(s):\n    return sum(c in {vowels!r} for c in s.lower())\n",
        f"def count_vowels_{k}(s):\n    return sum(c in {vowels!r} for c in s)\n",
        "".join(f"assert candidate({t!r}) == {count(t)}\n" for t in text),
    )


def _family_palindrome(k: int) -> Problem:
    cases = [("A man, a plan, a canal: Panama", True), ("racecar", True), ("Chalk", False)]
    cases += [("No lemon, no melon", True), ("", True), (f"ab{k}ba", True), (f"ab{k}", False)]
    return Problem(
        f"is_palindrome_{k}",
        code(
            f"""
            def is_palindrome_{k}(s):
                kept = [c.lower() for c in s if c.isalnum()]
                return kept == kept[::-1]
            """
        ),
        code(
            f"""
            def is_palindrome_{k}(s):
                kept = [c for c in s if c.isalnum()]
                return kept == kept[::-1]
            """
        ),
        "".join(f"assert candidate({text!r}) is {result}\n" for text, result in cases),
    )


def _family_run_length(k: int) -> Problem:
    texts = ["aaabccdddd", "", "abc", "zzzzzz", "x" * (k + 2) + "y"]

    def encode(s: str) -> str:
        out, i = "", 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out += f"{j - i}{s[i]}"
            i = j
        return out

    return Problem(
        f"rle_{k}",
        code(
            f"""
            def rle_{k}(s):
                out, i = "", 0
                while i < len(s):
                    j = i
                    while j < len(s) and s[j] == s[i]:
                        j += 1
                    out += f"{{j - i}}{{s[i]}}"
                    i = j
                return out
            """
        ),
        code(
            f"""
            def rle_{k}(s):
                out, i = "", 0
                while i < len(s):
                    j = i
                    while j < len(s) and s[j] == s[i]:
                        j += 1
                    out += f"{{j - i}}{{s[i]}}" if j - i > 1 else s[i]
                    i = j
                return out
            """
        ),
        "".join(f"assert candidate({t!r}) == {encode(t)!r}\n" for t in texts),
    )


def _family_rotate(k: int) -> Problem:
    xs = list(range(1, 8))
    rotate = lambda ys, n: ys[-(n % len(ys)) :] + ys[: -(n % len(ys))] if ys else []  # noqa: E731
    return Problem(
        f"rotate_{k}",
        f"def rotate_{k}(xs, n):\n    if not xs:\n        return []\n    n %= len(xs)\n"
        "    return xs[-n:] + xs[:-n] if n else list(xs)\n",
        f"def rotate_{k}(xs, n):\n    if not xs:\n        return []\n    return xs[-n:] + xs[:-n]\n",
        "".join(f"assert candidate({xs}, {n}) == {rotate(xs, n)}\n" for n in (0, 1, k + 2, 7, 9))
        + "assert candidate([], 3) == []\n",
    )


def _family_caesar(k: int) -> Problem:
    shift = k + 1
    texts = ["hello", "Chalk Queue!", "xyz", ""]

    def caesar(s: str) -> str:
        out = []
        for c in s:
            if c.isalpha():
                base = ord("a") if c.islower() else ord("A")
                out.append(chr((ord(c) - base + shift) % 26 + base))
            else:
                out.append(c)
        return "".join(out)

    body = code(
        f"""
        def caesar_{shift}(s):
            out = []
            for c in s:
                if c.isalpha():
                    base = ord("a") if c.islower() else ord("A")
                    out.append(chr((ord(c) - base + {shift}) % 26 + base))
                else:
                    out.append(c)
            return "".join(out)
        """
    )
    return Problem(
        f"caesar_{shift}",
        body,
        body.replace("% 26 + base", "+ base"),
        "".join(f"assert candidate({t!r}) == {caesar(t)!r}\n" for t in texts),
    )


def _family_merge(k: int) -> Problem:
    cases = [([1, 3, 5], [2, 4, 6]), ([], [1]), ([1, 2], []), ([k], [k, k + 1])]
    return Problem(
        f"merge_{k}",
        code(
            f"""
            def merge_{k}(a, b):
                out, i, j = [], 0, 0
                while i < len(a) and j < len(b):
                    if a[i] <= b[j]:
                        out.append(a[i])
                        i += 1
                    else:
                        out.append(b[j])
                        j += 1
                return out + a[i:] + b[j:]
            """
        ),
        code(
            f"""
            def merge_{k}(a, b):
                out, i, j = [], 0, 0
                while i < len(a) and j < len(b):
                    if a[i] <= b[j]:
                        out.append(a[i])
                        i += 1
                    else:
                        out.append(b[j])
                        j += 1
                return out + a[i:]
            """
        ),
        "".join(f"assert candidate({a}, {b}) == {sorted(a + b)}\n" for a, b in cases),
    )


def _family_word_count(k: int) -> Problem:
    text = f"the cat and the hat and the bat {k}"
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return Problem(
        f"word_counts_{k}",
        f"def word_counts_{k}(text):\n    counts = {{}}\n    for word in text.split():\n"
        "        counts[word] = counts.get(word, 0) + 1\n    return counts\n",
        f"def word_counts_{k}(text):\n    return {{word: 1 for word in text.split()}}\n",
        f"assert candidate({text!r}) == {counts!r}\nassert candidate('') == {{}}\n",
    )


def _family_transpose(k: int) -> Problem:
    matrix = [[r * (k + 3) + c for c in range(k % 3 + 2)] for r in range(3)]
    return Problem(
        f"transpose_{k}",
        f"def transpose_{k}(m):\n    return [list(row) for row in zip(*m)]\n",
        f"def transpose_{k}(m):\n    return [list(row) for row in m]\n",
        f"assert candidate({matrix}) == {[list(r) for r in zip(*matrix, strict=True)]}\n"
        "assert candidate([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]\n",
    )


def _family_brackets(k: int) -> Problem:
    cases = [("()[]{}", True), ("([)]", False), ("((()))", True), ("(", False), ("", True)]
    cases.append(("{[" * (k + 1) + "]}" * (k + 1), True))
    return Problem(
        f"balanced_{k}",
        code(
            f"""
            def balanced_{k}(s):
                pairs, stack = {{")": "(", "]": "[", "}}": "{{"}}, []
                for c in s:
                    if c in "([{{":
                        stack.append(c)
                    elif not stack or stack.pop() != pairs[c]:
                        return False
                return not stack
            """
        ),
        code(
            f"""
            def balanced_{k}(s):
                return s.count("(") == s.count(")") and s.count("[") == s.count("]")
            """
        ),
        "".join(f"assert candidate({s!r}) is {r}\n" for s, r in cases),
    )


def _family_roman(k: int) -> Problem:
    cases = {"III": 3, "IV": 4, "IX": 9, "LVIII": 58, "MCMXCIV": 1994, "XL" * (k % 2 + 1): 0}
    cases = {key: value for key, value in cases.items() if value}
    return Problem(
        f"roman_{k}",
        code(
            f"""
            def roman_{k}(s):
                values = {{"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}}
                total = 0
                for i, c in enumerate(s):
                    if i + 1 < len(s) and values[c] < values[s[i + 1]]:
                        total -= values[c]
                    else:
                        total += values[c]
                return total
            """
        ),
        code(
            f"""
            def roman_{k}(s):
                values = {{"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}}
                return sum(values[c] for c in s)
            """
        ),
        "".join(f"assert candidate({s!r}) == {v}\n" for s, v in cases.items()),
    )


def _family_anagram(k: int) -> Problem:
    cases = [("listen", "silent", True), ("Dormitory", "dirty room", True), ("ab", "abc", False)]
    cases.append((f"chalk{k}", f"{k}klahc", True))
    return Problem(
        f"anagram_{k}",
        f"def anagram_{k}(a, b):\n    key = lambda s: sorted(s.replace(' ', '').lower())\n"
        "    return key(a) == key(b)\n",
        f"def anagram_{k}(a, b):\n    return sorted(a) == sorted(b)\n",
        "".join(f"assert candidate({a!r}, {b!r}) is {r}\n" for a, b, r in cases),
    )


def _family_prefix(k: int) -> Problem:
    cases = [(["flower", "flow", "flight"], "fl"), (["dog", "racecar"], ""), ([f"ab{k}"], f"ab{k}")]
    cases.append(([], ""))
    return Problem(
        f"common_prefix_{k}",
        code(
            f"""
            def common_prefix_{k}(words):
                if not words:
                    return ""
                prefix = words[0]
                for word in words[1:]:
                    while not word.startswith(prefix):
                        prefix = prefix[:-1]
                return prefix
            """
        ),
        code(
            f"""
            def common_prefix_{k}(words):
                if not words:
                    return ""
                return min(words)
            """
        ),
        "".join(f"assert candidate({w!r}) == {p!r}\n" for w, p in cases),
    )


def _family_chunks(k: int) -> Problem:
    size = k % 4 + 2
    xs = list(range(11))
    return Problem(
        f"chunks_of_{k}",
        f"def chunks_of_{k}(xs):\n    return [xs[i:i + {size}] for i in range(0, len(xs), {size})]\n",
        f"def chunks_of_{k}(xs):\n    return [xs[i:i + {size}] for i in range(0, len(xs) - {size}, {size})]\n",
        f"assert candidate({xs}) == {[xs[i : i + size] for i in range(0, len(xs), size)]}\n"
        "assert candidate([]) == []\n",
    )


def _family_flatten(k: int) -> Problem:
    nested = [1, [2, [3, [4, [k]]]], [], [[5], 6]]
    flat: list[int] = []

    def walk(item: object) -> None:
        if isinstance(item, list):
            for part in item:
                walk(part)
        else:
            flat.append(item)  # type: ignore[arg-type]

    walk(nested)
    return Problem(
        f"flatten_{k}",
        code(
            f"""
            def flatten_{k}(items):
                out = []
                for item in items:
                    if isinstance(item, list):
                        out.extend(flatten_{k}(item))
                    else:
                        out.append(item)
                return out
            """
        ),
        code(
            f"""
            def flatten_{k}(items):
                out = []
                for item in items:
                    if isinstance(item, list):
                        out.extend(item)
                    else:
                        out.append(item)
                return out
            """
        ),
        f"assert candidate({nested}) == {flat}\nassert candidate([]) == []\n",
    )


def _family_dedupe(k: int) -> Problem:
    xs = [3, 1, 3, 2, 1, k, k, 5]
    seen: list[int] = []
    for x in xs:
        if x not in seen:
            seen.append(x)
    return Problem(
        f"dedupe_{k}",
        f"def dedupe_{k}(xs):\n    return list(dict.fromkeys(xs))\n",
        f"def dedupe_{k}(xs):\n    return sorted(set(xs))\n",
        f"assert candidate({xs}) == {seen}\nassert candidate([]) == []\n",
    )


FAMILIES = [
    _family_vowels,
    _family_palindrome,
    _family_run_length,
    _family_rotate,
    _family_caesar,
    _family_merge,
    _family_word_count,
    _family_transpose,
    _family_brackets,
    _family_roman,
    _family_anagram,
    _family_prefix,
    _family_chunks,
    _family_flatten,
    _family_dedupe,
]
