package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/topology/placement"
	"github.com/gpudra/gpudra/topology/placement/sim"
)

func newSimCommand() *cobra.Command {
	var (
		e        sim.Experiment
		traces   string
		modes    string
		policies string
		seeds    []int64
		out      string
		profile  string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Replay the Alibaba GPU traces through placement policies with the real DRA allocator",
		Long: `sim replays a cluster and a pod trace the way the FGD paper's evaluation does (random
arrival order per seed, demand inflated to 130 % of GPU capacity, no departures) and
reports the GPU allocation ratio against arrived demand. Each node is a gpudra inventory
rendered into ResourceSlices, each GPU pod a ResourceClaim; the policy chooses the node
and the structured allocator confirms every placement. In reproduction mode the claim
pins the GPUs the paper's simulator would choose; in dra mode the allocator chooses them,
as in a real cluster. Mode none skips the allocator (the policy's own accounting only).`,
		Example: `  gpudra sim --traces=default --policies=FGD --seeds=42
  gpudra sim --traces=default,cpu050 --modes=reproduction,dra --out=sim-out`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if e.Traces, err = pickTraces(e.Dir, traces); err != nil {
				return err
			}
			if e.Modes, err = pickModes(modes); err != nil {
				return err
			}
			if e.Policies, err = pickPolicies(policies); err != nil {
				return err
			}
			if len(seeds) < 1 || len(seeds) > maxSeeds {
				return fmt.Errorf("--seeds: %d seeds; accepted are 1..%d", len(seeds), maxSeeds)
			}
			for k, s := range seeds {
				if slices.Contains(seeds[:k], s) {
					return fmt.Errorf("--seeds: %d is given twice; each seed once", s)
				}
			}
			e.Seeds = seeds
			if e.Parallel < 1 || e.Parallel > runtime.NumCPU() {
				return fmt.Errorf("--parallel: %d; accepted are 1..%d (the CPUs: each replay runs on one and holds its own copy of the cluster)", e.Parallel, runtime.NumCPU())
			}
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			w := cmd.ErrOrStderr()
			runs, err := sim.Execute(cmd.Context(), e, func(r sim.Run) {
				fmt.Fprintf(w, "%-10s %-12s %-14s seed %d: %6s %% at 130 %% (placed %d, failed %d, allocator refused %d) in %.1fs\n",
					r.Trace, r.Mode, r.Policy, r.Seed, sim.Percent(r.Curve.At130()), r.Placed, r.Failed, r.Refused, r.Wall.Seconds())
			})
			if err != nil {
				return err
			}
			rows := sim.Summarize(runs)
			return writeReports(out, runs, rows, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&e.Dir, "trace-dir", filepath.Join("..", "shared", "traces", "alibaba-gpu-v2023"), "directory with openb_node_list_gpu_node.csv and openb_pod_list_<trace>.csv")
	f.StringVar(&traces, "traces", "default", `comma-separated trace names (openb_pod_list_<name>.csv), or "all"`)
	f.StringVar(&modes, "modes", string(sim.Reproduction), "comma-separated modes, in any case: reproduction (paper's GPU choice pinned, checked by the allocator), dra (allocator chooses), none (no allocator)")
	f.StringVar(&policies, "policies", "all", `comma-separated policies in any case, or "all": `+strings.Join(placement.PolicyNames, ", "))
	f.Int64SliceVar(&seeds, "seeds", placement.Seeds, fmt.Sprintf("1..%d distinct random seeds (the paper's are 42-51)", maxSeeds))
	f.IntVar(&e.Parallel, "parallel", max(1, runtime.NumCPU()/2), fmt.Sprintf("replays run at once, 1..%d (the CPUs)", runtime.NumCPU()))
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile to this file")
	f.StringVar(&out, "out", "sim-out", "output directory for table.csv, table.md, curves.csv and one SVG per trace and mode")
	return cmd
}

// maxSeeds bounds --seeds: every seed is a replay of each trace, mode and policy.
const maxSeeds = 100

var simModes = []sim.Mode{sim.Reproduction, sim.DRA, sim.NoAllocator}

func pickModes(modes string) ([]sim.Mode, error) {
	var out []sim.Mode
	for _, m := range split(modes) {
		k := slices.IndexFunc(simModes, func(v sim.Mode) bool { return strings.EqualFold(string(v), m) })
		if k < 0 {
			return nil, fmt.Errorf("--modes: %q: accepted values are %s, %s, %s (in any case)", m, sim.Reproduction, sim.DRA, sim.NoAllocator)
		}
		if slices.Contains(out, simModes[k]) {
			return nil, fmt.Errorf("--modes: %s is given twice; each mode once", simModes[k])
		}
		out = append(out, simModes[k])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--modes: empty; accepted values are %s, %s, %s", sim.Reproduction, sim.DRA, sim.NoAllocator)
	}
	return out, nil
}

func pickPolicies(policies string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(policies), "all") {
		return placement.PolicyNames, nil
	}
	var out []string
	for _, p := range split(policies) {
		name, err := placement.PolicyName(p)
		if err != nil {
			return nil, fmt.Errorf("--policies: %w", err)
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("--policies: %s is given twice; each policy once", name)
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf(`--policies: empty; give "all" or some of %s`, strings.Join(placement.PolicyNames, ", "))
	}
	return out, nil
}

func pickTraces(dir, traces string) ([]string, error) {
	have, err := placement.Traces(dir)
	if err != nil {
		return nil, err
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("--trace-dir %s: no %s files", dir, placement.PodListFile("*"))
	}
	if traces == "all" {
		return have, nil
	}
	want := split(traces)
	for k, t := range want {
		if !contains(have, t) {
			return nil, fmt.Errorf("--traces: %q not in %s: accepted values are %s", t, dir, strings.Join(have, ", "))
		}
		if slices.Contains(want[:k], t) {
			return nil, fmt.Errorf("--traces: %s is given twice; each trace once", t)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf(`--traces: empty; give "all" or some of %s`, strings.Join(have, ", "))
	}
	return want, nil
}

func writeReports(dir string, runs []sim.Run, rows []sim.Row, stdout interface{ Write([]byte) (int, error) }) error {
	var table, curves, md bytes.Buffer
	if err := sim.WriteTable(&table, rows); err != nil {
		return err
	}
	if err := sim.WriteCurves(&curves, runs, rows); err != nil {
		return err
	}
	sim.WriteMarkdown(&md, rows)
	files := map[string][]byte{"table.csv": table.Bytes(), "curves.csv": curves.Bytes(), "table.md": md.Bytes()}
	groups := map[string][]sim.Row{}
	var order []string
	for _, r := range rows {
		k := r.Trace + "-" + string(r.Mode)
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		var svg bytes.Buffer
		g := groups[k]
		title := fmt.Sprintf("%s trace, %s mode: GPU allocation vs arrived demand (mean of %d seeds)", g[0].Trace, g[0].Mode, g[0].Seeds)
		if err := sim.WriteSVG(&svg, title, g); err != nil {
			return err
		}
		files[k+".svg"] = svg.Bytes()
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	_, err := stdout.Write(md.Bytes())
	return err
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
