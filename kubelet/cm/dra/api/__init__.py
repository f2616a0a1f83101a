"""The kubelet <-> DRA driver API, v1 (generated from api.proto by hack/gen_proto.py)."""
