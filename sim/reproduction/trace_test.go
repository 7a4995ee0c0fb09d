package reproduction

import (
	"fmt"
	"io"
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
		{"a quote never closed", "a,1000,10,1,500,\n\"b,1000\n", `pods.csv: parse error on line 3, column 9: extraneous or missing " in quoted-field`},
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

// endless is an endless stream of one byte.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for k := range p {
		p[k] = byte(e)
	}
	return len(p), nil
}

func TestTraceBounds(t *testing.T) {
	const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
	const nodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n"
	var manyNodes strings.Builder
	manyNodes.WriteString(nodeHeader)
	for k := range MaxNodes + 1 {
		fmt.Fprintf(&manyNodes, "openb-node-%05d,1000,10,1,T4\n", k)
	}
	cases := []struct {
		name string
		read func() error
		want string
	}{
		{"a pod list of only its header", func() error { _, err := LoadPods(writeFile(t, "pods.csv", podHeader)); return err },
			"pods.csv: no pods after the header; a pod list has 1..2000000"},
		{"a node list of only its header", func() error { _, err := LoadNodes(writeFile(t, "nodes.csv", nodeHeader)); return err },
			"nodes.csv: no nodes after the header; a node list has 1..5000"},
		{"a pod asking for more GPUs than a node has", func() error {
			_, err := LoadPods(writeFile(t, "pods.csv", podHeader+"a,1000,10,64,1000\n"))
			return err
		}, "pods.csv:2: num_gpu: 64 is more than 32; accepted values are 0..32"},
		{"a node with more GPUs than a node has", func() error {
			_, err := LoadNodes(writeFile(t, "nodes.csv", nodeHeader+"n0,1000,10,1000000000,T4\n"))
			return err
		}, "nodes.csv:2: gpu: 1000000000 is more than 32; accepted values are 0..32"},
		{"an absurd CPU request", func() error {
			_, err := LoadPods(writeFile(t, "pods.csv", podHeader+"a,9223372036854775807,10,1,1000\n"))
			return err
		}, "pods.csv:2: cpu_milli: 9223372036854775807 is more than 1099511627776; accepted values are 0..1099511627776"},
		{"more nodes than a cluster has", func() error { _, err := LoadNodes(writeFile(t, "nodes.csv", manyNodes.String())); return err },
			"nodes.csv:5002: more than 5000 nodes; accepted are 1..5000, the largest cluster Kubernetes supports"},
		{"a file without end", func() error {
			_, err := readPods(io.MultiReader(strings.NewReader(podHeader), endless('a')), "pods.csv")
			return err
		}, "pods.csv: larger than the 67108864-byte (64 MiB) limit on trace files"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.read(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
