"""SDBench costing: the visit rule, price lookup by code through the catalogue, flagged fallbacks (embedding match,
kind median, LLM estimate over HTTP), user charge-masters, and the price cache in the store."""

from __future__ import annotations

import csv

import pytest

from medeval_core.benchmarks.sdbench.catalog import is_vague, load_catalog, name_key
from medeval_core.benchmarks.sdbench.costing import (
    VISIT_PRICE,
    Pricer,
    PriceTableError,
    StorePriceCache,
    chat_estimator,
    load_prices,
    visit_count,
)
from medeval_core.context import current_store
from medeval_core.models.chat import OpenAIChatBackend
from medeval_core.prompts import load_prompt
from tests.fake_openai import FakeOpenAI, Reply


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def cms(data_dir):
    return load_prices(data_dir / "costing" / "cms_prices.csv")


def cms_price(data_dir, code: str) -> float:
    with (data_dir / "costing" / "cms_prices.csv").open() as handle:
        return next(float(r["national_price_usd"]) for r in csv.DictReader(handle) if r["code"] == code)


@pytest.mark.parametrize(("kinds", "visits"), [
    ([], 0),
    (["questions"], 1),
    (["questions", "questions", "questions"], 1),                      # questions only: one visit
    (["tests", "tests"], 0),                                          # tests only: no visit
    (["questions", "tests", "questions", "tests"], 2),                # alternations
    (["tests", "questions", "questions", "tests", "tests", "questions", "diagnosis"], 2),
    (["questions", "diagnosis"], 1),
])
def test_visit_rule(kinds, visits):
    assert visit_count(kinds) == visits


def test_catalogue_size_codes_and_unique_names(catalog, cms):
    assert len(catalog) >= 150
    assert all(code in cms.prices for entry in catalog.entries for code in entry.codes)
    owners: dict[frozenset[str], str] = {}
    for entry in catalog.entries:
        for name in (entry.name, *entry.aliases):
            assert owners.setdefault(name_key(name), entry.name) == entry.name, name
    assert name_key("X-Ray Left Knee") == name_key("knee x-ray")
    assert is_vague("blood work") and is_vague("All labs") and is_vague("imaging") and not is_vague("CBC")


def test_prices_by_code_and_flagged_fallbacks(catalog, cms, data_dir):
    pricer = Pricer(catalog, cms)
    cbc = pricer.price("CBC")
    assert (cbc.codes, cbc.price, cbc.method, cbc.estimated) == (["85025"], cms_price(data_dir, "85025"), "alias",
                                                                  False)
    panel = pricer.price("coagulation profile")
    assert panel.codes == ["85610", "85730"]
    assert panel.price == pytest.approx(cms_price(data_dir, "85610") + cms_price(data_dir, "85730"))
    assert pricer.price("Chest X-Ray").codes == ["71046"] and pricer.price("chest radiograph").price == 32.67
    similar = pricer.price("complete blood cell count")
    assert similar.method == "embedding" and not similar.estimated and similar.codes == ["85025"]
    unknown = pricer.price("Zebrafish motility assay")
    assert unknown.estimated and unknown.method == "kind-median" and unknown.codes == []
    assert unknown.price == pytest.approx(cms.median("lab"))
    breakdown = pricer.cost([("questions", ["q1", "q2"]), ("tests", ["CBC", "Zebrafish motility assay"]),
                             ("questions", ["q3"]), ("diagnosis", [])])
    assert breakdown.visits == 2 and breakdown.visit_cost == 2 * VISIT_PRICE
    assert breakdown.total == pytest.approx(600 + cbc.price + unknown.price)
    assert breakdown.summary()["tests_estimated"] == 1 and breakdown.summary()["tests_priced_by_code"] == 1


def test_a_charge_master_of_its_own_shape(tmp_path, catalog):
    path = tmp_path / "hospital.csv"
    path.write_text("CPT,Gross Charge,Category\n85025,\"$45.00\",lab\n71046,\"1,210.50\",imaging\n")
    table = load_prices(path)
    pricer = Pricer(catalog, table)
    assert pricer.price("complete blood count").price == 45.0
    assert pricer.price("chest x-ray").price == 1210.5
    missing = pricer.price("MRI brain")  # the catalogue knows it, this charge-master lacks its code
    assert missing.estimated and missing.codes == ["70553"] and "lacks 70553" in missing.note
    assert missing.price == pytest.approx(1210.5)  # median imaging price of this table
    (tmp_path / "odd.csv").write_text("name,amount\nCBC,3\n")
    with pytest.raises(PriceTableError, match="needs a code column"):
        load_prices(tmp_path / "odd.csv")
    (tmp_path / "bad.csv").write_text("code,price\n85025,cheap\n")
    with pytest.raises(PriceTableError, match=r"line 2: the price 'cheap' of 85025 is not a number"):
        load_prices(tmp_path / "bad.csv")
    with pytest.raises(PriceTableError, match="does not exist"):
        load_prices(tmp_path / "none.csv")


def test_llm_estimate_over_http_is_flagged_and_cached_in_the_store(catalog, cms):
    with FakeOpenAI(Reply(content="About $412.50 in most settings.")) as server:
        backend = OpenAIChatBackend(base_url=server.url, model="fake-pricer", api_key_env="MEDEVAL_TEST_NO_KEY",
                                    retry_initial_s=0.01, retry_max_s=0.05, timeout_s=10)
        cache = StorePriceCache(current_store())
        pricer = Pricer(catalog, cms, cache, estimator=chat_estimator(backend, load_prompt("sdbench_price_estimate")),
                        estimator_model=backend.model)
        first = pricer.price("Zebrafish motility assay")
        assert (first.price, first.method, first.estimated) == (412.5, "llm-estimate", True)
        assert "Zebrafish motility assay" in server.chat_requests()[0].text()
        again = Pricer(catalog, cms, cache, estimator=chat_estimator(backend, "{test} {kind}"),
                       estimator_model=backend.model)
        assert again.price("zebrafish  motility ASSAY").price == 412.5
        assert len(server.chat_requests()) == 1  # the second pricer found it in the store
        assert again.price("CBC").method == "alias" and len(server.chat_requests()) == 1
    offline = Pricer(catalog, cms, cache)
    assert offline.price("Zebrafish motility assay").method == "kind-median"  # another (method, model) key
