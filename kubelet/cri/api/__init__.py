"""Generated CRI runtime.v1 stubs (api_pb2, api_pb2_grpc) from api.proto; see hack/gen_proto.py."""
