"""Label and field selectors with the syntax and semantics of ``labels.Parse`` / ``fields``.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a`` (exists),
``!a`` (does not exist), comma-separated (AND). Field selectors: ``path=value``, ``path==value``,
``path!=value`` over dotted paths; which paths a resource supports is decided by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_SET_TERM = re.compile(r"^([A-Za-z0-9_./-]+)\s+(in|notin)\s*\((.*)\)$")
_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_./-]*[A-Za-z0-9])?$")


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    terms.append("".join(current).strip())
    return terms


@dataclass(frozen=True)
class Requirement:
    """One label requirement; ``op`` is one of ``= != in notin exists !exists``."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # != and notin


def _parse_term(term: str) -> Requirement:
    if term.startswith("!"):
        return Requirement(_checked_key(term[1:].strip()), "!exists")
    match = _SET_TERM.match(term)
    if match:
        values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
        return Requirement(_checked_key(match.group(1)), match.group(2), values)
    for op, norm in (("!=", "!="), ("==", "="), ("=", "=")):
        if op in term:
            key, value = term.split(op, 1)
            return Requirement(_checked_key(key.strip()), norm, frozenset([value.strip()]))
    return Requirement(_checked_key(term), "exists")


def _checked_key(key: str) -> str:
    if not _KEY.match(key):
        raise ValueError(f"invalid label key {key!r}")
    return key


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse ``text``; raise ``ValueError`` on a malformed selector."""
        if not text or not text.strip():
            return cls()
        terms = _split_terms(text)
        if any(not t for t in terms):
            raise ValueError(f"unable to parse requirement: empty term in {text!r}")
        return cls(tuple(_parse_term(t) for t in terms))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted ``path`` in ``obj`` ("" when absent)."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return ""
        current = current[part]
    if isinstance(current, bool):
        return "true" if current else "false"
    return "" if current is None else str(current)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: ``(path, op, value)`` terms joined by AND."""

    terms: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        terms = []
        for raw in text.split(","):
            term = raw.strip()
            for op, norm in (("!=", "!="), ("==", "="), ("=", "=")):
                if op in term:
                    path, value = term.split(op, 1)
                    terms.append((path.strip(), norm, value.strip()))
                    break
            else:
                raise ValueError(f"invalid field selector term {term!r}")
        return cls(tuple(terms))

    @property
    def paths(self) -> Iterable[str]:
        return (path for path, _, _ in self.terms)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for path, op, value in self.terms:
            equal = field_value(obj, path) == value
            if equal != (op == "="):
                return False
        return True
