package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/topology/placement"
)

// traceDir writes a node list and a pod list named trace.
func traceDir(t *testing.T, nodes, pods string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{placement.NodeListFile: nodes, placement.PodListFile("trace"): pods} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runSim(t *testing.T, dir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newSimCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage = true
	cmd.SetArgs(append([]string{"--trace-dir", dir, "--traces", "trace", "--out", t.TempDir(), "--modes", "none", "--parallel", "1"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

const (
	nodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n"
	podHeader  = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
	gpuNodes   = nodeHeader + "openb-node-0000,64000,262144,2,T4\nopenb-node-0001,64000,262144,2,T4\n"
	somePods   = podHeader + "a,1000,10,1,500\nb,2000,10,1,1000\nc,1000,10,0,0\n"
)

func TestSimRefusesBadInput(t *testing.T) {
	manySeeds := make([]string, 101)
	for k := range manySeeds {
		manySeeds[k] = strconv.Itoa(k)
	}
	cases := []struct {
		name  string
		nodes string
		pods  string
		args  []string
		want  string
	}{
		{"a pod list of only its header", gpuNodes, podHeader, nil, "openb_pod_list_trace.csv: no pods after the header"},
		{"a node with a billion GPUs", nodeHeader + "openb-node-0000,64000,262144,1000000000,T4\n", somePods, nil,
			"openb_node_list_gpu_node.csv:2: gpu: 1000000000 is more than 32; accepted values are 0..32"},
		{"too many seeds", gpuNodes, somePods, []string{"--seeds", strings.Join(manySeeds, ",")}, "--seeds: 101 seeds; accepted are 1..100"},
		{"a seed twice", gpuNodes, somePods, []string{"--seeds", "42,43,42"}, "--seeds: 42 is given twice"},
		{"no replays at once", gpuNodes, somePods, []string{"--parallel", "0"}, "--parallel: 0; accepted are 1.."},
		{"more replays at once than CPUs", gpuNodes, somePods, []string{"--parallel", "100000"}, "--parallel: 100000; accepted are 1.."},
		{"an unknown policy", gpuNodes, somePods, []string{"--policies", "fgd,worst"}, `--policies: unknown policy "worst": known policies are`},
		{"a policy twice", gpuNodes, somePods, []string{"--policies", "FGD,fgd"}, "--policies: FGD is given twice"},
		{"an unknown mode", gpuNodes, somePods, []string{"--modes", "fast"}, `--modes: "fast": accepted values are reproduction, dra, none`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runSim(t, traceDir(t, c.nodes, c.pods), c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestSimTakesPolicyNamesInAnyCase(t *testing.T) {
	stdout, _, err := runSim(t, traceDir(t, gpuNodes, somePods), "--policies", "fgd,BESTFIT", "--seeds", "42", "--modes", "NONE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "| trace | mode | BestFit | FGD |") {
		t.Errorf("table does not name the policies as BestFit and FGD:\n%s", stdout)
	}
}

func TestSimWithoutGPUsPrintsNA(t *testing.T) {
	stdout, stderr, err := runSim(t, traceDir(t, nodeHeader+"openb-node-0000,64000,262144,0,\n", somePods), "--policies", "FGD", "--seeds", "42")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout+stderr, "NaN") {
		t.Errorf("output shows NaN:\n%s\n%s", stderr, stdout)
	}
	if !strings.Contains(stderr, "n/a % at 130 %") || !strings.Contains(stdout, "| trace | none | n/a |") {
		t.Errorf("output does not say n/a for the allocation ratio:\n%s\n%s", stderr, stdout)
	}
}
