"""Shared fixtures of the Helm chart's tests: the sample-controller binary and a fresh embedded
API server per test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# What the tests import, by PyPI package name: without one of them every test skips, naming it.
REQUIRED = {"helm_sdkpy": "helm-sdkpy==0.1.32", "yaml": "PyYAML"}
MISSING = [pkg for module, pkg in REQUIRED.items() if importlib.util.find_spec(module) is None]
SKIP_REASON = (
    f"missing Python package(s) {', '.join(MISSING)}: "
    "python3 -m pip install --ignore-requires-python -r tests/helm/requirements.txt"
)

# The identity of the chart's pods for the default release (`sample-controller` in the
# namespace `sample-controller`): the ServiceAccount's user and groups, as a projected token
# authenticates (`system:serviceaccount:<namespace>:<name>`).
NAMESPACE = "sample-controller"
RELEASE = "sample-controller"
SA_TOKEN = "chart-service-account-token"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"]
# The chart's default image (values.yaml: image.repository and image.tag).
IMAGE = "sample-controller:dev"


@pytest.fixture(scope="session")
def binary() -> Path:
    from cluster import sample_controller_binary

    return sample_controller_binary()


@pytest.fixture
def server(binary: Path, tmp_path: Path):
    """`sample-controller apiserver --enforce-rbac` on 127.0.0.1:0, accepting SA_TOKEN as the
    chart's ServiceAccount."""
    from cluster import ApiServer

    api = ApiServer(binary, tmp_path, tokens=[(SA_TOKEN, SA_USER, SA_GROUPS)])
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def pod_server(binary: Path, tmp_path: Path):
    """As `server`, with the process node running the chart's pods: `--node-runtime process
    --image-binary sample-controller:dev=<binary>` makes a container of the chart's image this
    build's binary, run with the container's args, environment and ServiceAccount token."""
    from cluster import ApiServer

    api = ApiServer(
        binary,
        tmp_path,
        tokens=[(SA_TOKEN, SA_USER, SA_GROUPS)],
        extra_args=["--node-runtime=process", f"--image-binary={IMAGE}={binary}"],
    )
    try:
        yield api
    finally:
        api.stop()
