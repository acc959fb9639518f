"""`lachesis.client` against a running `lachesis serve` (the binary tests/python.rs gives in
LACHESIS_BIN, on free ports, with the shipped model): the same answer as `lachesis decide`,
sessions, refusals naming the field, and stubs that match the .proto."""

import contextlib
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("grpc", reason="lachesis.client needs grpcio (pip install './python[client]')")

from conftest import ROOT  # noqa: E402
from lachesis.client import Client, ServiceError  # noqa: E402

SNAPSHOT_FILE = ROOT / "docs" / "examples" / "snapshot.json"


@contextlib.contextmanager
def _serve(lachesis_bin, env=None):
    """A service started for a test (``env``: its environment); yields its gRPC address."""
    proc = subprocess.Popen(
        [lachesis_bin, "serve", "--grpc", "127.0.0.1:0", "--http", ""],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        # "lachesis serve: gRPC on 127.0.0.1:PORT, HTTP on ...; model V (serving)"
        assert line.startswith("lachesis serve: gRPC on "), line
        yield line.split()[4].rstrip(",;")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def service(lachesis_bin):
    """The gRPC address of a service started for these tests."""
    with _serve(lachesis_bin) as address:
        yield address


@pytest.fixture
def snapshot() -> dict:
    return json.loads(SNAPSHOT_FILE.read_text())




def test_decide_answers_as_the_cli_does(service, snapshot, lachesis_bin):
    with Client(service) as c:
        answer = c.decide(snapshot, request_id="py")
    cli = subprocess.run(
        [lachesis_bin, "decide", "--server", service, "--snapshot", str(SNAPSHOT_FILE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert answer["request_id"] == "py"
    assert answer["decided_by"].startswith("model:"), answer
    printed = json.loads(cli.stdout)
    for key in set(printed) - {"decision_us", "request_id"}:
        assert answer[key] == printed[key], key


def test_a_session_takes_deltas_and_counts_revisions(service, snapshot):
    with Client(service) as c:
        session = c.session(snapshot)
        assert session.revision == 1
        assert session.answer["session"] == session.id
        after = session.decide({"now_ms": 7260000, "finished": ["train-llm-7"]})
        assert after["revision"] == 2 == session.revision
        # A delta that follows another revision: the caller must send the whole cluster.
        with pytest.raises(ServiceError) as stale:
            session.decide({"revision": 1, "now_ms": 7320000})
        assert stale.value.code == "FAILED_PRECONDITION", stale.value
        assert session.restart(snapshot)["revision"] == 1
        # Not a delta at all: refused before it is sent, naming the field.
        with pytest.raises(ValueError, match="finishd"):
            session.decide({"now_ms": 7320000, "finishd": ["x"]})
        # A delta the service refuses names its field.
        with pytest.raises(ServiceError) as bad:
            session.decide({"now_ms": 1})
        assert bad.value.code == "INVALID_ARGUMENT" and "now_ms" in bad.value.message, bad.value


def test_an_unknown_gpu_model_is_refused_naming_the_field(service, snapshot):
    snapshot["nodes"][0]["gpu_model"] = "V100x"
    with Client(service) as c, pytest.raises(ServiceError) as refused:
        c.decide(snapshot)
    assert refused.value.code == "INVALID_ARGUMENT"
    assert "snapshot.nodes[0].gpu_model" in refused.value.message, refused.value


def test_model_info_names_the_model_in_force(service):
    with Client(service) as c:
        info = c.model_info()
    assert info["status"] == "serving", info
    assert info["version"], info


def test_the_stubs_live_in_the_package_and_match_the_proto(tmp_path):
    import lachesis._proto.scheduler_pb2 as pb

    assert pb.DESCRIPTOR.package == "lachesis.v1"
    # Nothing top-level that would shadow or collide with other stubs.
    assert "scheduler_pb2" not in sys.modules and "lachesis.v1" not in sys.modules
    pytest.importorskip("grpc_tools", reason="regenerating needs grpcio-tools")
    subprocess.run(
        ["bash", str(ROOT / "python" / "gen_proto.sh"), sys.executable, str(tmp_path)],
        check=True,
    )
    shipped = ROOT / "python" / "lachesis" / "_proto"
    for name in ("scheduler_pb2.py", "scheduler_pb2.pyi", "scheduler_pb2_grpc.py"):
        assert (tmp_path / name).read_text() == (shipped / name).read_text(), (
            f"python/lachesis/_proto/{name} is stale: run bash python/gen_proto.sh"
        )


def test_reload_model_needs_the_admin_token_and_keeps_the_old_model_on_a_bad_path(lachesis_bin):
    env = dict(os.environ, LACHESIS_ADMIN_TOKEN="admin-secret")
    with _serve(lachesis_bin, env) as address, Client(address) as c:
        with pytest.raises(ServiceError) as refused:
            c.reload_model("wrong-token", str(ROOT / "models" / "default"))
        assert refused.value.code in ("UNAUTHENTICATED", "PERMISSION_DENIED"), refused.value
        bad = c.reload_model("admin-secret", str(ROOT / "models" / "no-such-model"))
        assert not bad.get("ok", False), bad
        assert "no-such-model" in bad["message"], bad
        good = c.reload_model("admin-secret", str(ROOT / "models" / "default"))
        assert good["ok"], good
        assert good["info"]["status"] in ("serving", "cold"), good
        assert c.model_info()["status"] == good["info"]["status"]
