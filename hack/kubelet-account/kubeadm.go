package main

import (
	"io"
	"os"
	"path/filepath"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	kubeadmapi "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm"
	"k8s.io/kubernetes/cmd/kubeadm/app/componentconfigs"
	kubeletphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/kubelet"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"
)

// writeKubeadmFiles writes what `kubeadm init` of this release puts under
// /var/lib/kubelet for the node it runs on (kubelet-start phase), and the
// same for a kind-style node, whose cluster config patches the
// KubeletConfiguration and adds kubelet flags. Both call kubeadm's own
// defaulting and writers; only the inputs are chosen here.
func writeKubeadmFiles(out string) error {
	if err := writeNode(filepath.Join(out, "kubeadm"), nil, nil); err != nil {
		return err
	}
	// kind's KubeletConfiguration patch and kubeletExtraArgs for a node.
	kind := &kubeletv1beta1.KubeletConfiguration{
		CgroupDriver:                "systemd",
		CgroupRoot:                  "/kubelet",
		FailSwapOn:                  ptr.To(false),
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		EvictionHard: map[string]string{
			"nodefs.available":  "0%",
			"nodefs.inodesFree": "0%",
			"imagefs.available": "0%",
		},
	}
	extra := []kubeadmapi.Arg{
		{Name: "node-ip", Value: "172.18.0.2"},
		{Name: "node-labels", Value: ""},
		{Name: "provider-id", Value: "kind://docker/kind/kind-control-plane"},
	}
	return writeNode(filepath.Join(out, "kind"), kind, extra)
}

func writeNode(dir string, kubelet *kubeletv1beta1.KubeletConfiguration, extraArgs []kubeadmapi.Arg) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg, err := configutil.DefaultedStaticInitConfiguration()
	if err != nil {
		return err
	}
	cfg.NodeRegistration.KubeletExtraArgs = extraArgs
	if kubelet != nil {
		// A user-supplied KubeletConfiguration, defaulted by kubeadm as at init.
		kc := cfg.ClusterConfiguration.ComponentConfigs[componentconfigs.KubeletGroup]
		kc.Set(kubelet)
		kc.Default(&cfg.ClusterConfiguration, &cfg.LocalAPIEndpoint, &cfg.NodeRegistration)
	}
	// The kubelet-start phase, in its order.
	if err := kubeletphase.WriteKubeletDynamicEnvFile(&cfg.ClusterConfiguration, &cfg.NodeRegistration, false, dir); err != nil {
		return err
	}
	instance := &kubeletv1beta1.KubeletConfiguration{ContainerRuntimeEndpoint: cfg.NodeRegistration.CRISocket}
	if err := kubeletphase.WriteInstanceConfigToDisk(instance, dir); err != nil {
		return err
	}
	return kubeletphase.WriteConfigToDisk(&cfg.ClusterConfiguration, dir, "", io.Discard)
}
