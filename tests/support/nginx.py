"""deploy/nginx.conf as a real nginx process on loopback: the same file, with only its addresses and the
paths it writes moved into the test's folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from support.gateway_process import answers, free_port, terminate

DEPLOY_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def local_conf(text: str, backends: list[int], port: int, workdir: Path) -> str:
    """deploy/nginx.conf listening on 127.0.0.1:`port` in front of replicas on loopback `backends`, in the
    order of its `server` lines; what it writes (pid, temporary files) in `workdir`."""
    servers = iter(backends)
    text = re.sub(r"server gateway-\d+:8787", lambda _: f"server 127.0.0.1:{next(servers)}", text)
    assert next(servers, None) is None, "deploy/nginx.conf names fewer replicas than the test started"
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{port};").replace("/tmp/", f"{workdir}/")
    # Run as root (CI), nginx's workers would be `nobody`, who cannot enter the test's folder.
    return ("user root;\n" if os.geteuid() == 0 else "") + text


class NginxProcess:
    def __init__(self, backends: list[int], workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.conf = workdir / "nginx.conf"
        self.conf.write_text(local_conf(DEPLOY_CONF.read_text(), backends, self.port, workdir))
        self.log_path = workdir / "nginx.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> NginxProcess:
        binary = nginx_binary()
        assert binary is not None, "nginx is not installed (apt-get install nginx)"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen([binary, "-p", str(self.workdir), "-c", str(self.conf), "-g", "daemon off;"],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        if not answers(self.process, self.url + "/nginx-healthz", 20, "nginx", self.log):
            self.__exit__()
            raise RuntimeError(f"nginx did not answer:\n{self.log()}")
        return self

    def __exit__(self, *exc: object) -> None:
        terminate(self.process)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
