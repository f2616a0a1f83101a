"""The node e2e harness (test/e2e_node of k8s.io/kubernetes): python -m benches.node_e2e."""
