"""CRI (runtime.v1) client side: the wire definition, gRPC clients, fakes."""
