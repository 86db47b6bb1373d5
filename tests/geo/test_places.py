"""Places by name, code or coordinates; unknown names answered with the closest ones."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from firsttoken.geo.places import GeoError, cities, regions, resolve


def test_cities_pick_the_most_populous_unless_a_country_is_given() -> None:
    lagos = resolve("Lagos")
    assert lagos.name == "Lagos, NG" and lagos.lat == pytest.approx(6.45, abs=0.1)
    assert resolve("san jose").name == "San Jose, US" and resolve("san jose, cr").name == "San José, CR"
    assert resolve("frankfurt").name == "Frankfurt am Main, DE" and resolve("bombay").name == "Mumbai, IN"
    assert resolve("SÃO PAULO").name == resolve("sao paulo").name == "São Paulo, BR"
    assert resolve("  nairobi ").lon == pytest.approx(36.82, abs=0.1)


def test_regions_by_code_or_bare_id_and_coordinates() -> None:
    ashburn = resolve("aws:us-east-1")
    assert ashburn.code == "aws:us-east-1" and ashburn.lat == pytest.approx(39.0, abs=0.5)
    assert resolve("AWS:US-EAST-1") == ashburn
    assert resolve("af-south-1").code == "aws:af-south-1"  # unique without its provider
    point = resolve("6.45, 3.39")
    assert (point.lat, point.lon, point.code) == (6.45, 3.39, None)


@pytest.mark.parametrize("text, hint", [
    ("lagoss", "Lagos, NG"), ("Nairobbi", "Nairobi, KE"), ("aws:us-east-9", "aws:us-east-1"),
    ("gcp:europe-west99", "gcp:europe-west"), ("95,10", "±90"), ("", "city name"),
])
def test_unknown_places_say_what_is_close(text: str, hint: str) -> None:
    with pytest.raises(GeoError) as error:
        resolve(text)
    assert hint in str(error.value)


AFRICAN_CAPITALS = [  # every African state's seat of government, as GeoNames names it (Victoria alone is Hong Kong's)
    "Abuja", "Accra", "Addis Ababa", "Algiers", "Antananarivo", "Asmara", "Bamako", "Bangui", "Banjul",
    "Bissau", "Brazzaville", "Bujumbura", "Cairo", "Conakry", "Dakar", "Djibouti", "Dodoma", "Freetown",
    "Gaborone", "Harare", "Juba", "Kampala", "Khartoum", "Kigali", "Kinshasa", "Libreville", "Lilongwe",
    "Lomé", "Luanda", "Lusaka", "Malabo", "Maputo", "Maseru", "Mbabane", "Mogadishu", "Monrovia", "Moroni",
    "Nairobi", "N'Djamena", "Niamey", "Nouakchott", "Ouagadougou", "Port Louis", "Porto-Novo", "Praia",
    "Pretoria", "Rabat", "São Tomé", "Tripoli", "Tunis", "Victoria, SC", "Windhoek", "Yamoussoukro", "Yaoundé",
]
AFRICAN_CITIES = ["Lagos", "Kano", "Ibadan", "Johannesburg", "Cape Town", "Durban", "Casablanca", "Alexandria",
                  "Abidjan", "Douala", "Mombasa", "Dar es Salaam", "Kumasi", "Port Harcourt", "Lubumbashi"]


def test_every_african_capital_and_major_city_is_known() -> None:
    for name in AFRICAN_CAPITALS + AFRICAN_CITIES:
        place = resolve(name)
        assert -35 < place.lat < 38 and -26 < place.lon < 58, name  # in Africa
    assert len(cities()) >= 200


def test_the_shipped_regions_cover_every_big_cloud_and_africa() -> None:
    table = regions()
    providers = {code.split(":")[0] for code in table}
    assert {"aws", "gcp", "azure", "oracle", "api"} <= providers
    for code in ("aws:af-south-1", "gcp:africa-south1", "azure:southafricanorth", "api:openai", "api:anthropic"):
        assert code in table
    with resources.files("firsttoken.geo").joinpath("regions.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(table)  # no code given twice
    assert all(-90 <= float(r["lat"]) <= 90 and -180 <= float(r["lon"]) <= 180 for r in rows)
    # continents right: Cape Town is south of the equator and east of Greenwich, Virginia north-west
    assert table["aws:af-south-1"].lat < -30 and table["aws:af-south-1"].lon > 15
    assert table["aws:us-east-1"].lat > 35 and table["aws:us-east-1"].lon < -75
