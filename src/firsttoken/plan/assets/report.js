// The plan's report: the map (users, options, the way between them) and the CDFs of time to first token.
// PLAN and LAND are set by the page; uPlot and topojson-client are inlined before this script.
(() => {
  "use strict";
  const W = 960, H = 480, SOUTH = -60;
  const project = (lon, lat) => [((lon + 180) / 360) * W, ((90 - lat) / 180) * H];
  const NS = "http://www.w3.org/2000/svg";
  const el = (name, attrs, text) => {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text) node.textContent = text;
    return node;
  };
  const path = (points) => points.map(([lon, lat], i) => {
    const [x, y] = project(lon, lat);
    return `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
  }).join("");

  function land(geo) {  // rings as one path; Antarctica left out
    let d = "";
    for (const feature of geo.features) {
      const g = feature.geometry;
      const polygons = g.type === "Polygon" ? [g.coordinates] : g.coordinates;
      for (const polygon of polygons) {
        for (const ring of polygon) {
          if (ring.every(([, lat]) => lat < SOUTH)) continue;
          d += path(ring) + "Z";
        }
      }
    }
    return d;
  }

  function drawMap() {
    const map = document.getElementById("map");
    const places = [...PLAN.users, ...PLAN.options, ...PLAN.options.filter((o) => o.gateway).map((o) => o.gateway)];
    const ways = PLAN.options.flatMap((o) => o.ways).flat();  // [lon, lat] along the cables
    const lons = [...places.map((p) => p.lon), ...ways.map(([lon]) => lon)];
    const lats = [...places.map((p) => p.lat), ...ways.map(([, lat]) => lat)];
    const [x0, y0] = project(Math.min(...lons) - 15, Math.max(...lats) + 12);
    const [x1, y1] = project(Math.max(...lons) + 15, Math.max(Math.min(...lats) - 12, SOUTH));
    map.setAttribute("viewBox", `${x0} ${y0} ${x1 - x0} ${y1 - y0}`);
    map.append(el("rect", { class: "sea", x: 0, y: 0, width: W, height: H }));
    map.append(el("path", { class: "land", d: land(topojson.feature(LAND, LAND.objects.land)) }));
    const scale = (x1 - x0) / 600;  // marks keep their size whatever the crop
    for (const option of PLAN.options) {
      for (const points of option.ways) {  // each city's way: through the cable hubs, and the gateway
        map.append(el("path", { class: option.best ? "way best" : "way", d: path(points), stroke: option.color,
                                "stroke-width": (option.best ? 2.2 : 0.8) * scale }));
      }
    }
    for (const user of PLAN.users) {
      const [x, y] = project(user.lon, user.lat);
      map.append(el("circle", { class: "user", cx: x, cy: y, r: (3 + 9 * Math.sqrt(user.share)) * scale }));
      map.append(el("text", { x: x + 8 * scale, y: y - 6 * scale, "font-size": 11 * scale }, user.name));
    }
    for (const option of PLAN.options) {
      const [x, y] = project(option.lon, option.lat);
      const s = 6 * scale;
      map.append(el("rect", { class: "option", x: x - s, y: y - s, width: 2 * s, height: 2 * s, fill: option.color }));
      if (option.gateway) {
        const [gx, gy] = project(option.gateway.lon, option.gateway.lat);
        map.append(el("polygon", { class: "gateway", fill: option.color,
                                   points: `${gx},${gy - s} ${gx + s},${gy + s} ${gx - s},${gy + s}` }));
      }
    }
  }

  function drawCdf() {
    const box = document.getElementById("cdf");
    const shares = PLAN.options[0].ttft_cdf.map((_, i) => i / (PLAN.options[0].ttft_cdf.length - 1));
    const series = [{}];
    const data = [shares];
    // uPlot wants one x for all series: each option's CDF is its percentiles, so x is the share and the
    // axes are swapped by drawing time on y; read it as "p-th percentile of the requests waited y".
    for (const option of PLAN.options) {
      series.push({ label: option.name, stroke: option.color, width: option.best ? 3 : 1.5,
                    value: (_, v) => (v == null ? "—" : `${(v * 1000).toFixed(0)} ms`) });
      data.push(option.ttft_cdf);
    }
    const chart = new uPlot({
      width: Math.min(box.clientWidth || 900, 960), height: 360, series,
      scales: { x: { time: false, range: [0, 1] }, y: { range: (_, lo, hi) => [0, hi * 1.05] } },
      axes: [{ label: "share of requests", values: (_, ticks) => ticks.map((t) => `${Math.round(t * 100)} %`) },
             { label: "time to first token", values: (_, ticks) => ticks.map((t) => `${(t * 1000).toFixed(0)} ms`),
               size: 70 }],
      legend: { live: true },
    }, data, box);
    window.planChart = chart;
  }

  drawMap();
  drawCdf();
  document.body.dataset.drawn = "yes";
})();
