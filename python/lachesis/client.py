"""A client for the decision service (`lachesis serve`): a decision for a cluster snapshot,
sessions (one snapshot, then only what changed), and the model's info.

Messages go in and come out as dicts with the .proto's field names: the JSON that
``lachesis decide`` reads and prints (``docs/examples/snapshot.json`` is a snapshot). Needs
``grpcio`` and ``protobuf`` (``pip install './python[client]'``)::

    from lachesis.client import Client

    with Client("127.0.0.1:50051") as service:
        answer = service.decide(snapshot)                  # placements, pending, decided_by, ...
        session = service.session(snapshot)                # opens it: session.answer
        session.decide({"now_ms": 7260000, "finished": ["train-llm-7"]})

A snapshot or delta the service refuses raises `ServiceError` with its gRPC status and the
service's message, which names the field (``snapshot.nodes[0].gpu_model: unknown GPU model``);
a dict that is not a message raises `ValueError` naming the field.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from ._proto import scheduler_pb2 as pb
from ._proto import scheduler_pb2_grpc as pb_grpc

__all__ = ["Client", "Session", "ServiceError"]


class ServiceError(Exception):
    """The service refused or failed a call: ``code`` is the gRPC status (``"INVALID_ARGUMENT"``,
    ``"FAILED_PRECONDITION"``, ``"UNAVAILABLE"``, ...), ``message`` the service's reason."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _message(cls, value: dict, what: str):
    try:
        return json_format.ParseDict(value, cls())
    except json_format.ParseError as e:
        raise ValueError(f"{what}: {e}") from None


_INT64 = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def _dict(message) -> dict:
    value = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _int64s_as_ints(message.DESCRIPTOR, value)
    return value


def _int64s_as_ints(descriptor, value: dict) -> None:
    """Proto JSON writes 64-bit integers as strings; a dict of Python's holds them as ints, as
    `lachesis decide` prints them."""
    for field in descriptor.fields:
        if field.name not in value:
            continue
        v = value[field.name]
        if field.message_type is not None:
            if not field.message_type.GetOptions().map_entry:
                for item in v if field.is_repeated else [v]:
                    _int64s_as_ints(field.message_type, item)
        elif field.cpp_type in _INT64:
            value[field.name] = [int(x) for x in v] if field.is_repeated else int(v)


class Client:
    """A connection to the service at ``address`` (``host:port``). ``token``: a bearer token to
    present (the service's ``auth.token_file``); ``ca``: a PEM CA certificate file, for a TLS
    service; ``timeout_s``: the deadline of each call."""

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        token: Optional[str] = None,
        ca: Optional[str] = None,
        timeout_s: float = 30.0,
    ):
        if ca is not None:
            with open(ca, "rb") as f:
                self._channel = grpc.secure_channel(
                    address, grpc.ssl_channel_credentials(root_certificates=f.read())
                )
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.SchedulerStub(self._channel)
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ServiceError(e.code().name, e.details() or "") from None

    def _decide(self, request: "pb.DecideRequest") -> dict:
        return _dict(self._call(self._stub.Decide, request))

    def decide(self, snapshot: dict, request_id: str = "") -> dict:
        """The service's decision for ``snapshot`` (a ``Snapshot`` as a dict): placements,
        preemptions, why each pending job waits, who decided, the arm and any fallbacks."""
        return self._decide(
            pb.DecideRequest(
                snapshot=_message(pb.Snapshot, snapshot, "snapshot"), request_id=request_id
            )
        )

    def session(self, snapshot: dict, session_id: Optional[str] = None) -> "Session":
        """Opens a session with ``snapshot`` (its answer is the session's ``answer``); later
        requests send only what changed. ``session_id`` defaults to one of this process."""
        session_id = session_id or f"python-{os.getpid()}-{time.time_ns()}"
        return Session(self, session_id, snapshot)

    def model_info(self) -> dict:
        """The model in force: status, version, schema, training data, routing, fallbacks."""
        return _dict(self._call(self._stub.ModelInfo, pb.ModelInfoRequest()))

    def reload_model(self, admin_token: str, path: str = "") -> dict:
        """Loads the model directory ``path`` on the service (empty: its configured one) and
        serves it until the next restart or reload: ``{"ok": ..., "message": ..., "info":
        {...}}``. ``admin_token`` is the service's admin token (``auth.admin_token_file``); a
        directory that fails to load leaves the old model in force (``ok`` false, the message
        says why)."""
        try:
            reply = self._stub.ReloadModel(
                pb.ReloadModelRequest(path=path),
                timeout=self._timeout_s,
                metadata=[("authorization", f"Bearer {admin_token}")],
            )
        except grpc.RpcError as e:
            raise ServiceError(e.code().name, e.details() or "") from None
        return _dict(reply)


class Session:
    """A session on the service: the service keeps the cluster as its last answer left it (that
    answer counts as carried out), and each `decide` sends a ``SnapshotDelta``. The service drops
    an idle session after its ``session_ttl_s``; `restart` sends a whole snapshot again."""

    def __init__(self, client: Client, session_id: str, snapshot: dict):
        self.client = client
        self.id = session_id
        self.answer: dict = {}
        self.restart(snapshot)

    @property
    def revision(self) -> int:
        """The revision of the last answer (the next delta follows it)."""
        return int(self.answer.get("revision", 0))

    def restart(self, snapshot: dict) -> dict:
        """Sends the whole cluster again (anything the deltas cannot say); revision 1."""
        self.answer = self.client._decide(
            pb.DecideRequest(
                session=self.id, snapshot=_message(pb.Snapshot, snapshot, "snapshot")
            )
        )
        return self.answer

    def decide(self, delta: dict) -> dict:
        """Sends ``delta`` (a ``SnapshotDelta`` as a dict: ``now_ms``, ``finished``,
        ``requeued``, ``submitted``) and returns the answer. Without ``revision`` it follows
        the last answer."""
        message = _message(pb.SnapshotDelta, delta, "delta")
        if message.revision == 0:
            message.revision = self.revision
        self.answer = self.client._decide(pb.DecideRequest(session=self.id, delta=message))
        return self.answer
