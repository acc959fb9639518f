#!/usr/bin/env bash
# Regenerates the gRPC stubs of `lachesis.client` (python/lachesis/_proto/) from the service's
# .proto, under the package's own namespace: the messages are `lachesis._proto.scheduler_pb2`,
# never a top-level `lachesis.v1` that would shadow the installed package. Needs grpcio-tools
# (python/requirements-test.txt pins the version the checked-in files were made with):
#   bash python/gen_proto.sh [PYTHON [OUT_DIR]]
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-python3}"
out="${2:-python/lachesis/_proto}"
"$py" -m grpc_tools.protoc -I serve/proto/lachesis/v1 \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" scheduler.proto
# The service stubs import the messages as a top-level module; in the package they are a sibling.
sed -i 's/^import scheduler_pb2 as scheduler__pb2$/from . import scheduler_pb2 as scheduler__pb2/' \
  "$out/scheduler_pb2_grpc.py"
