"""The pod-resources API, v1alpha1 (generated from api.proto by hack/gen_proto.py)."""
