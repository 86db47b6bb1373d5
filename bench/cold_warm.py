"""What warm long-haul connections save: requests across an emulated long round trip, straight to a
TLS upstream on a fresh connection, on a kept-alive one, and through firsttoken with a warm pool.

    sudo .venv/bin/python bench/cold_warm.py [--rtt-ms 150] [--requests 10] [--json PATH]

A DelayLine (firsttoken.lab) puts --rtt-ms between a client and a server network namespace. The
server namespace runs nginx with TLS (a throwaway CA and server certificate made with openssl in
bench/.work/tls/) answering one static completion and one static stream; the client namespace runs
`firsttoken serve` on its loopback with that nginx as its upstream (ca_file: the throwaway CA), and
the measuring client (bench/cold_warm_client.py, raw sockets + ssl, time.perf_counter).

Measured, all from the client namespace:
  1. direct, cold: a new TCP + TLS connection per request (TCP connect, TLS handshake, TTFB, total);
  2. direct, warm: one kept-alive connection, reused;
  3. firsttoken, pool warm (pool.warm: 4): non-streaming total/TTFB, streaming time to first token;
  4. firsttoken, pool cold (pool.warm: 0): its very first request on each upstream.
With TLS 1.3 a cold request costs 3 round trips (TCP, TLS, the request) and a warm one 1.

Needs root (network namespaces), ip, ethtool, nginx and openssl. A benchmark, run by hand; CI never
runs it. Takes well under a minute at the default RTT.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).parent))
import fixtures  # noqa: E402

from firsttoken.lab.delayline import DelayLine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work"
RUN = WORK / "cold_warm"
TLS = WORK / "tls"
PYTHON = ROOT / ".venv" / "bin" / "python"
FIRSTTOKEN = ROOT / ".venv" / "bin" / "firsttoken"
CLIENT = Path(__file__).resolve().parent / "cold_warm_client.py"
WARM_PORT, COLD_PORT = 8787, 8788


class BenchError(RuntimeError):
    pass


# --- setup --------------------------------------------------------------------------------------

def make_tls(server_ip: str) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for IP:server_ip signed by it (EC P-256, one day)."""
    TLS.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = TLS / "ca.key", TLS / "ca.crt"
    key, csr, crt, ext = TLS / "server.key", TLS / "server.csr", TLS / "server.crt", TLS / "server.ext"
    ext.write_text(f"subjectAltName = IP:{server_ip}\nbasicConstraints = critical, CA:FALSE\n"
                   "keyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth\n"
                   "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for argv in (
        ["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_crt, "-days", "1",
         "-subj", "/CN=firsttoken cold_warm bench CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["openssl", "req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", f"/CN={server_ip}"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "1", "-sha256", "-extfile", ext, "-out", crt],
    ):
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"openssl failed: {' '.join(map(str, argv))}\n{done.stderr.strip()}")
    return ca_crt, crt, key


def gateway_config(name: str, port: int, upstream: str, ca: Path, warm: int) -> Path:
    path = RUN / f"firsttoken-{name}.yaml"
    path.write_text(yaml.safe_dump({
        "listen": {"host": "127.0.0.1", "port": port},
        "upstreams": {"json": {"url": f"{upstream}/json/v1", "ca_file": str(ca), "pool": {"warm": warm}},
                      "sse": {"url": f"{upstream}/sse/v1", "ca_file": str(ca), "pool": {"warm": warm}}},
        "models": {"bench": ["json/bench"], "bench-sse": ["sse/bench"]},
    }, sort_keys=False))
    return path


def upstream_conf(port: int, server_ip: str, crt: Path, key: Path) -> str:
    return fixtures.upstream_nginx_conf(str(RUN), port, ssl=(str(crt), str(key)), listen_host=server_ip,
                                        access_log=str(RUN / "access.log"))


class AccessLog:
    """Reads what nginx logged since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")
        self.offset = 0

    def since_last(self) -> list[dict[str, Any]]:
        with self.path.open() as f:
            f.seek(self.offset)
            text = f.read()
            self.offset = f.tell()
        rows = []
        for line in text.splitlines():
            conn, count, method, uri, proto, status = line.split()
            rows.append({"connection": int(conn), "connection_requests": int(count), "method": method,
                         "uri": uri, "tls": proto, "status": int(status)})
        return rows


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Bench:
    def __init__(self, line: DelayLine, stack: ExitStack) -> None:
        self.line, self.stack = line, stack
        self.procs: list[tuple[str, subprocess.Popen[Any], Path]] = []

    def start(self, name: str, ns: str, argv: list[str]) -> None:
        log = RUN / f"{name}.log"
        out = self.stack.enter_context(log.open("wb"))
        proc = self.line.run_in(ns, [str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT, cwd=RUN)
        self.procs.append((name, proc, log))
        # The line stops everything it started when it closes; this stops it sooner, on our way out.
        self.stack.callback(_stop, proc)

    def check_alive(self) -> None:
        for name, proc, log in self.procs:
            if proc.poll() is not None:
                raise BenchError(f"{name} exited with {proc.returncode}; its log ({log}):\n{log_tail(log)}")

    def client(self, spec: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """Run the measuring client once in the client namespace; its JSON answer."""
        self.check_alive()
        argv = [str(PYTHON), str(CLIENT), json.dumps(spec)]
        done = self.line.run(self.line.client_ns, argv, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise BenchError(f"client {spec['op']} {spec.get('host')}:{spec.get('port')}{spec.get('path', '')} "
                             f"failed ({done.returncode}):\n{done.stderr.strip()[-3000:]}")
        return json.loads(done.stdout)

    def wait(self, op: str, host: str, port: int, path: str = "/", ca: str | None = None, what: str = "") -> None:
        answer = self.client({"op": op, "host": host, "port": port, "path": path, "ca": ca, "timeout_s": 30})
        if not answer.get("ok"):
            self.check_alive()
            logs = "\n".join(f"--- {n} ({log}):\n{log_tail(log)}" for n, _, log in self.procs)
            raise BenchError(f"{what or f'{host}:{port}'} did not come up: {answer.get('error')}\n{logs}")


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait(5)


# --- the run ------------------------------------------------------------------------------------

def measure(args: argparse.Namespace) -> dict[str, Any]:
    reason = DelayLine.unavailable_reason()
    if reason:
        raise BenchError(f"cannot build a delay line here: {reason}")
    for tool in ("nginx", "openssl"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            raise BenchError(f"'{tool}' is not installed")
    RUN.mkdir(parents=True, exist_ok=True)
    (RUN / "logs").mkdir(exist_ok=True)  # nginx opens <prefix>/logs/error.log before reading its config

    n, port = args.requests, args.port
    line = DelayLine(rtt_ms=args.rtt_ms)
    ca, crt, key = make_tls(line.server_ip)
    raw: dict[str, Any] = {"rtt_ms": args.rtt_ms, "requests": n, "server_ip": line.server_ip, "port": port}
    with line, ExitStack() as stack:
        bench = Bench(line, stack)
        conf = RUN / "upstream.conf"
        conf.write_text(upstream_conf(port, line.server_ip, crt, key))
        access = AccessLog(RUN / "access.log")
        bench.start("nginx", line.server_ns, ["nginx", "-p", RUN, "-c", conf, "-g", "daemon off;"])
        bench.wait("wait-tcp", line.server_ip, port, what="nginx in the server namespace")
        print(f"delay line up: {line}", flush=True)
        access.since_last()

        host, ca_s = line.server_ip, str(ca)
        bodies = {False: fixtures.request_body("bench", False), True: fixtures.request_body("bench", True)}
        direct_path = {False: "/json/v1/chat/completions", True: "/sse/v1/chat/completions"}

        def direct(op: str, stream: bool) -> dict[str, Any]:
            return bench.client({"op": op, "host": host, "port": port, "ca": ca_s, "path": direct_path[stream],
                                 "body": bodies[stream], "stream": stream, "n": n, "prime": True})

        for stream in (False, True):
            mode = "stream" if stream else "json"
            print(f"  direct, cold, {mode} ...", flush=True)
            raw[f"direct-cold-{mode}"] = direct("cold", stream)
            raw[f"direct-cold-{mode}"]["nginx"] = access.since_last()
            print(f"  direct, warm, {mode} ...", flush=True)
            raw[f"direct-warm-{mode}"] = direct("warm", stream)
            raw[f"direct-warm-{mode}"]["nginx"] = access.since_last()

        # The gateways start only now, so their keep-warm refresh (every pool.refresh_s, 20 s by
        # default) is unlikely to land in the middle of the few seconds measured below.
        upstream = f"https://{host}:{port}"
        bench.start("firsttoken-warm", line.client_ns, [FIRSTTOKEN, "serve", "--config",
                    gateway_config("warm", WARM_PORT, upstream, ca, args.warm), "--port", WARM_PORT])
        bench.start("firsttoken-cold", line.client_ns, [FIRSTTOKEN, "serve", "--config",
                    gateway_config("cold", COLD_PORT, upstream, ca, 0), "--port", COLD_PORT])
        bench.wait("wait-http", "127.0.0.1", WARM_PORT, "/readyz", what="firsttoken (pool.warm: "
                   f"{args.warm}) /readyz")
        bench.wait("wait-http", "127.0.0.1", COLD_PORT, "/readyz", what="firsttoken (pool.warm: 0) /readyz")
        raw["gateway-startup-nginx"] = access.since_last()  # the warm pool's probes

        def gateway(name: str, gw_port: int, stream: bool, count: int) -> dict[str, Any]:
            return bench.client({"op": "warm", "host": "127.0.0.1", "port": gw_port,
                                 "path": "/v1/chat/completions", "stream": stream, "n": count, "prime": False,
                                 "body": fixtures.request_body("bench-sse" if stream else "bench", stream)})

        for stream in (False, True):
            mode = "stream" if stream else "json"
            print(f"  firsttoken, pool warm, {mode} ...", flush=True)
            raw[f"gateway-warm-{mode}"] = gateway("warm", WARM_PORT, stream, n)
            raw[f"gateway-warm-{mode}"]["nginx"] = access.since_last()
        for stream in (False, True):
            # json and stream go to two upstreams, two pools: each one's first request is cold.
            mode = "stream" if stream else "json"
            print(f"  firsttoken, pool cold (first requests), {mode} ...", flush=True)
            raw[f"gateway-cold-{mode}"] = gateway("cold", COLD_PORT, stream, 3)
            raw[f"gateway-cold-{mode}"]["nginx"] = access.since_last()
        bench.check_alive()
        try:
            raw["forwarder"] = line.stats()
        except Exception as exc:  # stats are a nicety; never fail the run for them
            raw["forwarder"] = {"error": str(exc)}
    return raw


# --- the report ---------------------------------------------------------------------------------

def med(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Medians per path (the cold gateway's: its first request only), and each measured request's
    connection as nginx logged it, beside what the gateway's Server-Timing said about it."""
    out: dict[str, Any] = {}
    for mode in ("json", "stream"):
        first = "ttft_ms" if mode == "stream" else "ttfb_ms"
        for name in ("direct-cold", "direct-warm", "gateway-warm", "gateway-cold"):
            result = raw[f"{name}-{mode}"]
            samples = result["samples"]
            chat = [r for r in result.get("nginx", []) if r["uri"].endswith("/chat/completions")]
            if name == "direct-warm":
                chat = chat[1:]  # the untimed first request on the connection
            used = samples[:1] if name == "gateway-cold" else samples
            out[f"{name}-{mode}"] = {
                "n": len(used), "first_ms": med(used, first), "total_ms": med(used, "total_ms"),
                "ttfb_ms": med(used, "ttfb_ms"), "tcp_connect_ms": med(used, "tcp_connect_ms"),
                "tls_handshake_ms": med(used, "tls_handshake_ms"), "request_ms": med(used, "request_ms"),
                "min_total_ms": min(s["total_ms"] for s in used), "max_total_ms": max(s["total_ms"] for s in used),
                "tls_version": next((s["tls_version"] for s in used if s.get("tls_version")), None),
                "upstream_tls": sorted({r["tls"] for r in chat}),
                # per measured request, in order: did nginx see it on a new connection?
                "nginx_new_connection": [r["connection_requests"] == 1 for r in chat],
                "nginx_connections": len({r["connection"] for r in chat}),
                "server_timing_connect_ms": [s.get("upstream_connect_ms") for s in samples],
            }
    probes = [r for r in raw.get("gateway-startup-nginx", []) if r["uri"].endswith("/models")]
    out["gateway-startup"] = {"probes": len(probes), "connections": len({r["connection"] for r in probes}),
                              "tls": sorted({r["tls"] for r in probes})}
    return out


def report(raw: dict[str, Any], summary: dict[str, Any], rtt: float, warm: int) -> str:
    lines = []
    rows = [
        ("direct, cold: new TCP + TLS per request", "direct-cold", "TCP + TLS + request (3 RTT)"),
        ("direct, warm: one kept-alive connection", "direct-warm", "request only (1 RTT)"),
        (f"firsttoken, pool warm (warm: {warm})", "gateway-warm", "request only (1 RTT) + gateway"),
        ("firsttoken, pool cold (warm: 0), 1st request", "gateway-cold", "TCP + TLS + request (3 RTT) + gateway"),
    ]
    lines += ["| path | mode | what is paid | n | TTFB / TTFT median (ms) | total median (ms) | "
              "saved vs direct cold (ms) | × faster |",
              "|---|---|---|---|---|---|---|---|"]
    for mode in ("json", "stream"):
        cold = summary[f"direct-cold-{mode}"]
        for label, key, paid in rows:
            s = summary[f"{key}-{mode}"]
            if key == "direct-cold":
                saved, times = "—", "—"
            else:
                saved = f"{cold['first_ms'] - s['first_ms']:.1f}"
                times = f"{cold['first_ms'] / s['first_ms']:.2f}×"
            first = f"{fmt(s['first_ms'])} ({'TTFT' if mode == 'stream' else 'TTFB'})"
            lines.append(f"| {label} | {mode} | {paid} | {s['n']} | {first} | {fmt(s['total_ms'])} | "
                         f"{saved} | {times} |")
    lines += ["", "TTFB/TTFT are timed from the moment the client starts: before connect() on the cold direct "
              "path, at send() on a kept-alive connection (the client's loopback connection to firsttoken is "
              "open beforehand). 'saved' compares TTFB (json) or TTFT (stream) with direct, cold.", ""]

    cj = summary["direct-cold-json"]
    lines += ["| direct, cold, phase (json) | median (ms) | RTTs |", "|---|---|---|"]
    for label, key in (("TCP connect", "tcp_connect_ms"), ("TLS handshake", "tls_handshake_ms"),
                       ("request sent → first byte", "request_ms"), ("TTFB (all of it)", "ttfb_ms"),
                       ("total", "total_ms")):
        lines.append(f"| {label} | {fmt(cj[key])} | {cj[key] / rtt:.2f} |")
    lines.append("")

    connect = cj["tcp_connect_ms"]
    off = (connect - rtt) / rtt
    lines.append(f"RTT check: TCP connect median {connect:.2f} ms vs {rtt:g} ms configured: {off:+.2%} "
                 f"({'within' if abs(off) <= 0.02 else 'NOT within'} 2 %); TLS {cj['tls_version']}.")
    gw, dw = summary["gateway-warm-json"], summary["direct-warm-json"]
    gs, ds = summary["gateway-warm-stream"], summary["direct-warm-stream"]
    lines.append(f"firsttoken adds over direct, warm: {gw['total_ms'] - dw['total_ms']:+.2f} ms (json total), "
                 f"{gs['first_ms'] - ds['first_ms']:+.2f} ms (stream TTFT).")
    start = summary["gateway-startup"]
    lines.append(f"firsttoken start-up (pool.warm {warm} on each of 2 upstreams): {start['probes']} probes on "
                 f"{start['connections']} new upstream connections ({', '.join(start['tls']) or '?'}).")
    lines += ["", "| connections, as nginx logged them | mode | measured requests | on new connections | "
              "distinct connections | Server-Timing connect > 0 |", "|---|---|---|---|---|---|"]
    disagreements = []
    for mode in ("json", "stream"):
        for label, key in (("direct, cold", "direct-cold"), ("direct, warm", "direct-warm"),
                           (f"firsttoken, pool warm ({warm})", "gateway-warm"),
                           ("firsttoken, pool cold (0), 3 requests", "gateway-cold")):
            s = summary[f"{key}-{mode}"]
            new = s["nginx_new_connection"]
            flags = "—"
            if key.startswith("gateway"):
                said = [bool(c) for c in s["server_timing_connect_ms"]]
                flags = ", ".join("yes" if f else "no" for f in said)
                disagreements += [f"{label} {mode} request {i + 1}: nginx saw a "
                                  f"{'new' if seen else 'reused'} connection, Server-Timing said connect;dur="
                                  f"{fmt(s['server_timing_connect_ms'][i], 2)}"
                                  for i, (seen, told) in enumerate(zip(new, said, strict=True)) if seen != told]
            lines.append(f"| {label} | {mode} | {len(new)} | "
                         + (", ".join("new" if x else "reused" for x in new) if key == "gateway-cold"
                            else str(sum(new))) + f" | {s['nginx_connections']} | {flags} |")
    if disagreements:
        lines += ["", "Server-Timing `connect` disagrees with nginx on whether the gateway's upstream connection "
                  "was new:"] + [f"- {d}" for d in disagreements]
    lines.append("")
    fwd = raw.get("forwarder", {})
    if "client-to-server" in fwd:
        late = max(d.get("lateness_p99_ms", 0.0) or 0.0 for d in fwd.values())
        drops = sum(d.get("dropped", 0) or 0 for d in fwd.values())
        lines.append(f"delay line: forwarder lateness p99 {late:.2f} ms, {drops} frames dropped.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=150.0, help="round trip the delay line adds (default 150)")
    parser.add_argument("--requests", type=int, default=10, help="requests per measured path (default 10)")
    parser.add_argument("--warm", type=int, default=4, help="pool.warm of the warm gateway (default 4)")
    parser.add_argument("--port", type=int, default=443, help="the upstream's TLS port (default 443)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()

    # SIGTERM (a timeout, a closed terminal) unwinds like Ctrl-C, so the namespaces and processes go.
    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    print(f"machine: {platform.node()} · {os.cpu_count()} cores · {platform.platform()} · "
          f"python {platform.python_version()}")
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"rtt: {args.rtt_ms:g} ms · {args.requests} requests per path", flush=True)
    started = time.monotonic()
    try:
        raw = measure(args)
    except BenchError as exc:
        sys.exit(f"cold_warm: {exc}")
    except KeyboardInterrupt as exc:  # the namespaces and processes are gone by now
        print(f"\ncold_warm: interrupted ({exc or 'Ctrl-C'}); cleaned up", file=sys.stderr)
        sys.exit(130)
    summary = summarize(raw)
    print()
    print(report(raw, summary, args.rtt_ms, args.warm))
    print(f"\n(run took {time.monotonic() - started:.1f} s)")
    if args.json:
        args.json.write_text(json.dumps({"machine": platform.node(), "cores": os.cpu_count(),
                                         "argv": sys.argv, "summary": summary, "raw": raw}, indent=2))


if __name__ == "__main__":
    main()
