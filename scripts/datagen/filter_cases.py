"""Texts that sit on the thresholds of the quality filters and on the traps of spaCy's tokenizer.

`crafted()` returns (label, text) pairs: for every rule of gopher_quality, gopher_repetition,
c4_quality and fineweb_quality, texts just inside and just outside its default threshold (where a
ratio can be hit exactly, the exact value too: datatrove's comparisons are strict), and texts
whose words spaCy splits in ways a simpler tokenizer would not. The tests run datatrove on them
for real and compare its decisions with ours; nothing here states what the answer should be.
"""

from __future__ import annotations

PROSE = ("The committee reviewed the proposal and agreed that the budget should be revised with care before "
         "the next meeting of the board. ")
WORDS = ("river", "stone", "window", "garden", "letter", "market", "signal", "forest", "bridge", "castle")


def words(n: int, length: int = 5, start: int = 0) -> str:
    """n distinct-ish words of about `length` letters, no stop words."""
    out = []
    for i in range(start, start + n):
        base = WORDS[i % len(WORDS)]
        out.append((base * 3)[:length] + chr(97 + (i // len(WORDS)) % 26))
    return " ".join(out)


def sentence_lines(n: int, extra: str = "") -> str:
    """n lines, each a sentence with the stop words "the", "and", "of" and a full stop."""
    return "\n".join(f"Line {i} of the report and {extra}the notes were filed in order." for i in range(n))


def _gopher() -> list[tuple[str, str]]:
    cases = []
    for n in (48, 49, 50, 51):
        cases.append((f"gopher words {n}", "the and " + words(n - 2)))
    cases.append(("gopher words with symbols", "the and " + words(47) + " ... -- ## !!"))
    cases.append(("gopher long doc", "the and " + words(100_001 - 2)))
    cases.append(("gopher long doc edge", "the and " + words(100_000 - 2)))
    # mean word length: "the"/"and" are 3; words of 3 letters make the mean exactly 3.0
    cases.append(("gopher avg 3.0", "the and " + " ".join(["abc"] * 60)))
    cases.append(("gopher avg < 3", "the and " + " ".join(["ab"] * 30 + ["abc"] * 30)))
    cases.append(("gopher avg 10.0", "the and " + " ".join(["abcdefghijklm"] * 10 + ["abcdefghij"] * 60)))
    cases.append(("gopher avg > 10", "the and " + " ".join(["abcdefghijk"] * 70)))
    for hashes in (6, 7, 8):
        cases.append((f"gopher hashes {hashes}", "the and " + words(58) + " " + "#" * hashes))
    for dots in (5, 6, 7):
        cases.append((f"gopher ellipsis {dots}", "the and " + words(58) + " " + " ".join(["..."] * dots)))
    cases.append(("gopher unicode ellipsis", "the and " + words(58) + " " + "… " * 7 + "...."))
    for bullets in (8, 9, 10):
        lines = [f"- item {words(6, start=i)} the and" for i in range(bullets)] + \
                [f"plain {words(6, start=i)} the and" for i in range(10 - bullets)]
        cases.append((f"gopher bullets {bullets}/10", "\n".join(lines)))
    cases.append(("gopher bullets mixed", "\n".join(
        ["  • " + words(8, start=i) + " the and" for i in range(9)] + ["\u2013 dash " + words(8)])))
    for ends in (2, 3, 4):
        lines = [f"{words(7, start=i)} the and..." for i in range(ends)] + \
                [f"{words(7, start=i)} the and." for i in range(10 - ends)]
        cases.append((f"gopher end ellipsis {ends}/10", "\n".join(lines)))
    for numbers in (10, 12, 13, 14):
        cases.append((f"gopher alpha {numbers}", "the and " + words(48) + " " + " ".join(["123"] * numbers)))
    cases.append(("gopher stop words 1", words(60) + " the"))
    cases.append(("gopher stop words case", words(60) + " The And OF"))
    cases.append(("gopher stop words 2", words(60) + " with have"))
    cases.append(("gopher empty lines", "\n\n\n" + "the and " + words(60) + "\n\n"))
    return cases


def _repetition() -> list[tuple[str, str]]:
    cases = []
    para = [f"Paragraph {i} says the thing {words(12, start=3 * i)} plainly." for i in range(10)]
    for dups in (2, 3, 4):  # 10 paragraphs, `dups` of them repeats: 0.3 exactly passes
        paras = para[: 10 - dups] + [para[0]] * dups
        cases.append((f"rep para {dups}/10", "\n\n".join(paras)))
    cases.append(("rep para char", "\n\n".join(para[:6] + ["x " * 200] * 2)))
    lines = [f"Line {i} holds the {words(10, start=2 * i)} of it." for i in range(10)]
    for dups in (2, 3, 4):
        cases.append((f"rep line {dups}/10", "\n".join(lines[: 10 - dups] + [lines[1]] * dups)))
    cases.append(("rep leading newlines", "\n" + "\n".join(lines) + "\n"))
    cases.append(("rep empty", ""))
    cases.append(("rep top 2-gram", "the and " + " ".join(["red fox"] * 12) + " " + words(60)))
    cases.append(("rep top 3-gram", "the and " + " ".join(["red fox jumps"] * 9) + " " + words(80)))
    cases.append(("rep top 4-gram", "the and " + " ".join(["red fox jumps high"] * 7) + " " + words(90)))
    cases.append(("rep top n-gram once", "supercalifragilistic expialidocious the and"))
    cases.append(("rep dup 5-gram", "the and " + words(40) + " " + " ".join(["alpha beta gamma delta eps"] * 4)
                  + " " + words(40, start=40)))
    cases.append(("rep dup 10-gram", "the and " + words(80) + " " + " ".join([words(10, start=7)] * 3)))
    # concatenation without a separator: "ab c" and "a bc" are the same 2-gram for the scan
    cases.append(("rep joined n-grams", "the and " + " ".join(["ab c d e f", "a bc d e f"] * 6) + " " + words(40)))
    return cases


def _c4() -> list[tuple[str, str]]:
    ok = sentence_lines(5)
    return [
        ("c4 five sentences", ok),
        ("c4 four sentences", sentence_lines(4)),
        ("c4 two sentences a line", "\n".join(["First part of the line. Second part of the line."] * 2
                                              + ["One more line of the text here."])),
        ("c4 citations", "\n".join(f"Line {i} of the report [1] cites [edit] the notes [citation needed]."
                                   for i in range(6))),
        ("c4 citation at end", ok + "\nThe last line of the text cites. [12]"),
        ("c4 ellipsis", ok + "\nThis line trails off and ends..."),
        ("c4 quotes", ok + '\nHe said "the end of the story."\n\'Single quoted line of text.\''),
        ("c4 short lines", ok + "\nToo short.\nAlso."),
        ("c4 javascript", ok + "\nPlease enable JavaScript in the browser."),
        ("c4 lorem ipsum", ok + "\nLorem ipsum dolor sit amet."),
        ("c4 lorem in dropped line", ok + "\nLorem ipsum dolor sit amet"),
        ("c4 curly", ok + "\nThe value of the set is {1, 2}."),
        ("c4 curly in dropped line", ok + "\nThe value of the set is {1, 2}"),
        ("c4 policy", ok + "\nRead our Privacy Policy for the details.\nThis site uses cookies, as all do."),
        ("c4 long word", ok + "\nA line with " + "x" * 1001 + " in the middle of it."),
        ("c4 word of 1000", ok + "\nA line with " + "x" * 1000 + " in the middle of it."),
        ("c4 crlf", ok.replace("\n", "\r\n")),
        ("c4 double spaces", "\n".join(f"Line {i}.  Then the next sentence.  And a third one." for i in range(2))),
        ("c4 tabs and nbsp", "\n".join(f"Line {i}.\tThen the next.\u00a0And the third one." for i in range(2))),
        ("c4 abbreviations", "\n".join(["Dr. Smith met Mr. Jones at 5 p.m. on Jan. 3 in the U.S. today."] * 2
                                       + ["It was e.g. fine, i.e. good. Really it was."])),
        ("c4 closing punctuation", "\n".join(["He left. (Then he came back.) Done.", "Wait!!! What?! Yes.",
                                              "It ended.\" Then more.", "One. Two. Three. Four. Five."])),
        ("c4 unicode lines", "Eine Zeile mit Text. Noch ein Satz.\nUna línea más. Otra frase aquí.\n"
                             "\u8fd9\u662f\u4e00\u4e2a\u53e5\u5b50\u3002\u8fd9\u662f\u53e6\u4e00\u4e2a\u3002 ok."),
        ("c4 all lines kept", "One line of the text here.\nAnother line of the text.\nA third line, then more.\n"
                              "A fourth line of text.\nA fifth line of the text."),
    ]


def _fineweb() -> list[tuple[str, str]]:
    long_line = "This is a line of the text that is long enough not to count as short"
    cases = []
    for ended in (0, 1, 2, 3):  # of 25 lines; 3/25 = 0.12 exactly passes
        lines = [long_line + "." for _ in range(ended)] + [f"{long_line} {i}" for i in range(25 - ended)]
        cases.append((f"fineweb punct {ended}/25", "\n".join(lines)))
    for short in (66, 67, 68):  # of 100
        lines = [f"short {i}." for i in range(short)] + [f"{long_line} number {i}." for i in range(100 - short)]
        cases.append((f"fineweb short {short}/100", "\n".join(lines)))
    cases.append(("fineweb line of 30", "\n".join(["x" * 29 + ".", "y" * 30 + ".", long_line + "."])))
    cases.append(("fineweb char dup", "\n".join([f"{long_line} {i}." for i in range(40)] + ["Same line."] * 2)))
    cases.append(("fineweb char dup edge", "\n".join([f"{long_line} {i}." for i in range(60)] + ["Same."] * 2)))
    for per_line in (3, 4):  # words per line: 1/3 newline ratio fails, 1/4 passes (0.3)
        cases.append((f"fineweb list {per_line}", "\n".join(
            " ".join(["word"] * (per_line - 1) + [f"item{i}."]) for i in range(40))))
    cases.append(("fineweb crlf", "\r\n".join([f"{long_line} {i}." for i in range(10)])))
    cases.append(("fineweb blank lines", "\n \n".join([f"{long_line} {i}." for i in range(10)]) + "\n\t\n"))
    cases.append(("fineweb other scripts", "\n".join(["\u8fd9\u662f\u4e00\u4e2a\u5f88\u957f\u7684\u53e5\u5b50"
                                                      "\u7528\u4e8e\u6d4b\u8bd5\u8fc7\u6ee4\u5668\u7684\u884c\u3002",
                                                      "\u0647\u0630\u0627 \u0633\u0637\u0631 \u0637\u0648\u064a\u0644"
                                                      " \u062c\u062f\u0627 \u0644\u0644\u0627\u062e\u062a\u0628\u0627"
                                                      "\u0631 \u0641\u064a \u0627\u0644\u0646\u0635\u061f"] * 5)))
    cases.append(("fineweb whitespace only", " \n\t\n "))
    return cases


def _tokenizer_traps() -> list[tuple[str, str]]:
    traps = [": x.A", "b: c.D", ":x.A", "x: x.A > 2", "don't can't won't y'all", ":) :-) <3 :P :p",
             "e.g. i.e. a.m. p.m. U.S. Jan. Mr.", "http://example.com/a?b=c. www.example.org, x@y.z",
             "the students' score 's 'em 'll", "10a.m. 5p.m. 10 a.m.", "(*_*) (._.) ._. (-:", "IS_ALPHA LIKE_URL",
             "tab\there\u00a0nbsp\u2009thin\u3000ideographic", "''quoted'' ``back''", "x.\n.y z .  ."]
    text = " ".join(traps)
    return [("spaCy traps", "\n".join([text, PROSE * 3, text.replace(" ", "  "), text.replace(" ", "\n")] * 3))]


def crafted() -> list[tuple[str, str]]:
    """(label, text) for every rule's threshold and spaCy's traps."""
    return _gopher() + _repetition() + _c4() + _fineweb() + _tokenizer_traps()
