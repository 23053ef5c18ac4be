"""Costing (design.md §3.3): $300 per physician visit, and each ordered test priced by its CPT/HCPCS codes.

- Visits: a run of consecutive question turns is one visit; the visit ends when a test is ordered (``visit_count``).
- A test name is mapped to codes by the curated catalogue (exact name or alias, then sentence-embedding
  similarity with a threshold; ``catalog.py``) and priced from a price table: the data folder's
  ``costing/cms_prices.csv`` by default, or any charge-master CSV with a code column and a price column.
- A test the catalogue cannot map, or whose codes the table lacks, is *estimated*: by the ``sdbench-pricing``
  chat model when one is configured, else by the median price of its kind in the table; either way it is flagged.
- Each name's price is cached in the store per (method, model, name), the method naming the price table's and
  the catalogue's hashes, so re-costing a run (``recost``) reuses every price already found.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from medeval_core.benchmarks.sdbench.catalog import Kind, TestCatalog, guess_kind
from medeval_core.data.files import read_csv_rows, sha256_of

VISIT_PRICE = 300.0
COSTING_VERSION = "sdbench-costing-v1"
PRICE_COLUMNS = ("national_price_usd", "price", "price_usd", "charge", "amount", "gross_charge", "standard_charge")
CODE_COLUMNS = ("code", "cpt", "hcpcs", "cpt_code", "hcpcs_code", "billing_code")
OFFLINE_MODEL = "offline"

PriceMethod = Literal["alias", "embedding", "llm-estimate", "kind-median"]


class PriceTableError(ValueError):
    """A price table that cannot be used; the message says which file and what to fix."""


class PriceTable(BaseModel):
    """Code -> price (and kind where the table says), with the file's sha256 (part of the cache key)."""

    model_config = ConfigDict(frozen=True)

    path: str
    sha256: str
    prices: dict[str, float]
    kinds: dict[str, str] = Field(default_factory=dict)

    def median(self, kind: str) -> float:
        """The median price of the table's codes of ``kind`` (all codes when the table has no kinds)."""
        values = [price for code, price in self.prices.items() if self.kinds.get(code, kind) == kind]
        return float(statistics.median(values or list(self.prices.values())))


def _column(header: Sequence[str], choices: Sequence[str]) -> str | None:
    lowered = {re.sub(r"[\s-]+", "_", name.strip().lower()): name for name in header}
    return next((lowered[choice] for choice in choices if choice in lowered), None)


@cache
def _load_prices(path: str, mtime_ns: int, size: int) -> PriceTable:
    header, rows = read_csv_rows(Path(path), PriceTableError, "give a CSV file of code and price")
    code_column, price_column = _column(header, CODE_COLUMNS), _column(header, PRICE_COLUMNS)
    if code_column is None or price_column is None:
        raise PriceTableError(f"{path} needs a code column ({', '.join(CODE_COLUMNS)}) and a price column "
                              f"({', '.join(PRICE_COLUMNS)}); its header is {', '.join(header) or 'empty'}.")
    kind_column = _column(header, ("kind", "category", "type"))
    prices: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for number, row in rows:
        code = (row.get(code_column) or "").strip().upper()
        value = re.sub(r"[$,\s]", "", row.get(price_column) or "")
        if not code or not value:
            continue
        try:
            price = float(value)
        except ValueError:
            raise PriceTableError(f"{path}, line {number}: the price {row.get(price_column)!r} of {code} is not a "
                                  "number; fix or remove the line.") from None
        prices[code] = price
        if kind_column and row.get(kind_column):
            kinds[code] = str(row[kind_column]).strip().lower()
    if not prices:
        raise PriceTableError(f"{path} holds no priced codes; give a CSV with one code and price per line.")
    return PriceTable(path=path, sha256=sha256_of(path)[0], prices=prices, kinds=kinds)


def load_prices(path: str | Path) -> PriceTable:
    """The price table at ``path`` (cached per file state)."""
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except OSError:
        raise PriceTableError(f"The price table {path} does not exist; give a CSV of code and price with "
                              "--prices, or fetch the data folder's costing/cms_prices.csv.") from None
    return _load_prices(str(path), stat.st_mtime_ns, stat.st_size)


class TestPrice(BaseModel):
    """What one ordered test costs, and how that price was found."""

    __test__ = False

    name: str
    price: float
    codes: list[str] = Field(default_factory=list)
    method: PriceMethod
    estimated: bool
    matched: str | None = None
    kind: Kind
    similarity: float | None = None
    note: str = ""


class CostBreakdown(BaseModel):
    """A case's cost: visits at $300 each plus every ordered test."""

    visits: int
    visit_cost: float
    tests: list[TestPrice] = Field(default_factory=list)

    @property
    def test_cost(self) -> float:
        return sum(test.price for test in self.tests)

    @property
    def total(self) -> float:
        return self.visit_cost + self.test_cost

    def summary(self) -> dict[str, Any]:
        return {"visits": self.visits, "visit_cost": self.visit_cost, "test_cost": self.test_cost,
                "total": self.total, "tests_priced_by_code": sum(not t.estimated for t in self.tests),
                "tests_estimated": sum(t.estimated for t in self.tests)}


def visit_count(turn_kinds: Sequence[str]) -> int:
    """Physician visits: each maximal run of consecutive question turns is one visit (a test order ends it)."""
    visits = 0
    previous: str | None = None
    for kind in turn_kinds:
        if kind == "questions" and previous != "questions":
            visits += 1
        if kind in ("questions", "tests"):
            previous = kind
    return visits


class PriceCache(Protocol):
    def get(self, method: str, model: str, name: str) -> TestPrice | None: ...

    def put(self, method: str, model: str, name: str, price: TestPrice) -> None: ...


PRICE_NAMESPACE = "sdbench.test_prices"
"""The store cache's namespace of priced tests (revision 0011_generic_cache copied the older price table into it)."""


def price_key(method: str, model: str, name: str) -> str:
    """A priced test's key in the store's cache: the three joined by a newline, which none of them holds (the name
    is whitespace-normalised); revision 0011_generic_cache built the copied prices' keys with this rule."""
    return "\n".join((method, model, name))


class StorePriceCache:
    """The price cache kept in the store's key-value cache, under ``PRICE_NAMESPACE``."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, method: str, model: str, name: str) -> TestPrice | None:
        found = self.store.cached(PRICE_NAMESPACE, price_key(method, model, name))
        return TestPrice.model_validate(found) if found is not None else None

    def put(self, method: str, model: str, name: str, price: TestPrice) -> None:
        self.store.cache(PRICE_NAMESPACE, price_key(method, model, name), price.model_dump(mode="json"))


Estimator = Callable[[str, str], float]
"""(test name, kind) -> an estimated price in US dollars (the pricing model)."""


class Pricer:
    """Prices test names from the catalogue and a price table, falling back to flagged estimates."""

    def __init__(self, catalog: TestCatalog, prices: PriceTable, cache: PriceCache | None = None,
                 estimator: Estimator | None = None, estimator_model: str = OFFLINE_MODEL) -> None:
        self.catalog = catalog
        self.prices = prices
        self.cache = cache
        self.estimator = estimator
        self.model = estimator_model if estimator is not None else OFFLINE_MODEL
        catalog_hash = hashlib.sha256(catalog.source.encode()).hexdigest()[:8] if catalog.source else "none"
        self.method = f"{COSTING_VERSION}:prices={prices.sha256[:12]}:catalog={catalog_hash}:{len(catalog)}"

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "model": self.model, "prices": self.prices.path,
                "prices_sha256": self.prices.sha256, "visit_price": VISIT_PRICE}

    def price(self, name: str) -> TestPrice:
        """The price of one test name (cached per method, model and normalised name)."""
        key = " ".join(name.lower().split())
        if self.cache is not None:
            found = self.cache.get(self.method, self.model, key)
            if found is not None:
                return found.model_copy(update={"name": name})
        priced = self._price(name)
        if self.cache is not None:
            self.cache.put(self.method, self.model, key, priced)
        return priced

    def _price(self, name: str) -> TestPrice:
        match = self.catalog.match(name)
        if match is not None:
            codes = [code.upper() for code in match.entry.codes]
            missing = [code for code in codes if code not in self.prices.prices]
            if not missing:
                return TestPrice(name=name, price=round(sum(self.prices.prices[c] for c in codes), 2), codes=codes,
                                 method=match.method, estimated=False, matched=match.entry.name,
                                 kind=match.entry.kind,
                                 similarity=None if match.method == "alias" else round(match.similarity, 4))
            return self._estimate(name, match.entry.kind, codes,
                                  note=f"the price table lacks {', '.join(missing)}", matched=match.entry.name)
        return self._estimate(name, guess_kind(name), [], note="no catalogue entry matches this name")

    def _estimate(self, name: str, kind: Kind, codes: list[str], note: str, matched: str | None = None) -> TestPrice:
        if self.estimator is not None:
            return TestPrice(name=name, price=round(self.estimator(name, kind), 2), codes=codes,
                             method="llm-estimate", estimated=True, matched=matched, kind=kind, note=note)
        return TestPrice(name=name, price=round(self.prices.median(kind), 2), codes=codes, method="kind-median",
                         estimated=True, matched=matched, kind=kind, note=f"{note}; median {kind} price")

    def cost(self, turns: Sequence[tuple[str, Sequence[str]]]) -> CostBreakdown:
        """The cost of a whole case from its turns (kind, items): visits plus every test ordered (not refused)."""
        visits = visit_count([kind for kind, _ in turns])
        tests = [self.price(item) for kind, items in turns if kind == "tests" for item in items]
        return CostBreakdown(visits=visits, visit_cost=visits * VISIT_PRICE, tests=tests)


PRICE_PATTERN = re.compile(r"\$?\s*([0-9][0-9,]*(?:\.[0-9]+)?)")


def parse_price(reply: str) -> float:
    """The first dollar amount in a pricing model's reply."""
    found = PRICE_PATTERN.search(reply or "")
    if found is None:
        raise ValueError(f"the pricing model gave no price ({reply[:80]!r})")
    return float(found.group(1).replace(",", ""))


def chat_estimator(backend: Any, template: str, on_call: Any = None) -> Estimator:
    """An ``Estimator`` over a chat backend and the ``sdbench_price_estimate`` prompt."""
    from medeval_core.prompts import fill

    def estimate(name: str, kind: str) -> float:
        reply = backend.complete([{"role": "user", "content": fill(template, test=name, kind=kind)}],
                                 on_call=on_call, role="sdbench-pricing")
        return parse_price(reply)

    return estimate


def priced_turns(turns: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(kind, items) of an output's stored actions, refused test orders left out (they are not performed)."""
    out: list[tuple[str, list[str]]] = []
    for turn in turns:
        kind = str(turn.get("kind", ""))
        items = [str(item["request"]) for item in turn.get("items", [])
                 if kind != "tests" or item.get("source") != "REFUSED"]
        out.append((kind, items))
    return out
