package reproduction

import (
	"bytes"
	"encoding/csv"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/topology"

	"github.com/gpudra/gpudra/topology/placement"
)

// addCSVSeeds adds the first lines of the e2e replay's file and a few hand-made lists.
func addCSVSeeds(f *testing.F, file string, extra ...string) {
	f.Helper()
	data, err := os.ReadFile("../../test/e2e/testdata/replay/" + file)
	if err != nil {
		f.Fatal(err)
	}
	lines := strings.SplitAfterN(string(data), "\n", 40)
	f.Add([]byte(strings.Join(lines[:len(lines)-1], "")))
	for _, e := range extra {
		f.Add([]byte(e))
	}
}

// FuzzReadPods reads any pod list: an error, or pods whose demand a ResourceClaim can
// say, which written back as CSV read the same.
func FuzzReadPods(f *testing.F) {
	addCSVSeeds(f, "pods.csv",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1000,10,1,460,T4|P100\nb,0,0,0,0,\nc,1,1,8,1000,\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\"a\nb\",1,1,1,10\n",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1,1,1,500,|\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := readPods(bytes.NewReader(data), "pods.csv")
		if err != nil {
			return
		}
		if len(pods) == 0 {
			t.Fatal("no pods and no error")
		}
		var b bytes.Buffer
		w := csv.NewWriter(&b)
		w.Write([]string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"})
		for _, p := range pods {
			switch {
			case p.Name == "" || p.CPU < 0 || p.Memory < 0 || p.GPUs < 0 || p.GPUs > topology.MaxGPUs:
				t.Fatalf("pod %+v: out of range", p)
			case p.GPUs == 0 && p.GPUMilli != 0, p.GPUs > 0 && (p.GPUMilli <= 0 || p.GPUMilli > placement.MilliPerGPU || p.GPUMilli%10 != 0),
				p.GPUs > 1 && p.GPUMilli != placement.MilliPerGPU:
				t.Fatalf("pod %+v: a demand no claim can say", p)
			}
			for _, m := range p.Models {
				if _, err := placement.ModelByCode(m); err != nil {
					t.Fatalf("pod %+v: %v", p, err)
				}
			}
			w.Write([]string{p.Name, strconv.FormatInt(p.CPU, 10), strconv.FormatInt(p.Memory, 10), strconv.Itoa(p.GPUs),
				strconv.FormatInt(p.GPUMilli, 10), strings.Join(p.Models, "|")})
		}
		w.Flush()
		again, err := readPods(&b, "again.csv")
		if err != nil {
			t.Fatalf("pods written back do not read: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(again, pods) {
			t.Fatalf("pods written back read\n%+v\nwant\n%+v", again, pods)
		}
	})
}

// FuzzReadNodes reads any node list: an error, or nodes of known models with a bounded
// number of GPUs, which written back as CSV read the same.
func FuzzReadNodes(f *testing.F) {
	addCSVSeeds(f, "nodes.csv",
		"sn,cpu_milli,memory_mib,gpu,model\n",
		"sn,cpu_milli,memory_mib,gpu,model\nn0,1000,10,0,\nn1,1,1,32,A10\n",
		"sn,cpu_milli,memory_mib,gpu,model,extra\nn0,1000,10,2,T4,x\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, err := readNodes(bytes.NewReader(data), "nodes.csv")
		if err != nil {
			return
		}
		if len(nodes) == 0 || len(nodes) > MaxNodes {
			t.Fatalf("%d nodes and no error", len(nodes))
		}
		var b bytes.Buffer
		w := csv.NewWriter(&b)
		w.Write([]string{"sn", "cpu_milli", "memory_mib", "gpu", "model"})
		for _, n := range nodes {
			if n.Name == "" || n.CPU < 0 || n.Memory < 0 || n.GPUs < 0 || n.GPUs > topology.MaxGPUs {
				t.Fatalf("node %+v: out of range", n)
			}
			if n.GPUs > 0 || n.Model != "" {
				if _, err := placement.ModelByCode(n.Model); err != nil {
					t.Fatalf("node %+v: %v", n, err)
				}
			}
			w.Write([]string{n.Name, strconv.FormatInt(n.CPU, 10), strconv.FormatInt(n.Memory, 10), strconv.Itoa(n.GPUs), n.Model})
		}
		w.Flush()
		again, err := readNodes(&b, "again.csv")
		if err != nil {
			t.Fatalf("nodes written back do not read: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(again, nodes) {
			t.Fatalf("nodes written back read\n%+v\nwant\n%+v", again, nodes)
		}
	})
}
