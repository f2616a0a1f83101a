"""The device plugin API, v1beta1 (generated from api.proto by hack/gen_proto.py)."""
