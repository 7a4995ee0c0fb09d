package lab

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// configMapMounts gives a chart pod run as a process the ConfigMap volumes a kubelet would
// mount into its container: each ConfigMap volume's keys are written as files under dir, and
// the result maps each mount path to its folder there. Other volumes are the host's own
// folders (the lab passes them as flags) and are left out.
func configMapMounts(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, dir string) (map[string]string, error) {
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("pod %s: the lab runs pods of one container", pod.Name)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok || v.ConfigMap == nil {
			continue
		}
		cm, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("pod %s, volume %s: %w", pod.Name, v.Name, err)
		}
		local := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(local, 0o755); err != nil {
			return nil, err
		}
		files := cm.Data
		if len(v.ConfigMap.Items) > 0 {
			files = map[string]string{}
			for _, it := range v.ConfigMap.Items {
				files[it.Path] = cm.Data[it.Key]
			}
		}
		for name, data := range files {
			if !filepath.IsLocal(name) {
				return nil, fmt.Errorf("pod %s, volume %s: file %q leaves the volume", pod.Name, v.Name, name)
			}
			p := filepath.Join(local, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				return nil, err
			}
		}
		target := local
		if m.SubPath != "" {
			target = filepath.Join(local, m.SubPath)
		}
		mounts[path.Clean(m.MountPath)] = target
	}
	return mounts, nil
}

// inMounts rewrites the flags of argv whose value is a path inside one of mounts (container
// path → folder on this machine) to that path on this machine.
func inMounts(argv []string, mounts map[string]string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = a
		name, value, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "--") || !path.IsAbs(value) {
			continue
		}
		for mountPath, local := range mounts {
			if rest, ok := strings.CutPrefix(path.Clean(value), mountPath); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
				out[i] = name + "=" + local + filepath.FromSlash(rest)
				break
			}
		}
	}
	return out
}
