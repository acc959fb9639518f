from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Snapshot(_message.Message):
    __slots__ = ("cluster", "now_ms", "nodes", "running", "pending")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    now_ms: int
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    running: _containers.RepeatedCompositeFieldContainer[RunningJob]
    pending: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, cluster: _Optional[str] = ..., now_ms: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., running: _Optional[_Iterable[_Union[RunningJob, _Mapping]]] = ..., pending: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "gpu_model", "gpus", "gpu_free_milli", "cpu_milli", "cpu_free_milli", "mem_mib", "mem_free_mib", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_FREE_MILLI_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    CPU_FREE_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEM_MIB_FIELD_NUMBER: _ClassVar[int]
    MEM_FREE_MIB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    gpu_model: str
    gpus: int
    gpu_free_milli: _containers.RepeatedScalarFieldContainer[int]
    cpu_milli: int
    cpu_free_milli: int
    mem_mib: int
    mem_free_mib: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., gpu_model: _Optional[str] = ..., gpus: _Optional[int] = ..., gpu_free_milli: _Optional[_Iterable[int]] = ..., cpu_milli: _Optional[int] = ..., cpu_free_milli: _Optional[int] = ..., mem_mib: _Optional[int] = ..., mem_free_mib: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "tenant", "priority", "qos", "preemptible", "tasks", "gpus_per_task", "gpu_milli", "cpu_milli", "mem_mib", "gpu_types", "estimate_ms", "wait_ms", "kind", "attained_ms", "idle_ms", "constraints", "distinct_nodes", "workload", "min_gpus", "max_gpus")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_TASK_FIELD_NUMBER: _ClassVar[int]
    GPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEM_MIB_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ATTAINED_MS_FIELD_NUMBER: _ClassVar[int]
    IDLE_MS_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_NODES_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    MIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    priority: int
    qos: str
    preemptible: bool
    tasks: int
    gpus_per_task: int
    gpu_milli: int
    cpu_milli: int
    mem_mib: int
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    estimate_ms: int
    wait_ms: int
    kind: str
    attained_ms: int
    idle_ms: int
    constraints: str
    distinct_nodes: bool
    workload: str
    min_gpus: int
    max_gpus: int
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., priority: _Optional[int] = ..., qos: _Optional[str] = ..., preemptible: _Optional[bool] = ..., tasks: _Optional[int] = ..., gpus_per_task: _Optional[int] = ..., gpu_milli: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., mem_mib: _Optional[int] = ..., gpu_types: _Optional[_Iterable[str]] = ..., estimate_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., kind: _Optional[str] = ..., attained_ms: _Optional[int] = ..., idle_ms: _Optional[int] = ..., constraints: _Optional[str] = ..., distinct_nodes: _Optional[bool] = ..., workload: _Optional[str] = ..., min_gpus: _Optional[int] = ..., max_gpus: _Optional[int] = ...) -> None: ...

class TaskPlacement(_message.Message):
    __slots__ = ("node", "gpus")
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    node: str
    gpus: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node: _Optional[str] = ..., gpus: _Optional[_Iterable[int]] = ...) -> None: ...

class RunningJob(_message.Message):
    __slots__ = ("job", "tasks", "run_ms")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RUN_MS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    tasks: _containers.RepeatedCompositeFieldContainer[TaskPlacement]
    run_ms: int
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskPlacement, _Mapping]]] = ..., run_ms: _Optional[int] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("job", "tasks")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    job: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskPlacement]
    def __init__(self, job: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskPlacement, _Mapping]]] = ...) -> None: ...

class PendingReason(_message.Message):
    __slots__ = ("job", "kind", "message", "blocked_by")
    JOB_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_BY_FIELD_NUMBER: _ClassVar[int]
    job: str
    kind: str
    message: str
    blocked_by: str
    def __init__(self, job: _Optional[str] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., blocked_by: _Optional[str] = ...) -> None: ...

class Fallback(_message.Message):
    __slots__ = ("reason", "detail")
    FROM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    reason: str
    detail: str
    def __init__(self, reason: _Optional[str] = ..., detail: _Optional[str] = ..., **kwargs) -> None: ...

class DecideRequest(_message.Message):
    __slots__ = ("snapshot", "request_id", "session", "delta")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    request_id: str
    session: str
    delta: SnapshotDelta
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., request_id: _Optional[str] = ..., session: _Optional[str] = ..., delta: _Optional[_Union[SnapshotDelta, _Mapping]] = ...) -> None: ...

class SnapshotDelta(_message.Message):
    __slots__ = ("revision", "now_ms", "finished", "requeued", "submitted")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    now_ms: int
    finished: _containers.RepeatedScalarFieldContainer[str]
    requeued: _containers.RepeatedScalarFieldContainer[str]
    submitted: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, revision: _Optional[int] = ..., now_ms: _Optional[int] = ..., finished: _Optional[_Iterable[str]] = ..., requeued: _Optional[_Iterable[str]] = ..., submitted: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class DecideResponse(_message.Message):
    __slots__ = ("placements", "preemptions", "pending", "decided_by", "arm", "fallbacks", "decision_us", "request_id", "session", "revision", "rerouted", "shares", "resizes")
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    ARM_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    DECISION_US_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REROUTED_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    RESIZES_FIELD_NUMBER: _ClassVar[int]
    placements: _containers.RepeatedCompositeFieldContainer[Placement]
    preemptions: _containers.RepeatedScalarFieldContainer[str]
    pending: _containers.RepeatedCompositeFieldContainer[PendingReason]
    decided_by: str
    arm: str
    fallbacks: _containers.RepeatedCompositeFieldContainer[Fallback]
    decision_us: int
    request_id: str
    session: str
    revision: int
    rerouted: str
    shares: _containers.RepeatedCompositeFieldContainer[Placement]
    resizes: _containers.RepeatedCompositeFieldContainer[Placement]
    def __init__(self, placements: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., preemptions: _Optional[_Iterable[str]] = ..., pending: _Optional[_Iterable[_Union[PendingReason, _Mapping]]] = ..., decided_by: _Optional[str] = ..., arm: _Optional[str] = ..., fallbacks: _Optional[_Iterable[_Union[Fallback, _Mapping]]] = ..., decision_us: _Optional[int] = ..., request_id: _Optional[str] = ..., session: _Optional[str] = ..., revision: _Optional[int] = ..., rerouted: _Optional[str] = ..., shares: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., resizes: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("snapshot", "job", "nodes")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    job: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., job: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeScore(_message.Message):
    __slots__ = ("node", "feasible", "reason", "score")
    NODE_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    node: str
    feasible: bool
    reason: str
    score: int
    def __init__(self, node: _Optional[str] = ..., feasible: _Optional[bool] = ..., reason: _Optional[str] = ..., score: _Optional[int] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeScore]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeScore, _Mapping]]] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("snapshot", "job")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    job: str
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., job: _Optional[str] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("job", "placed", "placement", "reason", "decided_by")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    job: str
    placed: bool
    placement: Placement
    reason: PendingReason
    decided_by: str
    def __init__(self, job: _Optional[str] = ..., placed: _Optional[bool] = ..., placement: _Optional[_Union[Placement, _Mapping]] = ..., reason: _Optional[_Union[PendingReason, _Mapping]] = ..., decided_by: _Optional[str] = ...) -> None: ...

class ModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfoResponse(_message.Message):
    __slots__ = ("status", "path", "version", "feature_schema", "trained_on", "git_revision", "validation_relative_jct", "detail", "routing", "baseline", "fallback_chain", "loaded_at_unix_s", "deciding")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TRAINED_ON_FIELD_NUMBER: _ClassVar[int]
    GIT_REVISION_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_RELATIVE_JCT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_CHAIN_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    DECIDING_FIELD_NUMBER: _ClassVar[int]
    status: str
    path: str
    version: str
    feature_schema: int
    trained_on: str
    git_revision: str
    validation_relative_jct: float
    detail: str
    routing: str
    baseline: str
    fallback_chain: _containers.RepeatedScalarFieldContainer[str]
    loaded_at_unix_s: int
    deciding: str
    def __init__(self, status: _Optional[str] = ..., path: _Optional[str] = ..., version: _Optional[str] = ..., feature_schema: _Optional[int] = ..., trained_on: _Optional[str] = ..., git_revision: _Optional[str] = ..., validation_relative_jct: _Optional[float] = ..., detail: _Optional[str] = ..., routing: _Optional[str] = ..., baseline: _Optional[str] = ..., fallback_chain: _Optional[_Iterable[str]] = ..., loaded_at_unix_s: _Optional[int] = ..., deciding: _Optional[str] = ...) -> None: ...

class ReloadModelRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class ReloadModelResponse(_message.Message):
    __slots__ = ("ok", "message", "info")
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    message: str
    info: ModelInfoResponse
    def __init__(self, ok: _Optional[bool] = ..., message: _Optional[str] = ..., info: _Optional[_Union[ModelInfoResponse, _Mapping]] = ...) -> None: ...

class ReportNodesRequest(_message.Message):
    __slots__ = ("nodes", "source")
    NODES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    source: str
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., source: _Optional[str] = ...) -> None: ...

class ReportNodesResponse(_message.Message):
    __slots__ = ("accepted", "known")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    known: int
    def __init__(self, accepted: _Optional[int] = ..., known: _Optional[int] = ...) -> None: ...
