"""MkDocs hook: pages rendered from the code at build time, so they cannot drift from it.

- `<!-- cli: symphony -->` / `<!-- cli: symphony-lab -->`: every command, argument and flag of
  the argparse parsers (`symphony_core.cli.build_parser`, `symphony_lab.cli.build_parser`).
- `<!-- labs-index -->`: one row per notebook in tutorials/, titled by its first heading.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MARK = re.compile(r"<!--\s*(cli:\s*[\w-]+|labs-index)\s*-->")


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from symphony_core.cli import build_parser as core_parser
    from symphony_lab.cli import build_parser as lab_parser

    return {"symphony": core_parser(), "symphony-lab": lab_parser()}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _arg_row(a: argparse.Action) -> str:
    if a.option_strings:
        name = ", ".join(f"`{o}`" for o in a.option_strings)
        if a.nargs != 0:
            name += f" `{a.metavar or a.dest.upper()}`"
    else:
        name = f"`{a.metavar or a.dest}`"
        if a.nargs in ("?", "*", argparse.REMAINDER):
            name += " (optional)"
    extra = []
    if a.choices is not None and not isinstance(a, argparse._SubParsersAction):
        extra.append("one of " + ", ".join(f"`{c}`" for c in a.choices))
    if isinstance(a, argparse._AppendAction) and "repeatable" not in (a.help or ""):
        extra.append("repeatable")
    default = a.default
    if a.nargs == 0 or default in (None, argparse.SUPPRESS) or a.dest in ("server",):
        default_text = "—"  # flags, no default, or one read from the environment at start
    else:
        default_text = f"`{default}`"
    help_text = (a.help or "").replace("%(default)s", str(default))
    return f"| {name} | {default_text} | {_cell(help_text + ('; ' if help_text and extra else '') + '; '.join(extra)) or '—'} |"


def _render(parser: argparse.ArgumentParser, level: int = 2, helps: dict[str, str] | None = None) -> list[str]:
    out = [f"{'#' * level} `{parser.prog}`", ""]
    summary = parser.description or (helps or {}).get(parser.prog, "")
    if summary:
        out += [summary, ""]
    usage = parser.format_usage().strip().removeprefix("usage: ")
    out += ["```text", usage, "```", ""]
    actions = [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if actions:
        out += ["| argument | default | meaning |", "|---|---|---|"] + [_arg_row(a) for a in actions] + [""]
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            sub_help = {c.dest: c.help or "" for c in a._choices_actions}
            for name, sp in a.choices.items():
                out += _render(sp, level + 1, {sp.prog: sub_help.get(name, "")})
    return out


def _labs_index() -> list[str]:
    rows = ["| notebook | what it teaches |", "|---|---|"]
    for nb in sorted((ROOT / "tutorials").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        md = next(("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"), "")
        blocks = [b.strip() for b in re.split(r"\n\s*\n", md) if b.strip()]
        title = blocks[0].splitlines()[0].lstrip("# ").strip() if blocks else nb.stem
        para = " ".join(blocks[1].split()) if len(blocks) > 1 else ""
        first = re.split(r"(?<=[.!?])\s", para, maxsplit=1)[0]  # its first sentence
        rows.append(f"| `tutorials/{nb.name}` | **{_cell(title)}** — {_cell(first)} |")
    return rows


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!--" not in markdown:
        return markdown
    parsers: dict[str, argparse.ArgumentParser] = {}

    def sub(m: re.Match) -> str:
        what = m.group(1)
        if what == "labs-index":
            return "\n".join(_labs_index())
        prog = what.split(":", 1)[1].strip()
        if not parsers:
            parsers.update(_parsers())
        if prog not in parsers:
            raise ValueError(f"{page.file.src_uri}: no parser {prog!r} (known: {sorted(parsers)})")
        return "\n".join(_render(parsers[prog]))

    return _MARK.sub(sub, markdown)
