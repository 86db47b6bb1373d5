"""The plan as one self-contained HTML page: the recommendation, a map of the users and the options (and the
way between them), the CDF of time to first token per option, where that time goes (a waterfall per option),
and the tables. Everything it needs is inside it: the dashboard's vendored uPlot, topojson-client and
Natural Earth's land outline, inlined, so it opens offline and can be mailed."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from firsttoken.geo import paths
from firsttoken.plan.cells import COST_COLUMNS, FELT_COLUMNS, cost_cells, duration, felt_cells, price_notes
from firsttoken.plan.scenario import Option, Scenario
from firsttoken.plan.simulate import routes_to
from firsttoken.plan.summary import PHASES, OptionSummary, recommend

# Distinct on white and in print; the recommended option is drawn thicker rather than in its own colour.
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
PHASE_COLOURS = {"handshakes": "#e45756", "floor": "#4c78a8", "distance tax": "#9ecae9", "last mile": "#72b7b2",
                 "slow start": "#ff9da6", "gateway": "#9d755d", "front end": "#bab0ac", "cold start": "#b279a2",
                 "queue": "#f58518", "prefill": "#54a24b"}
_VENDOR = resources.files("firsttoken.dashboard") / "assets" / "vendor"
_ASSETS = resources.files("firsttoken.plan") / "assets"

def _cost_and_speed(summaries: list[OptionSummary], colours: dict[str, str], best: str) -> str:
    """Each option as a point: what it costs a month across, its p95 time to first token up: down and to
    the left is better, and the options nothing beats on both are the ones worth a look."""
    width, height, left, bottom, top, right = 980, 360, 70, 40, 12, 240
    usd_step, s_step = _tick(max(s.usd_per_month for s in summaries)), _tick(max(s.ttft.p95 for s in summaries))
    most_usd, most_s = usd_step * 4, s_step * 4
    x = lambda usd: left + usd / most_usd * (width - left - right)  # noqa: E731
    y = lambda seconds: height - bottom - seconds / most_s * (height - bottom - top)  # noqa: E731
    parts = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" class="axis"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" class="axis"/>']
    for step in range(5):
        usd, seconds = usd_step * step, s_step * step
        parts.append(f'<text x="{x(usd):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f"${usd:,.0f}</text>")
        parts.append(f'<text x="{left - 6}" y="{y(seconds) + 4:.1f}" text-anchor="end">{duration(seconds)}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
                 "cost a month</text>")
    parts.append(f'<text x="{left}" y="{top - 2}">TTFT p95</text>')
    for s in summaries:
        cx, cy = x(s.usd_per_month), y(s.ttft.p95)
        radius = 8 if s.name == best else 5
        parts.append(f'<circle class="point" cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{colours[s.name]}">'
                     f"<title>{html.escape(s.name)}: {duration(s.ttft.p95)}, ${s.usd_per_month:,.0f} a month"
                     "</title></circle>")
        parts.append(f'<text x="{cx + 10:.1f}" y="{cy + 4:.1f}">{html.escape(s.name[:40])}</text>')
    return f'<svg class="scatter" viewBox="0 0 {width} {height}" width="100%">{"".join(parts)}</svg>'


def _tick(most: float) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) of which four reach past `most`."""
    if most <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(most / 4))
    return next(power * m for m in (1, 2, 2.5, 5, 10) if power * m * 4 >= most)


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1d2430; margin: 2rem auto; max-width: 1000px; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2.2rem; }
.lede { font-size: 1.2rem; background: #f2f6fb; border-left: 4px solid #1f77b4; padding: .8rem 1rem; }
.muted { color: #5b6575; } table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: .35rem .5rem; border-bottom: 1px solid #e3e8ef; text-align: right; }
th:first-child, td:first-child { text-align: left; } tr.best td { font-weight: 600; }
.swatch { display: inline-block; width: .8em; height: .8em; margin-right: .4em; vertical-align: -0.05em; }
#map { width: 100%; height: auto; display: block; } .sea { fill: #eef3f9; }
.land { fill: #d9dfe8; stroke: #c5cdd9; stroke-width: .5px; vector-effect: non-scaling-stroke; }
.way { fill: none; opacity: .45; } .way.best { opacity: .9; } .user { fill: #1d2430; fill-opacity: .75; }
.option, .gateway { stroke: #fff; stroke-width: 1px; vector-effect: non-scaling-stroke; }
text { paint-order: stroke; stroke: #eef3f9; stroke-width: 3px; fill: #1d2430; vector-effect: non-scaling-stroke; }
.waterfall text, .scatter text { stroke: none; font-size: 11px; } .u-legend { font-size: 13px; }
.scatter .axis { stroke: #9aa5b5; } .scatter .point { stroke: #fff; stroke-width: 1.5px; }
.u-legend .u-marker { width: .8em; height: .8em; display: inline-block; margin-right: .3em; }
.u-legend .u-series:first-child { display: none; }
"""


def _waterfall(summaries: list[OptionSummary], colours: dict[str, str]) -> str:
    """A bar per option: the parts of its mean time to first token, one after the other, to scale."""
    longest = max(sum(s.phases.values()) for s in summaries) or 1.0
    label_w, bar_w, row_h = 260, 660, 30
    rows = []
    for i, s in enumerate(summaries):
        y, x = i * row_h + 18, float(label_w)
        rows.append(f'<text x="0" y="{y + 14}"><tspan fill="{colours[s.name]}">■</tspan> {html.escape(s.name)}</text>')
        for phase in PHASES:
            width = s.phases[phase] / longest * bar_w
            if width <= 0:
                continue
            title = f"{phase}: {duration(s.phases[phase])}"
            rows.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="20" fill="{PHASE_COLOURS[phase]}">'
                        f"<title>{html.escape(title)}</title></rect>")
            x += width
        rows.append(f'<text x="{x + 6:.1f}" y="{y + 14}">{duration(sum(s.phases.values()))}</text>')
    legend = " ".join(f'<tspan fill="{c}">■</tspan> {p}' for p, c in PHASE_COLOURS.items())
    height = len(summaries) * row_h + 40
    return (f'<svg class="waterfall" viewBox="0 0 980 {height}" width="100%">'
            f'<text x="{label_w}" y="10">{legend}</text>{"".join(rows)}</svg>')


def _options_table(summaries: list[OptionSummary], colours: dict[str, str], best: str, kind: str,
                   columns: tuple[str, ...], cells: Callable[[OptionSummary], list[str]]) -> str:
    head = ("option", *columns)
    rows = []
    for s in sorted(summaries, key=lambda s: s.ttft.p95):
        row = [f'<span class="swatch" style="background:{colours[s.name]}"></span>{html.escape(s.name)}',
               *map(html.escape, cells(s))]
        rows.append(f'<tr class="{"best" if s.name == best else ""}">' + "".join(f"<td>{c}</td>" for c in row)
                    + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    return f'<table class="options {kind}"><thead><tr>{header}</tr></thead><tbody>' + "".join(rows) + "</tbody></table>"


def _ways(scenario: Scenario, option: Option) -> list[list[tuple[float, float]]]:
    """For each city, the [lon, lat] points its requests pass on the way to the option: the cable hubs of
    each leg, and the gateway between the legs where there is one."""
    far = scenario.way(option.gateway.where, option.where, 0.0) if option.gateway else None
    ways = []
    for city, near in zip(scenario.users.cities, routes_to(scenario, option), strict=True):
        places = [city.where, *map(paths.hub, near.via)]
        if option.gateway is not None and far is not None:
            places += [option.gateway.where, *map(paths.hub, far.via)]
        ways.append([(place.lon, place.lat) for place in [*places, option.where]])
    return ways


def _notes(notes: list[str]) -> str:
    return "".join(f"<p class=muted>[{n}] {html.escape(source)}</p>" for n, source in enumerate(notes, start=1))


def _cities_table(scenario: Scenario, summaries: list[OptionSummary]) -> str:
    head = "".join(f"<th>{html.escape(s.name)}</th>" for s in summaries)
    rows = []
    for i, city in enumerate(scenario.users.cities):
        each = "".join(f"<td>{duration(s.cities[i].ttft.p95)}<br><span class=muted>light "
                       f"{s.cities[i].floor_ms:.0f} ms</span></td>" for s in summaries)
        rows.append(f"<tr><td>{html.escape(city.place)}</td>{each}</tr>")
    return (f'<table class="cities"><thead><tr><th>TTFT p95</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def render(scenario: Scenario, summaries: list[OptionSummary]) -> str:
    colours = {s.name: COLOURS[i % len(COLOURS)] for i, s in enumerate(summaries)}
    best = min(summaries, key=lambda s: s.ttft.p95).name
    notes = price_notes(summaries)
    plan = {
        "users": [{"name": c.place, "lat": c.where.lat, "lon": c.where.lon,
                   "share": c.share / sum(u.share for u in scenario.users.cities)} for c in scenario.users.cities],
        "options": [{"name": o.name, "lat": o.where.lat, "lon": o.where.lon, "color": colours[o.name],
                     "best": o.name == best, "ttft_cdf": s.ttft_cdf, "ways": _ways(scenario, o),
                     "gateway": ({"lat": o.gateway.where.lat, "lon": o.gateway.where.lon} if o.gateway else None)}
                    for o, s in zip(scenario.options, summaries, strict=True)],
    }
    users = scenario.users
    facts = (f"{users.rate_per_s:g} requests a second from {len(users.cities)} cities, {scenario.workload.described}, "
             f"{'streamed' if scenario.workload.stream else 'whole answers'}; {scenario.duration_s:g} s of traffic "
             f"simulated through the simulated region's engine")
    script = lambda text: "<script>" + text.replace("</script", "<\\/script") + "</script>"  # noqa: E731
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(scenario.name)}: firsttoken plan</title>",
        f"<style>{(_VENDOR / 'uPlot.min.css').read_text()}{STYLE}</style>",
        script((_VENDOR / "uPlot.iife.min.js").read_text()), script((_VENDOR / "topojson-client.min.js").read_text()),
        "</head><body>",
        f"<h1>{html.escape(scenario.name)}</h1><p class=muted>{html.escape(facts)}</p>",
        f'<p class="lede">{html.escape(recommend(summaries))}</p>',
        "<h2>Where the users and the options are</h2>",
        '<p class=muted>Circles: the users, by their share of the traffic. Squares: the options; triangles: their '
        "gateways. Lines: the way each city's requests take, along the cables that carry them; the recommended "
        "option's is thicker.</p>",
        '<svg id="map" role="img" aria-label="map of users and options"></svg>',
        "<h2>Time to first token, as the users feel it</h2>",
        "<p class=muted>For each option, the time within which each share of the requests saw its first token.</p>",
        '<div id="cdf"></div>',
        "<h2>Where the first token's time goes</h2><p class=muted>The mean of each part, to scale.</p>",
        _waterfall(summaries, colours),
        "<h2>What each costs, against how fast it answers</h2>",
        "<p class=muted>Down and to the left is better: a faster first token for less a month. The recommended "
        "option's point is larger.</p>",
        _cost_and_speed(summaries, colours, best),
        "<h2>The options, as the users feel them</h2>",
        _options_table(summaries, colours, best, "felt", FELT_COLUMNS, felt_cells),
        "<h2>What they cost</h2>",
        _options_table(summaries, colours, best, "costs", COST_COLUMNS, lambda s: cost_cells(s, notes)),
        _notes(notes),
        "<h2>By city</h2>", _cities_table(scenario, summaries),
        "<p class=muted>Map: Natural Earth 1:110m land (public domain), via world-atlas. Charts: uPlot.</p>",
        script("const PLAN = " + json.dumps(plan) + ";\nconst LAND = " + (_VENDOR / "land-110m.json").read_text()
               + ";"),
        script((_ASSETS / "report.js").read_text()),
        "</body></html>",
    ])


def write(path: str | Path, scenario: Scenario, summaries: list[OptionSummary]) -> Path:
    target = Path(path)
    target.write_text(render(scenario, summaries), encoding="utf-8")
    return target
