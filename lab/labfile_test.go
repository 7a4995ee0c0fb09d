package lab

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestDefaultFileHasMixedProfilesAndTopology(t *testing.T) {
	f, err := DefaultFile()
	if err != nil {
		t.Fatal(err)
	}
	nodes := f.Nodes()
	if len(nodes) != 9 {
		t.Fatalf("default lab has %d nodes, want 8 simulated and 1 real", len(nodes))
	}
	perProfile := map[string]int{}
	real := 0
	for _, n := range nodes {
		if n.Real {
			real++
		}
		perProfile[n.Profile]++
		l := n.Labels()
		for _, k := range []string{api.LabelBlock, api.LabelRack, api.LabelToR, LabelHostname} {
			if l[k] == "" {
				t.Errorf("node %s lacks label %s", n.Name, k)
			}
		}
		if n.Resources.CPU == "" || n.Resources.Memory == "" || n.Resources.Pods == 0 {
			t.Errorf("node %s has incomplete resources %+v", n.Name, n.Resources)
		}
	}
	for _, p := range []string{"dgx-h100", "dgx-v100", "l40s-pcie"} {
		if perProfile[p] < 2 {
			t.Errorf("profile %s appears %d times, want at least 2", p, perProfile[p])
		}
	}
	if !f.Kueue.Enabled {
		t.Error("default lab should run Kueue")
	}
	if real != 1 {
		t.Errorf("default lab has %d real nodes, want 1 (the demo shows a real container)", real)
	}
}

func TestParseFileRejects(t *testing.T) {
	const head = "apiVersion: lab.gpudra.dev/v1alpha1\nkind: Lab\n"
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown field with its path", head + "blocks:\n- name: a\n  racks:\n  - name: r\n    nodez: []\n", `unknown field "blocks[0].racks[0].nodez"`},
		{"duplicate field", head + "kind: Lab\nblocks: []\n", `key "kind" already set`},
		{"wrong kind", "apiVersion: lab.gpudra.dev/v1alpha1\nkind: Cluster\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: dgx-h100}]}]}]\n", `kind: Unsupported value: "Cluster"`},
		{"unknown scheduler", "apiVersion: lab.gpudra.dev/v1alpha1\nkind: Lab\nscheduler: volcano\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: dgx-h100}]}]}]\n", `scheduler: Unsupported value: "volcano": supported values: "kube-scheduler", "gpudra-scheduler"`},
		{"unknown install", "apiVersion: lab.gpudra.dev/v1alpha1\nkind: Lab\ninstall: kustomize\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: dgx-h100}]}]}]\n", `install: Unsupported value: "kustomize": supported values: "processes", "chart"`},
		{"no blocks", head, "blocks: Required value"},
		{"missing profile", head + "blocks: [{name: a, racks: [{name: r, nodes: [{name: n1}]}]}]\n", "blocks[0].racks[0].nodes[0].profile: Required value"},
		{"duplicate node", head + "blocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}, {name: n1, profile: p}]}]}]\n", `blocks[0].racks[0].nodes[1].name: Duplicate value: "n1"`},
		{"bad name", head + "blocks: [{name: A_1, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n", `blocks[0].name: Invalid value: "A_1"`},
		{"bad ToR oversubscription", head + "blocks: [{name: a, racks: [{name: r, oversubscription: lots, nodes: [{name: n1, profile: p}]}]}]\n",
			`blocks[0].racks[0].oversubscription: Invalid value: "lots": oversubscription "lots": accepted values are a ratio of downlink to uplink bandwidth`},
		{"bad spine oversubscription", head + "blocks: [{name: a, oversubscription: \"1:0\", racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`blocks[0].oversubscription: Invalid value: "1:0"`},
		{"bad node ToR", head + "blocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p, tor: T_1}]}]}]\n", `blocks[0].racks[0].nodes[0].tor: Invalid value: "T_1"`},
		{"bad quantity", head + "blocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p, memory: lots}]}]}]\n", `blocks[0].racks[0].nodes[0].memory: Invalid value: "lots"`},
		{"wrong type", head + "nodeDefaults: {pods: many}\nblocks: []\n", "pods"},
		{"too many controller replicas", head + "kueue: {enabled: true}\ncontroller: {replicas: 4}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n", "controller.replicas: Invalid value: 4: must be 1 to 3"},
		{"negative controller replicas", head + "kueue: {enabled: true}\ncontroller: {replicas: -1}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n", "controller.replicas: Invalid value: -1: must be 1 to 3"},
		{"controller replicas without Kueue", head + "controller: {replicas: 2}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n", "controller.replicas: Invalid value: 2: needs kueue.enabled: true"},
		{"pods-ready timeout not a duration", head + "kueue: {enabled: true, podsReadyTimeout: \"45\"}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.podsReadyTimeout: Invalid value: "45": must be a Go duration from 30s to 1h0m0s`},
		{"pods-ready timeout too short", head + "kueue: {enabled: true, podsReadyTimeout: 5s}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.podsReadyTimeout: Invalid value: "5s": must be a Go duration from 30s to 1h0m0s`},
		{"pods-ready timeout too long", head + "kueue: {enabled: true, podsReadyTimeout: 2h}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.podsReadyTimeout: Invalid value: "2h": must be a Go duration from 30s to 1h0m0s`},
		{"pods-ready timeout without Kueue", head + "kueue: {podsReadyTimeout: 1m}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.podsReadyTimeout: Invalid value: "1m": needs kueue.enabled: true`},
		{"unknown job kind", head + "kueue: {enabled: true, jobKinds: [jobset, mpijob]}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.jobKinds[1]: Unsupported value: "mpijob": supported values: "jobset", "pytorchjob", "tfjob", "trainjob"`},
		{"trainjob without jobset", head + "kueue: {enabled: true, jobKinds: [pytorchjob, trainjob]}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.jobKinds[1]: Invalid value: "trainjob": needs "jobset" in kueue.jobKinds too (a TrainJob runs as a JobSet); accepted values: jobset, pytorchjob, tfjob, trainjob`},
		{"job kind twice", head + "kueue: {enabled: true, jobKinds: [jobset, jobset]}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.jobKinds[1]: Duplicate value: "jobset"`},
		{"job kind without Kueue", head + "kueue: {jobKinds: [jobset]}\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`kueue.jobKinds[0]: Invalid value: "jobset": needs kueue.enabled: true`},
		{"unknown CRDs", head + "crds: [fluid, volcano]\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`crds[1]: Unsupported value: "volcano": supported values: "fluid"`},
		{"CRDs twice", head + "crds: [fluid, fluid]\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n",
			`crds[1]: Duplicate value: "fluid"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestNodesInheritDefaults(t *testing.T) {
	f, err := ParseFile([]byte(`apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
nodeDefaults: {cpu: "8"}
blocks:
- name: b
  racks:
  - name: r
    nodes: [{name: n1, profile: dgx-h100, memory: 1Gi}]
`))
	if err != nil {
		t.Fatal(err)
	}
	n := f.Nodes()[0]
	want := Node{Name: "n1", Profile: "dgx-h100", Block: "b", Rack: "r", ToR: "tor-r",
		Resources: NodeResources{CPU: "8", Memory: "1Gi", Pods: 110}}
	if n != want {
		t.Fatalf("got %+v, want %+v", n, want)
	}
}

func TestControllerReplicas(t *testing.T) {
	def, err := DefaultFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := def.controllerReplicas(); got != 1 {
		t.Errorf("default lab runs %d controller replicas, want 1", got)
	}
	e2e, err := LoadFile(filepath.Join("..", "deployments", "lab", "e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Two, as the chart installs it: the end-to-end tests fail the leader over.
	if got := e2e.controllerReplicas(); got != 2 {
		t.Errorf("e2e lab runs %d controller replicas, want 2", got)
	}
	// The JobSet tests need the JobSet controller.
	if !e2e.Kueue.runsJobSet() {
		t.Error("e2e lab does not run the JobSet controller")
	}
	if def.Kueue.runsJobSet() {
		t.Error("the default lab runs the JobSet controller: it builds a component few labs need")
	}
	// TestTrainJobWorkersInOneRack needs Trainer; the default lab does not build it.
	if !e2e.Kueue.runsTrainer() {
		t.Error("e2e lab does not run Kubeflow Trainer")
	}
	if def.Kueue.runsTrainer() {
		t.Error("the default lab runs Kubeflow Trainer: it builds a component few labs need")
	}
	off, err := ParseFile([]byte("apiVersion: lab.gpudra.dev/v1alpha1\nkind: Lab\nblocks: [{name: a, racks: [{name: r, nodes: [{name: n1, profile: p}]}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := off.controllerReplicas(); got != 0 {
		t.Errorf("a lab without Kueue runs %d controller replicas, want none", got)
	}
}

// TestE2ETrainingBlockHasTwoToRsInARack: the end-to-end lab's training block is eight
// A100 4-GPU hosts; rack-t1 is behind one ToR oversubscribed 3:1, rack-t2 behind two
// non-blocking ToRs, as its tests of the ToR rule expect.
func TestE2ETrainingBlockHasTwoToRsInARack(t *testing.T) {
	f, err := LoadFile(filepath.Join("..", "deployments", "lab", "e2e.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tors := map[string][]string{}
	for _, n := range f.Nodes() {
		if n.Block != "block-t" {
			continue
		}
		if n.Profile != "hgx-a100-4gpu" {
			t.Errorf("%s: profile %s, want hgx-a100-4gpu", n.Name, n.Profile)
		}
		l := n.Labels()
		key := n.Rack + "/" + l[api.LabelToR] + " " + l[api.LabelToROversubscription]
		tors[key] = append(tors[key], n.Name)
	}
	want := map[string][]string{
		"rack-t1/tor-t1 3": {"t1-n1", "t1-n2", "t1-n3", "t1-n4"},
		"rack-t2/tor-t2a ": {"t2-n1", "t2-n2"},
		"rack-t2/tor-t2b ": {"t2-n3", "t2-n4"},
	}
	if fmt.Sprint(tors) != fmt.Sprint(want) {
		t.Errorf("training block ToRs %v, want %v", tors, want)
	}
}

// A node with a simulated AMD profile only runs its plugin without NVML; a node with both
// runs both, and is selected by its AMD profile.
func TestAMDNodesPluginFlags(t *testing.T) {
	f, err := ParseFile([]byte(`apiVersion: lab.gpudra.dev/v1alpha1
kind: Lab
blocks:
- name: b
  racks:
  - name: r
    nodes: [{name: amd, kfd: mi300x-8}, {name: both, profile: l40s-1, kfd: mixed-l40s-mi210}, {name: nv, profile: dgx-h100}]
`))
	if err != nil {
		t.Fatal(err)
	}
	u := &upper{layout: Layout{Root: t.TempDir()}, ports: map[string]int{"metrics-amd": 1, "metrics-both": 2, "metrics-nv": 3}}
	for _, n := range f.Nodes() {
		argv := strings.Join(u.pluginArgv("plugin", n, "kc"), " ")
		want := map[string][]string{
			"amd":  {"--nvml=none", "--kfd=sim:mi300x-8"},
			"both": {"--nvml=sim:l40s-1", "--kfd=sim:mixed-l40s-mi210"},
			"nv":   {"--nvml=sim:dgx-h100"},
		}[n.Name]
		for _, w := range want {
			if !strings.Contains(argv, w) {
				t.Errorf("%s: plugin %s lacks %s", n.Name, argv, w)
			}
		}
		if n.Name == "nv" && strings.Contains(argv, "--kfd") {
			t.Errorf("nv: plugin %s reads KFD", argv)
		}
		if got := map[string]string{"amd": "mi300x-8", "both": "mixed-l40s-mi210", "nv": "dgx-h100"}[n.Name]; n.ProfileLabel() != got {
			t.Errorf("%s: profile label %q, want %q", n.Name, n.ProfileLabel(), got)
		}
	}
}
