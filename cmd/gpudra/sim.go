package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/data/traces"
	"github.com/gpudra/gpudra/sim"
	"github.com/gpudra/gpudra/sim/reproduction"
)

func newSimCommand() *cobra.Command {
	var (
		e          sim.Experiment
		dir        string
		traceNames string
		modes      string
		policies   string
		seeds      []int64
		out        string
		profile    string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Replay the Alibaba GPU traces through placement policies with the real DRA allocator",
		Long: `sim replays a cluster and a pod trace the way the FGD paper's evaluation does (random
arrival order per seed, demand inflated to 130 % of GPU capacity, no departures) and
reports the GPU allocation ratio against arrived demand, beside an upper bound: the most
GPU demand any placement of the same arrivals could hold (GPU capacity per model, CPU and
memory, each relaxed; see docs/placement.md). Each node is a gpudra inventory
rendered into ResourceSlices, each GPU pod a ResourceClaim; the policy chooses the node
and the structured allocator confirms every placement. In reproduction mode the claim
pins the GPUs the paper's simulator would choose; in dra mode the allocator chooses them,
as in a real cluster. Mode none skips the allocator (the policy's own accounting only).`,
		Example: `  gpudra sim --traces=default --policies=FGD --seeds=42
  gpudra sim --traces=default,cpu050 --modes=reproduction,dra --out=sim-out`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			where := "the embedded Alibaba traces"
			e.Files = traces.AlibabaGPU2023()
			if dir != "" {
				where, e.Files = "--trace-dir "+dir, os.DirFS(dir)
			}
			if e.Traces, err = pickTraces(e.Files, where, traceNames); err != nil {
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
			e.UpperBound = true
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
			// Each replay's result is appended to runs.csv as it ends, so that an interrupted
			// run keeps what it did.
			log, err := os.Create(filepath.Join(out, "runs.csv"))
			if err != nil {
				return err
			}
			defer log.Close()
			fmt.Fprintln(log, "trace,mode,policy,seed,at130,placed,failed,allocator_refused,moved,wall_s")
			w := cmd.ErrOrStderr()
			total := len(e.Traces) * len(e.Modes) * len(e.Policies) * len(e.Seeds)
			start, done := time.Now(), 0
			runs, err := sim.Execute(cmd.Context(), e, func(r sim.Run) {
				done++
				elapsed := time.Since(start)
				left := time.Duration(float64(elapsed) / float64(done) * float64(total-done))
				fmt.Fprintf(w, "[%d/%d, %s, ~%s left] %-10s %-12s %-14s seed %d: %6s %% at 130 %% (placed %d, failed %d, allocator refused %d) in %.1fs\n",
					done, total, elapsed.Round(time.Second), left.Round(time.Second),
					r.Trace, r.Mode, r.Policy, r.Seed, sim.Percent(r.Curve.At130()), r.Placed, r.Failed, r.Refused, r.Wall.Seconds())
				fmt.Fprintf(log, "%s,%s,%s,%d,%s,%d,%d,%d,%d,%.1f\n", r.Trace, r.Mode, r.Policy, r.Seed, sim.Percent(r.Curve.At130()),
					r.Placed, r.Failed, r.Refused, r.Moved, r.Wall.Seconds())
			})
			if err != nil {
				return fmt.Errorf("%w (the replays that ended are in %s)", err, log.Name())
			}
			for _, r := range runs {
				if r.Policy == reproduction.UpperBoundName {
					fmt.Fprintf(log, "%s,%s,%s,%d,%s,,,,,%.1f\n", r.Trace, r.Mode, r.Policy, r.Seed, sim.Percent(r.Curve.At130()), r.Wall.Seconds())
				}
			}
			rows := sim.Summarize(runs)
			return writeReports(out, runs, rows, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "trace-dir", "", "directory with openb_node_list_gpu_node.csv and openb_pod_list_<trace>.csv (default: the Alibaba cluster-trace-gpu-v2023 files built into gpudra, data/traces/alibaba-gpu-v2023)")
	f.StringVar(&traceNames, "traces", "default", `comma-separated trace names (openb_pod_list_<name>.csv), or "all"`)
	f.StringVar(&modes, "modes", string(sim.Reproduction), "comma-separated modes, in any case: reproduction (paper's GPU choice pinned, checked by the allocator), dra (allocator chooses), none (no allocator)")
	f.StringVar(&policies, "policies", "all", `comma-separated policies in any case, or "all": `+strings.Join(reproduction.PolicyNames, ", "))
	f.Int64SliceVar(&seeds, "seeds", reproduction.Seeds, fmt.Sprintf("1..%d distinct random seeds (the paper's are 42-51)", maxSeeds))
	f.IntVar(&e.Parallel, "parallel", max(1, runtime.NumCPU()/2), fmt.Sprintf("replays run at once, 1..%d (the CPUs)", runtime.NumCPU()))
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile to this file")
	cmd.AddCommand(newSimDefragCommand())
	f.StringVar(&out, "out", "sim-out", "output directory for runs.csv (each replay as it ends), table.csv, table.md, curves.csv and one SVG per trace and mode")
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
		return reproduction.PolicyNames, nil
	}
	var out []string
	for _, p := range split(policies) {
		name, err := reproduction.PolicyName(p)
		if err != nil {
			return nil, fmt.Errorf("--policies: %w", err)
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("--policies: %s is given twice; each policy once", name)
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf(`--policies: empty; give "all" or some of %s`, strings.Join(reproduction.PolicyNames, ", "))
	}
	return out, nil
}

// pickTraces checks the --traces names against the pod lists of files (where says what
// files is, for errors).
func pickTraces(files fs.FS, where, traces string) ([]string, error) {
	have, err := reproduction.TracesIn(files)
	if err != nil {
		return nil, err
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("%s: no %s files", where, reproduction.PodListFile("*"))
	}
	if traces == "all" {
		return have, nil
	}
	want := split(traces)
	for k, t := range want {
		if !contains(have, t) {
			return nil, fmt.Errorf("--traces: %q not in %s: accepted values are %s", t, where, strings.Join(have, ", "))
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
		of := fmt.Sprintf("mean of %d seeds", g[0].Seeds)
		if g[0].Seeds == 1 {
			of = "one seed"
		}
		title := fmt.Sprintf("%s trace, %s mode: GPU allocation vs arrived demand (%s)", g[0].Trace, g[0].Mode, of)
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
