"""The embedded API server and the manager as processes, for the Helm chart's tests.

`ApiServer` runs `sample-controller apiserver` on 127.0.0.1:0 (its URL is read from the line it
prints once it serves), with RBAC enforced and a token for the chart's ServiceAccount (and, for
the pod test, `--node-runtime process --image-binary IMAGE=<this binary>`, so the chart's pods
are this binary's processes), and talks to it over HTTPS with the CA and the admin token of the
kubeconfig it writes. `Manager` runs
`sample-controller run` with the arguments of the chart's Deployment, authenticated as that
ServiceAccount, so exactly the chart's RBAC applies to it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "artifacts" / "charts" / "sample-controller"

# How long any wait for the cluster may take before the test fails with what it last saw. A
# ceiling against hanging forever, not a performance assertion: every wait ends as soon as its
# condition holds.
WAIT_CEILING = 180.0


def sample_controller_binary() -> Path:
    """The `sample-controller` binary: $SAMPLE_CONTROLLER_BIN (tests/integration/sample_controller/helm_chart.rs
    sets it), else the one `cargo build --bin sample-controller` builds (cargo says where)."""
    env = os.environ.get("SAMPLE_CONTROLLER_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            raise FileNotFoundError(f"SAMPLE_CONTROLLER_BIN={env} is not a file")
        return path
    out = subprocess.run(
        ["cargo", "build", "--quiet", "--bin", "sample-controller", "--message-format=json"],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if (
            msg.get("reason") == "compiler-artifact"
            and msg.get("executable")
            and (msg.get("target", {}).get("name") == "sample-controller")
        ):
            return Path(msg["executable"])
    raise FileNotFoundError("cargo build named no sample-controller executable")


def wait_for(what: str, probe: Callable[[], Any], ceiling: float = WAIT_CEILING) -> Any:
    """Calls `probe` until it returns something truthy, and returns that; fails naming `what`
    and the last value seen once the ceiling passes."""
    deadline = time.monotonic() + ceiling
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}; last seen: {last!r}")
        time.sleep(0.1)


class HttpError(Exception):
    def __init__(self, code: int, body: str):
        super().__init__(f"HTTP {code}: {body}")
        self.code = code
        self.body = body


class ApiServer:
    """`sample-controller apiserver` as a child process (stopped with SIGTERM by `stop`)."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        tokens: list[tuple[str, str, list[str]]],
        extra_args: list[str] | None = None,
    ):
        """`tokens`: (token, user, groups) accepted besides the admin's; `extra_args`: more
        flags of `apiserver`."""
        self.workdir = workdir
        self.kubeconfig = workdir / "admin.kubeconfig"
        token_file = workdir / "tokens.csv"
        token_file.write_text("".join(f'{t},{u},{u},"{",".join(g)}"\n' for t, u, g in tokens))
        self.log_path = workdir / "apiserver.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [
                str(binary),
                "apiserver",
                "--listen=127.0.0.1:0",
                f"--kubeconfig-out={self.kubeconfig}",
                f"--token-auth-file={token_file}",
                "--enforce-rbac",
                *(extra_args or []),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = ""
        for line in self.proc.stdout:
            match = re.match(r"API server listening at (\S+)", line)
            if match:
                self.url = match.group(1)
                break
        if not self.url:
            code = self.proc.wait()
            raise RuntimeError(f"the API server exited ({code}) before serving: {self.log()}")
        # Keep draining stdout so the server never blocks on a full pipe.
        self._drain = threading.Thread(target=self._copy_stdout, daemon=True)
        self._drain.start()
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.admin_token = config["users"][0]["user"]["token"]
        self._tls = ssl.create_default_context(cadata=self.ca_pem)

    def _copy_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()[-4000:]

    def kubeconfig_for(self, token: str, path: Path) -> Path:
        """A copy of the admin kubeconfig that authenticates with `token` instead."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        for user in config["users"]:
            user["user"] = {"token": token}
        path.write_text(yaml.safe_dump(config))
        return path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._tls, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            raise HttpError(e.code, e.read().decode()) from None
        if resp.headers.get("Content-Type", "").startswith("application/json"):
            return json.loads(text)
        return text

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def get_opt(self, path: str) -> Any:
        """The object at `path`, or None when it does not exist."""
        try:
            return self.get(path)
        except HttpError as e:
            if e.code == 404:
                return None
            raise

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def request_counts(self, code: int) -> list[str]:
        """The `apiserver_request_total` series of /metrics with this HTTP status code."""
        text = self.get("/metrics")
        return [
            line
            for line in text.splitlines()
            if line.startswith("apiserver_request_total{") and f'code="{code}"' in line
        ]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join()
        self._log.close()


def container_args(deployment: dict[str, Any], namespace: str) -> list[str]:
    """The arguments (`args`, after the binary) of the manager container of a Deployment as the
    kubelet would pass them:
    `$(POD_NAMESPACE)` expanded from the downward API, then the listen addresses moved to
    127.0.0.1:0 (a port the kernel picks: the test may not take the pod's fixed ports)."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {
        e["name"]: namespace
        for e in container.get("env", [])
        if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace"
    }
    args = []
    for arg in container["args"]:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        flag, _, value = arg.partition("=")
        if flag in ("--metrics-bind-address", "--health-probe-bind-address") and value != "0":
            arg = f"{flag}=127.0.0.1:0"
        args.append(arg)
    return args


class Manager:
    """`sample-controller <args>` as a child process, its output in a log file."""

    def __init__(self, binary: Path, args: list[str], log_path: Path):
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(binary), *args], stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()[-6000:]

    def stop(self) -> int:
        """SIGTERM, then the exit code (a graceful stop drains, releases the Lease, exits 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def kubectl() -> str | None:
    return shutil.which("kubectl")


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <directory>`: the objects it builds."""
    binary = kubectl()
    assert binary is not None
    out = subprocess.run(
        [binary, "kustomize", str(directory)], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]
