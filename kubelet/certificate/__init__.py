"""The kubelet's certificates: TLS bootstrapping of the client certificate, and
rotation of the client and serving certificates through the
certificates.k8s.io API (pkg/kubelet/certificate, k8s.io/client-go/util/certificate)."""
