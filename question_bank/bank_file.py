"""The bank's YAML format: parse and validate a file into question specs (every error names its
line), and write specs back. No database here; `store.py` imports and exports."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from question_bank.models import Kind, Layer, Status, Trigger, slugify

FORMAT_VERSION = 1
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
ARCH_RE = re.compile(r"^sm_\d{2,3}[a-z]?$")
MAX_TEXT = 1000

QUESTION_FIELDS = ("key", "text", "kind", "triggers", "layers", "scope", "hypothesis", "check",
                   "provenance", "status", "merged_into")
DEFAULT_FIELDS = ("kind", "triggers", "layers", "scope", "provenance", "status")
SCOPE_FIELDS = ("problem", "archs")


@dataclass(frozen=True)
class QuestionSpec:
    """One question as a file states it; `line` is where it starts (0 when not from a file)."""

    key: str
    text: str
    kind: str = Kind.QUESTION.value
    triggers: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    problem: str | None = None
    archs: tuple[str, ...] = ()
    hypothesis: str = ""
    check: str = ""
    provenance: str = ""
    status: str = Status.ACTIVE.value
    merged_into: str | None = None
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class BankFileIssue:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


class BankFileError(ValueError):
    """A bank file that cannot be imported; lists every problem found, each with its line."""

    def __init__(self, source: str, issues: list[BankFileIssue]) -> None:
        self.source = source
        self.issues = issues
        head = f"{source}: {len(issues)} problem{'s' if len(issues) != 1 else ''}; nothing was imported"
        super().__init__("\n".join([head, *(f"  {source}:{i}" for i in issues)]))


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


class _Validator:
    """Walks the composed YAML nodes (which carry line numbers) and collects issues."""

    def __init__(self) -> None:
        self.issues: list[BankFileIssue] = []
        self._constructor = SafeConstructor()

    def error(self, node: Node | None, message: str) -> None:
        self.issues.append(BankFileIssue(_line(node) if node is not None else 0, message))

    def value(self, node: Node) -> Any:
        return self._constructor.construct_object(node, deep=True)

    def mapping(self, node: Node, what: str, allowed: Iterable[str]) -> dict[str, tuple[Node, Node]] | None:
        if not isinstance(node, MappingNode):
            self.error(node, f"{what} must be a mapping of field: value")
            return None
        allowed = tuple(allowed)
        out: dict[str, tuple[Node, Node]] = {}
        for key_node, value_node in node.value:
            name = self.value(key_node) if isinstance(key_node, ScalarNode) else None
            if not isinstance(name, str):
                self.error(key_node, f"{what}: field names must be text")
                continue
            if name in out:
                self.error(key_node, f"{what}: field '{name}' appears twice (first on line "
                                     f"{_line(out[name][0])})")
                continue
            if name not in allowed:
                self.error(key_node, f"{what}: unknown field '{name}' (expected one of {', '.join(allowed)})")
                continue
            out[name] = (key_node, value_node)
        return out

    def text(self, node: Node, what: str, *, required: bool = False, max_len: int = MAX_TEXT) -> str | None:
        if not isinstance(node, ScalarNode):
            self.error(node, f"{what} must be text")
            return None
        value = self.value(node)
        if value is None:
            if required:
                self.error(node, f"{what} must not be empty")
            return None
        if not isinstance(value, str):
            self.error(node, f"{what} must be text, got {value!r}")
            return None
        if "\x00" in value:
            self.error(node, f"{what} contains a NUL character")
            return None
        value = " ".join(value.split())  # folded prose: line breaks in the file mean nothing
        if required and not value:
            self.error(node, f"{what} must not be empty")
            return None
        if len(value) > max_len:
            self.error(node, f"{what} is {len(value)} characters long; the limit is {max_len}")
            return None
        return value

    def choices(self, node: Node, what: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
        items: list[Node]
        if isinstance(node, ScalarNode):
            items = [node]
        elif isinstance(node, SequenceNode):
            items = list(node.value)
        else:
            self.error(node, f"{what} must be a list")
            return None
        out: list[str] = []
        ok = True
        for item in items:
            value = self.value(item) if isinstance(item, ScalarNode) else None
            if not isinstance(value, str) or value not in allowed:
                self.error(item, f"{what}: {value!r} is not one of {', '.join(allowed)}")
                ok = False
            elif value not in out:
                out.append(value)
        if ok and not out:
            self.error(node, f"{what} must name at least one of {', '.join(allowed)}")
            return None
        return tuple(out) if ok else None

    def choice(self, node: Node, what: str, allowed: tuple[str, ...]) -> str | None:
        value = self.value(node) if isinstance(node, ScalarNode) else None
        if not isinstance(value, str) or value not in allowed:
            self.error(node, f"{what}: {value!r} is not one of {', '.join(allowed)}")
            return None
        return value

    def scope(self, node: Node, what: str) -> tuple[str | None, tuple[str, ...]] | None:
        if isinstance(node, ScalarNode) and self.value(node) is None:
            return None, ()
        fields = self.mapping(node, what, SCOPE_FIELDS)
        if fields is None:
            return None
        problem: str | None = None
        archs: tuple[str, ...] = ()
        if "problem" in fields:
            problem = self.text(fields["problem"][1], f"{what}.problem", max_len=64)
        if "archs" in fields:
            arch_node = fields["archs"][1]
            items = [arch_node] if isinstance(arch_node, ScalarNode) else (
                list(arch_node.value) if isinstance(arch_node, SequenceNode) else None)
            if items is None:
                self.error(arch_node, f"{what}.archs must be a list such as [sm_90]")
            else:
                found: list[str] = []
                for item in items:
                    value = self.value(item) if isinstance(item, ScalarNode) else None
                    if not isinstance(value, str) or not ARCH_RE.match(value):
                        self.error(item, f"{what}.archs: {value!r} is not a GPU arch such as sm_90")
                    elif value not in found:
                        found.append(value)
                archs = tuple(found)
        return problem, archs


TRIGGERS = tuple(t.value for t in Trigger)
LAYERS = tuple(layer.value for layer in Layer)
MAX_NESTING = 16  # mappings and lists inside each other
MAX_FILE_BYTES = 2 * 1024 * 1024  # the starter bank is ~40 KB
KINDS = tuple(k.value for k in Kind)
STATUSES = tuple(s.value for s in Status)


def _check_shape(text: str, source: str) -> None:
    """Refuse a file nested deeper than MAX_NESTING or using aliases (`*name`: a bank never needs
    them, and they let a small file stand for a huge one), from PyYAML's event stream, which is
    read without recursion."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            line = int(event.start_mark.line) + 1 if event.start_mark else 0
            raise BankFileError(source, [BankFileIssue(line, "aliases (*name) are not accepted in a bank file")])
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING:
                line = int(event.start_mark.line) + 1 if event.start_mark else 0
                raise BankFileError(source, [BankFileIssue(
                    line, f"nested more than {MAX_NESTING} levels deep (a bank file needs 4)")])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_bank_text(text: str, source: str = "<bank>") -> list[QuestionSpec]:
    """Parse and validate a whole bank file. Raises BankFileError listing every problem."""
    v = _Validator()
    try:
        _check_shape(text, source)  # before compose, whose recursion a deep file would exhaust
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 0
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise BankFileError(source, [BankFileIssue(line, f"not valid YAML: {problem}")]) from exc
    except yaml.YAMLError as exc:
        raise BankFileError(source, [BankFileIssue(0, f"not valid YAML: {exc}")]) from exc
    if root is None:
        raise BankFileError(source, [BankFileIssue(0, "the file is empty; expected 'questions:'")])
    top = v.mapping(root, "the file", ("version", "defaults", "questions"))
    if top is None:
        raise BankFileError(source, v.issues)
    if "version" in top:
        version = v.value(top["version"][1])
        if version != FORMAT_VERSION:
            v.error(top["version"][1], f"version {version!r} is not supported (this reads version {FORMAT_VERSION})")
    defaults = _parse_defaults(v, top["defaults"][1]) if "defaults" in top else {}
    if "questions" not in top:
        v.error(root, "the file has no 'questions:' list")
        raise BankFileError(source, v.issues)
    seq = top["questions"][1]
    if not isinstance(seq, SequenceNode):
        v.error(seq, "'questions' must be a list of questions")
        raise BankFileError(source, v.issues)

    specs: list[QuestionSpec] = []
    seen_keys: dict[str, int] = {}
    seen_texts: dict[str, int] = {}
    for index, item in enumerate(seq.value, start=1):
        spec = _parse_question(v, item, index, defaults)
        if spec is None:
            continue
        if spec.key in seen_keys:
            v.error(item, f"question {index}: key '{spec.key}' is already used by the question on line "
                          f"{seen_keys[spec.key]}")
            continue
        folded = spec.text.lower()
        if folded in seen_texts:
            v.error(item, f"question {index}: the same text already appears on line {seen_texts[folded]}")
            continue
        seen_keys[spec.key] = spec.line
        seen_texts[folded] = spec.line
        specs.append(spec)
    for spec in specs:
        if spec.merged_into is not None and spec.merged_into == spec.key:
            v.issues.append(BankFileIssue(spec.line, f"question '{spec.key}' cannot be merged into itself"))
    if v.issues:
        raise BankFileError(source, sorted(v.issues, key=lambda i: i.line))
    return specs


def _parse_defaults(v: _Validator, node: Node) -> dict[str, Any]:
    fields = v.mapping(node, "defaults", DEFAULT_FIELDS)
    if fields is None:
        return {}
    return _parse_fields(v, fields, "defaults")


def _parse_fields(v: _Validator, fields: dict[str, tuple[Node, Node]], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (_key_node, node) in fields.items():
        label = f"{what}: {name}"
        if name in ("text", "hypothesis", "check", "provenance"):
            out[name] = v.text(node, label, required=name == "text") or ""
        elif name == "key":
            key = v.text(node, label, required=True, max_len=64)
            if key is not None and not KEY_RE.match(key):
                v.error(node, f"{label} '{key}' must be lowercase letters, digits and dashes")
            out[name] = key
        elif name == "merged_into":
            out[name] = v.text(node, label, max_len=64)
        elif name == "kind":
            out[name] = v.choice(node, label, KINDS)
        elif name == "status":
            out[name] = v.choice(node, label, STATUSES)
        elif name == "triggers":
            out[name] = v.choices(node, label, TRIGGERS)
        elif name == "layers":
            out[name] = v.choices(node, label, LAYERS)
        elif name == "scope":
            out[name] = v.scope(node, label)
    return out


def _parse_question(v: _Validator, node: Node, index: int, defaults: dict[str, Any]) -> QuestionSpec | None:
    before = len(v.issues)
    fields = v.mapping(node, f"question {index}", QUESTION_FIELDS)
    if fields is None:
        return None
    values = {**defaults, **_parse_fields(v, fields, f"question {index}")}
    line = _line(node)
    text = values.get("text")
    if "text" not in fields:
        v.error(node, f"question {index} has no 'text'")
    for required in ("triggers", "layers"):
        if not values.get(required) and required not in fields and required not in defaults:
            v.error(node, f"question {index} has no '{required}'")
    kind = values.get("kind") or Kind.QUESTION.value
    if text and kind == Kind.QUESTION.value and "?" not in text:
        v.error(fields["text"][1], f"question {index}: a question must ask something (no '?' in its text); "
                                   "use kind: information for a statement")
    if len(v.issues) > before or not text:
        return None
    scope = values.get("scope") or (None, ())
    return QuestionSpec(
        key=values.get("key") or slugify(text),
        text=text,
        kind=kind,
        triggers=tuple(values.get("triggers") or ()),
        layers=tuple(values.get("layers") or ()),
        problem=scope[0],
        archs=tuple(scope[1]),
        hypothesis=values.get("hypothesis") or "",
        check=values.get("check") or "",
        provenance=values.get("provenance") or "",
        status=values.get("status") or Status.ACTIVE.value,
        merged_into=values.get("merged_into"),
        line=line,
    )


def load_bank_file(path: Path) -> list[QuestionSpec]:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise BankFileError(str(path), [BankFileIssue(0, f"the file is larger than {MAX_FILE_BYTES} bytes")])
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BankFileError(str(path), [BankFileIssue(0, f"cannot read the file: {exc}")]) from exc
    return parse_bank_text(text, str(path))


def spec_to_dict(spec: QuestionSpec) -> dict[str, Any]:
    """The file form of one question: fields in a fixed order, defaults left out."""
    out: dict[str, Any] = {"key": spec.key, "text": spec.text}
    if spec.kind != Kind.QUESTION.value:
        out["kind"] = spec.kind
    out["triggers"] = list(spec.triggers)
    out["layers"] = list(spec.layers)
    if spec.problem or spec.archs:
        scope: dict[str, Any] = {}
        if spec.problem:
            scope["problem"] = spec.problem
        if spec.archs:
            scope["archs"] = list(spec.archs)
        out["scope"] = scope
    for name in ("hypothesis", "check", "provenance"):
        value = getattr(spec, name)
        if value:
            out[name] = value
    if spec.status != Status.ACTIVE.value:
        out["status"] = spec.status
    if spec.merged_into:
        out["merged_into"] = spec.merged_into
    return out


def dump_bank_text(specs: Iterable[QuestionSpec], header: str = "") -> str:
    """A bank file that `parse_bank_text` reads back to the same specs."""
    body = yaml.safe_dump(
        {"version": FORMAT_VERSION, "questions": [spec_to_dict(s) for s in specs]},
        sort_keys=False, allow_unicode=True, width=100, default_flow_style=None,
    )
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    return ("\n".join(lines) + "\n" if lines else "") + body
