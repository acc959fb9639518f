"""gRPC stubs of the decision service, generated from serve/proto/lachesis/v1/scheduler.proto by
python/gen_proto.sh. Use `lachesis.client`; these are its wire types."""
