"""`pile-pipeline removed`'s output: each removed or cut document as text for a person, or as a JSON line.

Text: a header line per document (reason / rule, the fields that decided, subset, file:line, length),
then its text, cut to --chars characters with control characters made visible (pipeline/inspect/text.py);
a cut shows the text before and after, and the lines it took. JSON lines: the record as removed/ holds
it, plus `text` (the input's) and `text_chars`; a cut adds `text_after`; a removal decided on a text
the stages before it had changed adds `text_decided`. Texts in JSON are whole unless --chars is given.
"""

from __future__ import annotations

import json

from pipeline.inspect.removed import Shown
from pipeline.inspect.text import clip, lines_cut, shown, visible

FIELD_CHARS = 120  # a field's value as a header shows it (a decontamination's spans can be long)


def _value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return shown(text, FIELD_CHARS)


def header(item: Shown) -> str:
    """`== reason / rule  field=value ...` then `   subset  file:line`."""
    record = item.record
    kind = "cut" if item.is_cut else "removed"
    what = " / ".join(filter(None, (record["reason"], record.get("rule"))))
    fields = "  ".join(f"{visible(k)}={_value(v)}" for k, v in sorted(item.fields.items()))
    where = f"{visible(record['subset'])}  {visible(item.path)}:{record['line']}"
    return f"== {kind}: {visible(what)}" + (f"   {fields}" if fields else "") + f"\n   {where}"


def _size(text: str) -> str:
    return f"{len(text):,} characters, {text.count(chr(10)) + 1:,} lines"


def format_text(item: Shown, chars: int) -> str:
    """One document for a terminal."""
    doc = item.document
    out = [header(item)]
    if item.is_cut:
        cut = lines_cut(doc.input_text, doc.text)
        out += [f"-- before: {_size(doc.input_text)}", shown(doc.input_text, chars),
                f"-- after: {_size(doc.text)}", shown(doc.text, chars),
                f"-- lines cut or changed: {len(cut):,}"]
        out += [f"- {line}" for line in shown("\n".join(cut), chars).split("\n")] if cut else []
    else:
        if doc.text != doc.input_text:
            out.append(f"-- as the stages before it left it: {_size(doc.text)} (the input: {_size(doc.input_text)})")
        else:
            out.append(f"-- {_size(doc.text)}")
        out.append(shown(doc.text, chars))
    return "\n".join(out) + "\n"


def format_json(item: Shown, chars: int) -> str:
    """One document as a JSON line: the record, its texts and their lengths."""
    doc = item.document
    out = dict(item.record)
    out["text"], out["text_chars"] = clip(doc.input_text, chars), len(doc.input_text)
    if item.is_cut:
        out["text_after"], out["text_after_chars"] = clip(doc.text, chars), len(doc.text)
    elif doc.text != doc.input_text:
        out["text_decided"], out["text_decided_chars"] = clip(doc.text, chars), len(doc.text)
    return json.dumps(out, ensure_ascii=False, sort_keys=True)
