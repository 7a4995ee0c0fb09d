package placement

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPodsRejectsBadRows(t *testing.T) {
	const header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
	cases := []struct {
		name, rows, want string
	}{
		{"a number that is not one", "a,1000,10,1,500,\nb,x,10,1,500,\n", "pods.csv:3: cpu_milli: \"x\" is not a non-negative integer"},
		{"an unknown GPU model", "a,1000,10,1,500,T4|H100\n", "pods.csv:2: gpu_spec: unknown GPU model \"H100\": known models are G1, G2, G3, T4, P100, V100M16, V100M32, A10"},
		{"a share that is not a whole percent", "a,1000,10,1,455,\n", "pods.csv:2: gpu_milli: 455 is not a multiple of 10"},
		{"several fractional GPUs", "a,1000,10,2,500,\n", "pods.csv:2: gpu_milli: 500 with num_gpu 2"},
		{"too few fields", "a,1000,10,1\n", "pods.csv:2: 4 fields, want 5 to 6"},
		{"a negative demand", "a,1000,10,-1,500,\n", "pods.csv:2: num_gpu: \"-1\" is not a non-negative integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadPods(writeFile(t, "pods.csv", header+c.rows))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestLoadPodsReadsBothLayouts(t *testing.T) {
	short, err := LoadPods(writeFile(t, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,8,1000\n"))
	if err != nil || len(short) != 1 || short[0].Demand() != 8000 {
		t.Fatalf("multigpu layout: %v %+v", err, short)
	}
	long, err := LoadPods(writeFile(t, "d.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\na,1000,10,1,460,T4|P100,LS,Running,0,1,0\n"))
	if err != nil || len(long) != 1 || !long[0].Fractional() || strings.Join(long[0].Models, "|") != "T4|P100" {
		t.Fatalf("default layout: %v %+v", err, long)
	}
}

func TestLoadNodesRejectsUnknownModels(t *testing.T) {
	_, err := LoadNodes(writeFile(t, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,10,2,T4\nn1,1000,10,8,H100\n"))
	if err == nil || !strings.Contains(err.Error(), "nodes.csv:3: model: unknown GPU model \"H100\"") {
		t.Fatalf("got %v", err)
	}
}
