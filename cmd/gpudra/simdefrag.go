package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/sim"
)

func newSimDefragCommand() *cobra.Command {
	e := sim.DefragExperiment{Nodes: 16, Steps: 60, LargeEvery: 4, MaxEvictions: 16}
	var seeds []uint
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "Measure defragmentation: a fill–drain–refill run with and without moves",
		Long: `defrag fills a cluster of 8-GPU nodes with small pods (shares of a quarter and a half GPU,
1, 2 and 4 GPUs) that end at random, while small pods keep arriving and, every
--large-every steps, a job of 8 GPUs that needs a whole node. Large jobs wait in arrival
order. The same arrivals are replayed twice: placement only (the fullest node that the
allocator takes a pod on), and with defragmentation (when the first waiting large job does
not fit, gpudra's planner frees 8 GPUs on one node by moving at most --max-evictions small
pods, each placed again by the allocator). It prints a Markdown table: the mean share of
GPUs allocated, the large jobs started and their mean wait (a job still waiting counts to
the end), small pods refused, and the pods moved per freed GPU.`,
		Example: `  gpudra sim defrag --seeds=1,2,3,4,5`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(seeds) == 0 {
				return fmt.Errorf("--seeds: give at least one seed")
			}
			var rows []sim.DefragRow
			for _, s := range seeds {
				e.Seed = uint64(s)
				r, err := e.Run(cmd.Context())
				if err != nil {
					return err
				}
				rows = append(rows, r...)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), sim.FormatDefragTable(rows))
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&e.Nodes, "nodes", e.Nodes, "8-GPU nodes (at least 2)")
	f.IntVar(&e.Steps, "steps", e.Steps, "steps after the fill (at least 2); small pods run 1 to steps/2 steps")
	f.IntVar(&e.LargeEvery, "large-every", e.LargeEvery, "an 8-GPU job arrives every this many steps")
	f.IntVar(&e.MaxEvictions, "max-evictions", e.MaxEvictions, "pods one plan may move")
	f.UintSliceVar(&seeds, "seeds", []uint{1}, "random seeds, one run of each mode per seed")
	return cmd
}
