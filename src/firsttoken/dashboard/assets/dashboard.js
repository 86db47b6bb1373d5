/* firsttoken dashboard: where each request's wait went, how far away its upstream is, and the last
   15 minutes. Plain script, no build step. It talks only to the gateway that served it
   (/dashboard/api/*) and loads only the gateway's own assets, so it works offline. */
(() => {
  "use strict";

  // ---------------------------------------------------------------------------------------------
  // Settings

  const API = "/dashboard/api";
  const LAND_URL = "/dashboard/assets/vendor/land-110m.json";
  const KEY_STORE = "firsttoken.adminKey";
  const WINDOW_S = 15 * 60;
  const BUCKET_S = 10;
  const BUCKETS = WINDOW_S / BUCKET_S;
  const MAX_ROWS = 200;
  const MAX_RECORDS = 20000; // journeys kept for the charts: bounds memory and each second's recount
  const MIN_SCALE_MS = 100; // a waterfall scale never shorter than this, so cache hits look as small as they are
  const COLD_MARK_MS = 200;
  const ROWS_EVERY_MS = 250; // the table is redrawn at most this often…
  const CHARTS_EVERY_MS = 1000; // …and the charts, cards and breakdown at most once a second
  const SPEND_EVERY_MS = 3000; // the spend panel's report (a query of the ledger's days)
  const BACKOFF_MIN_MS = 1000;
  const BACKOFF_MAX_MS = 15000;
  const STALL_MS = 20000; // the feed sends state every 2 s: this long without a byte means a dead connection
  const CHART_H = 180;
  const HIST_BINS = 10; // similarity 0.80–1.00 by 0.02
  const HIST_FROM = 0.8;

  // The waterfall's phases, in the order a request lives them. Each id names its colour in dashboard.css
  // (.ph-<id>), so a phase looks the same in the legend, the table, the breakdown and the details.
  const PHASES = [
    { id: "client", label: "client rtt", hint: "the client's own network round trip to the gateway" },
    { id: "gateway", label: "gateway", hint: "inside firsttoken: parse, auth, cache lookup, route" },
    { id: "pool", label: "pool", hint: "waiting for a free connection to the upstream" },
    { id: "connect", label: "connect", hint: "DNS + TCP + TLS of a new upstream connection" },
    { id: "floor", label: "floor", hint: "light in fibre, there and back: the part of distance no one can remove" },
    { id: "tax", label: "distance tax", hint: "the round trip beyond the floor: routing detours and congestion" },
    { id: "rtt", label: "round trip", hint: "the round trip, where the floor is unknown (no location or region)" },
    { id: "cold", label: "cold start", hint: "the provider loading the model back" },
    { id: "queue", label: "queue+prefill", hint: "the provider's queue and prompt processing" },
    { id: "provider", label: "provider", hint: "the provider's time, not split into queue, prefill and generation" },
    { id: "decode", label: "decode", hint: "first token → last token" },
    { id: "other", label: "other", hint: "the rest of e2e: relaying, and gaps between the measured phases" },
  ];
  const PHASE = Object.fromEntries(PHASES.map((p) => [p.id, p]));
  // What the breakdown groups phases into, to say in words where the wait goes.
  const CAUSES = [
    { label: "distance", ids: ["floor", "tax", "rtt"] },
    { label: "the provider", ids: ["cold", "queue", "provider"] },
    { label: "handshakes", ids: ["connect"] },
    { label: "the pool", ids: ["pool"] },
    { label: "the gateway", ids: ["gateway"] },
    { label: "the client's network", ids: ["client"] },
  ];

  // ---------------------------------------------------------------------------------------------
  // State

  const $ = (selector, root = document) => root.querySelector(selector);
  const ui = {};
  let state = null; // the last /state
  let clockOffsetS = 0; // gateway clock − this clock, when /state says its time
  let generation = 0; // bumped on every (re)start: an older feed loop sees it and stops
  let feedAbort = null;
  let historyLoaded = false;

  const rows = []; // journeys in the table, newest first (≤ MAX_ROWS)
  const rowEls = new Map(); // request id → <tr>
  const rowTotals = new Map(); // request id → waterfall length (ms)
  let pendingRows = []; // arrived, not yet drawn
  let rowsTimer = 0;
  let selectedId = null;

  let records = []; // compact journeys for the charts, cards and breakdown (≤ MAX_RECORDS)
  const seen = new Set(); // ids of `records`, so history, recent and the feed never count one twice
  let recordsDirty = true;
  let lastAggregate = 0;
  const arrivedFor = new Set(); // upstreams with journeys since the last tick: their arcs pulse

  // ---------------------------------------------------------------------------------------------
  // Small helpers

  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));
  const nowS = () => Date.now() / 1000 + clockOffsetS;

  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    setProps(el, props);
    for (const kid of kids.flat()) if (kid != null && kid !== false) el.append(kid);
    return el;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function svg(tag, props, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    setProps(el, props);
    for (const kid of kids.flat()) if (kid != null && kid !== false) el.append(kid);
    return el;
  }

  function setProps(el, props) {
    for (const [key, value] of Object.entries(props || {})) {
      if (value == null || value === false) continue;
      if (key === "text") el.textContent = value;
      else if (key === "class") el.setAttribute("class", value);
      else el.setAttribute(key, value === true ? "" : String(value));
    }
  }

  /** Milliseconds for people: "0.42 ms", "8.1 ms", "139 ms", "1.24 s". */
  function fmtMs(ms) {
    if (ms == null) return "—";
    if (ms < 1) return `${ms.toFixed(2)} ms`;
    if (ms < 10) return `${ms.toFixed(1)} ms`;
    if (ms < 1000) return `${Math.round(ms)} ms`;
    return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  }

  /** Always in ms, for tooltips ("phase: N ms"). */
  const fmtMsExact = (ms) => `${Math.abs(ms) < 1 ? ms.toFixed(2) : Math.abs(ms) < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;

  function fmtSeconds(s) {
    if (s == null) return "—";
    if (s < 10) return `${s.toFixed(2)} s`;
    if (s < 100) return `${s.toFixed(1)} s`;
    return `${Math.round(s).toLocaleString()} s`;
  }

  const pad2 = (n) => String(n).padStart(2, "0");
  function fmtClock(unixS) {
    const d = new Date(unixS * 1000);
    return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  }

  function quantile(sorted, q) {
    if (!sorted.length) return null;
    const at = (sorted.length - 1) * q;
    const lo = Math.floor(at);
    const hi = Math.ceil(at);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
  }
  const median = (values) => quantile(values.slice().sort((a, b) => a - b), 0.5);

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // ---------------------------------------------------------------------------------------------
  // Reading a journey

  const failed = (j) => (j.status || 0) >= 400 || j.error != null;
  const coldMs = (j) => num(j.upstream_timing && j.upstream_timing.cold) || 0;

  function similarityOf(cache) {
    const m = /similarity=([0-9.]+)/.exec(cache || "");
    return m ? Number(m[1]) : null;
  }

  /** What the edge cache did: "hit", "semantic", "joined", "miss" or "bypass". */
  function cacheKind(cache) {
    const c = cache || "bypass";
    if (c.startsWith("semantic-hit")) return "semantic";
    if (c.includes("joined")) return "joined";
    if (c.startsWith("hit")) return "hit";
    return c === "miss" ? "miss" : "bypass";
  }

  /**
   * The waterfall: [phase id, ms, title?] in the order the request lived them. ttfb is split into the
   * round trip (floor + distance tax) and the provider's part (cold start + queue+prefill); what the
   * journey cannot split is drawn as one segment rather than guessed.
   */
  function segments(j) {
    const p = j.phases || {};
    const out = [];
    const add = (id, ms, title) => {
      if (ms != null && ms > 0) out.push([id, ms, title]);
    };
    add("client", num(p.client_rtt));
    add("gateway", num(p.gateway));
    add("pool", num(p.pool));
    add("connect", num(p.connect));
    const rtt = num(p.rtt);
    const floor = num(p.floor);
    if (rtt != null && floor != null) {
      add("floor", Math.min(floor, rtt));
      add("tax", Math.max(rtt - floor, 0));
    } else {
      add("rtt", rtt);
    }
    const queued = num(p["queue+prefill"]);
    const ttfb = num(p.ttfb);
    if (queued != null) {
      const cold = Math.min(coldMs(j), queued);
      add("cold", cold);
      add("queue", queued - cold);
    } else if (ttfb != null) {
      // A whole answer whose upstream did not say how its time split, or a round trip not measured.
      add("provider", ttfb - (rtt || 0), rtt == null ? "upstream (round trip and provider, not split)" : null);
    }
    add("decode", num(p.decode));
    const e2e = num(p.e2e);
    if (e2e != null) {
      const inside = out.reduce((sum, [id, ms]) => (id === "client" ? sum : sum + ms), 0);
      if (e2e - inside > Math.max(0.5, e2e * 0.01)) add("other", e2e - inside);
    }
    return out;
  }

  /** The badges: [text, kind, title]. Text always says it: colour is only a second signal. */
  function marks(j) {
    const out = [];
    const kind = cacheKind(j.cache);
    if (kind === "semantic") {
      const s = similarityOf(j.cache);
      out.push([s == null ? "semantic" : `semantic ${s.toFixed(2)}`, "semantic",
        `answered from the edge cache: a question asked before in other words${s == null ? "" : ` (similarity ${s})`}`]);
    } else if (kind === "joined") {
      out.push(["joined", "joined", "took the answer of an identical request already in flight"]);
    } else if (kind === "hit") {
      out.push(["hit", "hit", "answered from the edge cache"]);
    }
    const hedge = j.hedge || "";
    const hedgeWon = hedge.startsWith("hedge-of=");
    if (hedgeWon) out.push(["hedge won", "hedge", `a hedge raced ${hedge.slice(9)} and answered first`]);
    else if (hedge.startsWith("hedged-by=")) out.push(["hedged", "hedged", `${hedge.slice(10)} raced it as a hedge and lost`]);
    // A winning hedge counts as an attempt of its own: only attempts beyond it are retries.
    const attempts = j.attempts || 0;
    if (attempts > (hedgeWon ? 2 : 1)) out.push([`retried ×${attempts}`, "retry", `${attempts} attempts upstream`]);
    const cold = coldMs(j);
    if (cold >= COLD_MARK_MS) out.push(["cold start", "cold", `the provider loaded the model first: ${fmtMs(cold)}`]);
    if (j.error) out.push([j.error.code || "error", "error", j.error.message || ""]);
    return out;
  }

  function badge([text, kind, title]) {
    return h("span", { class: `badge b-${kind}`, title: title || null, text });
  }

  /** A journey as the charts need it: small, so 20 000 of them stay cheap to recount every second. */
  function toRecord(j, id) {
    const p = j.phases || {};
    const kind = cacheKind(j.cache);
    const connect = num(p.connect);
    // History rows have no handshake: a connection that was not reused is new there too.
    const isNew = j.handshake != null || (j.reused_connection === false && connect != null && connect > 0);
    const wait = [];
    for (const [id, ms] of segments(j)) if (id !== "decode" && id !== "other") wait.push([id, ms]);
    return {
      id,
      at: num(j.at) ?? nowS(),
      // Past 200 journeys a second the feed sends a uniform sample; each stands for `weight` journeys.
      w: num(j.weight) != null && j.weight > 0 ? j.weight : 1,
      up: j.upstream || "",
      model: j.model || "",
      // The charts' series: each upstream and model that answered (the route), as "virginia/llama-3.1-8b".
      series: j.route && j.upstream ? j.route : j.upstream || "",
      ttft: num(p.ttft),
      e2e: num(p.e2e),
      itl: num(j.itl_max_ms),
      tps: num(j.tokens_per_s),
      failed: failed(j),
      cache: kind,
      similarity: kind === "semantic" ? similarityOf(j.cache) : null,
      hedge: (j.hedge || "").startsWith("hedge-of=") ? "won" : j.hedge ? "lost" : "",
      cold: coldMs(j) >= COLD_MARK_MS,
      reused: j.reused_connection === true,
      newConnect: isNew && connect != null ? connect : null,
      wait,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // The API: every call carries the admin key, when there is one

  class Locked extends Error {}
  class NotFound extends Error {}

  function authHeaders() {
    const key = sessionStorage.getItem(KEY_STORE);
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  async function errorMessage(response) {
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (_) {
      // not JSON: the status line says enough
    }
    return `HTTP ${response.status}`;
  }

  async function api(path, init = {}) {
    const response = await fetch(API + path, {
      ...init,
      headers: { Accept: "application/json", ...authHeaders() },
      cache: "no-store",
    });
    if (response.status === 401 || response.status === 403) throw new Locked(await errorMessage(response));
    if (response.status === 404) throw new NotFound(`${path}: ${await errorMessage(response)}`);
    if (!response.ok) throw new Error(`${path}: ${await errorMessage(response)}`);
    return response;
  }

  const getJson = async (path) => (await api(path)).json();

  // ---------------------------------------------------------------------------------------------
  // The feed: a snapshot, then the event stream, again after any break

  function setFeed(status) {
    ui.feed.textContent = status;
    ui.feed.dataset.state = status;
  }

  function start() {
    generation += 1;
    if (feedAbort) feedAbort.abort();
    feedLoop(generation);
  }

  async function feedLoop(gen) {
    let delay = BACKOFF_MIN_MS;
    while (gen === generation) {
      try {
        await loadSnapshot();
        if (gen !== generation) return;
        showBoard(); // the key (if any) was taken
        await readEvents(gen, () => {
          delay = BACKOFF_MIN_MS; // the stream works: the next break starts the backoff again
        });
      } catch (err) {
        if (gen !== generation) return;
        if (err instanceof Locked) {
          lock(err.message);
          return;
        }
        // A network failure or an HTTP error: retried below, after the backoff.
      }
      if (gen !== generation) return;
      setFeed("reconnecting");
      await sleep(delay);
      delay = Math.min(delay * 2, BACKOFF_MAX_MS);
    }
  }

  /** State and the newest journeys; the on-disk history once. After a break this fills the gap. */
  async function loadSnapshot() {
    // Asked first, and answered with a 200 either way: a refused key never shows as a 401 on the console.
    const auth = await getJson("/auth");
    if (auth.locked) throw new Locked((auth.error && auth.error.message) || "locked");
    applyState(await getJson("/state"));
    const recent = await getJson(`/recent?limit=${MAX_ROWS}`);
    if (!historyLoaded) {
      try {
        const since = Math.floor(nowS() - WINDOW_S);
        const history = await getJson(`/history?since=${since}`);
        ingest(history.data || [], false);
        historyLoaded = true;
      } catch (err) {
        if (err instanceof Locked) throw err;
        // No history (no journey log): the charts start from the live journeys instead.
      }
    }
    ingest((recent.data || []).slice().reverse(), true);
  }

  async function readEvents(gen, onEvent) {
    feedAbort = new AbortController();
    const abort = feedAbort;
    const response = await api("/events", { signal: abort.signal });
    if (!response.body) throw new Error("no stream");
    setFeed("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parse = sseParser((event, data) => {
      onEvent();
      handleEvent(event, data);
    });
    let stall = setTimeout(() => abort.abort(), STALL_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || gen !== generation) break;
        clearTimeout(stall);
        stall = setTimeout(() => abort.abort(), STALL_MS);
        parse(value);
      }
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    } finally {
      clearTimeout(stall);
      abort.abort(); // lets the connection go, whichever way the loop ended
    }
  }

  /** Server-sent events, parsed by hand: EventSource cannot send the Authorization header. */
  function sseParser(onEvent) {
    let buffer = "";
    let event = "";
    let data = [];
    return (chunk) => {
      buffer += chunk;
      let from = 0;
      for (let nl = buffer.indexOf("\n", from); nl >= 0; nl = buffer.indexOf("\n", from)) {
        let line = buffer.slice(from, nl);
        from = nl + 1;
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (data.length) onEvent(event || "message", data.join("\n"));
          event = "";
          data = [];
        } else if (line[0] !== ":") {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") event = value;
          else if (field === "data") data.push(value);
        }
      }
      buffer = buffer.slice(from);
    };
  }

  function handleEvent(event, data) {
    let payload;
    try {
      payload = JSON.parse(data);
    } catch (_) {
      return; // a malformed event is skipped, not fatal
    }
    if (event === "journey") ingest([payload], true);
    else if (event === "state") applyState(payload);
  }

  // ---------------------------------------------------------------------------------------------
  // Lock

  function lock(message) {
    generation += 1;
    if (feedAbort) feedAbort.abort();
    sessionStorage.removeItem(KEY_STORE); // a key that was refused is not worth sending again
    setFeed("locked");
    lockSays(message || "This dashboard needs the admin key.", "error");
    ui.board.hidden = true;
    closeDetail();
    ui.lock.hidden = false;
    ui.unlock.disabled = false;
    ui.keyInput.value = "";
    ui.keyInput.focus();
  }

  function lockSays(text, kind) {
    ui.lockMessage.textContent = text;
    ui.lockMessage.dataset.kind = kind;
  }

  /** Tries the key: the lock stays up until the gateway takes it (or comes back with why not). */
  function unlock(event) {
    event.preventDefault();
    const key = ui.keyInput.value.trim();
    if (!key) {
      lockSays("Enter the admin key.", "error");
      ui.keyInput.focus();
      return;
    }
    sessionStorage.setItem(KEY_STORE, key);
    lockSays("Checking the key…", "info");
    ui.unlock.disabled = true;
    setFeed("reconnecting");
    start();
  }

  function showBoard() {
    if (ui.lock.hidden) return;
    ui.lock.hidden = true;
    ui.board.hidden = false;
    ui.unlock.disabled = false;
  }

  // ---------------------------------------------------------------------------------------------
  // Journeys in

  function ingest(journeys, live) {
    for (const j of journeys) {
      if (!j || typeof j !== "object") continue;
      const id = j.request_id || j.id;
      if (!id) continue;
      if (!seen.has(id)) {
        seen.add(id);
        const record = toRecord(j, id);
        records.push(record);
        recordsDirty = true;
        if (live && record.up) arrivedFor.add(record.up);
      }
      if (live && !rowEls.has(id)) pendingRows.push(j);
    }
    if (pendingRows.length > MAX_ROWS) pendingRows = pendingRows.slice(-MAX_ROWS);
    if (pendingRows.length && !rowsTimer) rowsTimer = setTimeout(flushRows, ROWS_EVERY_MS);
  }

  /** Drops what left the window, and the oldest past the cap. */
  function pruneRecords() {
    const from = nowS() - WINDOW_S - BUCKET_S;
    let keep = records.filter((r) => r.at >= from);
    if (keep.length > MAX_RECORDS) keep = keep.slice(keep.length - MAX_RECORDS);
    if (keep.length !== records.length) {
      const kept = new Set(keep.map((r) => r.id));
      for (const r of records) if (!kept.has(r.id)) seen.delete(r.id);
      records = keep;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // The live table

  function flushRows() {
    rowsTimer = 0;
    const batch = pendingRows;
    pendingRows = [];
    const fragment = document.createDocumentFragment();
    const fresh = [];
    // The batch is oldest first; the table is newest first.
    for (let i = batch.length - 1; i >= 0; i -= 1) {
      const j = batch[i];
      const id = j.request_id || j.id;
      if (rowEls.has(id)) continue;
      const tr = buildRow(j, id);
      rowEls.set(id, tr);
      fresh.push(j);
      fragment.append(tr);
    }
    rows.unshift(...fresh);
    ui.rows.prepend(fragment);
    while (rows.length > MAX_ROWS) {
      const old = rows.pop();
      const id = old.request_id || old.id;
      rowEls.get(id)?.remove();
      rowEls.delete(id);
      rowTotals.delete(id);
    }
    rescaleRows();
    updateEmpty();
  }

  function buildRow(j, id) {
    const segs = segments(j);
    const total = segs.reduce((sum, s) => sum + s[1], 0);
    rowTotals.set(id, total);
    const p = j.phases || {};
    const status = j.status || 0;
    // A 200 whose stream then broke is as bad as a 5xx: the status alone would hide it.
    const statusClass = status >= 500 || (j.error && status < 400) ? "bad" : status >= 400 ? "warn" : "ok";
    const route = routeLabel(j);
    const tr = h("tr", { "data-request-id": id, tabindex: 0, class: id === selectedId ? "selected" : null },
      h("td", { class: "t", text: num(j.at) != null ? fmtClock(j.at) : "—" }),
      h("td", { class: "m", title: j.route ? `${j.model} → ${j.route}` : j.model || "" },
        h("span", { class: "model", text: j.model || "—" }),
        route ? [h("span", { class: "arrow", text: " → " }), h("span", { class: "route", text: route })] : null),
      h("td", null, h("span", { class: `status ${statusClass}`, text: status ? String(status) : "—" })),
      h("td", { class: "marks" }, marks(j).map(badge)),
      h("td", { class: "num", text: fmtMs(num(p.ttft)) }),
      h("td", { class: "num", text: fmtMs(num(p.e2e)) }),
      h("td", { class: "fall" }, h("div", { class: "track" }, waterfall(segs))));
    return tr;
  }

  /** The route, short: "sim" for "sim/llama-3.1-8b" when the model is the one asked for (the title has it all). */
  function routeLabel(j) {
    const route = j.route || "";
    if (!route || route === j.model) return "";
    return j.model && route.endsWith(`/${j.model}`) ? route.slice(0, -j.model.length - 1) : route;
  }

  /** One bar of segments; its width is set against the shared scale by the caller. */
  function waterfall(segs) {
    const bar = h("div", { class: "bar", role: "img",
      "aria-label": segs.map(([id, ms, title]) => `${title || PHASE[id].label} ${fmtMsExact(ms)}`).join(", ") });
    for (const [id, ms, title] of segs) {
      const seg = h("span", { class: `seg ph-${id}`, title: `${title || PHASE[id].label}: ${fmtMsExact(ms)}` });
      seg.style.flexGrow = String(ms);
      bar.append(seg);
    }
    return bar;
  }

  /** The table shares one linear scale: the longest row's, never under MIN_SCALE_MS. */
  function rescaleRows() {
    let scale = MIN_SCALE_MS;
    for (const total of rowTotals.values()) if (total > scale) scale = total;
    ui.scale.textContent = `0–${fmtMs(scale)}`;
    for (const [id, tr] of rowEls) {
      const bar = tr.querySelector(".bar");
      bar.style.width = `${clamp((rowTotals.get(id) / scale) * 100, 0, 100)}%`;
    }
  }

  function updateEmpty() {
    const empty = rows.length === 0;
    ui.empty.hidden = !empty;
    ui.liveCount.textContent = empty ? "" : `${rows.length} newest · click one to see where its time went`;
    if (empty) ui.curl.textContent = curlHint();
  }

  function curlHint() {
    const model = state?.targets?.[0]?.target?.split("/").slice(1).join("/") || "llama-3.1-8b";
    return `curl -N ${location.origin}/v1/chat/completions \\\n  -H 'content-type: application/json' \\\n` +
      `  -d '{"model": "${model}", "stream": true, "messages": [{"role": "user", "content": "hello"}]}'`;
  }

  function onRowActivate(event) {
    if (event.type === "keydown" && event.key !== "Enter" && event.key !== " ") return;
    const tr = event.target.closest("tr[data-request-id]");
    if (!tr) return;
    event.preventDefault();
    const id = tr.dataset.requestId;
    const journey = rows.find((j) => (j.request_id || j.id) === id);
    if (journey) openDetail(journey, id);
  }

  // ---------------------------------------------------------------------------------------------
  // The detail panel

  // Every phase the journey knows, in the order they happen: [key, label, colour, depth]. A row of
  // depth n is a part of the row of depth n − 1 above it.
  const DETAIL_ROWS = [
    ["client_rtt", "client rtt", "client", 0],
    ["gateway", "gateway", "gateway", 0],
    ["cache", "cache lookup", null, 1],
    ["pool", "pool", "pool", 0],
    ["connect", "connect", "connect", 0],
    ["ttfb", "ttfb", null, 0],
    ["rtt", "round trip", "rtt", 1],
    ["floor", "floor (light in fibre)", "floor", 2],
    ["distance tax", "distance tax", "tax", 2],
    ["queue+prefill", "queue+prefill", "queue", 1],
    ["ttft", "ttft", null, 0],
    ["decode", "decode", "decode", 0],
    ["e2e", "e2e", null, 0],
  ];

  function openDetail(j, id, mayFetch = true) {
    const opened = selectedId !== id || ui.detail.hidden;
    selectedId = id;
    for (const [rowId, tr] of rowEls) tr.classList.toggle("selected", rowId === id);
    const d = ui.detail;
    $("#detail-title", d).textContent = j.route || j.model || "Request";
    $(".detail-sub", d).textContent = [id, num(j.at) != null ? fmtClock(j.at) : null,
      j.status ? `HTTP ${j.status}` : null, j.tenant ? `tenant ${j.tenant}` : null].filter(Boolean).join(" · ");
    // The live stream leaves the verdict out (words cost the gateway time per request): asked for on opening.
    const fetching = mayFetch && !j.verdict;
    ui.verdict.textContent = j.verdict || (fetching ? "…" : "No verdict recorded for this request.");
    ui.verdict.classList.toggle("pending", fetching);
    if (fetching) fetchWhole(id);

    const segs = segments(j);
    const fall = $(".detail-fall", d);
    fall.replaceChildren(h("div", { class: "track big" }, waterfall(segs)),
      h("ul", { class: "fall-key" }, segs.map(([pid, ms, title]) => h("li", null,
        h("span", { class: `sw ph-${pid}` }), `${title || PHASE[pid].label} ${fmtMs(ms)}`))));
    fall.querySelector(".bar").style.width = "100%";

    const m = marks(j);
    $(".detail-marks", d).replaceChildren(...(m.length ? m.map(badge) : [h("span", { class: "muted", text: "no marks" })]));

    $(".phase-table tbody", d).replaceChildren(...phaseRows(j));
    $(".tokens", d).replaceChildren(...tokenFacts(j));
    $(".raw pre", d).textContent = JSON.stringify(j, null, 2);
    d.hidden = false;
    if (opened) d.focus({ preventScroll: true });
  }

  /** The journey whole (verdict, handshake steps), from the gateway's memory; it replaces the row's copy. */
  async function fetchWhole(id) {
    let text = "No verdict: the gateway no longer holds this request in memory.";
    try {
      const whole = await getJson(`/journeys/${encodeURIComponent(id)}`);
      const i = rows.findIndex((j) => (j.request_id || j.id) === id);
      if (i >= 0) rows[i] = whole;
      if (selectedId === id && !ui.detail.hidden) openDetail(whole, id, false);
      return;
    } catch (err) {
      if (err instanceof Locked) {
        lock(err.message);
        return;
      }
      if (!(err instanceof NotFound)) text = "The verdict could not be fetched; open the request again to retry.";
    }
    if (selectedId === id) {
      ui.verdict.textContent = text;
      ui.verdict.classList.remove("pending");
    }
  }

  function phaseRows(j) {
    const p = j.phases || {};
    const out = [];
    const row = (label, value, phaseId, depth) => out.push(h("tr", { class: depth ? `depth-${depth}` : null },
      h("th", { scope: "row" }, phaseId ? h("span", { class: `sw ph-${phaseId}` }) : h("span", { class: "sw none" }), label),
      h("td", { class: "num", text: value == null ? "—" : fmtMsExact(value) })));
    const known = new Set();
    for (const [key, label, phaseId, depth] of DETAIL_ROWS) {
      known.add(key);
      const colour = key === "rtt" && num(p.floor) != null ? null : phaseId; // the round trip is drawn whole only without a floor
      row(label, num(p[key]), colour, depth);
      if (key === "connect" && j.handshake) {
        for (const step of ["dns", "tcp", "tls"]) if (step in j.handshake) row(step, num(j.handshake[step]), null, 1);
      }
      if (key === "queue+prefill") {
        const ut = j.upstream_timing || {};
        if (num(ut.cold)) row("cold start, as the upstream says", num(ut.cold), "cold", 2);
        for (const part of ["queue", "prefill"]) if (num(ut[part]) != null) row(`${part}, as the upstream says`, num(ut[part]), null, 2);
      }
    }
    for (const key of Object.keys(p)) if (!known.has(key)) row(key, num(p[key]), null, 0); // phases added later
    return out;
  }

  function tokenFacts(j) {
    const rate = num(j.tokens_per_s);
    const facts = [
      ["output tokens", j.output_tokens],
      ["input tokens", j.input_tokens],
      ["of which the provider's prompt cache served", j.cached_input_tokens],
      ["token events", j.token_events],
      ["tokens/s", rate == null ? null : rate.toFixed(rate < 10 ? 1 : 0)],
      ["longest gap between tokens", num(j.itl_max_ms) == null ? null : fmtMs(j.itl_max_ms)],
      ["stream", j.stream == null ? null : j.stream ? "yes" : "no"],
      ["attempts", j.attempts],
      ["upstream connection", j.reused_connection == null ? null : j.reused_connection ? "reused (warm)" : "new"],
      ["edge cache", j.cache || null],
      ["api", j.api || j.operation || null],
    ];
    const out = [];
    for (const [label, value] of facts) out.push(h("dt", { text: label }), h("dd", { text: value == null || value === "" ? "—" : String(value) }));
    if (j.error) out.push(h("dt", { text: "error" }), h("dd", { text: `${j.error.code}: ${j.error.message}` }));
    return out;
  }

  function closeDetail() {
    if (ui.detail.hidden) return;
    ui.detail.hidden = true;
    const tr = selectedId && rowEls.get(selectedId);
    selectedId = null;
    for (const el of rowEls.values()) el.classList.remove("selected");
    if (tr) tr.focus({ preventScroll: true });
  }

  // ---------------------------------------------------------------------------------------------
  // State: header, map, cards

  function applyState(next) {
    if (!next || typeof next !== "object") return;
    state = next;
    if (num(next.now) != null) clockOffsetS = next.now - Date.now() / 1000;
    ui.version.textContent = next.version ? `v${next.version}` : "";
    const where = next.gateway?.location;
    ui.where.textContent = where ? `gateway in ${where.name}` : "gateway location unknown";
    drawMapOverlay();
    recordsDirty = true;
    if (!rows.length) updateEmpty();
  }

  /** A stable colour per upstream, the same on the map, the charts and the breakdown. */
  const upstreamOrder = [];
  function upstreamColour(name) {
    let i = upstreamOrder.indexOf(name);
    if (i < 0) i = upstreamOrder.push(name) - 1;
    return cssVar(`--up-${i % 6}`);
  }

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // ---------------------------------------------------------------------------------------------
  // The map: equirectangular, cropped at 60° south (Antarctica is only in the way)

  const MAP_W = 960;
  const MAP_H = 480; // the whole sphere; a view never goes below MAP_SOUTH
  const MAP_SOUTH = -60;

  const project = (lon, lat) => [((lon + 180) / 360) * MAP_W, ((90 - lat) / 180) * MAP_H];

  function polylinePath(points) {
    return points.map(([lon, lat], i) => {
      const [x, y] = project(lon, lat);
      return `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    }).join("");
  }

  /** Land rings as one path; a ring that jumps across the antimeridian is split rather than smeared. */
  function landPath(geo) {
    let d = "";
    for (const feature of geo.features || [geo]) {
      const g = feature.geometry || feature;
      const polygons = g.type === "Polygon" ? [g.coordinates] : g.type === "MultiPolygon" ? g.coordinates : [];
      for (const polygon of polygons) {
        for (const ring of polygon) {
          if (ring.every(([, lat]) => lat < MAP_SOUTH)) continue;
          const parts = splitAtAntimeridian(ring);
          for (const part of parts) d += polylinePath(part) + (parts.length === 1 ? "Z" : "");
        }
      }
    }
    return d;
  }

  const toVector = (lat, lon) => {
    const phi = (lat * Math.PI) / 180;
    const lambda = (lon * Math.PI) / 180;
    return [Math.cos(phi) * Math.cos(lambda), Math.cos(phi) * Math.sin(lambda), Math.sin(phi)];
  };

  /** The great circle from a to b: slerp between their unit vectors, as [lon, lat] points. */
  function greatCircle(a, b, steps = 64) {
    const va = toVector(a.lat, a.lon);
    const vb = toVector(b.lat, b.lon);
    const omega = Math.acos(clamp(va[0] * vb[0] + va[1] * vb[1] + va[2] * vb[2], -1, 1));
    const sin = Math.sin(omega);
    if (sin < 1e-9) return [[a.lon, a.lat], [b.lon, b.lat]]; // the same place (or antipodes: no one circle)
    const points = [];
    for (let i = 0; i <= steps; i += 1) {
      const t = i / steps;
      const ka = Math.sin((1 - t) * omega) / sin;
      const kb = Math.sin(t * omega) / sin;
      const v = [ka * va[0] + kb * vb[0], ka * va[1] + kb * vb[1], ka * va[2] + kb * vb[2]];
      points.push([(Math.atan2(v[1], v[0]) * 180) / Math.PI, (Math.asin(clamp(v[2], -1, 1)) * 180) / Math.PI]);
    }
    return points;
  }

  /** Splits a [lon, lat] polyline where it crosses ±180°, adding the crossing point to both sides. */
  function splitAtAntimeridian(points) {
    const lines = [[points[0]]];
    for (let i = 1; i < points.length; i += 1) {
      const [lon0, lat0] = points[i - 1];
      const [lon1, lat1] = points[i];
      if (Math.abs(lon1 - lon0) > 180) {
        const edge = lon0 > 0 ? 180 : -180;
        const unwrapped = lon1 + (lon0 > 0 ? 360 : -360);
        const t = unwrapped === lon0 ? 0 : (edge - lon0) / (unwrapped - lon0);
        const lat = lat0 + t * (lat1 - lat0);
        lines[lines.length - 1].push([edge, lat]);
        lines.push([[-edge, lat]]);
      }
      lines[lines.length - 1].push(points[i]);
    }
    return lines;
  }

  function initMap() {
    const map = ui.map;
    const graticule = [];
    for (let lon = -165; lon <= 165; lon += 15) graticule.push([[lon, 90], [lon, MAP_SOUTH]]);
    for (let lat = -45; lat <= 75; lat += 15) graticule.push([[-180, lat], [180, lat]]);
    map.replaceChildren(
      svg("rect", { class: "sea", x: 0, y: 0, width: MAP_W, height: MAP_H }),
      svg("path", { class: "graticule", d: graticule.map(polylinePath).join("") }),
      svg("path", { class: "land" }),
      svg("g", { class: "overlay" }));
    ui.mapOverlay = $(".overlay", map);
    if (typeof topojson === "undefined") return;
    fetch(LAND_URL)
      .then((r) => (r.ok ? r.json() : null))
      .then((topo) => {
        if (topo?.objects?.land) $(".land", map).setAttribute("d", landPath(topojson.feature(topo, topo.objects.land)));
      })
      .catch(() => {
        // Without the outline the places and arcs still say everything that matters.
      });
  }

  const MAP_ASPECT = MAP_W / ((90 - MAP_SOUTH) / 180 * MAP_H); // 2.4, the viewBox's shape
  const WORLD_VIEW = { lon0: -180, lat1: 90, width: 360 };

  /**
   * The part of the world to show: the places and arcs with a margin, in the map's shape; the whole
   * world when they span most of it or an arc crosses the antimeridian. Same projection, only cropped.
   */
  function mapView(lines) {
    const points = lines.flat();
    if (!points.length || lines.some((line) => line.some(([lon]) => Math.abs(lon) === 180))) return WORLD_VIEW;
    const lons = points.map((pt) => pt[0]);
    const lats = points.map((pt) => pt[1]);
    let lon0 = Math.min(...lons) - 14;
    let lon1 = Math.max(...lons) + 14;
    let lat0 = Math.min(...lats) - 10;
    let lat1 = Math.max(...lats) + 12;
    let width = Math.max(lon1 - lon0, (lat1 - lat0) * MAP_ASPECT, 150);
    if (width >= 300) return WORLD_VIEW;
    const height = width / MAP_ASPECT;
    lon0 = clamp((lon0 + lon1 - width) / 2, -180, 180 - width);
    lat1 = clamp((lat0 + lat1 + height) / 2, MAP_SOUTH + height, 90);
    return { lon0, lat1, width };
  }

  /** Gateway, upstreams and the arcs between them; sized so text reads as ~12 px at any map width. */
  function drawMapOverlay() {
    const overlay = ui.mapOverlay;
    if (!overlay || !state) return;
    const gateway = state.gateway?.location || null;
    const ups = (state.upstreams || []).filter((u) => u && u.region && num(u.region.lat) != null);
    const arcsOf = new Map(ups.map((u) => [u.name, gateway ? greatCircle(gateway, u.region) : null]));
    const lines = [...ups.map((u) => [[u.region.lon, u.region.lat]]), ...(gateway ? [[[gateway.lon, gateway.lat]]] : [])];
    for (const points of arcsOf.values()) if (points) lines.push(...splitAtAntimeridian(points));

    const view = mapView(lines);
    const [vx, vy] = project(view.lon0, view.lat1);
    const vw = (view.width / 360) * MAP_W;
    ui.map.setAttribute("viewBox", `${vx.toFixed(1)} ${vy.toFixed(1)} ${vw.toFixed(1)} ${(vw / MAP_ASPECT).toFixed(1)}`);
    const k = vw / Math.max(ui.map.clientWidth || MAP_W, 1); // viewBox units per screen pixel
    const font = 12 * k;
    const bounds = { x0: vx, y0: vy, x1: vx + vw, y1: vy + vw / MAP_ASPECT };

    const arcs = [];
    const places = [];
    const taken = []; // boxes already used: places and their names first, then arc labels
    const labels = [];
    const placeLabel = (x, y, r, text) => {
      taken.push({ x0: x - r, y0: y - r, x1: x + r, y1: y + r });
      const box = textBox(x + r + 3 * k, y + font * 0.35, text, font, "start");
      taken.push(box);
      places.push(svg("text", { class: "place-label", x: box.x, y: box.y, text }));
    };

    if (gateway) {
      const [x, y] = project(gateway.lon, gateway.lat);
      places.push(svg("circle", { class: "place gateway", "data-place": "gateway", cx: x, cy: y, r: 6 * k },
        svg("title", { text: `the gateway: ${gateway.name}` })));
      placeLabel(x, y, 6 * k, gateway.name);
    }
    for (const u of ups) {
      const colour = upstreamColour(u.name);
      const [x, y] = project(u.region.lon, u.region.lat);
      places.push(svg("circle", { class: "place upstream", "data-place": "upstream", "data-name": u.name, cx: x, cy: y,
        r: 5 * k, fill: colour }, svg("title", { text: `${u.name}: ${u.region.name}` })));
      const points = arcsOf.get(u.name);
      if (!points) {
        placeLabel(x, y, 5 * k, u.name); // no arc to carry the name
        continue;
      }
      taken.push({ x0: x - 5 * k, y0: y - 5 * k, x1: x + 5 * k, y1: y + 5 * k });
      for (const [lon, lat] of points) { // labels keep off the arcs too, where they can
        const [px, py] = project(lon, lat);
        taken.push({ x0: px - k, y0: py - k, x1: px + k, y1: py + k, soft: true });
      }
      for (const part of splitAtAntimeridian(points)) {
        arcs.push(svg("path", { class: "arc", "data-upstream": u.name, d: polylinePath(part), stroke: colour }));
      }
      const measured = num(u.rtt_ms) == null ? "—" : fmtMs(u.rtt_ms);
      labels.push({ name: u.name, colour, points, text: `${u.name} · floor ${fmtMs(num(u.floor_ms))} · measured ${measured}` });
    }
    const arcLabels = labels.map((label) => {
      const box = labelSpot(label, font, taken, bounds);
      taken.push(box);
      return svg("text", { class: "arc-label", "data-upstream": label.name, x: box.x, y: box.y, "text-anchor": box.anchor,
        fill: label.colour, text: label.text });
    });
    overlay.setAttribute("font-size", font.toFixed(2));
    overlay.replaceChildren(...arcs, ...places, ...arcLabels);
    ui.mapNote.hidden = !mapNote(gateway, state.upstreams || []);
  }

  /** The box a line of text takes (an estimate: no layout is needed for it). */
  function textBox(x, y, text, font, anchor) {
    const width = text.length * font * 0.58;
    const x0 = anchor === "middle" ? x - width / 2 : anchor === "end" ? x - width : x;
    return { x, y, anchor, x0, x1: x0 + width, y0: y - font, y1: y + font * 0.3 };
  }

  const overlaps = (a, b) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;

  /**
   * Where an arc's label goes: above or below the arc's middle, or beside it (a steep arc), else further
   * along the arc; never over a place, an arc or another label when there is any room.
   */
  function labelSpot(label, font, taken, bounds) {
    const n = label.points.length - 1;
    const spots = [];
    for (const t of [0.5, 0.4, 0.6, 0.3, 0.7]) {
      const [x, y] = project(...label.points[Math.round(t * n)]);
      spots.push([x, y - font * 0.7, "middle"], [x, y + font * 1.5, "middle"],
        [x + font * 0.6, y + font * 0.35, "start"], [x - font * 0.6, y + font * 0.35, "end"]);
    }
    const boxes = spots.map(([x, y, anchor]) => inside(textBox(x, y, label.text, font, anchor), bounds, label.text, font));
    const clear = (box, hardOnly) => !taken.some((other) => (!hardOnly || !other.soft) && overlaps(box, other));
    return boxes.find((box) => clear(box, false)) || boxes.find((box) => clear(box, true)) || boxes[0];
  }

  /** The box moved into the view, when it sticks out of it. */
  function inside(box, bounds, text, font) {
    const dx = Math.max(bounds.x0 + 4 - box.x0, 0) - Math.max(box.x1 - (bounds.x1 - 4), 0);
    const dy = Math.max(bounds.y0 + 4 - box.y0, 0) - Math.max(box.y1 - (bounds.y1 - 4), 0);
    return dx || dy ? textBox(box.x + dx, box.y + dy, text, font, box.anchor) : box;
  }

  function mapNote(gateway, upstreams) {
    const notes = [];
    if (!gateway) notes.push("The gateway's location is unknown: set `location:` in firsttoken.yaml to see distances and floors.");
    const unplaced = upstreams.filter((u) => u && !u.region).map((u) => u.name);
    if (unplaced.length) notes.push(`No region for ${unplaced.join(", ")}: set upstreams.<name>.region to place it.`);
    ui.mapNote.textContent = notes.join(" ");
    return notes.length > 0;
  }

  /** The arcs of upstreams that just answered flash once: the map shows the traffic, not only the distance. */
  function pulseArcs() {
    if (!ui.mapOverlay || !arrivedFor.size) return;
    for (const name of arrivedFor) {
      for (const arc of ui.mapOverlay.querySelectorAll(`path.arc[data-upstream="${CSS.escape(name)}"]`)) {
        arc.animate?.([{ strokeOpacity: 1, strokeWidth: "4px" }, { strokeOpacity: 0.75, strokeWidth: "2px" }],
          { duration: 700, easing: "ease-out" });
      }
    }
    arrivedFor.clear();
  }

  // ---------------------------------------------------------------------------------------------
  // Over time: one pass over the records makes the buckets, the cards and the breakdown

  // Counts add up weights (a sampled journey stands for several); percentiles and medians take the
  // sample as it is, which a uniform sample keeps.
  function aggregate() {
    const now = nowS();
    const last = Math.floor(now / BUCKET_S) * BUCKET_S;
    const first = last - (BUCKETS - 1) * BUCKET_S;
    const xs = Array.from({ length: BUCKETS }, (_, i) => first + i * BUCKET_S);
    const zeros = () => new Array(BUCKETS).fill(0);
    const lists = () => Array.from({ length: BUCKETS }, () => []);
    const requests = zeros();
    const errors = zeros();
    const lookups = zeros();
    const hits = zeros();
    const semantic = zeros();
    const perUp = new Map(); // upstream/model → { ttft, itl, tps } per bucket
    const similarities = []; // [similarity, weight]
    const missE2e = new Map(); // model → e2e of successful misses
    const hitList = []; // [model, e2e, weight]
    const reusedBy = new Map(); // upstream → reused connections
    const connectBy = new Map(); // upstream → connect ms of new connections
    const waits = new Map(); // upstream → { n, sums: phase → ms }
    const c = { total: 0, failures: 0, hedgesWon: 0, hedged: 0, cold: 0 };

    for (const r of records) {
      const i = Math.floor((r.at - first) / BUCKET_S);
      if (i < 0 || i >= BUCKETS) continue;
      const w = r.w;
      c.total += w;
      requests[i] += w;
      if (r.failed) {
        errors[i] += w;
        c.failures += w;
      }
      const hit = r.cache === "hit" || r.cache === "semantic" || r.cache === "joined";
      if (r.cache !== "bypass") {
        lookups[i] += w;
        if (hit) hits[i] += w;
        if (r.cache === "semantic") {
          semantic[i] += w;
          if (r.similarity != null) similarities.push([r.similarity, w]);
        }
      }
      if (r.hedge) c.hedged += w;
      if (r.cold) c.cold += w;
      if (r.hedge === "won") c.hedgesWon += w;
      if (hit && r.e2e != null) hitList.push([r.model, r.e2e, w]);
      if (r.cache === "miss" && !r.failed && r.e2e != null) push(missE2e, r.model, r.e2e);
      if (!r.up) continue;
      if (r.reused) reusedBy.set(r.up, (reusedBy.get(r.up) || 0) + w);
      if (r.newConnect != null) push(connectBy, r.up, r.newConnect);
      if (hit || r.failed) continue; // the charts and breakdown are about requests that went upstream
      let u = perUp.get(r.series);
      if (!u) perUp.set(r.series, (u = { ttft: lists(), itl: lists(), tps: lists() }));
      if (r.ttft != null) u.ttft[i].push(r.ttft);
      if (r.itl != null) u.itl[i].push(r.itl);
      if (r.tps != null) u.tps[i].push(r.tps);
      let wait = waits.get(r.up);
      if (!wait) waits.set(r.up, (wait = { n: 0, sums: {} }));
      wait.n += w;
      for (const [id, ms] of r.wait) wait.sums[id] = (wait.sums[id] || 0) + ms * w;
    }

    // What the cache saved: each hit against the median miss of its model (never below zero).
    const medians = new Map([...missE2e].map(([model, list]) => [model, median(list)]));
    c.cacheSaved = null;
    c.hits = 0;
    for (const [model, e2e, w] of hitList) {
      c.hits += w;
      const typical = medians.get(model);
      if (typical != null) c.cacheSaved = (c.cacheSaved || 0) + (w * Math.max(typical - e2e, 0)) / 1000;
    }
    // What the warm pool saved: each reused connection against the median handshake of a new one there.
    c.poolSaved = 0;
    c.reusedCount = 0;
    for (const [up, count] of reusedBy) {
      const handshake = connectBy.has(up) ? median(connectBy.get(up)) : null;
      if (handshake != null) {
        c.poolSaved += (count * handshake) / 1000;
        c.reusedCount += count;
      }
    }
    c.newSeen = connectBy.size > 0;
    const rate = (part, whole) => part.map((n, i) => (whole[i] ? (100 * n) / whole[i] : null));
    return {
      xs, requests, errors, perUp, similarities, waits, cards: c,
      hitRate: rate(hits, lookups), semanticRate: rate(semantic, lookups),
    };
  }

  function push(map, key, value) {
    const list = map.get(key);
    if (list) list.push(value);
    else map.set(key, [value]);
  }

  function tick() {
    const now = Date.now();
    pulseArcs();
    // Recount when something arrived, and every 5 s anyway so the window slides.
    if (!recordsDirty && now - lastAggregate < 5000) return;
    recordsDirty = false;
    lastAggregate = now;
    pruneRecords();
    const agg = aggregate();
    drawCharts(agg);
    drawCards(agg.cards);
    drawBreakdown(agg.waits);
  }

  // ---------------------------------------------------------------------------------------------
  // Cards

  function buildCards() {
    const card = (key, label) => {
      const value = h("p", { class: "value", text: "—" });
      const sub = h("p", { class: "sub" });
      ui.cards[key] = { value, sub };
      return h("div", { class: `card card-${key}`, "data-card": key }, h("h3", { text: label }), value, sub);
    };
    ui.cards = {};
    ui.breakers = h("ul", { class: "chips" });
    ui.cardsBox.replaceChildren(
      card("requests", "Requests, 15 min"),
      card("cold", "Cold starts seen"),
      card("hedges", "Hedges won"),
      card("cache", "Seconds the cache saved"),
      card("pool", "Seconds the warm pool saved"),
      h("div", { class: "card card-breakers", "data-card": "breakers" }, h("h3", { text: "Breakers" }), ui.breakers));
  }

  const count = (n) => Math.round(n).toLocaleString(); // weighted counts are not whole numbers

  function drawCards(c) {
    const set = (key, value, sub) => {
      ui.cards[key].value.textContent = value;
      ui.cards[key].sub.textContent = sub || "";
    };
    const known = state != null || c.total > 0; // before the first answer, nothing is known: "—"
    set("requests", known ? count(c.total) : "—", c.failures ? `${count(c.failures)} failed` : known ? "none failed" : "");
    const targets = state?.targets || [];
    const cold = targets.reduce((sum, t) => sum + (num(t.cold_start?.seen) || 0), 0);
    // The router's count (what it detected from first tokens after idle spells); the journeys' own
    // count (what upstreams declared) beside it, as the two can differ.
    set("cold", targets.length ? count(cold) : "—",
      known ? `detected by the router · ${count(c.cold)} requests met one in 15 min` : "");
    set("hedges", known ? count(c.hedgesWon) : "—", c.hedged ? `of ${count(c.hedged)} hedged requests` : "");
    set("cache", fmtSeconds(c.cacheSaved),
      c.cacheSaved == null ? (c.hits ? "no misses of those models to compare with" : "no cache hits yet")
        : `${count(c.hits)} hits vs their model's median miss`);
    set("pool", known ? fmtSeconds(c.poolSaved) : "—",
      c.newSeen ? `${count(c.reusedCount)} reused connections × median handshake` : known ? "no new connection seen yet" : "");
    drawBreakers(targets);
  }

  function drawBreakers(targets) {
    if (!targets.length) {
      ui.breakers.replaceChildren(h("li", { class: "muted", text: state ? "no targets" : "—" }));
      return;
    }
    ui.breakers.replaceChildren(...targets.map((t) => {
      const breaker = ["closed", "open", "half-open"].includes(t.breaker) ? t.breaker : "unknown";
      const inFlight = num(t.in_flight);
      return h("li", { class: `chip br-${breaker}`, title: `${t.target}: breaker ${breaker}${inFlight != null ? `, ${inFlight} in flight` : ""}` },
        h("span", { class: "chip-name", text: t.target }), h("span", { class: "chip-state", text: breaker }));
    }));
  }

  // ---------------------------------------------------------------------------------------------
  // Where the wait goes: the mean of each phase before the first token, per upstream. Means add up
  // (unlike medians), so the bar's length is the mean wait and its parts say where it went.

  function drawBreakdown(waits) {
    const box = ui.breakdown;
    const entries = [...waits].filter(([, w]) => w.n > 0).sort((a, b) => b[1].n - a[1].n);
    if (!entries.length) {
      box.replaceChildren(h("p", { class: "muted", text: "Nothing yet: this fills in as requests reach an upstream." }));
      return;
    }
    const means = entries.map(([up, w]) => {
      const segs = PHASES.filter((p) => w.sums[p.id]).map((p) => [p.id, w.sums[p.id] / w.n]);
      return { up, n: w.n, segs, total: segs.reduce((s, x) => s + x[1], 0) };
    });
    const longest = Math.max(MIN_SCALE_MS, ...means.map((m) => m.total));
    box.replaceChildren(...means.map((m) => {
      const bar = waterfall(m.segs);
      bar.style.width = `${(m.total / longest) * 100}%`;
      return h("div", { class: "bd-row", "data-upstream": m.up },
        h("p", { class: "bd-name" }, h("span", { class: "dot" }), m.up,
          h("span", { class: "bd-total", text: ` ${fmtMs(m.total)} mean · ${count(m.n)} requests` })),
        h("div", { class: "track" }, bar),
        h("p", { class: "bd-words", text: explain(m) }));
    }));
    for (const row of box.querySelectorAll(".bd-row")) $(".dot", row).style.background = upstreamColour(row.dataset.upstream);
  }

  function explain({ segs, total }) {
    if (!total) return "";
    const ms = Object.fromEntries(segs);
    const causes = CAUSES.map((c) => [c.label, c.ids.reduce((s, id) => s + (ms[id] || 0), 0)])
      .filter(([, v]) => v / total >= 0.05).sort((a, b) => b[1] - a[1]);
    const pct = (v) => `${Math.round((100 * v) / total)}%`;
    const words = causes.slice(0, 3).map(([label, v]) => {
      if (label === "distance" && ms.floor) return `${pct(v)} ${label} (${pct(ms.floor)} the speed of light)`;
      if (label === "the provider" && ms.cold) return `${pct(v)} ${label} (${pct(ms.cold)} cold starts)`;
      return `${pct(v)} ${label}`;
    });
    return words.length ? `${words.join(", ")}.` : "";
  }

  // ---------------------------------------------------------------------------------------------
  // Spend today: GET /v1/spend, the report `firsttoken spend` prints, every SPEND_EVERY_MS while the
  // feed is live (unlocked) and the page is shown.

  async function loadSpend() {
    if (document.hidden || ui.feed.dataset.state !== "live") return;
    const today = new Date().toISOString().slice(0, 10);
    let response;
    try {
      response = await fetch(`/v1/spend?since=${today}`, {
        headers: { Accept: "application/json", ...authHeaders() }, cache: "no-store" });
    } catch (_) {
      return; // the gateway is restarting: the feed says so
    }
    if (response.ok) drawSpend(await response.json());
    else if (response.status === 404) drawSpendNotes(["This gateway keeps no spend ledger (spend.log: null)."]);
  }

  function drawSpend(report) {
    const money = (usd) => (usd >= 100 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`);
    const rows = report.rows.map((r) => h("tr", { "data-key": r.key, "data-model": r.model },
      h("td", { text: r.key }), h("td", { text: r.model || "—" }),
      h("td", { class: "num", text: count(r.requests) }),
      h("td", { class: "num", text: `${count(r.tokens.input)} / ${count(r.tokens.output)}` }),
      h("td", { class: "num", text: money(r.usd) + (r.unpriced_requests ? "*" : "") }),
      h("td", { class: "num", text: money(r.saved.usd) })));
    $("tbody", ui.spend).replaceChildren(...(rows.length ? rows
      : [h("tr", {}, h("td", { colspan: 6, class: "muted", text: "Nothing spent yet today." }))]));
    const saved = report.total.saved;
    const notes = [`The edge saved ${money(saved.usd)} today: ${count(saved.cache_hits)} cache hits, ` +
                   `${count(saved.joined)} joined requests, ${count(saved.sized)} sized down.`];
    if (report.total.unpriced_requests) notes.push("* some requests went to a route with no price (spend.prices).");
    for (const b of report.budgets) {
      const limits = [b.usd_per_day != null ? `${money(b.today)} of ${money(b.usd_per_day)} today` : "",
                      b.usd_per_month != null ? `${money(b.this_month)} of ${money(b.usd_per_month)} this month` : ""];
      notes.push(`Budget of ${b.key}: ${limits.filter(Boolean).join(", ")}${b.past_budget ? " — past it" : ""}.`);
    }
    drawSpendNotes(notes);
  }

  function drawSpendNotes(notes) {
    ui.spendNotes.replaceChildren(...notes.map((text) => h("li", { text })));
  }

  // ---------------------------------------------------------------------------------------------
  // Charts (uPlot). Series follow the upstreams and models seen; a new one rebuilds its chart.

  const charts = new Map(); // name → { u, signature, el }
  let xRange = [0, 1];

  function chartTheme() {
    return { axis: cssVar("--muted"), grid: cssVar("--grid"), error: cssVar("--bad"),
      requests: cssVar("--faint"), hit: cssVar("--hit"), semantic: cssVar("--semantic") };
  }

  const axisFont = "11px system-ui, -apple-system, 'Segoe UI', sans-serif";
  function axes(theme, yFormat, extra = []) {
    const base = { stroke: theme.axis, font: axisFont, grid: { stroke: theme.grid, width: 1 }, ticks: { stroke: theme.grid, width: 1, size: 4 } };
    const clock = (u, ticks) => ticks.map((t) => { const d = new Date(t * 1000); return `${pad2(d.getHours())}:${pad2(d.getMinutes())}`; });
    return [{ ...base, values: clock, space: 60 }, { ...base, size: 52, values: (u, ticks) => ticks.map(yFormat) },
      ...extra.map((e) => ({ ...base, ...e }))];
  }

  const nullIfZero = (v) => (v ? v : null);
  const fmtTick = (v) => (v == null ? "" : v >= 1000 ? `${+(v / 1000).toFixed(1)} s` : `${+v.toFixed(1)}`);
  const upRange = (u, min, max) => [0, max != null && Number.isFinite(max) && max > 0 ? max * 1.1 : 1];

  function baseOptions(series, axesList, scales = {}) {
    return {
      height: CHART_H,
      series: [{ label: "time", value: (u, v) => (v == null ? "" : fmtClock(v)) }, ...series],
      axes: axesList,
      scales: { x: { time: true, range: () => xRange }, y: { range: upRange }, ...scales },
      legend: { live: true },
      cursor: { drag: { x: false, y: false }, points: { size: 6 } },
    };
  }

  function line(label, stroke, extra = {}) {
    return { label, stroke, width: 1.6, spanGaps: false, points: { size: 4 }, value: (u, v) => (v == null ? "" : fmtMs(v)), ...extra };
  }

  function chartUpstreams(perUp) {
    const names = [...perUp.keys()];
    if (!names.length) for (const u of state?.upstreams || []) if (u?.name) names.push(u.name);
    for (const name of names) upstreamColour(name); // colours in first-seen order
    return names.sort((a, b) => upstreamOrder.indexOf(a) - upstreamOrder.indexOf(b));
  }

  function drawCharts(agg) {
    if (typeof uPlot === "undefined") return;
    xRange = [agg.xs[0], agg.xs[agg.xs.length - 1] + BUCKET_S];
    const theme = chartTheme();
    const ups = chartUpstreams(agg.perUp);
    const signature = ups.join("\n");
    const q = (lists, quant) => lists.map((l) => (l.length ? quantile(l.slice().sort((a, b) => a - b), quant) : null));
    const empty = { ttft: [], itl: [], tps: [] };
    const per = (up) => agg.perUp.get(up) || empty;
    const blank = () => new Array(BUCKETS).fill(null);

    drawChart("ttft", signature, () => baseOptions(
      ups.flatMap((up) => [line(`${up} p50`, upstreamColour(up)), line(`${up} p95`, upstreamColour(up), { dash: [5, 4], width: 1.2 })]),
      axes(theme, fmtTick)),
    [agg.xs, ...ups.flatMap((up) => (per(up).ttft.length ? [q(per(up).ttft, 0.5), q(per(up).ttft, 0.95)] : [blank(), blank()]))]);

    drawChart("itl", signature, () => baseOptions(
      ups.flatMap((up) => [line(`${up} ITL p50`, upstreamColour(up), { scale: "y" }),
        line(`${up} tok/s p50`, upstreamColour(up), { scale: "tps", dash: [2, 3], value: (u, v) => (v == null ? "" : `${Math.round(v)} tok/s`) })]),
      axes(theme, fmtTick, [{ scale: "tps", side: 1, size: 48, grid: { show: false }, values: (u, t) => t.map((v) => `${+v.toFixed(1)}`) }]),
      { tps: { range: upRange } }),
    [agg.xs, ...ups.flatMap((up) => (per(up).itl.length ? [q(per(up).itl, 0.5), q(per(up).tps, 0.5)] : [blank(), blank()]))]);

    const bars = uPlot.paths?.bars ? uPlot.paths.bars({ size: [0.7, 24], align: 1 }) : undefined;
    const perBucket = (u, v) => (v == null ? "" : String(Math.round(v)));
    drawChart("errors", "static", () => baseOptions([
      { label: "requests", stroke: theme.requests, fill: theme.requests, paths: bars, points: { show: false }, value: perBucket },
      { label: "errors", stroke: theme.error, fill: theme.error, paths: bars, points: { show: false }, value: perBucket },
    ], axes(theme, (v) => (Number.isInteger(v) ? String(v) : "")), { y: { range: upRange } }),
    [agg.xs, agg.requests.map(nullIfZero), agg.errors.map(nullIfZero)]); // a zero bar would still draw its outline

    const pct = (u, v) => (v == null ? "" : `${v.toFixed(0)} %`);
    drawChart("cache", "static", () => baseOptions([
      line("hit rate", theme.hit, { value: pct }),
      line("semantic-hit rate", theme.semantic, { value: pct }),
    ], axes(theme, (v) => `${v}%`), { y: { range: [0, 100] } }),
    [agg.xs, agg.hitRate, agg.semanticRate]);

    drawHistogram(agg.similarities);
  }

  function drawChart(name, signature, options, data) {
    let chart = charts.get(name);
    const el = $(".plot", $(`[data-testid="chart-${name}"]`));
    if (chart && chart.signature !== signature) {
      chart.u.destroy();
      chart = null;
    }
    if (!chart) {
      el.replaceChildren();
      const opts = options();
      opts.width = Math.max(el.clientWidth, 200);
      chart = { u: new uPlot(opts, data, el), signature, el };
      charts.set(name, chart);
    } else {
      chart.u.setData(data);
    }
  }

  /** uPlot draws at a fixed size: follow the containers (on the next frame, never inside the observer). */
  function watchChartSizes() {
    if (typeof ResizeObserver === "undefined") return;
    let frame = 0;
    const resize = () => {
      frame = 0;
      for (const chart of charts.values()) {
        const width = Math.max(chart.el.clientWidth, 200);
        if (Math.abs(width - chart.u.width) > 1) chart.u.setSize({ width, height: CHART_H });
      }
      drawMapOverlay();
    };
    const observer = new ResizeObserver(() => {
      if (!frame) frame = requestAnimationFrame(resize);
    });
    for (const el of document.querySelectorAll(".plot")) observer.observe(el);
    observer.observe(ui.map);
  }

  function drawHistogram(similarities) {
    const counts = new Array(HIST_BINS).fill(0);
    for (const [s, w] of similarities) counts[clamp(Math.floor((s - HIST_FROM) / 0.02 + 1e-9), 0, HIST_BINS - 1)] += w;
    const most = Math.max(...counts);
    const threshold = num(state?.cache?.similarity);
    const box = ui.histogram;
    if (!box.childElementCount) {
      // Built once; later only heights and numbers change.
      for (let i = 0; i < HIST_BINS; i += 1) {
        const lo = HIST_FROM + i * 0.02;
        box.append(h("div", { class: "hbin" }, h("span", { class: "hcount" }), h("div", { class: "hbar-box" }, h("div", { class: "hbar" })),
          h("span", { class: "hlabel", text: lo.toFixed(2) })));
      }
      box.append(h("p", { class: "hnote" }));
    }
    [...box.querySelectorAll(".hbin")].forEach((bin, i) => {
      const lo = HIST_FROM + i * 0.02;
      bin.title = `similarity ${lo.toFixed(2)}–${(lo + 0.02).toFixed(2)}: ${count(counts[i])} semantic hits`;
      bin.classList.toggle("below", threshold != null && lo + 0.02 <= threshold);
      $(".hcount", bin).textContent = counts[i] ? count(counts[i]) : "";
      $(".hbar", bin).style.height = `${most ? (counts[i] / most) * 100 : 0}%`;
    });
    const total = counts.reduce((a, b) => a + b, 0);
    $(".hnote", box).textContent = total
      ? `${count(total)} semantic hits${threshold != null ? ` · the cache answers from similarity ${threshold}` : ""}`
      : "No semantic hits in the last 15 minutes.";
  }

  // ---------------------------------------------------------------------------------------------
  // Start

  function buildLegend() {
    ui.legend.replaceChildren(...PHASES.map((p) => h("li", { title: p.hint }, h("span", { class: `sw ph-${p.id}` }), p.label)));
  }

  function init() {
    Object.assign(ui, {
      feed: $('[data-testid="feed-status"]'),
      version: $('[data-testid="version"]'),
      where: $('[data-testid="gateway-location"]'),
      legend: $('[data-testid="legend"]'),
      lock: $('[data-testid="lock"]'),
      lockMessage: $('[data-testid="lock-message"]'),
      keyInput: $('[data-testid="admin-key"]'),
      unlock: $('[data-testid="unlock"]'),
      board: $("main.board"),
      rows: $('[data-testid="live-rows"]'),
      empty: $('[data-testid="live-empty"]'),
      curl: $('[data-testid="curl-hint"]'),
      liveCount: $('[data-testid="live-count"]'),
      scale: $('[data-testid="waterfall-scale"]'),
      detail: $('[data-testid="journey-detail"]'),
      verdict: $('[data-testid="verdict"]'),
      map: $('[data-testid="map"]'),
      mapNote: $('[data-testid="map-note"]'),
      cardsBox: $('[data-testid="cards"]'),
      breakdown: $(".breakdown-rows"),
      histogram: $(".histogram"),
      spend: $('[data-testid="spend-table"]'),
      spendNotes: $('[data-testid="spend-notes"]'),
    });
    buildLegend();
    buildCards();
    initMap();
    updateEmpty();
    rescaleRows();

    ui.rows.addEventListener("click", onRowActivate);
    ui.rows.addEventListener("keydown", onRowActivate);
    $('[data-testid="detail-close"]').addEventListener("click", closeDetail);
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape") closeDetail();
    });
    $(".lock-form").addEventListener("submit", unlock);
    // The charts read their colours from CSS: redraw them when the colour scheme flips.
    window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", () => {
      for (const chart of charts.values()) chart.u.destroy();
      charts.clear();
      recordsDirty = true;
      drawMapOverlay();
    });
    watchChartSizes();
    setInterval(tick, CHARTS_EVERY_MS);
    setInterval(loadSpend, SPEND_EVERY_MS);
    tick();
    start();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
