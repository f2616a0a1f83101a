"""The pod-resources API (pkg/kubelet/apis/podresources): which devices, exclusive
CPUs and memory blocks each container of the node's pods holds, and what the
node can hand out, over gRPC on <root-dir>/pod-resources/kubelet.sock."""

# The directory under the root dir and the socket in it (upstream's
# DefaultKubeletPodResourcesDirName and podresources.Socket + ".sock").
POD_RESOURCES_DIR = "pod-resources"
SOCKET_NAME = "kubelet.sock"
# Rate limit of every call on the socket, as upstream (DefaultQPS, DefaultBurstTokens).
DEFAULT_QPS = 100
DEFAULT_BURST_TOKENS = 10
