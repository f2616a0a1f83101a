"""Node conformance: the upstream e2e [Conformance] tests of common/node and
common/storage against our kubelet and the upstream one (`python -m benches.conformance`)."""
